#!/usr/bin/python3
"""Output file names and the spec's bindings, on small ONNX models built here, against onnxruntime.

  --case output_names   outputs named `a/b`, `a:b`, `a_b`, `.hidden`, `50%` and one of 300 bytes
                        (x * 1 ... x * 6): colossal-run writes six files (docs/cli.md "Output
                        files": a%2Fb.npy, a%3Ab.npy, a_b.npy, %2Ehidden.npy, 50%25.npy and a
                        shortened name with a hash), prints "output 'NAME' -> FILE" for each, and
                        each file holds onnxruntime's value of its output.
  --case initializer_inputs
                        a model exported with keep_initializers_as_inputs: initializers `shape`
                        (Reshape's target) and `bias` are also graph inputs. The spec's `values:`
                        binds both; the result equals onnxruntime's on the same graph with the two
                        as plain inputs, fed the same values.
  --case dim_params     input_ids [batch, seq] and attention_mask [batch, seq]; the spec binds only
                        input_ids [2, 5]; attention_mask gets [2, 5] too, and the outputs equal
                        onnxruntime's. A spec giving `seq` two sizes is an error naming both inputs.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed (its message is printed).
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
LONG = "n" * 290 + "/x:y"  # 294 bytes; escaped 298: past the 255-byte file name limit


def save(graph, path, ir=8):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def compile_and_run(args, model, spec_text, inputs, name):
    spec = os.path.join(args.workdir, name + ".yaml")
    with open(spec, "w") as f:
        f.write(spec_text)
    plan = os.path.join(args.workdir, name + ".cplan")
    u.compile_plan(args.opt, model, spec, plan)
    out = os.path.join(args.workdir, name + "_colossal")
    shutil.rmtree(out, ignore_errors=True)
    stdout, _, _ = u.run([args.run, plan] + u.input_args(inputs) + ["--output-dir", out, "--threads", "1"],
                         "colossal-run")
    return out, stdout


def write_inputs(args, arrays):
    files = {}
    for n, a in arrays.items():
        files[n] = os.path.join(args.workdir, n + ".npy")
        np.save(files[n], a)
    return files


def case_output_names(args):
    names = ["a/b", "a:b", "a_b", ".hidden", "50%", LONG]
    nodes = [helper.make_node("Constant", [], [f"k{i}"], value=numpy_helper.from_array(np.float32(i + 1)))
             for i in range(len(names))]
    nodes += [helper.make_node("Mul", ["x", f"k{i}"], [n]) for i, n in enumerate(names)]
    g = helper.make_graph(nodes, "names", [helper.make_tensor_value_info("x", F, [2, 3])],
                          [helper.make_tensor_value_info(n, F, [2, 3]) for n in names])
    model = save(g, os.path.join(args.workdir, "names.onnx"))
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    inputs = write_inputs(args, {"x": x})
    out, stdout = compile_and_run(args, model, "mode: inference\n", inputs, "names")
    ort = os.path.join(args.workdir, "names_ort")
    u.run_ort(model, inputs, ort)

    ok = True
    want_files = {"a/b": "a%2Fb.npy", "a:b": "a%3Ab.npy", "a_b": "a_b.npy", ".hidden": "%2Ehidden.npy",
                  "50%": "50%25.npy", LONG: u.tensor_file_name(LONG)}
    written = sorted(os.listdir(out))
    print("colossal-run wrote:", written)
    if len(written) != len(names):
        print(f"MISMATCH: {len(names)} outputs, {len(written)} files")
        ok = False
    long_file = want_files[LONG]
    if not (len(long_file) <= 255 and "~" in long_file and long_file.startswith("n" * 200)):
        print(f"MISMATCH: the long name's file is {long_file!r}")
        ok = False
    for name, file in want_files.items():
        line = f"output '{name}' -> {os.path.join(out, file)}"
        if line not in stdout.splitlines():
            print(f"MISMATCH: stdout lacks the line {line!r}")
            ok = False
        if not os.path.isfile(os.path.join(out, file)):
            print(f"MISMATCH: no file {file} for output '{name[:40]}'")
            ok = False
    # Each file against onnxruntime's output of that name (ort_reference.js names files alike) and
    # against the formula x * (i + 1).
    for i, name in enumerate(names):
        f = os.path.join(out, want_files[name])
        if os.path.isfile(f) and not np.array_equal(np.load(f), x * np.float32(i + 1)):
            print(f"MISMATCH: {want_files[name]} holds {np.load(f).tolist()}, want x * {i + 1}")
            ok = False
    ok &= u.compare(u.npy_dir(ort), out, 0.0)
    return ok


def case_initializer_inputs(args):
    # y = Reshape(x, shape) + bias: `shape` and `bias` are initializers listed among the inputs.
    shape0 = numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "shape")
    bias0 = numpy_helper.from_array(np.zeros([4, 3], dtype=np.float32), "bias")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Add", ["r", "bias"], ["y"])]
    g = helper.make_graph(nodes, "kiai",
                          [helper.make_tensor_value_info("x", F, [2, 6]),
                           helper.make_tensor_value_info("shape", I64, [2]),
                           helper.make_tensor_value_info("bias", F, [4, 3])],
                          [helper.make_tensor_value_info("y", F, [4, 3])], initializer=[shape0, bias0])
    model = save(g, os.path.join(args.workdir, "kiai.onnx"))
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    shape = np.array([4, 3], dtype=np.int64)
    bias = (np.arange(12, dtype=np.float32).reshape(4, 3) * 0.5 - 1).astype(np.float32)
    vals = write_inputs(args, {"shape": shape, "bias": bias})
    inputs = write_inputs(args, {"x": x})
    spec = f"mode: inference\nvalues: {{shape: {vals['shape']}, bias: {vals['bias']}}}\n"
    out, _ = compile_and_run(args, model, spec, inputs, "kiai")
    # The reference: the same graph with `shape` and `bias` as plain inputs (onnxruntime-node lists
    # no overridable initializers among its inputs), fed the same values.
    del g.initializer[:]
    ref_model = save(g, os.path.join(args.workdir, "kiai_ref.onnx"))
    ort = os.path.join(args.workdir, "kiai_ort")
    u.run_ort(ref_model, dict(inputs, **vals), ort)
    ok = u.compare(u.npy_dir(ort), out, 1e-6)
    got = np.load(os.path.join(out, "y.npy"))
    if got.shape != (4, 3) or not np.allclose(got, x.reshape(4, 3) + bias):
        print(f"MISMATCH: y is {got.tolist()}, want x.reshape(4, 3) + bias")
        ok = False
    return ok


def case_dim_params(args):
    # y = Cast(input_ids) * attention_mask; s = ReduceSum(attention_mask, axis 1)
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids_f"], to=F),
             helper.make_node("Mul", ["ids_f", "attention_mask"], ["y"]),
             helper.make_node("ReduceSum", ["attention_mask", "one"], ["s"], keepdims=0)]
    g = helper.make_graph(nodes, "dims",
                          [helper.make_tensor_value_info("input_ids", I64, ["batch", "seq"]),
                           helper.make_tensor_value_info("attention_mask", F, ["batch", "seq"])],
                          [helper.make_tensor_value_info("y", F, ["batch", "seq"]),
                           helper.make_tensor_value_info("s", F, ["batch"])],
                          initializer=[numpy_helper.from_array(np.array([1], dtype=np.int64), "one")])
    model = save(g, os.path.join(args.workdir, "dims.onnx"))
    ids = (np.arange(10, dtype=np.int64).reshape(2, 5) * 7) % 11
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=np.float32)
    inputs = write_inputs(args, {"input_ids": ids, "attention_mask": mask})
    out, _ = compile_and_run(args, model, "mode: inference\ninputs: {input_ids: [2, 5]}\n", inputs, "dims")
    ort = os.path.join(args.workdir, "dims_ort")
    u.run_ort(model, inputs, ort)
    ok = u.compare(u.npy_dir(ort), out, 1e-6)

    # One dim_param, two sizes: an error naming both inputs.
    spec = os.path.join(args.workdir, "conflict.yaml")
    with open(spec, "w") as f:
        f.write("mode: inference\ninputs: {input_ids: [2, 5], attention_mask: [2, 6]}\n")
    p = subprocess.run([args.opt, model, "--spec", spec, "-o", os.path.join(args.workdir, "conflict.cplan")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    want = ("dims.onnx: input 'attention_mask': dim 1 ('seq') is bound to 6, but input 'input_ids' binds "
            "'seq' to 5 (one dim_param is one size throughout the graph)")
    if p.returncode != 1 or want not in p.stderr:
        print(f"MISMATCH: conflicting dims gave exit {p.returncode}: {p.stderr.strip()}")
        ok = False
    else:
        print("conflicting dims:", p.stderr.strip())
    return ok


CASES = {"output_names": case_output_names, "initializer_inputs": case_initializer_inputs,
         "dim_params": case_dim_params}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--opt")
    ap.add_argument("--run")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    try:
        args.opt = u.find_tool("colossal-opt", args.opt)
        args.run = u.find_tool("colossal-run", args.run)
        shutil.rmtree(args.workdir, ignore_errors=True)
        os.makedirs(args.workdir)
        ok = CASES[args.case](args)
    except u.ToolError as e:
        print(e)
        return 2
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

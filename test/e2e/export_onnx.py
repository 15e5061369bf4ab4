#!/usr/bin/python3
"""End-to-end check of `colossal-run M.cplan export --onnx OUT.onnx` (docs/training.md).

    export_onnx.py --workdir W [--opt colossal-opt] [--run colossal-run]

1. examples/models/export.py writes a seeded GPT-2 (tied embeddings, static [2, 16]); its weights
   are re-saved as ONNX external data (W/ext/model.onnx + weights.bin), so the export has to
   read and inline them.
2. colossal-opt compiles W/ext/model.onnx (the plan records its absolute path and FNV-1a 64);
   colossal-run runs `forward` on the exported inputs.
3. colossal-run ... export --onnx W/exported.onnx; the result must pass onnx.checker, hold every
   weight inline, with each initializer equal to the source's (an inference plan has no trained
   parameter to replace), and onnxruntime on it must give colossal-run's logits
   (max|err| <= 1e-4 * max|ref|); onnxruntime is itself checked against PyTorch's logits.
4. Errors, each one line naming what is wrong: --onnx naming the source model or its external
   data file, a source model changed after compilation, a source model gone.

Exit 0 pass, 1 mismatch, 2 a tool failed.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402


def expect_failure(cmd, needle):
    """Runs CMD, which must exit 1 with one "error: ..." line containing NEEDLE."""
    print("$ " + " ".join(cmd) + "   # must fail", flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    err = p.stderr.strip()
    ok = p.returncode == 1 and err.startswith("error: ") and needle in err and len(err.splitlines()) == 1
    print(f"  exit {p.returncode}: {err}  {'ok' if ok else 'UNEXPECTED (wanted ' + repr(needle) + ')'}")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--opt", help="colossal-opt binary")
    p.add_argument("--run", help="colossal-run binary")
    p.add_argument("--tol", type=float, default=1e-4)
    args = p.parse_args()
    w = os.path.abspath(args.workdir)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    ok = True
    try:
        opt = u.find_tool("colossal-opt", args.opt)
        run_bin = u.find_tool("colossal-run", args.run)
        model_dir = os.path.join(w, "model")
        out, _, _ = u.run([sys.executable, u.EXPORT_PY, "--arch", "gpt2", "--opset", "17", "--static", "--quiet",
                           "--out", model_dir], "export.py", timeout=600)
        inputs = u.npy_dir(os.path.join(model_dir, "inputs"))
        torch_ref = u.npy_dir(os.path.join(model_dir, "reference"))

        # The source model with every initializer in an external data file.
        ext_dir = os.path.join(w, "ext")
        os.makedirs(ext_dir)
        source = os.path.join(ext_dir, "model.onnx")
        m = onnx.load(os.path.join(model_dir, "model.onnx"))
        onnx.save_model(m, source, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
        n_external = sum(t.data_location == onnx.TensorProto.EXTERNAL for t in onnx.load(source, load_external_data=False).graph.initializer)
        print(f"source model: {len(m.graph.initializer)} initializers, {n_external} as external data")
        if n_external == 0:
            u.die("the source model has no external data: the test would not exercise inlining")

        plan = os.path.join(w, "model.cplan")
        u.compile_plan(opt, source, os.path.join(model_dir, "spec.yaml"), plan)
        colossal_dir = os.path.join(w, "colossal")
        u.run_plan(run_bin, plan, inputs, colossal_dir)

        exported = os.path.join(w, "exported.onnx")
        u.run([run_bin, plan, "export", "--onnx", exported], "colossal-run export")
    except u.ToolError as e:
        u.die(str(e))

    # The exported model: valid, self-contained, the source's weights unchanged.
    e = onnx.load(exported, load_external_data=False)
    onnx.checker.check_model(e)
    src = {t.name: numpy_helper.to_array(t, base_dir=ext_dir) for t in onnx.load(source, load_external_data=False).graph.initializer}
    got = {}
    for t in e.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
            print(f"  initializer {t.name}: still external data  MISMATCH")
            ok = False
        got[t.name] = numpy_helper.to_array(t)
    same = sorted(got) == sorted(src) and all(
        got[k].dtype == src[k].dtype and np.array_equal(got[k], src[k]) for k in src)
    print(f"exported initializers: {len(got)} inline, equal to the source's: {same}")
    ok &= same
    if [n.op_type for n in e.graph.node] != [n.op_type for n in m.graph.node]:
        print("  the exported graph's nodes differ from the source's  MISMATCH")
        ok = False

    try:
        ort_dir = os.path.join(w, "ort")
        u.run_ort(exported, inputs, ort_dir)
    except u.ToolError as err:
        u.die(str(err))
    print("onnxruntime on the exported model vs PyTorch")
    ok &= u.compare(torch_ref, ort_dir, args.tol, label="onnxruntime")
    print("colossal-run forward vs onnxruntime on the exported model")
    ok &= u.compare(u.npy_dir(ort_dir), colossal_dir, args.tol)

    # Errors.
    bad = os.path.join(w, "bad.onnx")
    ok &= expect_failure([run_bin, plan, "export", "--onnx", source], "is the source model")
    ok &= expect_failure([run_bin, plan, "export", "--onnx", os.path.join(ext_dir, "weights.bin")],
                         "is an external data file of the source model")
    ok &= expect_failure([run_bin, plan, "export"], "export needs --onnx OUT.onnx")
    original = open(source, "rb").read()
    changed = onnx.load(source, load_external_data=False)
    changed.producer_name = "edited after compilation"
    onnx.save_model(changed, source)
    ok &= expect_failure([run_bin, plan, "export", "--onnx", bad], "the model changed since compilation")
    os.remove(source)
    ok &= expect_failure([run_bin, plan, "export", "--onnx", bad], source)
    with open(source, "wb") as f:
        f.write(original)
    if os.path.exists(bad):
        print(f"  {bad} was written by a failed export  MISMATCH")
        ok = False

    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

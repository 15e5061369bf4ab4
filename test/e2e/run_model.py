#!/usr/bin/python3
"""End-to-end check of one model: compile with colossal-opt, run with colossal-run, compare outputs.

Three ways to name the model:

  # any ONNX file with its spec and inputs; reference = a directory of NAME.npy, or onnxruntime
  run_model.py --model M.onnx --spec S.yaml --inputs DIR [--ref DIR|ort] --workdir W

  # export an examples/models architecture first (into W/model), then check it against onnxruntime
  # (and check onnxruntime against PyTorch, so that a broken export is reported as such)
  run_model.py --export gpt2|llama|bert --opset 14|17 --workdir W [--ref ort|torch]

  # the real models in ../shared/models (exit 77 = skipped when the directory is absent):
  #   dynamic:  model.onnx, input_ids [1,16] bound by the spec, reference logits.npy (numpy)
  #   static32: model_static32.onnx on seeded random ids [1,32] (vocab 512), reference onnxruntime
  run_model.py --shared ../shared/models/aidreams260K --variant dynamic|static32 --workdir W

Passes when every output has the reference's shape and dtype and max|err| <= tol * max|ref|
(--tol, default 1e-4). Prints one line per output; exit 0 = pass, 1 = mismatch, 2 = a tool failed
(its message is printed), 77 = skipped. Tools: --opt/--run, else $COLOSSAL_OPT/$COLOSSAL_RUN, else
build/bin, else $PATH (see e2e_util.py).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402


def prepare_export(args):
    model_dir = os.path.join(args.workdir, "model")
    cmd = [sys.executable, u.EXPORT_PY, "--arch", args.export, "--opset", str(args.opset), "--out", model_dir]
    out, _, dt = u.run(cmd + args.export_args, "export.py", timeout=600)
    print(out.rstrip())
    print(f"exported in {dt:.1f} s")
    torch_ref = u.npy_dir(os.path.join(model_dir, "reference"))
    model = os.path.join(model_dir, "model.onnx")
    inputs = u.npy_dir(os.path.join(model_dir, "inputs"))
    if args.ref in (None, "ort"):
        ort_dir = os.path.join(args.workdir, "ort")
        u.run_ort(model, inputs, ort_dir, args.threads)
        print("export check: onnxruntime vs PyTorch")
        if not u.compare(torch_ref, ort_dir, args.tol, label="onnxruntime"):
            u.die("onnxruntime disagrees with PyTorch on the exported model: the export is wrong", 1)
        reference = u.npy_dir(ort_dir)
    elif args.ref == "torch":
        reference = torch_ref
    else:
        reference = u.npy_dir(args.ref)
    return model, os.path.join(model_dir, "spec.yaml"), inputs, reference


def prepare_shared(args):
    d = args.shared
    needed = ["model.onnx", "input_ids.npy", "logits.npy"] if args.variant == "dynamic" else ["model_static32.onnx"]
    absent = [f for f in needed if not os.path.isfile(os.path.join(d, f))]
    if absent:  # an input of the test, not a failure of the code: ctest reports Skipped
        print(f"skipped: shared model {'directory ' + d if not os.path.isdir(d) else ' '.join(os.path.join(d, f) for f in absent)} is absent")
        sys.exit(u.SKIP)
    os.makedirs(args.workdir, exist_ok=True)
    spec = os.path.join(args.workdir, "spec.yaml")
    if args.variant == "dynamic":
        model = os.path.join(d, "model.onnx")
        inputs = {"input_ids": os.path.join(d, "input_ids.npy")}
        shape = list(np.load(inputs["input_ids"]).shape)
        reference = {"logits": os.path.join(d, "logits.npy")}
    else:
        model = os.path.join(d, "model_static32.onnx")
        shape = [1, 32]
        ids = np.random.default_rng(args.seed).integers(0, 512, size=shape, dtype=np.int64)
        os.makedirs(os.path.join(args.workdir, "inputs"), exist_ok=True)
        inputs = {"input_ids": os.path.join(args.workdir, "inputs", "input_ids.npy")}
        np.save(inputs["input_ids"], ids)
        reference = None
    with open(spec, "w") as f:
        f.write(f"mode: inference\ninputs: {{input_ids: {shape}}}\n")
    if reference is None or args.ref == "ort":
        ort_dir = os.path.join(args.workdir, "ort")
        u.run_ort(model, inputs, ort_dir, args.threads)
        reference = u.npy_dir(ort_dir)
    return model, spec, inputs, reference


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="ONNX model (with --spec and --inputs)")
    src.add_argument("--export", choices=["gpt2", "llama", "bert"], help="export this architecture first")
    src.add_argument("--shared", help="a ../shared/models/<name> directory")
    p.add_argument("--spec", help="spec file (with --model)")
    p.add_argument("--inputs", help="directory of NAME.npy inputs (with --model)")
    p.add_argument("--opset", type=int, default=14, choices=[14, 17], help="with --export")
    p.add_argument("--export-args", default="", help="extra export.py flags, e.g. '--layers 3 --seq 32'")
    p.add_argument("--variant", default="dynamic", choices=["dynamic", "static32"], help="with --shared")
    p.add_argument("--seed", type=int, default=0, help="seed of the random ids of --variant static32")
    p.add_argument("--ref", help="reference: a directory of NAME.npy, 'ort' (run onnxruntime) or, with "
                                 "--export, 'torch' (PyTorch's outputs). Default: ort, or the model's own "
                                 "reference for --shared dynamic")
    p.add_argument("--workdir", required=True, help="scratch directory (plan, weights, outputs)")
    p.add_argument("--opt", help="colossal-opt binary")
    p.add_argument("--run", help="colossal-run binary")
    p.add_argument("--threads", type=int, default=0, help="threads for colossal-run and onnxruntime")
    p.add_argument("--tol", type=float, default=1e-4, help="max|err| <= tol * max|ref| (default 1e-4)")
    p.add_argument("--argmax", type=int, default=0, metavar="K",
                   help="also print the first K argmax tokens of float outputs named logits")
    args = p.parse_args()
    args.export_args = args.export_args.split()
    os.makedirs(args.workdir, exist_ok=True)

    try:
        opt = u.find_tool("colossal-opt", args.opt)
        run_bin = u.find_tool("colossal-run", args.run)
        if args.export:
            model, spec, inputs, reference = prepare_export(args)
        elif args.shared:
            model, spec, inputs, reference = prepare_shared(args)
        else:
            if not (args.spec and args.inputs):
                p.error("--model needs --spec and --inputs")
            model, spec, inputs = args.model, args.spec, u.npy_dir(args.inputs)
            if args.ref in (None, "ort"):
                ort_dir = os.path.join(args.workdir, "ort")
                u.run_ort(model, inputs, ort_dir, args.threads)
                reference = u.npy_dir(ort_dir)
            else:
                reference = u.npy_dir(args.ref)
        if not reference:
            u.die("the reference has no outputs")
        plan = os.path.join(args.workdir, "model.cplan")
        t_opt = u.compile_plan(opt, model, spec, plan)
        out_dir = os.path.join(args.workdir, "colossal")
        t_run = u.run_plan(run_bin, plan, inputs, out_dir, args.threads)
    except u.ToolError as e:
        u.die(str(e))

    print(f"{os.path.basename(model)}: colossal-opt {t_opt:.2f} s, colossal-run {t_run:.2f} s (process wall time)")
    ok = u.compare(reference, out_dir, args.tol)
    if args.argmax:
        for name, f in sorted(reference.items()):
            got = os.path.join(out_dir, name + ".npy")
            if "logits" in name and os.path.isfile(got):
                a, r = np.load(got), np.load(f)
                print(f"  argmax {name}[0, :{args.argmax}]: colossal {a.reshape(-1, a.shape[-1]).argmax(-1)[:args.argmax].tolist()}")
                print(f"  argmax {name}[0, :{args.argmax}]: reference {r.reshape(-1, r.shape[-1]).argmax(-1)[:args.argmax].tolist()}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

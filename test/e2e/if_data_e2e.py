#!/usr/bin/python3
"""A data-dependent ONNX If (docs/misc-ops.md "If") against onnxruntime, for both conditions.

The model is the lit test's `if_data` (test/lit/Import/Inputs/make_misc_onnx.py), the structure of
openWakeWord's hey_jarvis: p = Sigmoid(x W); if p >= 0.5 a second computation runs, else p is the
answer. One plan is compiled and run on two inputs, one per branch:

  then: x = [1, 0.2, 0.3, 0.4]      p >= 0.5: (p * p, Sqrt(x))
  else: x = [-1, 0.5, -0.3, -0.4]   p <  0.5: (p, -x); the untaken Sqrt makes NaNs that must not leak

Each run's outputs must match onnxruntime's (max|err| <= 1e-6 * max|ref|, all finite), and
onnxruntime's must be the expected branch (computed with NumPy), so both conditions are covered.

    /usr/bin/python3 test/e2e/if_data_e2e.py --workdir DIR [--opt colossal-opt --run colossal-run]

Exit 0 pass, 1 mismatch, 2 a tool failed.
"""
import argparse
import os
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lit", "Import", "Inputs"))
import e2e_util as u  # noqa: E402
import make_misc_onnx  # noqa: E402

TOL = 1e-6
CASES = {
    "then": np.array([[1.0, 0.2, 0.3, 0.4]], np.float32),
    "else": np.array([[-1.0, 0.5, -0.3, -0.4]], np.float32),
}


def expected_branch(x):
    """NumPy's answer for the model's (score, feat) from x, and which branch it took."""
    w = np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    if p[0, 0] >= 0.5:
        return "then", {"score": p * p, "feat": np.sqrt(x).reshape(4)}
    return "else", {"score": p, "feat": -x.reshape(4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--opt")
    ap.add_argument("--run")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model = os.path.join(args.workdir, "if_data.onnx")
    onnx.save(make_misc_onnx.if_data(), model)
    spec = os.path.join(args.workdir, "spec.yaml")
    with open(spec, "w") as f:
        f.write("mode: inference\n")
    ok = True
    try:
        opt, run = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
        plan = os.path.join(args.workdir, "if_data.cplan")
        u.compile_plan(opt, model, spec, plan)
        for name, x in CASES.items():
            d = os.path.join(args.workdir, name)
            os.makedirs(d, exist_ok=True)
            np.save(os.path.join(d, "x.npy"), x)
            inputs = {"x": os.path.join(d, "x.npy")}
            ort_dir, got_dir = os.path.join(d, "ort"), os.path.join(d, "colossal")
            u.run_ort(model, inputs, ort_dir)
            u.run_plan(run, plan, inputs, got_dir)
            branch, numpy_ref = expected_branch(x)
            ref = u.npy_dir(ort_dir)
            print(f"case {name}: NumPy takes the {branch} branch")
            if branch != name:
                u.die(f"case {name}: the input takes the {branch} branch; the test is wrong", 1)
            for out, expect in numpy_ref.items():
                r = np.load(ref[out])
                if r.shape != expect.shape or not np.allclose(r, expect, rtol=1e-6, atol=1e-7):
                    print(f"  {out}: onnxruntime {r.tolist()} is not the {name} branch's {expect.tolist()}")
                    ok = False
            ok &= u.compare(ref, got_dir, TOL)
            for out, f in u.npy_dir(got_dir).items():
                if not np.all(np.isfinite(np.load(f))):
                    print(f"  {out}: non-finite values (the untaken branch leaked)")
                    ok = False
    except u.ToolError as e:
        u.die(str(e))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

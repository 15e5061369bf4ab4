#!/usr/bin/python3
"""examples/models/export.py's shape flags do what its help says (e2e.export.flags).

    export_flags.py --workdir W

  --preset tiny              batch dim dynamic ("batch"), sequence fixed at the preset's 64
  --preset tiny --static     every dim fixed: input_ids [8, 64], logits [8, 64, 256] (an explicit
                             flag overrides the preset's dynamic batch, as the help promises)
  --static --dynamic-batch   both given explicitly: a usage error (exit 2), and no model written

Each model is also compiled with colossal-opt and run with colossal-run against the PyTorch
outputs export.py recorded (max|err| <= 1e-4 max|ref|). Exit 0 pass, 1 mismatch, 2 a tool failed,
77 skipped (see require.py).
"""
import argparse
import os
import shutil
import subprocess
import sys

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def export(out, *flags):
    shutil.rmtree(out, ignore_errors=True)
    return subprocess.run([sys.executable, u.EXPORT_PY, "--quiet", "--out", out, *flags], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--opt")
    ap.add_argument("--run")
    args = ap.parse_args()
    w = os.path.abspath(args.workdir)
    os.makedirs(w, exist_ok=True)
    opt, run_bin = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
    ok = True
    # (flags, expected input_ids dims, expected logits dims); the preset: batch 8, T 64, vocab 256.
    # (torch names the logits' other dims itself under dynamic axes: only dim 0 is checked there)
    cases = [(["--preset", "tiny"], ["batch", 64], ["batch"]),
             (["--preset", "tiny", "--static"], [8, 64], [8, 64, 256])]
    for flags, want_in, want_out in cases:
        out = os.path.join(w, "_".join(f.lstrip("-") for f in flags))
        p = export(out, *flags)
        if p.returncode != 0:
            print(f"export.py {' '.join(flags)}: exit {p.returncode}\n{p.stdout}")
            ok = False
            continue
        g = onnx.load(os.path.join(out, "model.onnx")).graph
        got_in, got_out = dims(g.input[0]), dims(g.output[0])[:len(want_out)]
        good = got_in == want_in and got_out == want_out
        print(f"export.py {' '.join(flags)}: input_ids {got_in}, logits {got_out} "
              f"(want {want_in}, {want_out})  {'ok' if good else 'MISMATCH'}")
        ok &= good
        try:
            plan = os.path.join(out, "model.cplan")
            u.compile_plan(opt, os.path.join(out, "model.onnx"), os.path.join(out, "spec.yaml"), plan, quiet=True)
            u.run_plan(run_bin, plan, u.npy_dir(os.path.join(out, "inputs")), os.path.join(out, "out"), quiet=True)
        except u.ToolError as e:
            print(e)
            return 2
        ok &= u.compare(u.npy_dir(os.path.join(out, "reference")), os.path.join(out, "out"), 1e-4, label="colossal")
    out = os.path.join(w, "both")
    p = export(out, "--arch", "gpt2", "--static", "--dynamic-batch")
    good = p.returncode == 2 and "exclude each other" in p.stdout and not os.path.exists(out)
    print(f"export.py --static --dynamic-batch: exit {p.returncode}, "
          f"{'nothing written' if not os.path.exists(out) else 'wrote ' + out}  {'ok' if good else 'MISMATCH'}")
    if not good:
        print(p.stdout)
    ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The tensor-parallel collectives from IR to ranks (docs/parallelism.md "Plan lowering, kernels and
report"): a hand-written per-rank module on the mesh a=2 x b=2 (no `dp` axis, so colossal-run neither
splits inputs nor gathers outputs) is lowered by `colossal-opt --emit=plan`, run on 4 ranks with
`mpirun -np 4 colossal-run`, and rank 0's outputs are compared with NumPy, exactly:

  roundtrip  all_gather over 'b' (dim 1) of shard_slice over 'b' (dim 1) of x == x: every rank's
             slice arrives at rank 0, in group order;
  order      all_gather over 'a,b' (dim 0) of axis_index over 'b,a' (as f32, [1]): position g holds
             world rank g = (a, b) = (g // 2, g % 2) and its index over 'b,a' is b * 2 + a ->
             [0, 2, 1, 3];
  sliced_sum all_reduce (sum) over 'a' of shard_slice over 'a' (dim 0) of x: x[0:2] + x[2:4];
  scattered  reduce_scatter (sum) over 'a,b' (dim 1) of x (the same x on every rank): 4 * x[:, 0:2];
  gmax       all_reduce (max) over 'a,b' of x + axis_index over 'a,b': x + 3.

Then `--report` of the same plan against the bytes computed here from the shapes (bytes = each
call's input buffer): all_gather over 'b' 64 bytes ([4, 4] f32), all_gather over 'a,b' 4 bytes,
all_reduce over 'a' 64 bytes ([2, 8] f32), all_reduce over 'a,b' 128 bytes, reduce_scatter over
'a,b' 128 bytes; total 388.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no mpirun).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402

MODULE = r'''
module {
colossal.mesh @mesh axes = ["a", "b"] shape = [2, 2] roles = ["tensor", "tensor"]
func.func @forward(%x: tensor<4x8xf32> {colossal.input = "x"})
    -> (tensor<4x8xf32> {colossal.output = "roundtrip"}, tensor<4xf32> {colossal.output = "order"},
        tensor<2x8xf32> {colossal.output = "sliced_sum"}, tensor<4x2xf32> {colossal.output = "scattered"},
        tensor<4x8xf32> {colossal.output = "gmax"}) {
  %s = colossal.shard_slice %x {axes = ["b"], dim = 1} : tensor<4x8xf32> -> tensor<4x4xf32>
  %rt = colossal.all_gather %s {axes = ["b"], dim = 1} : tensor<4x4xf32> -> tensor<4x8xf32>
  %i = colossal.axis_index {axes = ["b", "a"]} : tensor<i64>
  %if = colossal.cast %i : tensor<i64> -> tensor<f32>
  %i1 = colossal.reshape %if : tensor<f32> -> tensor<1xf32>
  %o = colossal.all_gather %i1 {axes = ["a", "b"], dim = 0} : tensor<1xf32> -> tensor<4xf32>
  %h = colossal.shard_slice %x {axes = ["a"], dim = 0} : tensor<4x8xf32> -> tensor<2x8xf32>
  %hs = colossal.all_reduce %h {axes = ["a"]} : tensor<2x8xf32> -> tensor<2x8xf32>
  %sc = colossal.reduce_scatter %x {axes = ["a", "b"], dim = 1} : tensor<4x8xf32> -> tensor<4x2xf32>
  %j = colossal.axis_index {axes = ["a", "b"]} : tensor<i64>
  %jf = colossal.cast %j : tensor<i64> -> tensor<f32>
  %xj = colossal.add %x, %jf : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %m = colossal.all_reduce %xj {axes = ["a", "b"], reduction = "max"} : tensor<4x8xf32> -> tensor<4x8xf32>
  return %rt, %o, %hs, %sc, %m : tensor<4x8xf32>, tensor<4xf32>, tensor<2x8xf32>, tensor<4x2xf32>, tensor<4x8xf32>
}
}
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--opt", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    if not shutil.which("mpirun"):
        print("skipped: mpirun is not on PATH")
        return u.SKIP
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    mlir = os.path.join(args.workdir, "tp.mlir")
    plan = os.path.join(args.workdir, "tp.cplan")
    with open(mlir, "w") as f:
        f.write(MODULE)
    try:
        report, _, _ = u.run([args.opt, mlir, "--emit=plan", "-o", plan, "--report"], "colossal-opt")
        # Multiples of 1/8 in [-8, 8): sums of four are exact in float32.
        x = ((np.arange(32, dtype=np.int64) * 37 % 128) - 64).astype(np.float32).reshape(4, 8) / 8
        np.save(os.path.join(args.workdir, "x.npy"), x)
        out = os.path.join(args.workdir, "out")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = ["mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none", args.run, plan,
               "--input", "x=" + os.path.join(args.workdir, "x.npy"), "--output-dir", out, "--threads", "1"]
        print("$ " + " ".join(cmd), flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, env=env)
        if p.returncode != 0:
            raise u.ToolError("colossal-run on 4 ranks failed with exit code %d:\n%s" % (p.returncode, p.stderr[-3000:]))
    except u.ToolError as e:
        print(e)
        return 2

    want = {
        "roundtrip": x,
        "order": np.array([0, 2, 1, 3], dtype=np.float32),
        "sliced_sum": x[0:2] + x[2:4],
        "scattered": 4 * x[:, 0:2],
        "gmax": x + 3,
    }
    ok = True
    for name, ref in want.items():
        got = np.load(os.path.join(out, name + ".npy"))
        same = got.shape == ref.shape and np.array_equal(got, ref)
        print(f"{name}: {'exact' if same else 'MISMATCH'} {got.shape}")
        if not same:
            print("  got ", got.tolist())
            print("  want", ref.tolist())
            ok = False

    print(report)
    f32 = 4
    want_bytes = {
        "all_gather over 'b'": (4 * 4 * f32, 1),
        "all_gather over 'a,b'": (1 * f32, 1),
        "all_reduce over 'a'": (2 * 8 * f32, 1),
        "all_reduce over 'a,b'": (4 * 8 * f32, 1),
        "reduce_scatter over 'a,b'": (4 * 8 * f32, 1),
    }
    step = report[report.find("communication per run"):]
    for key, (b, n) in want_bytes.items():
        m = re.search(re.escape(key) + r": (\d+) bytes in (\d+) collectives", step)
        got = (int(m.group(1)), int(m.group(2))) if m else None
        print(f"report {key}: {got}, by hand {(b, n)}")
        if got != (b, n):
            ok = False
    total = re.search(r"total: (\d+) bytes", step)
    if not total or int(total.group(1)) != sum(b for b, _ in want_bytes.values()):
        print(f"report total {total.group(1) if total else None}, by hand {sum(b for b, _ in want_bytes.values())}  MISMATCH")
        ok = False
    if "mesh: a=2 x b=2 " not in report:
        print("report lacks the mesh line  MISMATCH")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Compares the losses of two metrics files (colossal-run train --metrics, one JSON object a step).

    compare_losses.py A.jsonl B.jsonl [--rtol 1e-5] [--steps N]

Exit 0 when both have the same steps (at least --steps of them) and every loss agrees within
--rtol relative; else 1, naming the first step that differs. Stdlib only.
"""
import argparse
import json
import sys


def losses(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return {r["step"]: r["loss"] for r in rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--steps", type=int, default=1)
    args = ap.parse_args()
    a, b = losses(args.a), losses(args.b)
    if sorted(a) != sorted(b) or len(a) < args.steps:
        print(f"steps differ: {args.a} has {len(a)}, {args.b} has {len(b)} (need {args.steps})")
        return 1
    worst = 0.0
    for step in sorted(a):
        rel = abs(a[step] - b[step]) / max(abs(b[step]), 1e-30)
        worst = max(worst, rel)
        if rel > args.rtol:
            print(f"step {step}: loss {a[step]!r} ({args.a}) vs {b[step]!r} ({args.b}), "
                  f"relative {rel:.2e} > {args.rtol:g}  MISMATCH")
            return 1
    print(f"{len(a)} steps: losses agree (max relative difference {worst:.2e}, first {a[min(a)]:.5f}, "
          f"last {a[max(a)]:.5f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

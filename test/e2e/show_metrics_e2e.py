#!/usr/bin/env python3
"""examples/train/show_metrics.py on a metrics file with a non-finite step (its loss written as
null, docs/training.md): the table shows '-' there and the summary's means leave it out, exit 0.

    show_metrics_e2e.py --workdir W
"""
import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    path = os.path.join(a.workdir, "metrics.jsonl")
    rows = [{"step": 0, "loss": 6.0}, {"step": 1, "loss": 4.0}, {"step": 2, "loss": 2.0}, {"step": 3, "loss": None}]
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(dict(r, lr=1e-3, grad_norm=None if r["loss"] is None else 1.0, tokens_per_s=100.0)) + "\n")
    p = subprocess.run([sys.executable, os.path.join(REPO, "examples", "train", "show_metrics.py"), path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    print(p.stdout + p.stderr)
    want = "loss: 6.0000 at step 0 -> 2.0000 at step 2"
    if p.returncode != 0 or want not in p.stdout or "1 step(s) with a non-finite loss left out" not in p.stdout:
        print(f"FAIL: exit {p.returncode}; expected a summary with '{want}' and the non-finite step left out")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

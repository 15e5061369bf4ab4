#!/usr/bin/python3
"""Print a training run's metrics (colossal-run's or torch_reference.py's JSON lines) as a table.

    show_metrics.py M.jsonl [--every K] [--follow PID]

One row every K steps (default 50; the last step and every step with an `eval_loss` always):
step, loss, eval_loss, lr, grad_norm, tokens/s. With --follow PID it prints rows as the file grows
until process PID exits (a training running in the background), so the loss is seen falling live
whether or not the output is a terminal. Ends with a summary: the first and last loss, and the mean
loss of the first and last tenth of the steps. Exit 1 when the file holds no complete line.
"""
import argparse
import json
import os
import sys
import time


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fmt(v, spec):
    """v formatted with spec ('9.4f'), or '-' right-aligned to the spec's width when v is absent."""
    return format(v, spec) if isinstance(v, (int, float)) else "-".rjust(int(spec.split(".")[0]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("metrics")
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--follow", type=int, metavar="PID", help="keep reading until process PID exits")
    a = p.parse_args()
    rows, buf, pos = [], "", 0
    print(f"{'step':>6}  {'loss':>8}  {'eval_loss':>9}  {'lr':>9}  {'grad_norm':>9}  {'tokens/s':>9}", flush=True)

    def read_new():
        nonlocal buf, pos
        if not os.path.exists(a.metrics):
            return []
        with open(a.metrics) as f:
            f.seek(pos)
            chunk = f.read()
            pos = f.tell()
        buf += chunk
        *lines, buf = buf.split("\n")
        return [json.loads(line) for line in lines if line.strip()]

    def show(r, force=False):
        if force or r["step"] % a.every == 0 or "eval_loss" in r:
            print(f"{r['step']:6d}  {fmt(r.get('loss'), '8.4f')}  {fmt(r.get('eval_loss'), '9.4f')}  "
                  f"{fmt(r.get('lr'), '9.2e')}  {fmt(r.get('grad_norm'), '9.3f')}  {fmt(r.get('tokens_per_s'), '9.0f')}",
                  flush=True)

    while True:
        running = a.follow is not None and alive(a.follow)
        for r in read_new():
            if rows and r["step"] <= rows[-1]["step"]:
                rows = [x for x in rows if x["step"] < r["step"]]  # a resumed run rewrote later steps
            rows.append(r)
            show(r)
        if not running:
            break
        time.sleep(0.5)
    if not rows:
        print(f"show_metrics.py: {a.metrics}: no metrics lines", file=sys.stderr)
        sys.exit(1)
    if rows[-1]["step"] % a.every and "eval_loss" not in rows[-1]:
        show(rows[-1], force=True)
    # A non-finite loss is written as null (docs/training.md): the summary leaves those steps out.
    finite = [r for r in rows if r.get("loss") is not None]
    if not finite:
        print(f"loss: no finite loss in {len(rows)} steps")
        return
    k = max(1, len(finite) // 10)
    first = sum(r["loss"] for r in finite[:k]) / k
    last = sum(r["loss"] for r in finite[-k:]) / k
    skipped = len(rows) - len(finite)
    print(f"loss: {finite[0]['loss']:.4f} at step {finite[0]['step']} -> {finite[-1]['loss']:.4f} at step "
          f"{finite[-1]['step']} (mean of the first {k} finite steps {first:.4f}, of the last {k} {last:.4f})"
          + (f"; {skipped} step(s) with a non-finite loss left out" if skipped else ""))


if __name__ == "__main__":
    main()

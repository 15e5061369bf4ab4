#!/usr/bin/python3
"""Summarise a training benchmark: two metrics files (colossal-run and PyTorch) -> tokens/s and ratio.

    compare.py COLOSSAL.jsonl TORCH.jsonl --warmup K [--check-steps N --loss-tol X] [--label TEXT]

Throughput of each engine = tokens of the timed steps / their summed wall time, the steps after the
first K (warm-up: page faults, allocator and thread-pool start); each step's time is B*T /
tokens_per_s of its metrics line, so process start, model loading and compilation are excluded on
both sides. Before any number is printed, the first N steps' losses must agree within X relative
(the two engines train the same model on the same data from the same weights): a fast wrong answer
is not a result. Prints one Markdown table row:
    | label | colossal tok/s | PyTorch tok/s | ratio | max rel loss diff (first N steps) |
Exit 1 when the losses disagree or a file has fewer than K + 1 steps.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def throughput(rows, warmup, tokens_per_step):
    timed = rows[warmup:]
    seconds = sum(tokens_per_step / r["tokens_per_s"] for r in timed)
    return tokens_per_step * len(timed) / seconds, seconds / len(timed)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("colossal")
    p.add_argument("torch")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tokens-per-step", type=int, required=True, help="B * T")
    p.add_argument("--check-steps", type=int, default=5)
    p.add_argument("--loss-tol", type=float, default=1e-3)
    p.add_argument("--label", default="")
    a = p.parse_args()
    c, t = load(a.colossal), load(a.torch)
    for name, rows in (("colossal", c), ("torch", t)):
        if len(rows) <= a.warmup:
            sys.exit(f"compare.py: {name}: {len(rows)} steps, need more than --warmup {a.warmup}")
    n = min(a.check_steps, len(c), len(t))
    diff = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(c[:n], t[:n]))
    if diff > a.loss_tol:
        for x, y in zip(c[:n], t[:n]):
            print(f"step {x['step']}: colossal {x['loss']!r} torch {y['loss']!r}", file=sys.stderr)
        sys.exit(f"compare.py: losses disagree (max rel diff {diff:.2e} > {a.loss_tol:g}): not timing a wrong run")
    ct, cs = throughput(c, a.warmup, a.tokens_per_step)
    tt, ts = throughput(t, a.warmup, a.tokens_per_step)
    print(f"| {a.label} | {ct:.0f} ({cs * 1e3:.0f} ms/step) | {tt:.0f} ({ts * 1e3:.0f} ms/step) | "
          f"{ct / tt:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()

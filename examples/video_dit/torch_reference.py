#!/usr/bin/python3
"""Replays a colossal-run training of the video DiT in PyTorch, step for step.

    torch_reference.py --work DIR --dump DUMP --steps N [--metrics OUT.jsonl] [--compare COLOSSAL.jsonl] [--tol T]

Starts from DIR/state_dict.pt (export.py's initial weights, the ones in train.onnx) and trains
RectifiedFlowLoss with torch.optim.AdamW (the spec's lr, betas, eps and weight decay, and its
cosine schedule, from DIR/config.json and export.py) on the batches colossal-run saw: step s reads clean, noise and t from
DUMP/step-0000000s/ (`colossal-run ... train --dump-inputs DUMP`). Writes {"step", "loss"} lines
to OUT.jsonl; with --compare, prints both losses per step and the largest relative difference,
and exits 1 when it is above --tol (default 1e-4).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as m  # noqa: E402

ADAMW = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}  # as export.py's spec_text


def cosine_lr(s, lr, warmup_steps, total_steps, min_lr):
    """The learning rate of step s (from 0) under `lr_schedule: {kind: cosine}` (docs/training.md)."""
    if s < warmup_steps:
        return lr * (s + 1) / warmup_steps
    progress = min(1.0, (s - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def replay(work, dump, steps, threads=1):
    """The per-step losses of PyTorch's run on the dumped inputs."""
    torch.set_num_threads(threads)
    with open(os.path.join(work, "config.json")) as f:
        conf = json.load(f)
    dit = m.VideoDiT(m.Config(**conf["model"]))
    dit.load_state_dict(torch.load(os.path.join(work, "state_dict.pt")))
    loss_fn = m.RectifiedFlowLoss(dit)
    opt = torch.optim.AdamW([p for p in dit.parameters() if p.requires_grad], lr=conf["lr"], **ADAMW)
    losses = []
    for s in range(steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(s, conf["lr"], **conf["lr_schedule"])
        step = os.path.join(dump, f"step-{s:08d}")
        clean, noise, t = (torch.from_numpy(np.load(os.path.join(step, n + ".npy"))) for n in ("clean", "noise", "t"))
        opt.zero_grad()
        loss = loss_fn(clean, noise, t)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def compare(ours, ref, tol):
    """Prints both losses per step; returns the largest relative difference."""
    worst = 0.0
    for s, (a, b) in enumerate(zip(ours, ref)):
        rel = abs(a - b) / abs(b)
        worst = max(worst, rel)
        print(f"step {s:3d}: colossal {a:.7f}  torch {b:.7f}  rel {rel:.1e}{'  MISMATCH' if rel > tol else ''}")
    print(f"largest relative difference {worst:.1e} over {len(ref)} steps (tolerance {tol:g})")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--metrics")
    ap.add_argument("--compare")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: on 2 shared cores more are slower)")
    a = ap.parse_args()
    ref = replay(a.work, a.dump, a.steps, a.threads)
    if a.metrics:
        with open(a.metrics, "w") as f:
            for s, loss in enumerate(ref):
                f.write(json.dumps({"step": s, "loss": loss}) + "\n")
    if a.compare:
        with open(a.compare) as f:
            ours = [json.loads(line)["loss"] for line in f][:a.steps]
        if len(ours) != len(ref):
            sys.exit(f"{a.compare} has {len(ours)} steps, expected {len(ref)}")
        sys.exit(1 if compare(ours, ref, a.tol) > a.tol else 0)
    for s, loss in enumerate(ref):
        print(f"step {s:3d}: torch {loss:.7f}")


if __name__ == "__main__":
    main()

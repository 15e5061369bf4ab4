#!/usr/bin/env python3
"""PyTorch references for the optimizer and cross-entropy kernels (OptimKernelsTest.cpp).

Usage: optim_reference.py OUTDIR      (exit 77 when numpy or torch cannot be imported)

Runs torch.optim.AdamW / Adam / SGD (PyTorch's own single-tensor path, foreach=False) for a few
steps on fixed seeded tensors, with torch.nn.utils.clip_grad_norm_ before each step when clipping
is on, and torch.nn.functional.cross_entropy (+ backward) on fixed logits, and writes inputs and
expected values as .npy files plus OUTDIR/manifest.json describing every case. The C++ test feeds
the same inputs to the kernels and compares.

Files per optimizer case NAME and parameter j:
  NAME.p<j>.init.npy              initial parameter
  NAME.p<j>.grad.npy              [steps, *shape] gradient given at each step (before clipping)
  NAME.p<j>.param.npy             [steps, *shape] parameter after each step
  NAME.p<j>.<state>.npy           [steps, *shape] optimizer state after each step
                                  (exp_avg, exp_avg_sq for adam/adamw; momentum_buffer for sgd
                                  with momentum)
  NAME.norm.npy                   [steps] clip_grad_norm_'s total norm (when clipping)
Files per cross-entropy case NAME: NAME.logits.npy, NAME.labels.npy, NAME.loss.npy [],
  NAME.dlogits.npy (the gradient for the upstream gradient `dloss` recorded in the manifest).
"""
import json
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # OptimKernelsTest reports its PyTorch cases as skipped (GTEST_SKIP)
    print(f"skipped: {sys.executable}: {e}")
    sys.exit(77)

STEPS = 5
# Shapes: a small odd 2-D tensor and one large enough for the kernels' multi-threaded path.
SHAPES = [[37, 19], [20001]]


def f32(x):
    """The float32 value of x, as a Python float (lr reaches the kernels as an f32 scalar)."""
    return float(np.float32(x))


OPTIM_CASES = [
    dict(name="adamw_wd", kind="adamw", lr=1e-2, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.1, max_grad_norm=0.0),
    dict(name="adamw_wd_clip", kind="adamw", lr=3e-3, betas=[0.9, 0.95], eps=1e-6, weight_decay=0.1, max_grad_norm=1.0),
    dict(name="adamw_nowd_clip_inactive", kind="adamw", lr=1e-3, betas=[0.8, 0.99], eps=1e-8, weight_decay=0.0,
         max_grad_norm=1e6),
    dict(name="adam_nowd", kind="adam", lr=1e-2, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.0, max_grad_norm=0.0),
    dict(name="adam_wd_clip", kind="adam", lr=2e-3, betas=[0.85, 0.98], eps=1e-7, weight_decay=0.05, max_grad_norm=0.5),
    dict(name="sgd_plain", kind="sgd", lr=0.1, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0,
         max_grad_norm=0.0),
    dict(name="sgd_wd_clip", kind="sgd", lr=0.05, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.01,
         max_grad_norm=1.0),
    dict(name="sgd_momentum", kind="sgd", lr=0.05, momentum=0.9, dampening=0.0, nesterov=False, weight_decay=0.0,
         max_grad_norm=0.0),
    dict(name="sgd_momentum_dampening_wd", kind="sgd", lr=0.02, momentum=0.9, dampening=0.3, nesterov=False,
         weight_decay=0.01, max_grad_norm=0.0),
    dict(name="sgd_nesterov_wd_clip", kind="sgd", lr=0.03, momentum=0.8, dampening=0.0, nesterov=True,
         weight_decay=0.02, max_grad_norm=2.0),
]

CE_CASES = [
    # name, N, C, logit scale, logit offset, ignore_index, rows to ignore, dloss
    dict(name="small", N=7, C=5, scale=2.0, offset=0.0, ignore_index=-100, ignored=[2, 5], dloss=1.0),
    dict(name="large_logits", N=40, C=1000, scale=8.0, offset=60.0, ignore_index=-100, ignored=[0], dloss=0.75),
    dict(name="custom_ignore", N=33, C=17, scale=3.0, offset=-20.0, ignore_index=3, ignored=[], dloss=2.0),
    dict(name="one_class", N=4, C=1, scale=1.0, offset=0.0, ignore_index=-100, ignored=[1], dloss=1.0),
    dict(name="all_ignored", N=3, C=4, scale=1.0, offset=0.0, ignore_index=-100, ignored=[0, 1, 2], dloss=1.0),
]


def save(outdir, name, array):
    np.save(os.path.join(outdir, name + ".npy"), np.ascontiguousarray(array))


def run_optim_case(outdir, case, seed):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(*s, generator=gen)) for s in SHAPES]
    for j, p in enumerate(params):
        save(outdir, f"{case['name']}.p{j}.init", p.detach().numpy())
    lr = f32(case["lr"])
    if case["kind"] == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, betas=tuple(case["betas"]), eps=case["eps"],
                                weight_decay=case["weight_decay"], foreach=False)
        states = ["exp_avg", "exp_avg_sq"]
    elif case["kind"] == "adam":
        opt = torch.optim.Adam(params, lr=lr, betas=tuple(case["betas"]), eps=case["eps"],
                               weight_decay=case["weight_decay"], foreach=False)
        states = ["exp_avg", "exp_avg_sq"]
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=case["momentum"], dampening=case["dampening"],
                              nesterov=case["nesterov"], weight_decay=case["weight_decay"], foreach=False)
        states = ["momentum_buffer"] if case["momentum"] != 0 else []
    grads = [[] for _ in params]
    history = {(j, k): [] for j in range(len(params)) for k in ["param"] + states}
    norms = []
    for _ in range(STEPS):
        for j, p in enumerate(params):
            g = torch.randn(*p.shape, generator=gen) * 0.5
            grads[j].append(g.numpy().copy())
            p.grad = g
        if case["max_grad_norm"] > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, case["max_grad_norm"])))
        opt.step()
        for j, p in enumerate(params):
            history[(j, "param")].append(p.detach().numpy().copy())
            for k in states:
                history[(j, k)].append(opt.state[p][k].numpy().copy())
    for j in range(len(params)):
        save(outdir, f"{case['name']}.p{j}.grad", np.stack(grads[j]))
        for k in ["param"] + states:
            save(outdir, f"{case['name']}.p{j}.{k}", np.stack(history[(j, k)]))
    if norms:
        save(outdir, f"{case['name']}.norm", np.array(norms, dtype=np.float32))
    return dict(case, lr=lr, steps=STEPS, shapes=SHAPES, states=states)


def run_ce_case(outdir, case, seed):
    gen = torch.Generator().manual_seed(seed)
    N, C = case["N"], case["C"]
    logits = (torch.randn(N, C, generator=gen) * case["scale"] + case["offset"]).requires_grad_(True)
    labels = torch.randint(0, C, (N,), generator=gen)
    for n in case["ignored"]:
        labels[n] = case["ignore_index"]
    loss = torch.nn.functional.cross_entropy(logits, labels, ignore_index=case["ignore_index"])
    loss.backward(torch.tensor(case["dloss"]))
    save(outdir, case["name"] + ".logits", logits.detach().numpy())
    save(outdir, case["name"] + ".labels", labels.numpy().astype(np.int64))
    save(outdir, case["name"] + ".loss", np.array(loss.item(), dtype=np.float32))
    save(outdir, case["name"] + ".dlogits", logits.grad.numpy())
    return case


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: optim_reference.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    manifest = {
        "torch_version": torch.__version__,
        "optim": [run_optim_case(outdir, c, 100 + i) for i, c in enumerate(OPTIM_CASES)],
        "cross_entropy": [run_ce_case(outdir, c, 200 + i) for i, c in enumerate(CE_CASES)],
    }
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()

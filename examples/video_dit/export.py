#!/usr/bin/python3
"""Exports the video DiT twice from one seeded set of weights, and writes the specs.

    export.py --out DIR [--batch B] [--samples N] [--steps N] [--lr LR] [--min-lr LR] [--warmup N]
              [--seed S] [model flags]

writes
  DIR/train.onnx      RectifiedFlowLoss: inputs clean [B, F, H, W], noise [B, F, H, W], t int64 [B];
                      output loss (the model computes its own loss: train.loss.kind: output)
  DIR/denoiser.onnx   VideoDiT alone: inputs x [N, F, H, W], tau [N]; output velocity [N, F, H, W]
                      (the same weights, for sampling; weights.json pairs them)
  DIR/state_dict.pt   the initial weights, for the PyTorch reference (torch_reference.py)
  DIR/config.json     the model's configuration and the training hyperparameters
  DIR/spec.yaml, DIR/spec_dp2.yaml, DIR/spec_tp2.yaml
                      training specs: one rank, mesh {dp: 2} and mesh {tp: 2}; each reads
                      clean from DIR/clips.npy (make_data.py), draws noise ~ normal(0, 1) and
                      t ~ uniform_int [0, 1000) every step; AdamW at --lr with a linear
                      warm-up over --warmup steps and a cosine decay to --min-lr at --steps
  DIR/weights.json    which initializer of train.onnx each weight of denoiser.onnx and each
                      PyTorch parameter is (torch names the weights it transposes by a counter,
                      `onnx::MatMul_N`, that differs between the graphs); sample.py copies the
                      trained values along it
"""
import argparse
import json
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as m  # noqa: E402


class Denoiser(torch.nn.Module):
    """VideoDiT under the attribute name the training graph uses, so parameter names agree."""

    def __init__(self, dit):
        super().__init__()
        self.dit = dit

    def forward(self, x, tau):
        return self.dit(x, tau)


def onnx_export(module, example, path, inputs, outputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # opset 16: torch 1.13 writes opset 17's LayerNormalization without a scale for a
        # LayerNorm without affine parameters, which the ONNX checker rejects; at 16 it is
        # ReduceMean/Sub/Pow/Sqrt/Div, which colossal-opt fuses back into one layer_norm.
        torch.onnx.export(module, example, path, input_names=inputs, output_names=outputs, opset_version=16)


def weight_maps(train_path, denoiser_path, state):
    """Which initializer of train.onnx each denoiser weight and each PyTorch parameter is.

    torch's exporter folds a Linear weight's transpose into a new initializer named by a counter
    (`onnx::MatMul_1027`), which differs between the two graphs, so weights are paired by value:
    both exports hold the same initial weights, and no two weights are equal (model.py initializes
    every one at random). Returns ({denoiser initializer: train initializer},
    {state_dict key: [train initializer, transposed]})."""
    import onnx
    from onnx import numpy_helper

    def floats(path):
        return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer
                if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) > 0}

    by_value = {}
    for name, v in floats(train_path).items():
        by_value.setdefault((v.shape, v.tobytes()), []).append(name)

    def find(v, what):
        match = by_value.get((v.shape, v.tobytes()), [])
        if len(match) > 1:
            sys.exit(f"export.py: {what} {list(v.shape)} equals {len(match)} weights of train.onnx")
        return match[0] if match else None

    den = {}
    for name, v in floats(denoiser_path).items():
        den[name] = find(v, f"denoiser weight '{name}'")
        if den[name] is None:
            sys.exit(f"export.py: denoiser weight '{name}' is not a weight of train.onnx")
    params = {}
    for key, p in state.items():
        v = p.detach().numpy()
        hit = find(v, key)
        params[key] = [hit, False] if hit else [find(v.T.copy(), key) if v.ndim == 2 else None, True]
        if params[key][0] is None:
            sys.exit(f"export.py: parameter '{key}' is not an initializer of train.onnx")
    return den, params


def spec_text(cfg, a, mesh=""):
    batch = a.batch
    shape = f"[{batch}, {cfg.frames}, {cfg.size}, {cfg.size}]"
    return (f"mode: train\n"
            f"inputs: {{clean: {shape}, noise: {shape}, t: [{batch}]}}\n"
            + (f"mesh: {{{mesh}}}\n" if mesh else "")
            # Under tp the patch embedding stays whole (its input, 16 pixels, is too narrow to be
            # worth splitting), so the residual stream is whole between blocks and each block is
            # Megatron's layout: one all_reduce after each attention and after the MLP.
            + ("parallel:\n  tensor: {style: 1d, hints: {\"/dit/embed/MatMul\": \"-,-\"}}\n"
               if mesh.startswith("tp") else "") +
            f"train:\n"
            f"  loss: {{kind: output, output: loss}}\n"
            f"  optimizer: {{kind: adamw, lr: {a.lr}, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}}\n"
            f"  lr_schedule: {{kind: cosine, warmup_steps: {a.warmup}, total_steps: {a.steps}, min_lr: {a.min_lr}}}\n"
            f"  frozen: [dit.freqs, dit.pos_spatial, dit.pos_temporal]   # fixed sine-cosine tables\n"
            f"  inputs:\n"
            f"    clean: {{npy: clips.npy}}\n"
            f"    noise: {{normal: {{mean: 0.0, std: 1.0}}}}\n"
            f"    t: {{uniform_int: [0, {m.T_STEPS}]}}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=16, help="global batch of a training step")
    ap.add_argument("--samples", type=int, default=8, help="batch of the denoiser graph (clips sampled at once)")
    ap.add_argument("--lr", type=float, default=2e-3, help="AdamW's peak learning rate")
    ap.add_argument("--min-lr", type=float, default=1e-4, help="the cosine schedule's last learning rate")
    ap.add_argument("--warmup", type=int, default=50, help="linear warm-up steps")
    ap.add_argument("--steps", type=int, default=1500, help="the schedule's total_steps (the length of the run)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed of the initial weights")
    d = m.Config()
    ap.add_argument("--frames", type=int, default=d.frames)
    ap.add_argument("--size", type=int, default=d.size)
    ap.add_argument("--patch", type=int, default=d.patch)
    ap.add_argument("--dim", type=int, default=d.dim)
    ap.add_argument("--heads", type=int, default=d.heads)
    ap.add_argument("--depth", type=int, default=d.depth)
    a = ap.parse_args()
    cfg = m.Config(frames=a.frames, size=a.size, patch=a.patch, dim=a.dim, heads=a.heads, depth=a.depth)
    if cfg.size % cfg.patch or cfg.dim % cfg.heads:
        ap.error("--size must be a multiple of --patch and --dim of --heads")
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    dit = m.VideoDiT(cfg)
    clip = (cfg.frames, cfg.size, cfg.size)
    onnx_export(m.RectifiedFlowLoss(dit),
                (torch.zeros(a.batch, *clip), torch.zeros(a.batch, *clip), torch.zeros(a.batch, dtype=torch.int64)),
                os.path.join(a.out, "train.onnx"), ["clean", "noise", "t"], ["loss"])
    onnx_export(Denoiser(dit), (torch.zeros(a.samples, *clip), torch.zeros(a.samples)),
                os.path.join(a.out, "denoiser.onnx"), ["x", "tau"], ["velocity"])
    den, params = weight_maps(os.path.join(a.out, "train.onnx"), os.path.join(a.out, "denoiser.onnx"),
                              dict(dit.named_parameters()))
    with open(os.path.join(a.out, "weights.json"), "w") as f:
        json.dump({"denoiser": den, "torch": params}, f, indent=1)
    torch.save(dit.state_dict(), os.path.join(a.out, "state_dict.pt"))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump({"model": cfg.as_dict(), "batch": a.batch, "samples": a.samples, "lr": a.lr,
                   "lr_schedule": {"warmup_steps": a.warmup, "total_steps": a.steps, "min_lr": a.min_lr},
                   "seed": a.seed}, f,
                  indent=1)
    for name, mesh in (("spec.yaml", ""), ("spec_dp2.yaml", "dp: 2"), ("spec_tp2.yaml", "tp: 2")):
        with open(os.path.join(a.out, name), "w") as f:
            f.write(spec_text(cfg, a, mesh))
    n = sum(p.numel() for p in dit.parameters() if p.requires_grad)
    print(f"{a.out}: train.onnx (batch {a.batch}), denoiser.onnx (batch {a.samples}), {n} trained parameters, "
          f"clips [{cfg.frames}, {cfg.size}, {cfg.size}], {(cfg.size // cfg.patch) ** 2} patches of "
          f"{cfg.patch}x{cfg.patch} per frame, {cfg.depth} blocks of width {cfg.dim}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""End-to-end CNN training: a small fully convolutional net exported from PyTorch trains with
colossal-run exactly as PyTorch trains it.

    cnn_train_e2e.py --case sgd|accum|bf16|dp|batchnorm --workdir W [--opt PATH --run PATH] [--threads N] [--steps N]

The model (ByteCNN below, seeded, exported with torch.onnx.export at opset 17) reads byte tokens
[B, 64] as an 8×8 image with 4 embedding channels and predicts every position's byte, logits
[B, 64, 256], an encoder-decoder of the CNN family's ops: Conv 3×3 + ReLU, MaxPool 2×2, a grouped
strided Conv, bilinear Resize ×2, reflect Pad + AveragePool 3×3, ConvTranspose 2×2 stride 2, nearest
Resize ×2 on a skip branch, residual adds and a 1×1 Conv head. The loss is the spec's cross_entropy
against the next bytes (docs/spec.md "Training data order"), the data Debian's
/usr/share/common-licenses (base-files) as uint8 tokens.

  sgd    --steps (20) steps of SGD (lr 0.05, momentum 0.9, weight decay 0.01), B 8: per step
         |loss − loss_torch| ≤ 1e-4·|loss_torch| and grad_norm within 1e-3 relative of
         torch.optim.SGD's run from the same weights on the same batches (float32 both);
  accum  the same with grad_accum 2 (colossal-split-batch before autodiff: the backward ops run
         on row blocks), against the same PyTorch run (the mean of two half-batch means is the
         batch mean);
  bf16   `precision: {compute: bf16}` (convs on bf16 copies of x and w with f32 results; their VJPs
         widen the bf16 copies and run in f32): per step within 5e-3 relative of PyTorch's fp32 run
         (the tolerance of e2e.bf16.train), grad_norm within 2e-2;
  dp     `mesh: {dp: 2}` under mpirun -np 2 (each rank differentiates its 4 rows; the gradient
         all_reduce sums conv_grad_weight's per-rank sums), within 1e-4 of PyTorch's one-rank run;
  batchnorm  a BatchNorm2d after the first conv, exported with TrainingMode.TRAINING (batch
         statistics, differentiated through the importer's decomposition) and trained by PyTorch in
         train mode: as `sgd`. The running statistics are not checked (colossal-run does not
         update them yet).

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no /usr/share/common-licenses; dp: no
mpirun).
"""
import glob
import json
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402

sys.path.insert(0, os.path.join(u.REPO, "examples", "train"))
import torch_reference as tr  # noqa: E402  (data order and optimizers as colossal-run has them)

B, T, V = 8, 64, 256
SGD = {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}


class ByteCNN(nn.Module):
    """tokens [B, 64] -> logits [B, 64, 256] through an 8×8 feature map."""

    def __init__(self, batch_norm=False):
        super().__init__()
        self.emb = nn.Embedding(V, 4)
        self.c1 = nn.Conv2d(4, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8) if batch_norm else nn.Identity()
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.head = nn.Conv2d(8, V, 1)

    def forward(self, input_ids):
        n = input_ids.shape[0]
        x = self.emb(input_ids).reshape(n, 8, 8, 4).permute(0, 3, 1, 2)
        h1 = F.relu(self.bn(self.c1(x)))                           # [n, 8, 8, 8]
        p1 = F.max_pool2d(h1, 2)                                   # [n, 8, 4, 4]
        h2 = F.relu(self.c2(p1))                                   # [n, 16, 2, 2]
        u1 = F.interpolate(h2, scale_factor=2.0, mode="bilinear", align_corners=False)
        u1 = F.avg_pool2d(F.pad(u1, (1, 1, 1, 1), mode="reflect"), 3, 1)  # [n, 16, 4, 4]
        skip = F.interpolate(p1, scale_factor=2.0, mode="nearest")  # [n, 8, 8, 8]
        y = self.head(F.relu(self.up(u1) + skip + h1))             # [n, 256, 8, 8]
        return y.reshape(n, V, T).permute(0, 2, 1)


def setup(args, batch_norm=False):
    """Exports the model and writes the token file; returns (model.onnx, state_dict, data)."""
    texts = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    if not texts:
        print("skipped: /usr/share/common-licenses (Debian's base-files) is absent")
        sys.exit(u.SKIP)
    os.makedirs(args.workdir, exist_ok=True)
    data = os.path.join(args.workdir, "tokens.bin")
    with open(data, "wb") as f:
        for t in texts[:4]:
            with open(t, "rb") as g:
                f.write(g.read())
    torch.manual_seed(0)
    model = ByteCNN(batch_norm)
    onnx_path = os.path.join(args.workdir, "model.onnx")
    mode = torch.onnx.TrainingMode.TRAINING if batch_norm else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(B, T, dtype=torch.int64),), onnx_path, input_names=["input_ids"],
                          output_names=["logits"], opset_version=17, training=mode)
    return onnx_path, {k: v.clone() for k, v in model.state_dict().items()}, data


def torch_run(state, data, steps, batch_norm=False):
    """(loss, grad_norm) per step of torch.optim.SGD on colossal-run's batches."""
    model = ByteCNN(batch_norm)
    model.load_state_dict(state)
    model.train()
    tokens = tr.load_tokens(data, "uint8", V, T)
    opt = tr.make_optimizer(SGD, model.parameters(), "cnn_train_e2e")
    out = []
    for s in range(steps):
        x, y = tr.batch(tokens, s, B, T)
        opt.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters()))
        opt.step()
        out.append((loss.item(), norm.item()))
    return out


def colossal_run(args, onnx_path, data, steps, grad_accum, precision="fp32", dp=1):
    opt, run = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
    d = os.path.join(args.workdir, f"accum{grad_accum}_{precision}_dp{dp}")
    os.makedirs(d, exist_ok=True)
    spec, plan, metrics = (os.path.join(d, n) for n in ("spec.yaml", "model.cplan", "metrics.jsonl"))
    optimizer = ", ".join(f"{k}: {v}" for k, v in SGD.items())
    with open(spec, "w") as f:
        f.write(f"mode: train\ninputs: {{input_ids: [{B}, {T}]}}\ntrain:\n"
                "  loss: {kind: cross_entropy, logits: logits, labels: labels}\n"
                f"  optimizer: {{{optimizer}}}\n  grad_accum: {grad_accum}\n"
                f"precision: {{compute: {precision}}}\n" + (f"mesh: {{dp: {dp}}}\n" if dp > 1 else ""))
    u.compile_plan(opt, onnx_path, spec, plan)
    cmd = [run, plan, "train", "--data", data, "--token-dtype", "uint8", "--steps", str(steps),
           "--metrics", metrics, "--threads", str(args.threads if dp == 1 else 1)]
    if dp > 1:
        import dp_e2e  # mpirun and its environment as the dp tests run it
        dp_e2e.run_mpi(dp, cmd, f"colossal-run train on {dp} ranks")
    else:
        u.run(cmd, "colossal-run train", timeout=600)
    with open(metrics) as f:
        return [json.loads(line) for line in f]


def compare(ours, ref, loss_tol=1e-4, norm_tol=1e-3):
    ok, worst = True, 0.0
    for s, (m, (loss, norm)) in enumerate(zip(ours, ref)):
        lerr = abs(m["loss"] - loss) / abs(loss)
        nerr = abs(m["grad_norm"] - norm) / max(abs(norm), 1e-12)
        worst = max(worst, lerr)
        bad = lerr > loss_tol or nerr > norm_tol
        ok &= not bad
        print(f"step {s:2d}: loss {m['loss']:.7f} torch {loss:.7f} (rel {lerr:.1e})  "
              f"grad_norm {m['grad_norm']:.6f} torch {norm:.6f} (rel {nerr:.1e}){'  MISMATCH' if bad else ''}")
    if len(ours) != len(ref):
        print(f"colossal-run wrote {len(ours)} steps, expected {len(ref)}")
        ok = False
    # The run must learn something, or equal losses would prove little.
    if ref[-1][0] >= ref[0][0]:
        print(f"the loss did not fall ({ref[0][0]:.4f} -> {ref[-1][0]:.4f})")
        ok = False
    print(f"worst relative loss difference {worst:.1e} over {len(ref)} steps")
    return ok


def case(grad_accum, precision="fp32", loss_tol=1e-4, norm_tol=1e-3, dp=1, batch_norm=False):
    def run_case(args):
        onnx_path, state, data = setup(args, batch_norm)
        ours = colossal_run(args, onnx_path, data, args.steps, grad_accum, precision, dp)
        return compare(ours, torch_run(state, data, args.steps, batch_norm), loss_tol, norm_tol)
    return run_case


if __name__ == "__main__":
    u.case_main(__doc__, {"sgd": case(1), "accum": case(2), "bf16": case(1, "bf16", 5e-3, 2e-2),
                          "dp": case(1, dp=2), "batchnorm": case(1, batch_norm=True)}, threads=2, steps=20)

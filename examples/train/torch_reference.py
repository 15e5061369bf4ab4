#!/usr/bin/python3
"""Train the exported PyTorch model the way `colossal-run M.cplan train` does: the PyTorch reference.

    /usr/bin/python3 examples/train/torch_reference.py --model-dir DIR --spec SPEC.yaml \\
        --data TOKENS.bin [--token-dtype uint8|uint16] --steps N --metrics M.jsonl [--threads N] \\
        [--logits-input IDS.npy --logits-output OUT.npy] [--skip-steps S1,S2,...]

DIR is what examples/models/export.py wrote (config.json: the model configuration; state_dict.pt: the
exact weights traced into model.onnx), so this run starts from the weights colossal-opt compiled.
SPEC is the same training spec colossal-opt read (docs/training.md): `inputs` gives the global batch
[B, T]; `train` the loss (cross_entropy with ignore_index), the optimizer, the LR schedule, grad_clip
and grad_accum; `precision.compute: bf16` runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16) (fp32 weights and optimizer state).

What it does, step s = 0 .. N-1 (docs/training.md, docs/spec.md "Training data order"):
  - tokens: the file as little-endian uint8/uint16, N_tok of them; row r of step s starts at
    ((s*B + r)*T) mod (N_tok - T - 1); inputs are the T tokens from there, labels the next T;
  - microbatch k of A = grad_accum takes rows [k*B/A, (k+1)*B/A); its loss is
    F.cross_entropy(logits, labels, ignore_index) (mean over its positions); (loss_k / A).backward();
    the step's loss is the mean of the A microbatch losses;
  - grad_norm = the global L2 norm of all gradients (torch.nn.utils.clip_grad_norm_'s total norm);
    with grad_clip > 0, clip_grad_norm_(params, grad_clip) scales them;
  - lr from the schedule (constant, or linear warm-up then cosine to min_lr, computed in double),
    set on the optimizer's param group; then optimizer.step() with torch.optim.AdamW / Adam / SGD
    (PyTorch's own implementations: the definition colossal's update kernels follow), except for
    the steps of --skip-steps (colossal-run's skipped non-finite steps: no optimizer.step());
  - one JSON line {"step", "loss", "lr", "grad_norm", "tokens_per_s", "skipped", "skipped_total"}
    to --metrics, the format of colossal-run's metrics (tokens_per_s = B*T / the step's wall time).

Every parameter is in one group (weight decay on all of them, as the spec's empty `no_decay`);
`frozen` and `no_decay` regexes name ONNX parameters, which this script cannot map to PyTorch's, so
a spec with either is refused. --threads (default: the number of CPUs) sets torch.set_num_threads.

--logits-input/--logits-output: after training, run the trained model's forward on int64 [B', T']
ids and save float32 logits, to compare with an exported ONNX model or colossal-run's forward.

Errors (exit 2, one line naming the file or key): a missing model directory file, a spec key this
script does not know, a data file shorter than T + 2 tokens, a token id >= the vocabulary (naming its
offset).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))
from gpt2 import GPT2, GPT2Config  # noqa: E402


def die(msg):
    print(f"torch_reference.py: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def load_spec(path):
    """Returns (B, T, train dict) from a training spec; unknown train keys are errors."""
    import yaml
    try:
        with open(path) as f:
            spec = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        die(f"{path}: {e}")
    if not isinstance(spec, dict) or spec.get("mode") != "train":
        die(f"{path}: not a training spec (mode: train)")
    inputs = spec.get("inputs") or {}
    if len(inputs) != 1:
        die(f"{path}: inputs: expected exactly one token input, got {sorted(inputs)}")
    (shape,) = inputs.values()
    if not (isinstance(shape, list) and len(shape) == 2):
        die(f"{path}: inputs: the token input must be [B, T], got {shape}")
    train = spec.get("train") or {}
    known = {"loss", "optimizer", "lr_schedule", "grad_clip", "grad_accum", "frozen", "no_decay"}
    for k in train:
        if k not in known:
            die(f"{path}: train.{k}: unknown key")
    for k in ("frozen", "no_decay"):
        if train.get(k):
            die(f"{path}: train.{k}: not supported by the PyTorch reference (regexes name ONNX parameters)")
    for k in ("mesh", "parallel", "zero", "passes"):
        if spec.get(k):
            die(f"{path}: {k}: the PyTorch reference runs one rank, fp32 or bf16 autocast only")
    prec = (spec.get("precision") or {}).get("compute", "fp32")
    if prec not in ("fp32", "bf16"):
        die(f"{path}: precision.compute: {prec}: the PyTorch reference runs fp32 or bf16 only")
    train = dict(train, precision=prec)
    return int(shape[0]), int(shape[1]), train


def make_optimizer(cfg, params, path):
    """torch.optim optimizer for the spec's train.optimizer (docs/training.md defaults)."""
    kind = cfg.get("kind")
    if "lr" not in cfg:
        die(f"{path}: train.optimizer.lr is required")
    lr = float(cfg["lr"])
    if kind in ("adamw", "adam"):
        betas = tuple(float(b) for b in cfg.get("betas", [0.9, 0.999]))
        eps = float(cfg.get("eps", 1e-8))
        wd = float(cfg.get("weight_decay", 0.01 if kind == "adamw" else 0.0))
        cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
        return cls(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(cfg.get("momentum", 0.0)),
                               dampening=float(cfg.get("dampening", 0.0)),
                               weight_decay=float(cfg.get("weight_decay", 0.0)),
                               nesterov=bool(cfg.get("nesterov", False)))
    die(f"{path}: train.optimizer.kind: '{kind}' (expected adamw, adam or sgd)")


def lr_at(step, base_lr, sched):
    """LR of step `step` (from 0): docs/training.md "LR schedules", in double."""
    kind = (sched or {}).get("kind", "constant")
    if kind == "constant":
        return base_lr
    warmup = int(sched.get("warmup_steps", 0))
    total = int(sched["total_steps"])
    min_lr = float(sched.get("min_lr", 0.0))
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def load_tokens(path, dtype, vocab, T):
    try:
        raw = np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<"))
    except OSError as e:
        die(f"{path}: {e}")
    if raw.size < T + 2:
        die(f"{path}: {raw.size} tokens, fewer than one sequence needs (T + 2 = {T + 2})")
    bad = np.nonzero(raw >= vocab)[0]
    if bad.size:
        die(f"{path}: token {int(raw[bad[0]])} at offset {int(bad[0])} is outside the vocabulary ({vocab})")
    return torch.from_numpy(raw.astype(np.int64))


def batch(tokens, step, B, T):
    """(inputs, labels), int64 [B, T]: docs/spec.md "Training data order"."""
    n = tokens.numel()
    starts = [((step * B + r) * T) % (n - T - 1) for r in range(B)]
    idx = torch.tensor(starts, dtype=torch.int64)[:, None] + torch.arange(T + 1)[None, :]
    rows = tokens[idx]
    return rows[:, :T].contiguous(), rows[:, 1:].contiguous()


def build_model(model_dir):
    for f in ("config.json", "state_dict.pt"):
        if not os.path.isfile(os.path.join(model_dir, f)):
            die(f"{model_dir}: no {f} (write it with examples/models/export.py)")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    if config.get("arch") != "gpt2":
        die(f"{model_dir}/config.json: arch '{config.get('arch')}': the reference trains gpt2 models")
    model = GPT2(GPT2Config(**config["model"]))
    model.load_state_dict(torch.load(os.path.join(model_dir, "state_dict.pt")))
    return model, config


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--token-dtype", default="uint8", choices=["uint8", "uint16"])
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--metrics", help="JSON lines, one per step (colossal-run's format)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--print-every", type=int, default=0, help="print a progress line every K steps")
    p.add_argument("--logits-input", help="after training: int64 ids .npy to run the trained model on")
    p.add_argument("--logits-output", help="with --logits-input: where to save the float32 logits")
    p.add_argument("--skip-steps", default="",
                   help="comma-separated steps whose update is not applied (as colossal-run --on-nonfinite skip "
                        "does: no optimizer.step(), so its step count does not advance; gradients zeroed)")
    args = p.parse_args()
    if args.steps < 1:
        die("--steps must be >= 1")
    if bool(args.logits_input) != bool(args.logits_output):
        die("--logits-input and --logits-output go together")
    torch.set_num_threads(args.threads)

    B, T, train = load_spec(args.spec)
    model, config = build_model(args.model_dir)
    vocab = config["model"]["vocab_size"]
    if T > config["model"]["block_size"]:
        die(f"{args.spec}: T = {T} exceeds the model's context {config['model']['block_size']}")
    loss_cfg = train.get("loss") or {"kind": "cross_entropy"}
    if loss_cfg.get("kind", "cross_entropy") != "cross_entropy":
        die(f"{args.spec}: train.loss.kind: only cross_entropy is reproduced here")
    ignore_index = int(loss_cfg.get("ignore_index", -100))
    accum = int(train.get("grad_accum", 1))
    if accum < 1 or B % accum:
        die(f"{args.spec}: train.grad_accum = {accum} must divide the batch {B}")
    clip = float(train.get("grad_clip") or 0.0)
    opt_cfg = train.get("optimizer") or {}
    params = list(model.parameters())
    opt = make_optimizer(opt_cfg, params, args.spec)
    base_lr = float(opt_cfg["lr"])
    tokens = load_tokens(args.data, args.token_dtype, vocab, T)
    mb = B // accum
    try:
        skip = {int(x) for x in args.skip_steps.split(",") if x.strip()}
    except ValueError:
        die(f"--skip-steps: expected comma-separated step numbers, got '{args.skip_steps}'")

    # precision.compute: bf16 -> torch.autocast on the CPU in bf16 (fp32 master weights and
    # optimizer state, as colossal's bf16 plans); fp32 -> no autocast.
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=train["precision"] == "bf16")
    model.train()
    out = open(args.metrics, "w") if args.metrics else None
    for step in range(args.steps):
        t0 = time.perf_counter()
        inputs, labels = batch(tokens, step, B, T)
        losses = []
        for k in range(accum):
            with autocast:
                logits = model(inputs[k * mb:(k + 1) * mb])
                loss = F.cross_entropy(logits.reshape(-1, vocab), labels[k * mb:(k + 1) * mb].reshape(-1),
                                       ignore_index=ignore_index)
            (loss / accum).backward()
            losses.append(loss.item())
        if clip > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        else:
            grad_norm = float(torch.norm(torch.stack([torch.norm(q.grad.detach(), 2) for q in params]), 2))
        lr = lr_at(step, base_lr, train.get("lr_schedule"))
        for g in opt.param_groups:
            g["lr"] = lr
        if step not in skip:
            opt.step()
        opt.zero_grad(set_to_none=False)
        dt = time.perf_counter() - t0
        rec = {"step": step, "loss": sum(losses) / accum, "lr": lr, "grad_norm": grad_norm,
               "tokens_per_s": B * T / dt, "skipped": step in skip,
               "skipped_total": sum(1 for s in skip if s <= step)}
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()
        if args.print_every and (step % args.print_every == 0 or step == args.steps - 1):
            print(f"step {step:5d}  loss {rec['loss']:.4f}  lr {lr:.3e}  grad_norm {grad_norm:.3f}  "
                  f"{rec['tokens_per_s']:.0f} tok/s", flush=True)
    if out:
        out.close()

    if args.logits_input:
        ids = torch.from_numpy(np.load(args.logits_input).astype(np.int64))
        model.eval()
        with torch.no_grad():
            np.save(args.logits_output, model(ids).numpy().astype(np.float32))


if __name__ == "__main__":
    main()

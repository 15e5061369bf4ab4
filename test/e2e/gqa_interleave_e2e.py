#!/usr/bin/python3
"""End-to-end check of grouped-query attention written with torch's repeat_interleave.

    gqa_interleave_e2e.py --workdir W [--opt PATH --run PATH] [--threads N]

Exports examples/models/llama.py (2 layers, d_model 32, 4 query heads, 2 kv heads, vocabulary 256,
RoPE, additive causal mask; randomized seeded weights) three times, with the kv heads repeated
  interleave  k.repeat_interleave(2, dim=1)  query head h reads kv head h // 2 (many Llama ports)
  repeat_kv   examples/models/llama.py's own expand + reshape: the same mapping
  tile        k.repeat(1, 2, 1, 1)           query head h reads kv head h % 2 (another model)
with static shapes, input_ids [2, 16]. torch.onnx writes repeat_interleave's
target shape as Expand(const) -> Split -> Concat -> Where(Equal(.., -1)) -> Expand, which must fold.

Checks, per variant: colossal-opt compiles it; `--emit=mlir` holds one colossal.attention per
layer, reading k and v with 2 heads (interleave, repeat_kv: one GQA attention, no split or expand
left) or 4
(tile: the repeat stays, the attention reads the repeated heads); colossal-run's logits match
onnxruntime's within 1e-4 of max|logit|, and onnxruntime matches PyTorch (so a broken export is
reported as such). Exit codes: 0 pass, 1 mismatch, 2 a tool failed.
"""
import argparse
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402

sys.path.insert(0, os.path.join(u.REPO, "examples", "models"))
import llama  # noqa: E402

BATCH, SEQ, HEADS, KV_HEADS = 2, 16, 4, 2
ORIGINAL_REPEAT_KV = llama.repeat_kv
HEAD_DIM = 32 // HEADS
REPEATS = {
    # The reshape states k's shape to torch's exporter: where its shape inference has lost the
    # head dim (layer 2's k after RoPE), torch 1.13 writes repeat_interleave as a Loop over
    # sequences (SplitToSequence, ConcatFromSequence), which colossal does not import; and a view
    # by traced sizes (x.shape) exports a graph onnxruntime rejects.
    "interleave": lambda x, n: x.reshape(BATCH, KV_HEADS, SEQ, HEAD_DIM).repeat_interleave(n, dim=1),
    "repeat_kv": ORIGINAL_REPEAT_KV,
    "tile": lambda x, n: x.repeat(1, n, 1, 1),
}
# Static shapes: torch 1.13's dynamic-shape export of repeat_interleave is the Loop form above.
DYNAMIC_AXES = None
# Heads of k and v that the fused attention reads.
EXPECTED_KV_HEADS = {"interleave": KV_HEADS, "repeat_kv": KV_HEADS, "tile": HEADS}


def export(variant, work):
    """Writes WORK/VARIANT/{model.onnx, spec.yaml, input_ids.npy, torch_logits.npy}; returns the folder."""
    d = os.path.join(work, variant)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    cfg = llama.LlamaConfig(vocab_size=256, max_seq_len=SEQ, n_layer=2, n_head=HEADS, n_kv_head=KV_HEADS,
                            dim=32, hidden_dim=64)
    model = llama.Llama(cfg)
    with torch.no_grad():  # weights of order 1, so that every head matters in the logits
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    model.eval()
    ids = np.random.default_rng(1).integers(0, 256, size=(BATCH, SEQ)).astype(np.int64)
    np.save(os.path.join(d, "input_ids.npy"), ids)
    llama.repeat_kv = REPEATS[variant]
    try:
        with torch.no_grad():
            logits = model(torch.from_numpy(ids)).numpy()
        torch.onnx.export(model, (torch.from_numpy(ids),), os.path.join(d, "model.onnx"),
                          input_names=["input_ids"], output_names=["logits"], opset_version=14,
                          dynamic_axes=DYNAMIC_AXES)
    finally:
        llama.repeat_kv = ORIGINAL_REPEAT_KV
    os.makedirs(os.path.join(d, "torch"), exist_ok=True)
    np.save(os.path.join(d, "torch", "logits.npy"), logits.astype(np.float32))
    with open(os.path.join(d, "spec.yaml"), "w") as f:
        f.write("mode: inference\n")
    return d


def check_fusion(variant, mlir):
    """One colossal.attention per layer whose k and v have the expected number of heads."""
    kv = EXPECTED_KV_HEADS[variant]
    pattern = re.compile(r"colossal\.attention .*: \(tensor<(\d+)x(\d+)x\d+x\d+xf32>, "
                         r"tensor<\d+x(\d+)x\d+x\d+xf32>, tensor<\d+x(\d+)x\d+x\d+xf32>")
    found = [m.groups() for m in pattern.finditer(mlir)]
    ok = len(found) == 2 and all(int(q) == HEADS and int(k) == kv and int(v) == kv for _, q, k, v in found)
    # A fused GQA leaves no head repeat behind (the split and expand of repeat_interleave and
    # repeat_kv are dead); the tile form keeps its expand.
    leftover = mlir.count("colossal.split") + mlir.count("colossal.expand") if kv == KV_HEADS else 0
    print(f"  {variant}: {len(found)} attention ops, (Hq, Hk, Hv) = "
          f"{[(int(q), int(k), int(v)) for _, q, k, v in found]}, expected 2 with ({HEADS}, {kv}, {kv})"
          f"{f'; {leftover} split/expand ops left' if leftover else ''}  {'ok' if ok and not leftover else 'MISMATCH'}")
    return ok and not leftover


def check_variant(variant, args, opt, run_bin):
    d = export(variant, args.workdir)
    model, spec = os.path.join(d, "model.onnx"), os.path.join(d, "spec.yaml")
    inputs = {"input_ids": os.path.join(d, "input_ids.npy")}
    ort_dir = os.path.join(d, "ort")
    u.run_ort(model, inputs, ort_dir, args.threads)
    print(f"{variant}: onnxruntime vs PyTorch")
    ok = u.compare(u.npy_dir(os.path.join(d, "torch")), ort_dir, 1e-4, label="onnxruntime")
    mlir, _, _ = u.run([opt, model, "--spec", spec, "--emit=mlir"], "colossal-opt --emit=mlir")
    ok &= check_fusion(variant, mlir)
    plan = os.path.join(d, "model.cplan")
    u.compile_plan(opt, model, spec, plan)
    out_dir = os.path.join(d, "colossal")
    u.run_plan(run_bin, plan, inputs, out_dir, args.threads)
    print(f"{variant}: colossal-run vs onnxruntime")
    ok &= u.compare(u.npy_dir(ort_dir), out_dir, 1e-4)
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--opt")
    p.add_argument("--run")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    try:
        opt, run_bin = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
        ok = True
        for variant in REPEATS:
            ok &= check_variant(variant, args, opt, run_bin)
    except u.ToolError as e:
        u.die(str(e), 2)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

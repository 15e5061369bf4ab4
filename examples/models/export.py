#!/usr/bin/python3
"""Export a small, seeded-random GPT-2, Llama or BERT model to ONNX with everything a test needs.

    /usr/bin/python3 examples/models/export.py --arch gpt2|llama|bert --opset 14|17 --out DIR [sizes]
    /usr/bin/python3 examples/models/export.py --preset tiny|gpt2-train|nanogpt-char --out DIR [overrides]

writes
    DIR/model.onnx          weights embedded; batch and sequence dims dynamic unless --static
                            (--dynamic-batch: only the batch dim dynamic)
    DIR/spec.yaml           `mode: inference` + `inputs:` binding the dynamic dims to --batch/--seq
    DIR/inputs/NAME.npy     one file per graph input (int64 [batch, seq])
    DIR/reference/NAME.npy  PyTorch's outputs for those inputs (float32)
    DIR/config.json         the model configuration and export options
    DIR/state_dict.pt       the PyTorch state_dict the export was traced with (torch.save), so that a
                            PyTorch training run (examples/train/torch_reference.py) starts from
                            exactly the weights in model.onnx

Presets (training models: GPT-2 style, byte vocabulary 256, untied LM head, nanoGPT's initialisation,
a dynamic batch dim and a static sequence length (--dynamic-batch: `grad_accum` compiles the model at
B/grad_accum rows)); any flag given explicitly overrides the preset:
    tiny           2 layers, d_model 64, 4 heads, T 64, batch 8    (quick experiments)
    gpt2-train     2 layers, d_model 128, 4 heads, T 64, batch 8   (issue 4's PyTorch comparison; the README demo)
    nanogpt-char   6 layers, d_model 384, 6 heads, T 256, batch 8  (nanoGPT's shakespeare_char; bench/)

Everything is deterministic for a given --seed: weights come from torch.manual_seed, inputs from
numpy's default_rng. With --init randomized (the default without a preset) weights are drawn so that
every parameter matters numerically (non-zero biases, norm scales around 1, unit-variance activations,
attention scores of order 1), so a kernel that drops a bias or a scale shows up as an error in the
comparison. With --init nanogpt (the presets) they are what a training run starts from: Linear and
Embedding weights N(0, 0.02), residual projections (`c_proj`) N(0, 0.02/sqrt(2*layers)), zero biases,
LayerNorm scale 1 and shift 0 (Radford et al. 2019; Karpathy's nanoGPT). Equal initial tensors
(the zero biases, the unit LayerNorm scales) are what make torch's exporter share one initializer
behind `Identity` nodes; each of those is still a parameter of its own (docs/spec.md). The op histogram
of the exported graph is printed to stdout.
"""
import argparse
import collections
import json
import math
import os
import sys
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bert import Bert, BertConfig  # noqa: E402
from gpt2 import GPT2, GPT2Config  # noqa: E402
from llama import Llama, LlamaConfig, RMSNorm  # noqa: E402


# Training presets: (flag defaults) applied before argument parsing, so explicit flags override them.
PRESETS = {
    "tiny": dict(layers=2, d_model=64, heads=4, seq=64, context=64, batch=8),
    "gpt2-train": dict(layers=2, d_model=128, heads=4, seq=64, context=64, batch=8),
    "nanogpt-char": dict(layers=6, d_model=384, heads=6, seq=256, context=256, batch=8),
}
PRESET_COMMON = dict(arch="gpt2", vocab=256, untied=True, init="nanogpt", dynamic_batch=True)


def build(args):
    """Returns (model, config, input names, output names)."""
    context = max(args.context, args.seq)
    if args.arch == "gpt2":
        cfg = GPT2Config(vocab_size=args.vocab, block_size=context, n_layer=args.layers, n_head=args.heads,
                         n_embd=args.d_model, tie_embeddings=not args.untied)
        return GPT2(cfg), cfg, ["input_ids"], ["logits"]
    if args.arch == "llama":
        cfg = LlamaConfig(vocab_size=args.vocab, max_seq_len=context, n_layer=args.layers, n_head=args.heads,
                          n_kv_head=args.kv_heads or max(1, args.heads // 2), dim=args.d_model,
                          hidden_dim=args.ffn or 172 * args.d_model // 64)
        return Llama(cfg), cfg, ["input_ids"], ["logits"]
    cfg = BertConfig(vocab_size=args.vocab, max_position_embeddings=context, n_layer=args.layers, n_head=args.heads,
                     hidden=args.d_model, intermediate=args.ffn or 4 * args.d_model)
    return Bert(cfg), cfg, ["input_ids", "token_type_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]


@torch.no_grad()
def randomize_(model):
    """Seeded weights with every parameter numerically relevant (see the module docstring)."""
    for m in model.modules():
        if isinstance(m, (nn.LayerNorm, RMSNorm)):
            m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(0.1 * torch.randn_like(m.bias))
        elif isinstance(m, nn.Embedding):
            m.weight.normal_(0.0, 0.5)
        elif isinstance(m, nn.Linear):
            m.weight.normal_(0.0, 1.0 / math.sqrt(m.in_features))
            if m.bias is not None:
                m.bias.normal_(0.0, 0.1)


@torch.no_grad()
def nanogpt_init_(model, n_layer):
    """nanoGPT's / GPT-2's initialisation (see the module docstring): what training starts from."""
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj") else 0.02
            m.weight.normal_(0.0, std)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.Embedding):
            m.weight.normal_(0.0, 0.02)
        elif isinstance(m, (nn.LayerNorm, RMSNorm)):
            m.weight.fill_(1.0)
            if getattr(m, "bias", None) is not None:
                m.bias.zero_()


def make_inputs(args, names):
    rng = np.random.default_rng(args.seed + 1)
    B, T = args.batch, args.seq
    inputs = {"input_ids": rng.integers(0, args.vocab, size=(B, T), dtype=np.int64)}
    if "token_type_ids" in names:
        tt = np.zeros((B, T), dtype=np.int64)
        tt[:, T // 2:] = 1                    # two segments
        inputs["token_type_ids"] = tt
    if "attention_mask" in names:
        am = np.ones((B, T), dtype=np.int64)
        for b in range(B):                    # row b has 3*b padding positions at the end
            am[b, max(1, T - 3 * b):] = 0
        inputs["attention_mask"] = am
    return inputs


def op_histogram(model_path):
    m = onnx.load(model_path)
    return collections.Counter(n.op_type for n in m.graph.node), m


def main():
    # math.sqrt(k.size(-1)) in the attention traces to a constant, which is what we want.
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), help="a training model (see above); flags override it")
    p.add_argument("--arch", choices=["gpt2", "llama", "bert"], help="required unless --preset")
    p.add_argument("--opset", type=int, default=14, choices=[14, 17])
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--batch", type=int, default=2, help="batch of the inputs and of the spec binding")
    p.add_argument("--seq", type=int, default=16, help="sequence length of the inputs and of the spec binding")
    p.add_argument("--context", type=int, default=64, help="position table / max sequence length (>= --seq)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=0, help="llama only: KV heads (default heads/2, i.e. GQA)")
    p.add_argument("--ffn", type=int, default=0, help="MLP width (default: 4*d_model; llama: 172*d_model/64)")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--static", action="store_true", help="export fixed [batch, seq] shapes (no dynamic axes)")
    p.add_argument("--dynamic-batch", action="store_true",
                   help="only the batch dim dynamic, the sequence length fixed to --seq (training presets)")
    p.add_argument("--untied", action="store_true", help="gpt2 only: an LM head of its own (not tied to wte)")
    p.add_argument("--init", choices=["randomized", "nanogpt"], default="randomized",
                   help="initial weights: randomized (every parameter matters; inference tests) or nanogpt "
                        "(what training starts from)")
    p.add_argument("--quiet", action="store_true", help="do not print the op histogram")
    argv = sys.argv[1:]
    pre = p.parse_known_args(argv)[0]
    if pre.preset:
        p.set_defaults(**PRESET_COMMON, **PRESETS[pre.preset])
    args = p.parse_args(argv)
    # A preset's dynamic batch gives way to an explicit --static (fixed [batch, seq], as most
    # published ONNX files are); both flags given explicitly are an error below.
    if args.static and "--dynamic-batch" not in argv:
        args.dynamic_batch = False
    if not args.arch:
        p.error("--arch is required unless --preset is given")
    if args.untied and args.arch != "gpt2":
        p.error("--untied applies to --arch gpt2 only")
    if args.static and args.dynamic_batch:  # both on the command line; checked before anything is written
        p.error("--static and --dynamic-batch exclude each other")

    torch.manual_seed(args.seed)
    model, cfg, in_names, out_names = build(args)
    if args.init == "nanogpt":
        nanogpt_init_(model, args.layers)
    else:
        randomize_(model)
    model.eval()
    os.makedirs(args.out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(args.out, "state_dict.pt"))

    os.makedirs(os.path.join(args.out, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "reference"), exist_ok=True)
    inputs = make_inputs(args, in_names)
    for name, arr in inputs.items():
        np.save(os.path.join(args.out, "inputs", name + ".npy"), arr)
    torch_args = tuple(torch.from_numpy(inputs[n]) for n in in_names)
    with torch.no_grad():
        outs = model(*torch_args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for name, t in zip(out_names, outs):
        np.save(os.path.join(args.out, "reference", name + ".npy"), t.numpy().astype(np.float32))

    dynamic_axes = None
    if args.dynamic_batch:
        dynamic_axes = {n: {0: "batch"} for n in in_names + out_names}
    elif not args.static:
        dynamic_axes = {n: {0: "batch", 1: "seq"} for n in in_names}
        for n in out_names:
            dynamic_axes[n] = {0: "batch"} if n == "pooler_output" else {0: "batch", 1: "seq"}
    model_path = os.path.join(args.out, "model.onnx")
    torch.onnx.export(model, torch_args, model_path, input_names=in_names, output_names=out_names,
                      dynamic_axes=dynamic_axes, opset_version=args.opset, do_constant_folding=True)
    hist, onnx_model = op_histogram(model_path)
    onnx.checker.check_model(onnx_model)

    binding = ", ".join(f"{n}: [{args.batch}, {args.seq}]" for n in in_names)
    with open(os.path.join(args.out, "spec.yaml"), "w") as f:
        f.write(f"# {args.arch}, opset {args.opset}: written by examples/models/export.py\n"
                f"mode: inference\ninputs: {{{binding}}}\n")
    config = dict(arch=args.arch, opset=args.opset, static=args.static, dynamic_batch=args.dynamic_batch,
                  batch=args.batch, seq=args.seq,
                  seed=args.seed, preset=args.preset, init=args.init, model=vars(cfg) if hasattr(cfg, "__dict__") else str(cfg),
                  torch=torch.__version__, onnx=onnx.__version__, ops=dict(sorted(hist.items())))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if not args.quiet:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{args.preset or args.arch} opset {args.opset}{' static' if args.static else ' dynamic batch' if args.dynamic_batch else ''}: {n_params} parameters, "
              f"{sum(hist.values())} nodes -> {model_path}")
        print("  " + " ".join(f"{k}:{v}" for k, v in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))))


if __name__ == "__main__":
    main()

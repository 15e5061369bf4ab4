#!/usr/bin/python3
"""Exports a model of the serving benchmark as a KV-cache step for onnxruntime (bench/serve/ort_decode.cjs).

    /usr/bin/python3 bench/serve/export_kv.py --work DIR/MODEL

writes DIR/MODEL/model-kv.onnx and model-kv.json. The graph is one step of a batch of sequences
that all hold the same number P of past positions (the benchmark's groups: equal prompt lengths,
equal output lengths):

    input_ids int64 [B, S], past_k / past_v f32 [L, B, Hkv, P, D]
      -> logits f32 [B, V] (the last position's), present_k / present_v f32 [L, B, Hkv, P + S, D]

P = 0 is the prefill (an empty past), S = 1 a decode step. The weights are the model's own: the
project's Llama (examples/models/llama.py) from its state_dict, aidreams260K from llama2.c's
checkpoint.bin with W_q/W_k rows put into llama.py's rotate_half order (the inverse of
prepare.py's reordering), so the step is llama.py's forward with the cache added.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "models"))
import prepare  # noqa: E402
from llama import Llama, LlamaConfig, repeat_kv, rotate_half  # noqa: E402


class KVStep(torch.nn.Module):
    """llama.py's Llama forward over S new positions after P cached ones."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, input_ids, past_k, past_v):
        m, cfg = self.m, self.m.cfg
        B, S = input_ids.shape
        P = past_k.shape[3]
        x = m.tok_embeddings(input_ids)
        cos = m.cos_cached[P:P + S]
        sin = m.sin_cached[P:P + S]
        rows = torch.arange(S).unsqueeze(1) + P
        cols = torch.arange(P + S).unsqueeze(0)
        mask = torch.zeros(S, P + S).masked_fill(cols > rows, float("-inf"))
        keys, values = [], []
        for i, layer in enumerate(m.layers):
            a = layer.attention
            h = layer.attention_norm(x)
            q = a.wq(h).view(B, S, a.n_head, a.head_dim).transpose(1, 2)
            k = a.wk(h).view(B, S, a.n_kv_head, a.head_dim).transpose(1, 2)
            v = a.wv(h).view(B, S, a.n_kv_head, a.head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = torch.cat([past_k[i], k], dim=2)
            v = torch.cat([past_v[i], v], dim=2)
            keys.append(k)
            values.append(v)
            rep = a.n_head // a.n_kv_head
            scores = torch.matmul(q, repeat_kv(k, rep).transpose(2, 3)) / (a.head_dim ** 0.5) + mask
            out = torch.matmul(F.softmax(scores, dim=-1), repeat_kv(v, rep))
            x = x + a.wo(out.transpose(1, 2).reshape(B, S, -1))
            x = x + layer.feed_forward(layer.ffn_norm(x))
        logits = m.output(m.norm(x[:, -1, :]))
        return logits, torch.stack(keys), torch.stack(values)


def pairs_to_rotate_half(w, n_heads):
    """The inverse of prepare.rotate_half_to_pairs."""
    out, cols = w.shape
    d = out // n_heads
    return w.reshape(n_heads, d // 2, 2, cols).transpose(0, 2, 1, 3).reshape(out, cols)


def aidreams_model():
    tensors, cfg = prepare.from_llama2c_checkpoint(os.path.join(prepare.SHARED, "checkpoint.bin"))
    t = dict(tensors)
    model = Llama(LlamaConfig(vocab_size=cfg["vocab_size"], max_seq_len=cfg["max_seq_len"], n_layer=cfg["n_layer"],
                              n_head=cfg["n_head"], n_kv_head=cfg["n_kv_head"], dim=cfg["dim"],
                              hidden_dim=cfg["hidden_dim"], norm_eps=cfg["norm_eps"]))
    sd = {"tok_embeddings.weight": t["token_embd.weight"], "norm.weight": t["output_norm.weight"],
          "output.weight": t["output.weight"]}
    names = dict(attn_norm="attention_norm", attn_q="attention.wq", attn_k="attention.wk", attn_v="attention.wv",
                 attn_output="attention.wo", ffn_norm="ffn_norm", ffn_gate="feed_forward.w1",
                 ffn_down="feed_forward.w2", ffn_up="feed_forward.w3")
    for i in range(cfg["n_layer"]):
        for g, ours in names.items():
            w = t[f"blk.{i}.{g}.weight"]
            if g in ("attn_q", "attn_k"):
                w = pairs_to_rotate_half(w, cfg["n_head"] if g == "attn_q" else cfg["n_kv_head"])
            sd[f"layers.{i}.{ours}.weight"] = w
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()})
    return model, cfg


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", required=True, help="the model's folder (prepare.py's DIR/MODEL)")
    args = p.parse_args()
    info = json.load(open(os.path.join(args.work, "info.json")))
    if info["model"] == "aidreams260K":
        model, cfg = aidreams_model()
    else:
        cfg = info["config"]
        model = Llama(LlamaConfig(**cfg))
        model.load_state_dict(torch.load(os.path.join(args.work, "export", "state_dict.pt")))
    model.eval()
    step = KVStep(model)
    L, hkv, d = cfg["n_layer"], cfg["n_kv_head"], cfg["dim"] // cfg["n_head"]
    ids = torch.zeros(1, 3, dtype=torch.int64)
    past = torch.zeros(L, 1, hkv, 2, d)
    path = os.path.join(args.work, "model-kv.onnx")
    axes = {"input_ids": {0: "batch", 1: "step"}, "past_k": {1: "batch", 3: "past"}, "past_v": {1: "batch", 3: "past"},
            "logits": {0: "batch"}, "present_k": {1: "batch", 3: "total"}, "present_v": {1: "batch", 3: "total"}}
    with torch.no_grad():
        torch.onnx.export(step, (ids, past, past), path, input_names=["input_ids", "past_k", "past_v"],
                          output_names=["logits", "present_k", "present_v"], dynamic_axes=axes, opset_version=14,
                          do_constant_folding=True)
    json.dump(dict(layers=L, kv_heads=hkv, head_dim=d, vocab=cfg["vocab_size"]),
              open(os.path.join(args.work, "model-kv.json"), "w"))
    print(f"{info['model']}: KV-cache step -> {path}")


if __name__ == "__main__":
    main()

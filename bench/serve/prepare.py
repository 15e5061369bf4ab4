#!/usr/bin/python3
"""Prepares one model of the serving benchmark (bench/serve/run.sh) in WORK/MODEL/:

    model.onnx        the model (the project's Llama from examples/models/export.py, random weights;
                      or a link to the shared aidreams260K export)
    spec.yaml         the `mode: generate` spec colossal-opt compiles it with
    model-f32.gguf    the same weights as an f32 GGUF (llama architecture) for llama.cpp
    prompts.json      the workload: per round of every concurrency, the prompts (random token ids,
                      seeded), plus one warm-up round
    requests-cC.jsonl colossal-run generate --requests files, one per concurrency C
    llama-cC.txt      the same requests for bench/serve/llama_harness.cpp
    info.json         configuration, parameter count, prompt and output lengths

    /usr/bin/python3 bench/serve/prepare.py --model llama15m|llama100m|aidreams260K --work DIR
        [--prompt-len 128] [--max-tokens 128] [--concurrency "1 2 4 8"] [--rounds 1] [--seed 0]

GGUF layout (llama.cpp's `llama` architecture): tensors `token_embd`, `blk.N.{attn_norm, attn_q,
attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}`, `output_norm`, `output`, each
weight as PyTorch stores it ([out, in]). llama.cpp rotates (x[2i], x[2i+1]) pairs (the original
RoPE, Su et al. 2021, as llama2.c's checkpoints use); examples/models/llama.py rotates (x[i],
x[i + d/2]) (`rotate_half`), so the rows of each head of W_q and W_k are reordered, row 2i taking
row i and row 2i+1 row i + d/2: q·k is unchanged (both permuted alike) and each pair then meets
its own frequency. The vocabulary is llama2.c's `tokenizer.bin` (512 pieces, SentencePiece-style
`llama` tokenizer metadata); the random models use it too (vocabulary 512), so every system can
load the shared tokenizer and the prompts are token ids.
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gguf_writer as G  # noqa: E402

SHARED = os.path.join(ROOT, "..", "shared", "models", "aidreams260K")
TOKENIZER = os.path.join(SHARED, "tokenizer.bin")

# The project's Llama (examples/models/llama.py) at two sizes; vocabulary 512 (the shared tokenizer's).
LLAMAS = {
    "llama15m": dict(layers=9, d_model=384, heads=6, kv_heads=3),
    "llama100m": dict(layers=15, d_model=768, heads=12, kv_heads=6),
}


MAX_STEP = 256  # the largest step program's tokens (generate.max_batch_tokens)


def read_llama2c_tokenizer(path):
    """llama2.c tokenizer.bin: int32 max_token_length, then per token f32 score, int32 length, bytes."""
    data = open(path, "rb").read()
    offset, pieces = 4, []
    while offset < len(data):
        score, n = struct.unpack_from("<fi", data, offset)
        offset += 8
        pieces.append((data[offset:offset + n], score))
        offset += n
    return pieces


def tokenizer_metadata(vocab_size):
    """SentencePiece-style (`llama`) vocabulary metadata from the llama2.c tokenizer: id 0 unknown,
    1 BOS, 2 EOS, 3..258 byte tokens; spaces in pieces are SentencePiece's U+2581 again."""
    pieces = read_llama2c_tokenizer(TOKENIZER)
    assert len(pieces) == vocab_size, f"tokenizer has {len(pieces)} pieces, the model {vocab_size}"
    tokens, scores, types = [], [], []
    for i, (piece, score) in enumerate(pieces):
        if i == 0:
            text, kind = "<unk>", 2          # UNKNOWN
        elif i in (1, 2):
            text, kind = ("<s>", "</s>")[i - 1], 3  # CONTROL
        elif i < 259:
            text, kind = piece.decode(), 6   # BYTE, "<0xNN>"
        else:
            text, kind = piece.decode("utf-8", "replace").replace(" ", "\u2581"), 1  # NORMAL
        tokens.append(text)
        scores.append(score)
        types.append(kind)
    return [
        ("tokenizer.ggml.model", G.STRING, "llama"),
        ("tokenizer.ggml.tokens", G.ARRAY, (G.STRING, tokens)),
        ("tokenizer.ggml.scores", G.ARRAY, (G.FLOAT32, scores)),
        ("tokenizer.ggml.token_type", G.ARRAY, (G.INT32, types)),
        ("tokenizer.ggml.bos_token_id", G.UINT32, 1),
        ("tokenizer.ggml.eos_token_id", G.UINT32, 2),
        ("tokenizer.ggml.unknown_token_id", G.UINT32, 0),
        ("tokenizer.ggml.add_bos_token", G.BOOL, True),
    ]


def llama_metadata(name, cfg):
    head_dim = cfg["dim"] // cfg["n_head"]
    return [
        ("general.architecture", G.STRING, "llama"),
        ("general.name", G.STRING, name),
        ("general.file_type", G.UINT32, 0),  # all f32
        ("llama.vocab_size", G.UINT32, cfg["vocab_size"]),
        ("llama.context_length", G.UINT32, cfg["max_seq_len"]),
        ("llama.embedding_length", G.UINT32, cfg["dim"]),
        ("llama.block_count", G.UINT32, cfg["n_layer"]),
        ("llama.feed_forward_length", G.UINT32, cfg["hidden_dim"]),
        ("llama.attention.head_count", G.UINT32, cfg["n_head"]),
        ("llama.attention.head_count_kv", G.UINT32, cfg["n_kv_head"]),
        ("llama.rope.dimension_count", G.UINT32, head_dim),
        ("llama.rope.freq_base", G.FLOAT32, cfg["rope_theta"]),
        ("llama.attention.layer_norm_rms_epsilon", G.FLOAT32, cfg["norm_eps"]),
    ] + tokenizer_metadata(cfg["vocab_size"])


def rotate_half_to_pairs(w, n_heads):
    """Rows of W_q / W_k [n_heads * d, in] from rotate_half order to adjacent pairs (module doc)."""
    out, cols = w.shape
    d = out // n_heads
    return w.reshape(n_heads, 2, d // 2, cols).transpose(0, 2, 1, 3).reshape(out, cols)


def gguf_tensors(layers, embed, final_norm, head):
    """layers: per layer a dict of attn_norm, wq, wk, wv, wo, ffn_norm, w1 (gate), w2 (down), w3 (up)."""
    t = [("token_embd.weight", embed)]
    for i, l in enumerate(layers):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", l["attn_norm"]), (b + "attn_q.weight", l["wq"]),
              (b + "attn_k.weight", l["wk"]), (b + "attn_v.weight", l["wv"]),
              (b + "attn_output.weight", l["wo"]), (b + "ffn_norm.weight", l["ffn_norm"]),
              (b + "ffn_gate.weight", l["w1"]), (b + "ffn_down.weight", l["w2"]), (b + "ffn_up.weight", l["w3"])]
    return t + [("output_norm.weight", final_norm), ("output.weight", head)]


def from_state_dict(path, cfg):
    """The weights of examples/models/llama.py (its state_dict.pt), Q/K rows reordered for llama.cpp."""
    import torch
    sd = {k: v.numpy().astype(np.float32) for k, v in torch.load(path).items()}
    layers = []
    for i in range(cfg["n_layer"]):
        p = f"layers.{i}."
        layers.append(dict(
            attn_norm=sd[p + "attention_norm.weight"], ffn_norm=sd[p + "ffn_norm.weight"],
            wq=rotate_half_to_pairs(sd[p + "attention.wq.weight"], cfg["n_head"]),
            wk=rotate_half_to_pairs(sd[p + "attention.wk.weight"], cfg["n_kv_head"]),
            wv=sd[p + "attention.wv.weight"], wo=sd[p + "attention.wo.weight"],
            w1=sd[p + "feed_forward.w1.weight"], w2=sd[p + "feed_forward.w2.weight"],
            w3=sd[p + "feed_forward.w3.weight"]))
    return gguf_tensors(layers, sd["tok_embeddings.weight"], sd["norm.weight"], sd["output.weight"])


def from_llama2c_checkpoint(path):
    """llama2.c's checkpoint.bin (run.c's `Config` header, then the weights grouped by kind over all
    layers; a positive vocab_size means the classifier is the token embedding). Its RoPE is already
    llama.cpp's (adjacent pairs)."""
    data = open(path, "rb").read()
    dim, hidden, n_layer, n_head, n_kv_head, vocab, seq = struct.unpack_from("<7i", data, 0)
    shared_head = vocab > 0
    vocab = abs(vocab)
    f = np.frombuffer(data, dtype="<f4", offset=28)
    kv_dim = dim * n_kv_head // n_head
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        a = f[pos:pos + n].reshape(shape)
        pos += n
        return a

    embed = take(vocab, dim)
    attn_norm, wq, wk = take(n_layer, dim), take(n_layer, dim, dim), take(n_layer, kv_dim, dim)
    wv, wo = take(n_layer, kv_dim, dim), take(n_layer, dim, dim)
    ffn_norm, w1 = take(n_layer, dim), take(n_layer, hidden, dim)
    w2, w3 = take(n_layer, dim, hidden), take(n_layer, hidden, dim)
    final_norm = take(dim)
    take(seq, dim // n_head // 2)  # freq_cis_real
    take(seq, dim // n_head // 2)  # freq_cis_imag
    head = embed if shared_head else take(vocab, dim)
    layers = [dict(attn_norm=attn_norm[i], wq=wq[i], wk=wk[i], wv=wv[i], wo=wo[i], ffn_norm=ffn_norm[i],
                   w1=w1[i], w2=w2[i], w3=w3[i]) for i in range(n_layer)]
    cfg = dict(vocab_size=vocab, max_seq_len=seq, n_layer=n_layer, n_head=n_head, n_kv_head=n_kv_head,
               dim=dim, hidden_dim=hidden, rope_theta=10000.0, norm_eps=1e-5)
    return gguf_tensors(layers, embed, final_norm, head), cfg


def export_llama(name, out, context, seed):
    sizes = LLAMAS[name]
    cmd = [sys.executable, os.path.join(ROOT, "examples", "models", "export.py"), "--arch", "llama",
           "--out", out, "--layers", str(sizes["layers"]), "--d-model", str(sizes["d_model"]),
           "--heads", str(sizes["heads"]), "--kv-heads", str(sizes["kv_heads"]), "--vocab", "512",
           "--context", str(context), "--seq", "8", "--batch", "1", "--seed", str(seed), "--quiet"]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return json.load(open(os.path.join(out, "config.json")))["model"]


def workload(args, vocab):
    """Random prompts (ids in [3, vocab): no special token), one warm-up round and `rounds` rounds of
    C prompts per concurrency C, all from one seeded generator."""
    rng = np.random.default_rng(args.seed)
    draw = lambda: [int(x) for x in rng.integers(3, vocab, size=args.prompt_len)]  # noqa: E731
    work = {}
    for c in args.concurrency:
        work[str(c)] = dict(warmup=[draw() for _ in range(c)],
                            rounds=[[draw() for _ in range(c)] for _ in range(args.rounds)])
    return work


def write_requests(path, rounds, warmup, max_tokens, warmup_tokens):
    """colossal-run generate --requests: the warm-up round at step 0, then each round arriving once
    the engine is idle (an arrival step no round reaches; the engine jumps to it when idle)."""
    with open(path, "w") as f:
        for i, p in enumerate(warmup):
            f.write(json.dumps(dict(id=f"warm-{i}", prompt=p, max_tokens=warmup_tokens, temperature=0,
                                    ignore_eos=True, arrival_step=0)) + "\n")
        for r, prompts in enumerate(rounds):
            for i, p in enumerate(prompts):
                f.write(json.dumps(dict(id=f"r{r}-{i}", prompt=p, max_tokens=max_tokens, temperature=0,
                                        ignore_eos=True, arrival_step=1_000_000 * (r + 1))) + "\n")


def write_llama_requests(path, rounds, warmup, max_tokens, warmup_tokens):
    """bench/serve/llama_harness.cpp's requests: `GROUP ID MAX_TOKENS TOKEN...`, a group per round."""
    with open(path, "w") as f:
        for i, p in enumerate(warmup):
            f.write(" ".join(["warm", f"warm-{i}", str(warmup_tokens)] + [str(t) for t in p]) + "\n")
        for r, prompts in enumerate(rounds):
            for i, p in enumerate(prompts):
                f.write(" ".join([f"r{r}", f"r{r}-{i}", str(max_tokens)] + [str(t) for t in p]) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, choices=sorted(LLAMAS) + ["aidreams260K"])
    p.add_argument("--work", required=True)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--warmup-tokens", type=int, default=4)
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split()], default=[1, 2, 4, 8])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    out = os.path.join(args.work, args.model)
    os.makedirs(out, exist_ok=True)
    max_seq_len = args.prompt_len + args.max_tokens
    onnx_path = os.path.join(out, "model.onnx")

    if args.model == "aidreams260K":
        tensors, cfg = from_llama2c_checkpoint(os.path.join(SHARED, "checkpoint.bin"))
        if max_seq_len > cfg["max_seq_len"]:
            sys.exit(f"prepare.py: {args.model} holds {cfg['max_seq_len']} positions; "
                     f"--prompt-len + --max-tokens is {max_seq_len}")
        if os.path.lexists(onnx_path):
            os.remove(onnx_path)
        os.symlink(os.path.realpath(os.path.join(SHARED, "model.onnx")), onnx_path)
    else:
        export_dir = os.path.join(out, "export")
        # Positions for colossal-opt's one-sequence import: max_seq_len rounded up to a multiple of
        # the largest step and at least twice it (docs/serving.md "Compiler: mode: generate").
        positions = max(2 * MAX_STEP, -(-max_seq_len // MAX_STEP) * MAX_STEP)
        cfg = export_llama(args.model, export_dir, positions, args.seed)
        tensors = from_state_dict(os.path.join(export_dir, "state_dict.pt"), cfg)
        if os.path.lexists(onnx_path):
            os.remove(onnx_path)
        os.symlink("export/model.onnx", onnx_path)
    G.write_gguf(os.path.join(out, "model-f32.gguf"), llama_metadata(args.model, cfg), tensors)

    # Step programs up to MAX_STEP tokens (prompts are prefilled in chunks of that size), at most half
    # the model's positions (colossal-opt cuts them twice into the largest step).
    step = min(MAX_STEP, cfg["max_seq_len"] // 2)
    with open(os.path.join(out, "spec.yaml"), "w") as f:
        f.write("# bench/serve: written by prepare.py\nmode: generate\n"
                f"generate: {{max_seq_len: {max_seq_len}, block_size: 16, max_batch_seqs: {max(args.concurrency)}, "
                f"max_batch_tokens: {step}}}\n")
    work = workload(args, cfg["vocab_size"])
    json.dump(work, open(os.path.join(out, "prompts.json"), "w"))
    for c, w in work.items():
        write_requests(os.path.join(out, f"requests-c{c}.jsonl"), w["rounds"], w["warmup"], args.max_tokens,
                       args.warmup_tokens)
        write_llama_requests(os.path.join(out, f"llama-c{c}.txt"), w["rounds"], w["warmup"], args.max_tokens,
                             args.warmup_tokens)
    # aidreams260K's head is its token embedding (the GGUF carries a copy): counted once.
    params = sum(int(np.prod(a.shape)) for n, a in tensors if n != "output.weight" or args.model != "aidreams260K")
    info = dict(model=args.model, config=cfg, parameters=params, prompt_len=args.prompt_len,
                max_tokens=args.max_tokens, warmup_tokens=args.warmup_tokens, rounds=args.rounds,
                concurrency=args.concurrency, seed=args.seed, tokenizer=os.path.realpath(TOKENIZER))
    json.dump(info, open(os.path.join(out, "info.json"), "w"), indent=1)
    print(f"{args.model}: {params / 1e6:.2f}M parameters, {cfg['n_layer']} layers, dim {cfg['dim']}, "
          f"{cfg['n_head']} heads ({cfg['n_kv_head']} kv), ffn {cfg['hidden_dim']}, vocab {cfg['vocab_size']} -> {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Continued pretraining of a pretrained Llama on a domain corpus, with held-out perplexity before
and after, then text generated from the trained checkpoint.

    examples/llama_continued_pretraining/run.py [--model MODEL.onnx --tokenizer FILE] [--text FILE]...
        [--steps N] [--mesh dp|tp|none] [--lr X] [--prompt TEXT] [--tokens N] [--out DIR]
        [--opt PATH] [--run PATH]

Default model: the shared pretrained aidreams260K (../shared/models/aidreams260K: model.onnx, a
llama2.c Llama of 265K parameters, vocabulary 512, context 128, and its tokenizer.bin). Default
corpus: the license texts of /usr/share/common-licenses (every Debian system has them).

1. compile   colossal-opt: the model in mode: train three times: DIR/train.cplan (B 8 x T 128 under
             --mesh: dp=2 or tp=2, two ranks), DIR/sample.cplan (one row, one rank: sampling) and,
             after step 2, DIR/eval.cplan (every held-out window as one batch, one rank)
2. tokenize  each document is split at a line boundary: its first 90% train, the rest held out;
             `colossal-run sample.cplan tokenize` encodes each part with the model's tokenizer (BOS
             first) -> DIR/data/train.bin, DIR/data/heldout.bin (uint16 ids)
3. before    held-out perplexity of the pretrained model: `colossal-run eval.cplan --program eval`
             on the held-out windows (W rows of 128 tokens at offsets 0, 128, ..., labels the tokens
             one further) gives the mean token cross-entropy L; perplexity = exp(L); and a sample
4. train     `colossal-run --nproc 2 train.cplan train`: --steps (default 300) AdamW steps (warm-up
             and cosine decay, clipping 1.0) on train.bin, evaluated on the same held-out windows
             every 50 steps (eval_loss in DIR/metrics.jsonl), the checkpoint in DIR/ckpt
5. after     the same evaluation with --checkpoint DIR/ckpt: the held-out perplexity after
6. generate  `colossal-run sample.cplan sample --checkpoint DIR/ckpt --tokenizer FILE`: text from
             the trained weights after --prompt

Defaults write into build/llama_continued_pretraining. Needs a build (build/bin/colossal-opt,
colossal-run, with MPI for the two ranks) or --opt/--run, and /usr/bin/python3 with numpy.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The checkout's sibling ../shared (through links: the real path of this file's checkout).
SHARED = os.environ.get("COLOSSAL_SHARED_DIR",
                        os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))),
                                     "..", "shared"))
DEFAULT_MODEL = os.path.join(SHARED, "models", "aidreams260K", "model.onnx")
BATCH, SEQ = 8, 128
EVAL_EVERY = 50


def tool(explicit, name):
    path = explicit or os.environ.get("COLOSSAL_" + name.split("-")[1].upper()) or os.path.join(ROOT, "build", "bin", name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        sys.exit(f"run.py: {path} not found; build first (scripts/build.sh) or pass --{name.split('-')[1]} PATH")
    return path


def sh(cmd, quiet=False):
    """Runs CMD, echoed; returns its stdout when `quiet` (else it goes to the terminal)."""
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE if quiet else None, text=True)
    if p.returncode != 0:
        sys.exit(f"run.py: {os.path.basename(cmd[0])} failed with exit code {p.returncode}")
    return p.stdout


def default_corpus():
    """The regular files of /usr/share/common-licenses, each once (GPL is a link to GPL-3), sorted."""
    d = "/usr/share/common-licenses"
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    return sorted({os.path.realpath(os.path.join(d, n)) for n in names if os.path.isfile(os.path.join(d, n))})


def split_documents(texts, out, heldout=0.1):
    """Step 2's split: each document's lines, the first (1 - heldout) of its bytes to train, the rest
    held out (at a line boundary). Writes OUT/corpus/{train,heldout}/N-NAME.txt; returns both lists."""
    parts = {"train": [], "heldout": []}
    for i, path in enumerate(texts):
        with open(path, "rb") as f:
            data = f.read()
        cut = data.find(b"\n", int(len(data) * (1 - heldout)))
        cut = len(data) if cut < 0 else cut + 1
        for part, chunk in (("train", data[:cut]), ("heldout", data[cut:])):
            if not chunk.strip():
                continue
            d = os.path.join(out, "corpus", part)
            os.makedirs(d, exist_ok=True)
            name = os.path.join(d, f"{i:02d}-{os.path.basename(path)}.txt")
            with open(name, "wb") as f:
                f.write(chunk)
            parts[part].append(name)
    return parts["train"], parts["heldout"]


def write_spec(out, name, batch, mesh=None, lr=1e-3, steps=300):
    """A train-mode spec for the model: B x T token rows, AdamW with warm-up + cosine, clipping."""
    warmup = max(1, min(30, steps // 10))
    text = (f"mode: train\ninputs: {{input_ids: [{batch}, {SEQ}]}}\n"
            + (f"mesh: {{{mesh}: 2}}\n" if mesh else "") +
            "train:\n  loss: {kind: cross_entropy, logits: logits, labels: labels}\n"
            f"  optimizer: {{kind: adamw, lr: {lr}, betas: [0.9, 0.95], weight_decay: 0.01}}\n"
            f"  lr_schedule: {{kind: cosine, warmup_steps: {warmup}, total_steps: {max(steps, warmup)}, "
            f"min_lr: {lr / 10}}}\n"
            "  grad_clip: 1.0\n")
    path = os.path.join(out, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def heldout_windows(tokens_path):
    """The held-out windows every evaluation uses: row k is tokens[k*T : (k+1)*T] and its labels one
    further, k < W, W the multiple of the train batch that train's --eval-data order reaches
    without wrapping ((s*B + r)*T mod (N - T - 1) for s < W/B). Returns (input_ids, labels) int64 [W, T]."""
    ids = np.fromfile(tokens_path, dtype="<u2").astype(np.int64)
    w = (len(ids) - SEQ - 1) // SEQ // BATCH * BATCH
    if w < BATCH:
        sys.exit(f"run.py: {tokens_path} holds {len(ids)} tokens: too few held-out tokens for {BATCH} windows of {SEQ}")
    rows = np.arange(w)[:, None] * SEQ + np.arange(SEQ)[None, :]
    return ids[rows], ids[rows + 1]


def mean_cross_entropy(run, plan, out, tag, checkpoint=None, threads=()):
    """Program `eval` of `plan` on the held-out windows (OUT/data/heldout_{input_ids,labels}.npy):
    its loss output, the mean token cross-entropy in nats."""
    cmd = [run, plan, "--program", "eval", "--input", f"input_ids={out}/data/heldout_input_ids.npy",
           "--input", f"labels={out}/data/heldout_labels.npy", "--output-dir", os.path.join(out, "eval_" + tag)]
    sh(cmd + (["--checkpoint", checkpoint] if checkpoint else []) + list(threads), quiet=True)
    return float(np.load(os.path.join(out, "eval_" + tag, "loss.npy")))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="a Llama ONNX model: input_ids [batch, seq] -> logits")
    p.add_argument("--tokenizer", help="its tokenizer (default: tokenizer.bin beside the model)")
    p.add_argument("--text", action="append", help="a document of the domain corpus (repeatable)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--mesh", default="dp", choices=["dp", "tp", "none"], help="two ranks: data or tensor parallel")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--prompt", default="This License")
    p.add_argument("--tokens", type=int, default=80)
    p.add_argument("--out", default=os.path.join(ROOT, "build", "llama_continued_pretraining"))
    p.add_argument("--opt")
    p.add_argument("--run")
    a = p.parse_args()
    opt, run = tool(a.opt, "colossal-opt"), tool(a.run, "colossal-run")
    tokenizer = a.tokenizer or os.path.join(os.path.dirname(os.path.abspath(a.model)), "tokenizer.bin")
    for f, what in ((a.model, "--model"), (tokenizer, "--tokenizer")):
        if not os.path.isfile(f):
            sys.exit(f"run.py: {f} is absent; point {what} at a pretrained Llama ONNX model and its tokenizer")
    texts = a.text or default_corpus()
    if not texts:
        sys.exit("run.py: /usr/share/common-licenses is empty; pass --text FILE")
    out = os.path.abspath(a.out)
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    mesh = None if a.mesh == "none" else a.mesh
    t0 = time.perf_counter()

    # 1-2. The sample plan first (one row): tokenize checks the tokenizer against its vocabulary.
    sample_plan = os.path.join(out, "sample.cplan")
    sh([opt, a.model, "--spec", write_spec(out, "sample", 1, lr=a.lr, steps=a.steps), "-o", sample_plan])
    train_txt, held_txt = split_documents(texts, out)
    data = {}
    for part, files in (("train", train_txt), ("heldout", held_txt)):
        data[part] = os.path.join(out, "data", part + ".bin")
        cmd = [run, sample_plan, "tokenize", "--tokenizer", tokenizer, "--out", data[part], "--token-dtype", "uint16"]
        for f in files:
            cmd += ["--text", f]
        print(sh(cmd, quiet=True).strip())
    x, y = heldout_windows(data["heldout"])
    np.save(os.path.join(out, "data", "heldout_input_ids.npy"), x)
    np.save(os.path.join(out, "data", "heldout_labels.npy"), y)
    eval_plan, train_plan = os.path.join(out, "eval.cplan"), os.path.join(out, "train.cplan")
    sh([opt, a.model, "--spec", write_spec(out, "eval", len(x), lr=a.lr, steps=a.steps), "-o", eval_plan])
    sh([opt, a.model, "--spec", write_spec(out, "train", BATCH, mesh, a.lr, a.steps), "-o", train_plan])
    n_eval = x.size
    print(f"2. {len(train_txt)} documents, {os.path.getsize(data['train']) // 2} train tokens; held out: "
          f"{len(x)} windows of {SEQ} = {n_eval} tokens")

    # 3. Before.
    before = mean_cross_entropy(run, eval_plan, out, "before")
    print(f"3. held-out perplexity before: {math.exp(before):.3f} (mean cross-entropy {before:.4f} nats/token "
          f"over {n_eval} tokens)")
    gen = [run, sample_plan, "sample", "--tokenizer", tokenizer, "--prompt", a.prompt, "--tokens", str(a.tokens)]
    print("   the pretrained model continues the prompt (greedy):")
    text_before = sh(gen, quiet=True)
    print("   | " + text_before.strip().replace("\n", "\n   | "))

    # 4. Train.
    metrics, ckpt = os.path.join(out, "metrics.jsonl"), os.path.join(out, "ckpt")
    cmd = [run, train_plan, "train", "--data", data["train"], "--token-dtype", "uint16", "--steps", str(a.steps),
           "--metrics", metrics, "--save", ckpt, "--eval-data", data["heldout"], "--eval-every", str(EVAL_EVERY),
           "--eval-steps", str(len(x) // BATCH)]
    t1 = time.perf_counter()
    sh((cmd[:1] + ["--nproc", "2"] + cmd[1:]) if mesh else cmd)
    train_s = time.perf_counter() - t1
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    print(f"4. trained {len(rows)} steps under {mesh + '=2' if mesh else 'one rank'} in {train_s:.1f} s")
    print("   step   loss   held-out perplexity")
    for r in rows:
        if "eval_loss" in r or r["step"] == 0:
            ppl = f"{math.exp(r['eval_loss']):8.3f}" if "eval_loss" in r else "       -"
            print(f"   {r['step']:4d}  {r['loss']:.4f}  {ppl}")

    # 5. After.
    after = mean_cross_entropy(run, eval_plan, out, "after", ckpt)
    print(f"5. held-out perplexity after:  {math.exp(after):.3f} (mean cross-entropy {after:.4f} nats/token; "
          f"before {math.exp(before):.3f})")

    # 6. Generate from the trained checkpoint.
    print("6. the trained model continues the prompt (greedy):")
    text_after = sh(gen[:3] + ["--checkpoint", ckpt] + gen[3:], quiet=True)
    print("   | " + text_after.strip().replace("\n", "\n   | "))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"cross_entropy_before": before, "cross_entropy_after": after, "perplexity_before": math.exp(before),
                   "perplexity_after": math.exp(after), "heldout_windows": len(x), "steps": a.steps,
                   "mesh": mesh, "train_seconds": train_s, "sample_before": text_before, "sample_after": text_after},
                  f, indent=1)
    print(f"held-out perplexity {math.exp(before):.3f} -> {math.exp(after):.3f}; everything took "
          f"{time.perf_counter() - t0:.0f} s")
    if not after < before:
        sys.exit("run.py: the held-out perplexity did not fall")


if __name__ == "__main__":
    main()

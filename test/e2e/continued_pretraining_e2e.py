#!/usr/bin/python3
"""examples/llama_continued_pretraining against independent references (issue 16): the shared
pretrained aidreams260K continues pretraining on /usr/share/common-licenses under dp=2.

    continued_pretraining_e2e.py --case example|tokenizer --workdir W [--opt PATH --run PATH]
                                 [--shared-dir DIR] [--steps N]

  example    runs the example's run.py (--steps, default 60, --mesh dp, --tokens 16) and checks:
             the held-out mean cross-entropy before and after (colossal-run's program `eval`) within
             1e-4 relative of onnxruntime's logits on the same windows, for model.onnx and for the
             trained model (`export --checkpoint --onnx`); after < before; the greedy text `sample
             --checkpoint --tokenizer` printed is onnxruntime's greedy decoding of the trained model
             from the same prompt, decoded by a Python reading of tokenizer.bin;
  tokenizer  `colossal-run tokenize` on a license excerpt and a UTF-8 line equals a Python
             implementation of llama2.c run.c's encode (BOS, dummy prefix, best-score merges);
             `sample --tokenizer` from an empty prompt (BOS alone) prints the text of the recorded
             greedy_from_bos_60.json tokens (60 tokens); errors: tokenize without --out, a
             512-id model sampled without --tokenizer.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (the shared model is absent).
"""
import importlib.util
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e_util as u  # noqa: E402

EXAMPLE = os.path.join(u.REPO, "examples", "llama_continued_pretraining", "run.py")
TOL = 1e-4


def shared_model(args):
    d = os.path.join(args.shared_dir, "models", "aidreams260K")
    if not os.path.isfile(os.path.join(d, "model.onnx")):
        print(f"SKIPPED: the shared model {d}/model.onnx is absent")
        sys.exit(u.SKIP)
    return os.path.join(d, "model.onnx"), os.path.join(d, "tokenizer.bin")


# ---------------------------------------------------------------- llama2.c's tokenizer, in Python
def read_tokenizer(path):
    with open(path, "rb") as f:
        data = f.read()
    pieces, scores, off = [], [], 4
    while off < len(data):
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        pieces.append(data[off:off + n])
        scores.append(score)
        off += n
    return pieces, scores


def encode(pieces, scores, text):
    """run.c's encode(text, bos=1, eos=0): a literal transcription (quadratic, for small texts)."""
    lookup = {}
    for i, p in enumerate(pieces):
        lookup.setdefault(p, i)
    ids = [1]
    if text:
        ids.append(lookup[b" "])
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and j - i < 4 and (text[j] & 0xC0) == 0x80:
            j += 1
        chunk = text[i:j]
        ids += [lookup[chunk]] if chunk in lookup else [b + 3 for b in chunk]
        i = j
    while True:
        best, at = -1e10, -1
        for k in range(len(ids) - 1):
            m = lookup.get(pieces[ids[k]] + pieces[ids[k + 1]])
            if m is not None and scores[m] > best:
                best, at, merged = scores[m], k, m
        if at < 0:
            return ids
        ids[at:at + 2] = [merged]


def decode(pieces, ids, at_start):
    out = b""
    for t in ids:
        if t in (1, 2):
            continue
        p = pieces[t]
        if len(p) == 6 and p.startswith(b"<0x") and p.endswith(b">"):
            p = bytes([int(p[3:5], 16)])
        elif at_start and p.startswith(b" "):
            p = p[1:]
        at_start = False
        out += p
    return out.decode("utf-8", errors="replace")


# ---------------------------------------------------------------- references through onnxruntime
def ort_logits(model, input_ids, work, tag):
    d = os.path.join(work, "ort_" + tag)
    np.save(os.path.join(work, tag + "_ids.npy"), input_ids)
    u.run_ort(model, {"input_ids": os.path.join(work, tag + "_ids.npy")}, d, threads=2, quiet=True)
    return np.load(os.path.join(d, "logits.npy")).astype(np.float64)


def cross_entropy(logits, labels):
    m = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=-1)) + m[..., 0]
    return float(np.mean(lse - np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]))


def ort_greedy(model, ids, steps, work):
    ids = list(ids)
    for _ in range(steps):
        logits = ort_logits(model, np.array([ids], dtype=np.int64), work, "greedy")
        ids.append(int(np.argmax(logits[0, -1])))
    return ids


def example_case(args):
    model, tokenizer = shared_model(args)
    opt, run = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
    w = os.path.abspath(args.workdir)
    prompt, tokens = "the terms of", 16
    u.run([sys.executable, EXAMPLE, "--model", model, "--tokenizer", tokenizer, "--steps", str(args.steps),
           "--mesh", "dp", "--tokens", str(tokens), "--prompt", prompt, "--out", w, "--opt", opt, "--run", run],
          "the example's run.py", timeout=900)
    with open(os.path.join(w, "summary.json")) as f:
        s = json.load(f)
    x, y = np.load(os.path.join(w, "data", "heldout_input_ids.npy")), np.load(os.path.join(w, "data", "heldout_labels.npy"))
    trained = os.path.join(w, "trained.onnx")
    u.run([run, os.path.join(w, "train.cplan"), "export", "--checkpoint", os.path.join(w, "ckpt"), "--onnx", trained],
          "colossal-run export")
    ok = True
    for tag, onnx_path in (("before", model), ("after", trained)):
        want = cross_entropy(ort_logits(onnx_path, x, w, tag), y)
        got = s["cross_entropy_" + tag]
        rel = abs(got - want) / want
        print(f"held-out cross-entropy {tag}: colossal {got:.6f} onnxruntime {want:.6f} (rel {rel:.1e}); "
              f"perplexity {np.exp(got):.3f}{'  MISMATCH' if rel > TOL else ''}")
        ok &= rel <= TOL
    if not s["cross_entropy_after"] < s["cross_entropy_before"]:
        print("the held-out perplexity did not fall  MISMATCH")
        ok = False
    pieces, scores = read_tokenizer(tokenizer)
    ids = ort_greedy(trained, encode(pieces, scores, prompt.encode()), tokens, w)
    want = prompt + decode(pieces, ids[-tokens:], at_start=False)
    got = s["sample_after"].rstrip("\n")
    same = got == want
    print(f"sample from the checkpoint: {got!r}\nonnxruntime's greedy text:   {want!r}{'' if same else '  MISMATCH'}")
    return ok and same


def tokenizer_case(args):
    model, tokenizer = shared_model(args)
    opt, run = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
    w = os.path.abspath(args.workdir)
    os.makedirs(w, exist_ok=True)
    spec = os.path.join(w, "sample.yaml")
    with open(spec, "w") as f:
        f.write("mode: train\ninputs: {input_ids: [1, 128]}\ntrain:\n  loss: {kind: cross_entropy, logits: logits}\n"
                "  optimizer: {kind: adamw, lr: 1.0e-3}\n")
    plan = os.path.join(w, "sample.cplan")
    u.compile_plan(opt, model, spec, plan)
    pieces, scores = read_tokenizer(tokenizer)
    ok = True
    # Two documents: a license excerpt and a line with multi-byte characters (some not in the vocabulary).
    with open("/usr/share/common-licenses/GPL-3", "rb") as f:
        docs = [f.read()[:1500], "Grüße — naïve café, 東京 ✓\n".encode()]
    files = []
    for i, d in enumerate(docs):
        files.append(os.path.join(w, f"doc{i}.txt"))
        with open(files[-1], "wb") as f:
            f.write(d)
    out_bin = os.path.join(w, "tokens.bin")
    stdout, _, _ = u.run([run, plan, "tokenize", "--tokenizer", tokenizer, "--text", files[0], "--text", files[1],
                          "--out", out_bin], "colossal-run tokenize")
    got = np.fromfile(out_bin, dtype="<u2").tolist()
    want = encode(pieces, scores, docs[0]) + encode(pieces, scores, docs[1])
    same = got == want
    print(stdout.strip())
    print(f"tokenize: {len(got)} ids, run.c's encode {len(want)} ids: {'equal' if same else 'DIFFERENT'}")
    ok &= same
    # Greedy from BOS alone: the recorded 60 tokens, as text.
    ckpt_free = [run, plan, "sample", "--tokenizer", tokenizer, "--prompt", "", "--tokens", "60"]
    p = subprocess.run(ckpt_free, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    with open(os.path.join(os.path.dirname(model), "greedy_from_bos_60.json")) as f:
        recorded = json.load(f)
    want_text = decode(pieces, recorded[1:], at_start=True)
    good = p.returncode == 0 and p.stdout.rstrip("\n") == want_text
    print(f"sample from BOS: {p.stdout.strip()!r}\nrecorded tokens: {want_text!r}{'' if good else '  MISMATCH ' + p.stderr}")
    ok &= good
    for cmd, needle in (([run, plan, "tokenize", "--tokenizer", tokenizer, "--text", files[0]], "tokenize needs --out"),
                        ([run, plan, "sample", "--prompt", "x", "--tokens", "1"], "--tokenizer FILE")):
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        good = p.returncode == 1 and needle in p.stderr
        print(f"{' '.join(cmd[2:4])}: {'ok' if good else 'WRONG'}: {p.stderr.strip()}")
        ok &= good
    return ok


if __name__ == "__main__":
    u.case_main(__doc__, {"example": example_case, "tokenizer": tokenizer_case}, threads=2, steps=60)

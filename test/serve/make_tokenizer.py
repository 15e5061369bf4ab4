#!/usr/bin/python3
"""Writes a small llama2.c tokenizer.bin (docs/serving.md "Tokenizers"): <unk>, <s>, </s>, the 256
byte tokens <0x00>..<0xFF>, then two-byte pieces (a space before a letter, pairs of common letters)
up to VOCAB tokens, scored so that earlier pieces merge first. For the server's docs commands, which
must not need files from outside the repository.

    make_tokenizer.py OUT [--vocab 512]
"""
import argparse
import os
import string
import struct


def pieces(vocab):
    out = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)]
    extra = [(" " + c).encode() for c in string.ascii_lowercase + string.ascii_uppercase]
    common = "etaoinshrdlcumwfgypbvk"
    extra += [(a + b).encode() for a in common for b in common]
    extra += [(c + " ").encode() for c in string.ascii_lowercase]
    extra += [(p + " ").encode() for p in ".,!?"]
    seen = set(out)
    for p in extra:
        if len(out) == vocab:
            break
        if p not in seen:
            seen.add(p)
            out.append(p)
    if len(out) < vocab:
        raise SystemExit(f"make_tokenizer.py: at most {len(out)} tokens, not {vocab}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=512)
    args = ap.parse_args()
    toks = pieces(args.vocab)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(struct.pack("<i", max(len(t) for t in toks)))
        for i, t in enumerate(toks):
            score = 0.0 if i < 259 else -float(i - 259)
            f.write(struct.pack("<fi", score, len(t)) + t)


if __name__ == "__main__":
    main()

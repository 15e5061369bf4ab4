#!/usr/bin/python3
"""Turn text files into byte tokens (uint8, vocabulary 256) for `colossal-run M.cplan train --data`.

    /usr/bin/python3 examples/train/prepare_data.py TEXT [TEXT ...] --out DIR [--val-fraction 0.1]

writes DIR/train.bin and, with --val-fraction > 0, DIR/val.bin: the files' bytes concatenated (in the
order given), the last --val-fraction of them going to val.bin. A byte is a token (token = byte value,
so `--token-dtype uint8`, a model with vocabulary 256, and no tokenizer: the decoder of generated
tokens is `bytes(ids)`). Prints the token counts and the byte histogram's size (distinct bytes).

Errors (exit 2): an unreadable or empty input, a split that leaves either part shorter than
--min-tokens (default 130: one row of T = 64 needs T + 2 = 66 tokens; bigger T need more).
"""
import argparse
import os
import sys


def die(msg):
    print(f"prepare_data.py: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("text", nargs="+", help="text (or any) files, concatenated")
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--val-fraction", type=float, default=0.0, help="the tail fraction written to val.bin")
    p.add_argument("--min-tokens", type=int, default=130, help="smallest acceptable train/val size")
    args = p.parse_args()
    if not 0.0 <= args.val_fraction < 1.0:
        die(f"--val-fraction {args.val_fraction} must be in [0, 1)")
    data = bytearray()
    for f in args.text:
        try:
            with open(f, "rb") as fh:
                chunk = fh.read()
        except OSError as e:
            die(f"{f}: {e}")
        if not chunk:
            die(f"{f}: empty file")
        data += chunk
    n_val = int(len(data) * args.val_fraction)
    train, val = bytes(data[:len(data) - n_val]), bytes(data[len(data) - n_val:])
    for name, part in (("train", train), ("val", val)):
        if (name == "train" or n_val) and len(part) < args.min_tokens:
            die(f"{name} part has {len(part)} tokens, fewer than --min-tokens {args.min_tokens}")
    os.makedirs(args.out, exist_ok=True)
    write_atomic(os.path.join(args.out, "train.bin"), train)
    print(f"{os.path.join(args.out, 'train.bin')}: {len(train)} tokens (uint8), {len(set(train))} distinct bytes")
    if n_val:
        write_atomic(os.path.join(args.out, "val.bin"), val)
        print(f"{os.path.join(args.out, 'val.bin')}: {len(val)} tokens (uint8)")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Greedy decoding with full recompute, checked token for token against a recorded sequence.

    greedy_decode.py --workdir W [--engine colossal|ort] [--shared-dir ../shared] [--steps 60]

Starts from BOS (token 1) and appends argmax(logits[0, len-1]) for --steps steps, re-running the
whole sequence each step; the result must equal aidreams260K/greedy_from_bos_60.json (made by an
independent implementation; llama2.c's run.c agrees). Exit 0 = equal, 1 = differs (the first
differing position is printed), 2 = a tool failed, 77 = the shared model directory is absent.

The plan is compiled ONCE, with input_ids bound to [1, --max-len] (64). This is exact, not an
approximation: the model is causal, so the logits at position i depend only on tokens 0..i. Right-
padding the sequence to 64 (with token 0) therefore leaves positions 0..len-1 exactly as in an
unpadded run, and we read position len-1. (`--engine ort --no-pad` runs onnxruntime on the unpadded
sequence instead, which checks that claim.)
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared-dir", default=os.environ.get("COLOSSAL_SHARED_DIR",
                                                         os.path.join(u.REPO, "..", "shared")))
    p.add_argument("--model", help="default: SHARED/models/aidreams260K/model.onnx")
    p.add_argument("--expected", help="default: SHARED/models/aidreams260K/greedy_from_bos_60.json")
    p.add_argument("--engine", default="colossal", choices=["colossal", "ort"])
    p.add_argument("--no-pad", action="store_true", help="ort only: run the unpadded sequence each step")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--bos", type=int, default=1)
    p.add_argument("--max-len", type=int, default=64, help="the compiled sequence length")
    p.add_argument("--workdir", required=True)
    p.add_argument("--opt", help="colossal-opt binary")
    p.add_argument("--run", help="colossal-run binary")
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()

    model_dir = os.path.normpath(os.path.join(args.shared_dir, "models", "aidreams260K"))
    model = args.model or os.path.join(model_dir, "model.onnx")
    expected_file = args.expected or os.path.join(model_dir, "greedy_from_bos_60.json")
    if not os.path.isfile(model) or not os.path.isfile(expected_file):
        print(f"skipped: {model} or {expected_file} is absent")
        return u.SKIP
    with open(expected_file) as f:
        expected = json.load(f)
    if 1 + args.steps > args.max_len:
        u.die(f"--max-len {args.max_len} is too short for 1 + {args.steps} tokens")
    if args.no_pad and args.engine != "ort":
        u.die("--no-pad needs --engine ort (the plan has one compiled shape)")
    os.makedirs(args.workdir, exist_ok=True)
    ids_file = os.path.join(args.workdir, "input_ids.npy")
    out_dir = os.path.join(args.workdir, "out")

    try:
        if args.engine == "colossal":
            opt = u.find_tool("colossal-opt", args.opt)
            run_bin = u.find_tool("colossal-run", args.run)
            spec = os.path.join(args.workdir, "spec.yaml")
            with open(spec, "w") as f:
                f.write(f"mode: inference\ninputs: {{input_ids: [1, {args.max_len}]}}\n")
            plan = os.path.join(args.workdir, "model.cplan")
            t = u.compile_plan(opt, model, spec, plan)
            print(f"compiled in {t:.2f} s")

        tokens = [args.bos]
        t0 = time.perf_counter()
        for step in range(args.steps):
            n = len(tokens)
            width = n if args.no_pad else args.max_len
            ids = np.zeros((1, width), dtype=np.int64)  # right padding with token 0 (see the docstring)
            ids[0, :n] = tokens
            np.save(ids_file, ids)
            quiet = step > 0
            if args.engine == "colossal":
                u.run_plan(run_bin, plan, {"input_ids": ids_file}, out_dir, args.threads, quiet=quiet)
            else:
                u.run_ort(model, {"input_ids": ids_file}, out_dir, args.threads, quiet=quiet)
            logits = np.load(os.path.join(out_dir, "logits.npy"))
            if logits.shape[:2] != (1, width):
                u.die(f"step {step}: logits have shape {list(logits.shape)}, expected [1, {width}, vocab]", 1)
            tokens.append(int(np.argmax(logits[0, n - 1])))
        dt = time.perf_counter() - t0
    except u.ToolError as e:
        u.die(str(e))

    print(f"{args.engine}: {args.steps} steps in {dt:.1f} s ({1000 * dt / args.steps:.0f} ms per step, "
          f"process start included)")
    print("got:     ", tokens)
    if tokens == expected[:len(tokens)] and len(tokens) == len(expected):
        print("PASS: equal to", expected_file)
        return 0
    first = next((i for i, (a, b) in enumerate(zip(tokens, expected)) if a != b), min(len(tokens), len(expected)))
    print("expected:", expected)
    print(f"FAIL: first difference at position {first} (length {len(tokens)} vs {len(expected)})")
    return 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""`colossal-run M.cplan serve` end to end: a Llama example (GQA, RoPE; random weights, vocabulary
512, context 512) compiled with `mode: generate`, served over HTTP and driven by openai_e2e.cjs with
the official `openai` client: completions and chat streamed and not, bad requests, 32 concurrent
streaming clients, a Poisson load of 500 requests x 3 rounds (every answer equal to the request run
alone, resident memory flat) and clients that disconnect. First, that `--threads` holds on the
server's engine thread: after a completion, a `--threads 2` server has exactly one OS thread more
than a `--threads 1` one (the OpenMP worker; the engine thread must not start one). The text is the aidreams260K tokenizer's
(vocabulary 512) over random weights: the checks are about the protocol and the engine, not prose.
Exit 77 (skipped) without the tokenizer, node or the openai package."""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
from e2e_util import EXPORT_PY, SKIP, ToolError, find_tool, run  # noqa: E402

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--workdir", required=True)
p.add_argument("--opt")
p.add_argument("--run")
p.add_argument("--tokenizer", required=True)
p.add_argument("--npm", default=os.path.join(REPO, "third_party", "npm"))
p.add_argument("--node", default=os.environ.get("NODE", "node"))
args = p.parse_args()
if not os.path.isfile(args.tokenizer):
    print(f"SKIPPED: {args.tokenizer} is absent")
    sys.exit(SKIP)
if not os.path.isdir(os.path.join(args.npm, "node_modules", "openai")):
    print(f"SKIPPED: the openai npm package is not in {args.npm} (scripts/install-deps.sh)")
    sys.exit(SKIP)
try:
    opt, runb = find_tool("colossal-opt", args.opt), find_tool("colossal-run", args.run)
    os.makedirs(args.workdir, exist_ok=True)
    model_dir = os.path.join(args.workdir, "llama")
    run([sys.executable, EXPORT_PY, "--arch", "llama", "--out", model_dir, "--quiet", "--layers", "4", "--d-model", "256",
         "--heads", "4", "--kv-heads", "2", "--vocab", "512", "--context", "512"], "export", timeout=600)
    spec = os.path.join(args.workdir, "generate.yaml")
    with open(spec, "w") as f:
        f.write("mode: generate\ngenerate: {max_seq_len: 512, block_size: 16, max_batch_seqs: 16, max_batch_tokens: 64}\n")
    plan = os.path.join(args.workdir, "llama.cplan")
    run([opt, os.path.join(model_dir, "model.onnx"), "--spec", spec, "-o", plan], "colossal-opt", timeout=900)
except ToolError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


def os_threads_after_a_completion(threads):
    """The server's OS threads after one greedy completion, served with --threads `threads`."""
    log = os.path.join(args.workdir, f"threads{threads}.log")
    with open(log, "w") as out:
        server = subprocess.Popen([runb, plan, "serve", "--tokenizer", args.tokenizer, "--port", "0", "--quiet",
                                   "--threads", str(threads)], stdout=out, stderr=subprocess.STDOUT)
    try:
        url = None
        for _ in range(300):
            text = open(log).read()
            if "listening on " in text:
                url = text.split("listening on ", 1)[1].split()[0]
                break
            time.sleep(0.1)
        if url is None:
            sys.exit(f"error: the server did not start: {open(log).read()}")
        body = json.dumps({"prompt": [5, 6, 7, 8], "max_tokens": 8, "temperature": 0}).encode()
        request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=60).read()
        return len(os.listdir(f"/proc/{server.pid}/task"))
    finally:
        server.terminate()
        server.wait()


if os.path.isdir("/proc/self/task"):
    one, two = os_threads_after_a_completion(1), os_threads_after_a_completion(2)
    if two != one + 1:
        sys.exit(f"error: --threads 1 served with {one} OS threads, --threads 2 with {two}: "
                 "the engine thread does not keep --threads")
    print(f"--threads 1: {one} OS threads, --threads 2: {two}")
sys.exit(subprocess.call([args.node, os.path.join(HERE, "openai_e2e.cjs"), "--server", runb, "--plan", plan,
                          "--tokenizer", args.tokenizer, "--npm", args.npm]))

#!/usr/bin/python3
"""Prefix caching's time to first token (issue 15, "Done when" 4): requests that share a
512-token system prompt, against one server with prefix caching and one without.

    bench/prefix_cache/run.py [--work DIR] [--requests 12] [--threads N] [--layers 4]
                              [--d-model 256] [--system 512] [--user 64]

A Llama example (examples/models/export.py: GQA, RoPE, random weights; context 2048) is compiled
with `mode: generate` (max_seq_len 2048, block_size 16, max_batch_tokens 512) and served twice,
`colossal-run serve` with and without `--no-prefix-caching`, both running at once on their own
ports (only the one answering computes). Each request is the system prompt (fixed random ids)
followed by a user part of its own (random ids), as token ids, `max_tokens` 1, greedy, sent one
at a time and alternating between the servers, so a drifting load falls on both alike. TTFT is the
client's wall time of the whole request (prefill plus one sampled token; no streaming). The first
request to each server is a warm-up (it also fills the cache) and is not counted.

Checks, before any number is printed as a result: both servers give the same token for every
request; the cached server reports `usage.prompt_tokens_details.cached_tokens` = the system
prompt's full blocks (512) for every counted request and the other 0; its /metrics
`colossal_prefix_cache_hits_total` grew. Prints the TTFT median and p90 of each and their ratio.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = "/usr/bin/python3"


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def start_server(runb, plan, tokenizer, threads, extra):
    cmd = [runb, plan, "serve", "--tokenizer", tokenizer, "--port", "0", "--quiet", "--threads", str(threads)] + extra
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        m = re.search(r"listening on http://([0-9.]+):(\d+)", line)
        if m:
            return p, int(m.group(2))
    raise SystemExit("run.py: the server did not start")


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    dt = time.perf_counter() - t0
    if r.status != 200:
        raise SystemExit(f"run.py: HTTP {r.status}: {data[:300]!r}")
    return json.loads(data), dt


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise SystemExit(f"run.py: /metrics has no {name}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default=os.path.join(ROOT, "build", "bench", "prefix_cache"))
    p.add_argument("--requests", type=int, default=12)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--system", type=int, default=512, help="system prompt tokens (a multiple of 16)")
    p.add_argument("--user", type=int, default=64, help="user tokens per request")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    opt = os.path.join(ROOT, "build", "bin", "colossal-opt")
    runb = os.path.join(ROOT, "build", "bin", "colossal-run")
    model_dir = os.path.join(args.work, "llama")
    run([PY, os.path.join(ROOT, "examples", "models", "export.py"), "--arch", "llama", "--layers", str(args.layers),
         "--d-model", str(args.d_model), "--heads", "8", "--kv-heads", "4", "--vocab", "512", "--context", "2048",
         "--out", model_dir, "--quiet"])
    spec = os.path.join(args.work, "generate.yaml")
    with open(spec, "w") as f:
        f.write("mode: generate\ngenerate: {max_seq_len: 2048, block_size: 16, max_batch_seqs: 4, max_batch_tokens: 512}\n")
    plan = os.path.join(args.work, "llama.cplan")
    run([opt, os.path.join(model_dir, "model.onnx"), "--spec", spec, "-o", plan])
    tokenizer = os.path.join(args.work, "tokenizer.bin")
    run([PY, os.path.join(ROOT, "test", "serve", "make_tokenizer.py"), tokenizer, "--vocab", "512"])

    rng = np.random.default_rng(0)
    system = rng.integers(3, 512, args.system).tolist()
    prompts = [system + rng.integers(3, 512, args.user).tolist() for _ in range(args.requests + 1)]
    cached_server, cached_port = start_server(runb, plan, tokenizer, args.threads, [])
    plain_server, plain_port = start_server(runb, plan, tokenizer, args.threads, ["--no-prefix-caching"])
    try:
        hits0 = metric(cached_port, "colossal_prefix_cache_hits_total")
        ttft = {"cached": [], "plain": []}
        ok = True
        for i, prompt in enumerate(prompts):
            body = {"model": "llama", "prompt": prompt, "max_tokens": 1, "temperature": 0, "return_token_ids": True}
            order = [("cached", cached_port), ("plain", plain_port)]
            if i % 2:
                order.reverse()
            out = {}
            for name, port in order:
                out[name], dt = post(port, body)
                if i > 0:
                    ttft[name].append(dt)
            a, b = out["cached"], out["plain"]
            if a["choices"][0]["token_ids"] != b["choices"][0]["token_ids"]:
                print(f"FAIL request {i}: the two servers' tokens differ")
                ok = False
            cached = a["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
            plain = b["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
            if i > 0 and (cached != args.system or plain != 0):
                print(f"FAIL request {i}: cached_tokens {cached} (expected {args.system}) and {plain} (expected 0)")
                ok = False
        hits = metric(cached_port, "colossal_prefix_cache_hits_total") - hits0
        if hits <= 0:
            print("FAIL: colossal_prefix_cache_hits_total did not grow")
            ok = False
    finally:
        for s in (cached_server, plain_server):
            s.terminate()
            s.wait(timeout=60)
    if not ok:
        sys.exit(1)

    def summary(xs):
        xs = sorted(xs)
        return statistics.median(xs), xs[min(len(xs) - 1, int(0.9 * len(xs)))]

    cm, c90 = summary(ttft["cached"])
    pm, p90 = summary(ttft["plain"])
    prompt_tokens = args.system + args.user
    print(f"\nprefix cache TTFT: {args.requests} requests of {prompt_tokens} prompt tokens ({args.system} shared), "
          f"Llama {args.layers} layers d_model {args.d_model}, context 2048, {args.threads} threads; "
          f"prefix-cache hits +{int(hits)}")
    print(f"{'server':<24}{'TTFT p50 (ms)':>14}{'TTFT p90 (ms)':>14}")
    print(f"{'prefix caching':<24}{cm * 1e3:>14.1f}{c90 * 1e3:>14.1f}")
    print(f"{'--no-prefix-caching':<24}{pm * 1e3:>14.1f}{p90 * 1e3:>14.1f}")
    print(f"TTFT speedup (p50): {pm / cm:.2f}x")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""The serving benchmark's metrics and tables (bench/serve/run.sh).

    /usr/bin/python3 bench/serve/report.py --work DIR --models "aidreams260K llama15m" [--concurrency "1 2 4 8"]
    /usr/bin/python3 bench/serve/report.py --check-greedy DIR/MODEL/cC

Reads DIR/MODEL/cC/SYSTEM.json (timings: {"wall_s", "requests": [{"id", "arrival_s", "token_s",
["token_ids"]}]}, requests whose id starts with `warm` left out) and prints, per model, one
markdown row per concurrency and system. Metrics as vLLM's benchmark_serving defines them:
TTFT = first token − arrival; TPOT = (last − first token) / (tokens − 1), per request; ITL = every
gap between consecutive tokens of a request (tokens that arrive in one chunk count as gaps of 0;
its 10th percentile is the system's fastest steps, a lower bound on a busy machine's noise);
E2E = last token − arrival; requests/s and output tokens/s over the span from the first arrival
to the last token; decode tokens/s = concurrency / median TPOT (what the steady decode loop
sustains with that many sequences). Percentiles are numpy's (linear).

--check-greedy compares every system's token ids in one folder with colossal's (colossal.jsonl,
`colossal-run generate --output`) and exits 1 when llama.cpp's exact f32 run differs.
"""
import argparse
import json
import os
import sys

import numpy as np

SYSTEMS = [  # (file stem, label)
    ("colossal", "colossal (in-process)"),
    ("colossal-http", "colossal (HTTP)"),
    ("llama-exact", "llama.cpp f32"),
    ("llama-default", "llama.cpp default"),
    ("ort", "onnxruntime"),
]


def load(path):
    data = json.load(open(path))
    return [r for r in data["requests"] if not r["id"].startswith("warm")]


def metrics(requests, concurrency):
    ttft = [r["token_s"][0] - r["arrival_s"] for r in requests]
    tpot = [(r["token_s"][-1] - r["token_s"][0]) / (len(r["token_s"]) - 1) for r in requests]
    itl = [b - a for r in requests for a, b in zip(r["token_s"], r["token_s"][1:])]
    e2e = [r["token_s"][-1] - r["arrival_s"] for r in requests]
    span = max(r["token_s"][-1] for r in requests) - min(r["arrival_s"] for r in requests)
    tokens = sum(len(r["token_s"]) for r in requests)
    pct = lambda xs, q: float(np.percentile(xs, q))  # noqa: E731
    return dict(requests=len(requests), req_s=len(requests) / span, out_tok_s=tokens / span,
                decode_tok_s=concurrency / pct(tpot, 50),
                ttft=(pct(ttft, 50), pct(ttft, 99)), tpot=(pct(tpot, 50), pct(tpot, 99)),
                itl=(pct(itl, 10), pct(itl, 50), pct(itl, 99)), e2e=(pct(e2e, 50), pct(e2e, 99)))


def ms(values):
    return " / ".join(f"{v * 1e3:.2f}" for v in values)


def colossal_ids(folder):
    path = os.path.join(folder, "colossal.jsonl")
    if not os.path.exists(path):
        return None
    lines = [json.loads(l) for l in open(path) if l.strip()]
    return {l["id"]: l["token_ids"] for l in lines if not l["id"].startswith("warm")}


def greedy_matches(folder, stem):
    """(requests equal, requests compared) between SYSTEM.json's token ids and colossal's."""
    ours = colossal_ids(folder)
    path = os.path.join(folder, stem + ".json")
    if ours is None or not os.path.exists(path):
        return None
    theirs = {r["id"]: r.get("token_ids") for r in load(path)}
    same = sum(1 for k, v in theirs.items() if v is not None and ours.get(k) == v)
    return same, len(theirs)


def check_greedy(folder):
    ok = True
    for stem, label in SYSTEMS[1:]:
        m = greedy_matches(folder, stem)
        if m is None:
            continue
        print(f"greedy tokens, {label} vs colossal (in-process): {m[0]} of {m[1]} requests equal")
        if stem == "llama-exact" and m[0] != m[1]:
            ok = False
            ours = colossal_ids(folder)
            for r in load(os.path.join(folder, stem + ".json")):
                if ours.get(r["id"]) != r["token_ids"]:
                    a, b = ours.get(r["id"]), r["token_ids"]
                    first = next(i for i in range(min(len(a), len(b))) if a[i] != b[i]) if a else 0
                    print(f"  {r['id']}: first difference at token {first}: colossal {a[first:first + 8]}, "
                          f"llama.cpp {b[first:first + 8]}")
                    break
    return ok


def table(work, model, concurrency):
    info = json.load(open(os.path.join(work, model, "info.json")))
    cfg = info["config"]
    print(f"\n### {model}: {info['parameters'] / 1e6:.2f}M parameters ({cfg['n_layer']} layers, dim {cfg['dim']}, "
          f"{cfg['n_head']} heads, {cfg['n_kv_head']} KV heads, FFN {cfg['hidden_dim']}, vocabulary "
          f"{cfg['vocab_size']}); prompts {info['prompt_len']} tokens, {info['max_tokens']} output tokens, "
          f"{info['rounds']} round{'s' if info['rounds'] != 1 else ''} of C requests\n")
    print("| C | system | output tok/s | decode tok/s | req/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
          "ITL p10 / p50 / p99 ms | E2E p50 / p99 s | greedy = colossal |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for c in concurrency:
        folder = os.path.join(work, model, f"c{c}")
        found = {}
        for stem, label in SYSTEMS:
            path = os.path.join(folder, stem + ".json")
            if not os.path.exists(path):
                continue
            m = found[stem] = metrics(load(path), c)
            g = greedy_matches(folder, stem)
            same = "—" if stem == "colossal" else (f"{g[0]}/{g[1]}" if g else "n/a")
            print(f"| {c} | {label} | {m['out_tok_s']:.1f} | {m['decode_tok_s']:.1f} | {m['req_s']:.2f} | "
                  f"{ms(m['ttft'])} | {ms(m['tpot'])} | {ms(m['itl'])} | "
                  f"{m['e2e'][0]:.3f} / {m['e2e'][1]:.3f} | {same} |")
        if "colossal" in found:
            row = [c]
            for peer in ("llama-exact", "llama-default"):
                row.append((found["colossal"]["decode_tok_s"] / found[peer]["decode_tok_s"],
                            found["colossal"]["out_tok_s"] / found[peer]["out_tok_s"],
                            found[peer]["itl"][0] / found["colossal"]["itl"][0]) if peer in found else None)
            ratios.append(row)
    if ratios:
        print(f"\n{model}, colossal (in-process) / llama.cpp: decode tok/s (output tok/s) [fastest steps: "
              f"llama.cpp's ITL p10 / colossal's]:\n")
        print("| C | / llama.cpp f32 | / llama.cpp default |")
        print("|---:|---:|---:|")
        for c, exact, default in ratios:
            cell = lambda r: f"{r[0]:.2f} ({r[1]:.2f}) [{r[2]:.2f}]" if r else "n/a"  # noqa: E731
            print(f"| {c} | {cell(exact)} | {cell(default)} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work")
    p.add_argument("--models", default="")
    p.add_argument("--concurrency", default="1 2 4 8")
    p.add_argument("--check-greedy", metavar="FOLDER")
    args = p.parse_args()
    if args.check_greedy:
        sys.exit(0 if check_greedy(args.check_greedy) else 1)
    for model in args.models.split():
        table(args.work, model, [int(c) for c in args.concurrency.split()])


if __name__ == "__main__":
    main()

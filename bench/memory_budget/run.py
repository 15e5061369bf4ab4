#!/usr/bin/python3
"""The largest GPT trainable under a fixed per-rank memory budget, with and without `memory:`
(docs/benchmarks.md "Memory budget"; docs/training.md "Memory budget", "Offload").

    /usr/bin/python3 bench/memory_budget/run.py [--budget-mb 256] [--steps 4] [--threads 2]
        [--build build] [--work /tmp/colossal-membench]

Walks a ladder of GPT-2-style models (layers x d_model; 4·d FFN, d/64 heads, T 64, B 2, byte
vocabulary) from examples/models/export.py, smallest first. For each it compiles the spec without
`memory:` (fits when the predicted peak per rank is within the budget) and with
`memory: {budget_mb, recompute: auto, offload: auto}` (fits when colossal-opt accepts it), and
stops at the first model neither fits. Then it trains the largest model of each kind --steps steps
and prints their tokens/s (mean after the first step), the measured peak resident set and the
memory plan. Models are exported once into --work and reused.
"""
import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, SPEC, export_gpt, run, tools, write_data  # noqa: E402

LADDER = [(4, 256), (4, 512), (8, 512), (8, 768), (12, 768), (16, 768), (12, 1024), (16, 1024),
          (24, 1024), (32, 1024)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-mb", type=float, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "build"))
    ap.add_argument("--work", default="/tmp/colossal-membench")
    a = ap.parse_args()
    opt, runner = tools(a.build)
    os.makedirs(a.work, exist_ok=True)
    print("$ /usr/bin/python3 bench/memory_budget/run.py " + " ".join(sys.argv[1:]))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; load {os.getloadavg()}")
    data = write_data(a.work)
    plain_spec = os.path.join(a.work, "plain.yaml")
    mem_spec = os.path.join(a.work, "memory.yaml")
    with open(plain_spec, "w") as f:
        f.write(SPEC)
    with open(mem_spec, "w") as f:
        f.write(SPEC + f"memory: {{budget_mb: {a.budget_mb}, recompute: auto, offload: auto}}\n")
    best = {"plain": None, "memory": None}
    print(f"budget {a.budget_mb} MiB per rank")
    print("| layers x d_model | parameters | 16Ψ MiB | plain peak MiB | fits | with memory: peak MiB | offload | fits |")
    print("|---|---:|---:|---:|---|---:|---|---|")
    for layers, d in LADDER:
        name = f"gpt_L{layers}_d{d}"
        model = export_gpt(os.path.join(a.work, name), layers, d)
        rows = {}
        for kind, spec in (("plain", plain_spec), ("memory", mem_spec)):
            plan = os.path.join(a.work, f"{name}_{kind}.cplan")
            p = run([opt, model, "--spec", spec, "-o", plan, "--report-format=json"], check=False)
            rows[kind] = json.loads(p.stdout) if p.returncode == 0 else None
        pr = rows["plain"]["per_rank"]
        states = pr["params"] + pr["grads"] + pr["optimizer"]
        params = pr["params"] // 4
        plain_fits = pr["peak"] <= a.budget_mb * MIB
        mem = rows["memory"]
        mem_fits = mem is not None
        off = mem["memory"]["offload"] if mem else None
        print(f"| {layers} x {d} | {params / 1e6:.1f} M | {states / MIB:.0f} | {pr['peak'] / MIB:.0f} | "
              f"{'yes' if plain_fits else 'no'} | {mem['memory']['predicted_peak_bytes'] / MIB:.0f} | "
              f"{off['mode'] if isinstance(off, dict) else off} | yes |" if mem_fits else
              f"| {layers} x {d} | {params / 1e6:.1f} M | {states / MIB:.0f} | {pr['peak'] / MIB:.0f} | "
              f"{'yes' if plain_fits else 'no'} | - | - | no |", flush=True)
        if plain_fits:
            best["plain"] = (name, layers, d, params)
        if mem_fits:
            best["memory"] = (name, layers, d, params)
        if not plain_fits and not mem_fits:
            break
    print()
    print("| variant | largest model | parameters | tokens/s | peak RSS MiB | step s |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in ("plain", "memory"):
        if not best[kind]:
            print(f"| {kind} | none fits | | | | |")
            continue
        name, layers, d, params = best[kind]
        plan = os.path.join(a.work, f"{name}_{kind}.cplan")
        metrics = os.path.join(a.work, f"{name}_{kind}.jsonl")
        t0 = time.time()
        run([runner, plan, "train", "--data", data, "--token-dtype", "uint8", "--steps", str(a.steps),
             "--metrics", metrics, "--threads", str(a.threads)])
        with open(metrics) as f:
            m = [json.loads(line) for line in f]
        tps = sum(r["tokens_per_s"] for r in m[1:]) / max(1, len(m) - 1)
        print(f"| {'without memory:' if kind == 'plain' else 'with memory:'} | {layers} x {d} | {params / 1e6:.1f} M | "
              f"{tps:.0f} | {m[-1]['memory']['peak_rss_bytes'] / MIB:.0f} | {128 / tps:.2f} |", flush=True)
        print(f"  ({kind}: {a.steps} steps in {time.time() - t0:.0f} s; last step memory {m[-1]['memory']})")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Offload step time against in-memory training, measured in one run (docs/benchmarks.md
"Memory budget").

    /usr/bin/python3 bench/memory_budget/offload_ab.py [--layers 4 --d-model 512] [--steps 12]
        [--rounds 3] [--threads 2] [--build build] [--work /tmp/colossal-offload-ab]

A GPT-2-style model (export.py --arch gpt2, B 2 x T 64, byte vocabulary) compiled twice: in memory
and with `memory: {budget_mb: <a third of its model states>, offload: params}`. Each round trains
both --steps steps (alternating, so load drifts hit both) and takes the median step time after the
first two steps; losses are checked bit-equal. It prints the ratio, the bytes moved per step and
the share of the offload I/O hidden behind compute, estimated as
1 - (t_offload - t_memory) / (prefetch_s + evict_s): the I/O thread's and the step's own seconds
of tier work against the time the step actually lost (0 when it lost more than the I/O took).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, SPEC, export_gpt, run, tools, write_data  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "build"))
    ap.add_argument("--work", default="/tmp/colossal-offload-ab")
    a = ap.parse_args()
    opt, runner = tools(a.build)
    os.makedirs(a.work, exist_ok=True)
    print("$ /usr/bin/python3 bench/memory_budget/offload_ab.py " + " ".join(sys.argv[1:]))
    print(f"{os.cpu_count()} CPUs; load {os.getloadavg()}")
    model = export_gpt(os.path.join(a.work, f"L{a.layers}_d{a.d_model}"), a.layers, a.d_model)
    data = write_data(a.work)
    plain_spec = os.path.join(a.work, "memory.yaml")
    with open(plain_spec, "w") as f:
        f.write(SPEC)
    rep = json.loads(run([opt, model, "--spec", plain_spec, "-o", os.path.join(a.work, "memory.cplan"),
                          "--report-format=json"]).stdout)
    pr = rep["per_rank"]
    states = pr["params"] + pr["grads"] + pr["optimizer"]
    off_spec = os.path.join(a.work, "offload.yaml")
    with open(off_spec, "w") as f:
        f.write(SPEC + f"memory: {{budget_mb: {states / 3 / MIB:.2f}, offload: params}}\n")
    off = json.loads(run([opt, model, "--spec", off_spec, "-o", os.path.join(a.work, "offload.cplan"),
                          "--report-format=json"]).stdout)["memory"]
    print(f"model {a.layers} x {a.d_model}: states {states / MIB:.1f} MiB; offload budget {states / 3 / MIB:.1f} MiB, "
          f"predicted peak {off['predicted_peak_bytes'] / MIB:.1f} MiB; per step "
          f"{off['offload']['read_bytes_per_step'] / MIB:.0f} MiB read, "
          f"{off['offload']['written_bytes_per_step'] / MIB:.0f} MiB written back")
    times = {"memory": [], "offload": []}
    io = []
    losses = {}
    for _ in range(a.rounds):
        for kind in ("memory", "offload"):
            metrics = os.path.join(a.work, kind + ".jsonl")
            run([runner, os.path.join(a.work, kind + ".cplan"), "train", "--data", data, "--token-dtype", "uint8",
                 "--steps", str(a.steps), "--metrics", metrics, "--threads", str(a.threads)])
            with open(metrics) as f:
                m = [json.loads(line) for line in f]
            losses[kind] = [r["loss"] for r in m]
            times[kind].append(statistics.median(128 / r["tokens_per_s"] for r in m[2:]))
            if kind == "offload":
                io.append(statistics.median(r["memory"]["prefetch_s"] + r["memory"]["evict_s"] for r in m[2:]))
                rss = m[-1]["memory"]["peak_rss_bytes"]
    t_mem, t_off, t_io = statistics.median(times["memory"]), statistics.median(times["offload"]), statistics.median(io)
    hidden = max(0.0, min(1.0, 1 - (t_off - t_mem) / t_io)) if t_io > 0 else 1.0
    print(f"losses bit-equal: {losses['memory'] == losses['offload']}")
    print("| threads | in memory s/step | offload s/step | offload / in memory | tier I/O s/step | I/O hidden | "
          "offload peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {a.threads} | {t_mem:.3f} | {t_off:.3f} | {t_off / t_mem:.2f} | {t_io:.3f} | {hidden:.0%} | "
          f"{rss / MIB:.0f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Parallel training benchmark driver: one rank vs dp=N vs tp=N (vs sequence-parallel tp=N) vs PyTorch.

    /usr/bin/python3 bench/train_dp/bench.py --opt COLOSSAL_OPT --run COLOSSAL_RUN --work DIR
        [--steps N] [--warmup N] [--rounds R] [--n N] [--configs one1,oneN,dp,tp,sp,torch]
        [--spec SPEC.yaml] [--check-steps K]

bench/train_dp/run.sh finds the tools and calls this; see docs/benchmarks.md "Data and tensor
parallelism". One training case (examples/models/export.py --preset gpt2-train with
examples/train/train_gpt2.yaml: B 8, T 64, AdamW) is compiled once per configuration:

  one1   one rank, --threads 1                      (the per-core reference)
  oneN   one rank, --threads N                      (the same cores as the N-rank runs)
  dp     `mesh: {dp: N}`, colossal-run --nproc N, --threads 1 per rank
  tp     `mesh: {tp: N}`, colossal-run --nproc N, --threads 1 per rank
  sp     `mesh: {tp: N}` + `parallel: {tensor: {sequence_parallel: true}}`, same ranks/threads
  torch  examples/train/torch_reference.py (PyTorch, same weights/data order), torch.set_num_threads(N)
  torch1 the same with 1 thread

Each of R rounds runs every configuration once, in the order given (so drift in the machine's load
hits all of them alike). Before anything is reported, the first K steps' losses (K = min(steps,
--check-steps)) of every run must agree with the first round's one-rank run within 1e-5 (relative);
otherwise exit 1 naming the run and step; so does a dp/tp/sp metrics line without comm_s in
(0, step time]. Step time = B*T / tokens_per_s of each metrics line (the
step's wall time: train_step, collectives, optimizer_step; no start-up, loading or compilation);
comm = the metrics' comm_s (rank 0's wall time inside collectives, waits for the slower rank
included; absent for one rank and PyTorch). Per configuration: the median over all timed steps
(steps >= --warmup) of all rounds, and the per-round medians to show the spread. With a mesh
config, a probe times 13 chained all_reduces of [B, T, d] f32 on N ranks with no other work (the
transport's own cost per byte), and each mesh config's `--report` bytes per step are converted to
the time the probe's rate predicts, to compare with the measured comm.

Errors: a failing command exits 1 with its command line and the tail of its output.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
ALL = ["one1", "oneN", "dp", "tp", "sp", "torch"]


def describe(cfg, n):
    return {"one1": "1 rank, 1 thread", "oneN": f"1 rank, {n} threads", "dp": f"dp={n}, 1 thread/rank",
            "tp": f"tp={n}, 1 thread/rank", "sp": f"tp={n} seq-par, 1 thr/rank",
            "torch": f"PyTorch, {n} threads", "torch1": "PyTorch, 1 thread"}[cfg]


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(cmd, log):
    """Runs cmd (a list), output to log; exits 1 with the command and the log's tail on failure."""
    with open(log, "w") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
    if rc != 0:
        tail = open(log).read()[-2000:]
        sys.exit(f"bench.py: failed (exit {rc}): {' '.join(cmd)}\n{tail}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--opt", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--n", type=int, default=2, help="ranks of dp/tp, and threads of oneN/torch")
    p.add_argument("--configs", default=",".join(ALL))
    p.add_argument("--spec", default=os.path.join(ROOT, "examples/train/train_gpt2.yaml"))
    p.add_argument("--check-steps", type=int, default=20)
    a = p.parse_args()
    configs = [c for c in a.configs.split(",") if c]
    for c in configs:
        if c not in ALL + ["torch1"]:
            sys.exit(f"bench.py: unknown config '{c}' (known: {', '.join(ALL + ['torch1'])})")
    if a.steps <= a.warmup:
        sys.exit("bench.py: --steps must exceed --warmup")
    import yaml
    spec = yaml.safe_load(open(a.spec))
    B, T = next(iter(spec["inputs"].values()))
    tokens = B * T
    n = a.n
    os.makedirs(a.work, exist_ok=True)
    w = lambda *x: os.path.join(a.work, *x)

    # Model, data, one plan per configuration.
    run([PY, os.path.join(ROOT, "examples/models/export.py"), "--preset", "gpt2-train", "--out", w("model"),
         "--quiet"], w("export.log"))
    data_in = [os.path.join(ROOT, "../shared/data/tinyshakespeare.txt"), "/work/shared/data/tinyshakespeare.txt"]
    data_in = [d for d in data_in if os.path.isfile(d)][:1]
    if not data_in:
        lic = "/usr/share/common-licenses"
        data_in = sorted(os.path.join(lic, f) for f in os.listdir(lic))
    run([PY, os.path.join(ROOT, "examples/train/prepare_data.py"), *data_in, "--out", w("data")], w("data.log"))
    base = open(a.spec).read()
    if not base.endswith("\n"):
        base += "\n"
    extra = {"one1": "", "oneN": "", "dp": f"mesh: {{dp: {n}}}\n", "tp": f"mesh: {{tp: {n}}}\n",
             "sp": f"mesh: {{tp: {n}}}\nparallel: {{tensor: {{sequence_parallel: true}}}}\n"}
    plans = {}
    for c in configs:
        if c.startswith("torch"):
            continue
        key = "one" if c in ("one1", "oneN") else c
        if key in plans:
            plans[c] = plans[key]
            continue
        spec_path = w(f"{key}.yaml")
        open(spec_path, "w").write(base + extra[c])
        plans[c] = plans[key] = w(f"{key}.cplan")
        run([a.opt, w("model/model.onnx"), "--spec", spec_path, "-o", plans[c]], w(f"{key}.opt.log"))
        if c in ("dp", "tp", "sp"):
            run([a.opt, w("model/model.onnx"), "--spec", spec_path, "-o", w(f"{key}.report.cplan"), "--report"],
                w(f"{key}.report.txt"))

    def command(c, metrics):
        common = ["--data", w("data/train.bin"), "--token-dtype", "uint8", "--steps", str(a.steps),
                  "--metrics", metrics]
        if c.startswith("torch"):
            return [PY, os.path.join(ROOT, "examples/train/torch_reference.py"), "--model-dir", w("model"),
                    "--spec", a.spec, *common, "--threads", "1" if c == "torch1" else str(n)]
        cmd = [a.run, plans[c], "train", *common, "--threads", str(n if c == "oneN" else 1)]
        if c in ("dp", "tp", "sp"):
            cmd += ["--nproc", str(n)]
        return cmd

    results = {c: [] for c in configs}  # per round: list of metrics rows
    loads = []
    for r in range(a.rounds):
        before = loadavg()
        for c in configs:
            m = w(f"{c}.r{r}.jsonl")
            if os.path.exists(m):
                os.remove(m)
            cmd = command(c, m)
            print("$ " + " ".join(cmd), flush=True)
            run(cmd, w(f"{c}.r{r}.log"))
            results[c].append([json.loads(line) for line in open(m)])
        loads.append((before, loadavg()))
        print(f"== round {r + 1}: load average before {before}, after {loads[-1][1]}", flush=True)

    # Same training everywhere: the first K steps against round 1 of the first one-rank run.
    refc = next((c for c in configs if c.startswith("one")), configs[0])
    ref = results[refc][0]
    K = min(a.check_steps, a.steps)
    worst = {}
    for c in configs:
        worst[c] = 0.0
        for r, rows in enumerate(results[c]):
            if len(rows) != a.steps:
                sys.exit(f"bench.py: {describe(c, n)}, round {r + 1}: {len(rows)} metrics lines, expected {a.steps}")
            for s in range(K):
                d = abs(rows[s]["loss"] - ref[s]["loss"]) / abs(ref[s]["loss"])
                if d > 1e-5:
                    sys.exit(f"bench.py: {describe(c, n)}, round {r + 1}, step {s}: loss {rows[s]['loss']} vs "
                             f"{ref[s]['loss']} ({describe(refc, n)}): relative difference {d:.2e} > 1e-5")
                worst[c] = max(worst[c], d)
            if c in ("dp", "tp", "sp"):  # docs/training.md: plans with a mesh report comm_s in (0, step time]
                bad = [row["step"] for row in rows if not 0 < row.get("comm_s", -1) <= tokens / row["tokens_per_s"] * 1.001]
                if bad:
                    sys.exit(f"bench.py: {describe(c, n)}, round {r + 1}: comm_s missing or outside (0, step time] "
                             f"at steps {bad[:5]}")
    print(f"\nlosses agree: first {K} steps of every run within 1e-5 (relative) of {describe(refc, n)}, round 1")

    # Bytes per step from the report (the last "total:" line of the communication section).
    report = {}
    for c in ("dp", "tp", "sp"):
        path = w(f"{c}.report.txt")
        if c in configs and os.path.exists(path):
            for line in open(path):
                if line.strip().startswith("total:") and "bytes" in line:
                    report[c] = int(line.split()[1])

    probe = comm_probe(a, w, n, B, T, spec_d_model(w("model"))) if any(c in configs for c in ("dp", "tp", "sp")) else None

    print(f"median over steps {a.warmup}..{a.steps - 1} of {a.rounds} round(s); B*T = {tokens} tokens/step")
    hdr = (f"{'run':28s} {'step ms':>8s} {'comm ms':>8s} {'comm %':>7s} {'tokens/s':>9s} {'vs 1r/1t':>9s} "
           f"{'vs 1r/' + str(n) + 't':>9s} {'max rel loss diff':>18s} {'comm MB/step':>12s}  per-round step ms")
    print(hdr)
    step_ms = {}
    table = {}
    for c in configs:
        timed = [row for rows in results[c] for row in rows[a.warmup:]]
        st = statistics.median(tokens / row["tokens_per_s"] for row in timed)
        comm = [row["comm_s"] for row in timed if "comm_s" in row]
        cm = statistics.median(comm) if comm else None
        rounds = [statistics.median(tokens / row["tokens_per_s"] for row in rows[a.warmup:]) * 1e3
                  for rows in results[c]]
        step_ms[c] = st * 1e3
        table[c] = (st, cm, rounds)
    for c in configs:
        st, cm, rounds = table[c]
        r1 = f"{step_ms['one1'] / step_ms[c]:.2f}x" if "one1" in step_ms else "-"
        rN = f"{step_ms['oneN'] / step_ms[c]:.2f}x" if "oneN" in step_ms else "-"
        cms = f"{cm * 1e3:8.2f}" if cm is not None else f"{'-':>8s}"
        cpc = f"{100 * cm / st:6.1f}%" if cm is not None else f"{'-':>7s}"
        mb = f"{report[c] / 1e6:12.2f}" if c in report else f"{'-':>12s}"
        print(f"{describe(c, n):28s} {st * 1e3:8.1f} {cms} {cpc} {tokens / st:9.0f} {r1:>9s} {rN:>9s} "
              f"{worst[c]:18.1e} {mb}  {' / '.join(f'{x:.1f}' for x in rounds)}")
    for c in report:
        cm = table[c][1]
        if cm:
            print(f"{describe(c, n)}: {report[c] / 1e6:.2f} MB of collective inputs per step (colossal-opt --report) "
                  f"in {cm * 1e3:.2f} ms = {report[c] / cm / 1e9:.2f} GB/s effective"
                  + (f"; at the probe's rate {report[c] / probe[1] * 1e3:.2f} ms" if probe else ""))
    if probe:
        print(f"comm probe: {probe[2]} chained all_reduces of [{B}, {T}, {probe[3]}] f32 on {n} ranks, 1 thread each, no other "
              f"work: median {probe[0] * 1e3:.2f} ms per run = {probe[0] / probe[2] * 1e6:.0f} us per all_reduce, "
              f"{probe[1] / 1e9:.2f} GB/s of inputs")


def spec_d_model(model_dir):
    """d_model of the exported model (config.json written by examples/models/export.py)."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg = cfg.get("model", cfg)
    for k in ("d_model", "n_embd", "hidden_size"):
        if k in cfg:
            return int(cfg[k])
    sys.exit(f"bench.py: {model_dir}/config.json has no d_model/n_embd/hidden_size")


def comm_probe(a, w, n, B, T, d, K=13):
    """Times K chained all_reduces of [B, T, d] f32 over a mesh axis of n ranks with nothing else to do
    (each all_reduce's input is the previous output plus the input, so none folds away): the transport's
    own cost per byte, to compare with comm_s. Returns (median seconds per run, bytes/s of collective
    inputs, K, d); colossal-run --repeat's median."""
    ty = f"tensor<{B}x{T}x{d}xf32>"
    lines = ['module {', f'colossal.mesh @mesh axes = ["tp"] shape = [{n}] roles = ["tensor"]',
             f'func.func @forward(%x: {ty} {{colossal.input = "x"}}) -> ({ty} {{colossal.output = "y"}}) {{']
    prev = "%x"
    for i in range(K):
        lines.append(f"  %s{i} = colossal.add {prev}, %x : ({ty}, {ty}) -> {ty}")
        lines.append(f'  %r{i} = colossal.all_reduce %s{i} {{axes = ["tp"]}} : {ty} -> {ty}')
        prev = f"%r{i}"
    lines += [f"  return {prev} : {ty}", "}", "}"]
    open(w("probe.mlir"), "w").write("\n".join(lines) + "\n")
    import numpy as np
    np.save(w("probe_x.npy"), np.full((B, T, d), 1e-3, np.float32))
    run([a.opt, w("probe.mlir"), "--emit=plan", "-o", w("probe.cplan")], w("probe.opt.log"))
    cmd = [a.run, w("probe.cplan"), "--input", "x=" + w("probe_x.npy"), "--nproc", str(n), "--threads", "1",
           "--repeat", "200", "--warmup", "20"]
    print("$ " + " ".join(cmd), flush=True)
    run(cmd, w("probe.log"))
    for line in open(w("probe.log")):
        if "median" in line and " ms" in line:
            med = float(line.split("median")[1].split("ms")[0]) * 1e-3
            return med, K * B * T * d * 4 / med, K, d
    sys.exit(f"bench.py: no 'median ... ms' line in {w('probe.log')}")


if __name__ == "__main__":
    main()

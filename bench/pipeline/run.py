#!/usr/bin/python3
"""Pipeline parallelism at pp=2 against one rank (docs/benchmarks.md "Pipeline parallelism"; issue 12
items 2 and 7): step time, the bubble measured from the trace, and the makespan and bubble that the
measured stage times predict.

    /usr/bin/python3 bench/pipeline/run.py [--steps 30] [--rounds 3] [--microbatches 2,4,8]
        [--build build] [--work /tmp/colossal-ppbench] [--png docs/images/pipeline_trace.png]

Model: examples/models/export.py --preset gpt2-train, spec examples/train/train_gpt2.yaml (B 8,
T 64, AdamW). For each m: one rank with `grad_accum: m` (--threads 1, and --threads 2), and
`mesh: {pp: 2}` with `parallel.pipeline: {schedule: S, microbatches: m}` for S in --schedules
(gpipe, 1f1b, zb-h1, zbv) under
`colossal-run --nproc 2 --threads 1` (one core per rank) with `--trace`. Each round runs every
configuration once, in table order, so that drift in the machine's load hits all alike.

Per configuration, from the steps >= --warmup of every round:
  step ms      median of B·T / tokens_per_s (metrics: the whole optimizer step);
  makespan     median of the pipeline's wall time per step in the trace (first F on any rank to the
               last B's end), and the bubble 1 − Σ busy / (2 · makespan), busy = the rank's F and B;
  predicted    the traced action order replayed by the simulator's rules (examples/train/
               show_trace.py: compute actions take their cost, a send is free, a receive waits for
               its send) with each stage's F and B costs: the makespan and bubble those stage times
               predict; "meas/pred" = measured makespan / predicted (issue 12 item 2: within 15%).
               Two sets of costs: the traced medians (F and B as they ran in the pipeline, with the
               runner's copies) and each stage program timed alone (colossal-run --program
               stage<s>_forward|backward --zero-inputs --threads 1, median of --repeat runs, one
               process at a time).
--png draws one step of each schedule's trace at the middle m, one panel per schedule.
"""
import argparse
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE_SPEC = open(os.path.join(REPO, "examples", "train", "train_gpt2.yaml")).read()
DATA = "/usr/share/common-licenses/GPL-3"


def show_trace():
    spec = importlib.util.spec_from_file_location("show_trace", os.path.join(REPO, "examples", "train",
                                                                            "show_trace.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p


def compile_plan(opt, model, work, name, extra):
    spec = os.path.join(work, name + ".yaml")
    with open(spec, "w") as f:
        f.write(BASE_SPEC + extra)
    plan = os.path.join(work, name + ".cplan")
    run([opt, model, "--spec", spec, "-o", plan])
    return plan


def train(runner, plan, work, name, steps, ranks, threads, trace):
    metrics = os.path.join(work, name + ".jsonl")
    cmd = [runner, plan, "train", "--data", DATA, "--token-dtype", "uint8", "--steps", str(steps),
           "--metrics", metrics, "--threads", str(threads)]
    if ranks > 1:
        cmd += ["--nproc", str(ranks)]
    if trace:
        cmd += ["--trace", trace]
    run(cmd, {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


def time_alone(runner, plan, stages, repeat, weight=False):
    """{(stage, 'F'|'B'|'W'): µs}: each stage program run alone on one thread (colossal-run --program
    stage<s>_forward|backward|backward_weight --zero-inputs; the median of `repeat` runs after 3
    untimed). `weight`: the plan's backward is split (zb-h1, zbv)."""
    out = {}
    phases = (("forward", "F"), ("backward", "B")) + ((("backward_weight", "W"),) if weight else ())
    for s in range(stages):
        for phase, k in phases:
            p = run([runner, plan, "--program", f"stage{s}_{phase}", "--zero-inputs", "--threads", "1", "--warmup", "3",
                     "--repeat", str(repeat)])
            m = re.search(r"median ([\d.]+) ms", p.stderr)
            if not m:
                sys.exit(f"no median in colossal-run's output for stage{s}_{phase}:\n{p.stderr}")
            out[(s, k)] = float(m.group(1)) * 1e3
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="steps of each run left out")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--microbatches", default="2,4,8")
    ap.add_argument("--schedules", default="gpipe,1f1b,zb-h1,zbv")
    ap.add_argument("--repeat", type=int, default=20, help="runs of each stage program timed alone")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--work", default="/tmp/colossal-ppbench")
    ap.add_argument("--png", help="write a timeline of one step of each schedule here (needs matplotlib)")
    a = ap.parse_args()
    if a.png and importlib.util.find_spec("matplotlib") is None:
        sys.exit("--png needs matplotlib (Debian: apt-get install python3-matplotlib); nothing was run")
    st = show_trace()
    opt, runner = (os.path.join(a.build, "bin", t) for t in ("colossal-opt", "colossal-run"))
    os.makedirs(a.work, exist_ok=True)
    print("$ /usr/bin/python3 bench/pipeline/run.py " + " ".join(sys.argv[1:]))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"load {tuple(round(x, 2) for x in os.getloadavg())}")
    model_dir = os.path.join(a.work, "model")
    if not os.path.exists(os.path.join(model_dir, "model.onnx")):
        run(["/usr/bin/python3", os.path.join(REPO, "examples", "models", "export.py"), "--preset", "gpt2-train",
             "--out", model_dir, "--quiet"])
    model = os.path.join(model_dir, "model.onnx")
    ms = [int(x) for x in a.microbatches.split(",")]
    configs = []  # (label, m, plan, ranks, threads, traced)
    for m in ms:
        one = compile_plan(opt, model, a.work, f"one_m{m}", f"  grad_accum: {m}\n")
        configs.append((f"1 rank, 1 thread, grad_accum {m}", m, one, 1, 1, False))
        configs.append((f"1 rank, 2 threads, grad_accum {m}", m, one, 1, 2, False))
        for schedule in a.schedules.split(","):
            plan = compile_plan(opt, model, a.work, f"pp2_{schedule}_m{m}",
                                f"mesh: {{pp: 2}}\nparallel:\n  pipeline: {{schedule: {schedule}, microbatches: {m}}}\n")
            configs.append((f"pp=2 {schedule}, m={m}", m, plan, 2, 1, True))
    alone = {}  # label -> stage programs timed alone
    for label, m, plan, ranks, threads, traced in configs:
        if traced:
            stages = 4 if "zbv" in label else 2
            alone[label] = time_alone(runner, plan, stages, a.repeat, weight="zb" in label)
    step_ms = {c[0]: [] for c in configs}
    analyses = {c[0]: [] for c in configs}
    traces = {}
    loads = []
    for r in range(a.rounds):
        loads.append(round(os.getloadavg()[0], 2))
        for label, m, plan, ranks, threads, traced in configs:
            name = label.replace(" ", "_").replace(",", "").replace("=", "")
            trace = os.path.join(a.work, f"{name}.r{r}.trace.json") if traced else None
            rows = train(runner, plan, a.work, name, a.steps, ranks, threads, trace)
            step_ms[label] += [8 * 64 / row["tokens_per_s"] * 1e3 for row in rows[a.warmup:]]
            if trace:
                t = st.load(trace)
                bad = st.problems(t)
                if bad:
                    sys.exit(f"{trace}: " + "; ".join(bad[:5]))
                per_step, _, _ = st.analyse(t, skip=a.warmup, alone=alone[label])
                analyses[label] += [row for row in per_step if row["step"] >= a.warmup]
                traces[label] = (trace, t)
        print(f"round {r + 1}/{a.rounds} done, load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"load (1 min) at the start of each round: {' / '.join(map(str, loads))}; at the end "
          f"{tuple(round(x, 2) for x in os.getloadavg())}")
    print()
    print("| run | step ms | vs 1 rank, 1 thread | makespan ms | bubble | predicted (traced stage times): "
          "makespan ms | bubble | meas/pred | predicted (stages alone): makespan ms | bubble | meas/pred | logical bubble |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in ms:
        base = statistics.median(step_ms[f"1 rank, 1 thread, grad_accum {m}"])
        for label, cm, *_ in configs:
            if cm != m:
                continue
            med = statistics.median(step_ms[label])
            cells = [label, f"{med:.1f}", f"{base / med:.2f}×"]
            rows = analyses[label]
            if rows:
                meas = statistics.median(r["makespan_us"] for r in rows) / 1e3
                pred = statistics.median(r["predicted_makespan_us"] for r in rows) / 1e3
                lone = statistics.median(r["alone_makespan_us"] for r in rows) / 1e3
                cells += [f"{meas:.1f}", f"{statistics.median(r['bubble'] for r in rows):.3f}", f"{pred:.1f}",
                          f"{statistics.median(r['predicted_bubble'] for r in rows):.3f}", f"{meas / pred:.2f}",
                          f"{lone:.1f}", f"{statistics.median(r['alone_bubble'] for r in rows):.3f}",
                          f"{meas / lone:.2f}", f"{rows[0]['logical_bubble']:.3f}"]
            else:
                cells += ["–"] * 9
            print("| " + " | ".join(cells) + " |")
    print()
    print("Stage times (median over the traced steps of every round, ms): F and B per stage")
    for label in analyses:
        if label in traces:
            med = st.stage_medians(traces[label][1], skip=a.warmup)
            print(f"  {label}: traced " + ", ".join(f"stage {s} {k} {v / 1e3:.2f}" for (s, k), v in sorted(med.items()))
                  + "; alone " + ", ".join(f"stage {s} {k} {v / 1e3:.2f}" for (s, k), v in sorted(alone[label].items())))
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        m = ms[len(ms) // 2]
        schedules = a.schedules.split(",")
        fig, axes = plt.subplots(len(schedules), 1, figsize=(12, 2.1 * len(schedules)), squeeze=False)
        for ax, schedule in zip(axes[:, 0], schedules):
            path, t = traces[f"pp=2 {schedule}, m={m}"]
            step = max(e["args"]["step"] for e in st.slices(t))
            st.render(t, None, step=step, ax=ax,
                      title=f"pp=2 {schedule}, m={m}: step {step} of {os.path.basename(path)}")
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)
        print(f"wrote {a.png}")


if __name__ == "__main__":
    main()

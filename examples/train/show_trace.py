#!/usr/bin/python3
"""Read a `colossal-run ... train --trace T.json` file (docs/parallelism.md "Traces"): check it,
measure the pipeline bubble in wall time and predict it from the measured stage times.

    show_trace.py T.json [--skip 1] [--png OUT.png --step S] [--check]

Prints per rank its busy time (F, B and, under the zero-bubble schedules, W) and idle fraction of
each step's pipeline (from the first compute action on any rank to the last), the median F, B (and
W) of each stage, the measured makespan and bubble,
and the bubble and makespan the schedule predicts: the traced action order replayed with the
simulator's rules (each compute action takes its cost, a send is free, a receive waits for its
send; runtime/plan/PipelineSchedule.cpp) with unit costs (F = 1, B = 2, or F = B = W = 1 when the
backward is split: logical time) and with each stage's median F, B and W (wall time; there each
send also takes its traced time, the copy into the message, after its data left). Steps before
--skip are left out of the medians and means
(the first step pays for cold caches). --png draws step S (default: the last) as a timeline,
one row per rank (matplotlib). --check validates the file and exits 1 with the problems found.

Imported by test/e2e/pipeline_e2e.py and bench/pipeline/run.py.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

COMPUTE = {"compute"}


def load(path):
    with open(path) as f:
        return json.load(f)


def slices(trace):
    """The complete events (ph X), in file order (per rank: the order they ran)."""
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


COMPUTE = ("F", "B", "W")  # a pipeline's compute actions (W: the zero-bubble schedules' weight gradients)


def kind(e):
    """F, B, W, sendF, recvF, sendB, recvB, train_step, optimizer_step (a name is kind, microbatch and,
    when a rank runs several stages, ".stage": "F3", "sendB0.2")."""
    return e["name"].split(".")[0].rstrip("0123456789")


def problems(trace):
    """What is wrong with a trace, as a list of sentences (empty: valid)."""
    out = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    xs = slices(trace)
    if not xs:
        out.append("no complete (X) events")
    names = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    for e in xs:
        a = e.get("args", {})
        for key in ("step", "stage", "microbatch", "chunk"):
            if key not in a:
                out.append(f"{e['name']} on pid {e['pid']} has no args.{key}")
        if e["pid"] not in names:
            out.append(f"pid {e['pid']} has no process_name")
        if a.get("microbatch") is not None and kind(e) in ("F", "B", "W", "sendF", "recvF", "sendB", "recvB") \
                and e["name"].split(".")[0] != kind(e) + str(a["microbatch"]):
            out.append(f"{e['name']}: args.microbatch is {a['microbatch']}")
        if e["dur"] < 0:
            out.append(f"{e['name']} on pid {e['pid']} has a negative duration")
    by_track = defaultdict(list)
    for e in xs:
        by_track[(e["pid"], e["tid"])].append(e)
    for (pid, tid), track in by_track.items():
        for a, b in zip(track, track[1:]):
            if b["ts"] < a["ts"] + a["dur"]:
                out.append(f"pid {pid}: {b['name']} starts before {a['name']} ends")
    # Flows: one start and one end per id, each inside a slice of its track of the right kind.
    flows = defaultdict(dict)
    for e in events:
        if e.get("ph") in ("s", "f"):
            if e["ph"] in flows[e["id"]]:
                out.append(f"flow {e['id']} has two '{e['ph']}' events")
            flows[e["id"]][e["ph"]] = e
    for fid, pair in flows.items():
        if set(pair) != {"s", "f"}:
            out.append(f"flow {fid} has only {sorted(pair)}")
            continue
        s, f = pair["s"], pair["f"]
        src, dst = enclosing(by_track, s), enclosing(by_track, f)
        if not src or kind(src) not in ("sendF", "sendB"):
            out.append(f"flow {fid} does not start in a send")
        elif not dst or kind(dst) != "recv" + kind(src)[4:]:
            out.append(f"flow {fid} ({src['name']}) does not end in the matching receive")
        elif dst["args"]["microbatch"] != src["args"]["microbatch"] or dst["args"]["step"] != src["args"]["step"]:
            out.append(f"flow {fid}: {src['name']} of step {src['args']['step']} ends in {dst['name']} of step "
                       f"{dst['args']['step']}")
        elif f["ts"] < s["ts"]:
            out.append(f"flow {fid} ({src['name']}) arrives before it is sent")
    pipeline = any(kind(e) in COMPUTE for e in xs)
    counters = [e for e in events if e.get("ph") == "C"]
    if pipeline and not counters:
        out.append("a pipeline trace without saved-activation counters")
    if pipeline and not flows and len({e["pid"] for e in xs}) > 1:
        out.append("a pipeline trace without flow events")
    return out


def enclosing(by_track, point):
    for e in by_track.get((point["pid"], point["tid"]), []):
        if e["ts"] <= point["ts"] <= e["ts"] + e["dur"]:
            return e
    return None


def flow_pairs(trace):
    """{(send pid, send index) -> [(recv pid, recv index)]}: which send each receive waits for, as
    indexes into each rank's list of X events (rank_steps' order)."""
    by_track = defaultdict(list)
    index = {}
    for e in slices(trace):
        index[id(e)] = len(by_track[e["pid"]])
        by_track[e["pid"]].append(e)
    tracks = {(pid, 0): evs for pid, evs in by_track.items()}
    flows = defaultdict(dict)
    for e in trace["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            flows[e["id"]][e["ph"]] = e
    waits = defaultdict(list)  # recv event id -> send events
    for pair in flows.values():
        if set(pair) == {"s", "f"}:
            src, dst = enclosing(tracks, pair["s"]), enclosing(tracks, pair["f"])
            if src and dst:
                waits[id(dst)].append(src)
    return waits


def rank_steps(trace):
    """{step: {pid: [X events of that rank's pipeline actions in that step, in order]}} (optimizer
    steps left out)."""
    out = defaultdict(lambda: defaultdict(list))
    for e in slices(trace):
        if kind(e) != "optimizer_step":
            out[e["args"]["step"]][e["pid"]].append(e)
    return out


def replay(step_events, waits, cost, send_cost=None, spans=None):
    """The simulator's event loop over one step's traced actions: `cost(e)` per compute action,
    sends free (or, with `send_cost`, taking that long after the message leaves), a receive waits
    for the sends that flow into it. Returns (makespan, busy per pid); `spans` (a dict), when
    given, gets each pid's (first compute start, last compute end)."""
    clock = {pid: 0.0 for pid in step_events}
    busy = {pid: 0.0 for pid in step_events}
    nxt = {pid: 0 for pid in step_events}
    sent = {}
    progress = True
    while progress:
        progress = False
        for pid, evs in step_events.items():
            while nxt[pid] < len(evs):
                e = evs[nxt[pid]]
                k = kind(e)
                if k in COMPUTE + ("train_step",):
                    c = cost(e)
                    if spans is not None:
                        spans[pid] = (spans.get(pid, (clock[pid], 0))[0], clock[pid] + c)
                    clock[pid] += c
                    busy[pid] += c
                elif k.startswith("send"):
                    sent[id(e)] = clock[pid]
                    if send_cost:
                        clock[pid] += send_cost(e)
                elif k.startswith("recv"):
                    srcs = waits.get(id(e), [])
                    if any(id(s) not in sent for s in srcs):
                        break
                    clock[pid] = max([clock[pid]] + [sent[id(s)] for s in srcs])
                nxt[pid] += 1
                progress = True
    if any(nxt[p] < len(evs) for p, evs in step_events.items()):
        raise ValueError("the traced actions cannot be replayed (a receive without its send)")
    return max(clock.values()), busy


def bubble_of(makespan, busy):
    return 1.0 - sum(busy.values()) / (len(busy) * makespan) if makespan > 0 else 0.0


def stage_medians(trace, skip=1):
    """{(stage, 'F'|'B'): median duration in µs} over the steps from `skip`."""
    d = defaultdict(list)
    for e in slices(trace):
        if kind(e) in COMPUTE and e["args"]["step"] >= skip:
            d[(e["args"]["stage"], kind(e))].append(e["dur"])
    return {k: statistics.median(v) for k, v in d.items()}


def analyse(trace, skip=1, alone=None):
    """Per step measured and predicted figures, and their means over the steps from `skip`.
    `alone`: {(stage, 'F'|'B'): µs} measured some other way (each stage program timed alone),
    replayed too ("alone_makespan_us", "alone_bubble")."""
    steps = rank_steps(trace)
    waits = flow_pairs(trace)
    med = stage_medians(trace, skip)
    rows = []
    for step in sorted(steps):
        evs = steps[step]
        compute = [e for es in evs.values() for e in es if kind(e) in COMPUTE + ("train_step",)]
        if not compute:
            continue
        t0 = min(e["ts"] for e in compute)
        t1 = max(e["ts"] + e["dur"] for e in compute)
        busy = {pid: sum(e["dur"] for e in es if kind(e) in COMPUTE + ("train_step",)) for pid, es in evs.items()}
        window = t1 - t0
        split = any(kind(e) == "W" for e in compute)  # zero-bubble: B and W cost 1 each
        spans = {}
        logical = replay(evs, waits, lambda e: 2.0 if kind(e) == "B" and not split else 1.0, spans=spans)
        span_total = sum(end - start for start, end in spans.values())
        row = {"step": step, "makespan_us": window, "busy_us": busy, "bubble": bubble_of(window, busy),
               "idle": {pid: 1.0 - b / window for pid, b in busy.items()},
               "logical_makespan": logical[0], "logical_bubble": bubble_of(*logical),
               "logical_span_bubble": 1.0 - sum(logical[1].values()) / span_total if span_total else 0.0}
        if med:
            pred = replay(evs, waits, lambda e: med.get((e["args"]["stage"], kind(e)), e["dur"]),
                          send_cost=lambda e: e["dur"])
            row["predicted_makespan_us"] = pred[0]
            row["predicted_bubble"] = bubble_of(*pred)
        if alone:
            pred = replay(evs, waits, lambda e: alone[(e["args"]["stage"], kind(e))])
            row["alone_makespan_us"] = pred[0]
            row["alone_bubble"] = bubble_of(*pred)
        rows.append(row)
    kept = [r for r in rows if r["step"] >= skip] or rows
    mean = {k: statistics.mean(r[k] for r in kept) for k in
            ("makespan_us", "bubble", "logical_bubble", "logical_span_bubble", "predicted_makespan_us", "predicted_bubble",
             "alone_makespan_us", "alone_bubble")
            if all(k in r for r in kept)}
    pids = sorted(kept[0]["idle"]) if kept else []
    mean["idle"] = {pid: statistics.mean(r["idle"][pid] for r in kept) for pid in pids}
    mean["busy_us"] = {pid: statistics.mean(r["busy_us"][pid] for r in kept) for pid in pids}
    return rows, mean, med


def labels(trace):
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "process_name"}


COLORS = {"F": "#4c78a8", "B": "#59a14f", "W": "#b07aa1", "train_step": "#4c78a8", "optimizer_step": "#f28e2b"}


def render(trace, out, step=None, title=None, ax=None):
    """Draws one step as a timeline (one row per rank; F blue, B green, optimizer orange, sends and
    receives as thin grey bars, arrows from each send to its receive) into `out` (a PNG path) or
    onto the matplotlib axes `ax`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = slices(trace)
    steps = sorted({e["args"]["step"] for e in xs})
    step = steps[-1] if step is None else step
    evs = [e for e in xs if e["args"]["step"] == step]
    t0 = min(e["ts"] for e in evs)
    names = labels(trace)
    pids = sorted({e["pid"] for e in evs})
    row = {pid: len(pids) - 1 - i for i, pid in enumerate(pids)}
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(12, 0.9 * len(pids) + 1.2))
    for e in evs:
        k, y, x, w = kind(e), row[e["pid"]], (e["ts"] - t0) / 1e3, e["dur"] / 1e3
        if k in COLORS:
            ax.barh(y, w, left=x, height=0.6, color=COLORS[k], edgecolor="white", linewidth=0.5)
            if k in COMPUTE and w > 0:
                ax.text(x + w / 2, y, e["name"], ha="center", va="center", fontsize=7, color="white")
        else:
            ax.barh(y + 0.36, w, left=x, height=0.1, color="#999999")
    tracks = {(e["pid"], 0): [x for x in xs if x["pid"] == e["pid"]] for e in evs}
    flows = defaultdict(dict)
    for e in trace["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            flows[e["id"]][e["ph"]] = e
    for pair in flows.values():
        if set(pair) != {"s", "f"}:
            continue
        src = enclosing(tracks, pair["s"])
        if not src or src["args"]["step"] != step:
            continue
        s, f = pair["s"], pair["f"]
        ax.annotate("", xy=((f["ts"] - t0) / 1e3, row[f["pid"]] + (0.3 if row[f["pid"]] < row[s["pid"]] else -0.3)),
                    xytext=((s["ts"] - t0) / 1e3, row[s["pid"]] + (-0.3 if row[f["pid"]] < row[s["pid"]] else 0.3)),
                    arrowprops=dict(arrowstyle="->", color="#555555", lw=0.6))
    ax.set_yticks([row[p] for p in pids])
    ax.set_yticklabels([names.get(p, f"rank {p}") for p in pids], fontsize=8)
    ax.set_xlabel(f"ms since the first action of step {step}")
    ax.set_title(title or f"step {step}", fontsize=9)
    ax.set_xlim(left=0)
    if own:
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--skip", type=int, default=1, help="steps left out of the medians and means")
    p.add_argument("--png", help="draw a step as a timeline into this PNG")
    p.add_argument("--step", type=int, help="the step --png draws (default: the last)")
    p.add_argument("--check", action="store_true", help="validate the file; exit 1 on a problem")
    a = p.parse_args()
    trace = load(a.trace)
    bad = problems(trace)
    for line in bad[:20]:
        print("problem: " + line)
    if a.check and bad:
        sys.exit(1)
    other = trace.get("otherData", {})
    if "schedule" in other:
        print(f"{other['schedule']}: {other['stages']} stages, {other['microbatches']} microbatches")
    rows, mean, med = analyse(trace, a.skip)
    names = labels(trace)
    for pid, idle in sorted(mean["idle"].items()):
        print(f"{names.get(pid, pid)}: busy {mean['busy_us'][pid] / 1e3:.2f} ms per step, idle {idle:.1%}")
    for (stage, k), v in sorted(med.items()):
        print(f"stage {stage} {k}: median {v / 1e3:.3f} ms")
    print(f"makespan {mean['makespan_us'] / 1e3:.2f} ms, bubble {mean['bubble']:.4f} (measured, mean of "
          f"{len([r for r in rows if r['step'] >= a.skip]) or len(rows)} steps)")
    if "predicted_makespan_us" in mean:
        print(f"predicted from the stage medians: makespan {mean['predicted_makespan_us'] / 1e3:.2f} ms, "
              f"bubble {mean['predicted_bubble']:.4f}")
    split = any(kind(e) == "W" for e in slices(trace))
    print(f"logical time ({'F 1, B 1, W 1' if split else 'F 1, B 2'}): bubble {mean['logical_bubble']:.4f}; "
          f"within each rank's own span {mean['logical_span_bubble']:.4f}")
    if a.png:
        render(trace, a.png, a.step)
        print(f"wrote {a.png}")


if __name__ == "__main__":
    main()

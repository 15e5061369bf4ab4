#!/usr/bin/python3
"""Activation recompute under a memory budget (docs/training.md "Memory budget", "Activation
recompute"): `memory: {budget_mb, recompute}` plans against the same spec without `memory:`.

    recompute_e2e.py --case budget|modes|mesh --workdir W [--opt PATH --run PATH] [--steps N]

The model is examples/models/export.py --preset gpt2-train; the spec examples/train/train_gpt2.yaml
(B 8, T 64, AdamW).

  budget  the plain plan's --report-format=json gives the model states S (params + grads +
          optimizer + read-only weights) and the activation peak A; with budget S + A/2 and
          recompute auto the plan's predicted peak is within the budget, its extra FLOPs at most
          one forward (the JSON's recompute.flops <= forward_flops), and --steps (default 20)
          steps' losses are bit-equal to the plain plan's while the runtime's measured bytes
          (metrics state_bytes + the arena's high-water mark, found by a canary pattern, + the
          read-only weights) stay within the budget. At the reported minimum_budget_bytes it
          trains with the same losses; one MiB below it colossal-opt refuses, naming the minimum.
  modes   recompute full and selective without a budget: losses bit-equal to the plain plan;
          full's planned arena and measured high-water mark below the plain one's.
  mesh    under mpirun: dp=2 with ZeRO stage 3 and recompute full, tp=2 with full (the clones
          include the forward's tensor-parallel all_reduces) and with selective, and grad_accum 2
          with full, each bit-equal per step to the same mesh without recompute.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no mpirun for mesh).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402
import dp_e2e as d  # noqa: E402

MIB = 1048576


def memory_spec(s, name, memory, extra=""):
    return s.spec(name, d.BASE_SPEC + extra + (f"memory: {{{memory}}}\n" if memory else ""))


def budget_mb(nbytes):
    """budget_mb whose bytes (int(mb * 2^20), as the spec parser computes) are exactly `nbytes`."""
    return repr((nbytes + 0.5) / MIB)


def measured_bytes(row, weights):
    sb, mem = row["state_bytes"], row["memory"]
    return sb["params"] + sb["grads"] + sb["optimizer"] + weights + mem["arena_high_water_bytes"]


def case_budget(args):
    s = t.Setup(args, need_shared=False)
    plain, rep = t.json_report(s, "plain", memory_spec(s, "plain", ""))
    pr = rep["per_rank"]
    states = pr["params"] + pr["grads"] + pr["optimizer"] + pr["weights"]
    activations = pr["activations"]
    budget = states + activations // 2
    print(f"plain: states {states} bytes, activation peak {activations} bytes; budget {budget} bytes "
          f"({budget / MIB:.3f} MiB)")
    ref = d.train(s, 1, plain, os.path.join(s.work, "plain.jsonl"), args.steps)
    ok = True

    def check_fit(name, budget_bytes):
        nonlocal ok
        plan, r = t.json_report(s, name, memory_spec(s, name, f"budget_mb: {budget_mb(budget_bytes)}, recompute: auto"))
        m = r["memory"]
        rc = m["recompute"] or {}
        print(f"{name}: budget {m['budget_bytes']}, predicted peak {m['predicted_peak_bytes']}, minimum "
              f"{m['minimum_budget_bytes']}; recompute {rc}")
        if m["budget_bytes"] != budget_bytes or m["predicted_peak_bytes"] > budget_bytes:
            print("  the plan does not fit the budget  MISMATCH")
            ok = False
        if not rc or rc.get("flops", 0) > rc.get("forward_flops", 0) or rc.get("forward_flops", 0) <= 0:
            print("  expected recompute with extra FLOPs at most one forward  MISMATCH")
            ok = False
        rows = d.train(s, 1, plan, os.path.join(s.work, name + ".jsonl"), args.steps)
        ok &= t.same_losses(name, rows, ref)
        worst = max(measured_bytes(row, pr["weights"]) for row in rows)
        print(f"  measured: states + read-only weights + arena high-water = {worst} bytes (budget {budget_bytes});"
              f" peak RSS {rows[-1]['memory'].get('peak_rss_bytes')} bytes")
        if worst > budget_bytes:
            print("  measured memory above the budget  MISMATCH")
            ok = False
        return m

    m = check_fit("half", budget)
    minimum = m["minimum_budget_bytes"]
    if minimum >= budget:
        print(f"  the minimum {minimum} should be below the half-activation budget {budget}  MISMATCH")
        ok = False
    check_fit("minimum", minimum)
    below = minimum - MIB
    spec = memory_spec(s, "below", f"budget_mb: {budget_mb(below)}, recompute: auto")
    err = d.run_mpi(1, [s.opt, s.model, "--spec", spec, "-o", os.path.join(s.work, "below.cplan")],
                    "colossal-opt below the minimum", expect_fail=True).stderr
    print(f"one MiB below the minimum: {err.strip()}")
    if f"({minimum} bytes)" not in err or "below the smallest plan" not in err:
        print(f"  expected a refusal naming the minimum {minimum} bytes  MISMATCH")
        ok = False
    if os.path.exists(os.path.join(s.work, "below.cplan")):
        print("  a plan was written anyway  MISMATCH")
        ok = False
    return ok


def case_modes(args):
    s = t.Setup(args, need_shared=False)
    plain, rep = t.json_report(s, "plain", memory_spec(s, "plain", ""))
    ref = d.train(s, 1, plain, os.path.join(s.work, "plain.jsonl"), args.steps)
    ok = True
    for mode in ("full", "selective"):
        plan, r = t.json_report(s, mode, memory_spec(s, mode, f"recompute: {mode}"))
        rc = r["memory"]["recompute"]
        print(f"{mode}: arena {r['per_rank']['activations']} bytes (plain {rep['per_rank']['activations']}), {rc}")
        rows = d.train(s, 1, plan, os.path.join(s.work, mode + ".jsonl"), args.steps)
        ok &= t.same_losses(mode, rows, ref)
        if not rc or rc["ops"] == 0 or rc["flops"] > rc["forward_flops"]:
            print("  expected recomputed ops costing at most one forward  MISMATCH")
            ok = False
        high = rows[-1]["memory"]["arena_high_water_bytes"]
        if mode == "full" and not (r["per_rank"]["activations"] < rep["per_rank"]["activations"] and
                                   high <= r["per_rank"]["activations"]):
            print(f"  full: expected a smaller arena than plain, measured high-water {high}  MISMATCH")
            ok = False
    return ok


def case_mesh(args):
    s = t.Setup(args, need_shared=False)
    ok = True
    cases = [("dp2_zero3", 2, "mesh: {dp: 2}\nzero: {stage: 3}\n", "full"),
             ("tp2", 2, "mesh: {tp: 2}\n", "full"),
             ("tp2_sel", 2, "mesh: {tp: 2}\n", "selective"),
             ("accum2", 1, "  grad_accum: 2\n", "full")]
    for name, ranks, extra, mode in cases:
        base_text = d.BASE_SPEC + extra  # BASE_SPEC ends inside `train:`: "  grad_accum" joins it
        base = s.compile(name, s.spec(name, base_text))
        with_rc = s.compile(name + "_rc", s.spec(name + "_rc", base_text + f"memory: {{recompute: {mode}}}\n"))
        ref = d.train(s, ranks, base, os.path.join(s.work, name + ".jsonl"), args.steps)
        rows = d.train(s, ranks, with_rc, os.path.join(s.work, name + "_rc.jsonl"), args.steps)
        ok &= t.same_losses(f"{name} + recompute {mode}", rows, ref)
    return ok


if __name__ == "__main__":
    u.case_main(__doc__, {"budget": case_budget, "modes": case_modes, "mesh": case_mesh}, steps=20)

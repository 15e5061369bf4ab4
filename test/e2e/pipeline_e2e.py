#!/usr/bin/python3
"""Pipeline parallelism (docs/parallelism.md "Pipeline parallelism"): `mesh: {pp: P}` with
`parallel.pipeline: {schedule, microbatches, stages}` against one rank.

    pipeline_e2e.py --case train|llama|mesh|zerobubble|inference|trace|kill|errors --workdir W [--opt PATH --run PATH] [--steps N]

  train   the GPT-2 preset (examples/train/train_gpt2.yaml: B 8, T 64, AdamW) under pp=2 and pp=4,
          gpipe, 1f1b, interleaved (V=2), zb-h1 and zbv, microbatches m in {P, 2P, 8 (the rows)},
          with grad_clip at m=2P, a hand-written schedule file (GPipe's order), and
          with the user's cut point: per-step losses
          bit-equal to one rank with grad_accum = m (the same summation order) and within 1e-6
          relative of grad_accum 1. --dump-schedule's bubble is exactly (P-1)/(V*m+P-1); each
          rank's peak of saved activation bytes, counted by the runtime, equals the --report
          prediction (one stage per rank: its saved bytes per microbatch x in-flight).
          The same model exported with a fixed batch trains like the dynamic one.
  llama   the Llama example (GQA 4/2 heads, RoPE) under pp=2 1f1b, pp=4 gpipe and pp=2 interleaved,
          the same Llama with its head tied to the embedding (pp=2 1f1b, pp=4 interleaved), the shared
          pretrained aidreams260K (when ../shared is present) under pp=2, and a GPT-2 whose LM head
          is tied to the embedding in the graph (tie_lm_head.py: one parameter read on the first
          and the last stage) under pp=2 and pp=4: bit-equal to grad_accum m.
  mesh    pp=2 x dp=2 and pp=2 x tp=2 (1f1b, m=4) bit-equal per step to dp=2 / tp=2 with
          grad_accum 4 (the same sums), and within 1e-6 of one rank; a checkpoint saved at step 10
          under pp=2 x tp=2 resumed under pp=4 (gpipe) and under one rank continues the same curve
          as an uninterrupted one-rank run (within 1e-6 per step).
  zerobubble  zb-h1 and zbv (the backward split into B, input gradients, and W, weight
          gradients): the GPT-2 preset under pp=2 and pp=4 with m in {P, 2P, 8}, with and without
          grad_clip, bit-equal to grad_accum m and within 1e-6 of grad_accum 1; the Llama example and
          a tied-head GPT-2 (zbv: the embedding and the head on rank 0); pp=2 x dp=2 (zb-h1) and
          pp=2 x tp=2 (zbv) bit-equal to dp=2 / tp=2 with grad_accum 4; the schedule's bubble
          (P-1)/(3m+P-1) for zb-h1 (a third of 1F1B's idle units) and (P-1)/(6m+P-1) for zbv, also
          replayed from a --trace; saved activation peaks as --report predicted.
  inference  `mode: inference` under pp=2 (m=4) and pp=4 (m=8): the logits of the GPT-2 preset, the
          Llama example and (when present) the shared aidreams260K within 1e-5 of one rank's.
  trace   `train --trace T.json` (docs/parallelism.md "Traces") under pp=2 1f1b and gpipe (m=4), pp=4
          1f1b (m=8), pp=2 x dp=2 1f1b (m=2) and pp=2 interleaved (V=2, m=4), 3+ steps: the file loads with json.load and
          examples/train/show_trace.py finds no problem in it (every X event has step, stage,
          microbatch and chunk; slices of a rank never overlap; every flow has one start inside a
          send and one end inside the matching receive, not before it); per rank and step the
          traced actions are --dump-schedule's list for that rank, F and B once per microbatch;
          (P·V-1)·m·2 flows per pipeline group and step; the bytes each rank sends per step are
          --report's point-to-point figures; each rank's saved-activation counter peaks
          at the metrics' pipeline_saved_peak_bytes of its stage; the bubble replayed from the
          trace in logical time (F 1, B 2) is exactly (P-1)/(V·m+P-1); the measured clock offsets
          are within half their round trip. A one-rank plan with grad_accum 2 traces two
          train_step and one optimizer_step per step. --trace naming the --metrics file is an
          error. Prints the measured wall-time bubble per rank.
  kill    `colossal-run --nproc 2 ... train` of a pp=2 1f1b plan (m=4, a million steps); once rank 0
          has written a metrics line, rank 1 gets SIGKILL mid-pipeline (dp_e2e's
          kill_rank_mid_training): the job ends within 30 s, non-zero, with a message naming
          rank 1, and no process of the job is left. And a stage that stops answering (rank 1
          stalled by COLOSSAL_TEST_STALL_RANK) ends the job under --comm-timeout 3: rank 0 names
          the receive on axis 'pp', within 30 s, nothing left.
  errors  a hand-written schedule that deadlocks or names an unknown action, grad_accum with pp, microbatches that do not divide the batch, a cut point matching no
          node, more stages than ops, interleaved with m not a multiple of P or without virtual_stages, pp with ZeRO (not supported yet): one clear error each, before
          anything runs.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no mpirun).
"""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402
import dp_e2e as d  # noqa: E402


def pipeline_spec(s, name, pp, schedule, m, extra="", cuts=None, chunks=1):
    """`pp` may carry more mesh axes: "2, dp: 2"."""
    text = d.BASE_SPEC + extra + f"mesh: {{pp: {pp}}}\nparallel:\n  pipeline: {{schedule: {schedule}, microbatches: {m}"
    if chunks > 1:
        text += f", virtual_stages: {chunks}"
    if cuts:
        text += ", stages: [" + ", ".join(f"'{c}'" for c in cuts) + "]"
    return s.spec(name, text + "}\n")


def accum_spec(s, name, m, extra=""):
    return s.spec(name, d.BASE_SPEC + extra + f"  grad_accum: {m}\n")


def compile_plan(s, name, spec, model=None, pipeline=True):
    plan = os.path.join(s.work, name + ".cplan")
    flags = ["--report", "--dump-schedule"] if pipeline else []
    out, _, _ = u.run([s.opt, model or s.model, "--spec", spec, "-o", plan] + flags, f"colossal-opt {name}")
    return plan, out


def predicted(report):
    """Per stage (saved bytes per microbatch, in-flight, activations) from the report's table,
    and the schedule's bubble from --dump-schedule."""
    rows = {}
    for line in report.splitlines():
        m = re.match(r"\s+(\d+)\s+\d+\s+\d+\s+\d+\s+[\d.]+\s+(?:\d+|-)\s+(\d+)\s+(\d+)\s+(\d+)$", line)
        if m:
            rows[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    bubble = re.search(r"bubble \(forward 1, (?:backward 2|B 1, W 1)\): ([\d.]+)", report)
    peaks = re.search(r"peak saved activation bytes per pipeline rank \(the schedule's\):((?: \d+)+)", report)
    return rows, float(bubble.group(1)) if bubble else None, [int(x) for x in peaks.group(1).split()] if peaks else None


def close_losses(label, rows, ref, tol):
    worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(rows, ref))
    ok = worst <= tol and len(rows) == len(ref)
    print(f"  {label}: max relative loss difference {worst:.2e} (tolerance {tol:g})" + ("" if ok else "  MISMATCH"))
    return ok


def expected_bubble(schedule, pp, m, chunks):
    """The schedule's bubble in logical time: (P-1)/(V·m+P-1) with F 1 and a whole backward 2;
    zb-h1 (F = B = W = 1) idles P-1 of 3m+P-1 units per rank (a third of 1F1B's 3(P-1)); zbv the
    same P-1 of 6m+P-1 (two chunks per rank): the lower bound, since the last rank's first forward
    cannot start before P-1 units."""
    if schedule == "zb-h1":
        return (pp - 1) / (3 * m + pp - 1)
    if schedule == "zbv":
        return (pp - 1) / (6 * m + pp - 1)
    return (pp - 1) / (chunks * m + pp - 1)


def rank_of_stage(schedule, stage, pp):
    """The pipeline rank that runs `stage` (runtime/plan/PipelineSchedule.cpp rankOfStage)."""
    if schedule == "zbv":
        return stage if stage < pp else 2 * pp - 1 - stage
    return stage % pp


def check_pipeline(s, name, pp, schedule, m, steps, extra="", cuts=None, model=None, ref1=None, chunks=1):
    ok = True
    plan, report = compile_plan(s, name, pipeline_spec(s, name, pp, schedule, m, extra, cuts, chunks), model)
    stages, bubble, peaks = predicted(report)
    chunks = len(stages) // pp
    want = expected_bubble(schedule, pp, m, chunks)
    if bubble is None or abs(bubble - want) > 5e-5:
        print(f"  {name}: schedule bubble {bubble}, expected {want:.4f}  MISMATCH")
        ok = False
    span = re.search(r"idle within each rank's own span \(its first to its last compute action\): ([\d.]+)", report)
    if schedule == "zbv" and m >= 2 * pp and (not span or float(span.group(1)) > 5e-5):
        print(f"  {name}: idle within the ranks' own spans {span and span.group(1)}, expected 0 (zbv, m >= 2P)  MISMATCH")
        ok = False
    ref_plan = s.compile(name + "_ref", accum_spec(s, name + "_ref", m, extra)) if not model else \
        compile_plan(s, name + "_ref", accum_spec(s, name + "_ref", m, extra), model, pipeline=False)[0]
    ref = d.train(s, 1, ref_plan, os.path.join(s.work, name + "_ref.jsonl"), steps)
    rows = d.train(s, pp, plan, os.path.join(s.work, name + ".jsonl"), steps)
    ok &= t.same_losses(f"{name} (pp={pp} {schedule} m={m}) vs grad_accum {m}", rows, ref)
    if ref1 is not None:
        ok &= close_losses(f"{name} vs grad_accum 1", rows, ref1, 1e-6)
    measured = rows[-1]["memory"].get("pipeline_saved_peak_bytes")
    print(f"  saved activations per pipeline rank: measured peak {measured}, predicted {peaks}; bubble {bubble:.4f}")
    if measured != peaks or len(peaks or []) != pp:
        print("  measured peak saved bytes differ from the report's prediction  MISMATCH")
        ok = False
    if chunks == 1 and peaks != [stages[k][2] for k in sorted(stages)]:
        print("  one stage per rank: the rank's peak must be the stage's saved x in-flight  MISMATCH")
        ok = False
    return ok


def setup(args):
    """The workdir's GPT-2 preset and token data (train_e2e.Setup); skips (exit 77) without mpirun."""
    s = t.Setup(args, need_shared=False)
    if not d.mpirun_cmd(2):
        print("skipped: no mpirun")
        sys.exit(u.SKIP)
    return s


def export_llama_and_tied(s):
    """The Llama example (GQA 4/2 heads, RoPE; B 8, T 64, dynamic batch), and a GPT-2 and that
    Llama whose LM head is the embedding in the graph (tie_lm_head.py: one parameter read on the
    first and the last stage), exported into the workdir: (llama, tied GPT-2, tied Llama)."""
    llama = os.path.join(s.work, "llama")
    u.run([sys.executable, u.EXPORT_PY, "--arch", "llama", "--layers", "2", "--d-model", "64", "--heads", "4",
           "--kv-heads", "2", "--vocab", "256", "--seq", "64", "--batch", "8", "--dynamic-batch", "--out", llama,
           "--quiet"], "export.py --arch llama", timeout=600)
    gpt2 = os.path.join(s.work, "gpt2")
    u.run([sys.executable, u.EXPORT_PY, "--arch", "gpt2", "--layers", "2", "--d-model", "64", "--heads", "4",
           "--vocab", "256", "--seq", "64", "--batch", "8", "--dynamic-batch", "--out", gpt2, "--quiet"],
          "export.py --arch gpt2", timeout=600)
    tie = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tie_lm_head.py")
    tied, llama_tied = os.path.join(gpt2, "tied.onnx"), os.path.join(llama, "tied.onnx")
    u.run([sys.executable, tie, os.path.join(gpt2, "model.onnx"), tied], "tie_lm_head.py")
    u.run([sys.executable, tie, os.path.join(llama, "model.onnx"), llama_tied], "tie_lm_head.py (Llama)")
    return os.path.join(llama, "model.onnx"), tied, llama_tied


def check_aidreams(s, args, name, schedule):
    """check_pipeline on the shared pretrained aidreams260K at pp=2, m=4 when ../shared has it
    (else a note that this part is skipped, and True)."""
    shared = os.path.join(args.shared_dir, "models", "aidreams260K", "model.onnx")
    if not os.path.isfile(shared):
        print(f"  aidreams260K: {shared} is absent, that part is skipped")
        return True
    return check_pipeline(s, name, 2, schedule, 4, args.steps, model=shared)


def check_with_mesh(s, axis, schedule, extra, steps):
    """pp=2 x `axis`=2 under `schedule` (m=4) against `axis`=2 with grad_accum 4 (the same sums):
    bit-equal per step. Returns (ok, the pipeline run's metrics rows)."""
    name = f"pp2_{axis}2_{schedule}"
    plan, report = compile_plan(s, name, pipeline_spec(s, name, f"2, {axis}: 2", schedule, 4, extra))
    ref_plan = s.compile(f"{axis}2_ref", s.spec(f"{axis}2_ref", d.BASE_SPEC + extra +
                                               f"  grad_accum: 4\nmesh: {{{axis}: 2}}\n"))
    ref = d.train(s, 2, ref_plan, os.path.join(s.work, f"{axis}2_ref.jsonl"), steps)
    rows = d.train(s, 4, plan, os.path.join(s.work, name + ".jsonl"), steps)
    ok = t.same_losses(f"{name} vs {axis}=2 with the same accumulation", rows, ref)
    # The report's all_reduce elements for pipeline rank 0 (its stages' programs only) against
    # what rank 0 counted (the metrics; plus the runtime's loss reductions, a few elements).
    block = re.search(r"communication per optimizer step on pipeline rank 0 .*?\n((?:  .*\n)*?)  total", report)
    predicted = sum(int(n) for n in re.findall(r"all_reduce over '[^']+': \d+ bytes in \d+ collectives; (\d+) elements",
                                               block.group(1))) if block else None
    measured = rows[-1].get("comm_elements", {}).get("all_reduce")
    good = predicted is not None and measured is not None and 0 <= measured - predicted <= 16
    print(f"  {name}: all_reduce elements per step on rank 0: report {predicted}, measured {measured}"
          + ("" if good else "  MISMATCH"))
    return ok and good, rows


def case_train(args):
    s = setup(args)
    ok = True
    # Every schedule at pp=2 and pp=4 with m in {P, 2P, 8 (the rows)}, without clipping; with
    # clipping at m = 2P. zb-h1 and zbv are also in case zerobubble, with other models and meshes.
    for clip in ("", "  grad_clip: 1.0\n"):
        tag = "clip" if clip else "noclip"
        ref1_plan = s.compile("one_" + tag, accum_spec(s, "one_" + tag, 1, clip))
        ref1 = d.train(s, 1, ref1_plan, os.path.join(s.work, f"one_{tag}.jsonl"), args.steps)
        for schedule in ("gpipe", "1f1b", "interleaved", "zb-h1", "zbv"):
            for pp in (2, 4):
                for m in sorted({pp, 2 * pp, 8}):
                    if clip and m != 2 * pp:
                        continue
                    chunks = 2 if schedule == "interleaved" else 1
                    ok &= check_pipeline(s, f"pp{pp}_{schedule}_m{m}_{tag}", pp, schedule, m, args.steps, clip,
                                         ref1=ref1, chunks=chunks)
    # GPipe's order written by hand as a schedule file: the same losses as the generated gpipe.
    hand = os.path.join(s.work, "gpipe_by_hand.sched")
    with open(hand, "w") as f:
        f.write("# written by hand\nrank 0: F0 sendF0 F1 sendF1 recvB0 B0 recvB1 B1\n"
                "rank 1: recvF0 F0 recvF1 F1 B0 sendB0 B1 sendB1\n")
    plan, _ = compile_plan(s, "pp2_file", s.spec("pp2_file", d.BASE_SPEC +
                           f"mesh: {{pp: 2}}\nparallel:\n  pipeline: {{microbatches: 2, schedule_file: {hand}}}\n"))
    gen = d.train(s, 2, os.path.join(s.work, "pp2_gpipe_m2_noclip.cplan"), os.path.join(s.work, "pp2_gpipe_again.jsonl"),
                  args.steps)
    rows = d.train(s, 2, plan, os.path.join(s.work, "pp2_file.jsonl"), args.steps)
    ok &= t.same_losses("pp=2 schedule file (GPipe by hand) vs generated gpipe", rows, gen)
    # A cut point given by the user: after the first block's last node.
    ok &= check_pipeline(s, "pp2_cut", 2, "1f1b", 4, args.steps, cuts=["/h.0/.*"])
    # A fixed-batch export trains like the dynamic one.
    static_dir = os.path.join(s.work, "static")
    u.run([sys.executable, u.EXPORT_PY, "--preset", "gpt2-train", "--static", "--out", static_dir, "--quiet"],
          "export.py --static", timeout=600)
    ok &= check_pipeline(s, "pp2_static", 2, "1f1b", 4, args.steps, model=os.path.join(static_dir, "model.onnx"))
    return ok


def case_llama(args):
    s = setup(args)
    model, tied, llama_tied = export_llama_and_tied(s)
    ok = check_pipeline(s, "llama_pp2", 2, "1f1b", 4, args.steps, model=model)
    ok &= check_pipeline(s, "llama_pp4", 4, "gpipe", 8, args.steps, model=model)
    ok &= check_pipeline(s, "llama_interleaved_pp2", 2, "interleaved", 4, args.steps, model=model, chunks=2)
    ok &= check_pipeline(s, "tied_pp2", 2, "1f1b", 4, args.steps, model=tied)
    ok &= check_pipeline(s, "llama_tied_pp2", 2, "1f1b", 4, args.steps, model=llama_tied)
    ok &= check_pipeline(s, "llama_tied_pp4", 4, "interleaved", 8, args.steps, model=llama_tied, chunks=2)
    ok &= check_pipeline(s, "tied_pp4", 4, "gpipe", 8, args.steps, model=tied)
    ok &= check_aidreams(s, args, "aidreams_pp2", "1f1b")
    return ok


def case_mesh(args):
    s = setup(args)
    ok = True
    clip = "  grad_clip: 1.0\n"
    steps = max(args.steps, 12)
    one = s.compile("one", accum_spec(s, "one", 4, clip))
    full = d.train(s, 1, one, os.path.join(s.work, "one.jsonl"), steps)
    for axis in ("dp", "tp"):
        good, rows = check_with_mesh(s, axis, "1f1b", clip, args.steps)
        ok &= good
        ok &= close_losses(f"pp2_{axis}2 vs one rank", rows, full[:len(rows)], 1e-6)
    # Save at step 10 under pp=2 x tp=2; resume under pp=4 and under one rank.
    ckpt = os.path.join(s.work, "ckpt")
    plan, _ = compile_plan(s, "pp2_tp2_save", pipeline_spec(s, "pp2_tp2_save", "2, tp: 2", "1f1b", 4, clip))
    first = d.train(s, 4, plan, os.path.join(s.work, "saved.jsonl"), 10, ["--save", ckpt])
    ok &= close_losses("pp=2 x tp=2, steps 0-9, vs one rank", first, full[:10], 1e-6)
    p4, _ = compile_plan(s, "pp4_resume", pipeline_spec(s, "pp4_resume", 4, "gpipe", 4, clip))
    for label, ranks, resume_plan in (("pp=4", 4, p4), ("one rank", 1, one)):
        rows = d.train(s, ranks, resume_plan, os.path.join(s.work, f"resume_{ranks}.jsonl"), steps, ["--resume", ckpt], first=10)
        ok &= close_losses(f"resumed at step 10 under {label}, steps 10-{steps - 1}", rows, full[10:steps], 1e-6)
    return ok


def case_zerobubble(args):
    """zb-h1 and zbv: the backward split into B and W (docs/parallelism.md "Zero-bubble schedules")."""
    s = setup(args)
    ok = True
    clip = "  grad_clip: 1.0\n"
    # The GPT-2 preset (8 rows): m in {P, 2P, 8}, with and without clipping.
    for extra, cases in (("", [(2, "zb-h1", 2), (2, "zb-h1", 8), (4, "zb-h1", 8), (2, "zbv", 4), (4, "zbv", 4),
                               (2, "zbv", 8)]),
                         (clip, [(2, "zb-h1", 4), (4, "zbv", 8)])):
        tag = "clip" if extra else "noclip"
        ref1_plan = s.compile("one_" + tag, accum_spec(s, "one_" + tag, 1, extra))
        ref1 = d.train(s, 1, ref1_plan, os.path.join(s.work, f"one_{tag}.jsonl"), args.steps)
        for pp, schedule, m in cases:
            ok &= check_pipeline(s, f"pp{pp}_{schedule}_m{m}_{tag}", pp, schedule, m, args.steps, extra, ref1=ref1)
    # Llama (GQA 4/2, RoPE), and a GPT-2 whose LM head is tied to the embedding: under zbv the
    # embedding (stage 0) and the head (stage 2P-1) are on rank 0.
    model, tied, llama_tied = export_llama_and_tied(s)
    ok &= check_pipeline(s, "llama_zbh1_pp2", 2, "zb-h1", 4, args.steps, model=model)
    ok &= check_pipeline(s, "llama_tied_zbv_pp2", 2, "zbv", 4, args.steps, model=llama_tied)
    ok &= check_pipeline(s, "llama_tied_zbh1_pp4", 4, "zb-h1", 8, args.steps, model=llama_tied)
    ok &= check_pipeline(s, "llama_zbv_pp2", 2, "zbv", 4, args.steps, model=model)
    ok &= check_pipeline(s, "llama_zbv_pp4", 4, "zbv", 8, args.steps, model=model)
    ok &= check_pipeline(s, "tied_zbv_pp2", 2, "zbv", 4, args.steps, model=tied)
    ok &= check_pipeline(s, "tied_zbh1_pp4", 4, "zb-h1", 8, args.steps, model=tied)
    # The shared pretrained aidreams260K under zbv: values read by both stages at the V's turn
    # (one copy kept) make the per-rank saved peak the simulator's exact count.
    ok &= check_aidreams(s, args, "aidreams_zbv_pp2", "zbv")
    # pp=2 x dp=2 (zb-h1) and pp=2 x tp=2 (zbv) against dp=2 / tp=2 with the same accumulation.
    for axis, schedule in (("dp", "zb-h1"), ("tp", "zbv")):
        ok &= check_with_mesh(s, axis, schedule, clip, args.steps)[0]
    # The traces: every action once, W included; the bubble replayed in logical time exact.
    st = show_trace()
    steps = max(3, min(args.steps, 4))
    ok &= check_trace(s, st, "trace_pp2_zbh1", 2, "zb-h1", 4, 2, 1, steps)
    ok &= check_trace(s, st, "trace_pp2_zbv", 2, "zbv", 4, 2, 1, steps, chunks=2)
    ok &= check_trace(s, st, "trace_pp4_zbv", 4, "zbv", 8, 4, 1, steps, chunks=2)
    return ok


def case_inference(args):
    """Inference under pp (gpipe over microbatches of the batch): the outputs equal one rank's."""
    s = setup(args)
    import numpy as np
    ok = True
    models = [("gpt2", s.model)]
    llama = os.path.join(s.work, "llama")
    u.run([sys.executable, u.EXPORT_PY, "--arch", "llama", "--layers", "2", "--d-model", "64", "--heads", "4",
           "--kv-heads", "2", "--vocab", "256", "--seq", "64", "--batch", "8", "--dynamic-batch", "--out", llama,
           "--quiet"], "export.py --arch llama", timeout=600)
    models.append(("llama", os.path.join(llama, "model.onnx")))
    shared = os.path.join(args.shared_dir, "models", "aidreams260K", "model.onnx")
    if os.path.isfile(shared):
        models.append(("aidreams260K", shared))
    rng = np.random.default_rng(0)
    ids = os.path.join(s.work, "input_ids.npy")
    np.save(ids, rng.integers(0, 256, size=(8, 64), dtype=np.int64))
    for label, model in models:
        outs = {}
        for pp, m in ((1, 1), (2, 4), (4, 8)):
            name = f"infer_{label}_pp{pp}"
            text = "mode: inference\ninputs: {input_ids: [8, 64]}\n"
            if pp > 1:
                text += f"mesh: {{pp: {pp}}}\nparallel:\n  pipeline: {{microbatches: {m}}}\n"
            plan = os.path.join(s.work, name + ".cplan")
            u.run([s.opt, model, "--spec", s.spec(name, text), "-o", plan], f"colossal-opt {name}")
            out_dir = os.path.join(s.work, name)
            d.run_mpi(pp, [s.run_bin, plan, "--input", f"input_ids={ids}", "--output-dir", out_dir, "--threads", "1"],
                      f"colossal-run {name}")
            outs[pp] = np.load(os.path.join(out_dir, "logits.npy"))
        for pp in (2, 4):
            err = float(np.abs(outs[pp] - outs[1]).max() / max(1e-30, float(np.abs(outs[1]).max())))
            good = outs[pp].shape == outs[1].shape and err <= 1e-5
            print(f"  {label} inference pp={pp}: max |diff| / max |one rank| = {err:.2e}" + ("" if good else "  MISMATCH"))
            ok &= good
    return ok


def show_trace():
    """examples/train/show_trace.py as a module."""
    path = os.path.join(u.REPO, "examples", "train", "show_trace.py")
    spec = importlib.util.spec_from_file_location("show_trace", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dumped_schedule(report):
    """--dump-schedule's action names per pipeline rank."""
    return {int(m.group(1)): m.group(2).split() for m in re.finditer(r"^rank (\d+) \(stages? [\d, ]+\): (.*)$",
                                                                     report, re.M)}


def check_trace(s, st, name, mesh, schedule, m, pp, dp, steps, chunks=1):
    ok = True

    def bad(msg):
        nonlocal ok
        print(f"  {name}: {msg}  MISMATCH")
        ok = False

    spec = pipeline_spec(s, name, mesh, schedule, m, chunks=chunks)
    plan, report = compile_plan(s, name, spec)
    want_actions = dumped_schedule(report)
    path = os.path.join(s.work, name + ".trace.json")
    rows = d.train(s, pp * dp, plan, os.path.join(s.work, name + ".jsonl"), steps, ["--trace", path])
    with open(path) as f:
        trace = json.load(f)
    for p in st.problems(trace)[:10]:
        bad(p)
    xs = st.slices(trace)
    stage_of = {}  # pid -> its coordinate on the pipeline axis
    for e in xs:
        if e["args"]["microbatch"] is not None:
            stage_of[e["pid"]] = rank_of_stage(schedule, e["args"]["stage"], pp)
    if sorted(stage_of) != list(range(pp * dp)):
        bad(f"ranks in the trace: {sorted(stage_of)}")
    for step, by_rank in st.rank_steps(trace).items():
        for pid, evs in by_rank.items():
            names = [e["name"] for e in evs]
            if names != want_actions.get(stage_of[pid]):
                bad(f"step {step} rank {pid}: traced {' '.join(names)}; the schedule lists "
                    f"{' '.join(want_actions.get(stage_of[pid], []))}")
    phases = 3 if schedule in ("zb-h1", "zbv") else 2  # F, B (and W)
    compute = [e for e in xs if st.kind(e) in st.COMPUTE]
    if len(compute) != steps * pp * chunks * dp * phases * m:
        bad(f"{len(compute)} compute events, expected {steps * pp * chunks * dp * phases * m}")
    # A message per microbatch and direction at each cut between two ranks (zbv's turn on the last
    # rank is no cut between ranks).
    cuts = sum(rank_of_stage(schedule, k, pp) != rank_of_stage(schedule, k + 1, pp) for k in range(pp * chunks - 1))
    flows = [e for e in trace["traceEvents"] if e.get("ph") == "s"]
    if len(flows) != steps * dp * cuts * m * 2:
        bad(f"{len(flows)} flows, expected {steps * dp * cuts * m * 2}")
    # The bytes each rank sends per step, as --report's point-to-point lines predict them.
    p2p = {int(r): (int(f), int(b)) for r, f, b in re.findall(
        r"pipeline rank (\d+): (\d+) forward \(activations\), (\d+) backward \(gradients\)", report)}
    sent = {}
    for e in xs:
        # Sends, and what a compute action sent without one (zbv's turn: "sent_bytes").
        k = st.kind(e)
        moved = e["args"].get("bytes", 0) if k in ("sendF", "sendB") else e["args"].get("sent_bytes", 0)
        if moved and k in ("sendF", "sendB", "F", "B"):
            key = (e["pid"], e["args"]["step"])
            f, b = sent.get(key, (0, 0))
            sent[key] = (f + moved, b) if k in ("sendF", "F") else (f, b + moved)
    for (pid, step), got in sorted(sent.items()):
        if got != p2p.get(stage_of[pid]):
            bad(f"step {step} rank {pid}: sent {got} bytes (forward, backward); --report predicts {p2p.get(stage_of[pid])}")
    if not p2p or len(sent) != steps * pp * dp:
        bad(f"--report's point-to-point lines {p2p}, traced sends on {len(sent)} rank-steps")
    peaks = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "C":
            peaks[e["pid"]] = max(peaks.get(e["pid"], 0), e["args"]["bytes"])
    want_peak = [max(r["memory"]["pipeline_saved_peak_bytes"][k] for r in rows) for k in range(pp)]
    got_peak = [peaks.get(pid) for pid in sorted(stage_of)]
    if got_peak != [want_peak[stage_of[pid]] for pid in sorted(stage_of)]:
        bad(f"counter peaks {got_peak}, metrics' pipeline_saved_peak_bytes {want_peak}")
    # --report-format=json's pipeline section: the same figures.
    _, js = t.json_report(s, name + "_json", spec)
    per_rank = js["pipeline"]["per_rank"]
    if [r["schedule"] for r in per_rank] != [want_actions.get(k) for k in range(pp)]:
        bad("--report-format=json pipeline.per_rank schedules differ from --dump-schedule's lists")
    if [r["peak_saved_bytes"] for r in per_rank] != want_peak or \
            [(r["sent_forward_bytes"], r["sent_backward_bytes"]) for r in per_rank] != [p2p.get(k) for k in range(pp)]:
        bad(f"--report-format=json pipeline.per_rank {per_rank}: peaks {want_peak}, sent {p2p}")
    other = trace["otherData"]
    for r, (off, rtt) in enumerate(zip(other["clock_measured_offset_ns"], other["clock_round_trip_ns"])):
        if abs(off) > rtt / 2 + 1000:
            bad(f"rank {r}: measured clock offset {off} ns is more than half the round trip {rtt} ns")
    per_step, mean, _ = st.analyse(trace, skip=1)
    want_bubble = expected_bubble(schedule, pp, m, chunks)
    logical = [r["logical_bubble"] for r in per_step]
    if any(abs(b - want_bubble) > 1e-12 for b in logical):
        bad(f"logical bubble per step {logical}, expected {want_bubble:.4f}")
    # zbv with m >= 2P: no idle inside any rank's own span (ZB-V's zero bubble).
    if schedule == "zbv" and m >= 2 * pp:
        span = [r["logical_span_bubble"] for r in per_step]
        if any(abs(b) > 1e-12 for b in span):
            bad(f"logical bubble within each rank's span per step {span}, expected 0")
    idle = ", ".join(f"rank {pid} {v:.1%}" for pid, v in sorted(mean["idle"].items()))
    print(f"  {name}: {len(xs)} slices, {len(flows)} flows; logical bubble {logical[0]:.4f} (expected "
          f"{want_bubble:.4f}); wall time: makespan {mean['makespan_us'] / 1e3:.1f} ms, bubble {mean['bubble']:.3f} "
          f"(predicted from the stage medians {mean.get('predicted_bubble', float('nan')):.3f}), idle {idle}")
    return ok


def case_trace(args):
    s = t.Setup(args, need_shared=False)
    d.mpirun_cmd(2)  # skips without mpirun
    st = show_trace()
    steps = max(args.steps, 3)
    ok = check_trace(s, st, "trace_pp2_1f1b", 2, "1f1b", 4, 2, 1, steps)
    ok &= check_trace(s, st, "trace_pp2_gpipe", 2, "gpipe", 4, 2, 1, steps)
    ok &= check_trace(s, st, "trace_pp4_1f1b", 4, "1f1b", 8, 4, 1, steps)
    ok &= check_trace(s, st, "trace_pp2_dp2", "2, dp: 2", "1f1b", 2, 2, 2, steps)
    ok &= check_trace(s, st, "trace_pp2_interleaved", 2, "interleaved", 4, 2, 1, steps, chunks=2)
    # A plan without a pipeline: train_step per microbatch and optimizer_step.
    plan = s.compile("trace_one", accum_spec(s, "trace_one", 2))
    path = os.path.join(s.work, "trace_one.trace.json")
    d.train(s, 1, plan, os.path.join(s.work, "trace_one.jsonl"), steps, ["--trace", path])
    with open(path) as f:
        trace = json.load(f)
    names = [e["name"] for e in st.slices(trace)]
    problems = st.problems(trace)
    good = names == ["train_step", "train_step", "optimizer_step"] * steps and not problems
    print(f"  one rank, grad_accum 2: {len(names)} slices {sorted(set(names))}, problems {problems[:3]}"
          + ("" if good else "  MISMATCH"))
    ok &= good
    metrics = os.path.join(s.work, "trace_same.jsonl")
    p = d.run_mpi(1, [s.run_bin, plan, "train", "--data", s.data, "--steps", "1", "--metrics", metrics,
                      "--trace", metrics], "--trace = --metrics", expect_fail=True)
    good = p.returncode != 0 and "--trace " + metrics + " is the --metrics file" in p.stderr
    print(f"  --trace naming the metrics file: {p.stderr.strip()}" + ("" if good else "  MISMATCH"))
    return ok and good


def case_kill(args):
    s = t.Setup(args, need_shared=False)
    d.mpirun_cmd(2)  # skips without mpirun
    plan, _ = compile_plan(s, "pp2_kill", pipeline_spec(s, "pp2_kill", 2, "1f1b", 4))
    ok = d.kill_rank_mid_training(s, plan, "pp_kill")
    # A stage that stops answering without dying: rank 1 sleeps before its first message
    # (COLOSSAL_TEST_STALL_RANK); rank 0's receive is watched like a collective.
    marker = ("COLOSSAL_PP_STALL_TEST", f"{os.getpid()}.{time.time_ns()}")
    env = dict(d.mpi_env(), COLOSSAL_TEST_STALL_RANK="1", COLOSSAL_TEST_STALL_SECONDS="3600",
               **{marker[0]: marker[1]})
    cmd = [s.run_bin, plan, "train", "--data", s.data, "--steps", "3", "--metrics",
           os.path.join(s.work, "pp_stall.jsonl"), "--threads", "1", "--nproc", "2", "--comm-timeout", "3"]
    print("$ COLOSSAL_TEST_STALL_RANK=1 " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = None, str(e.stderr or "")
    seconds = time.monotonic() - t0
    settle = time.monotonic() + 5
    while d.processes_with(f"{marker[0]}={marker[1]}") and time.monotonic() < settle:
        time.sleep(0.05)
    left = d.processes_with(f"{marker[0]}={marker[1]}")
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    good = rc not in (None, 0) and seconds < 30 and not left and \
        re.search(r"error: rank 0: recv on axis 'pp' did not complete within 3 s", err)
    print(f"  stalled stage: exit {rc} after {seconds:.1f} s, {len(left)} process(es) left; "
          f"{next((l for l in err.splitlines() if l.startswith('error:')), '(no error line)')}"
          + ("" if good else "  MISMATCH"))
    return ok and bool(good)


def case_errors(args):
    s = t.Setup(args, need_shared=False)
    ok = True

    def expect(name, text, pattern):
        nonlocal ok
        spec = s.spec(name, text)
        p = subprocess.run([s.opt, s.model, "--spec", spec, "-o", os.path.join(s.work, name + ".cplan")],
                           capture_output=True, text=True, timeout=600)
        err = p.stderr.strip()
        good = p.returncode != 0 and re.search(pattern, err) and err.count("error:") == 1
        print(f"  {name}: {err.splitlines()[0] if err else '(no error)'}" + ("" if good else "  MISMATCH"))
        ok &= bool(good)

    pipe = "mesh: {pp: 2}\nparallel:\n  pipeline: {schedule: 1f1b, microbatches: 4}\n"
    expect("accum", d.BASE_SPEC + "  grad_accum: 2\n" + pipe,
           r"train\.grad_accum 2 with mesh pp=2: .*microbatches plays grad_accum's role")
    expect("divide", d.BASE_SPEC + pipe.replace("microbatches: 4", "microbatches: 3"),
           r"parallel\.pipeline\.microbatches 3 must divide each dp rank's rows")
    expect("cut", d.BASE_SPEC + pipe.replace("microbatches: 4", "microbatches: 4, stages: ['/nowhere/.*']"),
           r"cut point '/nowhere/\.\*' matches no node")
    expect("cuts", d.BASE_SPEC + pipe.replace("microbatches: 4", "microbatches: 4, stages: ['/h.0/.*', '/h.1/.*']"),
           r"cuts\.yaml: parallel\.pipeline\.stages lists 2 cut points; 2 stages \(mesh pp=2\) need 1")
    expect("stages", d.BASE_SPEC + pipe.replace("pp: 2", "pp: 4096").replace("microbatches: 4", "microbatches: 1"),
           r"mesh pp=4096: more stages than the training step can be cut into")
    expect("interleaved_m", d.BASE_SPEC + pipe.replace("pp: 2", "pp: 4").replace(
        "schedule: 1f1b, microbatches: 4", "schedule: interleaved, microbatches: 6, virtual_stages: 2").replace(
        "inputs: {input_ids: [8, 64]}", "inputs: {input_ids: [12, 64]}"),
           r"schedule interleaved: microbatches 6 must be a multiple of mesh pp=4")
    expect("interleaved_v", d.BASE_SPEC + pipe.replace("schedule: 1f1b", "schedule: interleaved"),
           r"schedule interleaved needs virtual_stages >= 2")
    # A hand-written schedule: one that deadlocks (stage 0 waits for a gradient before sending
    # the forward that produces it) is refused naming the rank, stage and action; GPipe's order
    # written by hand compiles and its plan trains like the generated gpipe plan.
    dead = os.path.join(s.work, "dead.sched")
    with open(dead, "w") as f:
        f.write("rank 0 (stage 0): recvB0 F0 sendF0 F1 sendF1 B0 recvB1 B1\n"
                "rank 1 (stage 1): recvF0 F0 B0 sendB0 recvF1 F1 B1 sendB1\n")
    expect("deadlock", d.BASE_SPEC + pipe.replace("microbatches: 4", f"microbatches: 2, schedule_file: {dead}"),
           r"dead\.sched: pipeline schedule deadlocks: rank 0 \(stage 0\), action #0 recvB0 waits for stage 1's sendB0")
    bad = os.path.join(s.work, "bad.sched")
    with open(bad, "w") as f:
        f.write("rank 0 (stage 0): F0 sendF0 X1\n")
    expect("badaction", d.BASE_SPEC + pipe.replace("microbatches: 4", f"microbatches: 2, schedule_file: {bad}"),
           r"bad\.sched:1: 'X1' is not an action")
    expect("zbv_v", d.BASE_SPEC + pipe.replace("schedule: 1f1b", "schedule: zbv, virtual_stages: 3"),
           r"schedule zbv runs 2 chunks per rank \(virtual_stages 2\), got virtual_stages 3")
    wfile = os.path.join(s.work, "w.sched")
    with open(wfile, "w") as f:
        f.write("rank 0: F0 sendF0 recvB0 B0 W0\nrank 1: recvF0 F0 B0 sendB0 W0\n")
    expect("w_unsplit", d.BASE_SPEC + pipe.replace("microbatches: 4", f"microbatches: 1, schedule_file: {wfile}"),
           r"w\.sched: pipeline schedule: rank \d \(stage \d\), action #4 W0: this plan's backward is not split")
    expect("zero", d.BASE_SPEC + pipe.replace("pp: 2", "pp: 2, dp: 2") + "zero: {stage: 1}\n",
           r"mesh pp=2 together with zero.stage 1 is not supported yet")
    expect("file_no_pp", d.BASE_SPEC + f"parallel:\n  pipeline: {{schedule_file: {dead}}}\n",
           r"parallel\.pipeline\.schedule_file needs pipeline parallelism: set mesh pp > 1")
    expect("infer_1f1b", "mode: inference\ninputs: {input_ids: [8, 64]}\n" + pipe,
           r"parallel\.pipeline\.schedule 1f1b: inference runs forwards only, as gpipe")
    # pp with a 2d tensor-parallel grid compiles (the partitioner's shard_slice ops follow their
    # readers' stage).
    grid = s.spec("pp2_tp2d", d.BASE_SPEC + "mesh: {pp: 2, tp: 4}\nparallel:\n  tensor: {style: 2d}\n"
                  "  pipeline: {schedule: gpipe, microbatches: 4}\n")
    p = subprocess.run([s.opt, s.model, "--spec", grid, "-o", os.path.join(s.work, "pp2_tp2d.cplan")],
                       capture_output=True, text=True, timeout=600)
    print(f"  pp=2 x tp=4 (2d): exit {p.returncode} {p.stderr.strip()[:200]}" + ("" if p.returncode == 0 else "  MISMATCH"))
    ok &= p.returncode == 0
    return ok


if __name__ == "__main__":
    u.case_main(__doc__, {"train": case_train, "llama": case_llama, "mesh": case_mesh, "zerobubble": case_zerobubble,
                          "inference": case_inference,
                          "trace": case_trace, "kill": case_kill, "errors": case_errors}, steps=10)

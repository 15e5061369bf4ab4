#!/usr/bin/python3
"""Offload to a slower tier (docs/training.md "Offload"): `memory: {offload: ...}` plans against
the same spec in memory.

    offload_e2e.py --case memory|zero|resume --workdir W [--opt PATH --run PATH] [--steps N]

  memory  a GPT (examples/models/export.py --arch gpt2, 4 layers, d_model 512, untied, B 2 x T 64:
          Psi = 12.9 M, fp32 model states 16 Psi = 197 MiB) with a budget of a third of its model
          states, `recompute: auto` and `offload: auto`: the compiler picks params offload, its
          predicted peak is within the budget; --steps (default 20) steps' losses are bit-equal
          to the in-memory plan's; the measured peak resident set (getrusage) is within the
          budget plus the fixed overhead docs/training.md states (OVERHEAD_MIB: the executable,
          libraries, heap, workspaces, stacks) and far below the in-memory run's; the metrics'
          prefetched bytes per step equal the report's; the tier's file is gone after the run.
  zero    the gpt2-train preset at dp=2 with ZeRO stage 3 and offload params: losses bit-equal
          to dp=2 ZeRO-3 in memory; each rank's tier holds its shard (the report's and the
          runtime's offloaded bytes per rank half of the one-rank plan's, within page alignment).
  resume  the gpt2-train preset: offload trains 10 steps with --save and the in-memory plan
          resumes to 20; the in-memory plan saves at 10 and offload resumes to 20 with
          `colossal-run --offload-dir` (the tier in another folder than the plan names); both
          bit-equal to 20 uninterrupted offload steps. --offload-dir on a plan without offload is
          an error naming the plan.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no mpirun for zero).
"""
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402
import dp_e2e as d  # noqa: E402

MIB = 1048576
OVERHEAD_MIB = 48  # docs/training.md "Offload": resident memory no budget counts

BIG_SPEC = """mode: train
inputs: {input_ids: [2, 64]}
train:
  loss: {kind: cross_entropy, logits: logits, labels: labels}
  optimizer: {kind: adamw, lr: 1.0e-3, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.1}
  lr_schedule: {kind: constant}
"""


def case_memory(args):
    s = t.Setup(args, need_shared=False)
    big = os.path.join(s.work, "big")
    u.run([sys.executable, u.EXPORT_PY, "--arch", "gpt2", "--opset", "14", "--layers", "4", "--d-model", "512",
           "--heads", "8", "--vocab", "256", "--seq", "64", "--batch", "2", "--untied", "--out", big, "--quiet"],
          "export.py", timeout=600)
    model = os.path.join(big, "model.onnx")
    plain, rep = t.json_report(s, "plain", model=model, spec=s.spec("plain", BIG_SPEC))
    pr = rep["per_rank"]
    states = pr["params"] + pr["grads"] + pr["optimizer"]
    budget_mb = states / 3 / MIB
    spec = s.spec("off", BIG_SPEC + f"memory: {{budget_mb: {budget_mb:.3f}, recompute: auto, offload: auto}}\n")
    plan, r = t.json_report(s, "off", spec, model=model)
    m = r["memory"]
    budget = m["budget_bytes"]
    off = m["offload"]
    print(f"model states {states / MIB:.1f} MiB, budget {budget / MIB:.2f} MiB (a third); predicted peak "
          f"{m['predicted_peak_bytes'] / MIB:.2f} MiB; offload {off}")
    ok = True
    if not isinstance(off, dict) or off.get("mode") != "params" or m["predicted_peak_bytes"] > budget:
        print("  expected offload params and a predicted peak within the budget  MISMATCH")
        ok = False
    ref = d.train(s, 1, plain, os.path.join(s.work, "plain.jsonl"), args.steps)
    rows = d.train(s, 1, plan, os.path.join(s.work, "off.jsonl"), args.steps)
    ok &= t.same_losses("offload params + recompute auto", rows, ref)
    mem, ref_mem = rows[-1]["memory"], ref[-1]["memory"]
    peak, ref_peak = mem["peak_rss_bytes"], ref_mem["peak_rss_bytes"]
    print(f"  peak resident set: offload {peak / MIB:.1f} MiB (budget {budget / MIB:.1f} MiB + "
          f"{(peak - budget) / MIB:.1f} MiB not budgeted), in memory {ref_peak / MIB:.1f} MiB")
    if peak > budget + OVERHEAD_MIB * MIB:
        print(f"  above the budget + the stated {OVERHEAD_MIB} MiB overhead  MISMATCH")
        ok = False
    if peak > ref_peak - states / 2:
        print("  offload should save at least half the model states  MISMATCH")
        ok = False
    want_read = off.get("read_bytes_per_step") if isinstance(off, dict) else None
    got_read = [row["memory"].get("prefetched_bytes") for row in rows]
    print(f"  prefetched per step: {got_read[-1]} bytes (report: {want_read}); major faults per step "
          f"{[row['memory'].get('major_faults') for row in rows]}")
    # The runtime may round a chunk out to its page size; 4 KiB pages here.
    if any(g is None or abs(g - want_read) > 4096 * 200 for g in got_read):
        print("  prefetched bytes differ from the report  MISMATCH")
        ok = False
    left = glob.glob(os.path.join(s.work, "off.offload", "*"))
    if left:
        print(f"  the tier's file was left behind: {left}  MISMATCH")
        ok = False
    return ok


def case_zero(args):
    s = t.Setup(args, need_shared=False)
    ok = True
    one, r1 = t.json_report(s, "one_off", s.spec("one_off", d.BASE_SPEC + "memory: {offload: params}\n"))
    base_text = d.BASE_SPEC + "mesh: {dp: 2}\nzero: {stage: 3}\n"
    z2 = s.compile("z3", s.spec("z2", base_text))
    z2_off, r2 = t.json_report(s, "z2_off", s.spec("z2_off", base_text + "memory: {offload: params}\n"))
    ref = d.train(s, 2, z2, os.path.join(s.work, "z2.jsonl"), args.steps)
    rows = d.train(s, 2, z2_off, os.path.join(s.work, "z2_off.jsonl"), args.steps)
    ok &= t.same_losses("dp=2 ZeRO-3 + offload params", rows, ref)
    whole = r1["memory"]["offload"]["offloaded_bytes"]
    shard = r2["memory"]["offload"]["offloaded_bytes"]
    measured = rows[-1]["memory"]["offloaded_bytes"]
    print(f"  offloaded bytes per rank: one rank {whole}, dp=2 report {shard}, dp=2 measured (rank 0) {measured}")
    if abs(shard - whole / 2) > 0.05 * whole or abs(measured - shard) > 4096 * 64:
        print("  expected each rank to offload its half  MISMATCH")
        ok = False
    return ok


def case_resume(args):
    s = t.Setup(args, need_shared=False)
    mem_plan = s.compile("mem", s.spec("mem", d.BASE_SPEC))
    off_plan = s.compile("off", s.spec("off", d.BASE_SPEC + "memory: {offload: params}\n"))
    ref = d.train(s, 1, off_plan, os.path.join(s.work, "ref.jsonl"), 20)
    ok = True
    elsewhere = os.path.join(s.work, "tier_elsewhere")
    shutil.rmtree(elsewhere, ignore_errors=True)
    for name, first, second, extra in (("offload then in memory", off_plan, mem_plan, []),
                                       ("in memory then offload", mem_plan, off_plan, ["--offload-dir", elsewhere])):
        ckpt = os.path.join(s.work, "ckpt_" + name.replace(" ", "_"))
        shutil.rmtree(ckpt, ignore_errors=True)
        m = os.path.join(s.work, name.replace(" ", "_") + ".jsonl")
        d.train(s, 1, first, m, 10, ["--save", ckpt])
        rows = d.train(s, 1, second, m, 20, ["--resume", ckpt] + extra, fresh=False)
        ok &= t.same_losses(name + ", resumed at step 10", rows, ref)
    if not os.path.isdir(elsewhere) or os.listdir(elsewhere):
        print(f"  --offload-dir {elsewhere}: expected the folder created and left empty  MISMATCH")
        ok = False
    p = d.run_mpi(1, [s.run_bin, mem_plan, "train", "--data", s.data, "--steps", "1", "--offload-dir", elsewhere],
                  "--offload-dir without offload", expect_fail=True)
    print(f"  --offload-dir on an in-memory plan: rc {p.returncode}: {p.stderr.strip()}")
    if p.returncode == 0 or "--offload-dir: the plan offloads nothing" not in p.stderr or mem_plan not in p.stderr:
        print("  expected an error naming the plan  MISMATCH")
        ok = False
    return ok


if __name__ == "__main__":
    u.case_main(__doc__, {"memory": case_memory, "zero": case_zero, "resume": case_resume}, steps=20)

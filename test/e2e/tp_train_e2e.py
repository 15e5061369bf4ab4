#!/usr/bin/python3
"""Training under tensor, sequence and data parallelism through the SPMD partitioner, against the
one-rank plan (issue 5, done-when items 2, 3 and 4; docs/parallelism.md "Training equality, measured").

    tp_train_e2e.py --case train|resume|report|kill --workdir W [--opt PATH --run PATH]
                    [--shared-dir DIR] [--steps N]

The model is examples/models/export.py --preset gpt2-train (GPT-2 blocks: 2 layers, d_model 128, 4
heads, T 64, byte vocabulary 256, untied LM head); the spec is examples/train/train_gpt2.yaml (B 8,
AdamW lr 1e-3, weight decay 0.1) with a mesh and `parallel.tensor` added. The data is
/usr/share/common-licenses (or the shared tinyshakespeare) through examples/train/prepare_data.py.
Every rank runs with --threads 1.

  train   --steps (20) steps under dp=2, dp=4, tp=2, dp=2 x tp=2, sequence-parallel tp=2, 2D (tp=4 as
          a 2 x 2 grid) and 3D (tp=8 as a 2 x 2 x 2 cube): every step's loss and grad_norm within
          1e-5 x |one-rank value|, lr equal. Each tensor-parallel plan must really be split: its
          report's per-rank parameter bytes are below the one-rank plan's and it has collectives
          over its tp axes.
  resume  dp=2 x tp=2 trains 10 steps and saves; tp=4 resumes that checkpoint to step 20: steps
          10..19 equal the uninterrupted one-rank run's within 1e-5 (loss and grad_norm).
  report  `colossal-opt --report` of the 1d tp=2, sequence-parallel tp=2, dp=2 and dp=2 x tp=2 plans
          against formulas derived from the model's config.json and the spec (not from the report):
          every collective of every program (calls and bytes, nothing more, nothing less), the
          per-optimizer-step totals, and the per-rank params / grads / optimizer-state bytes
          (split parameters count 1/tp, replicated ones whole).
  kill    `colossal-run --nproc 2` of the tp=2 plan (a million steps); once rank 0 has written a
          metrics line, rank 1 gets SIGKILL: the job ends within 30 s with a non-zero exit and a
          message naming rank 1, and no process carrying the test's environment marker is left.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no mpirun).
"""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402
import dp_e2e as d  # noqa: E402

BASE_SPEC = d.BASE_SPEC

# name -> (ranks, the spec's extra lines)
CONFIGS = {
    "dp2": (2, "mesh: {dp: 2}\n"),
    "dp4": (4, "mesh: {dp: 4}\n"),
    "tp2": (2, "mesh: {tp: 2}\n"),
    "dp2tp2": (4, "mesh: {dp: 2, tp: 2}\n"),
    "sp2": (2, "mesh: {tp: 2}\nparallel: {tensor: {style: 1d, sequence_parallel: true}}\n"),
    "2d": (4, "mesh: {tp: 4}\nparallel: {tensor: {style: 2d}}\n"),
    "3d": (8, "mesh: {tp: 8}\nparallel: {tensor: {style: 3d}}\n"),
    "tp4": (4, "mesh: {tp: 4}\n"),
}


def compile_cfg(s, name, report=False):
    """The plan of CONFIGS[name] ('one': the base spec); with report, (plan, report text)."""
    spec = s.spec(name, BASE_SPEC + (CONFIGS[name][1] if name != "one" else ""))
    plan = os.path.join(s.work, name + ".cplan")
    out, _, _ = u.run([s.opt, s.model, "--spec", spec, "-o", plan] + (["--report"] if report else []),
                      f"colossal-opt {name}", timeout=600)
    return (plan, out) if report else plan


def parse_report(text):
    """The report's figures: ({program: {(op, axes): (calls, bytes)}}, {(op, axes): (collectives, bytes)},
    {role: bytes} for params, grads, optimizer state)."""
    programs, step, memory = {}, {}, {}
    section, prog = None, None
    for line in text.splitlines():
        m = re.match(r"^  (params|grads|optimizer state)\s.*?(\d+) bytes", line)
        if m and section is None:
            memory[m.group(1)] = int(m.group(2))
        if line.startswith("collectives per program call"):
            section = "prog"
            continue
        if line.startswith("communication per optimizer step"):
            section = "step"
            continue
        if section == "prog":
            m = re.match(r"^  (\w+) \(", line)
            if m:
                prog = m.group(1)
                programs[prog] = {}
                continue
            m = re.match(r"^    (\w+) over '([\w,]+)': (\d+) calls?, (\d+) bytes", line)
            if m:
                programs[prog][(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
        elif section == "step":
            m = re.match(r"^  (\w+) over '([\w,]+)': (\d+) bytes in (\d+) collectives", line)
            if m:
                step[(m.group(1), m.group(2))] = (int(m.group(4)), int(m.group(3)))
    return programs, step, memory


def param_counts(cfg):
    """(elements split under 1d Megatron TP, elements replicated) of the GPT-2 preset, from its config:
    wte [V, d] (vocab-parallel), per layer c_attn [d, 3d] + [3d] (column), attn c_proj [d, d] (row),
    mlp c_fc [d, 4d] + [4d] (column), mlp c_proj [4d, d] (row), the untied lm_head [d, V] (vocab);
    replicated: wpe [T_ctx, d], per layer ln_1 and ln_2 (weight, bias [d]) and the row-parallel
    layers' biases [d], ln_f (weight, bias)."""
    V, dm, L, Tc = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["block_size"]
    if cfg.get("tie_embeddings"):
        u.die("the formulas assume an untied LM head (the gpt2-train preset)", 2)
    split = V * dm + L * (dm * 3 * dm + 3 * dm + dm * dm + dm * 4 * dm + 4 * dm + 4 * dm * dm) + dm * V
    repl = Tc * dm + L * (4 * dm + 2 * dm) + 2 * dm
    return split, repl


def expected(cfg, B, T, dp, tp, sp):
    """The collectives per program call {program: {(op, axes): (calls, bytes)}} of the GPT-2 preset's
    training plan on mesh dp x tp (sp: Megatron sequence parallelism), float32, bytes = each call's
    input buffer (docs/parallelism.md "Plan lowering, kernels and report"). b = B/dp rows per rank,
    N = b*T tokens, act = N*d*4 bytes (one [b, T, d] activation).

    1d Megatron (Shoeybi et al. 2019, sec. 3): forward all_reduces the partial sums of the
    vocab-parallel embedding (1), the attention out-projection and the MLP down-projection (2 per
    layer); the vocab-parallel cross-entropy reduces three [N, 1] columns (max, sum of exp, the
    label's logit); backward all_reduces the input gradients of QKV and MLP-up (2 per layer) and of
    the LM head (1). optimizer_step: the global gradient norm's scalar (4 bytes).
    Sequence parallel (Korthikanti et al. 2022, sec. 4.2.2): every forward all_reduce becomes a
    reduce_scatter along T (input act) and each column-parallel input (QKV, MLP-up, LM head) an
    all_gather (input act/tp); backward mirrors them: all_gather (act/tp) for each forward
    reduce_scatter except the embedding's, reduce_scatter (act) for each forward all_gather. The
    embedding's gradient is instead made by gather_grad over the whole vocabulary from the sequence
    shard and reduce-scattered along the vocabulary ([V, d]: V*d*4 bytes). Parameters replicated
    but used in the sequence-split region (ln_1, ln_2 and ln_f weights and biases, the
    row-parallel biases, wpe) get their gradients all_reduced over 'tp'.
    dp: the gradient of every parameter (local shard) all_reduced over 'dp' at the start of
    optimizer_step (4 bytes per local element), fused into gradient buckets of at most 25 MiB
    (colossal-opt's default --bucket-cap-mb; docs/parallelism.md "Gradient buckets"): all of this
    model's gradients fit one, so one collective."""
    V, dm, L, Tc = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["block_size"]
    b = B // dp
    N = b * T
    act = N * dm * 4
    ce = (3, 3 * N * 4)
    split, repl = param_counts(cfg)
    local = split // tp + repl if tp > 1 else split + repl
    prog = {"train_step": {}, "eval": {}, "optimizer_step": {}}
    if tp > 1 and not sp:
        fwd = 2 * L + 1
        prog["eval"][("all_reduce", "tp")] = (fwd + ce[0], fwd * act + ce[1])
        prog["train_step"][("all_reduce", "tp")] = (2 * fwd + ce[0], 2 * fwd * act + ce[1])
    if tp > 1 and sp:
        n_ag = 2 * L + 1  # forward: before QKV, MLP-up (per layer) and the LM head
        n_rs = 2 * L + 1  # forward: after the embedding, attention out-proj and MLP-down
        # replicated parameters whose gradients are all_reduced: 6 per layer (ln_1, ln_2 weight and
        # bias; the two row-parallel biases), ln_f's two, wpe
        n_sp, sp_bytes = 6 * L + 3, 4 * (6 * L * dm + 2 * dm + Tc * dm)
        prog["eval"][("all_gather", "tp")] = (n_ag, n_ag * act // tp)
        prog["eval"][("reduce_scatter", "tp")] = (n_rs, n_rs * act)
        prog["eval"][("all_reduce", "tp")] = ce
        prog["train_step"][("all_gather", "tp")] = (n_ag + (n_rs - 1), (n_ag + n_rs - 1) * act // tp)
        prog["train_step"][("reduce_scatter", "tp")] = (n_rs + n_ag + 1, (n_rs + n_ag) * act + V * dm * 4)
        prog["train_step"][("all_reduce", "tp")] = (ce[0] + n_sp, ce[1] + sp_bytes)
    if tp > 1:
        prog["optimizer_step"][("all_reduce", "tp")] = (1, 4)
    if dp > 1:
        if 4 * local > 25 << 20:
            u.die("the formula assumes every gradient fits one 25 MiB bucket", 2)
        prog["optimizer_step"][("all_reduce", "dp")] = (1, 4 * local)
    step = {}
    for p in ("train_step", "optimizer_step"):  # grad_accum 1: each once per optimizer step
        for k, (c, by) in prog[p].items():
            c0, b0 = step.get(k, (0, 0))
            step[k] = (c0 + c, b0 + by)
    memory = {"params": 4 * local, "grads": 4 * local, "optimizer state": 8 * local}
    return prog, step, memory


def case_train(args):
    s = t.Setup(args, need_shared=False)
    d.mpirun_cmd(2)  # skips without mpirun
    one, rep1 = compile_cfg(s, "one", report=True)
    params1 = parse_report(rep1)[2]["params"]
    ref = d.train(s, 1, one, os.path.join(s.work, "one.jsonl"), args.steps)
    ok = True
    summary = []
    for name in ("dp2", "dp4", "tp2", "dp2tp2", "sp2", "2d", "3d"):
        ranks = CONFIGS[name][0]
        plan, rep = compile_cfg(s, name, report=True)
        progs, step, mem = parse_report(rep)
        if "tp" in CONFIGS[name][1]:
            tp_axes = {a for (_, axes) in step for a in axes.split(",") if a.startswith("tp")}
            split = mem.get("params", params1) < params1 and tp_axes
            print(f"{name}: per-rank params {mem.get('params')} bytes (one rank {params1}), collectives over "
                  f"{sorted(tp_axes)}" + ("" if split else "  MISMATCH: the plan is not split"))
            ok &= bool(split)
        got = d.train(s, ranks, plan, os.path.join(s.work, name + ".jsonl"), args.steps)
        print(f"{name} ({ranks} ranks) vs one rank")
        ok &= t.compare_runs(got, ref, 1e-5, name, "1 rank", grad_tol=1e-5)
        wl = max(abs(g["loss"] - r["loss"]) / abs(r["loss"]) for g, r in zip(got, ref))
        wg = max(abs(g["grad_norm"] - r["grad_norm"]) / abs(r["grad_norm"]) for g, r in zip(got, ref))
        summary.append(f"  {name:7s} {ranks} ranks: max relative loss diff {wl:.2e}, grad_norm {wg:.2e}")
    print("summary over %d steps:\n%s" % (args.steps, "\n".join(summary)))
    return ok


def case_resume(args):
    s = t.Setup(args, need_shared=False)
    d.mpirun_cmd(2)
    one, dptp, tp4 = compile_cfg(s, "one"), compile_cfg(s, "dp2tp2"), compile_cfg(s, "tp4")
    n, half = args.steps, args.steps // 2
    ref = d.train(s, 1, one, os.path.join(s.work, "one.jsonl"), n)
    ckpt = os.path.join(s.work, "ckpt_dp2tp2")
    shutil.rmtree(ckpt, ignore_errors=True)
    m = os.path.join(s.work, "dp2tp2_then_tp4.jsonl")
    d.train(s, 4, dptp, m, half, ["--save", ckpt])
    got = d.train(s, 4, tp4, m, n, ["--resume", ckpt], fresh=False)
    print(f"dp=2 x tp=2 for {half} steps, then tp=4 from its checkpoint, vs one rank for {n} steps")
    ok = d.check_mesh_change(ckpt, {"dp": 2, "tp": 2}, "dp2tp2 -> tp4")
    ok &= t.compare_runs(got, ref, 1e-5, "dp2tp2+tp4", "1 rank", grad_tol=1e-5)
    wl = max(abs(g["loss"] - r["loss"]) / abs(r["loss"]) for g, r in zip(got[half:], ref[half:]))
    print(f"summary: steps {half}..{n - 1} resumed under tp=4: max relative loss diff {wl:.2e}")
    return ok


def case_report(args):
    s = t.Setup(args, need_shared=False)
    with open(os.path.join(s.model_dir, "config.json")) as f:
        cfg = json.load(f)["model"]
    m = re.search(r"input_ids: \[(\d+), (\d+)\]", BASE_SPEC)
    B, T = int(m.group(1)), int(m.group(2))
    split, repl = param_counts(cfg)
    print(f"model: {cfg}; B {B}, T {T}; parameters {split + repl} ({split} split under 1d TP, {repl} replicated)")
    ok = True
    _, rep1 = compile_cfg(s, "one", report=True)
    mem1 = parse_report(rep1)[2]
    if mem1.get("params") != 4 * (split + repl):
        print(f"one-rank params {mem1.get('params')} bytes, formula {4 * (split + repl)}  MISMATCH")
        ok = False
    for name, dp, tp, sp in (("tp2", 1, 2, False), ("sp2", 1, 2, True), ("dp2", 2, 1, False),
                             ("dp2tp2", 2, 2, False)):
        _, rep = compile_cfg(s, name, report=True)
        progs, step, mem = parse_report(rep)
        want_progs, want_step, want_mem = expected(cfg, B, T, dp, tp, sp)
        print(f"{name}:")
        for p in ("eval", "train_step", "optimizer_step"):
            got = progs.get(p, {})
            good = got == want_progs[p]
            print(f"  {p}: report {fmt(got)}; formula {fmt(want_progs[p])}" + ("" if good else "  MISMATCH"))
            ok &= good
        good = step == want_step
        print(f"  per optimizer step: report {fmt(step)}; formula {fmt(want_step)}" + ("" if good else "  MISMATCH"))
        ok &= good
        for role in ("params", "grads", "optimizer state"):
            good = mem.get(role) == want_mem[role]
            print(f"  per-rank {role}: report {mem.get(role)} bytes, formula {want_mem[role]}"
                  + ("" if good else "  MISMATCH"))
            ok &= good
    return ok


def fmt(coll):
    return ", ".join(f"{op} over {axes}: {c} x -> {b} B" for (op, axes), (c, b) in sorted(coll.items())) or "none"


def case_kill(args):
    """kill -9 rank 1 of a tp=2 training run (dp_e2e.kill_rank_mid_training)."""
    s = t.Setup(args, need_shared=False)
    d.mpirun_cmd(2)  # skips without mpirun
    return d.kill_rank_mid_training(s, compile_cfg(s, "tp2"), "tp_kill")


CASES = {"train": case_train, "resume": case_resume, "report": case_report, "kill": case_kill}


def main():
    u.case_main(__doc__, CASES, shared_default="")


if __name__ == "__main__":
    main()

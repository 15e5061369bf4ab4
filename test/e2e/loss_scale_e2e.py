#!/usr/bin/python3
"""Dynamic loss scaling (docs/training.md "Loss scaling"): torch.cuda.amp.GradScaler's semantics in
colossal-run's training loop, under mpirun.

    loss_scale_e2e.py --case sequence|skip|minimum|clean --workdir W [--opt PATH --run PATH]

The model is examples/models/export.py --preset gpt2-train at dp=2. The scaler is switched on by
colossal-autodiff's loss-scale options in a pass pipeline (the spec's `passes:`, from
`colossal-opt --dump-pass-pipeline`), which is what `precision: {compute: fp16}` generates; here
the compute stays fp32, so the test sees the scaler alone. Non-finite gradients are injected by
the runtime's test hook COLOSSAL_TEST_NONFINITE=grad-inf:STEPS:RANK (element 0 of the first
gradient accumulator set to +inf on one rank after its backward pass).

The reference is GradScaler.update()'s rule as torch documents and implements it
(torch/cuda/amp/grad_scaler.py, aten _amp_update_scale_): on a step whose gradients hold inf/NaN
on any rank the optimizer step is skipped and scale *= backoff_factor, growth tracker = 0;
otherwise tracker += 1 and, when it reaches growth_interval, scale *= growth_factor, tracker = 0.
(torch 1.13's GradScaler needs CUDA, so the rule is replayed here in Python.)

  sequence  injections on rank 1 at steps 2, 5 and 6, growth_interval 3, 14 steps: every step's
            metrics `loss_scale` (the scale its backward used), `skipped` and `skipped_total`
            equal the reference's, under plain dp=2 and under ZeRO stage 2.
  skip      an injection at step 2 with --save-every 1 (3 steps): the checkpoint after step 2
            (skipped) holds parameters and optimizer state byte-identical to the one after step 1
            (every rank's: the files are the assembled global tensors), and the manifest carries
            the backed-off scale; resuming from it continues the reference's scale sequence.
  minimum   initial 4, min 1, injections at steps 0-3: the scale backs off 4 -> 2 -> 1, and the
            step that would take it to 0.5 ends the run with one error naming the step and
            precision.loss_scale.min (non-zero exit, metrics of the steps before it kept).
  clean     no injection, 20 steps: the losses are bit-equal to the unscaled dp=2 run (the
            scale is a power of two, so scaling and unscaling are exact).

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no mpirun).
"""
import filecmp
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402
import dp_e2e as d  # noqa: E402


def reference(steps, found_inf, initial, growth=2.0, backoff=0.5, interval=2000):
    """[(scale used, skipped, skipped_total)] per step under GradScaler's update rule."""
    scale, tracker, total, out = initial, 0, 0, []
    for s in range(steps):
        bad = s in found_inf
        total += bad
        out.append((scale, bad, total))
        if bad:
            scale *= backoff
            tracker = 0
        else:
            tracker += 1
            if tracker == interval:
                scale *= growth
                tracker = 0
    return out


def scaled_spec(s, name, initial=65536.0, interval=2000, minimum=1.0, zero=0):
    """A dp=2 spec whose pipeline is the generated one with loss scaling switched on."""
    base = d.BASE_SPEC + "mesh: {dp: 2}\n" + (f"zero: {{stage: {zero}}}\n" if zero else "")
    plain = s.spec(name + "_plain", base)
    out, err, _ = u.run([s.opt, s.model, "--spec", plain, "--dump-pass-pipeline", "-o", os.path.join(s.work, "x.cplan")],
                        "colossal-opt --dump-pass-pipeline")
    lines = [line for line in (out + "\n" + err).splitlines() if line.startswith("builtin.module(")]
    if not lines:
        raise u.ToolError("colossal-opt --dump-pass-pipeline printed no pipeline")
    pipeline = lines[0]
    for key, value in (("loss-scale-initial", initial), ("loss-scale-growth-interval", interval),
                       ("loss-scale-min", minimum)):
        old = {"loss-scale-initial": "0", "loss-scale-growth-interval": "2000", "loss-scale-min": "1"}[key]
        if f"{key}={old}" not in pipeline:
            raise u.ToolError(f"the dumped pipeline has no '{key}={old}' in colossal-autodiff: {pipeline}")
        pipeline = pipeline.replace(f"{key}={old}", f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}")
    return s.spec(name, base + "passes: " + json.dumps(pipeline) + "\n")


def train_injected(s, plan, metrics, steps, inject, extra=(), fresh=True, expect_fail=False):
    """dp=2 training with +inf injected on rank 1 at the steps `inject`; the process and the metrics
    rows (read as they are: grad_norm is null on skipped steps)."""
    if fresh and os.path.exists(metrics):
        os.remove(metrics)
    cmd = [s.run_bin, plan, "train", "--data", s.data, "--token-dtype", "uint8", "--steps", str(steps), "--metrics",
           metrics, "--threads", "1"] + list(extra)
    env = {"COLOSSAL_TEST_NONFINITE": "grad-inf:" + ",".join(map(str, sorted(inject))) + ":1"} if inject else None
    p = d.run_mpi(2, cmd, "colossal-run train", expect_fail=expect_fail, env=env)
    rows = []
    if os.path.exists(metrics):
        with open(metrics) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    return p, rows


def check_sequence(rows, ref, label):
    ok = len(rows) == len(ref)
    for r, (scale, bad, total) in zip(rows, ref):
        got = (r.get("loss_scale"), r["skipped"], r["skipped_total"])
        if got != (scale, bad, total):
            print(f"  {label} step {r['step']}: (loss_scale, skipped, skipped_total) {got}, GradScaler {(scale, bad, total)}"
                  "  MISMATCH")
            ok = False
    print(f"{label}: {len(rows)} steps, scales {[r.get('loss_scale') for r in rows]}, skipped at "
          f"{[r['step'] for r in rows if r['skipped']]}")
    return ok


def case_sequence(args):
    s = t.Setup(args, need_shared=False)
    inject = {2, 5, 6}
    ref = reference(14, inject, 65536.0, interval=3)
    ok = True
    for zero in (0, 2):
        plan = s.compile(f"seq_z{zero}", scaled_spec(s, f"seq_z{zero}", interval=3, zero=zero))
        _, rows = train_injected(s, plan, os.path.join(s.work, f"seq_z{zero}.jsonl"), 14, inject)
        ok &= check_sequence(rows, ref, f"dp=2 zero {zero}")
    return ok


def case_skip(args):
    s = t.Setup(args, need_shared=False)
    plan = s.compile("skip", scaled_spec(s, "skip", interval=3))
    ckpt = os.path.join(s.work, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    m = os.path.join(s.work, "skip.jsonl")
    _, rows = train_injected(s, plan, m, 3, {2}, ["--save", ckpt, "--save-every", "1"])
    ok = check_sequence(rows, reference(3, {2}, 65536.0, interval=3), "3 steps, step 2 injected")
    before, after = os.path.join(ckpt, "step-00000002"), os.path.join(ckpt, "step-00000003")
    for f in ("model.safetensors", "optimizer.safetensors"):
        eq = filecmp.cmp(os.path.join(before, f), os.path.join(after, f), shallow=False)
        print(f"{f}: after the skipped step {'==' if eq else '!='} before it (byte for byte)")
        ok &= eq
    with open(os.path.join(after, "manifest.json")) as fh:
        manifest = json.load(fh)
    print(f"manifest: loss_scale {manifest.get('loss_scale')}, growth tracker {manifest.get('loss_scale_growth_tracker')}, "
          f"skipped_total {manifest.get('skipped_total')}")
    if (manifest.get("loss_scale"), manifest.get("loss_scale_growth_tracker"), manifest.get("skipped_total")) != (32768, 0, 1):
        print("  expected (32768, 0, 1)  MISMATCH")
        ok = False
    # Resume: steps 3..8 continue the reference (injections at 5 and 6 too).
    _, rows = train_injected(s, plan, m, 9, {5, 6}, ["--resume", ckpt], fresh=False)
    ok &= check_sequence(rows, reference(9, {2, 5, 6}, 65536.0, interval=3), "resumed at step 3")
    return ok


def case_minimum(args):
    s = t.Setup(args, need_shared=False)
    plan = s.compile("minimum", scaled_spec(s, "minimum", initial=4.0, minimum=1.0))
    p, rows = train_injected(s, plan, os.path.join(s.work, "minimum.jsonl"), 10, {0, 1, 2, 3}, expect_fail=True)
    msg = p.stderr
    ok = p.returncode != 0
    print(f"exit {p.returncode}; metrics of steps {[r['step'] for r in rows]} with scales {[r.get('loss_scale') for r in rows]}")
    want = "step 2: the loss scale fell to 0.5, below precision.loss_scale.min 1, after a non-finite gradient"
    if want not in msg:
        print(f"  expected '{want}' in the error; stderr:\n{msg[-1500:]}  MISMATCH")
        ok = False
    if [r.get("loss_scale") for r in rows] != [4.0, 2.0, 1.0]:
        print("  expected the metrics of steps 0-2 with scales 4, 2, 1  MISMATCH")
        ok = False
    return ok


def case_clean(args):
    s = t.Setup(args, need_shared=False)
    plain = s.compile("plain", s.spec("plain", d.BASE_SPEC + "mesh: {dp: 2}\n"))
    ref = d.train(s, 2, plain, os.path.join(s.work, "plain.jsonl"), 20)
    plan = s.compile("clean", scaled_spec(s, "clean"))
    _, rows = train_injected(s, plan, os.path.join(s.work, "clean.jsonl"), 20, set())
    same = [a["loss"] == b["loss"] for a, b in zip(rows, ref)]
    print(f"scaled (65536) vs unscaled dp=2: {sum(same)}/{len(ref)} losses bit-equal; scales "
          f"{sorted({r.get('loss_scale') for r in rows})}")
    return len(rows) == 20 and all(same) and all(r.get("loss_scale") == 65536.0 and not r["skipped"] for r in rows)


CASES = {"sequence": case_sequence, "skip": case_skip, "minimum": case_minimum, "clean": case_clean}


def main():
    u.case_main(__doc__, CASES)


if __name__ == "__main__":
    main()

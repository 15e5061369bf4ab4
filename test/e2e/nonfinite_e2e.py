#!/usr/bin/python3
"""Non-finite training steps end to end (docs/training.md "Non-finite values", issue 11).

    nonfinite_e2e.py --case stop|skip|checkpoint|dp|tp --workdir W [--opt PATH --run PATH]
                     [--shared-dir DIR] [--threads N]

The model is examples/models/export.py --preset gpt2-train; the data /usr/share/common-licenses (or
the shared tinyshakespeare) through examples/train/prepare_data.py. DIVERGING is
examples/train/train_gpt2.yaml with `optimizer: {kind: sgd, lr: 1000.0}` (issue 11's report: the
loss goes 5.56 -> 15837 -> 3.7e9 -> null, and before this fix the run printed nothing, exited 0 and
kept two checkpoints full of NaN).

  stop        DIVERGING for 20 steps with --save-every 1: exit 1 and one stderr line
              "error: step K: ..." naming the step whose metrics line is the last, what was not
              finite and the newest checkpoint; one metrics line per step (0..K), "skipped" false
              before K and true at K, with finite loss and grad_norm before K; every checkpoint
              left holds finite tensors only (read with NumPy), `latest` names the newest, which
              is step-K (the state before step K: nothing written after it).
  skip        (a) DIVERGING with --on-nonfinite skip: every checkpoint left is finite; every line
              has skipped/skipped_total consistent; the run ends at step 20 (exit 0, a warning per
              skipped step) or with the "cannot recover" error. (b) AdamW with step 3's gradient
              made NaN (COLOSSAL_TEST_NONFINITE=grad:3, the runtime's test hook) and skip, 8 steps:
              every loss within 1e-4 and grad_norm within 1e-3 of PyTorch skipping step 3's
              optimizer.step() (examples/train/torch_reference.py --skip-steps 3); the
              checkpoints after steps 3 and 4 (step-3, step-4) are byte-identical (parameters and
              AdamW moments untouched by the skipped step).
  checkpoint  a checkpoint with a NaN written into one parameter (ln_f.weight; the manifest's hash
              updated, as an older runtime wrote such checkpoints): `sample`, `export` and `train --resume` refuse it naming
              the file and tensor (exit 1); with --allow-nonfinite-checkpoint `sample` fails on
              the non-finite logits with nothing on stdout (no NUL bytes) and `train --resume`
              stops at its first step naming the parameter.
  dp          mesh {dp: 2} under mpirun -np 2: DIVERGING stops like `stop` (one error line from
              rank 0, exit non-zero, no rank left waiting: the job ends within the timeout), and
              a NaN loss on rank 1 only (hook loss:2:1) is skipped by both ranks alike (exit 0,
              step 2 skipped, the losses before and after equal to the one-rank skip run's within
              1e-5).
  tp          the same under mesh {tp: 2}.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (dp/tp: no mpirun).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402

with open(t.TRAIN_SPEC) as f:
    BASE_SPEC = f.read()
DIVERGING = BASE_SPEC.replace(
    "  optimizer: {kind: adamw, lr: 1.0e-3, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.1}",
    "  optimizer: {kind: sgd, lr: 1000.0}")
assert DIVERGING != BASE_SPEC, "examples/train/train_gpt2.yaml's optimizer line changed"

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def run(cmd, env=None, nproc=1, timeout=900):
    """(exit code, stdout, stderr) of cmd (under mpirun -np nproc when nproc > 1)."""
    if nproc > 1:
        mpirun = shutil.which("mpirun")
        if not mpirun:
            print("skipped: mpirun is not on PATH")
            sys.exit(u.SKIP)
        cmd = [mpirun, "-np", str(nproc), "--oversubscribe", "--bind-to", "none"] + cmd
    full_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env or {}))
    print("$ " + " ".join(f"{k}={v}" for k, v in (env or {}).items()) + (" " if env else "") + " ".join(cmd),
          flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=full_env)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def train_cmd(s, plan, metrics, steps, extra=(), fresh=True):
    if fresh and os.path.exists(metrics):
        os.remove(metrics)
    return [s.run_bin, plan, "train", "--data", s.data, "--token-dtype", "uint8", "--steps", str(steps),
            "--metrics", metrics, "--threads", "1"] + list(extra)


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def finite(x):
    return isinstance(x, (int, float)) and x == x and abs(x) != float("inf")


def step_folders(ckpt):
    return sorted(d for d in os.listdir(ckpt) if d.startswith("step-") and not d.endswith(".tmp"))


def checkpoint_nonfinite(step_dir):
    """The tensors of a checkpoint folder holding NaN or infinity, as 'file:name' strings."""
    bad = []
    for file in ("model.safetensors", "optimizer.safetensors"):
        for name, (dtype, shape, data) in t.read_safetensors(os.path.join(step_dir, file)).items():
            if dtype in SAFETENSORS_DTYPES and not np.isfinite(np.frombuffer(data, SAFETENSORS_DTYPES[dtype])).all():
                bad.append(f"{file}:{name}")
    return bad


class Check:
    """Collects failures; prints each check."""

    def __init__(self):
        self.ok = True

    def __call__(self, cond, what):
        print(f"  {'ok' if cond else 'MISMATCH'}: {what}")
        self.ok &= bool(cond)
        return cond


def check_stopped_run(c, label, rc, stderr, metrics, ckpt):
    """The shared checks of a run that must stop at a non-finite step (stop, dp, tp)."""
    lines = read_lines(metrics)
    c(rc != 0, f"{label}: exit status {rc} (non-zero)")
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    c(len(errors) == 1, f"{label}: exactly one error line, got {len(errors)}: {errors}")
    c("rank" not in stderr.lower() or "error: rank" not in stderr, f"{label}: no rank aborted the job")
    if not lines or not errors:
        return c(False, f"{label}: metrics lines and an error message")
    k = len(lines) - 1
    msg = errors[0]
    c(msg.startswith(f"error: step {k}: "), f"{label}: the message names step {k} (the last metrics line): {msg}")
    c("not finite" in msg, f"{label}: the message says what was not finite")
    c([r["step"] for r in lines] == list(range(k + 1)), f"{label}: one metrics line per step 0..{k}")
    c(all(r["skipped"] is False and r["skipped_total"] == 0 for r in lines[:-1]),
      f"{label}: steps before {k} not skipped")
    c(lines[-1]["skipped"] is True and lines[-1]["skipped_total"] == 1, f"{label}: step {k} marked skipped")
    c(all(finite(r["loss"]) and finite(r["grad_norm"]) for r in lines[:-1]),
      f"{label}: finite loss and grad_norm before step {k}: {[r['loss'] for r in lines]}")
    c(not finite(lines[-1]["loss"]) or not finite(lines[-1]["grad_norm"]),
      f"{label}: step {k}'s loss or grad_norm is null: {lines[-1]}")
    folders = step_folders(ckpt)
    for d in folders:
        bad = checkpoint_nonfinite(os.path.join(ckpt, d))
        c(not bad, f"{label}: {d} holds finite tensors only{'' if not bad else ': ' + str(bad[:3])}")
    newest = f"step-{k:08d}"
    c(folders and folders[-1] == newest, f"{label}: the newest checkpoint is {newest} (the state before step {k}): "
                                         f"{folders}")
    c(t.latest_step_dir(ckpt) == os.path.join(ckpt, newest), f"{label}: latest names {newest}")
    c(f"the newest checkpoint is {os.path.join(ckpt, newest)}" in msg, f"{label}: the message names it")
    return k


def case_stop(args):
    s = t.Setup(args, need_shared=False)
    plan = s.compile("diverging", s.spec("diverging", DIVERGING))
    ck = os.path.join(s.work, "ck_stop")
    shutil.rmtree(ck, ignore_errors=True)
    metrics = os.path.join(s.work, "stop.jsonl")
    rc, out, err = run(train_cmd(s, plan, metrics, 20, ["--save", ck, "--save-every", "1"]))
    print(err.rstrip())
    c = Check()
    c(out == b"", "nothing on stdout")
    check_stopped_run(c, "sgd lr 1000", rc, err, metrics, ck)
    return c.ok


def case_skip(args):
    s = t.Setup(args, need_shared=False)
    c = Check()
    # (a) The real divergence under skip.
    plan = s.compile("diverging", s.spec("diverging", DIVERGING))
    ck = os.path.join(s.work, "ck_skip_div")
    shutil.rmtree(ck, ignore_errors=True)
    metrics = os.path.join(s.work, "skip_div.jsonl")
    rc, _, err = run(train_cmd(s, plan, metrics, 20, ["--save", ck, "--save-every", "1", "--on-nonfinite", "skip"]))
    print(err.rstrip()[-2000:])
    lines = read_lines(metrics)
    total = 0
    consistent = True
    for r in lines:
        total += r["skipped"] is True
        consistent &= r["skipped_total"] == total and (r["skipped"] or (finite(r["loss"]) and finite(r["grad_norm"])))
    c(consistent and [r["step"] for r in lines] == list(range(len(lines))),
      f"diverging skip: one line per step, skipped_total counts the skipped ones ({total} of {len(lines)})")
    if rc == 0:
        c(len(lines) == 20 and total > 0, f"diverging skip: ran all 20 steps, {total} skipped")
        c(err.count("warning: step ") == total, "diverging skip: one warning per skipped step")
    else:
        c("skipping steps cannot recover" in err and err.count("error:") == 1,
          f"diverging skip: ended only because a parameter is not finite: {err.strip().splitlines()[-1]}")
    for d in step_folders(ck):
        bad = checkpoint_nonfinite(os.path.join(ck, d))
        c(not bad, f"diverging skip: {d} holds finite tensors only{'' if not bad else ': ' + str(bad[:3])}")

    # (b) One NaN gradient at step 3 (the test hook), AdamW, against PyTorch skipping that step.
    adamw = s.compile("adamw", t.TRAIN_SPEC)
    ck = os.path.join(s.work, "ck_skip_hook")
    shutil.rmtree(ck, ignore_errors=True)
    steps = 8
    got_path = os.path.join(s.work, "skip_hook.jsonl")
    rc, _, err = run(train_cmd(s, adamw, got_path, 4, ["--save", ck, "--save-every", "1", "--on-nonfinite", "skip"]),
                     env={"COLOSSAL_TEST_NONFINITE": "grad:3"})
    c(rc == 0, f"hook skip (4 steps): exit {rc}: {err.strip()}")
    for f in ("model.safetensors", "optimizer.safetensors"):
        x = t.read_safetensors(os.path.join(ck, "step-00000003", f))
        y = t.read_safetensors(os.path.join(ck, "step-00000004", f))
        c(x == y, f"hook skip: {f} of step-3 and step-4 byte-identical ({len(x)} tensors): step 3 changed nothing")
    rc, _, err = run(train_cmd(s, adamw, got_path, steps, ["--on-nonfinite", "skip"]),
                     env={"COLOSSAL_TEST_NONFINITE": "grad:3"})
    c(rc == 0, f"hook skip ({steps} steps): exit {rc}")
    c("warning: step 3: the gradient norm is not finite (nan)" in err, f"hook skip: the warning names step 3: {err}")
    got = read_lines(got_path)
    ref = s.torch(t.TRAIN_SPEC, os.path.join(s.work, "torch_skip.jsonl"), steps, ["--skip-steps", "3"])
    c(len(got) == steps and len(ref) == steps, f"{steps} metrics lines each")
    c([r["skipped"] for r in got] == [r["skipped"] for r in ref] and got[-1]["skipped_total"] == 1,
      "the same steps skipped (3), skipped_total 1 at the end")
    for g, r in zip(got, ref):
        rel = abs(g["loss"] - r["loss"]) / abs(r["loss"])
        line = f"step {g['step']}: loss {g['loss']:.9f} vs torch {r['loss']:.9f} (rel {rel:.1e})"
        if g["step"] != 3:
            grel = abs(g["grad_norm"] - r["grad_norm"]) / r["grad_norm"]
            c(rel <= 1e-4 and grel <= 1e-3, line + f", grad_norm rel {grel:.1e}")
        else:
            c(rel <= 1e-4 and g["grad_norm"] is None, line + ", grad_norm null (the NaN gradient)")
    return c.ok


FNV_OFFSET, FNV_PRIME = 0xcbf29ce484222325, 0x100000001b3


def fnv1a64(data):
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def poison(step_dir, name, element):
    """Writes NaN into element `element` of f32 tensor `name` of model.safetensors and updates the
    manifest's hash (what a checkpoint of a diverged run written before this fix looks like)."""
    path = os.path.join(step_dir, "model.safetensors")
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    at = 8 + n + header[name]["data_offsets"][0] + 4 * element
    blob[at:at + 4] = struct.pack("<f", float("nan"))
    with open(path, "wb") as f:
        f.write(blob)
    man_path = os.path.join(step_dir, "manifest.json")
    with open(man_path) as f:
        man = json.load(f)
    man["files"]["model.safetensors"]["fnv1a64"] = f"{fnv1a64(blob):016x}"
    with open(man_path, "w") as f:
        json.dump(man, f, indent=2)


def case_checkpoint(args):
    s = t.Setup(args, need_shared=False)
    c = Check()
    plan = s.compile("adamw", t.TRAIN_SPEC)
    ck = os.path.join(s.work, "ck_poison")
    shutil.rmtree(ck, ignore_errors=True)
    metrics = os.path.join(s.work, "p.jsonl")
    rc, _, err = run(train_cmd(s, plan, metrics, 2, ["--save", ck]))
    if rc != 0:
        raise u.ToolError(f"colossal-run train failed: {err}")
    step = t.latest_step_dir(ck)
    # The final LayerNorm's scale: a NaN there reaches every logit of every position.
    name = "ln_f.weight"
    poison(step, name, 3)
    want = f"{os.path.join(step, 'model.safetensors')}: tensor '{name}' is not finite (element 3: nan)"
    sample = [s.run_bin, plan, "sample", "--checkpoint", ck, "--prompt", "ROMEO:", "--tokens", "5", "--threads", "1"]
    onnx_out = os.path.join(s.work, "poisoned.onnx")
    for label, cmd in (("sample", sample),
                       ("export", [s.run_bin, plan, "export", "--onnx", onnx_out, "--checkpoint", ck]),
                       ("train --resume", train_cmd(s, plan, os.path.join(s.work, "r.jsonl"), 4, ["--resume", ck]))):
        rc, out, err = run(cmd)
        c(rc == 1 and err.startswith("error: " + want) and "--allow-nonfinite-checkpoint" in err and out == b"",
          f"{label} refuses it: exit {rc}, {err.strip()}")
    c(not os.path.exists(onnx_out), "export wrote nothing")
    rc, out, err = run(sample + ["--allow-nonfinite-checkpoint"])
    c(rc == 1 and "are not finite" in err and out == b"",
      f"sample --allow-nonfinite-checkpoint: exit {rc}, stdout {out[:40]!r} (nothing, no NUL bytes), {err.strip()}")
    rc, _, err = run(train_cmd(s, plan, metrics, 4, ["--resume", ck, "--allow-nonfinite-checkpoint"], fresh=False))
    c(rc == 1 and err.startswith("error: step 2: the loss is not finite (nan); the first non-finite tensor is "
                                 f"parameter '{name}'"), f"train --resume --allow-nonfinite-checkpoint: {err.strip()}")
    lines = read_lines(metrics)
    c(len(lines) == 3 and lines[2]["skipped"] is True, "its metrics: steps 0, 1 kept, step 2 written and skipped")
    return c.ok


MESH = {"dp": ("mesh: {dp: 2}\n", 2), "tp": ("mesh: {tp: 2}\n", 2)}


def case_mesh(args, axis):
    s = t.Setup(args, need_shared=False)
    c = Check()
    extra, n = MESH[axis]
    plan = s.compile(f"diverging_{axis}", s.spec(f"diverging_{axis}", DIVERGING + extra))
    ck = os.path.join(s.work, f"ck_{axis}")
    shutil.rmtree(ck, ignore_errors=True)
    metrics = os.path.join(s.work, f"stop_{axis}.jsonl")
    rc, out, err = run(train_cmd(s, plan, metrics, 20, ["--save", ck, "--save-every", "1"]), nproc=n, timeout=600)
    print(err.rstrip())
    k = check_stopped_run(c, f"{axis}=2 sgd lr 1000", rc, err, metrics, ck)
    # The same run on one rank stops at the same step.
    one = s.compile("diverging", s.spec("diverging", DIVERGING))
    ck1 = os.path.join(s.work, "ck_one")
    shutil.rmtree(ck1, ignore_errors=True)
    m1 = os.path.join(s.work, "stop_one.jsonl")
    rc1, _, err1 = run(train_cmd(s, one, m1, 20, ["--save", ck1, "--save-every", "1"]))
    c(rc1 != 0 and len(read_lines(m1)) - 1 == k, f"one rank stops at the same step {k}: {err1.strip()}")

    # A NaN loss on rank 1 alone: both ranks skip step 2 (no rank waits in optimizer_step's collectives).
    adamw = s.compile(f"adamw_{axis}", s.spec(f"adamw_{axis}", BASE_SPEC + extra))
    adamw1 = s.compile("adamw", t.TRAIN_SPEC)
    got_path, ref_path = os.path.join(s.work, f"hook_{axis}.jsonl"), os.path.join(s.work, "hook_one.jsonl")
    rc, _, err = run(train_cmd(s, adamw, got_path, 5, ["--on-nonfinite", "skip"]), nproc=n, timeout=600,
                     env={"COLOSSAL_TEST_NONFINITE": "loss:2:1"})
    want = "warning: step 2: the loss is not finite (nan" + (" on rank 1)" if axis == "tp" else ")")
    c(rc == 0 and err.count(want) == 1,
      f"{axis}=2, NaN loss on rank 1 at step 2, skip: exit {rc}, one warning (rank 0's): {err.strip()}")
    rc1, _, _ = run(train_cmd(s, adamw1, ref_path, 5, ["--on-nonfinite", "skip"]),
                    env={"COLOSSAL_TEST_NONFINITE": "loss:2"})
    got, ref = read_lines(got_path), read_lines(ref_path)
    c(rc1 == 0 and len(got) == len(ref) == 5, "5 lines each")
    for g, r in zip(got, ref):
        if g["step"] == 2:
            # (rank 0's own loss is the line's: finite under tp, the NaN global mean under dp)
            c(g["skipped"] and r["skipped"] and g["grad_norm"] is None, f"step 2 skipped: {g}")
            continue
        rel = abs(g["loss"] - r["loss"]) / abs(r["loss"])
        c(rel <= 1e-5 and g["skipped_total"] == r["skipped_total"],
          f"step {g['step']}: loss {g['loss']:.9f} vs one rank {r['loss']:.9f} (rel {rel:.1e})")
    # Stop instead: one error line, exit 1, nobody hangs.
    rc, _, err = run(train_cmd(s, adamw, got_path, 5), nproc=n, timeout=600,
                     env={"COLOSSAL_TEST_NONFINITE": "loss:2:1"})
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    c(rc != 0 and len(errors) == 1 and errors[0].startswith("error" + want[len("warning"):]),
      f"{axis}=2, NaN loss on rank 1, stop: exit {rc}, {errors}")
    return c.ok


CASES = {"stop": case_stop, "skip": case_skip, "checkpoint": case_checkpoint,
         "dp": lambda a: case_mesh(a, "dp"), "tp": lambda a: case_mesh(a, "tp")}


def main():
    u.case_main(__doc__, CASES, threads=2, steps=40, threads_help="torch.set_num_threads for the PyTorch reference",
                steps_help="unused (train_e2e.Setup reads it)")


if __name__ == "__main__":
    main()

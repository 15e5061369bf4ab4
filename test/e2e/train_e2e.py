#!/usr/bin/python3
"""End-to-end training checks: export -> colossal-opt (mode: train) -> colossal-run train, against
PyTorch (examples/train/torch_reference.py) and onnxruntime.

    train_e2e.py --case match|accum|sgd|resume|export --workdir W [--opt PATH --run PATH]
                 [--shared-dir DIR] [--threads N] [--steps N]

The model is examples/models/export.py --preset gpt2-train (GPT-2 style, 2 layers, d_model 128,
4 heads, T 64, byte vocabulary, untied head, nanoGPT initialisation); the data is
DIR/data/tinyshakespeare.txt as byte tokens (uint8).

  match   issue 4's check: examples/train/train_gpt2.yaml (B 8, AdamW lr 1e-3, betas 0.9/0.999,
          eps 1e-8, weight decay 0.1, no clipping) for --steps (40) steps with colossal-run and with
          torch.optim.AdamW from the same initial weights and data order; per step
          |loss - loss_torch| <= 1e-4 |loss_torch|, lr equal (1e-6), grad_norm within 1e-3.
  accum   the same with grad_accum 2: colossal vs PyTorch (grad_accum 2) within 1e-4, and colossal
          grad_accum 2 vs colossal grad_accum 1 within 1e-5 (the same mathematics).
  sgd     SGD (momentum 0.9, Nesterov, weight decay 0.01), linear warm-up + cosine schedule and
          global-norm clipping at 1.0 (some steps clipped, some not) vs torch.optim.SGD + clip_grad_norm_, within 1e-4; the
          metrics' lr equals docs/training.md's formula.
  resume  N = 20 steps in one run == K = 8 steps (--save) + --resume + 12 steps: every metrics
          value but tokens_per_s bit for bit, and the final checkpoints' tensors byte for byte. A
          save killed halfway is simulated (a partial step-N.tmp folder with a truncated tensor
          file next to the good checkpoint): --resume still loads the previous checkpoint.
  export  10 steps with --save; `colossal-run export --onnx` writes the trained weights into the
          ONNX model; onnxruntime on it gives colossal-run's `--program forward --checkpoint`
          logits within 1e-5 of max|logit|, and PyTorch's logits after the same 10 steps within
          1e-4; and they differ from the untrained model's (the export did write new weights).

match, accum and sgd need the shared data and exit 77 (skipped) without it; resume and export fall
back to /usr/share/common-licenses (Debian's base-files). Exit codes: 0 pass, 1 mismatch, 2 a tool
failed (its message is printed), 77 skipped.
"""
import glob
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402

TORCH_REFERENCE = os.path.join(u.REPO, "examples", "train", "torch_reference.py")
PREPARE_DATA = os.path.join(u.REPO, "examples", "train", "prepare_data.py")
TRAIN_SPEC = os.path.join(u.REPO, "examples", "train", "train_gpt2.yaml")

ADAMW = "{kind: adamw, lr: 1.0e-3, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.1}"


def spec_text(optimizer=ADAMW, schedule="{kind: constant}", extra=""):
    return ("mode: train\ninputs: {input_ids: [8, 64]}\ntrain:\n"
            "  loss: {kind: cross_entropy, logits: logits, labels: labels}\n"
            f"  optimizer: {optimizer}\n  lr_schedule: {schedule}\n{extra}")


class Setup:
    """The exported model, the data file and the tools, in WORKDIR."""

    def __init__(self, args, need_shared):
        self.args = args
        self.work = args.workdir
        os.makedirs(self.work, exist_ok=True)
        text = os.path.join(args.shared_dir, "data", "tinyshakespeare.txt")
        if os.path.isfile(text):
            texts = [text]
        elif need_shared:
            print(f"skipped: {text} is absent (set COLOSSAL_SHARED_DIR)")
            sys.exit(u.SKIP)
        else:
            texts = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
            if not texts:
                print("skipped: neither the shared data nor /usr/share/common-licenses is present")
                sys.exit(u.SKIP)
        self.opt = u.find_tool("colossal-opt", args.opt)
        self.run_bin = u.find_tool("colossal-run", args.run)
        self.model_dir = os.path.join(self.work, "model")
        out, _, dt = u.run([sys.executable, u.EXPORT_PY, "--preset", "gpt2-train", "--out", self.model_dir],
                           "export.py", timeout=600)
        print(out.rstrip() + f"\nexported in {dt:.1f} s")
        self.model = os.path.join(self.model_dir, "model.onnx")
        u.run([sys.executable, PREPARE_DATA] + texts + ["--out", os.path.join(self.work, "data")], "prepare_data.py")
        self.data = os.path.join(self.work, "data", "train.bin")

    def spec(self, name, text):
        path = os.path.join(self.work, name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def compile(self, name, spec):
        plan = os.path.join(self.work, name + ".cplan")
        dt = u.compile_plan(self.opt, self.model, spec, plan)
        print(f"compiled in {dt:.1f} s")
        return plan

    def train(self, plan, metrics, steps, extra=(), fresh=True):
        if fresh and os.path.exists(metrics):
            os.remove(metrics)
        cmd = [self.run_bin, plan, "train", "--data", self.data, "--token-dtype", "uint8", "--steps", str(steps),
               "--metrics", metrics, "--threads", str(self.args.threads)] + list(extra)
        _, _, dt = u.run(cmd, "colossal-run train", timeout=1200)
        print(f"colossal-run train: {dt:.1f} s")
        return read_metrics(metrics)

    def torch(self, spec, metrics, steps, extra=()):
        cmd = [sys.executable, TORCH_REFERENCE, "--model-dir", self.model_dir, "--spec", spec, "--data", self.data,
               "--steps", str(steps), "--metrics", metrics, "--threads", str(self.args.threads)] + list(extra)
        _, _, dt = u.run(cmd, "torch_reference.py", timeout=1200)
        print(f"PyTorch reference: {dt:.1f} s")
        return read_metrics(metrics)


def read_metrics(path, first=0):
    """The JSON lines of a metrics file, as dicts; the steps must be first, first + 1, ... (a
    resumed run's file starts at its checkpoint's step)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for i, r in enumerate(rows):
        if r.get("step") != first + i:
            u.die(f"{path}: line {i + 1} has step {r.get('step')}, expected {first + i}", 1)
        for k in ("loss", "lr", "grad_norm", "tokens_per_s"):
            if not isinstance(r.get(k), (int, float)):
                u.die(f"{path}: line {i + 1}: '{k}' is missing or not a finite number: {r.get(k)!r}", 1)
    return rows


def compare_runs(got, ref, tol, label, ref_label, grad_tol=1e-3, lr_tol=1e-6):
    """Per-step comparison of two metrics lists; prints a table, returns True when all pass."""
    ok = len(got) == len(ref)
    if not ok:
        print(f"  {label} has {len(got)} steps, {ref_label} {len(ref)}  MISMATCH")
    worst = 0.0
    print(f"  step  loss {label:>10}  loss {ref_label:>10}  rel diff   grad_norm rel  lr")
    for g, r in zip(got, ref):
        rel = abs(g["loss"] - r["loss"]) / abs(r["loss"])
        grel = abs(g["grad_norm"] - r["grad_norm"]) / max(abs(r["grad_norm"]), 1e-30)
        lrel = abs(g["lr"] - r["lr"]) / max(abs(r["lr"]), 1e-30)
        bad = rel > tol or grel > grad_tol or lrel > lr_tol
        worst = max(worst, rel)
        if bad or g["step"] % 5 == 0 or g["step"] == len(ref) - 1:
            print(f"  {g['step']:4d}  {g['loss']:15.9f}  {r['loss']:15.9f}  {rel:.2e}   {grel:.2e}      "
                  f"{g['lr']:.6g}{'  MISMATCH' if bad else ''}")
        ok &= not bad
    print(f"  worst relative loss difference {worst:.3e} (tolerance {tol:g}): {'ok' if ok else 'MISMATCH'}")
    return ok


def case_match(args):
    s = Setup(args, need_shared=True)
    plan = s.compile("adamw", TRAIN_SPEC)
    got = s.train(plan, os.path.join(s.work, "colossal.jsonl"), args.steps)
    ref = s.torch(TRAIN_SPEC, os.path.join(s.work, "torch.jsonl"), args.steps)
    ok = compare_runs(got, ref, 1e-4, "colossal", "torch")
    if ok and not got[-1]["loss"] < got[0]["loss"] - 1.0:
        print(f"  the loss did not fall by 1 nat over {args.steps} steps ({got[0]['loss']} -> {got[-1]['loss']})")
        ok = False
    return ok


def case_accum(args):
    s = Setup(args, need_shared=True)
    spec2 = s.spec("accum2", spec_text(extra="  grad_accum: 2\n"))
    plan2 = s.compile("accum2", spec2)
    plan1 = s.compile("accum1", TRAIN_SPEC)
    got2 = s.train(plan2, os.path.join(s.work, "colossal_accum2.jsonl"), args.steps)
    got1 = s.train(plan1, os.path.join(s.work, "colossal_accum1.jsonl"), args.steps)
    ref2 = s.torch(spec2, os.path.join(s.work, "torch_accum2.jsonl"), args.steps)
    print("colossal grad_accum 2 vs PyTorch grad_accum 2")
    ok = compare_runs(got2, ref2, 1e-4, "accum2", "torch")
    print("colossal grad_accum 2 vs colossal grad_accum 1")
    ok &= compare_runs(got2, got1, 1e-5, "accum2", "accum1")
    return ok


def case_sgd(args):
    s = Setup(args, need_shared=True)
    warmup, total, lr, min_lr = 5, args.steps, 0.05, 0.005
    spec = s.spec("sgd", spec_text(
        optimizer="{kind: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 0.01}",
        schedule=f"{{kind: cosine, warmup_steps: {warmup}, total_steps: {total}, min_lr: {min_lr}}}",
        extra="  grad_clip: 1.0\n"))
    plan = s.compile("sgd", spec)
    got = s.train(plan, os.path.join(s.work, "colossal_sgd.jsonl"), args.steps)
    ref = s.torch(spec, os.path.join(s.work, "torch_sgd.jsonl"), args.steps)
    ok = compare_runs(got, ref, 1e-4, "colossal", "torch")
    for g in got:  # the schedule, independently of torch_reference.py's copy of it
        st = g["step"]
        want = lr * (st + 1) / warmup if st < warmup else \
            min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(1.0, (st - warmup) / max(1, total - warmup))))
        if abs(g["lr"] - want) > 1e-6 * want:
            print(f"  step {st}: lr {g['lr']!r}, the schedule gives {want!r}  MISMATCH")
            ok = False
    clipped = sum(1 for r in ref if r["grad_norm"] > 1.0)
    print(f"  {clipped} of {len(ref)} steps had grad_norm > 1.0 (clipped)")
    if clipped == 0 or clipped == len(ref):
        print("  clipping was never or always active: one of its two paths went untested  MISMATCH")
        ok = False
    return ok


def json_report(s, name, spec, model=None):
    """Compiles `spec` (for `model`, default the Setup's) to WORKDIR/NAME.cplan with
    --report-format=json; returns (plan path, the report as a dict)."""
    plan = os.path.join(s.work, name + ".cplan")
    out, _, _ = u.run([s.opt, model or s.model, "--spec", spec, "-o", plan, "--report-format=json"],
                      "colossal-opt --report-format=json")
    return plan, json.loads(out)


def same_losses(label, rows, ref):
    """Whether the per-step losses of `rows` are the same JSON numbers as `ref`'s (bit-equal);
    prints the verdict and the first differing step."""
    got, want = [r["loss"] for r in rows], [r["loss"] for r in ref]
    ok = got == want
    print(f"  {label}: {len(got)} steps, losses {'bit-equal' if ok else 'DIFFER'} to the reference"
          f" (final {got[-1]!r} vs {want[-1]!r})")
    if not ok:
        for i, (a, b) in enumerate(zip(got, want)):
            if a != b:
                print(f"    first difference at step {i}: {a!r} vs {b!r}  MISMATCH")
                break
        if len(got) != len(want):
            print(f"    {len(got)} steps vs {len(want)}  MISMATCH")
    return ok


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file (8-byte header size, JSON header, data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = (info["dtype"], tuple(info["shape"]), data[a:b])
    return out


def latest_step_dir(ckpt):
    with open(os.path.join(ckpt, "latest")) as f:
        return os.path.join(ckpt, f.read().strip())


def case_resume(args):
    s = Setup(args, need_shared=False)
    n, k = 20, 8
    plan = s.compile("adamw", TRAIN_SPEC)
    ck_a, ck_b = os.path.join(s.work, "ckpt_a"), os.path.join(s.work, "ckpt_b")
    for d in (ck_a, ck_b):
        shutil.rmtree(d, ignore_errors=True)
    m_a, m_b = os.path.join(s.work, "run_a.jsonl"), os.path.join(s.work, "run_b.jsonl")
    a = s.train(plan, m_a, n, ["--save", ck_a])
    s.train(plan, m_b, k, ["--save", ck_b])
    good = latest_step_dir(ck_b)
    # A save killed halfway: the next step's temporary folder exists with a truncated tensor file.
    partial = os.path.join(ck_b, f"step-{k + 4:08d}.tmp")
    os.makedirs(partial, exist_ok=True)
    with open(os.path.join(good, "model.safetensors"), "rb") as f:
        head = f.read(1000)
    with open(os.path.join(partial, "model.safetensors"), "wb") as f:
        f.write(head)
    b = s.train(plan, m_b, n, ["--save", ck_b, "--resume", ck_b], fresh=False)
    ok = True
    if len(a) != n or len(b) != n:
        print(f"  run A has {len(a)} metrics lines, run B {len(b)}; expected {n}  MISMATCH")
        ok = False
    for x, y in zip(a, b):
        for key in ("loss", "lr", "grad_norm"):
            if x[key] != y[key]:
                print(f"  step {x['step']}: {key} {x[key]!r} (one run) vs {y[key]!r} (resumed)  MISMATCH")
                ok = False
    print(f"  metrics: {n} steps in one run vs {k} + resume + {n - k}: "
          f"{'identical loss, lr and grad_norm' if ok else 'DIFFERENT'}; last loss {a[-1]['loss']!r}")
    fa, fb = latest_step_dir(ck_a), latest_step_dir(ck_b)
    if os.path.basename(fa) != os.path.basename(fb):
        print(f"  final checkpoints {fa} and {fb} are of different steps  MISMATCH")
        ok = False
    for file in ("model.safetensors", "optimizer.safetensors"):
        ta, tb = read_safetensors(os.path.join(fa, file)), read_safetensors(os.path.join(fb, file))
        if set(ta) != set(tb):
            print(f"  {file}: tensor names differ: {sorted(set(ta) ^ set(tb))}  MISMATCH")
            ok = False
        diff = [name for name in sorted(set(ta) & set(tb)) if ta[name] != tb[name]]
        if diff:
            print(f"  {file}: {len(diff)} tensors differ, e.g. {diff[:3]}  MISMATCH")
            ok = False
        else:
            print(f"  {file}: {len(ta)} tensors, all identical byte for byte")
    with open(os.path.join(fa, "manifest.json")) as f:
        man = json.load(f)
    if man.get("step") != n:
        print(f"  {fa}/manifest.json: step {man.get('step')}, expected {n}  MISMATCH")
        ok = False
    return ok


def case_export(args):
    s = Setup(args, need_shared=False)
    steps = 10
    plan = s.compile("adamw", TRAIN_SPEC)
    ck = os.path.join(s.work, "ckpt")
    shutil.rmtree(ck, ignore_errors=True)
    s.train(plan, os.path.join(s.work, "colossal.jsonl"), steps, ["--save", ck])
    onnx_out = os.path.join(s.work, "trained.onnx")
    if os.path.exists(onnx_out):
        os.remove(onnx_out)
    u.run([s.run_bin, plan, "export", "--onnx", onnx_out, "--checkpoint", ck], "colossal-run export")
    # Token ids: 8 rows of 64 bytes of the data, from offsets the training never started a row at.
    tokens = np.fromfile(s.data, dtype=np.uint8)
    starts = np.random.default_rng(7).integers(0, tokens.size - 64, size=8)
    ids = np.stack([tokens[o:o + 64] for o in starts]).astype(np.int64)
    ids_file = os.path.join(s.work, "ids.npy")
    np.save(ids_file, ids)
    inputs = {"input_ids": ids_file}
    colossal_dir, ort_dir, ort0_dir = (os.path.join(s.work, d) for d in ("colossal_fwd", "ort_trained", "ort_initial"))
    shutil.rmtree(colossal_dir, ignore_errors=True)
    u.run([s.run_bin, plan, "--program", "forward", "--checkpoint", ck, "--input", f"input_ids={ids_file}",
           "--output-dir", colossal_dir, "--threads", str(args.threads)], "colossal-run --program forward")
    u.run_ort(onnx_out, inputs, ort_dir, args.threads)
    u.run_ort(s.model, inputs, ort0_dir, args.threads)
    torch_logits = os.path.join(s.work, "torch_logits.npy")
    s.torch(TRAIN_SPEC, os.path.join(s.work, "torch.jsonl"), steps,
            ["--logits-input", ids_file, "--logits-output", torch_logits])
    ort = u.npy_dir(ort_dir)
    print("colossal-run forward (checkpoint) vs onnxruntime on the exported model")
    ok = u.compare(ort, colossal_dir, 1e-5, label="colossal")
    print("PyTorch after the same steps vs onnxruntime on the exported model")
    ok &= u.compare(ort, _one(torch_logits, s.work), 1e-4, label="torch")
    trained, initial = np.load(ort["logits"]), np.load(os.path.join(ort0_dir, "logits.npy"))
    moved = float(np.abs(trained - initial).max() / np.abs(initial).max())
    print(f"  exported vs untrained model: max|Δlogit| / max|logit| = {moved:.3e}")
    if moved < 1e-2:
        print("  the exported model computes what the untrained one does: the trained weights were not written"
              "  MISMATCH")
        ok = False
    return ok


def _one(npy, work):
    """A directory holding just NPY as logits.npy (u.compare reads directories)."""
    d = os.path.join(work, "torch_fwd")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copy(npy, os.path.join(d, "logits.npy"))
    return d


CASES = {"match": case_match, "accum": case_accum, "sgd": case_sgd, "resume": case_resume, "export": case_export}


def main():
    u.case_main(__doc__, CASES, threads=2, steps=40, threads_help="colossal-run --threads and torch.set_num_threads",
                steps_help="steps of match, accum and sgd")


if __name__ == "__main__":
    main()

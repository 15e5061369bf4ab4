#!/usr/bin/python3
"""End-to-end data parallelism (docs/parallelism.md "Data parallelism"): `mesh: {dp: D}` plans run
under mpirun against the one-rank plan of the same spec.

    dp_e2e.py --case train|resume|report|errors|inference|fixed|kill --workdir W [--opt PATH --run PATH]
              [--shared-dir DIR] [--steps N]

The model is examples/models/export.py --preset gpt2-train; the spec is examples/train/train_gpt2.yaml
(B 8, AdamW) with `mesh: {dp: D}` added. Every rank runs with --threads 1.

  train      20 steps under dp=2 and dp=4 (grad_accum 1) and dp=2 with grad_accum 2: per step
             |loss - loss_1rank| <= 1e-5 |loss_1rank| against the one-rank plan (grad_norm within
             1e-4, lr equal); only rank 0 writes the metrics file.
  resume     (the manifests record the mesh: {"dp": 2} and {}; each resume prints one note about the
             mesh change, no warning.) dp=2 trains 10 steps with --save; the one-rank plan resumes from that checkpoint to 20
             steps; its losses match the uninterrupted one-rank run within 1e-5. And the reverse:
             a one-rank checkpoint at step 10 resumed under dp=2.
  report     colossal-opt --report of the dp=2 plan: the all_reduce over 'dp' moves 4 bytes per
             trainable parameter element per optimizer step (one float32 gradient each), checked
             against the parameter count the report lists and the plan's shapes, in one collective
             (the default 25 MiB gradient bucket holds them all; dp_bucket_e2e.py tests buckets).
  errors     spec errors: a batch that dp x grad_accum does not divide (the message names the sizes),
             a tp axis > 1; a dp=2 plan run on one rank or on 3 ranks.
  inference  the dp=2 inference plan of the GPT-2 preset (forward at B/2 rows per rank, colossal-run
             splits the inputs and gathers the outputs) == the one-rank plan within 1e-5 of max|output|.
  fixed      the same model exported with a FIXED batch [8, 64] (export.py --static, no dynamic axes,
             as most published ONNX files are), spec without `inputs:`: training under dp=2, dp=4,
             dp=2 x tp=2, grad_accum 2 and dp=2 x grad_accum 2 == the dynamic export's one-rank plan
             within 1e-5 per step; inference under dp=2, dp=4 and dp=2 x tp=2 == the one-rank plan
             within 1e-5 of max|output| (the plans take the global 8 rows); a batch that dp and/or
             grad_accum do not divide is one error naming them.
  kill       `colossal-run --nproc 2 ... train` (dp=2, a million steps); once rank 0 has written a
             metrics line, rank 1 gets SIGKILL (mid-step: a step is ~13 ms): the job must end within
             30 s with a non-zero exit and a message naming rank 1, and no process carrying the
             test's environment marker may be left (scanning /proc, as test/comm does).

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no mpirun).
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402

with open(t.TRAIN_SPEC) as f:
    BASE_SPEC = f.read()


def mpirun_cmd(n):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("skipped: mpirun is not on PATH")
        sys.exit(u.SKIP)
    return [mpirun, "-np", str(n), "--oversubscribe", "--bind-to", "none"]


def mpi_env():
    env = dict(os.environ)
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def run_mpi(n, cmd, what, expect_fail=False, env=None):
    """`cmd` under mpirun -np n (alone for n = 1), with mpi_env() plus `env`."""
    full = (mpirun_cmd(n) if n > 1 else []) + cmd
    extra = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    print("$ " + (extra + " " if extra else "") + " ".join(full), flush=True)
    p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1200,
                       env=dict(mpi_env(), **(env or {})))
    if expect_fail:
        return p
    if p.returncode != 0:
        raise u.ToolError(f"{what} failed with exit code {p.returncode}:\n" + "\n".join(
            (p.stderr or p.stdout).strip().splitlines()[-30:]))
    return p


def dp_spec(s, name, dp, accum=1):
    # grad_accum belongs under train: (the base spec ends inside it); mesh is top level.
    text = BASE_SPEC + (f"  grad_accum: {accum}\n" if accum > 1 else "") + (f"mesh: {{dp: {dp}}}\n" if dp > 1 else "")
    return s.spec(name, text)


def train(s, n, plan, metrics, steps, extra=(), fresh=True, env=None, first=0):
    if fresh and os.path.exists(metrics):
        os.remove(metrics)
    cmd = [s.run_bin, plan, "train", "--data", s.data, "--token-dtype", "uint8", "--steps", str(steps),
           "--metrics", metrics, "--threads", "1"] + list(extra)
    LAST_RUN["stderr"] = run_mpi(n, cmd, f"colossal-run train on {n} ranks", env=env).stderr
    return t.read_metrics(metrics, first)


LAST_RUN = {}  # the stderr of the latest train()


def check_mesh_change(ckpt, saved_mesh, label):
    """The checkpoint's manifest records `saved_mesh`; the resume that just ran printed a note about the
    mesh change and no warning."""
    with open(os.path.join(t.latest_step_dir(ckpt), "manifest.json")) as f:
        mesh = json.load(f).get("mesh")
    err = LAST_RUN.get("stderr", "")
    ok = mesh == saved_mesh
    print(f"  {label}: manifest mesh {mesh} (expected {saved_mesh}){'' if ok else '  MISMATCH'}")
    if "warning" in err.lower() or not re.search(r"note: .*saved under mesh .*, resuming under ", err):
        print(f"  {label}: expected one note about the mesh change and no warning, got stderr:\n{err}  MISMATCH")
        ok = False
    return ok


def case_train(args):
    s = t.Setup(args, need_shared=False)
    one = s.compile("one", dp_spec(s, "one", 1))
    ref = train(s, 1, one, os.path.join(s.work, "one.jsonl"), args.steps)
    ok = True
    if any("comm_s" in r for r in ref):
        print("the one-rank plan's metrics have comm_s  MISMATCH")
        ok = False
    for dp, accum in ((2, 1), (4, 1), (2, 2)):
        plan = s.compile(f"dp{dp}_a{accum}", dp_spec(s, f"dp{dp}_a{accum}", dp, accum))
        got = train(s, dp, plan, os.path.join(s.work, f"dp{dp}_a{accum}.jsonl"), args.steps)
        print(f"dp={dp} grad_accum {accum} vs one rank")
        ok &= t.compare_runs(got, ref, 1e-5, f"dp{dp}", "1 rank", grad_tol=1e-4)
        # comm_s: wall time in collectives on rank 0, a part of the step's wall time (B*T/tokens_per_s).
        bad = [r["step"] for r in got if not (0 < r.get("comm_s", -1) <= 8 * 64 / r["tokens_per_s"] * 1.001)]
        if bad:
            print(f"  comm_s missing or outside (0, step time] at steps {bad[:5]}  MISMATCH")
            ok = False
    return ok


def case_resume(args):
    s = t.Setup(args, need_shared=False)
    one = s.compile("one", dp_spec(s, "one", 1))
    dp2 = s.compile("dp2", dp_spec(s, "dp2", 2))
    ref = train(s, 1, one, os.path.join(s.work, "one.jsonl"), 20)
    ckpt = os.path.join(s.work, "ckpt_dp2")
    shutil.rmtree(ckpt, ignore_errors=True)
    m = os.path.join(s.work, "dp2_then_one.jsonl")
    train(s, 2, dp2, m, 10, ["--save", ckpt])
    got = train(s, 1, one, m, 20, ["--resume", ckpt], fresh=False)
    print("dp=2 for 10 steps, then one rank from its checkpoint, vs one rank for 20 steps")
    ok = check_mesh_change(ckpt, {"dp": 2}, "dp2 -> 1 rank")
    ok &= t.compare_runs(got, ref, 1e-5, "dp2+1", "1 rank", grad_tol=1e-4)
    ckpt1 = os.path.join(s.work, "ckpt_one")
    shutil.rmtree(ckpt1, ignore_errors=True)
    m = os.path.join(s.work, "one_then_dp2.jsonl")
    train(s, 1, one, m, 10, ["--save", ckpt1])
    got = train(s, 2, dp2, m, 20, ["--resume", ckpt1], fresh=False)
    print("one rank for 10 steps, then dp=2 from its checkpoint, vs one rank for 20 steps")
    ok &= check_mesh_change(ckpt1, {}, "1 rank -> dp2")
    ok &= t.compare_runs(got, ref, 1e-5, "1+dp2", "1 rank", grad_tol=1e-4)
    return ok


def case_report(args):
    s = t.Setup(args, need_shared=False)
    spec = dp_spec(s, "dp2", 2)
    plan = os.path.join(s.work, "dp2.cplan")
    out, _, _ = u.run([s.opt, s.model, "--spec", spec, "-o", plan, "--report"], "colossal-opt --report")
    print(out)
    params = re.search(r"trainable parameters: (\d+) tensors, (\d+) elements", out)
    comm = re.search(r"all_reduce over 'dp': (\d+) bytes in (\d+) collectives", out)
    mesh = re.search(r"^mesh: dp=2 ", out, re.M)
    if not (params and comm and mesh):
        print("the report lacks the parameter count, the mesh line or the all_reduce over 'dp'  MISMATCH")
        return False
    tensors, elements = int(params.group(1)), int(params.group(2))
    got_bytes, count = int(comm.group(1)), int(comm.group(2))
    # Independent count: the model's float initializers that train (the ONNX file, via onnx).
    print(f"report: {tensors} trainable tensors, {elements} elements; all_reduce over dp: {got_bytes} bytes "
          f"in {count} collectives; formula 4 x params = {4 * elements}")
    # The default gradient bucket (25 MiB) holds every gradient of this model: one collective.
    ok = got_bytes == 4 * elements and count == 1
    one_plan = os.path.join(s.work, "one.cplan")
    out1, _, _ = u.run([s.opt, s.model, "--spec", t.TRAIN_SPEC, "-o", one_plan, "--report"], "colossal-opt --report")
    if "all_reduce" in out1:
        print("the one-rank plan's report lists an all_reduce  MISMATCH")
        ok = False
    # Per-rank memory: params, grads and AdamW state (2 per param) are 4 bytes per element each.
    for role, mult in (("params", 1), ("grads", 1), ("optimizer state", 2)):
        m = re.search(rf"^\s*{role}\s.*?(\d+) bytes", out, re.M)
        if not m or int(m.group(1)) != 4 * mult * elements:
            print(f"per-rank {role}: {m.group(1) if m else None} bytes, expected {4 * mult * elements}  MISMATCH")
            ok = False
    return ok


def case_errors(args):
    s = t.Setup(args, need_shared=False)
    ok = True

    def expect(spec_text, pattern, name):
        nonlocal ok
        spec = s.spec(name, spec_text)
        p = subprocess.run([s.opt, s.model, "--spec", spec, "-o", os.path.join(s.work, name + ".cplan")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        good = p.returncode != 0 and re.search(pattern, p.stderr) and "Assertion" not in p.stderr
        print(f"  {name}: exit {p.returncode}: {p.stderr.strip()}  {'ok' if good else 'MISMATCH'}")
        ok &= bool(good)

    expect(BASE_SPEC + "mesh: {dp: 3}\n",
           r"mesh dp=3: the batch \(dim 0 of input 'input_ids', 8\) must be divisible by dp = 3", "dp3")
    expect(BASE_SPEC + "  grad_accum: 4\nmesh: {dp: 4}\n",
           r"mesh dp=4 with train.grad_accum 4: the batch \(dim 0 of input 'input_ids', 8\) must be divisible "
           r"by dp x grad_accum = 16", "dp4a4")
    expect(BASE_SPEC + "mesh: {dp: 2, pp: 2}\n", r"mesh axis 'pp' of size 2: pipeline parallelism is not supported yet", "pp2")
    expect(BASE_SPEC + "mesh: {dp: 0}\n", r"a mesh axis size must be a positive integer", "dp0")
    dp2 = s.compile("dp2", dp_spec(s, "dp2", 2))
    cmd = [s.run_bin, dp2, "train", "--data", s.data, "--token-dtype", "uint8", "--steps", "1",
           "--metrics", os.path.join(s.work, "err.jsonl"), "--threads", "1"]
    for n, pattern in ((1, r"has 2 ranks but the job has 1 rank"), (3, r"has 2 ranks but the job has 3 ranks")):
        p = run_mpi(n, cmd, "colossal-run", expect_fail=True)
        good = p.returncode != 0 and re.search(pattern, p.stderr)
        print(f"  dp=2 plan on {n} rank(s): exit {p.returncode}: {p.stderr.strip().splitlines()[:1]}  "
              f"{'ok' if good else 'MISMATCH'}")
        ok &= bool(good)
    return ok


def case_inference(args):
    s = t.Setup(args, need_shared=False)
    spec1 = s.spec("inf1", "mode: inference\ninputs: {input_ids: [8, 64]}\n")
    spec2 = s.spec("inf2", "mode: inference\ninputs: {input_ids: [8, 64]}\nmesh: {dp: 2}\n")
    p1, p2 = s.compile("inf1", spec1), s.compile("inf2", spec2)
    rng = np.random.default_rng(0)
    ids = os.path.join(s.work, "ids.npy")
    np.save(ids, rng.integers(0, 256, size=(8, 64), dtype=np.int64))
    out1, out2 = os.path.join(s.work, "out1"), os.path.join(s.work, "out2")
    for d in (out1, out2):
        shutil.rmtree(d, ignore_errors=True)
    run_mpi(1, [s.run_bin, p1, "--input", f"input_ids={ids}", "--output-dir", out1, "--threads", "1"], "one rank")
    run_mpi(2, [s.run_bin, p2, "--input", f"input_ids={ids}", "--output-dir", out2, "--threads", "1"], "dp=2")
    ref = u.npy_dir(out1)
    print("dp=2 vs one rank")
    return u.compare(ref, out2, 1e-5, label="dp2")


def case_fixed(args):
    """issue 10, done-when 1: a fixed-batch export behaves as the dynamic one under every mesh."""
    s = t.Setup(args, need_shared=False)
    static_dir = os.path.join(s.work, "model_static")
    u.run([sys.executable, u.EXPORT_PY, "--preset", "gpt2-train", "--static", "--out", static_dir, "--quiet"],
          "export.py --static", timeout=600)
    static = os.path.join(static_dir, "model.onnx")
    import onnx
    dims = [d.dim_value for d in onnx.load(static).graph.input[0].type.tensor_type.shape.dim]
    if dims != [8, 64]:
        print(f"export.py --static wrote input dims {dims}, expected [8, 64]  MISMATCH")
        return False
    # The base spec without its `inputs:` line: the model fixes the shapes.
    no_inputs = "".join(line for line in BASE_SPEC.splitlines(True) if not line.startswith("inputs:"))

    def compile_static(name, text):
        spec = s.spec(name, text)
        plan = os.path.join(s.work, name + ".cplan")
        u.compile_plan(s.opt, static, spec, plan)
        return plan

    ok = True
    steps = min(args.steps, 10)
    ref = train(s, 1, s.compile("one", dp_spec(s, "one", 1)), os.path.join(s.work, "one.jsonl"), steps)
    for name, mesh, accum in (("dp2", "{dp: 2}", 1), ("dp4", "{dp: 4}", 1), ("dp2tp2", "{dp: 2, tp: 2}", 1),
                              ("a2", None, 2), ("dp2a2", "{dp: 2}", 2)):
        text = no_inputs + (f"  grad_accum: {accum}\n" if accum > 1 else "") + (f"mesh: {mesh}\n" if mesh else "")
        plan = compile_static("fixed_" + name, text)
        ranks = {"dp2": 2, "dp4": 4, "dp2tp2": 4, "a2": 1, "dp2a2": 2}[name]
        got = train(s, ranks, plan, os.path.join(s.work, f"fixed_{name}.jsonl"), steps)
        print(f"fixed batch, {name} vs the dynamic export on one rank")
        ok &= t.compare_runs(got, ref, 1e-5, "fixed " + name, "1 rank", grad_tol=1e-4)

    rng = np.random.default_rng(0)
    ids = os.path.join(s.work, "ids.npy")
    np.save(ids, rng.integers(0, 256, size=(8, 64), dtype=np.int64))
    one_inf = s.compile("inf1", s.spec("inf1", "mode: inference\ninputs: {input_ids: [8, 64]}\n"))
    out1 = os.path.join(s.work, "inf_out1")
    shutil.rmtree(out1, ignore_errors=True)
    run_mpi(1, [s.run_bin, one_inf, "--input", f"input_ids={ids}", "--output-dir", out1, "--threads", "1"], "one rank")
    ref_out = u.npy_dir(out1)
    for name, mesh, ranks in (("dp2", "{dp: 2}", 2), ("dp4", "{dp: 4}", 4), ("dp2tp2", "{dp: 2, tp: 2}", 4)):
        plan = compile_static("fixed_inf_" + name, f"mode: inference\nmesh: {mesh}\n")
        out = os.path.join(s.work, "inf_out_" + name)
        shutil.rmtree(out, ignore_errors=True)
        run_mpi(ranks, [s.run_bin, plan, "--input", f"input_ids={ids}", "--output-dir", out, "--threads", "1"], name)
        print(f"fixed batch inference, {name} vs one rank")
        ok &= u.compare(ref_out, out, 1e-5, label="fixed " + name)

    ok &= fixed_cnn(s)
    ok &= fixed_position_ids(s)

    def expect(text, pattern, name):
        nonlocal ok
        spec = s.spec(name, text)
        p = subprocess.run([s.opt, static, "--spec", spec, "-o", os.path.join(s.work, name + ".cplan")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        good = p.returncode != 0 and re.search(pattern, p.stderr)
        print(f"  {name}: exit {p.returncode}: {p.stderr.strip()}  {'ok' if good else 'MISMATCH'}")
        ok &= bool(good)

    expect(no_inputs + "mesh: {dp: 3}\n",
           r"input 'input_ids': the batch \(dim 0 = 8\) is not divisible by dp=3 row blocks", "fixed_dp3")
    expect(no_inputs + "  grad_accum: 3\n",
           r"input 'input_ids': the batch \(dim 0 = 8\) is not divisible by train.grad_accum=3 row blocks", "fixed_a3")
    expect(no_inputs + "  grad_accum: 4\nmesh: {dp: 4}\n",
           r"input 'input_ids': the batch \(dim 0 = 8\) is not divisible by dp=4 x train.grad_accum=4 = 16 row blocks",
           "fixed_dp4a4")
    expect("mode: inference\ninputs: {input_ids: [4, 64]}\nmesh: {dp: 2}\n",
           r"input 'input_ids': the spec's inputs give dim 0 = 4 but the model fixes it to 8", "fixed_inputs4")
    return ok


def fixed_cnn(s):
    """A small CNN (conv, pad, max/avg pool, nearest upsample, flatten, linear) exported by torch with a
    fixed batch of 4: dp=2 and dp=4 inference (each rank 2 or 1 rows: the row-wise rules of
    convolution, pooling, pad and resize) against the one-rank plan within 1e-5 of max|output|."""
    import torch
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.head = torch.nn.Linear(4 * 8 * 8, 5)

        def forward(self, x):
            h = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
            h = torch.nn.functional.pad(h, (1, 1, 1, 1))
            h = torch.nn.functional.interpolate(h, scale_factor=2.0, mode="nearest")
            h = torch.nn.functional.avg_pool2d(h, 2)[:, :, 1:9, 1:9]
            return self.head(h.flatten(1))

    model = os.path.join(s.work, "cnn.onnx")
    x = torch.randn(4, 3, 16, 16)
    torch.onnx.export(Net().eval(), (x,), model, input_names=["x"], output_names=["y"], opset_version=14)
    xs = os.path.join(s.work, "cnn_x.npy")
    np.save(xs, x.numpy())
    ok = True
    ref = None
    for name, mesh, ranks in (("one", "", 1), ("dp2", "mesh: {dp: 2}\n", 2), ("dp4", "mesh: {dp: 4}\n", 4)):
        spec = s.spec("cnn_" + name, "mode: inference\n" + mesh)
        plan = os.path.join(s.work, f"cnn_{name}.cplan")
        u.compile_plan(s.opt, model, spec, plan)
        out = os.path.join(s.work, "cnn_out_" + name)
        shutil.rmtree(out, ignore_errors=True)
        run_mpi(ranks, [s.run_bin, plan, "--input", f"x={xs}", "--output-dir", out, "--threads", "1"], "cnn " + name)
        if ref is None:
            ref = u.npy_dir(out)
            continue
        print(f"fixed-batch CNN inference, {name} vs one rank")
        ok &= u.compare(ref, out, 1e-5, label="cnn " + name)
    return ok


def fixed_position_ids(s):
    """HF-style position ids, `arange(T).unsqueeze(0).expand(B, T)` (folded to a [B, T] constant of
    equal rows), in a fixed-batch export: dp=2 inference against the one-rank plan, and dp=2 x
    grad_accum 2 training against one rank (losses within 1e-5)."""
    import torch
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.e = torch.nn.Embedding(256, 32)
            self.p = torch.nn.Embedding(64, 32)
            self.h = torch.nn.Linear(32, 256)

        def forward(self, x):
            b, t = x.shape
            pos = torch.arange(t).unsqueeze(0).expand(b, t)
            return self.h(torch.tanh(self.e(x) + self.p(pos)))

    model = os.path.join(s.work, "pos.onnx")
    x = torch.randint(0, 256, (8, 64))
    torch.onnx.export(Net().eval(), (x,), model, input_names=["input_ids"], output_names=["logits"],
                      opset_version=17)
    xs = os.path.join(s.work, "pos_x.npy")
    np.save(xs, x.numpy())
    outs = {}
    for name, mesh, ranks in (("one", "", 1), ("dp2", "mesh: {dp: 2}\n", 2)):
        plan = os.path.join(s.work, f"pos_{name}.cplan")
        u.compile_plan(s.opt, model, s.spec("pos_" + name, "mode: inference\n" + mesh), plan)
        outs[name] = os.path.join(s.work, "pos_out_" + name)
        shutil.rmtree(outs[name], ignore_errors=True)
        run_mpi(ranks, [s.run_bin, plan, "--input", f"input_ids={xs}", "--output-dir", outs[name], "--threads", "1"],
                "position ids " + name)
    print("fixed-batch position ids, dp2 vs one rank")
    ok = u.compare(u.npy_dir(outs["one"]), outs["dp2"], 1e-5, label="position ids dp2")
    train = ("mode: train\ntrain:\n  loss: {kind: cross_entropy, logits: logits, labels: labels}\n"
             "  optimizer: {kind: adamw, lr: 1.0e-3}\n")
    runs = {}
    for name, extra, ranks in (("one", "", 1), ("dp2a2", "  grad_accum: 2\nmesh: {dp: 2}\n", 2)):
        plan = os.path.join(s.work, f"pos_train_{name}.cplan")
        u.compile_plan(s.opt, model, s.spec("pos_train_" + name, train + extra), plan)
        runs[name] = globals()["train"](s, ranks, plan, os.path.join(s.work, f"pos_train_{name}.jsonl"), 5)
    print("fixed-batch position ids, training dp2 x grad_accum 2 vs one rank")
    ok &= t.compare_runs(runs["dp2a2"], runs["one"], 1e-5, "pos dp2a2", "1 rank", grad_tol=1e-4)
    return ok


def processes_with(entry):
    """{pid: environment entries} of the live (not zombie) processes whose environment holds `entry`."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            if stat[stat.rfind(")") + 2] == "Z":
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().decode(errors="replace").split("\0")
        except (OSError, IndexError):
            continue  # ended meanwhile, or not ours to read
        if entry in env:
            out[int(d)] = env
    return out


def rank_pid(marker, rank):
    for pid, env in processes_with(marker).items():
        if f"OMPI_COMM_WORLD_RANK={rank}" in env:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"colossal-run" in f.read():
                        return pid
            except OSError:
                pass
    return 0


def kill_rank_mid_training(s, plan, tag):
    """kill -9 rank 1 of `colossal-run --nproc 2 PLAN train` once rank 0 has written a metrics line;
    True when the job ends within 30 s, non-zero, with mpirun naming rank 1 and signal 9, and no
    process is left (issue 5, done-when item 4). `tag` names the marker variable and the files."""
    import signal
    import time
    metrics = os.path.join(s.work, tag + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    marker = f"COLOSSAL_{tag.upper()}_TEST={os.getpid()}.{time.time_ns()}"
    env = mpi_env()
    env[marker.split("=")[0]] = marker.split("=", 1)[1]
    log = os.path.join(s.work, tag + ".log")
    cmd = [s.run_bin, plan, "train", "--data", s.data, "--token-dtype", "uint8", "--steps", "1000000",
           "--metrics", metrics, "--threads", "1", "--nproc", "2"]
    print("$ " + " ".join(cmd), flush=True)
    with open(log, "w") as logf:
        job = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    victim = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and job.poll() is None:
            if os.path.exists(metrics) and os.path.getsize(metrics) > 0 and (victim := rank_pid(marker, 1)):
                break
            time.sleep(0.02)
        if not victim:
            print(f"no metrics line or no rank 1 within 120 s (exit {job.poll()}):\n" + open(log).read())
            return False
        t0 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        print(f"killed rank 1 (pid {victim}) after {sum(1 for _ in open(metrics))} metrics line(s)", flush=True)
        try:
            rc = job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rc = None
        seconds = time.monotonic() - t0
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    out = open(log).read()
    print(out.strip()[-2000:])
    ok = True
    if rc is None or seconds > 30:
        print(f"the job did not end within 30 s of the kill ({seconds:.1f} s)  MISMATCH")
        ok = False
    else:
        print(f"the job ended {seconds:.2f} s after the kill with exit code {rc}")
    if rc == 0:
        print("exit code 0 after a rank was killed  MISMATCH")
        ok = False
    if not re.search(r"rank 1 with PID \d+ .*exited on signal 9", out, re.S):
        print("no message naming rank 1 and signal 9  MISMATCH")
        ok = False
    settle = time.monotonic() + 5  # the launcher's SIGTERM/SIGKILL of the survivors may take a moment
    while processes_with(marker) and time.monotonic() < settle:
        time.sleep(0.05)
    left = processes_with(marker)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        print(f"processes left behind: {sorted(left)}  MISMATCH")
        ok = False
    return ok


def case_kill(args):
    """kill -9 rank 1 of a dp=2 training run (kill_rank_mid_training)."""
    s = t.Setup(args, need_shared=False)
    mpirun_cmd(2)  # skips without mpirun
    return kill_rank_mid_training(s, s.compile("dp2", dp_spec(s, "dp2", 2)), "dp_kill")


CASES = {"train": case_train, "resume": case_resume, "report": case_report, "errors": case_errors,
         "inference": case_inference, "fixed": case_fixed, "kill": case_kill}


def main():
    u.case_main(__doc__, CASES)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Gradient buckets (docs/parallelism.md "Gradient buckets"): the dp=2 plan of the GPT-2 training
preset compiled with the default cap (--bucket-cap-mb 25: every gradient in one bucket), a small cap
(0.05 MiB: several buckets, the largest gradients alone) and no buckets (--bucket-cap-mb 0: one
all_reduce per gradient), each trained for --steps steps under mpirun with --save.

    dp_bucket_e2e.py --workdir W [--opt PATH --run PATH] [--steps N] [--dp D]

Checks: (1) the plans' optimizer_step all_reduces over 'dp': cap 0 has one per gradient state, the
default cap exactly one holding every gradient, the small cap buckets of at most 0.05 MiB (or a
single larger gradient) covering every gradient once in Plan.states order; (2) --report: the
all_reduce over 'dp' moves the same bytes (4 x trainable elements) in 1 / K / 29 collectives;
(3) the losses, grad norms and learning rates of every step are bit-equal (the metrics' JSON
numbers) across the three plans, and the checkpoints' safetensors files are byte-equal. With D = 2
every element's sum is a + b whatever the message layout, so equality must hold exactly; with
--dp 4 the MPI library may pick a different algorithm for a different message size, so (3) is then
only reported (losses within 1e-5).

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no mpirun).
"""
import argparse
import filecmp
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402
import dp_e2e as d  # noqa: E402

SMALL_MB = 0.05


def plan_pb2_module(work):
    """plan.proto compiled for Python by protoc into `work`/pb."""
    protoc = shutil.which("protoc")
    if not protoc:
        raise u.ToolError("protoc is not on PATH (needed to read the plans)")
    pb_dir = os.path.join(work, "pb")
    os.makedirs(pb_dir, exist_ok=True)
    u.run([protoc, f"--proto_path={os.path.join(u.REPO, 'runtime', 'plan')}", f"--python_out={pb_dir}", "plan.proto"],
          "protoc")
    sys.path.insert(0, pb_dir)
    import plan_pb2  # noqa: E402
    return plan_pb2


def plan_buckets(plan_pb2, path):
    """[(input buffer state names, bytes)] of optimizer_step's all_reduce over 'dp', in order; the GRAD
    state names in Plan.states order."""
    pb = plan_pb2.Plan()
    with open(path, "rb") as f:
        pb.ParseFromString(f.read())
    grads = [st.name for st in pb.states if st.role == plan_pb2.StateTensor.GRAD]
    out = []
    for prog in pb.programs:
        if prog.name != "optimizer_step":
            continue
        for inst in prog.instructions:
            if inst.op == "all_reduce" and inst.attrs["axes"].s == "dp":
                bufs = [prog.buffers[i] for i in inst.inputs]
                if list(inst.inputs) != list(inst.outputs):
                    raise u.ToolError(f"{path}: an all_reduce over dp is not in place")
                out.append(([b.state_name for b in bufs], sum(b.size_bytes for b in bufs)))
    return out, grads


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--opt")
    p.add_argument("--run")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dp", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--shared-dir", default=os.environ.get("COLOSSAL_SHARED_DIR", ""))
    args = p.parse_args()
    try:
        ok = run(args)
    except u.ToolError as e:
        u.die(str(e), 2)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


def run(args):
    d.mpirun_cmd(args.dp)  # exits 77 without mpirun
    s = t.Setup(args, need_shared=False)
    spec = d.dp_spec(s, f"dp{args.dp}", args.dp)
    ok = True
    caps = {"default": None, "small": SMALL_MB, "none": 0}
    plans, metrics, ckpts, reports = {}, {}, {}, {}
    for name, cap in caps.items():
        plan = os.path.join(s.work, f"{name}.cplan")
        cmd = [s.opt, s.model, "--spec", spec, "-o", plan, "--report"]
        if cap is not None:
            cmd.append(f"--bucket-cap-mb={cap}")
        reports[name], _, _ = u.run(cmd, "colossal-opt --report")
        plans[name] = plan
    # (1) The plans' buckets.
    layout = {}
    pb2 = plan_pb2_module(s.work)
    for name, plan in plans.items():
        buckets, grads = plan_buckets(pb2, plan)
        layout[name] = buckets
        flat = [g for names, _ in buckets for g in names]
        sizes = [b for _, b in buckets]
        print(f"{name}: {len(buckets)} all_reduce over dp, bytes {sizes}")
        if flat != grads:
            print(f"  {name}: the buckets hold {flat}, expected every gradient once in states order {grads}  MISMATCH")
            ok = False
    n_grads = len(layout["none"])
    if any(len(names) != 1 for names, _ in layout["none"]):
        print("  cap 0 fused gradients  MISMATCH")
        ok = False
    if len(layout["default"]) != 1:
        print(f"  the default cap (25 MiB) gives {len(layout['default'])} buckets, expected 1  MISMATCH")
        ok = False
    cap = int(SMALL_MB * (1 << 20))
    small = layout["small"]
    if not (1 < len(small) < n_grads):
        print(f"  the small cap gives {len(small)} buckets, expected more than 1 and fewer than {n_grads}  MISMATCH")
        ok = False
    for i, (names, nbytes) in enumerate(small):
        if nbytes > cap and len(names) > 1:
            print(f"  small-cap bucket {i} holds {nbytes} bytes > {cap} in {len(names)} tensors  MISMATCH")
            ok = False
        if i + 1 < len(small) and nbytes + layout["none"][sum(len(b[0]) for b in small[:i + 1])][1] <= cap:
            print(f"  small-cap bucket {i} closed although the next gradient fits  MISMATCH")
            ok = False
    # (2) The report: same bytes, one call per bucket.
    params = re.search(r"trainable parameters: (\d+) tensors, (\d+) elements", reports["none"])
    elements = int(params.group(2))
    for name in caps:
        m = re.search(r"all_reduce over 'dp': (\d+) bytes in (\d+) collectives", reports[name])
        want = (4 * elements, len(layout[name]))
        got = (int(m.group(1)), int(m.group(2))) if m else None
        print(f"report {name}: {got} (bytes, collectives), expected {want}")
        if got != want:
            print("  MISMATCH")
            ok = False
    # (3) Training: bit-equal metrics and checkpoints.
    for name, plan in plans.items():
        ckpt = os.path.join(s.work, f"ckpt_{name}")
        shutil.rmtree(ckpt, ignore_errors=True)
        metrics[name] = d.train(s, args.dp, plan, os.path.join(s.work, f"{name}.jsonl"), args.steps, ["--save", ckpt])
        ckpts[name] = t.latest_step_dir(ckpt)
    exact = args.dp == 2
    for name in ("default", "small"):
        for a, b in zip(metrics[name], metrics["none"]):
            same = all(a[k] == b[k] for k in ("loss", "grad_norm", "lr"))
            close = abs(a["loss"] - b["loss"]) <= 1e-5 * abs(b["loss"])
            if not same:
                print(f"  step {a['step']}: {name} loss {a['loss']!r} grad_norm {a['grad_norm']!r} vs unbucketed "
                      f"{b['loss']!r} {b['grad_norm']!r}{'  MISMATCH' if exact or not close else ' (not bit-equal)'}")
                ok &= not exact and close
        files = sorted(f for f in os.listdir(ckpts["none"]) if f.endswith(".safetensors"))
        if not files:
            print(f"  no safetensors in {ckpts['none']}  MISMATCH")
            ok = False
        for f in files:
            eq = filecmp.cmp(os.path.join(ckpts[name], f), os.path.join(ckpts["none"], f), shallow=False)
            print(f"checkpoint {f}: {name} {'==' if eq else '!='} unbucketed (byte for byte)")
            if not eq and exact:
                print("  MISMATCH")
                ok = False
        print(f"{name}: {len(metrics[name])} steps, losses {[r['loss'] for r in metrics[name]]}")
    print(f"unbucketed: losses {[r['loss'] for r in metrics['none']]}")
    return ok


if __name__ == "__main__":
    main()

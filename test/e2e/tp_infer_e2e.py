#!/usr/bin/python3
"""Inference equality under tensor parallelism (issue 5, done-when item 1; docs/parallelism.md
"Inference equality, measured"): one model compiled by colossal-opt under every parallel layout,
run by `colossal-run --nproc N`, against the ONE-RANK plan of the same model and spec without
`mesh`/`parallel`.

    tp_infer_e2e.py --model gpt2|llama|bert|aidreams260K|stories260K --workdir W
                    [--opt PATH --run PATH] [--shared-dir D] [--configs tp2,tp4,...]

Models: the GPT-2, Llama (GQA: 4 query heads sharing 2 KV heads) and BERT examples of
examples/models/export.py at tiny sizes (2 layers, d_model 32, 4 heads, MLP width 64, vocab 64,
batch 4 of 8 tokens; BERT has two outputs, last_hidden_state and pooler_output), and the shared
real Llamas ${shared}/models/{aidreams260K,stories260K}/model.onnx (d_model 64, 4 heads / 8 query
heads on 4 KV heads, SwiGLU 172, vocab 512) on a [4, 16] batch of token ids < 512.

Configurations (the spec's `mesh` and `parallel.tensor`; N ranks):

    tp2     mesh {tp: 2}                                           2 ranks
    tp4     mesh {tp: 4}                                           4 ranks
    dp2tp2  mesh {dp: 2, tp: 2}                                    4 ranks
    sp2     mesh {tp: 2}, sequence_parallel: true                  2 ranks
    2d      mesh {tp: 4}, style 2d (2 x 2 grid)                    4 ranks
    2.5d    mesh {tp: 8}, style 2.5d, depth 2 (2 x 2 x 2)          8 ranks
    3d      mesh {tp: 8}, style 3d (2 x 2 x 2 cube)                8 ranks

Checked, for each configuration: every output has the one-rank output's shape and dtype and
max|Δ| ≤ 1e-5 · max|one-rank output|. Where the model's sizes do not divide (EXPECTED_ERRORS
below, derived from the model's sizes: e.g. the Llama example's 2 KV heads at tp=4), colossal-opt
must instead exit 1 with exactly one `error:` line naming the size and why (a regex per case),
and a configuration not listed there that fails to compile is a failure. Sanity of the reference
itself: the one-rank plan against PyTorch's outputs (examples, written by export.py) within 1e-4,
and for the shared models the one-rank plan at [1, 16] against the folder's logits.npy (an
independent numpy forward) within 1e-4 of max|logit|.

Prints one table row per configuration: ranks, max relative error (max|Δ| / max|one-rank|) over
the outputs, and the wall time of the run. Exit codes: 0 pass, 1 mismatch, 2 a tool failed
unexpectedly, 77 skipped (no mpirun, or the shared models are absent).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402

TOL = 1e-5          # issue 5: max-abs error <= 1e-5 of the largest |output|
SANITY_TOL = 1e-4   # the one-rank plan against PyTorch / the shared models' numpy reference

# name -> (ranks, spec lines added to the one-rank spec)
CONFIGS = {
    "tp2": (2, "mesh: {tp: 2}\n"),
    "tp4": (4, "mesh: {tp: 4}\n"),
    "dp2tp2": (4, "mesh: {dp: 2, tp: 2}\n"),
    "sp2": (2, "mesh: {tp: 2}\nparallel: {tensor: {style: 1d, sequence_parallel: true}}\n"),
    "2d": (4, "mesh: {tp: 4}\nparallel: {tensor: {style: 2d}}\n"),
    "2.5d": (8, "mesh: {tp: 8}\nparallel: {tensor: {style: 2.5d, depth: 2}}\n"),
    "3d": (8, "mesh: {tp: 8}\nparallel: {tensor: {style: 3d}}\n"),
}

# The example models' export flags (tiny: 8-rank runs share 2 cores).
EXAMPLE_FLAGS = ["--batch", "4", "--seq", "8", "--layers", "2", "--d-model", "32", "--heads", "4",
                 "--ffn", "64", "--vocab", "64", "--context", "16", "--seed", "3"]

# (model, config) -> regex the single `error:` line of colossal-opt must match: the configurations
# whose sizes the strategy cannot split. Derived from the sizes, not from the compiler's output:
#   llama example: 4 query heads on 2 KV heads: tp=4 needs 4 | Hkv (the KV heads are split with the
#                  query heads); the grids split heads over one grid side of 2 only, so they divide.
#   gpt2, bert:    4 heads, width 32, MLP 64, vocab 64: everything divides by 2, 4 and the 2-sided grids.
#   aidreams260K:  4 heads, SwiGLU hidden 172 = 4 * 43, vocab 512: divides by 2, 4 and 2-sided grids.
#   stories260K:   8 query heads on 4 KV heads, hidden 172, vocab 512: the same.
EXPECTED_ERRORS = {
    ("llama", "tp4"): r"tp=4 cannot split the reshape .*: dim 2 of the result has size 2, not divisible by 4 "
                      r"\(attention heads, including key/value heads, must be divisible by the tensor-parallel size",
}


def spec_text(inputs, extra=""):
    binds = ", ".join(f"{n}: [{', '.join(map(str, s))}]" for n, s in inputs)
    return f"mode: inference\ninputs: {{{binds}}}\n" + extra


class Case:
    def __init__(self, args):
        self.opt = u.find_tool("colossal-opt", args.opt)
        self.run_bin = u.find_tool("colossal-run", args.run)
        self.work = os.path.abspath(args.workdir)
        os.makedirs(self.work, exist_ok=True)
        self.model_name = args.model
        self.sanity = []  # (label, reference {name: file}, spec inputs, input files)
        if args.model in ("gpt2", "llama", "bert"):
            d = self.path("model")
            shutil.rmtree(d, ignore_errors=True)
            u.run([sys.executable, u.EXPORT_PY, "--arch", args.model, "--out", d, "--quiet"] + EXAMPLE_FLAGS,
                  f"export.py --arch {args.model}", timeout=300)
            self.model = os.path.join(d, "model.onnx")
            self.inputs = u.npy_dir(os.path.join(d, "inputs"))
            self.torch_ref = u.npy_dir(os.path.join(d, "reference"))
        else:
            folder = os.path.join(args.shared_dir, "models", args.model)
            self.model = os.path.join(folder, "model.onnx")
            if not os.path.isfile(self.model):
                print(f"skipped: {self.model} is absent")
                sys.exit(u.SKIP)
            ids = np.random.default_rng(7).integers(0, 512, (4, 16)).astype(np.int64)
            np.save(self.path("input_ids.npy"), ids)
            self.inputs = {"input_ids": self.path("input_ids.npy")}
            self.shared = folder
        self.shapes = [(n, list(np.load(f).shape)) for n, f in sorted(self.inputs.items())]
        self.mpirun = shutil.which("mpirun")
        if not self.mpirun:
            print("skipped: mpirun is not on PATH")
            sys.exit(u.SKIP)

    def path(self, name):
        return os.path.join(self.work, name)

    def write_spec(self, name, text):
        p = self.path(name + ".yaml")
        with open(p, "w") as f:
            f.write(text)
        return p

    def compile(self, name, text):
        """colossal-opt; returns (plan or None, exit code, stderr)."""
        spec, plan = self.write_spec(name, text), self.path(name + ".cplan")
        if os.path.exists(plan):
            os.remove(plan)
        p = subprocess.run([self.opt, self.model, "--spec", spec, "--report", "-o", plan], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=300)
        self.report = p.stdout
        return (plan if p.returncode == 0 and os.path.isfile(plan) else None), p.returncode, p.stderr

    def run(self, plan, ranks, inputs, name):
        out = self.path(name + "_out")
        shutil.rmtree(out, ignore_errors=True)
        cmd = [self.run_bin]
        if ranks > 1:
            cmd += ["--nproc", str(ranks)]
        cmd += [plan] + u.input_args(inputs) + ["--output-dir", out, "--threads", "1"]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240,
                               env=env)
        except subprocess.TimeoutExpired:
            raise u.ToolError(f"colossal-run {name} on {ranks} ranks: timed out after 240 s")
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            raise u.ToolError(f"colossal-run {name} on {ranks} ranks failed with exit code {p.returncode}:\n" +
                              "\n".join((p.stderr or p.stdout).strip().splitlines()[-30:]))
        return out, dt


def collectives(report):
    """{(op, axes): calls} of the report's `forward` program (docs/parallelism.md "Plan lowering,
    kernels and report")."""
    out = {}
    section = report.split("collectives per program call", 1)[-1].split("communication per run", 1)[0]
    for op, axes, calls in re.findall(r"^\s+(\w+) over '([^']+)': (\d+) calls?", section, re.M):
        out[(op, axes)] = out.get((op, axes), 0) + int(calls)
    return out


def relative_errors(ref_dir, got_dir):
    """{output: max|got - ref| / max|ref|} (inf for a missing output or a shape/dtype mismatch)."""
    res = {}
    ref, got = u.npy_dir(ref_dir), u.npy_dir(got_dir)
    for name in sorted(set(ref) | set(got)):
        if name not in ref or name not in got:
            res[name] = float("inf")
            continue
        r, g = np.load(ref[name]), np.load(got[name])
        if r.shape != g.shape or r.dtype != g.dtype:
            print(f"  {name}: {list(g.shape)} {g.dtype}, one rank {list(r.shape)} {r.dtype}  MISMATCH")
            res[name] = float("inf")
            continue
        if not np.all(np.isfinite(g) == np.isfinite(r)):
            res[name] = float("inf")
            continue
        scale = max(float(np.max(np.abs(r))), 1e-30)
        res[name] = float(np.max(np.abs(g.astype(np.float64) - r))) / scale
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, choices=["gpt2", "llama", "bert", "aidreams260K", "stories260K"])
    p.add_argument("--workdir", required=True)
    p.add_argument("--opt")
    p.add_argument("--run")
    p.add_argument("--shared-dir", default="")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    args = p.parse_args()
    try:
        return check(args)
    except u.ToolError as e:
        print(f"error: {e}")
        return 2


def check(args):
    c = Case(args)
    ok = True
    m = c.model_name

    # The reference: the one-rank plan, itself checked against an independent forward.
    one, rc, err = c.compile("one", spec_text(c.shapes))
    if not one:
        raise u.ToolError(f"colossal-opt (one rank) failed with exit code {rc}:\n{err.strip()}")
    ref_dir, _ = c.run(one, 1, c.inputs, "one")
    print("sanity: the one-rank plan against an independent reference")
    if hasattr(c, "torch_ref"):
        ok &= u.compare(c.torch_ref, ref_dir, SANITY_TOL, label="one rank")
    else:
        s1, rc, err = c.compile("one_b1", spec_text([("input_ids", [1, 16])]))
        if not s1:
            raise u.ToolError(f"colossal-opt (one rank, [1, 16]) failed with exit code {rc}:\n{err.strip()}")
        d, _ = c.run(s1, 1, {"input_ids": os.path.join(c.shared, "input_ids.npy")}, "one_b1")
        ok &= u.compare({"logits": os.path.join(c.shared, "logits.npy")}, d, SANITY_TOL, label="one rank")

    rows = []
    for name in args.configs.split(","):
        ranks, extra = CONFIGS[name]
        print(f"{m} {name} ({ranks} ranks)")
        plan, rc, err = c.compile(name, spec_text(c.shapes, extra))
        want = EXPECTED_ERRORS.get((m, name))
        if want:
            lines = [ln for ln in err.splitlines() if ln.startswith("error:") or ": error:" in ln]
            good = plan is None and rc == 1 and len(lines) == 1 and re.search(want, lines[0]) is not None
            print(f"  expected a compile error matching /{want}/: exit {rc}, "
                  f"{len(lines)} error line(s): {lines!r}" + ("" if good else "  MISMATCH"))
            if not good and err.strip():
                print("  stderr:\n    " + "\n    ".join(err.strip().splitlines()[-10:]))
            rows.append((m, name, ranks, "compile error" if good else "UNEXPECTED", lines[0] if lines else ""))
            ok &= good
            continue
        if not plan:
            print(f"  colossal-opt failed with exit code {rc}  MISMATCH\n    " +
                  "\n    ".join(err.strip().splitlines()[-10:]))
            rows.append((m, name, ranks, "COMPILE FAILED", err.strip().splitlines()[-1] if err.strip() else ""))
            ok = False
            continue
        # The plan must really be partitioned: collectives over a tensor-parallel axis.
        coll = collectives(c.report)
        summary = ", ".join(f"{op} {axes} x{n}" for (op, axes), n in sorted(coll.items()))
        print(f"  forward's collectives: {summary or 'none'}")
        if not any(axes != "dp" for _, axes in coll):
            print("  the plan has no collective over a tensor-parallel axis  MISMATCH")
            ok = False
        try:
            out, dt = c.run(plan, ranks, c.inputs, name)
        except u.ToolError as e:
            print(f"  {e}  MISMATCH")
            rows.append((m, name, ranks, "RUN FAILED", str(e).splitlines()[0]))
            ok = False
            continue
        errs = relative_errors(ref_dir, out)
        worst = max(errs.values())
        good = worst <= TOL
        for o, e in errs.items():
            print(f"  {o}: max|Δ| / max|one rank| = {e:.2e} (tolerance {TOL:g})" + ("" if e <= TOL else "  MISMATCH"))
        rows.append((m, name, ranks, f"{worst:.1e}" + ("" if good else " MISMATCH"), f"{dt:.1f} s"))
        ok &= good

    if m == "gpt2" and "tp2" in args.configs.split(","):
        ok &= check_token_ids(c, one)

    print("\n| model | config | ranks | max relative error | |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    cells = {r[1]: (r[3] if r[3] != "compile error" else "error") for r in rows}
    print("\nmatrix row: | " + m + " | " + " | ".join(cells.get(n, "") for n in CONFIGS) + " |")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def check_token_ids(c, one):
    """The vocab-parallel embedding reads token ids as one rank's gather does (found by a QA
    pass: it used to give rows of zeros): negative ids count from the end, and an id outside
    [-V, V) is a run-time error on every layout, with no output written."""
    ok = True
    tp2 = c.path("tp2.cplan")
    vocab = 64
    ids = np.load(c.inputs["input_ids"]).copy()
    ids[0, :3] = [-1, -vocab, -5]
    np.save(c.path("neg_ids.npy"), ids)
    ref, _ = c.run(one, 1, {"input_ids": c.path("neg_ids.npy")}, "neg_one")
    got, _ = c.run(tp2, 2, {"input_ids": c.path("neg_ids.npy")}, "neg_tp2")
    worst = max(relative_errors(ref, got).values())
    good = worst <= TOL
    print(f"negative token ids, tp2 vs one rank: {worst:.2e}" + ("" if good else "  MISMATCH"))
    ok &= good
    for bad in (vocab, -vocab - 1):
        ids = np.load(c.inputs["input_ids"]).copy()
        ids[1, 2] = bad
        np.save(c.path("bad_ids.npy"), ids)
        for plan, ranks in ((one, 1), (tp2, 2)):
            try:
                c.run(plan, ranks, {"input_ids": c.path("bad_ids.npy")}, "bad")
                failed, msg = False, ""
            except u.ToolError as e:
                failed, msg = True, str(e)
            good = failed and "out of range" in msg and not os.path.exists(c.path("bad_out"))
            print(f"token id {bad} on {ranks} rank(s): " + ("error, no output" if good else "MISMATCH\n" + msg))
            ok &= good
    return ok


if __name__ == "__main__":
    sys.exit(main())

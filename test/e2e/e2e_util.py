"""Shared helpers of the end-to-end scripts: finding the tools, running them, comparing outputs.

Tools are found, in order: an explicit path (--opt/--run), $COLOSSAL_OPT / $COLOSSAL_RUN,
<repo>/build/bin/, <repo>/build-rt/bin/ (colossal-run only), then $PATH. onnxruntime runs through
test/e2e/ort_reference.js with `node` ($NODE overrides).
"""
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ORT_REFERENCE_JS = os.path.join(HERE, "ort_reference.js")
EXPORT_PY = os.path.join(REPO, "examples", "models", "export.py")
SKIP = 77  # ctest SKIP_RETURN_CODE


class ToolError(Exception):
    """A tool failed or is missing; the message says which and why."""


def find_tool(name, explicit=None):
    env = {"colossal-opt": "COLOSSAL_OPT", "colossal-run": "COLOSSAL_RUN"}[name]
    candidates = [explicit, os.environ.get(env), os.path.join(REPO, "build", "bin", name)]
    if name == "colossal-run":
        candidates.append(os.path.join(REPO, "build-rt", "bin", name))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
        if c and c == explicit:
            raise ToolError(f"{name}: '{c}' is not an executable file")
    found = shutil.which(name)
    if found:
        return found
    raise ToolError(f"{name} not found: pass --{name.split('-')[1]} PATH, set ${env}, or build it into build/bin")


def run(cmd, what, timeout=None, quiet=False):
    """Runs CMD (a list); raises ToolError with its stderr tail on failure. Returns (stdout, stderr, seconds)."""
    if not quiet:
        print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise ToolError(f"{what}: cannot start {cmd[0]}: {e}")
    except subprocess.TimeoutExpired:
        raise ToolError(f"{what}: timed out after {timeout} s: {' '.join(cmd)}")
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-30:])
        sig = f" (signal {-p.returncode})" if p.returncode < 0 else ""
        raise ToolError(f"{what} failed with exit code {p.returncode}{sig}:\n{tail}")
    return p.stdout, p.stderr, dt


def compile_plan(opt, model, spec, plan, quiet=False):
    if os.path.exists(plan):
        os.remove(plan)
    _, err, dt = run([opt, model, "--spec", spec, "-o", plan], "colossal-opt", timeout=600, quiet=quiet)
    if not os.path.isfile(plan):
        raise ToolError(f"colossal-opt exited 0 but wrote no plan {plan}\n{err}")
    return dt


def input_args(inputs):
    """{name: file} -> ['--input', 'name=file', ...]"""
    args = []
    for name, f in sorted(inputs.items()):
        args += ["--input", f"{name}={f}"]
    return args


def run_plan(run_bin, plan, inputs, out_dir, threads=None, quiet=False):
    shutil.rmtree(out_dir, ignore_errors=True)  # never compare against a previous run's files
    cmd = [run_bin, plan] + input_args(inputs) + ["--output-dir", out_dir]
    if threads:
        cmd += ["--threads", str(threads)]
    _, _, dt = run(cmd, "colossal-run", timeout=600, quiet=quiet)
    return dt


def run_ort(model, inputs, out_dir, threads=None, quiet=False):
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [os.environ.get("NODE", "node"), ORT_REFERENCE_JS, model] + input_args(inputs) + ["--output-dir", out_dir]
    if threads:
        cmd += ["--threads", str(threads)]
    _, _, dt = run(cmd, "onnxruntime (ort_reference.js)", timeout=600, quiet=quiet)
    return dt


def tensor_file_name(name, suffix=".npy"):
    """The file colossal-run writes tensor NAME to (runtime/TensorFileName.h, docs/cli.md "Output
    files"): bytes other than [A-Za-z0-9_-] and a non-leading '.' as %XX; past 255 bytes, a prefix,
    '~' and 16 hex digits of SHA-256(name)."""
    raw = name.encode("utf-8")
    esc = "".join(chr(b) if (chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_-" or (b == 0x2E and i)))
                  else "%%%02X" % b for i, b in enumerate(raw)) or "%"
    if len(esc) + len(suffix) <= 255:
        return esc + suffix
    tag = "~" + hashlib.sha256(raw).hexdigest()[:16]
    keep = 255 - len(suffix) - len(tag)
    if esc[keep - 1] == "%":
        keep -= 1
    elif esc[keep - 2] == "%":
        keep -= 2
    return esc[:keep] + tag + suffix


def npy_dir(d):
    """{name: path} of the .npy files in D."""
    return {os.path.splitext(os.path.basename(f))[0]: f for f in sorted(glob.glob(os.path.join(d, "*.npy")))}


def compare(reference, actual_dir, tol, label="colossal", check_extra=True):
    """Compares every reference output {name: file} with ACTUAL_DIR/name.npy.

    Passes when shapes and dtypes match and max|actual - ref| <= tol * max|ref| (and both are finite
    where the reference is). Prints one line per output; returns True when all pass.
    """
    ok = True
    actual = npy_dir(actual_dir) if os.path.isdir(actual_dir) else {}
    for name, ref_file in sorted(reference.items()):
        ref = np.load(ref_file)
        if name not in actual:
            print(f"  {name}: MISSING from {actual_dir}")
            ok = False
            continue
        got = np.load(actual[name])
        head = f"  {name} {list(ref.shape)} {ref.dtype}"
        if got.shape != ref.shape or got.dtype != ref.dtype:
            print(f"{head}: {label} gave {list(got.shape)} {got.dtype}  MISMATCH")
            ok = False
            continue
        if ref.dtype.kind in "fc":
            scale = float(np.max(np.abs(ref))) if ref.size else 0.0
            bad = ~np.isfinite(got) & np.isfinite(ref)
            err = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
            if bad.any():
                err = float("inf")
            limit = tol * max(scale, 1e-30)
            passed = err <= limit
            where = ""
            if not passed and ref.size:
                diff = np.abs(got.astype(np.float64) - ref)
                diff[bad] = np.inf
                idx = np.unravel_index(int(np.argmax(diff)), ref.shape)
                where = f" worst at {list(map(int, idx))}: {label} {got[idx]!r} vs ref {ref[idx]!r}"
            print(f"{head}: max|err| {err:.3e}  max|ref| {scale:.3e}  rel {err / max(scale, 1e-30):.3e}  "
                  f"(tol {tol:g})  {'ok' if passed else 'MISMATCH'}{where}")
        else:
            n_bad = int(np.count_nonzero(got != ref))
            passed = n_bad == 0
            print(f"{head}: {n_bad} differing elements  {'ok' if passed else 'MISMATCH'}")
        ok &= passed
    if check_extra:
        for name in sorted(set(actual) - set(reference)):
            print(f"  {name}: {label} wrote an output the reference does not have  MISMATCH")
            ok = False
    return ok


def die(msg, code=2):
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def case_main(doc, cases, threads=1, steps=20, threads_help=None, steps_help=None, shared_default=None):
    """The `main` of an e2e script made of cases: --case NAME --workdir W [--opt --run --shared-dir
    --threads --steps]; runs cases[NAME](args), prints PASS or FAIL and exits 0 (pass), 1 (a
    mismatch) or 2 (a tool failed: ToolError)."""
    import argparse
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", required=True, choices=sorted(cases))
    p.add_argument("--workdir", required=True)
    p.add_argument("--opt")
    p.add_argument("--run")
    p.add_argument("--shared-dir", default=(os.environ.get("COLOSSAL_SHARED_DIR", os.path.join(REPO, "..", "shared"))
                                            if shared_default is None else shared_default))
    p.add_argument("--threads", type=int, default=threads, help=threads_help)
    p.add_argument("--steps", type=int, default=steps, help=steps_help)
    args = p.parse_args()
    try:
        ok = cases[args.case](args)
    except ToolError as e:
        die(str(e), 2)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)

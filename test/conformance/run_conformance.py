#!/usr/bin/python3
"""ONNX backend conformance: the ONNX project's own test cases through colossal-opt + colossal-run.

Debian's libonnx-testdata installs the ONNX backend tests under
/usr/share/libonnx-testdata/data/{node,pytorch-converted,pytorch-operator,simple}/<test>/ with
model.onnx and test_data_set_*/{input,output}_N.pb (serialized TensorProto). For every test this
script, in a pool of -j workers:

  1. binds every tensor graph input with the spec's `inputs` (shape from input_N.pb), except inputs
     with a zero-size dimension, which `inputs` cannot express: those are bound with `values`;
  2. compiles with colossal-opt. When the compiler answers "... must be a compile-time constant"
     naming a graph input, that input is bound with the spec's `values` instead (its .pb written as
     .npy) and the compile is retried; when the named tensor is not a graph input, every integer-typed
     input and every input from which a shape operand (Reshape's shape, Slice's starts, ...) is
     computed is bound at once (the "fallback"). Deterministic: same model, same bindings.
  3. runs colossal-run on the remaining inputs and compares each output with output_N.pb using the
     ONNX backend tolerances: floats |got - ref| <= atol + rtol * |ref| (rtol 1e-3, atol 1e-7), NaN
     where the reference is NaN, infinities exact; integers and bool exact; shapes and dtypes must
     match (bfloat16 travels as float32 in .npy, float16 as <f2).

Each test ends as
  PASS         every output matches
  FAIL         wrong numbers, shape or dtype, or a missing output (a bug)
  UNSUPPORTED  colossal-opt or colossal-run exited 1 with exactly one clean `error: ...` line
  CRASH        a signal, another exit status, assertion text or no clean diagnostic (a bug)
  TIMEOUT      the test ran past --timeout seconds (its process group is killed; a bug)

Modes:
  run_conformance.py                 run and print the summary (exit 0)
  run_conformance.py --check         also exit 1 if a test in expected_pass.txt does not pass
                                     (a regression); newly passing tests are printed
  run_conformance.py --update        rewrite expected_pass.txt and docs/onnx-coverage.md; refuses to
                                     drop a test from the list unless --force is given
Other options: --suite node (repeatable), --filter REGEX, -j N, --timeout S, --report FILE (write the
coverage markdown there in any mode), --json FILE (per-test results), --keep (keep the work files),
--workdir DIR, --opt/--run PATH (default: build/bin of this checkout, or $COLOSSAL_OPT/$COLOSSAL_RUN),
--data-dir DIR (default /usr/share/libonnx-testdata/data), -v (print every non-passing test).
Exit 77 (ctest: skipped) when the test data directory is absent.
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import onnx
    from onnx import numpy_helper
except ImportError:  # pragma: no cover
    print("run_conformance.py needs the onnx Python package (/usr/bin/python3 with python3-onnx)",
          file=sys.stderr)
    sys.exit(2)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
from e2e_util import tensor_file_name  # noqa: E402  (colossal-run's output file names)
DEFAULT_DATA = "/usr/share/libonnx-testdata/data"
DEFAULT_EXPECTED = os.path.join(HERE, "expected_pass.txt")
DEFAULT_DOC = os.path.join(ROOT, "docs", "onnx-coverage.md")
SKIP = 77
RTOL, ATOL = 1e-3, 1e-7
STATUSES = ("PASS", "FAIL", "DIVERGES", "UNSUPPORTED", "CRASH", "TIMEOUT")
CONST_DIAG = "must be a compile-time constant"

# ONNX TensorProto.DataType -> the numpy dtype of its .npy (bfloat16 travels as float32).
NPY_DTYPE = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
    9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64, 16: np.float32,
}
INTEGER_TYPES = {2, 3, 4, 5, 6, 7, 12, 13}
BFLOAT16 = 16

# Input positions that are shape operands (the compiler needs them as compile-time constants).
SHAPE_OPERANDS = {
    "Reshape": [1], "Slice": [1, 2, 3, 4], "Expand": [1], "Tile": [1], "Upsample": [1],
    "Resize": [1, 2, 3], "TopK": [1], "Pad": [1, 2, 3], "Split": [1], "Squeeze": [1],
    "Unsqueeze": [1], "ConstantOfShape": [0], "Range": [0, 1, 2], "OneHot": [1], "Clip": [1, 2],
    "CumSum": [1], "Trilu": [1], "CenterCropPad": [1], "Col2Im": [1, 2], "DFT": [1, 2],
    "STFT": [1, 3], "BlackmanWindow": [0], "HammingWindow": [0], "HannWindow": [0],
    "MelWeightMatrix": [0, 1, 2, 3, 4], "Loop": [0, 1], "If": [0], "SplitToSequence": [1],
    "MaxUnpool": [2], "AffineGrid": [1], "Dropout": [1, 2], "NonMaxSuppression": [2, 3, 4],
    "Compress": [1], "ReduceSum": [1], "ReduceMean": [1], "ReduceMax": [1], "ReduceMin": [1],
    "ReduceProd": [1], "ReduceL1": [1], "ReduceL2": [1], "ReduceLogSum": [1],
    "ReduceLogSumExp": [1], "ReduceSumSquare": [1],
}
# Ops whose outputs depend only on the shape of their input: the backward walk stops there.
SHAPE_ONLY = {"Shape", "Size"}


def die(msg, code=2):
    print(f"run_conformance.py: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------------------------
# Model inspection


def iter_nodes(graph):
    """Every node of the graph and of its subgraphs (If/Loop/Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_nodes(g)


def op_name(node):
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def shape_operand_inputs(graph, input_names):
    """Graph inputs from which a shape operand is computed (stopping at Shape/Size)."""
    producer = {}
    for node in iter_nodes(graph):
        for out in node.output:
            if out:
                producer[out] = node
    todo = []
    for node in iter_nodes(graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        for i in SHAPE_OPERANDS.get(node.op_type, []):
            if i < len(node.input) and node.input[i]:
                todo.append(node.input[i])
    seen, found = set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in input_names:
            found.add(name)
        node = producer.get(name)
        if node is not None and node.op_type not in SHAPE_ONLY:
            todo.extend(n for n in node.input if n)
    return found


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    a = numpy_helper.to_array(t)
    if t.data_type == BFLOAT16:  # onnx 1.12 returns the raw bits as uint16
        a = (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    elif a.dtype == object:
        a = a.astype(np.str_)
    return t.data_type, a


# ----------------------------------------------------------------------------------------------
# Processes


class Deadline(Exception):
    pass


def run_proc(cmd, deadline, cwd):
    """Runs cmd in its own process group; kills the group when the deadline passes."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise Deadline()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate()
        raise Deadline()
    return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


CRASH_MARKERS = ("Assertion", "LLVM ERROR", "PLEASE submit", "Stack dump", "UNREACHABLE",
                 "Segmentation fault", "terminate called", "Aborted", "AddressSanitizer")


def classify_failure(tool, rc, err, test_dir, work):
    """(status, message) for a tool that exited non-zero."""
    text = err.replace(test_dir + "/", "").replace(work + "/", "")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    first = lines[0].strip() if lines else "(no output on stderr)"
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        return "CRASH", f"{tool}: killed by {sig}: {first}"
    if (rc == 1 and len(lines) == 1 and lines[0].startswith("error: ")
            and not any(m in text for m in CRASH_MARKERS)):
        return "UNSUPPORTED", f"{tool}: {first}"
    why = f"exit {rc}" if rc != 1 else ("no clean diagnostic" if len(lines) != 1
                                        or not lines[0].startswith("error: ") else "crash text")
    return "CRASH", f"{tool}: {why} ({len(lines)} lines): {first}"


# ----------------------------------------------------------------------------------------------
# Comparison


def compare(name, got, ref, elem_type):
    """None when got matches ref, else a one-line reason."""
    want = NPY_DTYPE.get(elem_type)
    if want is None:
        if elem_type == 8:  # string
            if got.dtype.kind not in "US" or got.shape != ref.shape or not np.array_equal(
                    got.astype(np.str_), ref):
                return f"output '{name}': string output differs (dtype {got.dtype})"
            return None
        return f"output '{name}': ONNX element type {elem_type} has no .npy form"
    if got.dtype != np.dtype(want):
        return f"output '{name}': dtype {got.dtype}, expected {np.dtype(want)}"
    if got.shape != ref.shape:
        return f"output '{name}': shape {list(got.shape)}, expected {list(ref.shape)}"
    if got.size == 0:
        return None
    if got.dtype.kind == "f":
        g = got.astype(np.float64)
        r = ref.astype(np.float64)
        rnan = np.isnan(r)
        rinf = np.isinf(r)
        fin = ~(rnan | rinf)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = np.zeros(g.shape, dtype=bool)
            bad |= rnan & ~np.isnan(g)
            bad |= rinf & (g != r)
            bad |= fin & ~(np.abs(g - r) <= ATOL + RTOL * np.abs(r))  # NaN in g fails here too
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            with np.errstate(invalid="ignore", over="ignore"):
                err = np.abs(g - r)[fin]
                err = err[~np.isnan(err)]
                maxerr = float(err.max()) if err.size else float("nan")
            return (f"output '{name}': {int(bad.sum())}/{bad.size} elements differ, max abs err "
                    f"{maxerr:.4g}; first at {list(idx)}: got {g[idx]!r}, expected {r[idx]!r}")
        return None
    if not np.array_equal(got, ref):
        bad = got != ref
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return (f"output '{name}': {int(bad.sum())}/{bad.size} elements differ; first at "
                f"{list(idx)}: got {got[idx]!r}, expected {ref[idx]!r}")
    return None


# ----------------------------------------------------------------------------------------------
# One test


def yaml_str(s):
    return json.dumps(s)  # a JSON string is a YAML double-quoted scalar


def write_spec(path, shapes, values):
    lines = ["mode: inference"]
    lines.append("inputs: {" + ", ".join(f"{yaml_str(n)}: [{', '.join(str(d) for d in s)}]"
                                         for n, s in shapes) + "}")
    if values:
        lines.append("values: {" + ", ".join(f"{yaml_str(n)}: {yaml_str(p)}" for n, p in values)
                     + "}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def load_known_divergences():
    """known_divergences.txt: `suite/test  reason` lines — tests whose reference data encodes
    behaviour that later ONNX versions changed and that Colossal deliberately does not follow.
    Such a test is reported as DIVERGES (with the reason) instead of FAIL; it never counts as a pass."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known_divergences.txt")
    out = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                out[name] = reason.strip()
    return out


KNOWN_DIVERGENCES = load_known_divergences()


def run_test(suite, test_dir, args):
    name = f"{suite}/{os.path.basename(test_dir)}"
    t0 = time.monotonic()
    res = {"test": name, "ops": [], "status": None, "message": "", "bound": []}
    try:
        model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    except Exception as e:  # noqa: BLE001
        res.update(status="CRASH", message=f"harness: cannot load model.onnx: {e}")
        return res
    res["ops"] = sorted({op_name(n) for n in iter_nodes(model.graph)})
    work = os.path.join(args.workdir, suite, os.path.basename(test_dir))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    deadline = t0 + args.timeout
    try:
        status, msg, bound = check_test(model, test_dir, work, deadline, args)
    except Deadline:
        status, msg, bound = "TIMEOUT", f"timed out after {args.timeout:g} s", []
    if status == "FAIL" and name in KNOWN_DIVERGENCES:
        status, msg = "DIVERGES", f"{KNOWN_DIVERGENCES[name]} [{msg}]"
    res.update(status=status, message=msg, bound=bound, seconds=round(time.monotonic() - t0, 3))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return res


def check_test(model, test_dir, work, deadline, args):
    g = model.graph
    inits = {t.name for t in g.initializer}
    ginputs = [i for i in g.input if i.name not in inits]
    input_names = {i.name for i in ginputs}
    is_tensor = {i.name: i.type.HasField("tensor_type") for i in ginputs}
    elem = {i.name: i.type.tensor_type.elem_type for i in ginputs if is_tensor[i.name]}
    sets = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    if not sets:
        return "CRASH", "harness: no test_data_set_* directory", []
    all_bound = []
    for k, ds in enumerate(sets):
        dpath = os.path.join(test_dir, ds)
        sw = os.path.join(work, ds)
        os.makedirs(sw)
        # Inputs: input_N.pb <-> N-th non-initializer graph input.
        arrays = {}
        for n, gi in enumerate(ginputs):
            pb = os.path.join(dpath, f"input_{n}.pb")
            if not os.path.exists(pb) or not is_tensor[gi.name]:
                continue  # absent optional input, or a sequence/optional: left unbound
            _, a = read_tensor(pb)
            path = os.path.join(sw, f"input_{n}.npy")
            np.save(path, a)
            arrays[gi.name] = (a, path)
        fallback = {n for n in arrays if elem.get(n) in INTEGER_TYPES}
        fallback |= shape_operand_inputs(g, set(arrays))
        # The spec's `inputs` cannot express a zero-size dimension: such inputs start as values.
        values, used_fallback = [n for n in arrays if 0 in arrays[n][0].shape], False
        plan = os.path.join(sw, "model.cplan")
        spec = os.path.join(sw, "spec.yaml")
        while True:
            vals = set(values)
            write_spec(spec, [(n, arrays[n][0].shape) for n in arrays if n not in vals],
                       [(n, arrays[n][1]) for n in values])
            rc, _, err = run_proc([args.opt, os.path.join(test_dir, "model.onnx"), "--spec", spec,
                                   "-o", plan], deadline, sw)
            if rc == 0:
                break
            if rc == 1 and CONST_DIAG in err:
                m = re.search(r"input \d+ \([^,]*, '([^']*)'\) " + CONST_DIAG, err)
                named = m.group(1) if m else None
                if named in arrays and named not in vals:
                    values.append(named)
                    continue
                if not used_fallback and fallback - vals:
                    used_fallback = True
                    values.extend(sorted(fallback - vals))
                    continue
            status, msg = classify_failure("colossal-opt", rc, err, test_dir, work)
            return status, msg, values
        all_bound = values
        out_dir = os.path.join(sw, "out")
        cmd = [args.run, plan, "--output-dir", out_dir, "--threads", str(args.threads)]
        for n in arrays:
            if n not in vals:
                cmd += ["--input", f"{n}={arrays[n][1]}"]
        rc, _, err = run_proc(cmd, deadline, sw)
        if rc != 0:
            status, msg = classify_failure("colossal-run", rc, err, test_dir, work)
            return status, msg, values
        for n, go in enumerate(g.output):
            pb = os.path.join(dpath, f"output_{n}.pb")
            if not go.type.HasField("tensor_type"):
                return "FAIL", f"output '{go.name}' is not a tensor, yet the model compiled", values
            if not os.path.exists(pb):
                continue
            et, ref = read_tensor(pb)
            f = os.path.join(out_dir, tensor_file_name(go.name))
            if not os.path.exists(f):
                return "FAIL", f"output '{go.name}': colossal-run wrote no {os.path.basename(f)}", values
            try:
                got = np.load(f, allow_pickle=False)
            except Exception as e:  # noqa: BLE001
                return "FAIL", f"output '{go.name}': unreadable .npy: {e}", values
            why = compare(go.name, got, ref, et)
            if why:
                if len(sets) > 1:
                    why = f"{ds}: {why}"
                return "FAIL", why, values
    if any(not is_tensor[i.name] for i in ginputs):
        return "FAIL", "a model with non-tensor inputs compiled and ran (inputs left unbound)", []
    return "PASS", "", all_bound


# ----------------------------------------------------------------------------------------------
# Reports


def doc_text(results, command, data_dir):
    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    n = len(results)
    out = []
    w = out.append
    w("# ONNX backend conformance")
    w("")
    w("<!-- GENERATED by test/conformance/run_conformance.py; do not edit by hand. -->")
    w("This file is **generated** by the conformance harness; do not edit it by hand. Regenerate with:")
    w("")
    w("<!-- docs-test: skip long -->")  # the whole suite, and it rewrites this file (test/docs)
    w("```sh")
    w(command)
    w("```")
    w("")
    w(f"Test data: the ONNX backend tests of Debian's `libonnx-testdata` ({data_version()}) in "
      f"`{data_dir}`; suites: {', '.join(sorted({r['test'].split('/')[0] for r in results}))}. "
      "Each test is compiled for one rank with `colossal-opt` and run with `colossal-run`; outputs "
      f"are compared with ONNX's backend tolerances (floats rtol {RTOL:g}, atol {ATOL:g}; "
      "integers and bool exact). See `test/conformance/run_conformance.py` for the rules.")
    w("")
    w("## Totals")
    w("")
    w("| status | tests | meaning |")
    w("|---|---:|---|")
    meaning = {
        "PASS": "every output matches the reference",
        "FAIL": "wrong numbers, shape or dtype (a bug)",
        "DIVERGES": "differs from outdated reference data on purpose (test/conformance/known_divergences.txt)",
        "UNSUPPORTED": "one clean `error:` diagnostic (op, attribute or dtype not supported yet)",
        "CRASH": "signal, unexpected exit status or no clean diagnostic (a bug)",
        "TIMEOUT": "ran past the per-test timeout (a bug)",
    }
    for s in STATUSES:
        w(f"| {s} | {counts[s]} | {meaning[s]} |")
    w(f"| total | {n} | |")
    w("")
    w("## Per operator")
    w("")
    w("A test counts for **every** operator type that appears in its model (subgraphs included), so "
      "an `_expanded` test (a function body spelled out in primitive ops) counts for each op it uses, "
      "and one failing test can show under several operators. Status: *supported* = every test "
      "using the op passes; *partial* = some pass; *unsupported* = none passes.")
    w("")
    w("| op | tests | pass | fail | diverges | unsupported | crash | timeout | status |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    per_op = {}
    for r in results:
        for op in r["ops"]:
            per_op.setdefault(op, {s: 0 for s in STATUSES})[r["status"]] += 1
    for op in sorted(per_op, key=str.lower):
        c = per_op[op]
        tot = sum(c.values())
        st = "supported" if c["PASS"] == tot else ("partial" if c["PASS"] else "unsupported")
        w(f"| {op} | {tot} | {c['PASS']} | {c['FAIL']} | {c['DIVERGES']} | {c['UNSUPPORTED']} | {c['CRASH']} | "
          f"{c['TIMEOUT']} | {st} |")
    w("")
    bad = [r for r in results if r["status"] in ("FAIL", "DIVERGES", "CRASH", "TIMEOUT")]
    w(f"## Failing, diverging, crashing and timed-out tests ({len(bad)})")
    w("")
    if bad:
        w("| test | status | first line of the error |")
        w("|---|---|---|")
        for r in sorted(bad, key=lambda r: r["test"]):
            w(f"| {r['test']} | {r['status']} | {md_cell(r['message'])} |")
    else:
        w("None.")
    w("")
    uns = [r for r in results if r["status"] == "UNSUPPORTED"]
    w(f"## Unsupported tests by diagnostic")
    w("")
    w("The diagnostics of the unsupported tests with node and tensor names removed, most frequent "
      "first: what to implement next.")
    w("")
    groups = {}
    for r in uns:
        groups.setdefault(reason_key(r["message"]), []).append(r["test"].split("/", 1)[1])
    w("| tests | diagnostic | examples |")
    w("|---:|---|---|")
    for key, ts in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        ex = ", ".join(sorted(ts)[:3]) + (", ..." if len(ts) > 3 else "")
        w(f"| {len(ts)} | {md_cell(key)} | {ex} |")
    w("")
    w(f"## Unsupported tests ({len(uns)})")
    w("")
    if uns:
        w("| test | diagnostic |")
        w("|---|---|")
        for r in sorted(uns, key=lambda r: r["test"]):
            w(f"| {r['test']} | {md_cell(r['message'])} |")
    else:
        w("None.")
    w("")
    return "\n".join(out)


def reason_key(msg):
    """A diagnostic without the names of nodes, tensors and files, for grouping."""
    m = re.sub(r"node '[^']*'", "node", msg)
    m = re.sub(r"input '[^']*'", "input", m)
    m = re.sub(r"\((\w+), opset \d+\)", r"(\1)", m)
    m = re.sub(r"output '[^']*'", "output", m)
    m = re.sub(r"inputs\.[^:]*:", "inputs.NAME:", m)
    m = re.sub(r"instruction \d+ \(([\w.]+) at [^)]*\)\)", r"instruction (\1)", m)
    m = re.sub(r"\S*(model\.onnx|model\.cplan|spec\.yaml)(:\d+:\d+)?", r"\1", m)
    return m


def md_cell(s):
    s = s.splitlines()[0] if s else ""
    if len(s) > 300:
        s = s[:297] + "..."
    return s.replace("|", "\\|")


def data_version():
    try:
        v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libonnx-testdata"],
                           capture_output=True, text=True, timeout=10).stdout.strip()
        return f"version {v}" if v else "version unknown"
    except Exception:  # noqa: BLE001
        return "version unknown"


def read_expected(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


# ----------------------------------------------------------------------------------------------


def find_tool(explicit, env, name):
    if explicit:
        return os.path.abspath(explicit)
    if os.environ.get(env):
        return os.environ[env]
    p = os.path.join(ROOT, "build", "bin", name)
    if os.path.exists(p):
        return p
    return shutil.which(name) or p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=DEFAULT_DATA)
    ap.add_argument("--suite", action="append", help="node (default), pytorch-converted, ...")
    ap.add_argument("--filter", help="only tests whose SUITE/NAME matches this regex (re.search)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per test (default 60)")
    ap.add_argument("--threads", type=int, default=1, help="colossal-run --threads (default 1)")
    ap.add_argument("--opt")
    ap.add_argument("--run")
    ap.add_argument("--workdir", help="work files (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep each test's work files")
    ap.add_argument("--expected", default=DEFAULT_EXPECTED)
    ap.add_argument("--doc", default=DEFAULT_DOC, help="where --update writes the coverage doc")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--force", action="store_true", help="let --update drop tests from the list")
    ap.add_argument("--report", help="also write the coverage markdown here")
    ap.add_argument("--json", help="write per-test results here")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    suites = args.suite or ["node"]
    if args.update and args.filter:
        die("--update needs the whole suite; drop --filter")

    if not os.path.isdir(args.data_dir):
        print(f"skipped: ONNX test data {args.data_dir} is absent (install libonnx-testdata)")
        sys.exit(SKIP)
    args.opt = find_tool(args.opt, "COLOSSAL_OPT", "colossal-opt")
    args.run = find_tool(args.run, "COLOSSAL_RUN", "colossal-run")
    for t in (args.opt, args.run):
        if not os.access(t, os.X_OK):
            die(f"{t} is not an executable (build first, or pass --opt/--run)")

    tests = []
    for s in suites:
        d = os.path.join(args.data_dir, s)
        if not os.path.isdir(d):
            die(f"no suite {s} in {args.data_dir}")
        for t in sorted(os.listdir(d)):
            if os.path.exists(os.path.join(d, t, "model.onnx")):
                if not args.filter or re.search(args.filter, f"{s}/{t}"):
                    tests.append((s, os.path.join(d, t)))
    if not tests:
        die("no tests selected")

    tmp = None
    if not args.workdir:
        tmp = tempfile.mkdtemp(prefix="colossal-conformance-")
        args.workdir = tmp
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)

    t0 = time.monotonic()
    results = []
    with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = [ex.submit(run_test, s, d, args) for s, d in tests]
        for i, f in enumerate(cf.as_completed(futs), 1):
            r = f.result()
            results.append(r)
            if args.verbose and r["status"] != "PASS":
                print(f"{r['status']:11} {r['test']}: {r['message']}", flush=True)
            elif sys.stderr.isatty():
                print(f"\r[{i}/{len(tests)}]", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty() and not args.verbose:
        print(file=sys.stderr)
    wall = time.monotonic() - t0
    results.sort(key=lambda r: r["test"])
    if tmp and not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)

    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    print(f"{len(results)} tests in {wall:.1f} s (-j {args.jobs}): "
          + ", ".join(f"{counts[s]} {s.lower()}" for s in STATUSES))
    for r in results:
        if r["status"] in ("FAIL", "CRASH", "TIMEOUT"):
            print(f"  {r['status']:8} {r['test']}: {r['message']}")
    slow = sorted((r for r in results if "seconds" in r), key=lambda r: -r["seconds"])[:5]
    print("slowest: " + ", ".join(f"{r['test']} {r['seconds']:.2f} s" for r in slow))

    command = "/usr/bin/python3 test/conformance/run_conformance.py --update" + (
        "".join(f" --suite {s}" for s in suites) if suites != ["node"] else "")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.report:
        with open(args.report, "w") as f:
            f.write(doc_text(results, command, args.data_dir))

    passed = {r["test"] for r in results if r["status"] == "PASS"}
    ran = {r["test"] for r in results}
    expected = [t for t in read_expected(args.expected) if t in ran]
    regressions = [t for t in expected if t not in passed]
    new = sorted(passed - set(expected))
    status_of = {r["test"]: r for r in results}
    if regressions:
        print(f"{len(regressions)} test(s) in {os.path.relpath(args.expected)} no longer pass:")
        for t in regressions:
            print(f"  REGRESSION {t}: {status_of[t]['status']}: {status_of[t]['message']}")
    if new:
        print(f"{len(new)} test(s) pass that {os.path.relpath(args.expected)} does not list "
              "(run with --update to add them):")
        for t in new:
            print(f"  NEW PASS {t}")

    if args.update:
        if regressions and not args.force:
            die("refusing to drop tests from the expectation list (fix them, or pass --force)", 1)
        keep = [t for t in read_expected(args.expected) if t not in ran]  # other suites
        with open(args.expected, "w") as f:
            f.write("# Tests that pass; generated by run_conformance.py --update. "
                    "`--check` fails when one of them stops passing.\n")
            for t in sorted(set(keep) | passed):
                f.write(t + "\n")
        with open(args.doc, "w") as f:
            f.write(doc_text(results, command, args.data_dir))
        print(f"wrote {os.path.relpath(args.expected)} ({len(set(keep) | passed)} tests) and "
              f"{os.path.relpath(args.doc)}")
    if args.check and regressions:
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Proves that tests which cannot run are reported Skipped by ctest, never Passed (e2e.skips).

    check_skips.py --build BUILD --python COLOSSAL_PYTHON --shared-dir COLOSSAL_SHARED_DIR --workdir W

Reads the registered tests from `ctest --show-only=json-v1` and writes a ctest project in W whose
tests are copies of them with one input taken away, then runs ctest on it and requires every copy
to come out as Skipped:

  <name>.no_shared   every test labelled `shared`, with COLOSSAL_SHARED_DIR replaced by an empty
                     folder (the test scripts must notice and exit 77)
  <name>.no_python   every test started through test/e2e/require.py, with COLOSSAL_PYTHON replaced
                     by a Python without numpy, torch and onnx (a venv without site packages): its
                     NEEDS must name what its script imports
  <name>.no_ort      every test that NEEDS ort, with $NODE naming a program that does not exist
  PyTorchReference   the unit tests with a PyTorch reference (OptimKernelsTest.cpp), with
                     $COLOSSAL_PYTHON the same bare Python (GTEST_SKIP, ctest's skip regex)

Each copy keeps the original's SKIP_RETURN_CODE, SKIP_REGULAR_EXPRESSION and ENVIRONMENT; its
--workdir/--work/--out point into W. A copy that passes or fails is a test that would pass or fail
where it cannot run. Exit 0 when all copies are Skipped, 1 otherwise, 77 when no bare Python can be
made (python -m venv is missing).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
OUTPUT_FLAGS = {"--workdir", "--work", "--out"}


def ctest_tests(build):
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], stdout=subprocess.PIPE,
                         check=True, text=True).stdout
    tests = []
    for t in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        tests.append((t["name"], t.get("command", []), props))
    return tests


def bare_python(workdir, python):
    """A venv of PYTHON without site packages: no numpy, torch or onnx."""
    venv = os.path.join(workdir, "bare-python")
    shutil.rmtree(venv, ignore_errors=True)
    p = subprocess.run([python, "-m", "venv", "--without-pip", venv], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    exe = os.path.join(venv, "bin", "python")
    if p.returncode != 0 or not os.path.isfile(exe):
        return None, p.stdout.strip()
    probe = subprocess.run([exe, "-c", "import numpy"], capture_output=True)
    if probe.returncode == 0:
        return None, f"{exe} imports numpy: not a bare Python"
    return exe, ""


def retarget_outputs(cmd, folder):
    """The command with the values of --workdir/--work/--out moved into FOLDER."""
    out = list(cmd)
    for i, a in enumerate(out[:-1]):
        if a in OUTPUT_FLAGS:
            out[i + 1] = folder
    return out


def cmake_escape(s):
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


def cmake_arg(s):
    """One command argument, quoted (a ';' stays part of it)."""
    return '"' + cmake_escape(s).replace(";", "\\;") + '"'


def cmake_list(v):
    """A property value: a list joined by ';'."""
    return '"' + ";".join(cmake_escape(str(i)) for i in (v if isinstance(v, list) else [v])) + '"'


def write_project(folder, copies):
    """A CTestTestfile.cmake with one test per (name, command, properties)."""
    lines = []
    for name, cmd, props in copies:
        lines.append(f"add_test({cmake_arg(name)} " + " ".join(cmake_arg(a) for a in cmd) + ")")
        kv = [f"{k} {cmake_list(props[k])}" for k in
              ("SKIP_RETURN_CODE", "SKIP_REGULAR_EXPRESSION", "ENVIRONMENT", "WORKING_DIRECTORY", "TIMEOUT")
              if k in props]
        if kv:
            lines.append(f"set_tests_properties({cmake_arg(name)} PROPERTIES " + " ".join(kv) + ")")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "CTestTestfile.cmake"), "w") as f:
        f.write("\n".join(lines) + "\n")


def with_env(props, **extra):
    env = props.get("ENVIRONMENT", [])
    env = [env] if isinstance(env, str) else list(env)
    env = [e for e in env if e.split("=", 1)[0] not in extra] + [f"{k}={v}" for k, v in extra.items()]
    return dict(props, ENVIRONMENT=env)


def labels(props):
    lab = props.get("LABELS", [])
    return [lab] if isinstance(lab, str) else lab


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--python", required=True, help="COLOSSAL_PYTHON of this build")
    ap.add_argument("--shared-dir", required=True, help="COLOSSAL_SHARED_DIR of this build")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    w = os.path.abspath(args.workdir)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    empty = os.path.join(w, "empty-shared")
    os.makedirs(empty)
    bare, why = bare_python(w, args.python)
    if not bare:
        print(f"skipped: cannot make a Python without site packages: {why}")
        return SKIP
    shared = os.path.normpath(args.shared_dir)
    shared_re = re.compile(re.escape(shared) + r"(?=/|$)")

    copies = []
    for name, cmd, props in ctest_tests(args.build):
        if name == "e2e.skips" or not cmd:
            continue
        wrapped = len(cmd) > 2 and cmd[1].endswith("require.py")
        if "shared" in labels(props):
            c = retarget_outputs([shared_re.sub(empty, a) for a in cmd], os.path.join(w, name + ".no_shared"))
            copies.append((name + ".no_shared", c, props))
        if wrapped:
            c = [bare if a == args.python else a for a in cmd]
            copies.append((name + ".no_python", retarget_outputs(c, os.path.join(w, name + ".no_python")), props))
            needs = cmd[cmd.index("--needs") + 1].split(",") if "--needs" in cmd else []
            if "ort" in needs:
                c = retarget_outputs(cmd, os.path.join(w, name + ".no_ort"))
                copies.append((name + ".no_ort", c, with_env(props, NODE=os.path.join(w, "no-such-node"))))
        if name.startswith("PyTorchReference."):
            copies.append((name + ".no_python", cmd, with_env(props, COLOSSAL_PYTHON=bare)))
    if not copies:
        print("error: no test to check (is this the build folder?)")
        return 1

    project = os.path.join(w, "project")
    write_project(project, copies)
    p = subprocess.run(["ctest", "--test-dir", project, "-j2", "--output-on-failure"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    print(p.stdout)
    status = {}
    for m in re.finditer(r"Test\s+#\d+: (\S+) \.*\s*(\*{3}Skipped|Passed|\*{3}Failed|\*{3}\w+|\w[^\n]*?)\s+[\d.]+ sec",
                         p.stdout):
        status[m.group(1)] = m.group(2).strip("*")
    bad = [(n, status.get(n, "not reported")) for n, _, _ in copies if status.get(n) != "Skipped"]
    for n, s in bad:
        print(f"NOT SKIPPED: {n}: {s}")
    print(f"{len(copies) - len(bad)} of {len(copies)} copies reported Skipped"
          + ("" if not bad else f"; {len(bad)} were not: a test that cannot run must exit 77"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

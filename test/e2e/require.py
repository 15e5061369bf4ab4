#!/usr/bin/python3
"""Runs a test command only when what it needs is there; otherwise exits 77 (ctest: Skipped).

    require.py --needs numpy,torch,onnx,ort,mpi,protoc -- COMMAND ARGS...

The ctest registrations (test/e2e, test/gradcheck, test/conformance CMakeLists.txt) state each
test's needs as data, and this wrapper checks them before the test starts, so that a machine
without them reports the test as skipped, never as passed, and never as a failure of the code:

  a Python module name   importable by this interpreter (the one that runs the test scripts,
                         COLOSSAL_PYTHON): numpy, torch, onnx, yaml, ...
  ort                    onnxruntime-node loads in node ($NODE, else `node` on PATH), as
                         test/e2e/ort_reference.js loads it (`ort_reference.js --probe`)
  mpi                    `mpirun` is on PATH
  protoc                 `protoc` is on PATH (tests that read plans with Python protobuf)
  slurm                  `slurmctld`, `slurmd` and `sbatch` are on PATH and this is root
                         (test/install: a one-node Slurm started by the test)

Then it replaces itself by COMMAND (exec), so exit codes and signals are the command's own. Inputs
that only the test knows (a shared model, a data file) are checked by the test script, which
exits 77 itself. Stdlib only, so that it runs where numpy is missing too.
"""
import importlib.util
import os
import shutil
import subprocess
import sys

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


def missing_module(name):
    return None if importlib.util.find_spec(name) else f"{sys.executable} cannot import {name}"


def missing_ort():
    node = os.environ.get("NODE") or "node"
    if not shutil.which(node):
        return f"node ('{node}') is not found, for onnxruntime-node"
    try:
        p = subprocess.run([node, os.path.join(HERE, "ort_reference.js"), "--probe"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{node} ort_reference.js --probe: {e}"
    return None if p.returncode == 0 else "onnxruntime-node does not load: " + p.stdout.strip()[-300:]


def missing_program(name):
    return lambda: None if shutil.which(name) else f"{name} is not on PATH"


def missing_as_root(*names):
    def check():
        gone = [n for n in names if not shutil.which(n)]
        if gone:
            return " and ".join(gone) + (" is" if len(gone) == 1 else " are") + " not on PATH"
        return None if os.geteuid() == 0 else "needs root"
    return check


CHECKS = {"ort": missing_ort, "mpi": missing_program("mpirun"), "protoc": missing_program("protoc"),
          "slurm": missing_as_root("slurmctld", "slurmd", "sbatch")}


def main(argv):
    if "--" not in argv or len(argv) < 3 or argv[0] != "--needs":
        print("usage: require.py --needs A,B,... -- COMMAND ARGS...", file=sys.stderr)
        return 2
    cut = argv.index("--")
    needs = [n for n in argv[1].split(",") if n] if cut == 2 else []
    command = argv[cut + 1:]
    if not command:
        print("require.py: no command after --", file=sys.stderr)
        return 2
    for need in needs:
        why = CHECKS.get(need, lambda: missing_module(need))()
        if why:
            print(f"skipped: {why}", flush=True)
            return SKIP
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

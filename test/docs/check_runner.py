#!/usr/bin/python3
"""The docs test's own test (docs.runner): run_doc_commands.py on the fixtures in Inputs/.

    check_runner.py --workdir W

good.md must pass with its marked blocks skipped (they would fail); fail.md, pipefail.md,
badmarker.md and untagged.md must fail, and fail.md must not run the commands after the failure.
Exit 0 when every expectation holds, 1 otherwise.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_doc_commands.py")
INPUTS = os.path.join(HERE, "Inputs")


def run(md, workdir, *extra):
    cmd = [sys.executable, RUNNER, "--source", INPUTS, "--build", workdir, "--workdir", workdir,
           "--no-python-check", *extra, md]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    w = os.path.abspath(args.workdir)
    os.makedirs(w, exist_ok=True)
    failures = []

    def expect(what, cond, out):
        print(f"{'ok  ' if cond else 'FAIL'} {what}")
        if not cond:
            failures.append(what)
            print("    " + out.replace("\n", "\n    "))

    rc, out = run("good.md", w)
    expect("good.md passes, its three marked blocks skipped", rc == 0 and out.count("skipped (marked") == 3, out)
    rc, out = run("good.md", w, "--all")
    expect("good.md with --all runs the marked blocks (and fails on them)", rc == 1, out)
    rc, out = run("fail.md", w)
    scratch = os.path.join(w, "fail")
    expect("fail.md fails", rc == 1 and "fail.md:3: FAILED" in out, out)
    expect("fail.md stops at the failing command and block",
           not os.path.exists(os.path.join(scratch, "not-reached-in-block.txt"))
           and not os.path.exists(os.path.join(scratch, "not-reached.txt")), out)
    rc, out = run("pipefail.md", w)
    expect("pipefail.md fails (a failure inside a pipeline)", rc == 1, out)
    rc, out = run("badmarker.md", w)
    expect("badmarker.md fails: unknown marker", rc == 1 and "unknown marker" in out, out)
    rc, out = run("untagged.md", w)
    expect("untagged.md fails: a fence without a language", rc == 1 and "without a language" in out, out)
    print(f"{len(failures)} of 7 expectations failed" if failures else "all 7 expectations hold")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

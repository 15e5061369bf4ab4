#!/usr/bin/python3
"""Runs the commands of README.md, docs/*.md and examples/**/README.md as a user would paste them
(ctest label `docs`).

    run_doc_commands.py --source REPO --build BUILD --workdir W [--mpi] [--slurm] [--all] [--list] [FILE.md ...]

The convention it checks (docs/README.md "Writing docs" says the same):

  - Every fenced block names its language. ```sh blocks hold commands to paste: this script runs
    them. Synopses with placeholders and [optional] flags are ```text; files are ```yaml etc.
  - A ```sh block runs from the repository root after `scripts/build.sh`, as written: no
    placeholders, no paths outside the repository except system ones (/usr/bin/python3,
    /usr/share/common-licenses), outputs to new relative folders.
  - A block that needs MPI or runs long is marked by an HTML comment on the last non-blank line
    before its fence, which a rendered page does not show:
        <!-- docs-test: skip mpi -->    run only with --mpi (mpirun found and colossal-run built with MPI)
        <!-- docs-test: skip long -->   run only with --all (a full build, the whole test suite, benchmarks)
        <!-- docs-test: skip slurm -->  run only with --slurm: a Slurm cluster answers (SLURM_CONF); the
                                        test cluster.slurm starts one and runs docs/cluster.md so
    Any other `docs-test:` comment is an error, so a typo never skips a block silently.

Each file's blocks run in order, each with `bash -e -o pipefail`, in one scratch folder per file
(W/<file>/) that holds symbolic links to every top-level entry of REPO and `build` -> BUILD, so that
`build/bin/colossal-opt`, `examples/...` and `scripts/...` resolve as in a checkout, and what the
commands write stays in W. Run as root, the blocks get OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (OpenMPI refuses root without them; a user is not root). A failing block fails the file (its later blocks are not run: they
usually need its outputs) and the test; the other files still run.

Exit: 0 every block ran and succeeded (marked ones aside), 1 a block failed or a doc breaks the
convention, 77 skipped: /usr/bin/python3 (which the docs' commands name) lacks numpy, torch or onnx.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

RUN_LANGS = {"sh", "bash", "shell"}
MARKER = re.compile(r"<!--\s*docs-test:(.*?)-->")
SKIP_REASONS = {"mpi", "long", "slurm"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)\s*$")
SKIP = 77


@dataclass
class Block:
    file: str
    line: int          # 1-based line of the opening fence
    lang: str
    text: str
    skip: str = ""     # "", "mpi" or "long"


@dataclass
class Doc:
    path: str
    blocks: list = field(default_factory=list)
    errors: list = field(default_factory=list)


def parse(path, rel):
    """Fenced blocks of one Markdown file, with their markers; convention errors in Doc.errors."""
    doc = Doc(rel)
    lines = open(path, encoding="utf-8").read().splitlines()
    i = 0
    pending = None  # (line, reason) of a marker waiting for its block
    while i < len(lines):
        m = MARKER.fullmatch(lines[i].strip())
        if m:
            words = m.group(1).split()
            if len(words) != 2 or words[0] != "skip" or words[1] not in SKIP_REASONS:
                doc.errors.append(f"{rel}:{i + 1}: unknown marker '{m.group(0)}'; write "
                                  + " or ".join(f"<!-- docs-test: skip {r} -->" for r in sorted(SKIP_REASONS)))
            else:
                pending = (i + 1, words[1])
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            if pending and lines[i].strip():
                doc.errors.append(f"{rel}:{pending[0]}: a docs-test marker must be the last line before a ```sh fence")
                pending = None
            i += 1
            continue
        indent, fence, lang = f.groups()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[0] * len(fence)):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i >= len(lines):
            doc.errors.append(f"{rel}:{start + 1}: fenced block is never closed")
        i += 1
        if not lang:
            doc.errors.append(f"{rel}:{start + 1}: fenced block without a language: tag it sh (commands this "
                              "test runs) or text (a synopsis, output), yaml, ...")
        skip = ""
        if pending:
            if lang not in RUN_LANGS:
                doc.errors.append(f"{rel}:{pending[0]}: a docs-test marker before a ```{lang} block (only ```sh runs)")
            skip = pending[1]
            pending = None
        doc.blocks.append(Block(rel, start + 1, lang, "\n".join(body) + "\n", skip))
    if pending:
        doc.errors.append(f"{rel}:{pending[0]}: a docs-test marker at the end of the file")
    return doc


def scratch_for(workdir, rel, source, build):
    """A fresh folder that looks like a built checkout: links to REPO's entries and build -> BUILD."""
    d = os.path.join(workdir, rel.replace(os.sep, "_").replace(".md", ""))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name in sorted(os.listdir(source)):
        if name.startswith(".") or name == "build":
            continue
        os.symlink(os.path.join(source, name), os.path.join(d, name))
    os.symlink(build, os.path.join(d, "build"))
    return d


def block_env():
    """The environment of a block: ours, plus OpenMPI's consent to run as root when we are root."""
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_block(block, cwd, timeout):
    """Runs one block with bash -e -o pipefail; returns (ok, seconds, output)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=cwd, env=block_env(),
                           stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout)
        ok, out = p.returncode == 0, p.stdout + ("" if p.returncode == 0 else f"\n[exit code {p.returncode}]")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        ok, out = False, out + f"\n[timed out after {timeout} s: shorten it, or mark it <!-- docs-test: skip long -->]"
    return ok, time.perf_counter() - t0, out


def tail(text, n=40):
    lines = text.rstrip().splitlines()
    return "\n".join((["    ..."] if len(lines) > n else []) + ["    " + l for l in lines[-n:]])


def default_files(source):
    """README.md, docs/*.md, examples/README.md and examples/*/README.md, where they exist."""
    docs = os.path.join(source, "docs")
    files = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(docs) if f.endswith(".md"))
    examples = os.path.join(source, "examples")
    per_example = sorted(os.path.join("examples", d, "README.md") for d in os.listdir(examples)
                         if os.path.isfile(os.path.join(examples, d, "README.md"))) if os.path.isdir(examples) else []
    return files + [f for f in ["examples/README.md"] + per_example if os.path.isfile(os.path.join(source, f))]


def python_ready():
    """The docs' commands name /usr/bin/python3 with numpy, torch and onnx (docs/README.md)."""
    try:
        p = subprocess.run(["/usr/bin/python3", "-c", "import numpy, torch, onnx"], capture_output=True, text=True)
    except OSError as e:
        return f"/usr/bin/python3: {e}"
    return None if p.returncode == 0 else "/usr/bin/python3 lacks numpy, torch or onnx: " + p.stderr.strip()[-200:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="Markdown files relative to --source (default: README.md docs/*.md "
                         "examples/README.md examples/*/README.md)")
    ap.add_argument("--source", required=True, help="repository root")
    ap.add_argument("--build", help="build folder (holds bin/colossal-opt)")
    ap.add_argument("--workdir", help="scratch folder (emptied per file)")
    ap.add_argument("--mpi", action="store_true", help="also run blocks marked `skip mpi`")
    ap.add_argument("--slurm", action="store_true",
                    help="also run blocks marked `skip slurm` (a Slurm cluster must answer: SLURM_CONF)")
    ap.add_argument("--all", action="store_true", help="also run blocks marked `skip long` (and `skip mpi`)")
    ap.add_argument("--list", action="store_true", help="print the blocks and what would run; run nothing")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per block (default 600)")
    ap.add_argument("--no-python-check", action="store_true",
                    help="do not require torch/onnx in /usr/bin/python3 (the runner's own test)")
    args = ap.parse_args()
    source = os.path.abspath(args.source)
    files = args.files or default_files(source)

    docs = [parse(os.path.join(source, f), f) for f in files]
    errors = [e for d in docs for e in d.errors]
    for e in errors:
        print(f"error: {e}")

    def runs(b):
        if b.skip == "slurm":
            return args.slurm
        return b.lang in RUN_LANGS and (not b.skip or args.all or (b.skip == "mpi" and args.mpi))

    if args.list:
        for d in docs:
            for b in d.blocks:
                if b.lang in RUN_LANGS:
                    what = "run" if runs(b) else f"skip ({b.skip})"
                    print(f"{b.file}:{b.line}: {what}: {b.text.strip().splitlines()[0] if b.text.strip() else ''}")
        return 1 if errors else 0
    if errors:
        return 1
    if not (args.build and args.workdir):
        ap.error("--build and --workdir are needed to run the blocks")
    why = None if args.no_python_check else python_ready()
    if why:
        print(f"skipped: {why}")
        return SKIP

    build = os.path.abspath(args.build)
    failed, ran, skipped = [], 0, 0
    t_all = time.perf_counter()
    for d in docs:
        todo = [b for b in d.blocks if b.lang in RUN_LANGS]
        if not todo:
            continue
        cwd = scratch_for(os.path.abspath(args.workdir), d.path, source, build)
        for b in todo:
            if not runs(b):
                needs = {"mpi": "MPI", "slurm": "a Slurm cluster (--slurm)"}.get(b.skip, "a long run")
                print(f"== {b.file}:{b.line}: skipped (marked: needs {needs})")
                skipped += 1
                continue
            print(f"== {b.file}:{b.line}: in {cwd}\n" + "\n".join("$ " + l for l in b.text.rstrip().splitlines()),
                  flush=True)
            ok, dt, out = run_block(b, cwd, args.timeout)
            ran += 1
            print(tail(out, 15 if ok else 60))
            print(f"-- {b.file}:{b.line}: {'ok' if ok else 'FAILED'} in {dt:.1f} s", flush=True)
            if not ok:
                failed.append(f"{b.file}:{b.line}")
                break
    print(f"{ran} blocks ran, {skipped} marked ones skipped, {len(failed)} failed "
          f"in {time.perf_counter() - t_all:.0f} s" + (": " + " ".join(failed) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

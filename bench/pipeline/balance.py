#!/usr/bin/python3
"""Pipeline stage balance (issue 12, docs/parallelism.md "How the step is cut"): on a model with
unequal layers, the cost model's split against a uniform layer split and every contiguous split.

    /usr/bin/python3 bench/pipeline/balance.py --workdir W [--opt PATH --run PATH] [--repeat N]

The model (PyTorch, exported here): a wide token embedding (vocab 2048, width 256), eight
Linear + GELU layers of mixed widths (256 -> 512 -> 128 -> 1024 -> 256 -> 768 -> 128 -> 640 ->
256), a LayerNorm and a wide head back to the vocabulary; B 8, T 32, cross-entropy, SGD. Four
stages (mesh pp=4, gpipe, m=4). Splits at layer boundaries: all C(7, 3) = 35 ways to cut the eight
layers into four contiguous groups (the embedding goes with the first, the head with the last);
"uniform" is two layers per stage; "auto" is the cost model's split (`stages: auto`, which may
cut inside a layer).

Each stage is timed alone: `colossal-run PLAN --program stage<s>_forward|backward
--zero-inputs --threads 1 --repeat N` (median of N runs, default 20), one process at a time, so
the two cores' noise does not decide; a stage's time is its forward's plus its backward's median.
Passes when auto's slowest stage is no slower than uniform's (3% allowed for timer noise) and
within 10% of the best exhaustive split's.

Run it on an otherwise idle machine: with other work on the cores the per-stage medians vary by
2x and decide nothing. Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no torch/onnx).
"""
import argparse
import itertools
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "e2e"))
import e2e_util as u  # noqa: E402

WIDTHS = [256, 512, 128, 1024, 256, 768, 128, 640, 256]
VOCAB, B, T, STAGES, LAYERS = 2048, 8, 32, 4, 8

EXPORT = r'''
import sys, torch
torch.manual_seed(0)
W = %r
V = %d
class Uneven(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(V, W[0])
        self.layers = torch.nn.ModuleList(torch.nn.Linear(W[i], W[i + 1]) for i in range(len(W) - 1))
        self.ln = torch.nn.LayerNorm(W[-1])
        self.head = torch.nn.Linear(W[-1], V, bias=False)
    def forward(self, input_ids):
        x = self.wte(input_ids)
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return self.head(self.ln(x))
ids = torch.randint(0, V, (%d, %d))
torch.onnx.export(Uneven(), (ids,), sys.argv[1], input_names=["input_ids"], output_names=["logits"],
                  opset_version=17, do_constant_folding=False)
''' % (WIDTHS, VOCAB, B, T)

SPEC = """mode: train
inputs: {input_ids: [%d, %d]}
mesh: {pp: %d}
parallel:
  pipeline: {schedule: gpipe, microbatches: 4%s}
train:
  loss: {kind: cross_entropy, logits: logits, labels: labels}
  optimizer: {kind: sgd, lr: 0.01}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--opt")
    ap.add_argument("--run")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    opt, run = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
    model = os.path.join(args.workdir, "uneven.onnx")
    script = os.path.join(args.workdir, "export_uneven.py")
    with open(script, "w") as f:
        f.write(EXPORT)
    p = subprocess.run([sys.executable, script, model], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        if "No module named" in p.stderr:
            print("skipped: " + p.stderr.strip().splitlines()[-1])
            sys.exit(u.SKIP)
        u.die("export failed:\n" + p.stderr, 2)

    def slowest(name, stages_text):
        spec = os.path.join(args.workdir, name + ".yaml")
        with open(spec, "w") as f:
            f.write(SPEC % (B, T, STAGES, stages_text))
        plan = os.path.join(args.workdir, name + ".cplan")
        u.run([opt, model, "--spec", spec, "-o", plan], f"colossal-opt {name}")
        times = []
        for s in range(STAGES):
            total = 0.0
            for phase in ("forward", "backward"):
                q = subprocess.run([run, plan, "--program", f"stage{s}_{phase}", "--zero-inputs", "--threads", "1",
                                    "--warmup", "3", "--repeat", str(args.repeat)], capture_output=True, text=True,
                                   timeout=600)
                m = re.search(r"median ([\d.]+) ms", q.stderr)
                if q.returncode != 0 or not m:
                    u.die(f"colossal-run {name} stage{s}_{phase} failed:\n{q.stderr}", 2)
                total += float(m.group(1))
            times.append(total)
        return max(times), times

    auto, auto_times = slowest("auto", "")
    print(f"auto (cost model): slowest stage {auto:.3f} ms; stages {[round(t, 3) for t in auto_times]}")
    results = {}
    for cuts in itertools.combinations(range(1, LAYERS), STAGES - 1):
        text = ", stages: [" + ", ".join(f"'/layers.{c - 1}/.*'" for c in cuts) + "]"
        name = "split_" + "_".join(map(str, cuts))
        results[cuts], times = slowest(name, text)
        print(f"  layers cut after {cuts}: slowest {results[cuts]:.3f} ms; stages {[round(t, 3) for t in times]}")
    best_cuts = min(results, key=results.get)
    best, uniform = results[best_cuts], results[(2, 4, 6)]
    print(f"best exhaustive split {best_cuts}: {best:.3f} ms; uniform (2, 4, 6): {uniform:.3f} ms; auto {auto:.3f} ms "
          f"({auto / best:.3f} x best, {auto / uniform:.3f} x uniform)")
    ok = True
    if auto > uniform * 1.03:
        print("  the cost model's split is slower than the uniform layer split  MISMATCH")
        ok = False
    if auto > best * 1.10:
        print("  the cost model's split is more than 10% slower than the best contiguous split  MISMATCH")
        ok = False
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""End-to-end check: weights held in Constant nodes (paddle2onnx's form) train like initializers.

    constant_weights_e2e.py --workdir W [--opt PATH --run PATH] [--threads N] [--steps N]

The model is examples/models/export.py --preset tiny (GPT-2 style, 2 layers, d_model 64, byte
vocabulary, dynamic batch; state_dict.pt holds its exact weights), rewritten twice:
  constants  every initializer becomes a Constant node (node name "<init>_const", output the
             initializer's name), as paddle2onnx writes models such as PP-OCR
  mixed      every other float initializer becomes a Constant node, the rest stay initializers
Data: /usr/share/common-licenses as byte tokens (examples/train/prepare_data.py).

Checks (docs/training.md "Which initializers train"):
  - the three forms have the same trainable parameters (colossal-opt --report: names, count);
  - `--steps` (6) AdamW steps: every metrics line of both Constant forms equals the initializer
    form's (loss, lr, grad_norm bit for bit), and the losses match PyTorch
    (examples/train/torch_reference.py from state_dict.pt) within 1e-4;
  - --report's "not trained" rows: `h.0.attn.bias` (the causal-mask buffer, read by Slice) stays
    "constant: read only as a buffer, feeds Slice's data"; with `frozen: [wpe.weight]`,
    wpe.weight is "frozen by train.frozen";
  - `colossal-run export --onnx` of the Constant form from a checkpoint: the exported model still
    holds its weights in Constant nodes, onnxruntime on it gives colossal-run's
    `--program forward --checkpoint` logits within 1e-5, and they differ from the untrained model's;
  - inference is unchanged: the Constant form compiled with `mode: inference` gives onnxruntime's
    logits within 1e-4.
Before Constant nodes trained, the constants form failed to compile ("no trainable parameter
reaches the loss") and the mixed form trained half its weights. Exit codes: 0 pass, 1 mismatch,
2 a tool failed, 77 skipped (no /usr/share/common-licenses).
"""
import argparse
import glob
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402
import train_e2e as t  # noqa: E402

SPEC = ("mode: train\ninputs: {input_ids: [8, 64]}\ntrain:\n"
        "  loss: {kind: cross_entropy, logits: logits, labels: labels}\n"
        f"  optimizer: {t.ADAMW}\n  lr_schedule: {{kind: constant}}\n")


def to_constants(src, dst, every):
    """Writes SRC with every `every`-th initializer (all when every == 1; only float ones otherwise)
    moved into a Constant node at the front of the graph."""
    m = onnx.load(src)
    g = m.graph
    keep, moved = [], []
    floats = 0
    for init in g.initializer:
        is_float = init.data_type == onnx.TensorProto.FLOAT
        if every == 1 or (is_float and floats % every == 0):
            moved.append(init)
        else:
            keep.append(init)
        floats += is_float
    nodes = [helper.make_node("Constant", [], [init.name], name=init.name + "_const", value=init) for init in moved]
    del g.initializer[:]
    g.initializer.extend(keep)
    old = list(g.node)
    del g.node[:]
    g.node.extend(nodes + old)
    onnx.checker.check_model(m)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    onnx.save(m, dst)
    return len(moved)


def compile_report(opt, model, spec, plan):
    if os.path.exists(plan):
        os.remove(plan)
    out, _, _ = u.run([opt, model, "--spec", spec, "-o", plan, "--report"], "colossal-opt --report")
    return out


def trainable_names(report):
    """The names in --report's trainable table (between its header and 'total')."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("trainable parameters:"))
    names = []
    for line in lines[start + 2:]:
        cells = line.split()
        if not cells or cells[0] == "total":
            break
        names.append(cells[0])
    return names


def report_row(report, name):
    for line in report.splitlines():
        cells = line.split(None, 1)
        if cells and cells[0] == name and "not trained" not in line:
            return line
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--opt")
    p.add_argument("--run")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    work = args.workdir
    os.makedirs(work, exist_ok=True)
    texts = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    if not texts:
        print("skipped: /usr/share/common-licenses is absent")
        sys.exit(u.SKIP)
    try:
        ok = run_checks(args, work, texts)
    except u.ToolError as e:
        u.die(str(e), 2)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


def run_checks(args, work, texts):
    opt, run_bin = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
    model_dir = os.path.join(work, "model")
    u.run([sys.executable, u.EXPORT_PY, "--preset", "tiny", "--out", model_dir, "--quiet"], "export.py")
    u.run([sys.executable, t.PREPARE_DATA] + texts + ["--out", os.path.join(work, "data")], "prepare_data.py")
    data = os.path.join(work, "data", "train.bin")
    models = {"initializers": os.path.join(model_dir, "model.onnx"),
              "constants": os.path.join(work, "constants", "model.onnx"),
              "mixed": os.path.join(work, "mixed", "model.onnx")}
    print(f"constants: {to_constants(models['initializers'], models['constants'], 1)} initializers -> Constant nodes")
    print(f"mixed: {to_constants(models['initializers'], models['mixed'], 2)} float initializers -> Constant nodes")
    spec = os.path.join(work, "train.yaml")
    with open(spec, "w") as f:
        f.write(SPEC)

    ok = True
    plans, reports, metrics = {}, {}, {}
    for form, model in models.items():
        plans[form] = os.path.join(work, form + ".cplan")
        reports[form] = compile_report(opt, model, spec, plans[form])
    base = trainable_names(reports["initializers"])
    for form in ("constants", "mixed"):
        names = trainable_names(reports[form])
        same = names == base
        print(f"  {form}: {len(names)} trainable parameters, the initializer form {len(base)}: "
              f"{'same names' if same else 'DIFFERENT: ' + str(sorted(set(names) ^ set(base)))}")
        ok &= same
    row = report_row(reports["constants"], "h.0.attn.bias")
    want = "constant: read only as a buffer, feeds Slice's data"
    print(f"  --report row of h.0.attn.bias: {row!r}")
    if not row or want not in row:
        print(f"  expected it to say {want!r}  MISMATCH")
        ok = False

    for form in models:
        metrics[form] = train(run_bin, plans[form], data, args, os.path.join(work, form + ".jsonl"))
    for form in ("constants", "mixed"):
        same = [(a["loss"], a["lr"], a["grad_norm"]) for a in metrics[form]] == \
               [(b["loss"], b["lr"], b["grad_norm"]) for b in metrics["initializers"]]
        print(f"  {form} vs initializers over {args.steps} steps: "
              f"{'loss, lr and grad_norm identical' if same else 'DIFFERENT'}")
        if not same:
            t.compare_runs(metrics[form], metrics["initializers"], 0.0, form, "init")
        ok &= same
    ref = os.path.join(work, "torch.jsonl")
    u.run([sys.executable, t.TORCH_REFERENCE, "--model-dir", model_dir, "--spec", spec, "--data", data,
           "--steps", str(args.steps), "--metrics", ref, "--threads", str(args.threads)], "torch_reference.py")
    print("Constant form vs PyTorch")
    ok &= t.compare_runs(metrics["constants"], t.read_metrics(ref), 1e-4, "constants", "torch")

    frozen_spec = os.path.join(work, "frozen.yaml")
    with open(frozen_spec, "w") as f:
        f.write(SPEC + "  frozen: [wpe.weight]\n")
    frozen_report = compile_report(opt, models["constants"], frozen_spec, os.path.join(work, "frozen.cplan"))
    row = report_row(frozen_report, "wpe.weight")
    print(f"  --report row of wpe.weight with train.frozen: {row!r}")
    if not row or "frozen by train.frozen" not in row:
        print("  expected 'frozen by train.frozen'  MISMATCH")
        ok = False

    ok &= check_export(args, work, run_bin, plans["constants"], models, data)
    ok &= check_inference(args, work, opt, run_bin, models["constants"], model_dir)
    return ok


def train(run_bin, plan, data, args, metrics, extra=()):
    if os.path.exists(metrics):
        os.remove(metrics)
    u.run([run_bin, plan, "train", "--data", data, "--token-dtype", "uint8", "--steps", str(args.steps),
           "--metrics", metrics, "--threads", str(args.threads)] + list(extra), "colossal-run train", timeout=1200)
    return t.read_metrics(metrics)


def check_export(args, work, run_bin, plan, models, data):
    """Checkpoint -> export --onnx of the Constant form -> onnxruntime vs colossal-run forward."""
    ck = os.path.join(work, "ckpt")
    shutil.rmtree(ck, ignore_errors=True)
    train(run_bin, plan, data, args, os.path.join(work, "ckpt.jsonl"), ["--save", ck])
    exported = os.path.join(work, "exported.onnx")
    if os.path.exists(exported):
        os.remove(exported)
    u.run([run_bin, plan, "export", "--onnx", exported, "--checkpoint", ck], "colossal-run export")
    # Every Constant node stays (with new values); an Identity tie of one becomes an initializer.
    consts = {n.output[0] for n in onnx.load(exported).graph.node if n.op_type == "Constant"}
    before = {n.output[0] for n in onnx.load(models["constants"]).graph.node if n.op_type == "Constant"}
    ok = consts == before
    print(f"  exported model: {len(consts)} Constant nodes, the compiled model {len(before)}"
          f"{'' if ok else '  MISMATCH'}")
    tokens = np.fromfile(data, dtype=np.uint8)
    starts = np.random.default_rng(7).integers(0, tokens.size - 64, size=8)
    ids = os.path.join(work, "ids.npy")
    np.save(ids, np.stack([tokens[o:o + 64] for o in starts]).astype(np.int64))
    fwd, ort_dir, ort0_dir = (os.path.join(work, d) for d in ("fwd", "ort_exported", "ort_initial"))
    shutil.rmtree(fwd, ignore_errors=True)
    u.run([run_bin, plan, "--program", "forward", "--checkpoint", ck, "--input", f"input_ids={ids}",
           "--output-dir", fwd, "--threads", str(args.threads)], "colossal-run --program forward")
    u.run_ort(exported, {"input_ids": ids}, ort_dir, args.threads)
    u.run_ort(models["constants"], {"input_ids": ids}, ort0_dir, args.threads)
    print("colossal-run forward (checkpoint) vs onnxruntime on the exported Constant-form model")
    ok &= u.compare(u.npy_dir(ort_dir), fwd, 1e-5)
    trained, initial = np.load(os.path.join(ort_dir, "logits.npy")), np.load(os.path.join(ort0_dir, "logits.npy"))
    moved = float(np.abs(trained - initial).max() / np.abs(initial).max())
    print(f"  exported vs untrained: max|dlogit| / max|logit| = {moved:.3e}")
    if moved < 1e-3:
        print("  the exported model computes what the untrained one does  MISMATCH")
        ok = False
    return ok


def check_inference(args, work, opt, run_bin, model, model_dir):
    spec = os.path.join(work, "inference.yaml")
    with open(spec, "w") as f:
        f.write("mode: inference\ninputs: {input_ids: [8, 64]}\n")
    plan = os.path.join(work, "inference.cplan")
    u.compile_plan(opt, model, spec, plan)
    inputs = u.npy_dir(os.path.join(model_dir, "inputs"))
    out, ort_dir = os.path.join(work, "inference_out"), os.path.join(work, "inference_ort")
    u.run_plan(run_bin, plan, inputs, out, args.threads)
    u.run_ort(model, inputs, ort_dir, args.threads)
    print("inference of the Constant form: colossal-run vs onnxruntime")
    return u.compare(u.npy_dir(ort_dir), out, 1e-4)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""examples/digits_resnet against PyTorch (issue 16): the torch ResNet of examples/digits_resnet/model.py
(convs, BatchNorm in training mode, ReLU, max pooling, two residual blocks, global average pooling,
linear), exported with TrainingMode.TRAINING, trains on scikit-learn's digits through train.inputs.

    digits_resnet_e2e.py --workdir W [--opt PATH --run PATH] [--threads N] [--steps N]

- colossal-run train --shuffle --seed 3 --dump-inputs: --steps (20) SGD steps (momentum 0.9) of 64
  images; the dumped rows are the documented per-epoch permutation of the train split;
- torch.optim.SGD replays the dumped batches from the module's state after the export: per-step
  losses within 1e-4 relative;
- the six BatchNorms' running statistics in `export --checkpoint --onnx`'s model of a 6-step run
  equal the torch modules' after 6 replayed steps (max |difference| within 1e-4 of the largest
  statistic; measured 1e-7). Not after 20: the two trajectories agree to rounding for about a
  dozen steps, then the two libraries' last-bit differences grow (losses 1e-7 apart through step
  13, 8.6e-5 at step 20 on AMD EPYC), which would hide a wrong momentum or a biased variance
  (a 2.4e-4 effect here) in noise;
- the example's inference path (`export --inference` of that checkpoint: the six
  BatchNormalizations with training_mode 0 and one output; mode: inference on the 360 test
  images): logits within 1e-4 of the replayed model after 6 steps in eval mode, and the same test
  accuracy.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no scikit-learn).
"""
import importlib.util
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e_util as u  # noqa: E402
from data_inputs_e2e import rows_of_step  # noqa: E402

EXAMPLE = os.path.join(u.REPO, "examples", "digits_resnet")
TOL = 1e-4
BATCH, LR, MOMENTUM, SEED = 64, 0.05, 0.9, 3
BN_STEPS = 6


def load_example():
    spec = importlib.util.spec_from_file_location("digits_resnet_run", os.path.join(EXAMPLE, "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def case(args):
    if importlib.util.find_spec("sklearn") is None:
        print("SKIPPED: scikit-learn (python3-sklearn, which ships the digits data) is absent")
        sys.exit(u.SKIP)
    ex = load_example()
    opt, run = u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)
    w = os.path.abspath(args.workdir)
    os.makedirs(w, exist_ok=True)
    arrays = ex.write_data(w)
    onnx_path, net = ex.export_model(w, BATCH)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    plan = os.path.join(w, "resnet.cplan")
    u.compile_plan(opt, onnx_path, ex.write_spec(w, BATCH, LR, MOMENTUM), plan)
    metrics, dump, ckpt = (os.path.join(w, n) for n in ("metrics.jsonl", "dump", "ckpt"))
    for d in (dump, ckpt):
        shutil.rmtree(d, ignore_errors=True)
    u.run([run, plan, "train", "--steps", str(args.steps), "--metrics", metrics, "--shuffle", "--seed", str(SEED),
           "--dump-inputs", dump, "--save", ckpt, "--threads", str(args.threads)], "colossal-run train", timeout=600)
    # The running statistics are compared after BN_STEPS steps, while the two trajectories agree to
    # rounding: later steps amplify the last-bit differences of the two libraries' convolutions
    # (on AMD EPYC the losses drift to ~1e-4 by step 20), which would hide a wrong momentum or a
    # biased variance (a 2.4e-4 effect here) in noise.
    ckpt_bn = os.path.join(w, "ckpt_bn")
    shutil.rmtree(ckpt_bn, ignore_errors=True)
    u.run([run, plan, "train", "--steps", str(BN_STEPS), "--metrics", os.path.join(w, "metrics_bn.jsonl"), "--shuffle",
           "--seed", str(SEED), "--save", ckpt_bn,
           "--threads", str(args.threads)], "colossal-run train (BN statistics)", timeout=600)
    with open(metrics) as f:
        ours = [json.loads(line)["loss"] for line in f]

    ok = True
    images, labels = arrays["train_images"], arrays["train_labels"]
    batches = []
    for s in range(args.steps):
        step = os.path.join(dump, f"step-{s:08d}")
        x, y = np.load(os.path.join(step, "image.npy")), np.load(os.path.join(step, "labels.npy"))
        rows = rows_of_step(s, BATCH, len(labels), shuffle=True, seed=SEED)
        if not (np.array_equal(x, images[rows]) and np.array_equal(y, labels[rows])):
            print(f"step {s}: the dumped inputs are not the documented shuffled rows  MISMATCH")
            ok = False
        batches.append((torch.from_numpy(x), torch.from_numpy(y)))

    # The PyTorch replay from the same weights (and running statistics) on the same batches.
    ref = ex.m.DigitsResNet()
    ref.load_state_dict(state)
    ref.train()
    sgd = torch.optim.SGD(ref.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    state_at = bn_at = None  # torch's parameters and running statistics after BN_STEPS steps
    for x, y in batches:
        sgd.zero_grad()
        loss = F.cross_entropy(ref(x), y)
        loss.backward()
        sgd.step()
        losses.append(loss.item())
        if len(losses) == BN_STEPS:
            state_at = {k: v.detach().clone() for k, v in ref.state_dict().items()}
            bn_at = {k: v for k, v in state_at.items() if "running_" in k}
    worst = 0.0
    for s, (a, b) in enumerate(zip(ours, losses)):
        rel = abs(a - b) / abs(b)
        worst = max(worst, rel)
        print(f"step {s:2d}: loss {a:.7f} torch {b:.7f} (rel {rel:.1e}){'  MISMATCH' if rel > TOL else ''}")
        ok &= rel <= TOL
    if len(ours) != len(losses) or not losses[-1] < losses[0]:
        print(f"{len(ours)} metrics lines for {len(losses)} steps; torch's loss {losses[0]:.4f} -> {losses[-1]:.4f}  MISMATCH")
        ok = False
    print(f"worst relative loss difference {worst:.1e} over {len(losses)} steps")

    # Running statistics of every BatchNorm, as export --onnx writes them.
    import onnx
    from onnx import numpy_helper
    trained = os.path.join(w, "trained_bn.onnx")
    u.run([run, plan, "export", "--checkpoint", ckpt_bn, "--onnx", trained], "colossal-run export")
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(trained).graph.initializer}
    bns = ex.m.batch_norms(ref)
    print(f"running statistics after {BN_STEPS} steps:")
    for name, bn in bns.items():
        for stat in ("running_mean", "running_var"):
            want = bn_at[f"{name}.{stat}"].numpy()
            got = inits[f"{name}.{stat}"]
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            bad = err > TOL
            print(f"{name}.{stat}: max |difference| / max |torch| = {err:.1e}{'  MISMATCH' if bad else ''}")
            ok &= not bad
    if len(bns) != 6:
        print(f"expected 6 BatchNorms, the model has {len(bns)}  MISMATCH")
        ok = False

    # The example's inference path against the replayed model in eval mode.
    test_x, test_y = arrays["test_images"], arrays["test_labels"]
    evaluated = os.path.join(w, "trained_eval.onnx")
    u.run([run, plan, "export", "--checkpoint", ckpt_bn, "--onnx", evaluated, "--inference"], "colossal-run export")
    bn_nodes = [n for n in onnx.load(evaluated).graph.node if n.op_type == "BatchNormalization"]
    modes = [next((a.i for a in n.attribute if a.name == "training_mode"), 0) for n in bn_nodes]
    if len(bn_nodes) != 6 or any(modes) or any(len(n.output) != 1 for n in bn_nodes):
        print(f"export --inference: BatchNormalization training_mode {modes}, outputs "
              f"{[len(n.output) for n in bn_nodes]}  MISMATCH")
        ok = False
    test_plan = os.path.join(w, "test.cplan")
    u.compile_plan(opt, evaluated, ex.write_spec(w, BATCH, LR, MOMENTUM, "inference", len(test_y)), test_plan)
    u.run_plan(run, test_plan, {"image": os.path.join(w, "data", "test_images.npy")}, os.path.join(w, "test_out"),
               threads=args.threads)
    logits = np.load(os.path.join(w, "test_out", "logits.npy"))
    ref_at = ex.m.DigitsResNet()
    ref_at.load_state_dict(state_at)
    ref_at.eval()
    with torch.no_grad():
        want = ref_at(torch.from_numpy(test_x)).numpy()
    err = float(np.max(np.abs(logits - want)) / np.max(np.abs(want)))
    acc, ref_acc = ex.accuracy(logits, test_y), ex.accuracy(want, test_y)
    good = err <= TOL and acc == ref_acc
    print(f"test logits (eval mode): max |difference| / max |torch| = {err:.1e}; test accuracy {acc * 100:.2f}% "
          f"(torch {ref_acc * 100:.2f}%) after {BN_STEPS} steps{'' if good else '  MISMATCH'}")
    return ok and good


if __name__ == "__main__":
    u.case_main(__doc__, {"train": case}, threads=2, steps=20)

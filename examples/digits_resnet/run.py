#!/usr/bin/python3
"""Trains the digits ResNet (model.py) with colossal-run and measures its test accuracy.

    examples/digits_resnet/run.py [--steps N] [--batch B] [--lr X] [--seed S] [--threads N]
                                  [--out DIR] [--opt PATH] [--run PATH]

1. data     scikit-learn's digits, split 80/20 -> DIR/data/{train,test}_{images,labels}.npy
2. export   the PyTorch ResNet in training mode (torch.onnx.TrainingMode.TRAINING) -> DIR/resnet.onnx
3. compile  colossal-opt, mode: train, SGD with momentum, the images and labels from the train
            arrays (train.inputs npy) -> DIR/train.yaml, DIR/resnet.cplan
4. train    colossal-run train --shuffle: --steps (default 300) steps of B (default 64) images,
            metrics in DIR/metrics.jsonl, the checkpoint in DIR/ckpt
5. export   colossal-run export --checkpoint --inference: the ONNX model with the trained weights
            and running statistics, its BatchNormalizations switched to inference (training_mode
            0: normalise with the running statistics, as model.eval() does) -> DIR/trained_eval.onnx
6. test     colossal-opt (mode: inference, the 360 test images as one batch), colossal-run on the
            test images; prints the test accuracy (the argmax of the logits against the labels)

Defaults write into build/digits_resnet. Needs a build (build/bin/colossal-opt, colossal-run) or
--opt/--run, and /usr/bin/python3 with torch, onnx and scikit-learn (Debian python3-sklearn, which
ships the digits data).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import model as m  # noqa: E402


def tool(explicit, name):
    path = explicit or os.environ.get("COLOSSAL_" + name.split("-")[1].upper()) or os.path.join(ROOT, "build", "bin", name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        sys.exit(f"run.py: {path} not found; build first (scripts/build.sh) or pass --{name.split('-')[1]} PATH")
    return path


def sh(cmd, quiet=False):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE if quiet else None, text=True)
    if p.returncode != 0:
        sys.exit(f"run.py: {os.path.basename(cmd[0])} failed with exit code {p.returncode}")
    return p.stdout


def write_data(out):
    """Step 1: the train/test arrays under OUT/data; returns them."""
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    arrays = dict(zip(("train_images", "train_labels", "test_images", "test_labels"), m.load_splits()))
    for name, a in arrays.items():
        np.save(os.path.join(data, name + ".npy"), a)
    return arrays


def export_model(out, batch, seed=0):
    """Step 2: the seeded ResNet exported for training; returns (onnx path, the module after export)."""
    torch.manual_seed(seed)
    net = m.DigitsResNet()
    path = os.path.join(out, "resnet.onnx")
    m.export_training_onnx(net, path, batch)
    return path, net


def write_spec(out, batch, lr, momentum, mode="train", rows=None):
    """Step 3 (and 6): the spec; train reads the arrays of step 1 (paths relative to the spec)."""
    if mode == "train":
        text = (f"mode: train\ninputs: {{image: [{batch}, 1, 8, 8]}}\ntrain:\n"
                "  loss: {kind: cross_entropy, logits: logits, labels: labels}\n"
                f"  optimizer: {{kind: sgd, lr: {lr}, momentum: {momentum}}}\n"
                "  inputs:\n    image: {npy: data/train_images.npy}\n    labels: {npy: data/train_labels.npy}\n")
        path = os.path.join(out, "train.yaml")
    else:
        text = f"mode: inference\ninputs: {{image: [{rows}, 1, 8, 8]}}\n"
        path = os.path.join(out, "test.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def accuracy(logits, labels):
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0, help="the data order of --shuffle")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default=os.path.join(ROOT, "build", "digits_resnet"))
    p.add_argument("--opt")
    p.add_argument("--run")
    a = p.parse_args()
    opt, run = tool(a.opt, "colossal-opt"), tool(a.run, "colossal-run")
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    try:
        arrays = write_data(out)
    except ImportError:
        sys.exit("run.py: scikit-learn is missing (apt install python3-sklearn: it ships the digits data)")
    print(f"1. data: {len(arrays['train_labels'])} train and {len(arrays['test_labels'])} test images in {out}/data")
    onnx_path, _ = export_model(out, a.batch)
    print(f"2. exported {onnx_path}")
    print("3. compile")
    plan = os.path.join(out, "resnet.cplan")
    sh([opt, onnx_path, "--spec", write_spec(out, a.batch, a.lr, a.momentum), "-o", plan])
    metrics, ckpt = os.path.join(out, "metrics.jsonl"), os.path.join(out, "ckpt")
    threads = ["--threads", str(a.threads)] if a.threads else []
    t1 = time.perf_counter()
    sh([run, plan, "train", "--steps", str(a.steps), "--metrics", metrics, "--shuffle", "--seed", str(a.seed),
        "--save", ckpt] + threads)
    train_s = time.perf_counter() - t1
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    every = max(1, len(rows) // 10)
    print("4. step   loss")
    for r in rows[::every] + ([rows[-1]] if (len(rows) - 1) % every else []):
        print(f"   {r['step']:4d}  {r['loss']:.4f}")
    print("5. export the trained model")
    evaluated = os.path.join(out, "trained_eval.onnx")
    sh([run, plan, "export", "--checkpoint", ckpt, "--onnx", evaluated, "--inference"])
    test_plan = os.path.join(out, "test.cplan")
    n_test = len(arrays["test_labels"])
    sh([opt, evaluated, "--spec", write_spec(out, a.batch, a.lr, a.momentum, "inference", n_test), "-o", test_plan])
    pred = os.path.join(out, "test_out")
    sh([run, test_plan, "--input", f"image={out}/data/test_images.npy", "--output-dir", pred] + threads, quiet=True)
    acc = accuracy(np.load(os.path.join(pred, "logits.npy")), arrays["test_labels"])
    print(f"6. test accuracy: {acc * 100:.2f}% ({round(acc * n_test)} of {n_test} test images), "
          f"after {a.steps} steps ({a.steps * a.batch / len(arrays['train_labels']):.1f} epochs); "
          f"training took {train_s:.1f} s, everything {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()

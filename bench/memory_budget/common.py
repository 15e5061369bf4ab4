#!/usr/bin/python3
"""What bench/memory_budget's scripts share: the tools, the spec, the data and the model ladder's export."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1048576
# GPT-2-style, B 2 x T 64, byte vocabulary, AdamW fp32.
SPEC = """mode: train
inputs: {input_ids: [2, 64]}
train:
  loss: {kind: cross_entropy, logits: logits, labels: labels}
  optimizer: {kind: adamw, lr: 1.0e-3, weight_decay: 0.1}
"""


def run(cmd, check=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p


def tools(build):
    return os.path.join(build, "bin", "colossal-opt"), os.path.join(build, "bin", "colossal-run")


def write_data(work):
    """A license text's bytes as uint8 tokens; returns the path."""
    data = os.path.join(work, "data.bin")
    with open("/usr/share/common-licenses/GPL-3", "rb") as f, open(data, "wb") as g:
        g.write(f.read())
    return data


def export_gpt(model_dir, layers, d):
    """examples/models/export.py's GPT-2 with `layers` x d_model `d` (d/64 heads) into `model_dir`, once;
    returns the model's path."""
    model = os.path.join(model_dir, "model.onnx")
    if not os.path.exists(model):
        run(["/usr/bin/python3", os.path.join(REPO, "examples", "models", "export.py"), "--arch", "gpt2", "--opset",
             "14", "--layers", str(layers), "--d-model", str(d), "--heads", str(d // 64), "--vocab", "256",
             "--seq", "64", "--batch", "2", "--out", model_dir, "--quiet"])
    return model

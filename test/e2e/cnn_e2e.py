#!/usr/bin/python3
"""End-to-end check: a MobileNet/DBNet-style CNN exported by torch runs like onnxruntime.

    cnn_e2e.py --workdir W [--opt PATH --run PATH] [--threads N]

The model (seeded random weights, batch-norm statistics randomised so that folding them matters,
eval mode, opset 14, dynamic batch) has every convolution kind and epilogue the conv kernel and
colossal-fuse-conv-epilogue handle: a strided 3×3 stem with 3 input channels; depthwise 3×3 and
5×5 convs with strides (1, 1), (2, 2) and (2, 1); a dilated dense 3×3; a grouped 3×3; 1×1 convs;
1-D convs; each followed by BatchNorm2d and one of ReLU, ReLU6 (Clip), Hardswish (the ONNX op),
Paddle's decomposed hardswish x·relu6(x + 3)/6, Sigmoid; a squeeze-excitation block (global average
pool, 1×1 convs with bias, ReLU, Hardsigmoid, channel-wise Mul); nearest ×2 upsampling (Resize)
with a residual add; a ConvTranspose 2×2 stride 2 and a sigmoid head.

Checks, at batch 1 and 3 with 2 threads (oneDNN and the depthwise kernel both run threaded):
  - colossal-run's output equals onnxruntime's within 1e-4 of max|ref|;
  - the compiled IR (--emit=mlir) has every batch norm folded (no per-channel sub/div left) and
    at least 15 convs with a fused activation (every conv and the ConvTranspose).
Exit codes: 0 pass, 1 mismatch, 2 a tool failed.
"""
import argparse
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402


class PaddleHardSwish(torch.nn.Module):
    """x · relu6(x + 3) / 6 spelled out, as paddle2onnx exports hardswish."""

    def forward(self, x):
        return x * F.relu6(x + 3.0) / 6.0


def cbn(cin, cout, k, stride=1, groups=1, dilation=1, act=None, dims=2):
    conv = (torch.nn.Conv2d if dims == 2 else torch.nn.Conv1d)
    pad = tuple(dilation * (kk // 2) for kk in k) if isinstance(k, tuple) else dilation * (k // 2)
    bn = (torch.nn.BatchNorm2d if dims == 2 else torch.nn.BatchNorm1d)(cout)
    layers = [conv(cin, cout, k, stride, pad, dilation=dilation, groups=groups, bias=False), bn]
    if act is not None:
        layers.append(act)
    return torch.nn.Sequential(*layers)


class SE(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.reduce = torch.nn.Conv2d(c, c // 4, 1)
        self.expand = torch.nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(s))))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = cbn(3, 16, 3, stride=2, act=torch.nn.Hardswish())
        self.dw1 = cbn(16, 16, 3, groups=16, act=torch.nn.ReLU())
        self.se = SE(16)
        self.pw1 = cbn(16, 32, 1, act=torch.nn.ReLU6())
        self.dw2 = cbn(32, 32, (5, 5), stride=(2, 1), groups=32, act=PaddleHardSwish())
        self.dw3 = cbn(32, 32, 3, stride=2, groups=32, act=torch.nn.Hardswish())
        self.pw2 = cbn(32, 24, 1, act=torch.nn.ReLU())
        self.dil = cbn(24, 24, 3, dilation=2, act=torch.nn.ReLU())
        self.grp = cbn(24, 24, 3, groups=3, act=torch.nn.Sigmoid())
        self.lat = cbn(32, 24, 1, act=torch.nn.ReLU())
        self.seq1 = cbn(24, 24, 3, groups=24, act=torch.nn.ReLU(), dims=1)
        self.seq2 = cbn(24, 24, 1, act=torch.nn.Hardswish(), dims=1)
        self.up = torch.nn.ConvTranspose2d(24, 8, 2, stride=2)
        self.head = torch.nn.Conv2d(8, 1, 3, padding=1)

    def forward(self, x):
        x = self.pw1(self.se(self.dw1(self.stem(x))))       # [B, 32, H/2, W/2]
        a = self.dw2(x)                                       # [B, 32, H/4, W/2]
        b = self.pw2(self.dw3(a))                             # [B, 24, H/8, W/4]
        b = self.grp(self.dil(b))
        n, c, h, w = b.shape
        s = self.seq2(self.seq1(b.reshape(n, c, h * w))).reshape(n, c, h, w)
        up = F.interpolate(b + s, scale_factor=2.0, mode="nearest")   # [B, 24, H/4, W/2]
        y = up + self.lat(a)
        return torch.sigmoid(self.head(F.relu(self.up(y))))


def export(path):
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    net.eval()
    x = torch.randn(1, 3, 32, 48)
    # TrainingMode.PRESERVE on an eval-mode model keeps inference BatchNormalization nodes (EVAL
    # would fold them into the convs in the exporter), as paddle2onnx and others write them.
    torch.onnx.export(net, x, path, opset_version=14, input_names=["x"], output_names=["y"],
                      training=torch.onnx.TrainingMode.PRESERVE,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--opt")
    ap.add_argument("--run")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    try:
        opt, run = u.find_tool("colossal-opt", a.opt), u.find_tool("colossal-run", a.run)
        os.makedirs(a.workdir, exist_ok=True)
        model = os.path.join(a.workdir, "cnn.onnx")
        export(model)
        ok = True
        for batch in (1, 3):
            d = os.path.join(a.workdir, f"b{batch}")
            os.makedirs(d, exist_ok=True)
            spec = os.path.join(d, "spec.yaml")
            with open(spec, "w") as f:
                f.write(f"mode: inference\ninputs: {{x: [{batch}, 3, 32, 48]}}\n")
            x = os.path.join(d, "x.npy")
            np.save(x, np.random.default_rng(batch).standard_normal((batch, 3, 32, 48)).astype(np.float32))
            plan = os.path.join(d, "cnn.cplan")
            u.compile_plan(opt, model, spec, plan)
            mlir, _, _ = u.run([opt, model, "--spec", spec, "--emit=mlir"], "colossal-opt --emit=mlir")
            fused = len(re.findall(r"colossal\.conv(_transpose)? .*activation = ", mlir))
            leftover = len(re.findall(r"colossal\.(sub|div) ", mlir))
            print(f"batch {batch}: {fused} convs with a fused activation, {leftover} sub/div left")
            if fused < 15 or leftover:
                print("  MISMATCH: expected every batch norm folded and >= 15 fused activations")
                ok = False
            u.run_ort(model, {"x": x}, os.path.join(d, "ort"), threads=a.threads)
            u.run_plan(run, plan, {"x": x}, os.path.join(d, "colossal"), threads=a.threads)
            ok &= u.compare(u.npy_dir(os.path.join(d, "ort")), os.path.join(d, "colossal"), 1e-4)
    except u.ToolError as e:
        u.die(str(e))
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

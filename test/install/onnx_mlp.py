#!/usr/bin/python3
"""A small ONNX model made with python3-onnx alone (no PyTorch), for the installed-package tests.

    onnx_mlp.py make --out DIR      DIR/model.onnx, DIR/spec.yaml (inference, x [4, 16]),
                                    DIR/spec_dp2.yaml (the same on mesh {dp: 2}), DIR/x.npy and
                                    DIR/reference.npy (NumPy's probs for x)
    onnx_mlp.py check OUT.npy REF.npy   exit 0 when they agree within 1e-5 of max|REF|

The model: probs = Softmax(Relu(x @ W1 + b1) @ W2 + b2), x [batch, 16] with a dynamic batch, W1
[16, 32], W2 [32, 8], seeded weights; opset 17.
"""
import argparse
import os
import sys

import numpy as np


def make(out):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(17)
    w1 = rng.standard_normal((16, 32)).astype(np.float32) * 0.25
    b1 = rng.standard_normal(32).astype(np.float32) * 0.1
    w2 = rng.standard_normal((32, 8)).astype(np.float32) * 0.25
    b2 = rng.standard_normal(8).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1/MatMul"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1/Add"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2/MatMul"),
        helper.make_node("Add", ["h3", "b2"], ["logits"], name="fc2/Add"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 8])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnx_mlp.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(out, exist_ok=True)
    onnx.save(model, os.path.join(out, "model.onnx"))
    spec = "mode: inference\ninputs: {x: [4, 16]}\n"
    open(os.path.join(out, "spec.yaml"), "w").write(spec)
    open(os.path.join(out, "spec_dp2.yaml"), "w").write(spec + "mesh: {dp: 2}\n")
    x = rng.standard_normal((4, 16)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    logits = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    e = np.exp(logits - logits.max(-1, keepdims=True))
    np.save(os.path.join(out, "reference.npy"), (e / e.sum(-1, keepdims=True)).astype(np.float32))
    print(f"wrote {out}/model.onnx (opset 17, onnx {onnx.__version__}), spec.yaml, spec_dp2.yaml, x.npy, reference.npy")


def check(got_path, ref_path):
    got, ref = np.load(got_path), np.load(ref_path)
    if got.shape != ref.shape:
        print(f"{got_path}: shape {got.shape}, reference {ref.shape}  MISMATCH")
        return 1
    err = float(np.abs(got - ref).max()) / float(np.abs(ref).max())
    ok = err <= 1e-5
    print(f"{got_path}: {list(got.shape)}, max error {err:.2e} of max|reference|" + ("" if ok else "  MISMATCH"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--out", required=True)
    c = sub.add_parser("check")
    c.add_argument("got")
    c.add_argument("ref")
    args = ap.parse_args()
    if args.cmd == "make":
        make(args.out)
        return 0
    return check(args.got, args.ref)


if __name__ == "__main__":
    sys.exit(main())

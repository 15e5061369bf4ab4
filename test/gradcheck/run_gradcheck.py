#!/usr/bin/python3
"""Gradient checks of every VJP against PyTorch autograd in float64.

    /usr/bin/python3 test/gradcheck/run_gradcheck.py --opt colossal-opt --run colossal-run \
        --workdir DIR [--only NAME_REGEX] [--skip-blocks] [--json FILE] [--allow-missing-kernels]

For each case: a small ONNX model whose float operands are initializers (so `colossal.param`
arguments) computes y = op(...), and `loss = ReduceSum(y * R)` with a fixed random R. It is compiled
with the test-gradients pipeline

    func.func(canonicalize, fuse-norms, fuse-activations, fuse-attention, canonicalize, cse),
    colossal-test-gradients, func.func(canonicalize, cse)

so the plan's outputs are the loss and `grad:<param>` for every parameter; colossal-run (float32)
runs it, and every gradient is compared with torch.autograd on the same function in float64 (from
the same float32-rounded values): max |ours − torch| ≤ 1e-4 · max |torch| (+1e-6 absolute). Whole
blocks follow: an MLP block, a LayerNorm + causal attention block, a small residual CNN, and the
GPT-2 of examples/models with a cross-entropy (SoftmaxCrossEntropyLoss) output, all exported from
torch.

A case with `expect_error` checks the other side: a gradient that is not defined (ScatterElements
without a reduction and with duplicate indices) is refused with one compile error naming the ONNX
node.

Prints one line per case and a summary; exits 1 when any case fails. A case whose backward kernel
the given colossal-run lacks ("unknown op 'unary_grad'") is reported as SKIP, and fails the run too
(a check that did not run has not passed; ctest runs it against this build's colossal-run, which
has every kernel) unless --allow-missing-kernels says the binary is an older one.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
import zlib

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples", "models"))
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
from e2e_util import tensor_file_name  # noqa: E402  (colossal-run's output file names)

PIPELINE = ("builtin.module(func.func(canonicalize,colossal-fuse-norms,colossal-fuse-activations,"
            "colossal-fuse-attention,canonicalize,cse),colossal-test-gradients,func.func(canonicalize,cse))")
RTOL, ATOL = 1e-4, 1e-6
# Backward kernels (runtime/kernels/cpu/grad.cpp). A colossal-run built without one of them reports
# the cases that need it as SKIP rather than FAIL.
GRAD_KERNELS = {"softmax_grad", "log_softmax_grad", "layer_norm_grad", "rms_norm_grad", "unary_grad",
                "attention_grad", "gather_grad", "slice_grad", "conv_grad_weight", "pool_grad",
                "pad_grad", "resize_grad"}

torch.set_default_dtype(torch.float64)
warnings.filterwarnings("ignore", message="scatter_reduce\\(\\) is in beta")


class Case:
    """One gradient check: ONNX nodes producing 'Y' from `params` (float initializers, trained) and
    `consts` (Constant nodes), and the same function `fn(tensors) -> Y` in torch. With
    `expect_error` (a regex) the gradient is not defined: colossal-opt must fail with one `error:`
    line, matching it."""

    def __init__(self, name, covers, params, nodes, fn, consts=None, opset=17, expect_error=None):
        self.name, self.covers, self.params, self.nodes, self.fn = name, covers, params, nodes, fn
        self.consts, self.opset, self.expect_error = consts or {}, opset, expect_error


RNG = np.random.default_rng(1234)


def rnd(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def away(*shape, m=0.2):
    """Random values with |x| ≥ m (away from kinks and poles)."""
    x = rnd(*shape)
    return (np.sign(x) * (m + np.abs(x))).astype(np.float32)


def N(op, ins, out="Y", **attrs):
    return helper.make_node(op, ins, [out] if isinstance(out, str) else out, **attrs)


def unary_case(op, tfn, x=None, covers=None, opset=17, **attrs):
    x = rnd(3, 4) if x is None else x
    return Case(op.lower(), covers or op, {"X": x}, [N(op, ["X"], **attrs)], lambda t: tfn(t["X"]),
                opset=opset)


def build_cases():
    cs = []
    A, B = rnd(3, 4), rnd(4)
    for op, f in [("Add", torch.add), ("Sub", torch.sub), ("Mul", torch.mul)]:
        cs.append(Case(op.lower(), op, {"A": A, "B": B}, [N(op, ["A", "B"])],
                       lambda t, f=f: f(t["A"], t["B"])))
        cs.append(Case(op.lower() + "_bcast_col", op, {"A": rnd(3, 1), "B": rnd(2, 1, 4)},
                       [N(op, ["A", "B"])], lambda t, f=f: f(t["A"], t["B"])))
    cs.append(Case("div", "Div", {"A": A, "B": away(3, 1, m=0.5)}, [N("Div", ["A", "B"])],
                   lambda t: t["A"] / t["B"]))
    for e in [2.0, 3.0, 0.5, -1.5]:
        cs.append(Case(f"pow_const_{e}", "Pow", {"A": rnd(3, 4, lo=0.5, hi=1.5)},
                       [N("Pow", ["A", "E"])], lambda t, e=e: torch.pow(t["A"], e),
                       consts={"E": np.array(e, np.float32)}))
    cs.append(Case("pow_tensor", "Pow", {"A": rnd(3, 4, lo=0.5, hi=1.5), "E": rnd(4, lo=-2, hi=2)},
                   [N("Pow", ["A", "E"])], lambda t: torch.pow(t["A"], t["E"])))
    Bt = rnd(3, 4)
    Bt[0, 0], Bt[1, 2] = A[0, 0], A[1, 2]  # ties: split evenly, as torch.maximum/minimum
    for op, f in [("Min", torch.minimum), ("Max", torch.maximum)]:
        cs.append(Case(op.lower(), op, {"A": A, "B": Bt}, [N(op, ["A", "B"])],
                       lambda t, f=f: f(t["A"], t["B"])))
        cs.append(Case(op.lower() + "_bcast", op, {"A": A, "B": rnd(4)}, [N(op, ["A", "B"])],
                       lambda t, f=f: f(t["A"], t["B"])))
    cond = RNG.uniform(size=(3, 4)) > 0.5
    cs.append(Case("where", "Where", {"X": A, "Z": rnd(4)}, [N("Where", ["C", "X", "Z"])],
                   lambda t: torch.where(t["C"], t["X"], t["Z"]), consts={"C": cond}))

    cs += [
        unary_case("Neg", torch.neg),
        unary_case("Sqrt", torch.sqrt, rnd(3, 4, lo=0.3, hi=2)),
        unary_case("Reciprocal", torch.reciprocal, away(3, 4, m=0.5)),
        unary_case("Exp", torch.exp),
        unary_case("Log", torch.log, rnd(3, 4, lo=0.3, hi=2)),
        unary_case("Erf", torch.erf),
        unary_case("Tanh", torch.tanh),
        unary_case("Sigmoid", torch.sigmoid),
        unary_case("Relu", torch.relu, away(3, 4, m=0.05)),
        unary_case("Abs", torch.abs, away(3, 4, m=0.05)),
    ]
    X = rnd(3, 8, lo=-3, hi=3)
    cs.append(Case("silu", "SiLU (x*Sigmoid(x), fused)", {"X": X},
                   [N("Sigmoid", ["X"], "s"), N("Mul", ["X", "s"])], lambda t: F.silu(t["X"])))
    half, one, rs2 = (np.array(v, np.float32) for v in (0.5, 1.0, 1 / math.sqrt(2)))
    cs.append(Case("gelu_erf", "GELU erf form (fused)", {"X": X},
                   [N("Mul", ["X", "rs2"], "a"), N("Erf", ["a"], "b"), N("Add", ["b", "one"], "c"),
                    N("Mul", ["X", "c"], "d"), N("Mul", ["d", "half"])],
                   lambda t: F.gelu(t["X"]), consts={"half": half, "one": one, "rs2": rs2}))
    k0, k1 = np.array(math.sqrt(2 / math.pi), np.float32), np.array(0.044715, np.float32)
    cs.append(Case("gelu_tanh", "GELU tanh form (fused)", {"X": X},
                   [N("Mul", ["X", "X"], "x2"), N("Mul", ["X", "x2"], "x3"), N("Mul", ["x3", "k1"], "a"),
                    N("Add", ["X", "a"], "b"), N("Mul", ["b", "k0"], "c"), N("Tanh", ["c"], "d"),
                    N("Add", ["d", "one"], "e"), N("Mul", ["X", "e"], "f"), N("Mul", ["f", "half"])],
                   lambda t: F.gelu(t["X"], approximate="tanh"),
                   consts={"half": half, "one": one, "k0": k0, "k1": k1}))
    cs.append(Case("cast_f64", "Cast (float<->float)", {"X": A},
                   [N("Cast", ["X"], "d", to=TensorProto.DOUBLE), N("Mul", ["d", "d"], "e"),
                    N("Cast", ["e"], to=TensorProto.FLOAT)], lambda t: t["X"] * t["X"]))
    cs.append(Case("cast_int_operand", "Cast (integer operand: no gradient)", {"X": A},
                   [N("Cast", ["I"], "f", to=TensorProto.FLOAT), N("Mul", ["X", "f"])],
                   lambda t: t["X"] * t["I"], consts={"I": RNG.integers(-3, 4, size=(3, 4))}))

    S = rnd(2, 3, 5, lo=-2, hi=2)
    for op, f in [("Softmax", torch.softmax), ("LogSoftmax", torch.log_softmax)]:
        cs.append(Case(op.lower(), op, {"X": S}, [N(op, ["X"], axis=-1)], lambda t, f=f: f(t["X"], -1)))
        cs.append(Case(op.lower() + "_axis1", op, {"X": S}, [N(op, ["X"], axis=1)],
                       lambda t, f=f: f(t["X"], 1)))
    W, Bb = rnd(5, lo=0.5, hi=1.5), rnd(5)
    cs.append(Case("layer_norm", "LayerNormalization", {"X": S, "W": W, "Bb": Bb},
                   [N("LayerNormalization", ["X", "W", "Bb"], axis=-1, epsilon=1e-5)],
                   lambda t: F.layer_norm(t["X"], (5,), t["W"], t["Bb"], 1e-5)))
    cs.append(Case("layer_norm_2d", "LayerNormalization", {"X": S, "W": rnd(3, 5, lo=0.5, hi=1.5)},
                   [N("LayerNormalization", ["X", "W"], axis=1, epsilon=1e-5)],
                   lambda t: F.layer_norm(t["X"], (3, 5), t["W"], None, 1e-5)))
    eps = np.array(1e-6, np.float32)
    # Normalizations the importer decomposes into reductions and elementwise ops (ImportNN.cpp).
    Xn = rnd(3, 4, 5, 6, lo=-2, hi=2)
    gam, bet = rnd(4, lo=0.5, hi=1.5), rnd(4)
    rmean, rvar = rnd(4), rnd(4, lo=0.5, hi=1.5)
    cs.append(Case("batch_norm_train", "BatchNormalization (training_mode: batch statistics)",
                   {"X": Xn, "G": gam, "Bb": bet},
                   [N("BatchNormalization", ["X", "G", "Bb", "M", "Vr"], epsilon=1e-5, training_mode=1)],
                   lambda t: F.batch_norm(t["X"], None, None, t["G"], t["Bb"], training=True, eps=1e-5),
                   consts={"M": rmean, "Vr": rvar}, opset=15))
    cs.append(Case("batch_norm_eval", "BatchNormalization (running statistics)", {"X": Xn, "G": gam, "Bb": bet},
                   [N("BatchNormalization", ["X", "G", "Bb", "M", "Vr"], epsilon=1e-5)],
                   lambda t: F.batch_norm(t["X"], t["M"], t["Vr"], t["G"], t["Bb"], training=False, eps=1e-5),
                   consts={"M": rmean, "Vr": rvar}, opset=15))
    cs.append(Case("instance_norm", "InstanceNormalization", {"X": Xn, "G": gam, "Bb": bet},
                   [N("InstanceNormalization", ["X", "G", "Bb"], epsilon=1e-5)],
                   lambda t: F.instance_norm(t["X"], weight=t["G"], bias=t["Bb"], eps=1e-5)))
    cs.append(Case("group_norm", "GroupNormalization (2 groups)", {"X": Xn, "G": gam, "Bb": bet},
                   [N("GroupNormalization", ["X", "G", "Bb"], epsilon=1e-5, num_groups=2)],
                   lambda t: F.group_norm(t["X"], 2, t["G"], t["Bb"], eps=1e-5), opset=21))
    cs.append(Case("rms_norm", "RMSNorm (Llama pattern, fused)", {"X": S, "W": W},
                   [N("Pow", ["X", "two"], "p"), N("ReduceMean", ["p"], "m", axes=[-1], keepdims=1),
                    N("Add", ["m", "eps"], "a"), N("Sqrt", ["a"], "s"), N("Reciprocal", ["s"], "r"),
                    N("Mul", ["X", "r"], "n"), N("Mul", ["W", "n"])],
                   lambda t: t["W"] * (t["X"] * torch.rsqrt((t["X"] ** 2).mean(-1, keepdim=True) + 1e-6)),
                   consts={"two": np.array(2.0, np.float32), "eps": eps}, opset=17))

    R3 = rnd(2, 3, 4)
    for kd in (0, 1):  # ReduceSum takes axes as an input from opset 13, ReduceMean from 18
        cs.append(Case(f"reducesum_kd{kd}", "ReduceSum", {"X": R3}, [N("ReduceSum", ["X", "ax"], keepdims=kd)],
                       lambda t, kd=kd: torch.sum(t["X"], dim=(0, 2), keepdim=bool(kd)),
                       consts={"ax": np.array([0, 2], np.int64)}))
        cs.append(Case(f"reducemean_kd{kd}", "ReduceMean", {"X": R3},
                       [N("ReduceMean", ["X"], axes=[0, 2], keepdims=kd)],
                       lambda t, kd=kd: torch.mean(t["X"], dim=(0, 2), keepdim=bool(kd))))
    cs.append(Case("reduce_max", "ReduceMax", {"X": R3}, [N("ReduceMax", ["X"], axes=[1], keepdims=0)],
                   lambda t: torch.amax(t["X"], dim=1)))

    cs.append(Case("matmul_2d", "MatMul", {"A": rnd(3, 4), "B": rnd(4, 5)}, [N("MatMul", ["A", "B"])],
                   lambda t: t["A"] @ t["B"]))
    cs.append(Case("matmul_3d_2d", "MatMul (linear layer: gemm)", {"A": rnd(2, 3, 4), "B": rnd(4, 5)},
                   [N("MatMul", ["A", "B"])], lambda t: t["A"] @ t["B"]))
    cs.append(Case("matmul_batched", "MatMul (batched)", {"A": rnd(2, 3, 4), "B": rnd(2, 4, 5)},
                   [N("MatMul", ["A", "B"])], lambda t: t["A"] @ t["B"]))
    cs.append(Case("matmul_bcast", "MatMul (broadcast batch)", {"A": rnd(2, 1, 3, 4), "B": rnd(3, 4, 5)},
                   [N("MatMul", ["A", "B"])], lambda t: t["A"] @ t["B"]))
    cs.append(Case("matmul_2d_3d", "MatMul (2-D x batched)", {"A": rnd(3, 4), "B": rnd(2, 4, 5)},
                   [N("MatMul", ["A", "B"])], lambda t: t["A"] @ t["B"]))
    for ta in (0, 1):
        for tb in (0, 1):
            a = rnd(4, 3) if ta else rnd(3, 4)
            b = rnd(5, 4) if tb else rnd(4, 5)
            cs.append(Case(f"gemm_t{ta}{tb}", "Gemm", {"A": a, "B": b, "C": rnd(5)},
                           [N("Gemm", ["A", "B", "C"], alpha=0.7, beta=1.3, transA=ta, transB=tb)],
                           lambda t, ta=ta, tb=tb: 0.7 * ((t["A"].T if ta else t["A"]) @
                                                          (t["B"].T if tb else t["B"])) + 1.3 * t["C"]))

    cs.append(Case("reshape", "Reshape", {"X": R3}, [N("Reshape", ["X", "shp"])],
                   lambda t: t["X"].reshape(4, 6), consts={"shp": np.array([4, 6], np.int64)}))
    cs.append(Case("transpose", "Transpose", {"X": R3}, [N("Transpose", ["X"], perm=[2, 0, 1])],
                   lambda t: t["X"].permute(2, 0, 1)))
    idx = np.array([[1, 3, 1], [0, 9, 3]], np.int64)
    cs.append(Case("gather_embedding", "Gather (embedding, repeated ids)", {"E": rnd(10, 4)},
                   [N("Gather", ["E", "I"], axis=0)], lambda t: t["E"][t["I"]], consts={"I": idx}))
    cs.append(Case("gather_axis1_neg", "Gather (axis 1, negative index)", {"E": rnd(3, 5, 2)},
                   [N("Gather", ["E", "I"], axis=1)], lambda t: t["E"][:, [4, 0, 4]],
                   consts={"I": np.array([-1, 0, 4], np.int64)}))
    cs.append(Case("slice", "Slice (steps, negative step)", {"X": rnd(6, 7)},
                   [N("Slice", ["X", "st", "en", "ax", "sp"])],
                   lambda t: t["X"][1:5:2][:, [6, 4, 2]],  # rows 1, 3; columns 6, 4, 2
                   consts={"st": np.array([1, 6], np.int64), "en": np.array([5, 0], np.int64),
                           "ax": np.array([0, 1], np.int64), "sp": np.array([2, -2], np.int64)}))
    cs.append(Case("concat", "Concat", {"A": rnd(2, 3), "B": rnd(2, 1), "C": rnd(2, 4)},
                   [N("Concat", ["A", "B", "C"], axis=1)], lambda t: torch.cat([t["A"], t["B"], t["C"]], 1)))
    cs.append(Case("split", "Split", {"X": rnd(4, 6)},
                   [N("Split", ["X", "sz"], ["p", "q", "r"], axis=1), N("Mul", ["p", "r"])],
                   lambda t: t["X"][:, 0:2] * t["X"][:, 4:6], consts={"sz": np.array([2, 2, 2], np.int64)}))
    cs.append(Case("expand", "Expand", {"X": rnd(3, 1)}, [N("Expand", ["X", "shp"])],
                   lambda t: t["X"].expand(2, 3, 4), consts={"shp": np.array([2, 3, 4], np.int64)}))
    for upper in (0, 1):
        cs.append(Case(f"trilu_upper{upper}", "Trilu", {"X": rnd(2, 4, 5)},
                       [N("Trilu", ["X", "k"], upper=upper)],
                       lambda t, u=upper: torch.triu(t["X"], 1) if u else torch.tril(t["X"], 1),
                       consts={"k": np.array(1, np.int64)}))

    tgt = np.array([2, 0, -100, 4, 1, 2], np.int64)
    wts = rnd(5, lo=0.5, hi=2)
    for red in ("mean", "sum", "none"):
        cs.append(Case(f"nll_loss_{red}", "NegativeLogLikelihoodLoss", {"X": rnd(6, 5)},
                       [N("NegativeLogLikelihoodLoss", ["X", "T"], reduction=red, ignore_index=-100)],
                       lambda t, r=red: F.nll_loss(t["X"], t["T"], reduction=r, ignore_index=-100),
                       consts={"T": tgt}))
    cs.append(Case("nll_loss_weight_mean", "NegativeLogLikelihoodLoss (weight)", {"X": rnd(6, 5)},
                   [N("NegativeLogLikelihoodLoss", ["X", "T", "w"], reduction="mean", ignore_index=-100)],
                   lambda t: F.nll_loss(t["X"], t["T"], weight=t["w"], reduction="mean", ignore_index=-100),
                   consts={"T": tgt, "w": wts}))
    cs.append(Case("nll_loss_3d", "NegativeLogLikelihoodLoss ([N, C, d])", {"X": rnd(2, 5, 3)},
                   [N("NegativeLogLikelihoodLoss", ["X", "T"], reduction="mean")],
                   lambda t: F.nll_loss(t["X"], t["T"]), consts={"T": np.array([[0, 4, 2], [1, 1, 3]])}))
    cs.append(Case("softmax_cross_entropy", "SoftmaxCrossEntropyLoss", {"X": rnd(6, 5, lo=-2, hi=2)},
                   [N("SoftmaxCrossEntropyLoss", ["X", "T"], reduction="mean", ignore_index=-100)],
                   lambda t: F.cross_entropy(t["X"], t["T"], ignore_index=-100), consts={"T": tgt}))

    # The `unary` fn table.
    u = lambda lo, hi: rnd(3, 4, lo=lo, hi=hi)  # noqa: E731
    cs += [
        unary_case("Sin", torch.sin, covers="unary sin"),
        unary_case("Cos", torch.cos, covers="unary cos"),
        unary_case("Tan", torch.tan, covers="unary tan"),
        unary_case("Atan", torch.atan, covers="unary atan"),
        unary_case("Asin", torch.asin, u(-0.8, 0.8), covers="unary asin"),
        unary_case("Acos", torch.acos, u(-0.8, 0.8), covers="unary acos"),
        unary_case("Sinh", torch.sinh, covers="unary sinh"),
        unary_case("Cosh", torch.cosh, covers="unary cosh"),
        unary_case("Asinh", torch.asinh, covers="unary asinh"),
        unary_case("Acosh", torch.acosh, u(1.2, 3), covers="unary acosh"),
        unary_case("Atanh", torch.atanh, u(-0.8, 0.8), covers="unary atanh"),
        unary_case("Softplus", F.softplus, u(-3, 3), covers="unary softplus"),
        unary_case("Softsign", F.softsign, u(-3, 3), covers="unary softsign"),
        unary_case("Elu", lambda x: F.elu(x, 0.7), away(3, 4), covers="unary elu", alpha=0.7),
        unary_case("Celu", lambda x: F.celu(x, 0.7), away(3, 4), covers="unary celu", alpha=0.7),
        unary_case("Selu", F.selu, away(3, 4), covers="unary selu"),
        unary_case("LeakyRelu", lambda x: F.leaky_relu(x, 0.2), away(3, 4), covers="unary leaky_relu",
                   alpha=0.2),
        unary_case("ThresholdedRelu", lambda x: torch.where(x > 0.3, x, torch.zeros_like(x)),
                   u(-1, 1), covers="unary thresholded_relu", alpha=0.3),
        unary_case("HardSigmoid", lambda x: torch.clamp(0.3 * x + 0.4, 0, 1), u(-4, 4),
                   covers="unary hard_sigmoid", alpha=0.3, beta=0.4),
        unary_case("Shrink", lambda x: torch.where(x < -0.5, x + 0.1, torch.where(x > 0.5, x - 0.1,
                                                                                   torch.zeros_like(x))),
                   u(-1, 1), covers="unary shrink", lambd=0.5, bias=0.1),
        unary_case("HardSwish", F.hardswish, u(-4, 4), covers="unary hard_swish"),
        unary_case("Mish", F.mish, u(-3, 3), covers="unary mish", opset=18),
        unary_case("Floor", torch.floor, covers="unary floor (zero)"),
        unary_case("Sign", torch.sign, covers="unary sign (zero)"),
    ]

    cs += cnn_cases()
    cs += indexing_cases()
    cs += binary_cases()

    # A data-dependent If (docs/misc-ops.md): both branches are imported and each output is a
    # where, so the gradient reaches the taken branch's operands only. sum(X) picks the branch.
    def branch(name, nodes):
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, [3, 4])])
    if_nodes = [N("ReduceSum", ["X"], "s", keepdims=0), N("Greater", ["s", "zero"], "c"),
                N("If", ["c"], then_branch=branch("then", [N("MatMul", ["X", "W"], "then")]),
                  else_branch=branch("else", [N("Exp", ["X"], "ex"), N("MatMul", ["ex", "W"], "else")]))]
    for taken, sign in (("then", 1), ("else", -1)):
        cs.append(Case(f"if_data_{taken}", f"If (data-dependent, {taken} taken)",
                       {"X": (sign * rnd(3, 4, lo=0.1, hi=1)).astype(np.float32), "W": rnd(4, 4)},
                       if_nodes, lambda t: torch.where(t["X"].sum() > 0, t["X"] @ t["W"], torch.exp(t["X"]) @ t["W"]),
                       consts={"zero": np.array(0, np.float32)}))
    return cs


def indexing_cases():
    """GatherElements, ScatterElements (and Scatter), ScatterND and CumSum. torch's gather and
    scatter take no negative indices: the reference gets them normalized, the model as given.
    Without a reduction the indices are distinct (ONNX leaves duplicates undefined); with one,
    they repeat, and max/min have ties (an update equal to data or to another update), which
    torch.scatter_reduce(include_self=True) splits evenly."""
    cs = []

    def norm(idx, n):
        return torch.as_tensor(np.where(idx < 0, idx + n, idx))

    def gather_el(name, data, idx, axis, covers):
        ax = axis % data.ndim
        cs.append(Case(name, covers, {"D": data}, [N("GatherElements", ["D", "I"], axis=axis)],
                       lambda t: torch.gather(t["D"], ax, norm(idx, data.shape[ax])), consts={"I": idx}))

    gather_el("gather_elements_axis0", rnd(4, 3), np.array([[1, 3, 0], [1, 0, 0]]), 0,
              "GatherElements (axis 0, repeated indices)")
    gather_el("gather_elements_neg_axis", rnd(2, 3, 5), RNG.integers(-5, 5, size=(2, 3, 4)), -1,
              "GatherElements (axis -1, negative and repeated indices)")
    gather_el("gather_elements_smaller", rnd(3, 5, 2), RNG.integers(0, 5, size=(2, 4, 2)), 1,
              "GatherElements (axis 1, indices smaller than data)")

    def scatter_ref(data, idx, upd, ax, red):
        idx = norm(idx, data.shape[ax])
        if red == "none":
            return data.scatter(ax, idx, upd)
        if red == "add":
            return data.scatter_add(ax, idx, upd)
        return data.scatter_reduce(ax, idx, upd, reduce={"mul": "prod", "max": "amax", "min": "amin"}[red],
                                   include_self=True)

    def scatter_el(name, data, idx, upd, axis, red, covers, op="ScatterElements", opset=18):
        ax = axis % data.ndim
        attrs = {"axis": axis, **({"reduction": red} if op == "ScatterElements" else {})}
        cs.append(Case(name, covers, {"D": data, "U": upd}, [N(op, ["D", "I", "U"], **attrs)],
                       lambda t: scatter_ref(t["D"], idx, t["U"], ax, red), consts={"I": idx}, opset=opset))

    def ties(data, upd, idx, ax):
        """Sets some updates equal to the data element they land on or to an earlier update there."""
        upd = upd.copy()
        flat = [tuple(i) for i in np.ndindex(*idx.shape)]
        landed = {}
        for n, i in enumerate(flat):
            j = list(i)
            j[ax] = idx[i] % data.shape[ax]
            j = tuple(j)
            if n % 3 == 0:
                upd[i] = landed.get(j, data[j])
            landed.setdefault(j, upd[i])
        return upd

    # distinct target per column (axis 0; -4 is row 0)
    scatter_el("scatter_elements_none", rnd(4, 3), np.array([[1, 0, 3], [3, 2, -4]]), rnd(2, 3), 0, "none",
               "ScatterElements (no reduction, distinct indices)")
    scatter_el("scatter_elements_none_neg_axis", rnd(2, 3, 5), np.array([[[4, 0, -2]], [[1, 2, 3]]]),
               rnd(2, 1, 3), -1, "none", "ScatterElements (axis -1, distinct indices, smaller updates)")
    scatter_el("scatter_legacy", rnd(3, 4), np.array([[0, 2], [2, 1]]), rnd(2, 2), 1, "none",
               "Scatter (opset 10, distinct indices)", op="Scatter", opset=10)
    dup = np.array([[1, 1, -1], [3, 1, 0], [1, 2, 0]])  # rows 1 and 3 (= -1) of column 2 receive twice
    # Duplicates without a reduction: which update lands is undefined, so no gradient; one error
    # that names the node (the torch function only gives Y's shape).
    cs.append(Case("scatter_elements_none_duplicates", "ScatterElements (no reduction, duplicates: refused)",
                   {"D": rnd(4, 3), "U": rnd(3, 3)},
                   [N("ScatterElements", ["D", "I", "U"], name="write_rows", axis=0)],
                   lambda t: scatter_ref(t["D"], dup, t["U"], 0, "add"), consts={"I": dup}, opset=18,
                   expect_error=r"node 'write_rows': autodiff: 'colossal.scatter_elements' \(ONNX node "
                                r"'write_rows'\) with reduction 'none' writes data position \[1, 1\] from "
                                r"more than one update"))
    scatter_el("scatter_elements_add", rnd(4, 3), dup, rnd(3, 3), 0, "add",
               "ScatterElements add (duplicate indices)")
    scatter_el("scatter_elements_add_neg_axis", rnd(2, 5, 3), RNG.integers(-3, 3, size=(2, 4, 3)), rnd(2, 4, 3),
               -1, "add", "ScatterElements add (axis -1, duplicates)")
    u = rnd(3, 3, lo=0.5, hi=1.5) * np.sign(rnd(3, 3))
    u[0, 0] = u[2, 1] = 0.0  # a zero update alone at its target and one sharing it
    d = rnd(4, 3)
    d[0, 2] = 0.0  # a zero data element that receives updates
    scatter_el("scatter_elements_mul", d, dup, u.astype(np.float32), 0, "mul",
               "ScatterElements mul (duplicates, zero updates and data)")
    d, up = rnd(4, 3), rnd(3, 3)
    scatter_el("scatter_elements_max", d, dup, ties(d, up, dup, 0), 0, "max",
               "ScatterElements max (duplicates, ties)")
    d, up = rnd(3, 4, 2), rnd(3, 3, 2)
    idx = RNG.integers(-4, 4, size=(3, 3, 2))
    scatter_el("scatter_elements_min_neg_axis", d, idx, ties(d, up, idx, 1), -2, "min",
               "ScatterElements min (axis -2, duplicates, ties)")

    def scatter_nd_ref(data, idx, upd, red):
        """ScatterND as ScatterElements on rows: data [R, S] (R = Π D[:m]), one row per tuple."""
        m = idx.shape[-1]
        lead, rest = data.shape[:m], data.shape[m:]
        tup = np.where(idx < 0, idx + np.array(lead), idx).reshape(-1, m)
        rows = torch.as_tensor(np.ravel_multi_index(tup.T, lead))
        s = int(np.prod(rest))
        d2, u2 = data.reshape(-1, s), upd.reshape(-1, s)
        y = scatter_ref(d2, rows[:, None].expand(-1, s).numpy(), u2, 0, red)
        return y.reshape(data.shape)

    def scatter_nd(name, data, idx, upd, red, covers):
        cs.append(Case(name, covers, {"D": data, "U": upd}, [N("ScatterND", ["D", "I", "U"], reduction=red)],
                       lambda t: scatter_nd_ref(t["D"], idx, t["U"], red), consts={"I": idx}, opset=18))

    scatter_nd("scatter_nd_none_rows", rnd(4, 3), np.array([[-1], [0]]), rnd(2, 3), "none",
               "ScatterND (rows, negative index, distinct)")
    scatter_nd("scatter_nd_none_elements", rnd(3, 4), np.array([[[0, 1], [2, -1]], [[1, 1], [2, 0]]]), rnd(2, 2),
               "none", "ScatterND (element tuples, distinct)")
    scatter_nd("scatter_nd_add", rnd(3, 2, 4), np.array([[0], [2], [-3]]), rnd(3, 2, 4), "add",
               "ScatterND add (duplicate slices)")
    idx = np.array([[1, 0], [2, 1], [1, 0], [0, 2]])
    u = rnd(4, 5, lo=0.5, hi=1.5)
    u[0, 1] = u[2, 3] = u[0, 4] = u[2, 4] = 0.0  # one zero per slot, or two at [1, 0, 4]
    scatter_nd("scatter_nd_mul", rnd(3, 3, 5), idx, u, "mul", "ScatterND mul (duplicates, zero updates)")
    d, up = rnd(3, 4), rnd(3, 4)
    up[1] = d[2]        # a tie with data
    up[2, :2] = up[0, :2]  # a tie between updates
    up[2, 2:] = d[0, 2:]
    scatter_nd("scatter_nd_max", d, np.array([[0], [2], [0]]), up, "max", "ScatterND max (duplicates, ties)")
    scatter_nd("scatter_nd_min", d, np.array([[0], [2], [0]]), up, "min", "ScatterND min (duplicates, ties)")

    def cumsum(name, x, axis, exclusive=0, reverse=0):
        def fn(t):
            v = t["X"].flip(axis) if reverse else t["X"]
            y = v.cumsum(axis)
            if exclusive:
                y = y - v
            return y.flip(axis) if reverse else y
        cs.append(Case(name, f"CumSum (axis {axis}{', exclusive' if exclusive else ''}{', reverse' if reverse else ''})",
                       {"X": x}, [N("CumSum", ["X", "ax"], exclusive=exclusive, reverse=reverse)], fn,
                       consts={"ax": np.array(axis, np.int64)}, opset=14))

    cumsum("cumsum", rnd(3, 5), 1)
    cumsum("cumsum_1d", rnd(7), 0)
    cumsum("cumsum_exclusive_neg_axis", rnd(2, 3, 4), -1, exclusive=1)
    cumsum("cumsum_reverse", rnd(4, 3, 2), 0, reverse=1)
    cumsum("cumsum_exclusive_reverse", rnd(2, 5, 3), -2, exclusive=1, reverse=1)

    # GatherND (batch_dims 0): a scatter_nd add of the cotangent, so slices read twice sum.
    def gather_nd_ref(data, idx):
        idx = np.where(idx < 0, idx + np.array(data.shape[:idx.shape[-1]]), idx)
        flat = idx.reshape(-1, idx.shape[-1])
        rows = [data[tuple(int(v) for v in k)] for k in flat]
        return torch.stack(rows).reshape(*idx.shape[:-1], *data.shape[idx.shape[-1]:])

    def gather_nd(name, data, idx, covers):
        cs.append(Case(name, covers, {"D": data}, [N("GatherND", ["D", "I"])],
                       lambda t: gather_nd_ref(t["D"], idx), consts={"I": idx}, opset=13))

    gather_nd("gather_nd_rows", rnd(4, 3), np.array([[1], [3], [1], [-4]]), "GatherND (rows, repeated and negative)")
    gather_nd("gather_nd_elements", rnd(3, 4, 2), np.array([[[0, 1], [2, 3]], [[0, 1], [1, -1]]]),
              "GatherND (index pairs into the first two dims, repeated)")
    cs.append(Case("gather_nd_batch_dims", "GatherND with batch_dims 1 (no gradient yet: one error)",
                   {"D": rnd(2, 3, 4)}, [N("GatherND", ["D", "I"], batch_dims=1)], lambda t: t["D"],
                   consts={"I": np.array([[[1]], [[2]]])}, opset=13,
                   expect_error=r"'colossal.gather_nd' .*with batch_dims 1 has no gradient yet"))

    # TopK: the values' cotangent goes back to the positions the indices name.
    def topk(name, x, k, axis, largest, covers):
        ax = axis % x.ndim
        cs.append(Case(name, covers, {"X": x},
                       [N("TopK", ["X", "K"], out=["Y", "Idx"], axis=axis, largest=largest, sorted=1)],
                       lambda t: torch.topk(t["X"], k, dim=ax, largest=bool(largest), sorted=True).values,
                       consts={"K": np.array([k], np.int64)}, opset=11))

    topk("topk_largest", rnd(3, 6), 3, -1, 1, "TopK (largest, last axis)")
    topk("topk_smallest_axis0", rnd(5, 4), 2, 0, 0, "TopK (smallest, axis 0)")
    topk("topk_all", rnd(2, 3, 4), 4, 2, 1, "TopK (k = the whole axis: a permutation)")
    return cs


def binary_cases():
    """The float functions of the `binary` table: Mod (fmod = 0, NumPy's sign of the divisor,
    and fmod = 1, C's), PRelu (the slope broadcast to x). Operands lie away from the jumps."""
    cs = []
    a, b = rnd(3, 4, lo=-3, hi=3), away(4, m=0.4)
    cs.append(Case("mod", "Mod (fmod=0; binary mod)", {"A": a, "B": b}, [N("Mod", ["A", "B"])],
                   lambda t: torch.remainder(t["A"], t["B"]), opset=13))
    cs.append(Case("mod_bcast", "Mod (fmod=0, both broadcast)", {"A": rnd(3, 1, lo=-3, hi=3), "B": away(2, 1, 4, m=0.4)},
                   [N("Mod", ["A", "B"])], lambda t: torch.remainder(t["A"], t["B"]), opset=13))
    cs.append(Case("fmod", "Mod (fmod=1; binary fmod)", {"A": a, "B": away(3, 1, m=0.4)},
                   [N("Mod", ["A", "B"], fmod=1)], lambda t: torch.fmod(t["A"], t["B"]), opset=13))
    x = away(2, 3, 4, 5, m=0.05)
    cs.append(Case("prelu_channel", "PRelu (slope [C, 1, 1]; binary prelu)", {"X": x, "S": rnd(3, 1, 1)},
                   [N("PRelu", ["X", "S"])], lambda t: torch.where(t["X"] < 0, t["S"] * t["X"], t["X"]), opset=16))
    cs.append(Case("prelu_full", "PRelu (slope of x's shape)", {"X": away(3, 4, m=0.05), "S": rnd(3, 4)},
                   [N("PRelu", ["X", "S"])], lambda t: torch.where(t["X"] < 0, t["S"] * t["X"], t["X"]), opset=16))
    return cs


def onnx_pads_to_torch(p):
    """ONNX pads [b0, .., b(n-1), e0, .., e(n-1)] over the spatial dims as F.pad's
    (last dim first, begin then end)."""
    n = len(p) // 2
    out = []
    for i in reversed(range(n)):
        out += [p[i], p[n + i]]
    return tuple(out)


def cnn_cases():
    """Conv, ConvTranspose, MaxPool, AveragePool, Pad and Resize (the CNN family's VJPs)."""
    cs = []

    def conv(name, x, w, b=None, strides=None, pads=None, dilations=None, group=1, covers="Conv"):
        n = x.ndim - 2
        strides, dilations = strides or [1] * n, dilations or [1] * n
        pads = pads or [0] * (2 * n)
        params = {"X": x, "W": w, **({"B": b} if b is not None else {})}
        f = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]

        def fn(t):
            xp = F.pad(t["X"], onnx_pads_to_torch(pads))
            return f(xp, t["W"], t.get("B"), stride=strides, dilation=dilations, groups=group)
        cs.append(Case(name, covers, params,
                       [N("Conv", list(params), strides=strides, pads=pads, dilations=dilations, group=group)], fn))

    conv("conv2d", rnd(2, 3, 6, 6), rnd(4, 3, 3, 3), rnd(4), pads=[1, 1, 1, 1])
    conv("conv2d_group_stride_dilation", rnd(2, 4, 7, 8), rnd(6, 2, 3, 2), rnd(6), strides=[2, 3],
         pads=[1, 0, 2, 1], dilations=[2, 1], group=2, covers="Conv (groups, strides, dilations, asymmetric pads)")
    conv("conv2d_depthwise", rnd(2, 4, 5, 5), rnd(4, 1, 3, 3), None, strides=[2, 2], pads=[1, 1, 1, 1],
         group=4, covers="Conv (depthwise, stride 2, no bias)")
    conv("conv2d_depthwise_multiplier", rnd(2, 3, 7, 8), rnd(6, 1, 3, 2), rnd(6), strides=[1, 2],
         pads=[2, 1, 2, 0], dilations=[2, 2], group=3, covers="Conv (depthwise x2 multiplier, dilated, strided)")
    conv("conv2d_pointwise", rnd(2, 5, 3, 4), rnd(3, 5, 1, 1), rnd(3), covers="Conv (1x1)")
    conv("conv1d", rnd(2, 3, 9), rnd(5, 3, 4), rnd(5), strides=[2], pads=[1, 2], covers="Conv (1-D)")
    conv("conv3d", rnd(1, 2, 4, 5, 4), rnd(3, 2, 2, 3, 2), rnd(3), strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 0],
         covers="Conv (3-D)")
    # 3-D: the im2col and depthwise loops of conv_grad_weight (1-D and 2-D convs run on oneDNN).
    conv("conv3d_depthwise", rnd(2, 3, 4, 5, 6), rnd(6, 1, 2, 3, 3), None, strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 2],
         dilations=[2, 1, 1], group=3, covers="Conv (3-D depthwise x2, strided, dilated)")

    def conv_t(name, x, w, b, strides, pads, output_padding, dilations=None, group=1, covers="ConvTranspose"):
        n = x.ndim - 2
        dilations = dilations or [1] * n
        params = {"X": x, "W": w, **({"B": b} if b is not None else {})}
        f = {1: F.conv_transpose1d, 2: F.conv_transpose2d}[n]
        cs.append(Case(name, covers, params,
                       [N("ConvTranspose", list(params), strides=strides, pads=pads + pads,
                          output_padding=output_padding, dilations=dilations, group=group)],
                       lambda t: f(t["X"], t["W"], t.get("B"), stride=strides, padding=pads,
                                   output_padding=output_padding, dilation=dilations, groups=group)))

    conv_t("conv_transpose2d", rnd(2, 4, 3, 3), rnd(4, 3, 3, 3), rnd(3), [2, 2], [1, 1], [1, 1],
           covers="ConvTranspose (stride 2, output_padding)")
    conv_t("conv_transpose2d_group_dilation", rnd(1, 4, 3, 4), rnd(4, 2, 2, 3), None, [1, 2], [0, 1], [0, 1],
           dilations=[1, 2], group=2, covers="ConvTranspose (groups, dilations)")
    conv_t("conv_transpose2d_depthwise", rnd(2, 4, 3, 4), rnd(4, 1, 3, 3), rnd(4), [2, 2], [1, 0], [1, 0],
           group=4, covers="ConvTranspose (depthwise, stride 2)")
    conv_t("conv_transpose1d", rnd(2, 3, 5), rnd(3, 2, 4), rnd(2), [3], [1], [2], covers="ConvTranspose (1-D)")

    def pool(name, op, x, fn, covers, opset=17, **attrs):
        cs.append(Case(name, covers, {"X": x}, [N(op, ["X"], **attrs)], lambda t: fn(t["X"]), opset=opset))

    # Distinct values (a permutation): no ties, so the argmax is unambiguous.
    def distinct(*shape):
        return (RNG.permutation(int(np.prod(shape))).reshape(shape) / np.prod(shape) - 0.5).astype(np.float32)
    pool("maxpool2d", "MaxPool", distinct(2, 3, 6, 6), lambda x: F.max_pool2d(x, 2, 2), "MaxPool 2x2/2",
         kernel_shape=[2, 2], strides=[2, 2])
    pool("maxpool2d_overlap_pad", "MaxPool", distinct(2, 2, 7, 7), lambda x: F.max_pool2d(x, 3, 2, 1),
         "MaxPool 3x3/2 pad 1 (overlapping windows)", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    pool("maxpool2d_ceil_dilation", "MaxPool", distinct(1, 2, 8, 7),
         lambda x: F.max_pool2d(x, 2, 2, 0, dilation=2, ceil_mode=True), "MaxPool (dilation 2, ceil_mode)",
         kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2], ceil_mode=1)
    pool("maxpool1d", "MaxPool", distinct(2, 3, 9), lambda x: F.max_pool1d(x, 3, 2, 1), "MaxPool (1-D)",
         kernel_shape=[3], strides=[2], pads=[1, 1])
    # MaxPool's Indices output feeding MaxUnpool (SegNet's decoder): max_pool_with_indices and
    # max_unpool, the second into a larger output (the unpooled tensor at its start).
    for name, shape, tail in (("maxpool_indices_unpool", None, lambda y: y),
                              ("maxpool_indices_unpool_larger", [2, 3, 7, 7], lambda y: F.pad(y, (0, 1, 0, 1)))):
        consts = {"os": np.array(shape, np.int64)} if shape else {}
        cs.append(Case(name, "MaxPool (Indices) + MaxUnpool" + (" (output_shape)" if shape else ""),
                       {"X": distinct(2, 3, 6, 6)},
                       [N("MaxPool", ["X"], ["v", "i"], kernel_shape=[2, 2], strides=[2, 2]),
                        N("MaxUnpool", ["v", "i"] + (["os"] if shape else []), kernel_shape=[2, 2], strides=[2, 2])],
                       lambda t, tail=tail: tail(F.max_unpool2d(*F.max_pool2d(t["X"], 2, 2, return_indices=True), 2, 2)),
                       consts=consts))
    pool("avgpool2d", "AveragePool", rnd(2, 3, 6, 6), lambda x: F.avg_pool2d(x, 2, 2), "AveragePool 2x2/2",
         kernel_shape=[2, 2], strides=[2, 2])
    for cip in (0, 1):
        pool(f"avgpool2d_pad_cip{cip}", "AveragePool", rnd(2, 2, 7, 7),
             lambda x, cip=cip: F.avg_pool2d(x, 3, 2, 1, count_include_pad=bool(cip)),
             f"AveragePool 3x3/2 pad 1, count_include_pad={cip}", kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1], count_include_pad=cip)
    pool("avgpool2d_ceil_cip1", "AveragePool", rnd(1, 2, 6, 7),
         lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True),
         "AveragePool (ceil_mode, count_include_pad=1)", kernel_shape=[3, 3], strides=[2, 2],
         pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)
    pool("avgpool1d", "AveragePool", rnd(2, 3, 8), lambda x: F.avg_pool1d(x, 3, 2), "AveragePool (1-D)",
         kernel_shape=[3], strides=[2])
    pool("lppool2d_p2", "LpPool", away(2, 3, 6, 6), lambda x: F.lp_pool2d(x, 2, 3, 2), "LpPool p=2 3x3/2",
         opset=18, kernel_shape=[3, 3], strides=[2, 2], p=2)
    # torch's lp_pool sums x^p (not |x|^p): positive inputs for an odd p.
    pool("lppool2d_p3", "LpPool", rnd(2, 3, 6, 7, lo=0.2, hi=1.5), lambda x: F.lp_pool2d(x, 3, 2, 2),
         "LpPool p=3 2x2/2", opset=18, kernel_shape=[2, 2], strides=[2, 2], p=3)
    pool("global_avgpool", "GlobalAveragePool", rnd(2, 3, 4, 5), lambda x: x.mean((2, 3), keepdim=True),
         "GlobalAveragePool")

    def pad(name, x, pads, mode, tmode, value=None, opset=17):
        consts = {"P": np.array(pads, np.int64)}
        ins = ["X", "P"]
        if value is not None:
            consts["V"] = np.array(value, np.float32)
            ins.append("V")
        r = x.ndim  # the batch and channel dims are not padded: F.pad takes the spatial dims
        tp = onnx_pads_to_torch(pads[2:r] + pads[r + 2:])
        kw = {"value": value or 0.0} if tmode == "constant" else {}
        cs.append(Case(name, f"Pad ({mode})", {"X": x}, [N("Pad", ins, mode=mode)],
                       lambda t: F.pad(t["X"], tuple(tp), mode=tmode, **kw), consts=consts, opset=opset))

    pad("pad_constant", rnd(2, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1], "constant", "constant", value=0.5)
    pad("pad_constant_crop", rnd(2, 3, 4, 5), [0, 0, -1, 1, 0, 0, 1, -2], "constant", "constant")
    pad("pad_reflect", rnd(2, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 3], "reflect", "reflect")
    pad("pad_edge", rnd(2, 3, 4, 5), [0, 0, 2, 1, 0, 0, 1, 3], "edge", "replicate")
    pad("pad_wrap", rnd(2, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1], "wrap", "circular", opset=19)

    def resize(name, x, scales, fn, covers, **attrs):
        cs.append(Case(name, covers, {"X": x}, [N("Resize", ["X", "", "S"], **attrs)], lambda t: fn(t["X"]),
                       consts={"S": np.array(scales, np.float32)}, opset=13))

    X = rnd(2, 3, 4, 5)
    resize("resize_nearest_x2", X, [1, 1, 2, 2], lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
           "Resize nearest x2 (Upsample)", mode="nearest", coordinate_transformation_mode="asymmetric",
           nearest_mode="floor")
    resize("resize_nearest_x1.5", X, [1, 1, 1.5, 1.5],
           lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"), "Resize nearest x1.5",
           mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    resize("resize_linear_x2", X, [1, 1, 2, 2],
           lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
           "Resize linear x2 (half_pixel)", mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
    resize("resize_linear_down", rnd(2, 3, 8, 6), [1, 1, 0.5, 0.5],
           lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False),
           "Resize linear x0.5", mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
    resize("resize_linear_align_corners", X, [1, 1, 2, 2],
           lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
           "Resize linear x2 (align_corners)", mode="linear", coordinate_transformation_mode="align_corners")
    resize("resize_cubic_x2", X, [1, 1, 2, 2],
           lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False),
           "Resize cubic x2 (A = -0.75)", mode="cubic", coordinate_transformation_mode="pytorch_half_pixel",
           cubic_coeff_a=-0.75)
    return cs


# --- Whole blocks, exported from torch -------------------------------------------------------

class LossWrap(nn.Module):
    """loss = Σ f(x) ⊙ R for a module f (R a fixed buffer), or f's own loss."""

    def __init__(self, f, out_shape=None, seed=0):
        super().__init__()
        self.f = f
        if out_shape is not None:
            g = torch.Generator().manual_seed(seed)
            self.register_buffer("R", torch.rand(out_shape, generator=g) * 2 - 1)
        else:
            self.R = None

    def forward(self, *args):
        y = self.f(*args)
        return y if self.R is None else (y * self.R).sum()


class MLPBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        from gpt2 import GPT2Config, MLP
        self.ln = nn.LayerNorm(d)
        self.mlp = MLP(GPT2Config(n_embd=d))

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class AttnBlock(nn.Module):
    def __init__(self, d, heads, T):
        super().__init__()
        from gpt2 import CausalSelfAttention, GPT2Config
        self.ln = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(GPT2Config(n_embd=d, n_head=heads, block_size=T))

    def forward(self, x):
        return x + self.attn(self.ln(x))


class CNNBlock(nn.Module):
    """A small residual CNN classifier: stem conv + ReLU + 3x3/2 max pool, a residual block (a
    grouped strided 3x3 conv beside a strided 1x1 shortcut), bilinear upsampling, average pooling,
    global average pooling and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.short = nn.Conv2d(8, 16, 1, stride=2, bias=False)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, 1)
        x = F.relu(self.conv(x) + self.short(x))
        x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        x = F.avg_pool2d(x, 2, 2)
        return self.fc(x.mean((2, 3)))


class GPT2Loss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, labels):
        logits = self.model(ids)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))


def block_cases():
    """(name, covers, module (float32), {input name: array}) for the exported blocks."""
    from export import randomize_
    from gpt2 import GPT2, GPT2Config
    torch.manual_seed(0)
    x = np.random.default_rng(7).standard_normal((2, 8, 16)).astype(np.float32)
    out = []
    m = MLPBlock(16)
    randomize_(m)
    out.append(("block_mlp", "MLP block (LayerNorm, Linear, GELU tanh, residual)", LossWrap(m, (2, 8, 16)), {"x": x}))
    m = AttnBlock(16, 4, 8)
    randomize_(m)
    out.append(("block_ln_attention", "LayerNorm + causal attention block (fused attention)",
                LossWrap(m, (2, 8, 16), 1), {"x": x}))
    m = CNNBlock()
    randomize_(m)
    img = np.random.default_rng(5).standard_normal((2, 3, 12, 12)).astype(np.float32)
    out.append(("block_cnn", "CNN (conv, max pool, grouped strided conv, resize, avg pool, linear)",
                LossWrap(m, (2, 5), 2), {"x": img}))
    cfg = GPT2Config(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32)
    g = GPT2(cfg)
    randomize_(g)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 64, size=(2, 16), dtype=np.int64)
    labels = rng.integers(0, 64, size=(2, 16), dtype=np.int64)
    out.append(("gpt2_cross_entropy", "GPT-2 (2 layers) + SoftmaxCrossEntropyLoss", GPT2Loss(g),
                {"ids": ids, "labels": labels}))
    return out


# --- Running and comparing -------------------------------------------------------------------

def compile_and_run(args, work, model, inputs):
    spec = os.path.join(work, "spec.yaml")
    with open(spec, "w") as f:
        binding = ", ".join(f"{n}: [{', '.join(map(str, a.shape))}]" for n, a in inputs.items())
        f.write(f"mode: inference\ninputs: {{{binding}}}\n")
    plan, outdir = os.path.join(work, "m.cplan"), os.path.join(work, "out")
    shutil.rmtree(outdir, ignore_errors=True)
    p = subprocess.run([args.opt, model, "--spec", spec, "--pass-pipeline=" + PIPELINE, "-o", plan],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, "colossal-opt: " + (p.stderr.strip().splitlines() or ["?"])[-1]
    cmd = [args.run, plan, "--output-dir", outdir]
    for n, a in inputs.items():
        f = os.path.join(work, n + ".npy")
        np.save(f, a)
        cmd += ["--input", f"{n}={f}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, "colossal-run: " + (p.stderr.strip().splitlines() or ["?"])[-1]
    return {os.path.splitext(f)[0]: np.load(os.path.join(outdir, f)) for f in os.listdir(outdir)}, None


def expect_compile_error(args, work, model, pattern):
    """(ok, worst, message) for a model whose gradient must be refused with one clear error."""
    spec = os.path.join(work, "spec.yaml")
    with open(spec, "w") as f:
        f.write("mode: inference\ninputs: {}\n")
    p = subprocess.run([args.opt, model, "--spec", spec, "--pass-pipeline=" + PIPELINE, "-o",
                        os.path.join(work, "m.cplan")], capture_output=True, text=True, timeout=600)
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    if p.returncode == 0:
        return False, float("inf"), "compiled, but an error was expected"
    if len(errors) != 1 or not re.search(pattern, errors[0]):
        return False, float("inf"), f"expected one error matching {pattern!r}, got: " + " | ".join(errors)
    return True, 0.0, "refused: " + errors[0]


def grad_key(name):
    """The key of parameter NAME's gradient among colossal-run's output files (their stems): the
    output `grad:NAME` (colossal-test-gradients) as colossal-run names its file."""
    return os.path.splitext(tensor_file_name("grad:" + name))[0]


def compare(got, ref_loss, ref_grads):
    """Returns (ok, worst relative error, message)."""
    worst, msgs = 0.0, []
    if "loss" not in got:
        return False, float("inf"), "no loss output"
    lerr = abs(float(got["loss"]) - ref_loss) / max(abs(ref_loss), 1e-6)
    if lerr > RTOL:
        msgs.append(f"loss {float(got['loss']):.6g} vs torch {ref_loss:.6g}")
    for name, ref in ref_grads.items():
        key = grad_key(name)
        if key not in got:
            msgs.append(f"{key} missing")
            worst = float("inf")
            continue
        g = got[key].astype(np.float64)
        if g.shape != ref.shape:
            msgs.append(f"{key} shape {g.shape} vs {ref.shape}")
            worst = float("inf")
            continue
        scale = max(np.abs(ref).max(initial=0.0), ATOL / RTOL)
        err = np.abs(g - ref).max(initial=0.0) / scale
        if not np.all(np.isfinite(g)):
            err = float("inf")
        worst = max(worst, err)
        if err > RTOL:
            msgs.append(f"{key}: max err {err:.2e} of max|g| {scale:.3g}")
    return not msgs, worst, "; ".join(msgs)


def run_case(args, case):
    work = os.path.join(args.workdir, case.name)
    os.makedirs(work, exist_ok=True)
    # torch reference in float64, from the float32 values the model holds
    tens = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in case.params.items()}
    consts = {k: torch.tensor(v.astype(np.float64) if v.dtype == np.float32 else v)
              for k, v in case.consts.items()}
    y = case.fn({**tens, **consts})
    R = np.random.default_rng(zlib.crc32(case.name.encode())).uniform(-1, 1, size=tuple(y.shape)).astype(np.float32)
    loss = (y * torch.tensor(R.astype(np.float64))).sum()
    loss.backward()
    ref = {k: t.grad.numpy() if t.grad is not None else np.zeros(t.shape) for k, t in tens.items()}

    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(np.asarray(v), k))
             for k, v in case.consts.items()]
    # Each parameter enters as `P * 1`: the importer keeps initializers that feed shape-like ops
    # (Reshape, Slice, Concat, Where, ...) as constants, to fold shape arithmetic; an arithmetic
    # use makes them parameters (and multiplying by 1 is exact).
    nodes.append(helper.make_node("Constant", [], ["one__"],
                                  value=numpy_helper.from_array(np.array(1, np.float32), "one__")))
    for k in case.params:
        nodes.append(N("Mul", [k, "one__"], k + "__"))
    def rename(n):  # in If/Loop bodies too
        n.input[:] = [i + "__" if i in case.params else i for i in n.input]
        for a in n.attribute:
            for inner in a.g.node if a.HasField("g") else ():
                rename(inner)
        return n
    for n in case.nodes:
        nodes.append(rename(onnx.NodeProto.FromString(n.SerializeToString())))
    nodes += [helper.make_node("Constant", [], ["R"], value=numpy_helper.from_array(R, "R")),
              N("Mul", ["Y", "R"], "YR"), N("ReduceSum", ["YR"], "loss", keepdims=0)]
    inits = [numpy_helper.from_array(v, k) for k, v in case.params.items()]
    graph = helper.make_graph(nodes, case.name, [], [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8
    path = os.path.join(work, "model.onnx")
    onnx.save(model, path)
    if case.expect_error:
        return expect_compile_error(args, work, path, case.expect_error)
    got, err = compile_and_run(args, work, path, {})
    if err:
        return False, float("inf"), err
    return compare(got, float(loss), ref)


def run_block(args, name, module, inputs):
    work = os.path.join(args.workdir, name)
    os.makedirs(work, exist_ok=True)
    module = module.float().eval()
    path = os.path.join(work, "model.onnx")
    targs = tuple(torch.from_numpy(v) for v in inputs.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, targs, path, input_names=list(inputs), output_names=["loss"],
                          opset_version=14, do_constant_folding=True)
    # Constant folding renames some weights (a Linear's weight becomes its transpose, named
    # onnx::MatMul_N; a tied weight gets one initializer per use), so each torch parameter is
    # found among the initializers by value, as itself or transposed, and its gradient is the sum
    # of those initializers' gradients. The fixed R buffer is a parameter of the plan too.
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    leaves = dict(module.named_parameters())
    leaves.update({k: v for k, v in module.named_buffers() if k.endswith("R")})
    uses = {}
    for k, v in leaves.items():
        a = v.detach().numpy()
        uses[k] = [(n, False) for n, x in inits.items() if x.shape == a.shape and np.array_equal(x, a)]
        if a.ndim == 2:
            uses[k] += [(n, True) for n, x in inits.items() if x.shape == a.T.shape and np.array_equal(x, a.T)]
    module = module.double()
    leaves64 = dict(module.named_parameters())
    leaves64.update({k: v.requires_grad_(True) for k, v in module.named_buffers() if k in leaves})
    loss = module(*(t.double() if t.is_floating_point() else t for t in targs))
    loss.backward()
    ref = {k: v.grad.numpy() for k, v in leaves64.items()}
    got, err = compile_and_run(args, work, path, inputs)
    if err:
        return False, float("inf"), err
    combined, problems = {"loss": got["loss"]}, []
    for k in ref:
        if not uses[k]:
            problems.append(f"{k}: no initializer holds it")
            continue
        total = None
        for n, transposed in uses[k]:
            g = got.get(grad_key(n))
            if g is None:
                problems.append(f"{k}: initializer '{n}' got no gradient (imported as a constant?)")
                continue
            g = g.T if transposed else g
            total = g.astype(np.float64) if total is None else total + g
        if total is not None:
            combined[grad_key(k)] = total
    ok, worst, msg = compare(combined, float(loss), ref)
    if problems:
        ok, msg = False, "; ".join(problems + ([msg] if msg else []))
    return ok, worst, msg + f" ({len(ref)} parameters)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--opt", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--only", default="", help="regex: run only matching cases")
    ap.add_argument("--skip-blocks", action="store_true")
    ap.add_argument("--json", help="write per-case results here")
    ap.add_argument("--allow-missing-kernels", action="store_true",
                    help="exit 0 when the only problems are backward kernels the --run binary lacks")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    results = []
    for case in build_cases():
        if args.only and not re.search(args.only, case.name):
            continue
        ok, worst, msg = run_case(args, case)
        results.append(dict(name=case.name, covers=case.covers, ok=ok, worst=worst, msg=msg))
    if not args.skip_blocks:
        for name, covers, module, inputs in block_cases():
            if args.only and not re.search(args.only, name):
                continue
            ok, worst, msg = run_block(args, name, module, inputs)
            results.append(dict(name=name, covers=covers, ok=ok, worst=worst, msg=msg))
    for r in results:
        missing = re.search(r"unknown op '(\w+)' for device", r["msg"])
        r["status"] = "PASS" if r["ok"] else (
            "SKIP" if missing and missing.group(1) in GRAD_KERNELS else "FAIL")
        print(f"{r['status']} {r['name']:<28} {r['covers']:<48} max rel err {r['worst']:.1e}  {r['msg']}")
    failed = [r["name"] for r in results if r["status"] == "FAIL"]
    skipped = [r["name"] for r in results if r["status"] == "SKIP"]
    passed = len(results) - len(failed) - len(skipped)
    print(f"{passed}/{len(results)} gradient checks pass"
          + (f"; skipped (backward kernel not in this colossal-run): {' '.join(skipped)}" if skipped else "")
          + (f"; failing: {' '.join(failed)}" if failed else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if skipped and not args.allow_missing_kernels:
        print(f"error: {args.run} lacks the backward kernels of {len(skipped)} case(s); they did not run "
              "(pass --allow-missing-kernels for an older colossal-run)")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

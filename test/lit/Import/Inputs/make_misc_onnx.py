#!/usr/bin/env python3
"""Writes small ONNX models for the misc-family importer lit tests: `make_misc_onnx.py CASE OUT`.

Recurrent layers, control flow, signal processing and the ai.onnx.preview.training optimizers;
each case is a function below and misc-ops.test / misc-errors.test say what must happen with it.
Run with /usr/bin/python3 (Debian's python3-onnx).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL
TRAINING = "ai.onnx.preview.training"


def model(nodes, inputs, outputs, opset=17, inits=(), extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    opsets = [helper.make_opsetid("", opset)] if opset else []
    opsets += [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(g, opset_imports=opsets, ir_version=8)


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, value, dtype):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype=dtype)))


def lstm_bidirectional():
    """Bidirectional LSTM, 3 steps, unequal sequence lengths (reverse direction needs a reversal)."""
    nodes = [const("lens", [3, 2], np.int32),
             helper.make_node("LSTM", ["x", "w", "r", "", "lens"], ["y", "yh", "yc"], hidden_size=4,
                              direction="bidirectional", name="lstm")]
    return model(nodes, [vi("x", F, [3, 2, 5]), vi("w", F, [2, 16, 5]), vi("r", F, [2, 16, 4])],
                 [vi("y", F, [3, 2, 2, 4]), vi("yh", F, [2, 2, 4]), vi("yc", F, [2, 2, 4])])


def gru_layout1():
    nodes = [helper.make_node("GRU", ["x", "w", "r"], ["", "yh"], hidden_size=3, layout=1,
                              linear_before_reset=1, activations=["HardSigmoid", "LeakyRelu"],
                              activation_alpha=[0.3, 0.1], activation_beta=[0.4], name="gru")]
    return model(nodes, [vi("x", F, [2, 2, 5]), vi("w", F, [1, 9, 5]), vi("r", F, [1, 9, 3])],
                 [vi("yh", F, [2, 1, 3])])


def if_const():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [], [vi("t", F, [2])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "x"], ["e"])], "else", [], [vi("e", F, [2])])
    nodes = [const("c", True, np.bool_),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")]
    return model(nodes, [vi("x", F, [2])], [vi("y", F, [2])])


def if_data():
    """If on a condition computed from the input, as openWakeWord's hey_jarvis runs a verifier:
    p = Sigmoid(x W) [1, 1]; cond = Cast(p >= 0.5) [1, 1]; then (score, feat) = (p * p,
    Sqrt(x) as [4]), else (p, -x as [4]). feat is rank 1, so the [1, 1] condition must be
    reshaped to rank 0 before it broadcasts; Sqrt makes NaN for negative x in the untaken branch."""
    w = numpy_helper.from_array(np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32), "w")
    shape4 = numpy_helper.from_array(np.array([4], np.int64), "shape4")
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["p", "p"], ["score_t"]), helper.make_node("Sqrt", ["x"], ["r"]),
         helper.make_node("Reshape", ["r", "shape4"], ["feat_t"])],
        "then", [], [vi("score_t", F, [1, 1]), vi("feat_t", F, [4])])
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["p"], ["score_e"]), helper.make_node("Neg", ["x"], ["n"]),
         helper.make_node("Reshape", ["n", "shape4"], ["feat_e"])],
        "else", [], [vi("score_e", F, [1, 1]), vi("feat_e", F, [4])])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logit"]),
             helper.make_node("Sigmoid", ["logit"], ["p"]),
             const("half", 0.5, np.float32),
             helper.make_node("GreaterOrEqual", ["p", "half"], ["ge"]),
             helper.make_node("Cast", ["ge"], ["c"], to=B),
             helper.make_node("If", ["c"], ["score", "feat"], then_branch=then_g,
                              else_branch=else_g, name="if")]
    return model(nodes, [vi("x", F, [1, 4])], [vi("score", F, [1, 1]), vi("feat", F, [4])],
                 inits=[w, shape4])


def if_data_shapes_differ():
    """A condition computed from input 'x' (ReduceSum(x) > 0) and branches of different shapes."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                               [vi("t", F, [2])])
    else_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["e"], axis=0)], "else", [],
                               [vi("e", F, [4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             const("zero", 0.0, np.float32),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")]
    return model(nodes, [vi("x", F, [2])], [vi("y", F, [None])])


def loop(trip=3):
    """Loop carrying s (s += x each step) and scanning the iteration number as float."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cin"], ["cout"]),
         helper.make_node("Add", ["s", "x"], ["s2"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F)],
        "body", [vi("i", I64, []), vi("cin", B, []), vi("s", F, [2])],
        [vi("cout", B, []), vi("s2", F, [2]), vi("fi", F, [])])
    nodes = [const("m", trip, np.int64),
             helper.make_node("Loop", ["m", "", "s0"], ["s", "scan"], body=body, name="loop")]
    return model(nodes, [vi("x", F, [2]), vi("s0", F, [2])], [vi("s", F, [2]), vi("scan", F, [trip])])


def loop_too_long():
    return loop(5000)


def scan_reverse():
    """Scan (opset 9+) summing rows of x backwards; the per-step sums are stored reversed too."""
    body = helper.make_graph([helper.make_node("Add", ["acc", "row"], ["acc2"]),
                              helper.make_node("Identity", ["acc2"], ["out"])],
                             "body", [vi("acc", F, [2]), vi("row", F, [2])],
                             [vi("acc2", F, [2]), vi("out", F, [2])])
    nodes = [helper.make_node("Scan", ["init", "x"], ["acc", "outs"], body=body, num_scan_inputs=1,
                              scan_input_directions=[1], scan_output_directions=[1], name="scan")]
    return model(nodes, [vi("init", F, [2]), vi("x", F, [3, 2])], [vi("acc", F, [2]), vi("outs", F, [3, 2])])


def windows():
    nodes = [const("n", 4, np.int64),
             helper.make_node("HannWindow", ["n"], ["hann"], name="hann"),
             helper.make_node("HammingWindow", ["n"], ["hamming"], periodic=0, output_datatype=TensorProto.DOUBLE, name="hamming")]
    return model(nodes, [], [vi("hann", F, [4]), vi("hamming", TensorProto.DOUBLE, [4])])


def dft_real():
    nodes = [helper.make_node("DFT", ["x"], ["y"], axis=1, onesided=1, name="dft")]
    return model(nodes, [vi("x", F, [2, 8, 1])], [vi("y", F, [2, 5, 2])])


def dft_too_long():
    nodes = [const("n", 100000, np.int64), helper.make_node("DFT", ["x", "n"], ["y"], axis=1, name="dft")]
    return model(nodes, [vi("x", F, [1, 8, 1])], [vi("y", F, [1, 100000, 2])])


def adagrad():
    nodes = [helper.make_node("Adagrad", ["r", "t", "x", "g", "h"], ["x2", "h2"], domain=TRAINING,
                              decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.0, name="adagrad")]
    return model(nodes, [vi("r", F, []), vi("t", I64, []), vi("x", F, [3]), vi("g", F, [3]), vi("h", F, [3])],
                 [vi("x2", F, [3]), vi("h2", F, [3])], opset=None, extra_opsets=[(TRAINING, 1)])


def training_domain_missing():
    """A training-domain node in a model that imports only the default domain."""
    m = adagrad()
    del m.opset_import[:]
    m.opset_import.extend([helper.make_opsetid("", 17)])
    return m


def training_default_node():
    """A default-domain node in a model that imports only the training domain."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return model(nodes, [vi("x", F, [3])], [vi("y", F, [3])], opset=None, extra_opsets=[(TRAINING, 1)])


def training_opset2():
    m = adagrad()
    m.opset_import[0].version = 2
    return m


def rnn_runtime_lens():
    nodes = [helper.make_node("RNN", ["x", "w", "r", "", "lens"], ["", "yh"], hidden_size=2, name="rnn")]
    return model(nodes, [vi("x", F, [2, 1, 3]), vi("w", F, [1, 2, 3]), vi("r", F, [1, 2, 2]),
                         vi("lens", TensorProto.INT32, [1])], [vi("yh", F, [1, 1, 2])])


CASES = {name: fn for name, fn in globals().items()
         if callable(fn) and not name.startswith("_") and name not in ("model", "vi", "const")}


def main():
    case, out = sys.argv[1], sys.argv[2]
    onnx.save(CASES[case](), out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes small ONNX models for the NN importer's lit tests: `make_nn_onnx.py CASE OUT.onnx`.

Each case is a function below; nn-ops.test and nn-errors.test say what the importer must do with it.
Run with /usr/bin/python3 (Debian's python3-onnx).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
U8 = TensorProto.UINT8


def model(nodes, inputs, outputs, opset=13, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def conv_forms():
    """Conv with SAME_LOWER, ConvTranspose with output_shape, MaxPool with Indices (ceil_mode)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], auto_pad="SAME_LOWER", strides=[2, 2], name="conv"),
        helper.make_node("ConvTranspose", ["x", "wt"], ["t"], strides=[3, 2], output_shape=[10, 8],
                         name="convt"),
        helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1,
                         name="pool"),
        helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[2, 2], pads=[1, 1, 0, 0],
                         count_include_pad=1, name="avg"),
        helper.make_node("GlobalAveragePool", ["x"], ["g"], name="gap"),
    ]
    return model(nodes, [vi("x", F, [1, 1, 4, 5]), vi("w", F, [2, 1, 3, 3]), vi("wt", F, [1, 2, 3, 3])],
                 [vi("c", F, None), vi("t", F, None), vi("p", F, None), vi("i", I64, None),
                  vi("a", F, None), vi("g", F, None)], opset=12)


def norms_and_losses():
    """BatchNormalization (inference) and SoftmaxCrossEntropyLoss decompose; NLL keeps ignore_index."""
    nodes = [
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], epsilon=1e-3, name="bn"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["x2", "y"], ["loss", "logp"], ignore_index=2,
                         reduction="sum", name="sce"),
    ]
    return model(nodes, [vi("x", F, [2, 3, 4]), vi("s", F, [3]), vi("b", F, [3]), vi("m", F, [3]),
                         vi("v", F, [3]), vi("x2", F, [3, 5]), vi("y", I64, [3])],
                 [vi("bn", F, None), vi("loss", F, None), vi("logp", F, None)])


def resize_forms():
    """Resize-13 from constant sizes (linear, align_corners) and Upsample-9 from constant scales."""
    sizes = numpy_helper.from_array(np.array([1, 1, 3, 5], np.int64), "sizes")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "scales")
    nodes = [
        helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode="linear",
                         coordinate_transformation_mode="align_corners", name="resize"),
    ]
    return model(nodes, [vi("x", F, [1, 1, 2, 2])], [vi("r", F, None)], inits=[sizes, scales])


def upsample9():
    scales = numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "scales")
    nodes = [helper.make_node("Upsample", ["x", "scales"], ["u"], mode="nearest", name="up")]
    return model(nodes, [vi("x", F, [1, 1, 2, 2])], [vi("u", F, None)], opset=9, inits=[scales])


def quantize_forms():
    """QuantizeLinear without a zero point (uint8), DequantizeLinear per axis, QLinearMatMul."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q8", "sa", "za"], ["dq"], axis=0, name="dq"),
    ]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
             numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "sa"),
             numpy_helper.from_array(np.array([1, 2], np.uint8), "za")]
    return model(nodes, [vi("x", F, [2, 3]), vi("q8", U8, [2, 3])], [vi("q", U8, None), vi("dq", F, None)],
                 inits=inits)


# --- models the importer must reject with a clean diagnostic ---------------------------------------

def resize_antialias():
    scales = numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "scales")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="linear", antialias=1, name="aa")]
    return model(nodes, [vi("x", F, [1, 1, 4, 4])], [vi("r", F, None)], opset=18, inits=[scales])


def resize_dynamic_scales():
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest", name="dyn")]
    return model(nodes, [vi("x", F, [1, 1, 4, 4]), vi("scales", F, [4])], [vi("r", F, None)])


def conv_bad_auto_pad():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME", name="badpad")]
    return model(nodes, [vi("x", F, [1, 1, 5, 5]), vi("w", F, [1, 1, 3, 3])], [vi("y", F, None)])


def lpnorm_p3():
    nodes = [helper.make_node("LpNormalization", ["x"], ["y"], p=3, name="lp3")]
    return model(nodes, [vi("x", F, [2, 3])], [vi("y", F, None)])


def pool_pad_too_large():
    """Pads as large as the window: windows that would see only padding."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[0, 10, 0, 10],
                              name="bigpad")]
    return model(nodes, [vi("x", TensorProto.FLOAT, [1, 1, 4, 4])], [vi("y", TensorProto.FLOAT, None)])


def quantize_int16():
    zp = numpy_helper.from_array(np.array(0, np.int16), "zp")
    s = numpy_helper.from_array(np.array(1.0, np.float32), "s")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], name="q16")]
    return model(nodes, [vi("x", F, [4])], [vi("y", TensorProto.INT16, None)], opset=21, inits=[s, zp])


if __name__ == "__main__":
    onnx.save(globals()[sys.argv[1]](), sys.argv[2])

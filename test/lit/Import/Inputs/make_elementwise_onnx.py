#!/usr/bin/env python3
"""Models for elementwise.test: `make_elementwise_onnx.py CASE OUT.onnx` (run with /usr/bin/python3)."""
import sys

from onnx import TensorProto, helper

from make_onnx import model, vi

F = TensorProto.FLOAT
I32 = TensorProto.INT32
U8 = TensorProto.UINT8
B = TensorProto.BOOL


def activations_opset6():
    """Elu, Selu, HardSigmoid at opset 6 (unchanged since), defaults and explicit attributes."""
    nodes = [helper.make_node("Elu", ["x"], ["e"], name="elu"),
             helper.make_node("Selu", ["e"], ["s"], alpha=2.0, name="selu"),
             helper.make_node("HardSigmoid", ["s"], ["y"], name="hsig")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])], opset=6, ir=3)


def clip_forms():
    """Clip-6 with attribute bounds next to Clip-13 with only a max input: two models."""
    nodes = [helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=2.0, name="clip")]
    return model(nodes, [vi("x", F, [3])], [vi("y", F, [3])], opset=9)


def clip13_max_only():
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")]
    return model(nodes, [vi("x", I32, [3]), vi("hi", I32, [])], [vi("y", I32, [3])], opset=13)


def binary_fns():
    nodes = [helper.make_node("Mod", ["a", "b"], ["m"], fmod=1, name="mod"),
             helper.make_node("BitShift", ["m", "b"], ["s"], direction="RIGHT", name="shift"),
             helper.make_node("LessOrEqual", ["s", "a"], ["le"], name="le"),
             helper.make_node("Xor", ["le", "le"], ["y"], name="xor")]
    return model(nodes, [vi("a", U8, [2, 3]), vi("b", U8, [3])], [vi("y", B, [2, 3])], opset=16)


def misc():
    nodes = [helper.make_node("IsInf", ["x"], ["inf"], detect_negative=0, name="isinf"),
             helper.make_node("PRelu", ["x", "slope"], ["p"], name="prelu"),
             helper.make_node("Mean", ["x", "p"], ["mean"], name="mean"),
             helper.make_node("CastLike", ["mean", "like"], ["y"], name="castlike")]
    return model(nodes, [vi("x", F, [2, 3]), vi("slope", F, [3]), vi("like", I32, [1])],
                 [vi("inf", B, [2, 3]), vi("y", I32, [2, 3])], opset=16)


def bad_mod():
    nodes = [helper.make_node("Mod", ["a", "a"], ["y"], fmod=2, name="mod")]
    return model(nodes, [vi("a", F, [2])], [vi("y", F, [2])], opset=13)


def bad_dtype():
    nodes = [helper.make_node("Cos", ["a"], ["y"], name="cos")]
    return model(nodes, [vi("a", I32, [2])], [vi("y", I32, [2])], opset=13)


if __name__ == "__main__":
    import onnx
    onnx.save(globals()[sys.argv[1]](), sys.argv[2])

#!/usr/bin/env python3
"""Writes small ONNX models with unsigned integer tensors (UINT16, UINT32, UINT64) for the
importer's lit test unsigned.test: `make_unsigned_onnx.py CASE OUT.onnx` (run with /usr/bin/python3,
Debian's python3-onnx)."""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
B = TensorProto.BOOL
U16, U32, U64 = TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64


def model(nodes, inputs, outputs, opset=13, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def ops():
    """Graph inputs of each unsigned type through Max, Mod, BitShift and Cast."""
    nodes = [
        helper.make_node("Max", ["a", "a"], ["mx"], name="max"),
        helper.make_node("Mod", ["b", "b"], ["md"], name="mod"),
        helper.make_node("BitShift", ["c", "c"], ["sh"], direction="RIGHT", name="shift"),
        helper.make_node("Cast", ["c"], ["cf"], to=F, name="cast_f"),
        helper.make_node("Cast", ["cf"], ["cu"], to=U32, name="cast_u"),
    ]
    return model(nodes, [vi("a", U16, [3]), vi("b", U32, [3]), vi("c", U64, [3])],
                 [vi("mx", U16, [3]), vi("md", U32, [3]), vi("sh", U64, [3]), vi("cu", U32, [3])])


def constants():
    """Initializers in each TensorProto encoding: UINT16 in int32_data, UINT32 in uint64_data,
    UINT64 as raw_data (values above INT64_MAX); constant arithmetic that folds as unsigned, and a
    ui64 constant above INT64_MAX that is left to the runtime."""
    u16 = helper.make_tensor("k16", U16, [2], [65535, 7])
    u32 = helper.make_tensor("k32", U32, [2], [4000000000, 3])
    u64 = numpy_helper.from_array(np.array([2**64 - 1, 2**63], dtype=np.uint64), "k64")
    small = helper.make_tensor("small64", U64, [2], [1, 2])
    two = helper.make_tensor("two64", U64, [], [2])
    three = helper.make_tensor("three", U32, [], [3])
    nodes = [
        helper.make_node("Max", ["k64", "small64"], ["big"], name="max_big"),
        helper.make_node("Sub", ["small64", "two64"], ["wrap"], name="sub_wrap"),
        helper.make_node("Div", ["k32", "three"], ["q"], name="div"),
        helper.make_node("Less", ["k32", "three"], ["lt"], name="less"),
        helper.make_node("Max", ["k64", "x64"], ["m64"], name="max64"),
        helper.make_node("Add", ["k16", "x16"], ["s16"], name="add16"),
    ]
    return model(nodes, [vi("x64", U64, [2]), vi("x16", U16, [2])],
                 [vi("q", U32, [2]), vi("lt", B, [2]), vi("m64", U64, [2]), vi("s16", U16, [2]),
                  vi("big", U64, [2]), vi("wrap", U64, [2])],
                 inits=[u16, u32, u64, small, two, three])


def main():
    case, out = sys.argv[1], sys.argv[2]
    m = globals()[case]()
    with open(out, "wb") as f:
        f.write(m.SerializeToString())


if __name__ == "__main__":
    main()

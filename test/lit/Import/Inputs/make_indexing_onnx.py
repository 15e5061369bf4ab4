#!/usr/bin/env python3
"""Writes small ONNX models for the indexing family's importer lit tests:
`make_indexing_onnx.py CASE OUT.onnx` (run with /usr/bin/python3, Debian's python3-onnx)."""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL


def model(nodes, inputs, outputs, opset=13, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def lowerings():
    """Ops without a colossal op of their own: Tile, DepthToSpace, Einsum (batch matmul and
    trace), Hardmax, EyeLike, and ReduceL2 with noop_with_empty_axes (opset 18)."""
    nodes = [
        helper.make_node("Tile", ["x", "reps"], ["tiled"], name="tile"),
        helper.make_node("DepthToSpace", ["d"], ["d2s"], blocksize=2, mode="CRD", name="d2s"),
        helper.make_node("Einsum", ["a", "b"], ["bmm"], equation="bij,bjk->bik", name="bmm"),
        helper.make_node("Einsum", ["sq"], ["trace"], equation="ii", name="trace"),
        helper.make_node("Hardmax", ["x"], ["hm"], axis=0, name="hardmax"),
        helper.make_node("EyeLike", ["x"], ["eye"], k=1, name="eye"),
    ]
    inits = [numpy_helper.from_array(np.array([2, 1], dtype=np.int64), "reps")]
    return model(nodes, [vi("x", F, [2, 3]), vi("d", F, [1, 8, 2, 2]), vi("a", F, [2, 3, 4]),
                         vi("b", F, [2, 4, 5]), vi("sq", F, [3, 3])],
                 [vi("tiled", F, [4, 3]), vi("d2s", F, [1, 2, 4, 4]), vi("bmm", F, [2, 3, 5]),
                  vi("trace", F, []), vi("hm", F, [2, 3]), vi("eye", F, [2, 3])], inits=inits)


def nonzero_dynamic():
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero")]
    return model(nodes, [vi("x", F, [2, 3])], [vi("nz", I64, [2, None])])


def compress_dynamic():
    nodes = [helper.make_node("Compress", ["x", "cond"], ["y"], axis=0, name="compress")]
    return model(nodes, [vi("x", F, [3, 2]), vi("cond", B, [3])], [vi("y", F, [None, 2])], opset=11)


def topk_dynamic_k():
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")]
    return model(nodes, [vi("x", F, [3, 4]), vi("k", I64, [1])],
                 [vi("v", F, [3, None]), vi("i", I64, [3, None])], opset=11)


def main():
    case, out = sys.argv[1], sys.argv[2]
    m = globals()[case]()
    with open(out, "wb") as f:
        f.write(m.SerializeToString())


if __name__ == "__main__":
    main()

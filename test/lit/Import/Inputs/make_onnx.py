#!/usr/bin/env python3
"""Writes small ONNX models for the importer's lit tests: `make_onnx.py CASE OUT.onnx`.

Each case is a function below; the lit test that uses it says what the importer must do with it.
Run with /usr/bin/python3 (Debian's python3-onnx).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, opset=14, inits=(), ir=7):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def c_i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


# --- well-formed models -------------------------------------------------------------------------

def old_attribute_forms():
    """Opset 11: Squeeze/Unsqueeze axes, Split split, ReduceSum axes as attributes; Slice (opset
    >= 10 inputs) is covered by slice_opset9."""
    nodes = [
        helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0], name="unsq"),
        helper.make_node("Squeeze", ["u"], ["s"], axes=[0], name="sq"),
        helper.make_node("Split", ["s"], ["a", "b"], axis=1, split=[1, 3], name="split"),
        helper.make_node("ReduceSum", ["b"], ["r"], axes=[1], keepdims=0, name="rsum"),
        helper.make_node("Softmax", ["x"], ["sm"], axis=1, name="softmax"),
    ]
    return model(nodes, [vi("x", F, [2, 4])],
                 [vi("a", F, [2, 1]), vi("r", F, [2]), vi("sm", F, [2, 4])], opset=11)


def slice_opset9():
    nodes = [helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[-1], axes=[1], name="sl")]
    return model(nodes, [vi("x", F, [2, 6])], [vi("y", F, [2, 4])], opset=9)


def shape_arith():
    """Dynamic batch/seq; Shape→Gather→Unsqueeze→Concat→Reshape folds once the spec binds them."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "zero"], ["b"], axis=0, name="g0"),
        helper.make_node("Gather", ["shp", "one"], ["t"], axis=0, name="g1"),
        helper.make_node("Mul", ["b", "t"], ["bt"], name="mul"),
        helper.make_node("Unsqueeze", ["bt", "axes0"], ["bt1"], name="unsq"),
        helper.make_node("Concat", ["bt1", "minus1"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "newshape"], ["y"], name="reshape"),
        helper.make_node("ConstantOfShape", ["shp"], ["ones"], name="cos",
                         value=helper.make_tensor("v", F, [1], [1.0])),
        helper.make_node("Range", ["zero", "t", "one"], ["pos"], name="range"),
    ]
    inits = [c_i64("zero", 0), c_i64("one", 1), c_i64("axes0", [0]), c_i64("minus1", [-1])]
    return model(nodes, [vi("x", F, ["batch", "seq", 8])],
                 [vi("y", F, None), vi("ones", F, None), vi("pos", I64, None)], opset=14,
                 inits=inits)


def reshape_from_input():
    """Reshape whose shape is a graph input: needs the spec's `values`."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    return model(nodes, [vi("x", F, [2, 6]), vi("shape", I64, [2])], [vi("y", F, None)])


def reshape_from_initializer_input():
    """keep_initializers_as_inputs: Reshape's target `shape` = [3, 4] is an initializer and an input."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    return model(nodes, [vi("x", F, [2, 6]), vi("shape", I64, [2])], [vi("y", F, None)],
                 inits=[c_i64("shape", [3, 4])])


def shared_dim_params():
    """input_ids and attention_mask, both [batch, seq]; y = Cast(input_ids) * attention_mask."""
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids"], to=F, name="cast"),
             helper.make_node("Mul", ["ids", "attention_mask"], ["y"], name="mul")]
    return model(nodes, [vi("input_ids", I64, ["batch", "seq"]), vi("attention_mask", F, ["batch", "seq"])],
                 [vi("y", F, ["batch", "seq"])])


def external_data(location="weights.bin", offset="0", length=None):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = numpy_helper.from_array(w, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length or str(w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return model(nodes, [vi("x", F, [1, 2])], [vi("y", F, [1, 3])], inits=[t]), w


# --- models the importer must reject ------------------------------------------------------------

def unsupported_op():
    nodes = [helper.make_node("NonMaxSuppression", ["x", "x"], ["y"], name="nms")]
    return model(nodes, [vi("x", F, [1, 4])], [vi("y", I64, None)])


def unsupported_attr():
    nodes = [helper.make_node("Gelu", ["x"], ["y"], approximate="fast", name="gelu")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])], opset=20)


def unsupported_dtype():
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING, name="to_string")]
    return model(nodes, [vi("x", F, [4])], [vi("y", TensorProto.STRING, [4])])


def unsupported_output():
    """A node asked for more outputs than its operator produces."""
    nodes = [helper.make_node("Relu", ["x"], ["y", "extra"], name="relu")]
    return model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 4]), vi("extra", F, None)])


def bad_broadcast():
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="add")]
    return model(nodes, [vi("x", F, [2, 3]), vi("z", F, [4])], [vi("y", F, None)])


def bad_reshape():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    return model(nodes, [vi("x", F, [2, 6])], [vi("y", F, None)], inits=[c_i64("shape", [5, -1])])


def huge_range():
    """Position ids as Range(0, seq): a billion-token spec must fail fast, not fold 8 GB."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "one"], ["t"], axis=0, name="g1"),
        helper.make_node("Range", ["zero", "t", "one"], ["pos"], name="range"),
    ]
    return model(nodes, [vi("x", F, ["batch", "seq"])], [vi("pos", I64, None)],
                 inits=[c_i64("zero", 0), c_i64("one", 1)])


def blank_variadic_input():
    """Sum(x, "") — a blank name where the variadic op needs a value."""
    nodes = [helper.make_node("Sum", ["x", ""], ["y"], name="sum")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])])


def range_not_scalar():
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["y"], name="range")]
    inits = [c_i64("s", []), c_i64("l", 5), c_i64("d", 1)]
    return model(nodes, [], [vi("y", I64, None)], inits=inits)


def huge_fill():
    """ConstantOfShape over [1e9]: 4 GB — too large to embed as a constant."""
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill")]
    return model(nodes, [], [vi("y", F, None)], inits=[c_i64("shape", [1000000000])])


def overflow_fill():
    """ConstantOfShape whose element count overflows int64."""
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill")]
    return model(nodes, [], [vi("y", F, None)],
                 inits=[c_i64("shape", [1 << 21, 1 << 21, 1 << 22])])


def duplicate_output():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node("Neg", ["x"], ["y"], name="neg")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])])


def duplicate_attribute():
    node = helper.make_node("Softmax", ["x"], ["y"], axis=0, name="softmax")
    node.attribute.extend([helper.make_attribute("axis", 1)])
    return model([node], [vi("x", F, [2, 4])], [vi("y", F, [2, 4])])


def extra_input():
    nodes = [helper.make_node("Exp", ["x", "x", "x"], ["y"], name="exp")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])])


def unknown_attribute():
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axes=[1], name="softmax")]
    return model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 4])])


def wrong_attribute_type():
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=1.0, name="softmax")]
    return model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 4])])


def old_opset():
    """Add-6 broadcast only with an explicit attribute: not what the importer implements."""
    nodes = [helper.make_node("Add", ["x", "x"], ["y"], name="add")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])], opset=6, ir=3)


def old_opset_same_semantics():
    """Relu-6 means what Relu-14 means: accepted."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])], opset=6, ir=3)


def future_opset():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])], opset=23, ir=10)


def layer_norm_stats():
    """LayerNormalization with its optional Mean and InvStdDev outputs."""
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"],
                              axis=1, epsilon=1e-3, name="ln")]
    inits = [numpy_helper.from_array(np.linspace(0.5, 1.5, 4, dtype=np.float32), "s"),
             numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32), "b")]
    return model(nodes, [vi("x", F, [2, 4])],
                 [vi("y", F, [2, 4]), vi("mean", F, [2, 1]), vi("inv", F, [2, 1])],
                 opset=17, inits=inits)


def missing_input():
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"], name="relu")]
    return model(nodes, [vi("x", F, [4])], [vi("y", F, [4])])


CASES = {name: fn for name, fn in globals().items()
         if callable(fn) and not name.startswith("_") and name not in
         ("model", "vi", "c_i64", "main")}


def main():
    case, out = sys.argv[1], sys.argv[2]
    if case == "malformed":
        with open(out, "wb") as f:
            f.write(b"this is not a protobuf \xff\xff\xff\xff")
        return
    if case == "truncated":
        data = old_attribute_forms().SerializeToString()
        with open(out, "wb") as f:
            f.write(data[: len(data) // 2])
        return
    if case.startswith("external_data"):
        # external_data_at LOCATION OFFSET LENGTH: any entries (the weights file is weights.bin).
        args = sys.argv[3:6] if case == "external_data_at" else (
            {"external_data": "weights.bin", "external_data_abs": "/etc/passwd",
             "external_data_escape": "../weights.bin",
             "external_data_missing": "absent.bin"}[case],)
        m, w = external_data(*args)
        with open(os.path.join(os.path.dirname(os.path.abspath(out)), "weights.bin"), "wb") as f:
            f.write(w.tobytes())
        onnx.save(m, out)
        return
    if case == "shape_values":
        np.save(out, np.array([3, 4], dtype=np.int64))
        return
    onnx.save(CASES[case](), out)


if __name__ == "__main__":
    main()

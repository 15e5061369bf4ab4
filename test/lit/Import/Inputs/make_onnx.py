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


def const_node(name, values, dtype=np.int64):
    return helper.make_node("Constant", [], [name], name=name + "_node",
                            value=numpy_helper.from_array(np.array(values, dtype=dtype), name))


def repeat_interleave_shapes():
    """torch.onnx's export of k.repeat_interleave(2, dim=1) for one head of k [2, 1, 8, 8]: the
    target shape is Concat([2, 1], Split(Expand(2, [2]))[0], [8, 8]), passed through
    Where(Equal(shape, -1), 1, shape), and Expand reads it as its shape."""
    nodes = [
        const_node("rep", 2), const_node("n", [2]), const_node("one", [1]), const_node("minus1", -1),
        helper.make_node("ConstantOfShape", ["one"], ["ones1"], name="cos1",
                         value=numpy_helper.from_array(np.array([1], dtype=np.int64), "v")),
        helper.make_node("Mul", ["ones1", "minus1"], ["neg1"], name="mul1"),
        helper.make_node("Equal", ["n", "neg1"], ["eq1"], name="eq1"),
        helper.make_node("Where", ["eq1", "ones1", "n"], ["n2"], name="where1"),
        helper.make_node("Expand", ["rep", "n2"], ["reps"], name="expand_reps"),
        const_node("halves", [1, 1]),
        helper.make_node("Split", ["reps", "halves"], ["r0", "r1"], axis=0, name="split_reps"),
        const_node("axes2", [2]),
        helper.make_node("Unsqueeze", ["k", "axes2"], ["ku"], name="unsqueeze"),
        const_node("lead", [2, 1]), const_node("tail", [8, 8]),
        helper.make_node("Concat", ["lead", "r0", "tail"], ["shape"], axis=0, name="concat"),
        helper.make_node("Shape", ["shape"], ["shape_len"], name="shape_of_shape"),
        helper.make_node("ConstantOfShape", ["shape_len"], ["ones"], name="cos",
                         value=numpy_helper.from_array(np.array([1], dtype=np.int64), "v")),
        helper.make_node("Mul", ["ones", "minus1"], ["neg"], name="mul"),
        helper.make_node("Equal", ["shape", "neg"], ["eq"], name="eq"),
        helper.make_node("Where", ["eq", "ones", "shape"], ["target"], name="where"),
        helper.make_node("Expand", ["ku", "target"], ["y"], name="expand_k"),
    ]
    return model(nodes, [vi("k", F, [2, 1, 8, 8])], [vi("y", F, None)], opset=14)


def shape_ops_chain():
    """Every shape-only op on constants, one feeding the next, ending as Reshape's shape: Tile,
    Slice, Unsqueeze, Transpose, Squeeze, Cast (to float and back), Gather, Split, Concat,
    ReduceProd, Neg, Size, Range, Sub, Max."""
    nodes = [
        const_node("base", [4, 6]), const_node("two", [2]),
        helper.make_node("Tile", ["base", "two"], ["tiled"], name="tile"),            # [4,6,4,6]
        const_node("s1", [1]), const_node("e3", [3]), const_node("ax0", [0]),
        helper.make_node("Slice", ["tiled", "s1", "e3", "ax0"], ["sl"], name="slice"),  # [6,4]
        helper.make_node("Unsqueeze", ["sl", "ax0"], ["un"], name="unsqueeze"),         # [[6,4]]
        helper.make_node("Transpose", ["un"], ["tr"], perm=[1, 0], name="transpose"),   # [[6],[4]]
        const_node("ax1", [1]),
        helper.make_node("Squeeze", ["tr", "ax1"], ["sq"], name="squeeze"),             # [6,4]
        helper.make_node("Cast", ["sq"], ["f"], to=F, name="to_float"),
        helper.make_node("Cast", ["f"], ["i"], to=I64, name="to_int"),
        const_node("order", [1, 0]),
        helper.make_node("Gather", ["i", "order"], ["g"], axis=0, name="gather"),       # [4,6]
        helper.make_node("Split", ["g"], ["g0", "g1"], axis=0, name="split"),           # [4],[6]
        helper.make_node("Concat", ["g1", "g0"], ["cc"], axis=0, name="concat_swap"),   # [6,4]
        helper.make_node("ReduceProd", ["cc"], ["prod"], keepdims=1, name="prod"),      # [24]
        helper.make_node("Size", ["x"], ["size"], name="size"),                         # 48
        const_node("zero", 0), const_node("one", 1),
        helper.make_node("Range", ["zero", "size", "one"], ["pos"], name="range"),      # 0..47
        helper.make_node("Shape", ["pos"], ["npos"], name="shape"),                     # [48]
        helper.make_node("Sub", ["npos", "prod"], ["rest"], name="sub"),                # [24]
        helper.make_node("Max", ["rest", "prod"], ["rows"], name="max"),                # [24]
        helper.make_node("Neg", ["one1"], ["minus1"], name="neg"),                      # [-1]
        const_node("one1", [1]),
        helper.make_node("Concat", ["rows", "minus1"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "newshape"], ["y"], name="reshape"),
    ]
    # Neg reads one1 before its Constant node: move the Constant first (ONNX requires order).
    nodes.insert(0, nodes.pop(next(i for i, n in enumerate(nodes) if n.output[0] == "one1")))
    return model(nodes, [vi("x", F, [4, 6, 2])], [vi("y", F, None)], opset=14)


def constant_weights():
    """paddle2onnx's form: weights in Constant nodes. tokens [2, 3] -> Gather(emb) -> MatMul(w)
    -> Add(bias) -> Mul(scale) -> Mul(half) -> Reshape(shape) -> Add(Slice(mask)) = logits, where
    bias, scale and shape are initializers, the rest Constant nodes; `unused` is read by no node."""
    def fconst(name, shape, start=0.0):
        values = (start + 0.01 * np.arange(int(np.prod(shape)))).astype(np.float32).reshape(shape)
        return const_node(name, values, np.float32)
    nodes = [
        fconst("emb", [8, 4]), fconst("w", [4, 8], 0.5), const_node("half", 0.5, np.float32),
        fconst("mask", [1, 3, 8], -1.0), fconst("unused", [4]),
        helper.make_node("Gather", ["emb", "tokens"], ["h"], axis=0, name="embed"),
        helper.make_node("MatMul", ["h", "w"], ["hw"], name="proj"),
        helper.make_node("Add", ["hw", "bias"], ["hb"], name="add_bias"),
        helper.make_node("Mul", ["hb", "scale"], ["hm"], name="scale_mul"),
        helper.make_node("Mul", ["hm", "half"], ["hs"], name="half_mul"),
        helper.make_node("Reshape", ["hs", "shape"], ["hr"], name="reshape"),
        helper.make_node("Slice", ["mask", "starts", "ends", "axes"], ["m"], name="slice_mask"),
        helper.make_node("Add", ["hr", "m"], ["logits"], name="add_mask"),
    ]
    inits = [numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array(2.0, dtype=np.float32), "scale"),
             c_i64("shape", [2, 3, 8]), c_i64("starts", [0]), c_i64("ends", [3]), c_i64("axes", [1])]
    return model(nodes, [vi("tokens", I64, [2, 3])], [vi("logits", F, [2, 3, 8])], opset=14,
                 inits=inits)


def mask_initializer():
    """A causal mask stored as an additive float initializer (0 / -inf), read by Add as a weight
    would be: tokens [2, 3] -> Gather(emb) -> MatMul(w) -> Add(amask) = logits [2, 3, 8]; and a
    second mask `fmask` written with torch's finfo(float32).min instead of -inf."""
    amask = np.where(np.arange(8)[None, :] <= np.arange(3)[:, None], 0.0, -np.inf).astype(np.float32)
    fmask = np.where(amask == 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["h"], axis=0, name="embed"),
        helper.make_node("MatMul", ["h", "w"], ["hw"], name="proj"),
        helper.make_node("Add", ["hw", "amask"], ["hm"], name="add_mask"),
        helper.make_node("Add", ["hm", "fmask"], ["logits"], name="add_min_mask"),
    ]
    inits = [numpy_helper.from_array(np.linspace(-1, 1, 32).astype(np.float32).reshape(8, 4), "emb"),
             numpy_helper.from_array(np.linspace(-1, 1, 32).astype(np.float32).reshape(4, 8), "w"),
             numpy_helper.from_array(amask, "amask"), numpy_helper.from_array(fmask, "fmask")]
    return model(nodes, [vi("tokens", I64, [2, 3])], [vi("logits", F, [2, 3, 8])], opset=14, inits=inits)


def batchnorm_constants():
    """paddle2onnx's BatchNormalization: scale, bias, running mean and var all Constant nodes;
    x [2, 3] -> BatchNormalization -> MatMul(w) = logits [2, 5]."""
    nodes = [const_node(name, np.linspace(0.5, 1.5, 3), np.float32)
             for name in ("bn_scale", "bn_bias", "bn_mean", "bn_var")]
    nodes += [const_node("w", np.linspace(-1, 1, 15).reshape(3, 5), np.float32),
              helper.make_node("BatchNormalization", ["x", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
                               ["xn"], epsilon=1e-5, name="bn"),
              helper.make_node("MatMul", ["xn", "w"], ["logits"], name="head")]
    return model(nodes, [vi("x", F, [2, 3])], [vi("logits", F, [2, 5])], opset=14)


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


def position_table():
    """x [1, T, 4] + a learned position table pos [8, 4]: a spec binding T > 8 must say the table's size."""
    pos = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(8, 4), "pos")
    nodes = [helper.make_node("Add", ["x", "pos"], ["y"], name="add_positions")]
    return model(nodes, [vi("x", F, [1, "T", 4])], [vi("y", F, None)], inits=[pos])


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
         ("model", "vi", "c_i64", "const_node", "main")}


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

#!/usr/bin/env python3
"""Writes small ONNX models for the training-pass lit tests: `make_train_onnx.py CASE OUT.onnx`.

Run with /usr/bin/python3 (Debian's python3-onnx). Weights are fixed pseudo-random numbers.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def init(name, shape, seed):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.5, name)


def model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=7)


def mlp_lm(batch="B"):
    """A token MLP language model: tokens [B, 4] (vocabulary 8) -> Gather(emb) -> MatMul/Add/Relu
    -> MatMul(sq) -> MatMul(Identity(sq)) (torch's shared-initializer form) -> MatMul/Add ->
    logits [B, 4, 8]. A second output `hidden` is not used by the loss."""
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["e"], axis=0, name="/embed/Gather"),
        helper.make_node("MatMul", ["e", "onnx::MatMul_1"], ["h0"], name="/fc1/MatMul"),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"], name="/fc1/Add"),
        helper.make_node("Relu", ["h1"], ["h2"], name="/act/Relu"),
        helper.make_node("MatMul", ["h2", "sq"], ["h3"], name="/mix1/MatMul"),
        helper.make_node("Identity", ["sq"], ["sq_shared"], name="/Identity"),
        helper.make_node("MatMul", ["h3", "sq_shared"], ["hidden"], name="/mix2/MatMul"),
        helper.make_node("MatMul", ["hidden", "onnx::MatMul_2"], ["l0"], name="/head/MatMul"),
        helper.make_node("Add", ["l0", "head.bias"], ["logits"], name="/head/Add"),
    ]
    inits = [init("emb", [8, 4], 1), init("onnx::MatMul_1", [4, 6], 2), init("fc1.bias", [6], 3),
             init("sq", [6, 6], 4), init("onnx::MatMul_2", [6, 8], 5), init("head.bias", [8], 6)]
    return model(nodes, [helper.make_tensor_value_info("tokens", I64, [batch, 4])],
                 [helper.make_tensor_value_info("logits", F, [batch, 4, 8]),
                  helper.make_tensor_value_info("hidden", F, [batch, 4, 6])], inits)


def mlp_lm_fixed_batch():
    """mlp_lm with the batch fixed to 4 in the model (no dynamic axis)."""
    return mlp_lm(batch=4)


def own_loss():
    """A model that computes its own loss: tokens and labels [B, 4] -> logits -> 
    SoftmaxCrossEntropyLoss (mean) -> `loss`; `logits` is an output too."""
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["e"], axis=0, name="/embed/Gather"),
        helper.make_node("MatMul", ["e", "head.weight"], ["logits"], name="/head/MatMul"),
        helper.make_node("Transpose", ["logits"], ["lt"], perm=[0, 2, 1], name="/Transpose"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["lt", "targets"], ["loss"],
                         reduction="mean", name="/loss"),
    ]
    inits = [init("emb", [8, 4], 1), init("head.weight", [4, 8], 2)]
    return model(nodes, [helper.make_tensor_value_info("tokens", I64, ["B", 4]),
                         helper.make_tensor_value_info("targets", I64, ["B", 4])],
                 [helper.make_tensor_value_info("loss", F, []),
                  helper.make_tensor_value_info("logits", F, ["B", 4, 8])], inits)


def transposed_weight():
    """Weights behind value-preserving data movement (torch export without constant folding):
    `head.weight` [8, 4] reaches the MatMul through Transpose, and a position table `pos` [4, 4]
    is read by Slice (a buffer, not a weight) and added. tokens [B, 4] -> logits [B, 4, 8]."""
    starts = numpy_helper.from_array(np.array([0], np.int64), "starts")
    ends = numpy_helper.from_array(np.array([4], np.int64), "ends")
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["e"], axis=0, name="/embed/Gather"),
        helper.make_node("Slice", ["pos", "starts", "ends"], ["p"], name="/pos/Slice"),
        helper.make_node("Add", ["e", "p"], ["h"], name="/pos/Add"),
        helper.make_node("Transpose", ["head.weight"], ["wt"], perm=[1, 0], name="/head/Transpose"),
        helper.make_node("MatMul", ["h", "wt"], ["logits"], name="/head/MatMul"),
    ]
    inits = [init("emb", [8, 4], 1), init("pos", [4, 4], 2), init("head.weight", [8, 4], 3),
             starts, ends]
    return model(nodes, [helper.make_tensor_value_info("tokens", I64, ["B", 4])],
                 [helper.make_tensor_value_info("logits", F, ["B", 4, 8])], inits)


def if_data_lm():
    """A data-dependent If in a token model: e = Gather(emb, tokens) [B, 4, 4]; if mean(e) > 0
    the logits are e Transpose(head.weight), else (-e) Transpose(head.weight) [B, 4, 8].
    head.weight is read only inside the branches, behind Transpose."""
    def branch(name, nodes):
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(name, F, ["B", 4, 8])])
    then_g = branch("logits_then", [
        helper.make_node("Transpose", ["head.weight"], ["wt"], perm=[1, 0], name="/then/Transpose"),
        helper.make_node("MatMul", ["e", "wt"], ["logits_then"], name="/then/MatMul")])
    else_g = branch("logits_else", [
        helper.make_node("Neg", ["e"], ["ne"], name="/else/Neg"),
        helper.make_node("Transpose", ["head.weight"], ["wt2"], perm=[1, 0], name="/else/Transpose"),
        helper.make_node("MatMul", ["ne", "wt2"], ["logits_else"], name="/else/MatMul")])
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["e"], axis=0, name="/embed/Gather"),
        helper.make_node("ReduceMean", ["e"], ["m"], keepdims=0, name="/gate/ReduceMean"),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.float32)),
                         name="/gate/Constant"),
        helper.make_node("Greater", ["m", "zero"], ["c"], name="/gate/Greater"),
        helper.make_node("If", ["c"], ["logits"], then_branch=then_g, else_branch=else_g, name="/gate/If"),
    ]
    return model(nodes, [helper.make_tensor_value_info("tokens", I64, ["B", 4])],
                 [helper.make_tensor_value_info("logits", F, ["B", 4, 8])],
                 [init("emb", [8, 4], 1), init("head.weight", [8, 4], 3)])


if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    m = globals()[case]()
    onnx.checker.check_model(m)
    onnx.save(m, out)

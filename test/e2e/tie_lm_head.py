#!/usr/bin/python3
"""Ties a GPT-2 or Llama export's LM head to its token embedding in the ONNX graph itself:

    tie_lm_head.py SRC.onnx DST.onnx

torch.onnx.export writes a tied head as an initializer of its own (`onnx::MatMul_N`, the
embedding transposed), so the exported graph is not tied. This replaces the head MatMul's
weight by `Transpose(wte.weight)` and drops that initializer: one parameter read by the
embedding Gather and by the head, as a hand-written or other exporter's graph has it.
"""
import sys

import onnx
from onnx import helper
src, dst = sys.argv[1], sys.argv[2]
m = onnx.load(src)
g = m.graph
inits = {i.name: i for i in g.initializer}
# The token embedding: the [V, D] initializer the first Gather reads (GPT-2's wte.weight, Llama's
# tok_embeddings.weight).
emb = next(n.input[0] for n in g.node
           if n.op_type == "Gather" and n.input[0] in inits and len(inits[n.input[0]].dims) == 2)
V, D = inits[emb].dims
head = None
for n in g.node:
    if n.op_type == "MatMul" and n.input[1] in inits and list(inits[n.input[1]].dims) == [D, V]:
        head = n
if head is None:
    sys.exit(f"{src}: no MatMul reads a [{D}, {V}] initializer (the LM head)")
old = head.input[1]
t = helper.make_node("Transpose", [emb], ["wte_T"], perm=[1, 0], name="/lm_head/Transpose")
idx = list(g.node).index(head)
g.node.insert(idx, t)
head.input[1] = "wte_T"
g.initializer.remove(inits[old])
onnx.save(m, dst)
print("tied", old, "->", f"Transpose({emb})")

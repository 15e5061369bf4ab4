#ifndef COLOSSAL_PASSES_TD
#define COLOSSAL_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Fusion: recognise the decomposed forms torch.onnx exports and replace them by one fused op.
// Every rewrite computes the same mathematical function as the ops it replaces; a chain that does
// not match exactly (exponent, axes, constants, shapes) is left alone. Run after canonicalize, so
// that shape arithmetic and masks are constants:
//   func.func(canonicalize, colossal-fuse-norms, colossal-fuse-activations,
//             colossal-fuse-attention, canonicalize, cse)
//===----------------------------------------------------------------------===//

def FuseNorms : Pass<"colossal-fuse-norms", "mlir::func::FuncOp"> {
  let summary = "Rewrite decomposed LayerNorm and RMSNorm into colossal.layer_norm / rms_norm";
  let description = [{
    torch.onnx emits LayerNorm (opset < 17) as
    `m = ReduceMean(x); d = Sub(x, m); v = ReduceMean(Pow(d, 2)); n = Div(d, Sqrt(Add(v, eps)))`
    followed by `Mul(n, weight)` and `Add(., bias)`, and Llama's RMSNorm as
    `n = Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2)), eps))))` followed by `Mul(weight, n)`.
    The division may also be a multiplication by `Reciprocal` or by `Div(1, .)`, the square a
    `Mul(d, d)`, and binary operands come in either order.

    The pass checks that both means reduce the same trailing axes with `keepdims`, that the
    exponent is exactly 2, that `eps` is a scalar constant, and that weight and bias have the
    normalized shape. The normalization becomes `colossal.layer_norm` / `colossal.rms_norm` with a
    constant ones scale; a following multiplication by a tensor of the normalized shape replaces
    that scale, and a following addition of one becomes the LayerNorm bias.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def FuseActivations : Pass<"colossal-fuse-activations", "mlir::func::FuncOp"> {
  let summary = "Rewrite decomposed GELU and SiLU into colossal.gelu / colossal.silu";
  let description = [{
    Matches, with the factors of the outer products in any order and association:
    - GELU, erf form (torch.nn.GELU): `0.5 · x · (1 + Erf(x / √2))`, the division also as a
      multiplication by 1/√2 → `colossal.gelu {approximate = "none"}`;
    - GELU, tanh form (GPT-2, `approximate="tanh"`):
      `0.5 · x · (1 + Tanh(√(2/π) · (x + 0.044715 · x³)))`, the cube as `Pow(x, 3)`, `x·x·x` or
      `x·(x·x)` → `colossal.gelu {approximate = "tanh"}`;
    - SiLU / swish: `x · Sigmoid(x)` → `colossal.silu`.
    Constants are scalars that match the exact value to a relative 1e-6 (or the precision of
    their element type, when that is coarser).
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def FuseAttention : Pass<"colossal-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Rewrite scaled dot-product attention into colossal.attention";
  let description = [{
    Matches `MatMul(Softmax(S, axis = last), v)` where S is built from
    `MatMul(q, Transpose(k))`, rank 4:
    - scaling by scalar constants, as `Div` or `Mul` of the scores or of q and/or k before the
      product (torch's SDPA export multiplies both by √scale); the factors multiply into `scale`;
    - at most one causal mask: a CONSTANT additive mask (0 kept, -inf or near the lowest float
      masked) or a constant `Where(keep, S, -inf/lowest)` condition whose pattern is exactly
      "key j visible from query i iff j ≤ i + Tk − Tq" → `causal = true`, no mask operand;
    - at most one other mask: `Add(S, m)` with any other m (an input, a constant of another
      pattern) → additive mask operand; `Where(keep, S, -inf/lowest)` with another condition →
      i1 keep-mask operand.
    k is recovered un-transposed (a Transpose producing kᵀ is composed away). Grouped-query
    attention: when both k and v are Llama's `repeat_kv` (Reshape [B,Hkv,T,D] → [B,Hkv,1,T,D],
    Expand to [B,Hkv,n,T,D], Reshape to [B,Hkv·n,T,D]), the un-repeated tensors feed the fused
    op, whose query head h reads kv head h / n exactly as the repeat does.
    Only fires when the softmax has no other user and every shape agrees; otherwise the ops stay.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

//===----------------------------------------------------------------------===//
// Autodiff (passes/Autodiff, docs/training.md)
//===----------------------------------------------------------------------===//

def TestGradients : Pass<"colossal-test-gradients", "mlir::ModuleOp"> {
  let summary = "Append ∂loss/∂param results to every function with one scalar float result";
  let description = [{
    A test harness for the autodiff driver (buildGradients) and the ops' VJPs that needs no
    training runtime. On every `func.func` whose only result is a float tensor with one element
    (the loss), builds ∂loss/∂p with seed 1 for every float argument `p` marked `colossal.param`
    and appends each as an extra result named `colossal.output = "grad:<param name>"`, in argument
    order. The plan then has the gradients among its ordinary outputs, so `colossal-run` computes
    them. Functions of any other signature are left alone. Fails naming the op and its ONNX node
    when an op between a parameter and the loss has no VJP.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

#endif

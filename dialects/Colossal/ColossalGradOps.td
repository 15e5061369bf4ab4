//===- ColossalGradOps.td - backward ops that autodiff emits ----------------===//
//
// Ops with no ONNX counterpart: the vector-Jacobian products of fused forward ops that would be
// slow or memory-hungry as compositions of ordinary ops. Each lowers 1:1 to the plan instruction
// of the same name (docs/plan.md, "Training instructions"): same operands in the same order, same
// attributes. `dy` is always the cotangent of the forward op's result.
//
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_GRAD_OPS_TD
#define COLOSSAL_GRAD_OPS_TD

def Colossal_SoftmaxGradOp : Colossal_Op<"softmax_grad", [SameOperandsAndResultType, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(getAxis(), /*numX=*/2)">.body;
  let summary = "VJP of softmax: dx = y·(dy − Σ_axis dy·y)";
  let description = [{
    y: the softmax result [S...], dy: its cotangent [S...] (same type). Result dx [S...].
  }];
  let arguments = (ins AnyRankedTensor:$y, AnyRankedTensor:$dy, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` type($y)";
  let hasVerifier = 1;
}

def Colossal_LogSoftmaxGradOp : Colossal_Op<"log_softmax_grad", [SameOperandsAndResultType, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(getAxis(), /*numX=*/2)">.body;
  let summary = "VJP of log_softmax: dx = dy − exp(y)·Σ_axis dy";
  let description = [{
    y: the log_softmax result [S...], dy: its cotangent (same type). Result dx [S...].
  }];
  let arguments = (ins AnyRankedTensor:$y, AnyRankedTensor:$dy, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` type($y)";
  let hasVerifier = 1;
}

def Colossal_LayerNormGradOp : Colossal_Op<"layer_norm_grad", [InferTypeOpAdaptor, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(getAxis(), 1, /*numResultsReduced=*/2, /*dy=*/2)">.body;
  let summary = "VJP of layer_norm: (dx, dscale, dbias)";
  let description = [{
    x: the forward input [R..., N...] (normalized dims [axis, rank)), scale: [N...], dy: x's type.
    Recomputes each row's mean and 1/σ = 1/√(var + epsilon); with x̂ = (x − mean)/σ and
    ĝ = dy·scale: dx = (1/σ)(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), dscale = Σ_rows dy·x̂,
    dbias = Σ_rows dy (Ba et al. 2016). Results: dx of x's type, dscale and dbias of scale's type.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$scale, AnyRankedTensor:$dy,
                   I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs AnyRankedTensor:$dx, AnyRankedTensor:$dscale, AnyRankedTensor:$dbias);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_RmsNormGradOp : Colossal_Op<"rms_norm_grad", [InferTypeOpAdaptor, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(getAxis(), 1, /*numResultsReduced=*/1, /*dy=*/2)">.body;
  let summary = "VJP of rms_norm: (dx, dscale)";
  let description = [{
    x: [R..., N...], scale: [N...], dy: x's type. With r = 1/√(mean(x²) + epsilon) per row and
    ĝ = dy·scale: dx = r·ĝ − x·r³·mean(ĝ·x), dscale = Σ_rows dy·x·r (Zhang & Sennrich 2019).
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$scale, AnyRankedTensor:$dy,
                   I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs AnyRankedTensor:$dx, AnyRankedTensor:$dscale);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_UnaryGradOp : Colossal_Op<"unary_grad", [SameOperandsAndResultType, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
  let summary = "dx = dy·f'(x) for an elementwise function f named by `fn`";
  let description = [{
    x: the forward input, dy: the cotangent of f(x) (same float type). `fn` is one of `relu`
    (f'(0) = 0), `sigmoid`, `tanh`, `exp`, `log`, `sqrt`, `reciprocal`, `erf`, `abs` (sign, 0 at
    0), `silu`, `gelu` (erf form), `gelu_tanh`, `sin`, `cos`, `softplus`, `leaky_relu` (alpha),
    `elu` (alpha); `alpha` is present exactly for the last two.
  }];
  let arguments = (ins StrAttr:$fn, AnyRankedTensor:$x, AnyRankedTensor:$dy,
                   OptionalAttr<F32Attr>:$alpha);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$fn $x `,` $dy attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def Colossal_AttentionGradOp : Colossal_Op<"attention_grad", [InferTypeOpAdaptor, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Attention)">.body;
  let summary = "VJP of attention: (dq, dk, dv)";
  let description = [{
    q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], mask (optional, as `attention`'s),
    y = attention(q, k, v, mask) [B, Hq, Tq, Dv], dy: y's type (q's element type, or f32 for
    bf16/f16 q, k, v); `scale` and `causal` as the forward op's. Results dq, dk, dv of q's, k's and v's types. The probabilities are recomputed
    blockwise with D = rowsum(dy·y) (Dao et al. 2022, FlashAttention backward); under GQA the
    query heads sharing a kv head sum into its dk and dv.
  }];
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v,
                   Optional<AnyRankedTensor>:$mask, AnyRankedTensor:$y, AnyRankedTensor:$dy,
                   F32Attr:$scale, BoolAttr:$causal);
  let results = (outs AnyRankedTensor:$dq, AnyRankedTensor:$dk, AnyRankedTensor:$dv);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_GatherGradOp : Colossal_Op<"gather_grad", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"getAxis() == 0 ? ShardingRule::of(ShardingRule::Kind::GatherGrad) : ShardingRule::of(ShardingRule::Kind::Whole)">.body;
  let summary = "Adjoint of gather (embedding backward): scatter-add dy into zeros of data's shape";
  let description = [{
    indices: i64/i32 [I...], dy: [data.shape[:axis] + I... + data.shape[axis+1:]]. Result (explicit
    type, the forward `data`'s): zeros, then ddata[..., idx, ...] += dy[..., i, ...] along `axis`;
    negative indices count from the end; repeated indices add up.
  }];
  let arguments = (ins AnyRankedTensor:$indices, AnyRankedTensor:$dy, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_SliceGradOp : Colossal_Op<"slice_grad", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::SliceGrad)">.body;
  let summary = "Adjoint of slice: zeros of x's shape with dy at the sliced positions";
  let description = [{
    dy: the cotangent of `slice(x)`; result (explicit type): x's type. `starts` and `steps` are
    the forward slice's (normalized, one per dim); dy's shape gives the counts.
  }];
  let arguments = (ins AnyRankedTensor:$dy, DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$steps);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // COLOSSAL_GRAD_OPS_TD

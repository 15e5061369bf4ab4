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

//===----------------------------------------------------------------------===//
// Convolution, pooling, padding and resize (the CNN family, ColossalNNOps.td)
//===----------------------------------------------------------------------===//

def Colossal_ConvGradWeightOp : Colossal_Op<"conv_grad_weight", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Whole)">.body;
  let summary = "VJP of conv w.r.t. its weight (convolution backward-weights)";
  let description = [{
    x: the forward input [N, C, D1..Dn], dy: the cotangent of conv's result [N, M, O1..On], of
    one float type T; `strides`, `pads`, `dilations` and `group` as the forward conv's. Result
    (explicit type, the weight's): dw [M, C/group, K1..Kn] of T with
    dw[m, c, k] = Σ_{n, o} dy[n, m, o] · x[n, g·C/group + c, o·s − pad_begin + k·d]
    (g = m / (M/group); positions in the padding read zero), the adjoint of conv's weight
    contraction (ONNX Conv-11). The VJP of conv_transpose is this op with x and dy swapped.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$dy, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_PoolGradOp : Colossal_Op<"pool_grad", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise({0, 1})">.body;
  let summary = "VJP of max / average / Lp pooling: dy routed back through each window";
  let description = [{
    x: the forward input [N, C, D1..Dn], dy: the cotangent of `pool`'s result [N, C, O1..On],
    float, one type; the attributes are the forward pool's (kind "max" or "avg"). Result dx of
    x's type: zeros, then per output position o
    - "max": dx[argmax of window o] += dy[o], the argmax recomputed from x as the forward picks
      it (the first maximum inside the input; padding never wins), as torch.nn.MaxPool2d;
    - "avg": dx[i] += dy[o] / count(o) for every tap i of window o inside the input, count as
      the forward divides (in-input taps, or with `count_include_pad` the taps inside the padded
      input; ONNX AveragePool-19);
    - "lp": dx[i] += dy[o] · sign(x[i])·|x[i]|^(p−1) / y[o]^(p−1) for the in-input taps, with
      y[o] = (Σ |x|^p)^(1/p) recomputed (0 where y[o] = 0; ONNX LpPool-18).
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$dy, StrAttr:$kind,
                   DenseI64ArrayAttr:$kernel_shape, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations, BoolAttr:$ceil_mode,
                   BoolAttr:$count_include_pad, I64Attr:$p);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_PadGradOp : Colossal_Op<"pad_grad", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"getPads().size() % 2 == 0 && !getPads().empty() && getPads()[0] == 0 && getPads()[getPads().size() / 2] == 0 ? std::optional<ShardingRule>(ShardingRule::rowWise()) : std::nullopt">.body;
  let summary = "VJP of pad: each output element's cotangent added to the input element it copies";
  let description = [{
    dy: the cotangent of `pad`'s result [P...]; `pads` and `mode` as the forward pad's. Result
    (explicit type, the forward x's [D...]) of dy's float type: zeros, then
    dx[src(o)] += dy[o] for every output position o whose value came from x (constant mode:
    the positions inside x; reflect, edge and wrap: every position, mapped as the forward maps
    it, so an edge element collects its copies). Positions that negative pads cropped get 0.
  }];
  let arguments = (ins AnyRankedTensor:$dy, DenseI64ArrayAttr:$pads, StrAttr:$mode);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_ResizeGradOp : Colossal_Op<"resize_grad", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise()">.body;
  let summary = "VJP of resize: the transpose of its separable interpolation";
  let description = [{
    dy: the cotangent of `resize`'s result [O0..Or), float; every attribute as the forward
    resize's but `extrapolation_value` (a constant: no gradient). Result (explicit type, the forward x's [D0..Dr)): dx = Aᵀ·dy where A is the
    forward's linear map, the tensor product of the per-dim tap weights (nearest: one tap of
    weight 1; linear: 2; cubic: 4, with clamped neighbour indices whose weights add up):
    dx[i] = Σ_o dy[o] · Π_d w_d(o_d → i_d). Outputs that tf_crop_and_resize extrapolated send
    nothing back (ONNX Resize-19).
  }];
  let arguments = (ins AnyRankedTensor:$dy, StrAttr:$mode, StrAttr:$coordinate_transformation_mode,
                   StrAttr:$nearest_mode, F32Attr:$cubic_coeff_a, BoolAttr:$exclude_outside,
                   DenseF64ArrayAttr:$scales, DenseF64ArrayAttr:$roi);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // COLOSSAL_GRAD_OPS_TD

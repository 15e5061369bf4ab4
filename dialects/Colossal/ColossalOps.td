#ifndef COLOSSAL_OPS_TD
#define COLOSSAL_OPS_TD

include "dialects/Colossal/ColossalDialect.td"
include "dialects/Colossal/ColossalInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Colossal_Op<string mnemonic, list<Trait> traits = []>
    : Op<Colossal_Dialect, mnemonic, !listconcat([Pure], traits)>;

// The op states its vector-Jacobian product (buildVJP, in its family's .cpp) for autodiff.
defvar VJP = DeclareOpInterfaceMethods<Colossal_VJPOpInterface>;

// The op states its sharding rule for tensor parallelism (ColossalInterfaces.td): `Sharded`
// among its traits and `let extraClassDefinition = ShardingRuleIs<"EXPR">.body;`, EXPR a
// ::colossal::ShardingRule (dialects/Colossal/ShardingRule.h) built from the op's accessors.
defvar Sharded = DeclareOpInterfaceMethods<Colossal_ShardingRuleOpInterface>;
class ShardingRuleIs<string rule> {
  code body = "std::optional<::colossal::ShardingRule> $cppClass::getShardingRule() {\n"
              "  using ::colossal::ShardingRule;\n  return " # rule # ";\n}\n";
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Colossal_ConstantOp : Colossal_Op<"constant", [ConstantLike, AllTypesMatch<["value", "result"]>]> {
  let summary = "A tensor constant (ONNX Constant, folded shape arithmetic)";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let builders = [OpBuilder<(ins "::mlir::ElementsAttr":$value), [{
    build($_builder, $_state, value.getType(), value);
  }]>];
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Colossal_BroadcastBinaryOp<string mnemonic, string math, list<Trait> traits = []>
    : Colossal_Op<mnemonic, !listconcat([InferTypeOpAdaptor], traits)> {
  let summary = "Elementwise " # math # " with NumPy broadcasting (ONNX multidirectional)";
  let description = [{
    `lhs`: tensor<A...xT>, `rhs`: tensor<B...xT>; the result has the broadcast shape of A and B
    (right-aligned, a dimension of 1 stretches) and element type T. Incompatible shapes or
    different element types are a verification error. Folds when both operands are constants.
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Colossal_AddOp : Colossal_BroadcastBinaryOp<"add", "addition", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise(ShardingRule::Partial::Additive)">.body;
}
def Colossal_SubOp : Colossal_BroadcastBinaryOp<"sub", "subtraction", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise(ShardingRule::Partial::Additive)">.body;
}
def Colossal_MulOp : Colossal_BroadcastBinaryOp<"mul", "multiplication", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise(ShardingRule::Partial::Scaling)">.body;
}
def Colossal_DivOp : Colossal_BroadcastBinaryOp<"div", "division (integers truncate toward zero)", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise(ShardingRule::Partial::Numerator)">.body;
}
def Colossal_PowOp : Colossal_BroadcastBinaryOp<"pow", "power", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
}
def Colossal_MinOp : Colossal_BroadcastBinaryOp<"min", "minimum", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
}
def Colossal_MaxOp : Colossal_BroadcastBinaryOp<"max", "maximum", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
}

class Colossal_CompareOp<string mnemonic, string math>
    : Colossal_BroadcastBinaryOp<mnemonic, math, [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
  let description = [{
    Like the arithmetic ops, but the result element type is i1 (ONNX bool).
  }];
}
def Colossal_EqualOp : Colossal_CompareOp<"equal", "comparison a == b">;
def Colossal_LessOp : Colossal_CompareOp<"less", "comparison a < b">;
def Colossal_GreaterOp : Colossal_CompareOp<"greater", "comparison a > b">;

def Colossal_WhereOp : Colossal_Op<"where", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
  let summary = "Elementwise select: cond ? x : y, all three broadcast (ONNX Where)";
  let arguments = (ins AnyRankedTensor:$condition, AnyRankedTensor:$x, AnyRankedTensor:$y);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

class Colossal_UnaryOp<string mnemonic, string math, list<Trait> traits = []>
    : Colossal_Op<mnemonic, !listconcat([SameOperandsAndResultType, Sharded], traits)> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
  let summary = "Elementwise " # math;
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasFolder = 1;
}

def Colossal_NegOp : Colossal_UnaryOp<"neg", "negation", [VJP]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise(ShardingRule::Partial::Scaling)">.body;
}
def Colossal_AbsOp : Colossal_UnaryOp<"abs", "absolute value", [VJP]>;
def Colossal_SqrtOp : Colossal_UnaryOp<"sqrt", "square root", [VJP]>;
def Colossal_ReciprocalOp : Colossal_UnaryOp<"reciprocal", "1 / x", [VJP]>;
def Colossal_ExpOp : Colossal_UnaryOp<"exp", "e^x", [VJP]>;
def Colossal_LogOp : Colossal_UnaryOp<"log", "natural logarithm", [VJP]>;
def Colossal_ErfOp : Colossal_UnaryOp<"erf", "Gauss error function", [VJP]>;
def Colossal_TanhOp : Colossal_UnaryOp<"tanh", "hyperbolic tangent", [VJP]>;
def Colossal_SigmoidOp : Colossal_UnaryOp<"sigmoid", "logistic 1 / (1 + e^-x)", [VJP]>;
def Colossal_ReluOp : Colossal_UnaryOp<"relu", "max(x, 0)", [VJP]>;
def Colossal_SiluOp : Colossal_UnaryOp<"silu", "x * sigmoid(x) (SiLU / swish, Elfwing et al. 2017)", [VJP]>;

def Colossal_GeluOp : Colossal_Op<"gelu", [SameOperandsAndResultType, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
  let summary = "GELU (Hendrycks & Gimpel 2016), exact erf form or tanh approximation";
  let description = [{
    `approximate = "none"`: 0.5·x·(1 + erf(x/√2)).
    `approximate = "tanh"`: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
  }];
  let arguments = (ins AnyRankedTensor:$x, DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def Colossal_CastOp : Colossal_Op<"cast", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
  let summary = "Element type conversion (ONNX Cast)";
  let description = [{
    Same shape, new element type. float → int truncates toward zero; → i1 is `x != 0`.
  }];
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Normalization and softmax
//===----------------------------------------------------------------------===//

def Colossal_SoftmaxOp : Colossal_Op<"softmax", [SameOperandsAndResultType, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(getAxis())">.body;
  let summary = "softmax along one axis: exp(x - max) / sum(exp(x - max))";
  let arguments = (ins AnyRankedTensor:$x, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def Colossal_LogSoftmaxOp : Colossal_Op<"log_softmax", [SameOperandsAndResultType, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(getAxis())">.body;
  let summary = "log(softmax(x)) along one axis, computed as x - max - log(sum(exp(x - max)))";
  let arguments = (ins AnyRankedTensor:$x, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def Colossal_LayerNormOp : Colossal_Op<"layer_norm", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(getAxis())">.body;
  let summary = "Layer normalization (Ba et al. 2016; ONNX LayerNormalization)";
  let description = [{
    Normalizes `x` over dims [axis, rank): y = (x − mean) / sqrt(var + epsilon) · scale + bias,
    biased variance. `scale` and `bias` have shape x.shape[axis:]. Result: x's type.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$scale, Optional<AnyRankedTensor>:$bias,
                   I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_RmsNormOp : Colossal_Op<"rms_norm", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(getAxis())">.body;
  let summary = "RMS normalization (Zhang & Sennrich 2019)";
  let description = [{
    y = x / sqrt(mean(x², dims [axis, rank)) + epsilon) · scale; `scale` has shape x.shape[axis:].
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$scale, I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Colossal_ReduceOp<string mnemonic, string math>
    : Colossal_Op<mnemonic, [InferTypeOpAdaptor, VJP, Sharded]> {
  let summary = math # " over `axes` (sorted, non-negative, non-empty)";
  let description = [{
    With `keepdims` the reduced dims stay as 1, else they are removed.
  }];
  let arguments = (ins AnyRankedTensor:$x, DenseI64ArrayAttr:$axes, BoolAttr:$keepdims);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}
def Colossal_ReduceSumOp : Colossal_ReduceOp<"reduce_sum", "Sum"> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::reduction(ShardingRule::Reduce::Sum)">.body;
}
def Colossal_ReduceMeanOp : Colossal_ReduceOp<"reduce_mean", "Arithmetic mean"> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::reduction(ShardingRule::Reduce::Mean)">.body;
}
def Colossal_ReduceMaxOp : Colossal_ReduceOp<"reduce_max", "Maximum"> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::reduction(ShardingRule::Reduce::Max)">.body;
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

def Colossal_MatMulOp : Colossal_Op<"matmul", [InferTypeOpAdaptorWithIsCompatible, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Contraction)">.body;
  let summary = "Batched matrix product [..., M, K] × [..., K, N] → [..., M, N]";
  let description = [{
    Both operands have rank ≥ 2 (the importer reshapes ONNX's 1-D cases); batch dims broadcast.
    The operands share one element type T; the result is T, or f32 when T is bf16 or f16 (the
    products summed in f32 and not rounded back: colossal-auto-mixed-precision's form).
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Colossal_GemmOp : Colossal_Op<"gemm", [InferTypeOpAdaptorWithIsCompatible, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Contraction)">.body;
  let summary = "alpha · op(a) · op(b) + beta · c (ONNX Gemm), op = optional transpose";
  let description = [{
    a and b share one element type T; the result is T, or f32 when T is bf16 or f16 (summed in
    f32, as matmul). c (optional) has the result's element type.
  }];
  let arguments = (ins AnyRankedTensor:$a, AnyRankedTensor:$b, Optional<AnyRankedTensor>:$c,
                   BoolAttr:$trans_a, BoolAttr:$trans_b, F32Attr:$alpha, F32Attr:$beta);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Colossal_LinearOp : Colossal_Op<"linear", []> {
  let summary = "A matmul by a weight with its epilogue: act(x · w + bias) + residual";
  let description = [{
    x: [..., M, K], w: [K, N] (no batch), bias: [N], residual (optional): the result's shape;
    all f32. Result [..., M, N] f32, computed in the order the unfused ops compute it:
    t = x · w (one GEMM, the batch folded into M), t + bias, then `activation` ("none", "relu",
    "gelu" as colossal.gelu with approximate "none", "gelu_tanh" as approximate "tanh"), then
    + residual — each an f32 rounding, so the result is the unfused program's to the bit.
    colossal-fuse-matmul-epilogue makes it at the end of the pipeline from matmul → add(bias) →
    [gelu | relu] → [add(residual)] chains whose intermediate values nothing else reads; it has no
    VJP and no sharding rule (nothing after that pass needs them).
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$w, AnyRankedTensor:$bias,
                   Optional<AnyRankedTensor>:$residual,
                   DefaultValuedStrAttr<StrAttr, "none">:$activation);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_AttentionOp : Colossal_Op<"attention", [InferTypeOpAdaptorWithIsCompatible, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Attention)">.body;
  let summary = "Scaled dot-product attention, causal and/or masked, with GQA";
  let description = [{
    q: [B, Hq, Tq, D], k: [B, Hkv, Tk, D], v: [B, Hkv, Tk, Dv], mask (optional, additive float or
    i1 keep-mask) broadcastable to [B, Hq, Tq, Tk]. Result [B, Hq, Tq, Dv]:
    softmax(q·kᵀ·scale + mask + causal) · v (Vaswani et al. 2017). `causal` hides key j from
    query i unless j ≤ i + Tk − Tq. Grouped-query attention (Ainslie et al. 2023): Hq is a multiple
    of Hkv and query head h reads kv head h / (Hq / Hkv). The result has q's element type, or f32
    when q, k and v are bf16 or f16 (computed in f32: colossal-auto-mixed-precision's form).
  }];
  let arguments = (ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v,
                   Optional<AnyRankedTensor>:$mask, F32Attr:$scale, BoolAttr:$causal);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Colossal_ReshapeOp : Colossal_Op<"reshape", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Reshape)">.body;
  let summary = "Same elements, new static shape (ONNX Reshape/Squeeze/Unsqueeze/Flatten)";
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Colossal_TransposeOp : Colossal_Op<"transpose", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Transpose)">.body;
  let summary = "Permute dims: result.shape[i] = x.shape[perm[i]]";
  let arguments = (ins AnyRankedTensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Colossal_GatherOp : Colossal_Op<"gather", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Gather)">.body;
  let summary = "ONNX Gather: pick slices of `data` along `axis` at `indices`";
  let description = [{
    Result shape: data.shape[:axis] + indices.shape + data.shape[axis+1:]. Negative indices count
    from the end. Embedding lookup is gather with axis 0.
  }];
  let arguments = (ins AnyRankedTensor:$data, AnyRankedTensor:$indices, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Colossal_SliceOp : Colossal_Op<"slice", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Slice)">.body;
  let summary = "Strided slice with one normalized (start, limit, step) per dim";
  let description = [{
    For every dim d: start in [0, size), step ≠ 0, and the count is
    max(0, ceil((limit − start) / step)); a negative step walks backwards with limit ≥ −1.
  }];
  let arguments = (ins AnyRankedTensor:$x, DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$limits,
                   DenseI64ArrayAttr:$steps);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Colossal_ConcatOp : Colossal_Op<"concat", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Concat)">.body;
  let summary = "Concatenate along `axis`";
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Colossal_SplitOp : Colossal_Op<"split", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Split)">.body;
  let summary = "Split into consecutive pieces along `axis`; sizes from the result types";
  let description = [{
    Folds when `x` is a constant (shape arithmetic: torch's `repeat_interleave` splits a constant
    repeats vector), and to `x` itself when there is one piece.
  }];
  let arguments = (ins AnyRankedTensor:$x, I64Attr:$axis);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Colossal_ExpandOp : Colossal_Op<"expand", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::Broadcast)">.body;
  let summary = "Broadcast `x` to the result's shape (ONNX Expand)";
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Colossal_TriluOp : Colossal_Op<"trilu", [SameOperandsAndResultType, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::normalization(::mlir::cast<::mlir::RankedTensorType>(getOperation()->getOperand(0).getType()).getRank() - 2)">.body;
  let summary = "Keep the upper (j − i ≥ k) or lower (j − i ≤ k) triangle of the last two dims";
  let arguments = (ins AnyRankedTensor:$x, BoolAttr:$upper, I64Attr:$k);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasFolder = 1;
}

include "dialects/Colossal/ColossalNNOps.td"
include "dialects/Colossal/ColossalIndexingOps.td"
include "dialects/Colossal/ColossalElementwiseOps.td"
include "dialects/Colossal/ColossalMiscOps.td"
include "dialects/Colossal/ColossalGradOps.td"
include "dialects/Colossal/ColossalTrainOps.td"
include "dialects/Colossal/ColossalServeOps.td"
include "dialects/Colossal/ColossalParallelOps.td"

#endif // COLOSSAL_OPS_TD

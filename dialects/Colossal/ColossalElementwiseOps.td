//===- ColossalElementwiseOps.td - table-driven elementwise math ----------===//
//
// The long tail of ONNX elementwise functions (trigonometry, rounding, parametric activations,
// modulo, logic, bit operations) as two ops whose `fn` attribute names an entry of one table
// (ElementwiseFns.h): which element types the function accepts, whether the result is bool, which
// of the parameters `alpha`/`beta` it takes, and how it folds. One op per arity instead of forty
// copies keeps verification, folding, lowering (one plan op each, `fn` travels as a string) and
// later interfaces (VJP, sharding) in one place, like upstream `linalg.elementwise`.
//
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_ELEMENTWISE_OPS_TD
#define COLOSSAL_ELEMENTWISE_OPS_TD

def Colossal_UnaryFnOp : Colossal_Op<"unary", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
  let summary = "Elementwise unary function selected by `fn` (ONNX math and activations)";
  let description = [{
    `x`: tensor<S x T>; result: tensor<S x T>, or tensor<S x i1> for the predicates `is_nan`,
    `is_inf`, `is_pos_inf`, `is_neg_inf`. Functions and the ONNX operator each implements
    (https://onnx.ai/onnx/operators/):

    | fn | T | alpha, beta | y |
    |---|---|---|---|
    | `cos` `sin` `tan` `acos` `asin` `atan` `cosh` `sinh` `acosh` `asinh` `atanh` | float | | the C library function |
    | `ceil` `floor` | float | | |
    | `round` | float | | nearest integer, halves to even |
    | `sign` | float, int | | -1, 0 or 1 (NaN stays NaN) |
    | `softplus` | float | | log(1 + e^x) |
    | `softsign` | float | | x / (1 + abs(x)) |
    | `mish` | float | | x · tanh(softplus(x)) |
    | `hard_swish` | float | | x · max(0, min(1, x/6 + 1/2)) |
    | `elu` | float | alpha | x ≥ 0 ? x : alpha·(e^x − 1) |
    | `celu` | float | alpha | max(0, x) + min(0, alpha·(e^(x/alpha) − 1)) |
    | `selu` | float | alpha, beta = gamma | gamma · (x > 0 ? x : alpha·(e^x − 1)) |
    | `leaky_relu` | float | alpha | x ≥ 0 ? x : alpha·x |
    | `thresholded_relu` | float | alpha | x > alpha ? x : 0 |
    | `hard_sigmoid` | float | alpha, beta | max(0, min(1, alpha·x + beta)) |
    | `shrink` | float | alpha = lambd, beta = bias | x < −lambd ? x + bias : x > lambd ? x − bias : 0 |
    | `bitwise_not` | int | | ~x |
    | `is_nan` `is_inf` `is_pos_inf` `is_neg_inf` | float | | bool predicates |

    `alpha` and `beta` are present exactly when the function takes them (the importer fills in
    ONNX's defaults). Folds when `x` is a constant.
  }];
  let arguments = (ins StrAttr:$fn, AnyRankedTensor:$x, OptionalAttr<F32Attr>:$alpha,
                   OptionalAttr<F32Attr>:$beta);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$fn $x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Colossal_BinaryFnOp : Colossal_Op<"binary", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::elementwise()">.body;
  let summary = "Elementwise binary function selected by `fn`, with NumPy broadcasting";
  let description = [{
    `lhs`: tensor<A x T>, `rhs`: tensor<B x T>; the result has the broadcast shape and element
    type T, or i1 for the comparisons. Functions (ONNX operator in brackets):

    | fn | T | y |
    |---|---|---|
    | `mod` | float, int | a − floor(a/b)·b: the sign of the divisor (Mod, fmod = 0; NumPy `mod`) |
    | `fmod` | float, int | C fmod: the sign of the dividend (Mod, fmod = 1) |
    | `and` `or` `xor` | i1 | logic (And, Or, Xor) |
    | `bitwise_and` `bitwise_or` `bitwise_xor` | int | (BitwiseAnd, BitwiseOr, BitwiseXor) |
    | `shift_left` `shift_right` | int | a << b, a >> b (BitShift); shifts ≥ the bit width give 0 |
    | `prelu` | float, int | a < 0 ? b·a : a (PRelu; `rhs` is the slope) |
    | `less_equal` `greater_equal` | float, int | a ≤ b, a ≥ b → i1 (LessOrEqual, GreaterOrEqual) |

    Integer `mod`/`fmod` by zero give 0 (ONNX leaves it undefined; never a trap). Folds when both
    operands are constants. VJP for the float functions (as torch.remainder, torch.fmod and
    torch.prelu): `mod` da = g, db = −g·floor(a/b); `fmod` da = g, db = −g·trunc(a/b); `prelu`
    da = g·(a < 0 ? b : 1), db = g·(a < 0 ? a : 0); broadcast dims summed back.
  }];
  let arguments = (ins StrAttr:$fn, AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$fn $lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

#endif // COLOSSAL_ELEMENTWISE_OPS_TD

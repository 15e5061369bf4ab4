//===- ColossalNNOps.td - convolution, pooling, resize, losses, quantization -===//
//
// Neural-network layer ops of the colossal dialect, named after their ONNX operators. Tensors are
// channels-first: x is [N, C, D1, ..., Dn] with n = 1, 2 or 3 spatial dims. Spatial attributes
// (`strides`, `dilations`, `kernel_shape`) have one entry per spatial dim; `pads` has 2n entries,
// all begins then all ends (ONNX's layout), already resolved from `auto_pad` by the importer.
//
// Normalizations (BatchNormalization, InstanceNormalization, GroupNormalization, LpNormalization,
// MeanVarianceNormalization), global pools and SoftmaxCrossEntropyLoss have no op of their own:
// the importer decomposes them into reductions and elementwise ops (lib/Import/ONNX/ImportNN.cpp).
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_NN_OPS_TD
#define COLOSSAL_NN_OPS_TD

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

def Colossal_ConvOp : Colossal_Op<"conv", [InferTypeOpAdaptorWithIsCompatible, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise()">.body;
  let summary = "N-d grouped, strided, dilated cross-correlation (ONNX Conv)";
  let description = [{
    x: [N, C, D1..Dn], w: [M, C/group, K1..Kn], bias (optional): [M]; float element type T.
    Result [N, M, O1..On] of T (or f32 when T is bf16 or f16, the bias then f32: computed in f32,
    colossal-auto-mixed-precision's form) with
    Oi = floor((Di + pads[i] + pads[n+i] − dilations[i]·(Ki − 1) − 1) / strides[i]) + 1:
    y[n, m, o] = bias[m] + Σ_{c, k} x[n, g·C/group + c, o·s − pad_begin + k·d] · w[m, c, k] where
    g = m / (M/group) and positions in the padding read zero (ONNX operator spec, Conv-11).

    `activation` (optional, set by colossal-fuse-conv-epilogue in inference plans) applies an
    elementwise function to y: `relu`; `clip` to [activation_alpha, activation_beta];
    `hard_sigmoid` max(0, min(1, alpha·y + beta)) (ONNX HardSigmoid); `hard_swish`
    y·max(0, min(6, y + 3))/6 (ONNX HardSwish); `sigmoid`. Then, when set, y · output_scale +
    output_shift (a scalar affine map after the activation, as PP-LCNet's learnable affine blocks
    have). A conv with an activation or an output scale/shift has no VJP; otherwise its VJP is
    conv_transpose (dx), conv_grad_weight (dw) and a reduce_sum (dbias).
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$w, Optional<AnyRankedTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, I64Attr:$group,
                   OptionalAttr<StrAttr>:$activation, OptionalAttr<F32Attr>:$activation_alpha,
                   OptionalAttr<F32Attr>:$activation_beta, OptionalAttr<F32Attr>:$output_scale,
                   OptionalAttr<F32Attr>:$output_shift);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_ConvTransposeOp : Colossal_Op<"conv_transpose", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise()">.body;
  let summary = "N-d transposed convolution, the adjoint of conv (ONNX ConvTranspose)";
  let description = [{
    x: [N, C, D1..Dn], w: [C, M/group, K1..Kn], bias (optional): [M]. Result [N, M, O1..On] with
    Oi = strides[i]·(Di − 1) + output_padding[i] + dilations[i]·(Ki − 1) + 1 − pads[i] − pads[n+i].
    Every input element scatters x[n, c, i] · w[c, m, k] to output position i·s + k·d − pad_begin
    (dropped when outside the result). The importer turns `output_shape` and `auto_pad` into
    `pads` (ONNX operator spec, ConvTranspose-11). `activation`, `activation_alpha`,
    `activation_beta`, `output_scale` and `output_shift` are conv's fused epilogue. VJP (without
    an epilogue, output_padding below the stride): conv (dx), conv_grad_weight with x and dy
    exchanged (dw), a reduce_sum (dbias).
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$w, Optional<AnyRankedTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, DenseI64ArrayAttr:$output_padding,
                   I64Attr:$group,
                   OptionalAttr<StrAttr>:$activation, OptionalAttr<F32Attr>:$activation_alpha,
                   OptionalAttr<F32Attr>:$activation_beta, OptionalAttr<F32Attr>:$output_scale,
                   OptionalAttr<F32Attr>:$output_shift);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_ConvIntegerOp : Colossal_Op<"conv_integer", [InferTypeOpAdaptor, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise()">.body;
  let summary = "Integer conv with zero points, i32 accumulation (ONNX ConvInteger)";
  let description = [{
    x: [N, C, D...] of ui8/i8, w: [M, C/group, K...] of ui8/i8, x_zero_point: scalar (or [1]) of
    x's type, w_zero_point: scalar, [1] or [M] of w's type. Result: i32, shaped like conv's:
    conv(x − x_zero_point, w − w_zero_point) computed exactly in 32-bit integers.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$w, AnyRankedTensor:$x_zero_point,
                   AnyRankedTensor:$w_zero_point, DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Colossal_MatMulIntegerOp : Colossal_Op<"matmul_integer", [InferTypeOpAdaptor]> {
  let summary = "Integer matrix product with zero points, i32 accumulation (ONNX MatMulInteger)";
  let description = [{
    a: [..., M, K] of ui8/i8, b: [..., K, N] of ui8/i8 (rank >= 2; batch dims broadcast),
    a_zero_point: scalar, [1] or [M] (per row) of a's type; b_zero_point: scalar, [1] or [N] (per
    column) of b's type. Result [..., M, N] of i32: (a − a_zp)·(b − b_zp), exact.
  }];
  let arguments = (ins AnyRankedTensor:$a, AnyRankedTensor:$b, AnyRankedTensor:$a_zero_point,
                   AnyRankedTensor:$b_zero_point);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

def Colossal_PoolOp : Colossal_Op<"pool", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise()">.body;
  let summary = "Sliding-window max / average / Lp pooling (ONNX MaxPool, AveragePool, LpPool)";
  let description = [{
    x: [N, C, D1..Dn]. Result [N, C, O1..On], same element type, with
    Oi = round((Di + pads[i] + pads[n+i] − dilations[i]·(Ki − 1) − 1) / strides[i]) + 1 where
    round is floor, or ceil when `ceil_mode` (a window that would start past the padded input is
    dropped). `kind`:
    - "max": maximum of the window's elements inside the input (padding never wins);
    - "avg": mean of the window; divided by the number of elements inside the input, or with
      `count_include_pad` by the number inside the padded input;
    - "lp": (Σ |x|^p)^(1/p) over the elements inside the input.
    VJP: pool_grad.
  }];
  let arguments = (ins AnyRankedTensor:$x, StrAttr:$kind, DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, BoolAttr:$ceil_mode,
                   BoolAttr:$count_include_pad, I64Attr:$p);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Colossal_MaxPoolWithIndicesOp : Colossal_Op<"max_pool_with_indices", [InferTypeOpAdaptor, VJP]> {
  let summary = "Max pooling that also returns where each maximum came from (ONNX MaxPool's Indices)";
  let description = [{
    Like `pool` with kind "max"; the second result (i64, same shape) holds the flat index of each
    maximum in x: n·C·S + c·S + the spatial offset, which is row-major, or column-major (the first
    spatial dim fastest) when `storage_order` is 1. S = D1·…·Dn. Ties keep the first maximum.
    VJP (of the values; the indices have none): max pooling's pool_grad.
  }];
  let arguments = (ins AnyRankedTensor:$x, DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, BoolAttr:$ceil_mode, I64Attr:$storage_order);
  let results = (outs AnyRankedTensor:$result, AnyRankedTensor:$indices);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Colossal_MaxUnpoolOp : Colossal_Op<"max_unpool", [VJP]> {
  let summary = "Scatter pooled values back to the positions their indices name (ONNX MaxUnpool)";
  let description = [{
    x: [N, C, d...] values, indices: same shape, i64 flat row-major indices into a tensor of
    shape `index_shape` ([N, C, I...], the unpooled shape MaxPool's input had; as produced by
    `max_pool_with_indices` with storage_order 0). The result (explicit type, same element type as
    x, [N, C, O...] with O ≥ I) is zero except that x[j] lands at the position whose coordinates
    indices[j] names in `index_shape` (ONNX MaxUnpool with output_shape places the unpooled
    tensor at the start of the larger output). An index outside `index_shape` is an error at
    run time. VJP: dx[j] = dy at indices[j], a gather from dy's `index_shape` corner, flattened.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$indices,
                   DenseI64ArrayAttr:$index_shape);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Resize
//===----------------------------------------------------------------------===//

def Colossal_ResizeOp : Colossal_Op<"resize", [VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise()">.body;
  let summary = "Nearest / linear / cubic resampling of every dim (ONNX Resize, Upsample)";
  let description = [{
    x: [D0..Dr) float; result (explicit type): same rank and element type, sizes O0..Or). Output
    coordinate o along dim i maps to the input coordinate
    - "half_pixel": (o + 0.5) / scale − 0.5       - "asymmetric": o / scale
    - "pytorch_half_pixel": like half_pixel, −0.5 when Oi = 1
    - "align_corners": o · (Di − 1) / (scale·Di − 1), 0 when scale·Di = 1
    - "half_pixel_symmetric": Di/2·(1 − Oi/(scale·Di)) + (o + 0.5)/scale − 0.5
    - "tf_half_pixel_for_nn": (o + 0.5) / scale
    - "tf_crop_and_resize": roi[i]·(Di−1) + o·(roi[r+i] − roi[i])·(Di−1)/(Oi−1); a coordinate
      outside [0, Di − 1] yields `extrapolation_value`
    with `scale` = scales[i] (a dim whose scale is 1 and size unchanged is copied). `mode`
    "nearest" picks one input index by `nearest_mode` (round_prefer_floor, round_prefer_ceil,
    floor, ceil); "linear" interpolates the 2 neighbours, "cubic" the 4 neighbours with Keys'
    kernel of parameter `cubic_coeff_a` (weights of neighbours outside the input are zeroed and
    the rest renormalized when `exclude_outside`); neighbour indices are clamped to the input.
    Interpolation is separable: the N-d result is the tensor product of the 1-d weights (ONNX
    operator spec, Resize-19, and its reference implementation). VJP: resize_grad.
  }];
  let arguments = (ins AnyRankedTensor:$x, StrAttr:$mode, StrAttr:$coordinate_transformation_mode,
                   StrAttr:$nearest_mode, F32Attr:$cubic_coeff_a, BoolAttr:$exclude_outside,
                   F32Attr:$extrapolation_value, DenseF64ArrayAttr:$scales,
                   DenseF64ArrayAttr:$roi);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def Colossal_NllLossOp : Colossal_Op<"nll_loss", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::NllLoss)">.body;
  let summary = "Negative log-likelihood loss (ONNX NegativeLogLikelihoodLoss)";
  let description = [{
    input: [N, C, d1..dk] log-probabilities (float), target: [N, d1..dk] i64 or i32 class
    indices in [0, C), weight (optional): [C]. Per element
    loss[n, d] = −input[n, target[n, d], d] · weight[target[n, d]], and 0 with weight 0 where
    target equals `ignore_index` (when set). `reduction` "none" returns loss ([N, d1..dk]);
    "sum" its sum; "mean" the sum divided by the sum of the weights used (the count of targets
    that are not ignored without `weight`). A target outside [0, C) that is not ignored is an
    error at run time. SoftmaxCrossEntropyLoss imports as log_softmax (axis 1) + nll_loss.
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$target,
                   Optional<AnyRankedTensor>:$weight, StrAttr:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

def Colossal_QuantizeLinearOp : Colossal_Op<"quantize_linear", [InferTypeOpAdaptor]> {
  let summary = "Affine quantization to ui8/i8 (ONNX QuantizeLinear)";
  let description = [{
    x: float [D...], scale: float scalar, [1], or [D_axis] (per-axis), zero_point: like scale's
    shape, ui8 or i8. Result: x's shape, zero_point's element type:
    y = saturate(round_half_to_even(x / scale) + zero_point) along `axis` (non-negative).
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$scale,
                   AnyRankedTensor:$zero_point, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Colossal_DequantizeLinearOp : Colossal_Op<"dequantize_linear", [InferTypeOpAdaptor]> {
  let summary = "Affine dequantization (ONNX DequantizeLinear)";
  let description = [{
    x: ui8, i8 or i32 [D...]; scale: float scalar, [1] or [D_axis]; zero_point: x's element type,
    scale's shape. Result: x's shape, scale's element type: y = (x − zero_point) · scale.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$scale,
                   AnyRankedTensor:$zero_point, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Colossal_DynamicQuantizeLinearOp : Colossal_Op<"dynamic_quantize_linear",
                                                   [InferTypeOpAdaptor]> {
  let summary = "ui8 quantization with scale and zero point from the data (ONNX DynamicQuantizeLinear)";
  let description = [{
    x: f32 [D...]. Results: y ui8 [D...], y_scale f32 [], y_zero_point ui8 [] with
    lo = min(0, min x), hi = max(0, max x), y_scale = (hi − lo) / 255,
    y_zero_point = saturate(round_half_to_even(−lo / y_scale)),
    y = saturate(round_half_to_even(x / y_scale) + y_zero_point).
  }];
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result, AnyRankedTensor:$scale,
                  AnyRankedTensor:$zero_point);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

#endif // COLOSSAL_NN_OPS_TD

// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(colossal-test-gradients,func.func(canonicalize,cse))' | FileCheck %s

// An MLP block as the importer and the fusion passes leave it: linear (matmul + bias), tanh GELU,
// linear, mean. Linear layers differentiate into gemms with transpose flags (no transposes), the
// bias into a reduce_sum over the broadcast rows, GELU into one unary_grad.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: -> (tensor<f32> {colossal.output = "loss"}, tensor<8x16xf32> {colossal.output = "grad:w1"}, tensor<16xf32> {colossal.output = "grad:b1"}, tensor<16x8xf32> {colossal.output = "grad:w2"})
// The seed 1 through reduce_mean: 1/32 everywhere (folded to a constant).
// CHECK: %[[DY:.*]] = colossal.constant dense<3.125000e-02> : tensor<4x8xf32>
// CHECK: %[[H:.*]] = colossal.add
// CHECK: %[[A:.*]] = colossal.gelu %[[H]] {approximate = "tanh"}
// CHECK: colossal.reduce_mean
// da = dy·w2ᵀ, dw2 = aᵀ·dy: gemms with transpose flags.
// CHECK: %[[DA:.*]] = colossal.gemm %[[DY]], %arg3 {{.*}}trans_a = false, trans_b = true}
// CHECK: %[[DW2:.*]] = colossal.gemm %[[A]], %[[DY]] {{.*}}trans_a = true, trans_b = false}
// CHECK: %[[DH:.*]] = colossal.unary_grad "gelu_tanh" %[[H]], %[[DA]]
// CHECK: %[[DB1:.*]] = colossal.reduce_sum %[[DH]] {axes = array<i64: 0>, keepdims = false}
// x is an input: only dw1 = xᵀ·dh, no dx.
// CHECK: %[[DW1:.*]] = colossal.gemm %arg0, %[[DH]] {{.*}}trans_a = true, trans_b = false}
// CHECK-NOT: colossal.gemm
// CHECK: return %{{.*}}, %[[DW1]], %[[DB1]], %[[DW2]]
func.func @mlp(%x: tensor<4x8xf32> {colossal.input = "x"}, %w1: tensor<8x16xf32> {colossal.param = "w1"}, %b1: tensor<16xf32> {colossal.param = "b1"}, %w2: tensor<16x8xf32> {colossal.param = "w2"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %h = colossal.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %hb = colossal.add %h, %b1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %a = colossal.gelu %hb {approximate = "tanh"} : tensor<4x16xf32>
  %y = colossal.matmul %a, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %l = colossal.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A pre-LN attention block on a [B, T, C] = [1, 4, 8] input with 2 heads: layer_norm, the fused
// causal attention, residual, sum. The backward is layer_norm_grad and attention_grad; x is an
// input, so only the parameters get gradients.
// CHECK-LABEL: func.func @ln_attention
// CHECK-SAME: tensor<8xf32> {colossal.output = "grad:ln.weight"}, tensor<8xf32> {colossal.output = "grad:ln.bias"}, tensor<8x8xf32> {colossal.output = "grad:wq"}, tensor<8x8xf32> {colossal.output = "grad:wk"}, tensor<8x8xf32> {colossal.output = "grad:wv"})
// CHECK: %[[ONES:.*]] = colossal.constant dense<1.000000e+00> : tensor<1x2x4x4xf32>
// CHECK: %[[N:.*]] = colossal.layer_norm %arg0, %arg1, %arg2
// CHECK: %[[Q:.*]] = colossal.transpose
// CHECK: %[[K:.*]] = colossal.transpose
// CHECK: %[[V:.*]] = colossal.transpose
// CHECK: %[[Y:.*]] = colossal.attention %[[Q]], %[[K]], %[[V]] {causal = true
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = colossal.attention_grad %[[Q]], %[[K]], %[[V]], %[[Y]], %[[ONES]] {causal = true, scale = 5.000000e-01 : f32}
// The heads are transposed back and the three projections' input gradients summed.
// CHECK: colossal.transpose %[[DV]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[N2:.*]] = colossal.reshape %[[N]] : tensor<1x4x8xf32> -> tensor<4x8xf32>
// CHECK: %[[DWV:.*]] = colossal.gemm %[[N2]], %{{.*}} {{.*}}trans_a = true, trans_b = false}
// CHECK: colossal.add
// CHECK: colossal.add
// CHECK: %{{.*}}, %[[DG:.*]], %[[DBETA:.*]] = colossal.layer_norm_grad %arg0, %arg1, %{{.*}} {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK: return %{{.*}}, %[[DG]], %[[DBETA]], %{{.*}}, %{{.*}}, %[[DWV]]
func.func @ln_attention(%x: tensor<1x4x8xf32> {colossal.input = "x"}, %g: tensor<8xf32> {colossal.param = "ln.weight"}, %bt: tensor<8xf32> {colossal.param = "ln.bias"}, %wq: tensor<8x8xf32> {colossal.param = "wq"}, %wk: tensor<8x8xf32> {colossal.param = "wk"}, %wv: tensor<8x8xf32> {colossal.param = "wv"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %n = colossal.layer_norm %x, %g, %bt {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<1x4x8xf32>
  %q0 = colossal.matmul %n, %wq : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %k0 = colossal.matmul %n, %wk : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %v0 = colossal.matmul %n, %wv : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %q1 = colossal.reshape %q0 : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
  %k1 = colossal.reshape %k0 : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
  %v1 = colossal.reshape %v0 : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
  %q = colossal.transpose %q1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %k = colossal.transpose %k1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %v = colossal.transpose %v1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %o = colossal.attention %q, %k, %v {causal = true, scale = 5.000000e-01 : f32} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o1 = colossal.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x4xf32>) -> tensor<1x4x2x4xf32>
  %o2 = colossal.reshape %o1 : tensor<1x4x2x4xf32> -> tensor<1x4x8xf32>
  %r = colossal.add %x, %o2 : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %l = colossal.reduce_sum %r {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<1x4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Functions with another signature are left alone.
// CHECK-LABEL: func.func @not_a_loss
// CHECK-SAME: -> (tensor<4xf32> {colossal.output = "y"})
// CHECK-NEXT: colossal.exp
// CHECK-NEXT: return
func.func @not_a_loss(%w: tensor<4xf32> {colossal.param = "w"}) -> (tensor<4xf32> {colossal.output = "y"}) {
  %y = colossal.exp %w : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A CNN block on an image input: conv (2 groups, stride 2, pad 1) + bias, relu, 2x2 max pool.
// Max pooling routes the cotangent back through pool_grad, relu through unary_grad; the weight
// gets conv_grad_weight and the bias a reduce_sum over batch and space. x is an input, so no
// conv_transpose (conv's dx) is built.
// CHECK-LABEL: func.func @conv_relu_maxpool
// CHECK-SAME: tensor<6x2x3x3xf32> {colossal.output = "grad:w"}, tensor<6xf32> {colossal.output = "grad:b"})
// CHECK: %[[ONES:.*]] = colossal.constant dense<1.000000e+00> : tensor<2x6x2x2xf32>
// CHECK: %[[Y:.*]] = colossal.conv %arg0, %arg1, %arg2
// CHECK: %[[R:.*]] = colossal.relu %[[Y]]
// CHECK: %[[DR:.*]] = colossal.pool_grad %[[R]], %[[ONES]] {ceil_mode = false, count_include_pad = false, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, kind = "max", p = 2 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x6x4x4xf32>, tensor<2x6x2x2xf32>) -> tensor<2x6x4x4xf32>
// CHECK: %[[DY:.*]] = colossal.unary_grad "relu" %[[Y]], %[[DR]]
// CHECK: %[[DW:.*]] = colossal.conv_grad_weight %arg0, %[[DY]] {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<2x6x4x4xf32>) -> tensor<6x2x3x3xf32>
// CHECK: %[[DB:.*]] = colossal.reduce_sum %[[DY]] {axes = array<i64: 0, 2, 3>, keepdims = false} : (tensor<2x6x4x4xf32>) -> tensor<6xf32>
// CHECK-NOT: colossal.conv_transpose
// CHECK: return %{{.*}}, %[[DW]], %[[DB]]
func.func @conv_relu_maxpool(%x: tensor<2x4x7x7xf32> {colossal.input = "x"}, %w: tensor<6x2x3x3xf32> {colossal.param = "w"}, %b: tensor<6xf32> {colossal.param = "b"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %y = colossal.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<2x6x4x4xf32>
  %r = colossal.relu %y : tensor<2x6x4x4xf32>
  %p = colossal.pool %r {kind = "max", kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false, count_include_pad = false, p = 2 : i64} : (tensor<2x6x4x4xf32>) -> tensor<2x6x2x2xf32>
  %l = colossal.reduce_sum %p {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<2x6x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A trainable input of a conv gets conv's adjoint: conv_transpose of the cotangent by the same
// weight and window. Here 7 + 1 + 1 − 3 = 6 is even, so the stride-2 output rule drops no row of
// the input and output_padding is 0 in dim 0; dim 1 (8 + 1 + 1 − 3 = 7) drops one: output_padding 1.
// CHECK-LABEL: func.func @conv_input_grad
// CHECK: colossal.conv_transpose %{{.*}}, %arg1 {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 0, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>, tensor<3x2x3x3xf32>) -> tensor<1x2x7x8xf32>
func.func @conv_input_grad(%x: tensor<1x2x7x8xf32> {colossal.param = "x"}, %w: tensor<3x2x3x3xf32> {colossal.param = "w"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %y = colossal.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x7x8xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32>
  %l = colossal.reduce_sum %y {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x3x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// conv_transpose is the adjoint of conv: its dx is a conv of the cotangent by the same weight,
// its dw conv_grad_weight with the cotangent in x's place.
// CHECK-LABEL: func.func @conv_transpose
// CHECK: %[[DX:.*]] = colossal.conv %[[G:.*]], %arg1 {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x2x8x8xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32>
// CHECK: %[[DW:.*]] = colossal.conv_grad_weight %[[G]], %arg0 {{.*}} : (tensor<1x2x8x8xf32>, tensor<1x3x4x4xf32>) -> tensor<3x2x3x3xf32>
// CHECK: return %{{.*}}, %[[DX]], %[[DW]]
func.func @conv_transpose(%x: tensor<1x3x4x4xf32> {colossal.param = "x"}, %w: tensor<3x2x3x3xf32> {colossal.param = "w"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %y = colossal.conv_transpose %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>, tensor<3x2x3x3xf32>) -> tensor<1x2x8x8xf32>
  %s = colossal.mul %y, %y : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %l = colossal.reduce_sum %s {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x2x8x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Pad and resize are linear: pad_grad and resize_grad carry the forward's attributes (resize's
// but extrapolation_value) and return the input's type.
// CHECK-LABEL: func.func @pad_resize
// CHECK: %[[DP:.*]] = colossal.resize_grad %{{.*}} {coordinate_transformation_mode = "half_pixel", cubic_coeff_a = -7.500000e-01 : f32, exclude_outside = false, mode = "linear", nearest_mode = "floor", roi = array<f64>, scales = array<f64: 1.000000e+00, 1.000000e+00, 2.000000e+00, 2.000000e+00>} : (tensor<1x2x12x14xf32>) -> tensor<1x2x6x7xf32>
// CHECK: %[[DX:.*]] = colossal.pad_grad %[[DP]] {mode = "reflect", pads = array<i64: 0, 0, 1, 2, 0, 0, 1, 0>} : (tensor<1x2x6x7xf32>) -> tensor<1x2x4x5xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @pad_resize(%x: tensor<1x2x4x5xf32> {colossal.param = "x"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %p = colossal.pad %x {mode = "reflect", pads = array<i64: 0, 0, 1, 2, 0, 0, 1, 0>} : (tensor<1x2x4x5xf32>) -> tensor<1x2x6x7xf32>
  %r = colossal.resize %p {coordinate_transformation_mode = "half_pixel", cubic_coeff_a = -7.500000e-01 : f32, exclude_outside = false, extrapolation_value = 0.000000e+00 : f32, mode = "linear", nearest_mode = "floor", roi = array<f64>, scales = array<f64: 1.0, 1.0, 2.0, 2.0>} : (tensor<1x2x6x7xf32>) -> tensor<1x2x12x14xf32>
  %s = colossal.mul %r, %r : (tensor<1x2x12x14xf32>, tensor<1x2x12x14xf32>) -> tensor<1x2x12x14xf32>
  %l = colossal.reduce_sum %s {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x2x12x14xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// SegNet's decoder: max pooling with indices, then max_unpool into a larger output. The unpool's
// VJP reads dy at the indices (a slice of its index_shape corner, flattened, then a gather); the
// pool's is max pooling's pool_grad.
// CHECK-LABEL: func.func @max_unpool
// CHECK: %[[V:.*]], %[[I:.*]] = colossal.max_pool_with_indices %arg0
// CHECK: %[[C:.*]] = colossal.slice %{{.*}} {limits = array<i64: 1, 2, 4, 4>, starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x5xf32>) -> tensor<1x2x4x4xf32>
// CHECK: %[[F:.*]] = colossal.reshape %[[C]] : tensor<1x2x4x4xf32> -> tensor<32xf32>
// CHECK: %[[DV:.*]] = colossal.gather %[[F]], %[[I]] {axis = 0 : i64} : (tensor<32xf32>, tensor<1x2x2x2xi64>) -> tensor<1x2x2x2xf32>
// CHECK: colossal.pool_grad %arg0, %[[DV]] {{.*}}kind = "max"
func.func @max_unpool(%x: tensor<1x2x4x4xf32> {colossal.param = "x"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %v, %i = colossal.max_pool_with_indices %x {ceil_mode = false, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, storage_order = 0 : i64, strides = array<i64: 2, 2>} : (tensor<1x2x4x4xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>)
  %u = colossal.max_unpool %v, %i {index_shape = array<i64: 1, 2, 4, 4>} : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xi64>) -> tensor<1x2x5x5xf32>
  %s = colossal.mul %u, %u : (tensor<1x2x5x5xf32>, tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>
  %l = colossal.reduce_sum %s {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x2x5x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// CumSum's VJP is the transposed running sum: the same exclusivity, the other direction.
// CHECK-LABEL: func.func @cumsum
// CHECK: colossal.reduce_sum
// CHECK: %[[DY:.*]] = colossal.mul %{{.*}}, %arg1
// CHECK: %[[DX:.*]] = colossal.cumsum %[[DY]] {axis = 1 : i64, exclusive = true, reverse = true} : tensor<2x5xf32>
// CHECK: return %{{.*}}, %[[DX]]
func.func @cumsum(%x: tensor<2x5xf32> {colossal.param = "x"}, %r: tensor<2x5xf32> {colossal.input = "r"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %c = colossal.cumsum %x {axis = 1 : i64, exclusive = true, reverse = false} : tensor<2x5xf32>
  %m = colossal.mul %c, %r : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
  %l = colossal.reduce_sum %m {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// GatherElements and ScatterElements `add` are each other's adjoints: the scatter's updates get
// a gather_elements of the cotangent, the gather's data a scatter_elements `add` into zeros; w
// (the scatter's data too) sums both paths.
// CHECK-LABEL: func.func @gather_scatter_add
// CHECK: %[[Z:.*]] = colossal.constant dense<0.000000e+00> : tensor<4x3xf32>
// CHECK: %[[DS:.*]] = colossal.add
// CHECK: %[[DG:.*]] = colossal.gather_elements %[[DS]], %arg2 {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
// CHECK: %[[DX:.*]] = colossal.scatter_elements %[[Z]], %arg2, %[[DG]] {axis = 0 : i64, reduction = "add"}
// CHECK: %[[DW:.*]] = colossal.add %[[DS]], %[[DX]]
// CHECK: return %{{.*}}, %[[DW]]
func.func @gather_scatter_add(%x: tensor<4x3xf32> {colossal.input = "x"}, %w: tensor<4x3xf32> {colossal.param = "w"}, %i: tensor<2x3xi64> {colossal.input = "i"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %g = colossal.gather_elements %w, %i {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  %s = colossal.scatter_elements %w, %i, %g {axis = 0 : i64, reduction = "add"} : (tensor<4x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %m = colossal.mul %s, %s : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %l = colossal.reduce_sum %m {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Without a reduction the written positions of data get no gradient (a scatter of zeros into the
// cotangent) and each update the cotangent of the position it wrote. The indices are an input:
// nothing checks them for duplicates at compile time.
// CHECK-LABEL: func.func @scatter_none
// CHECK: %[[Z:.*]] = colossal.constant dense<0.000000e+00> : tensor<2x3xf32>
// CHECK: %[[DY:.*]] = colossal.add
// CHECK: %[[DX:.*]] = colossal.scatter_elements %[[DY]], %arg2, %[[Z]] {axis = 0 : i64, reduction = "none"}
// CHECK: %[[DU:.*]] = colossal.gather_elements %[[DY]], %arg2 {axis = 0 : i64}
// CHECK: return %{{.*}}, %[[DX]], %[[DU]]
func.func @scatter_none(%x: tensor<4x3xf32> {colossal.param = "x"}, %u: tensor<2x3xf32> {colossal.param = "u"}, %i: tensor<2x3xi64> {colossal.input = "i"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %s = colossal.scatter_elements %x, %i, %u {axis = 0 : i64, reduction = "none"} : (tensor<4x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %m = colossal.mul %s, %s : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %l = colossal.reduce_sum %m {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// ScatterND `max`: the cotangent is shared by data and the updates equal to the result.
// CHECK-LABEL: func.func @scatter_nd_max
// CHECK: %[[Y:.*]] = colossal.scatter_nd %arg0, %arg2, %arg1 {reduction = "max"}
// CHECK: %[[DW:.*]] = colossal.equal %arg0, %[[Y]]
// CHECK: %[[YU:.*]] = colossal.gather_nd %[[Y]], %arg2 {batch_dims = 0 : i64}
// CHECK: %[[UW:.*]] = colossal.equal %arg1, %[[YU]]
// CHECK: colossal.scatter_nd %{{.*}}, %arg2, %{{.*}} {reduction = "add"}
// CHECK: %[[SHARE:.*]] = colossal.div
// CHECK: %[[DX:.*]] = colossal.where %[[DW]], %[[SHARE]]
// CHECK: %[[DU:.*]] = colossal.gather_nd %[[SHARE]], %arg2
// CHECK: colossal.where %[[UW]], %[[DU]]
func.func @scatter_nd_max(%x: tensor<3x2xf32> {colossal.param = "x"}, %u: tensor<2x2xf32> {colossal.param = "u"}, %i: tensor<2x1xi64> {colossal.input = "i"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %y = colossal.scatter_nd %x, %i, %u {reduction = "max"} : (tensor<3x2xf32>, tensor<2x1xi64>, tensor<2x2xf32>) -> tensor<3x2xf32>
  %l = colossal.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<3x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// PRelu (`binary "prelu"`): x's cotangent is g·(x < 0 ? slope : 1), the slope's g·(x < 0 ? x : 0)
// summed over the dims it was broadcast along.
// CHECK-LABEL: func.func @prelu
// CHECK: %[[NEG:.*]] = colossal.less %arg0, %{{.*}} : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xi1>
// CHECK: colossal.where %[[NEG]], %arg1, %{{.*}} : (tensor<2x3x4xi1>, tensor<3x1xf32>, tensor<f32>) -> tensor<2x3x4xf32>
// CHECK: colossal.where %[[NEG]], %arg0, %{{.*}} : (tensor<2x3x4xi1>, tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
// CHECK: %[[DS:.*]] = colossal.reduce_sum %{{.*}} {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
// CHECK: colossal.reshape %[[DS]] : tensor<3xf32> -> tensor<3x1xf32>
func.func @prelu(%x: tensor<2x3x4xf32> {colossal.param = "x"}, %s: tensor<3x1xf32> {colossal.param = "s"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %y = colossal.binary "prelu" %x, %s : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  %l = colossal.reduce_sum %y {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

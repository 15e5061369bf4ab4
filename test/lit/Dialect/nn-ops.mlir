// RUN: colossal-opt %s | FileCheck %s
// RUN: colossal-opt %s --mlir-print-op-generic | colossal-opt | FileCheck %s

// The neural-network ops (ColossalNNOps.td) parse, infer their result types and print back.

// CHECK-LABEL: func.func @conv
// CHECK: colossal.conv %arg0, %arg1, %arg2 {dilations = array<i64: 1, 2>, group = 2 : i64, pads = array<i64: 1, 0, 1, 0>, strides = array<i64: 2, 1>} : (tensor<1x4x7x6xf32>, tensor<6x2x3x2xf32>, tensor<6xf32>) -> tensor<1x6x4x4xf32>
// CHECK: colossal.conv_transpose %arg0, %arg3 {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 1, 0>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x7x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x16x13xf32>
func.func @conv(%x: tensor<1x4x7x6xf32>, %w: tensor<6x2x3x2xf32>, %b: tensor<6xf32>, %wt: tensor<4x3x3x3xf32>) {
  %0 = colossal.conv %x, %w, %b {dilations = array<i64: 1, 2>, group = 2 : i64, pads = array<i64: 1, 0, 1, 0>, strides = array<i64: 2, 1>} : (tensor<1x4x7x6xf32>, tensor<6x2x3x2xf32>, tensor<6xf32>) -> tensor<1x6x4x4xf32>
  %1 = colossal.conv_transpose %x, %wt {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 1, 0>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x7x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x16x13xf32>
  return
}

// CHECK-LABEL: func.func @integer
// CHECK: colossal.conv_integer {{.*}} -> tensor<1x2x2x2xi32>
// CHECK: colossal.matmul_integer {{.*}} : (tensor<2x4x3xui8>, tensor<3x5xi8>, tensor<ui8>, tensor<5xi8>) -> tensor<2x4x5xi32>
func.func @integer(%x: tensor<1x1x3x3xui8>, %w: tensor<2x1x2x2xui8>, %zx: tensor<ui8>, %zw: tensor<2xui8>,
                   %a: tensor<2x4x3xui8>, %b: tensor<3x5xi8>, %za: tensor<ui8>, %zb: tensor<5xi8>) {
  %0 = colossal.conv_integer %x, %w, %zx, %zw {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x3x3xui8>, tensor<2x1x2x2xui8>, tensor<ui8>, tensor<2xui8>) -> tensor<1x2x2x2xi32>
  %1 = colossal.matmul_integer %a, %b, %za, %zb : (tensor<2x4x3xui8>, tensor<3x5xi8>, tensor<ui8>, tensor<5xi8>) -> tensor<2x4x5xi32>
  return
}

// CHECK-LABEL: func.func @pools
// CHECK: colossal.pool %arg0 {{{.*}}kind = "max"{{.*}}} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32>
// CHECK: colossal.pool %arg0 {{{.*}}kind = "avg"{{.*}}} : (tensor<1x1x4x4xf32>) -> tensor<1x1x1x1xf32>
// CHECK: colossal.max_pool_with_indices %arg0 {{.*}} : (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
// CHECK: colossal.max_unpool
func.func @pools(%x: tensor<1x1x4x4xf32>) {
  // ceil_mode keeps the partial window at the end: ceil((4 - 3) / 2) + 1 = 2
  %0 = colossal.pool %x {kind = "max", kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true, count_include_pad = false, p = 2 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32>
  %1 = colossal.pool %x {kind = "avg", kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false, count_include_pad = false, p = 2 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x1x1xf32>
  %2:2 = colossal.max_pool_with_indices %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false, storage_order = 0 : i64} : (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
  %3 = colossal.max_unpool %2#0, %2#1 {index_shape = array<i64: 1, 1, 4, 4>} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>) -> tensor<1x1x5x5xf32>
  return
}

// CHECK-LABEL: func.func @resize_loss_quant
// CHECK: colossal.resize %arg0 {{.*}} : (tensor<1x1x2x2xf32>) -> tensor<1x1x4x6xf32>
// CHECK: colossal.nll_loss %arg1, %arg2 {ignore_index = -1 : i64, reduction = "mean"} : (tensor<3x5x2xf32>, tensor<3x2xi64>) -> tensor<f32>
// CHECK: colossal.nll_loss %arg1, %arg2, %arg3 {reduction = "none"} : (tensor<3x5x2xf32>, tensor<3x2xi64>, tensor<5xf32>) -> tensor<3x2xf32>
// CHECK: colossal.quantize_linear {{.*}} -> tensor<1x3x2xi8>
// CHECK: colossal.dequantize_linear {{.*}} -> tensor<1x3x2xf32>
// CHECK: colossal.dynamic_quantize_linear {{.*}} -> (tensor<1x3x2xui8>, tensor<f32>, tensor<ui8>)
func.func @resize_loss_quant(%x: tensor<1x1x2x2xf32>, %lp: tensor<3x5x2xf32>, %t: tensor<3x2xi64>, %w: tensor<5xf32>,
                             %q: tensor<1x3x2xf32>, %s: tensor<3xf32>, %z: tensor<3xi8>) {
  %0 = colossal.resize %x {mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor", cubic_coeff_a = -7.500000e-01 : f32, exclude_outside = false, extrapolation_value = 0.000000e+00 : f32, scales = array<f64: 1.0, 1.0, 2.0, 3.0>, roi = array<f64>} : (tensor<1x1x2x2xf32>) -> tensor<1x1x4x6xf32>
  %1 = colossal.nll_loss %lp, %t {ignore_index = -1 : i64, reduction = "mean"} : (tensor<3x5x2xf32>, tensor<3x2xi64>) -> tensor<f32>
  %2 = colossal.nll_loss %lp, %t, %w {reduction = "none"} : (tensor<3x5x2xf32>, tensor<3x2xi64>, tensor<5xf32>) -> tensor<3x2xf32>
  %3 = colossal.quantize_linear %q, %s, %z {axis = 1 : i64} : (tensor<1x3x2xf32>, tensor<3xf32>, tensor<3xi8>) -> tensor<1x3x2xi8>
  %4 = colossal.dequantize_linear %3, %s, %z {axis = 1 : i64} : (tensor<1x3x2xi8>, tensor<3xf32>, tensor<3xi8>) -> tensor<1x3x2xf32>
  %5:3 = colossal.dynamic_quantize_linear %q : (tensor<1x3x2xf32>) -> (tensor<1x3x2xui8>, tensor<f32>, tensor<ui8>)
  return
}

// The backward ops of the family (ColossalGradOps.td): explicit result types, the forward's
// attributes.
// CHECK-LABEL: func.func @grads
// CHECK: colossal.conv_grad_weight %arg0, %arg1 {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<2x6x4x4xf32>) -> tensor<6x2x3x3xf32>
// CHECK: colossal.pool_grad %arg2, %arg1 {ceil_mode = false, count_include_pad = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, kind = "avg", p = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x6x8x8xf32>, tensor<2x6x4x4xf32>) -> tensor<2x6x8x8xf32>
// CHECK: colossal.pad_grad %arg2 {mode = "edge", pads = array<i64: 0, 0, 2, 2, 0, 0, 2, 2>} : (tensor<2x6x8x8xf32>) -> tensor<2x6x4x4xf32>
// CHECK: colossal.resize_grad %arg2 {{.*}}mode = "nearest"{{.*}} : (tensor<2x6x8x8xf32>) -> tensor<2x6x4x4xf32>
func.func @grads(%x: tensor<2x4x7x7xf32>, %dy: tensor<2x6x4x4xf32>, %big: tensor<2x6x8x8xf32>) {
  %0 = colossal.conv_grad_weight %x, %dy {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<2x6x4x4xf32>) -> tensor<6x2x3x3xf32>
  %1 = colossal.pool_grad %big, %dy {kind = "avg", kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = false, count_include_pad = true, p = 2 : i64} : (tensor<2x6x8x8xf32>, tensor<2x6x4x4xf32>) -> tensor<2x6x8x8xf32>
  %2 = colossal.pad_grad %big {mode = "edge", pads = array<i64: 0, 0, 2, 2, 0, 0, 2, 2>} : (tensor<2x6x8x8xf32>) -> tensor<2x6x4x4xf32>
  %3 = colossal.resize_grad %big {mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor", cubic_coeff_a = -7.500000e-01 : f32, exclude_outside = false, scales = array<f64: 1.0, 1.0, 2.0, 2.0>, roi = array<f64>} : (tensor<2x6x8x8xf32>) -> tensor<2x6x4x4xf32>
  return
}

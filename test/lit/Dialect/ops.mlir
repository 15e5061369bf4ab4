// RUN: colossal-opt %s | FileCheck %s
// Round trip through the custom and the generic form must print the same thing.
// RUN: colossal-opt %s --mlir-print-op-generic | colossal-opt | FileCheck %s

// Every op of the colossal dialect parses, verifies and prints back in its custom form.

// CHECK-LABEL: func.func @constant
// CHECK:       colossal.constant dense<[1, 2, 3]> : tensor<3xi64>
// CHECK:       colossal.constant dense<0.000000e+00> : tensor<2x2xf32>
func.func @constant() -> (tensor<3xi64>, tensor<2x2xf32>) {
  %0 = colossal.constant dense<[1, 2, 3]> : tensor<3xi64>
  %1 = colossal.constant dense<0.0> : tensor<2x2xf32>
  return %0, %1 : tensor<3xi64>, tensor<2x2xf32>
}

// CHECK-LABEL: func.func @broadcast_binary
// CHECK-SAME:  (%[[A:.*]]: tensor<2x3xf32>, %[[B:.*]]: tensor<3xf32>)
// CHECK:       colossal.add %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK:       colossal.sub %[[B]], %[[A]] : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK:       colossal.mul
// CHECK:       colossal.div
// CHECK:       colossal.pow
// CHECK:       colossal.min
// CHECK:       colossal.max
// CHECK:       colossal.equal %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK:       colossal.less
// CHECK:       colossal.greater
func.func @broadcast_binary(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  %0 = colossal.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = colossal.sub %b, %a : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = colossal.mul %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %3 = colossal.div %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %4 = colossal.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %5 = colossal.min %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %6 = colossal.max %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %7 = colossal.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %8 = colossal.less %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %9 = colossal.greater %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  return
}

// CHECK-LABEL: func.func @where
// CHECK:       colossal.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x1xi1>, tensor<4x5xf32>, tensor<f32>) -> tensor<4x5xf32>
func.func @where(%c: tensor<4x1xi1>, %x: tensor<4x5xf32>, %y: tensor<f32>) -> tensor<4x5xf32> {
  %0 = colossal.where %c, %x, %y : (tensor<4x1xi1>, tensor<4x5xf32>, tensor<f32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// CHECK-LABEL: func.func @unary
// CHECK:       colossal.neg %{{.*}} : tensor<8xf32>
// CHECK:       colossal.abs
// CHECK:       colossal.sqrt
// CHECK:       colossal.reciprocal
// CHECK:       colossal.exp
// CHECK:       colossal.log
// CHECK:       colossal.erf
// CHECK:       colossal.tanh
// CHECK:       colossal.sigmoid
// CHECK:       colossal.relu
// CHECK:       colossal.silu
// CHECK:       colossal.gelu %{{.*}} : tensor<8xf32>
// CHECK:       colossal.gelu %{{.*}} {approximate = "tanh"} : tensor<8xf32>
// CHECK:       colossal.cast %{{.*}} : tensor<8xf32> -> tensor<8xi64>
func.func @unary(%x: tensor<8xf32>) {
  %0 = colossal.neg %x : tensor<8xf32>
  %1 = colossal.abs %x : tensor<8xf32>
  %2 = colossal.sqrt %x : tensor<8xf32>
  %3 = colossal.reciprocal %x : tensor<8xf32>
  %4 = colossal.exp %x : tensor<8xf32>
  %5 = colossal.log %x : tensor<8xf32>
  %6 = colossal.erf %x : tensor<8xf32>
  %7 = colossal.tanh %x : tensor<8xf32>
  %8 = colossal.sigmoid %x : tensor<8xf32>
  %9 = colossal.relu %x : tensor<8xf32>
  %10 = colossal.silu %x : tensor<8xf32>
  %11 = colossal.gelu %x : tensor<8xf32>
  %12 = colossal.gelu %x {approximate = "tanh"} : tensor<8xf32>
  %13 = colossal.cast %x : tensor<8xf32> -> tensor<8xi64>
  return
}

// CHECK-LABEL: func.func @normalization
// CHECK:       colossal.softmax %{{.*}} {axis = 1 : i64} : tensor<2x8xf32>
// CHECK:       colossal.log_softmax %{{.*}} {axis = 1 : i64} : tensor<2x8xf32>
// CHECK:       colossal.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK:       colossal.layer_norm %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK:       colossal.rms_norm %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
func.func @normalization(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) {
  %0 = colossal.softmax %x {axis = 1 : i64} : tensor<2x8xf32>
  %1 = colossal.log_softmax %x {axis = 1 : i64} : tensor<2x8xf32>
  %2 = colossal.layer_norm %x, %w, %b {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %3 = colossal.layer_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %4 = colossal.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return
}

// CHECK-LABEL: func.func @reductions
// CHECK:       colossal.reduce_sum %{{.*}} {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
// CHECK:       colossal.reduce_mean %{{.*}} {axes = array<i64: 2>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
// CHECK:       colossal.reduce_max %{{.*}} {axes = array<i64: 1>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
func.func @reductions(%x: tensor<2x3x4xf32>) {
  %0 = colossal.reduce_sum %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  %1 = colossal.reduce_mean %x {axes = array<i64: 2>, keepdims = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  %2 = colossal.reduce_max %x {axes = array<i64: 1>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  return
}

// CHECK-LABEL: func.func @contractions
// CHECK:       colossal.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK:       colossal.gemm %{{.*}}, %{{.*}}, %{{.*}} {alpha = 1.000000e+00 : f32, beta = 1.000000e+00 : f32, trans_a = false, trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK:       colossal.gemm %{{.*}}, %{{.*}} {alpha = 2.000000e+00 : f32, beta = 0.000000e+00 : f32, trans_a = true, trans_b = false} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
func.func @contractions(%a: tensor<2x4x8xf32>, %b: tensor<8x16xf32>, %m: tensor<4x8xf32>, %w: tensor<16x8xf32>, %c: tensor<16xf32>, %mt: tensor<8x4xf32>) {
  %0 = colossal.matmul %a, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %1 = colossal.gemm %m, %w, %c {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = colossal.gemm %mt, %b {alpha = 2.0 : f32, beta = 0.0 : f32, trans_a = true, trans_b = false} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return
}

// Grouped-query attention (8 query heads over 2 kv heads), with and without a mask.
// CHECK-LABEL: func.func @attention
// CHECK:       colossal.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = true, scale = 1.250000e-01 : f32} : (tensor<1x8x5x64xf32>, tensor<1x2x5x64xf32>, tensor<1x2x5x32xf32>) -> tensor<1x8x5x32xf32>
// CHECK:       colossal.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {causal = false, scale = 1.250000e-01 : f32} : (tensor<1x8x5x64xf32>, tensor<1x2x5x64xf32>, tensor<1x2x5x32xf32>, tensor<1x1x5x5xi1>) -> tensor<1x8x5x32xf32>
func.func @attention(%q: tensor<1x8x5x64xf32>, %k: tensor<1x2x5x64xf32>, %v: tensor<1x2x5x32xf32>, %m: tensor<1x1x5x5xi1>) {
  %0 = colossal.attention %q, %k, %v {causal = true, scale = 0.125 : f32} : (tensor<1x8x5x64xf32>, tensor<1x2x5x64xf32>, tensor<1x2x5x32xf32>) -> tensor<1x8x5x32xf32>
  %1 = colossal.attention %q, %k, %v, %m {causal = false, scale = 0.125 : f32} : (tensor<1x8x5x64xf32>, tensor<1x2x5x64xf32>, tensor<1x2x5x32xf32>, tensor<1x1x5x5xi1>) -> tensor<1x8x5x32xf32>
  return
}

// CHECK-LABEL: func.func @data_movement
// CHECK:       colossal.reshape %{{.*}} : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK:       colossal.transpose %{{.*}} {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK:       colossal.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<5x7xi64>) -> tensor<5x7x3x4xf32>
// CHECK:       colossal.slice %{{.*}} {limits = array<i64: 2, 3, -1>, starts = array<i64: 0, 1, 3>, steps = array<i64: 1, 1, -2>} : (tensor<2x3x4xf32>) -> tensor<2x2x2xf32>
// CHECK:       colossal.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x6x4xf32>
// CHECK:       colossal.split %{{.*}} {axis = 2 : i64} : tensor<2x3x4xf32> -> tensor<2x3x1xf32>, tensor<2x3x3xf32>
// CHECK:       colossal.expand %{{.*}} : tensor<3x1xf32> -> tensor<2x3x4xf32>
// CHECK:       colossal.trilu %{{.*}} {k = 0 : i64, upper = false} : tensor<2x3x4xf32>
func.func @data_movement(%x: tensor<2x3x4xf32>, %i: tensor<5x7xi64>, %e: tensor<3x1xf32>) {
  %0 = colossal.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %1 = colossal.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %2 = colossal.gather %x, %i {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<5x7xi64>) -> tensor<5x7x3x4xf32>
  %3 = colossal.slice %x {starts = array<i64: 0, 1, 3>, limits = array<i64: 2, 3, -1>, steps = array<i64: 1, 1, -2>} : (tensor<2x3x4xf32>) -> tensor<2x2x2xf32>
  %4 = colossal.concat %x, %x {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x6x4xf32>
  %5:2 = colossal.split %x {axis = 2 : i64} : tensor<2x3x4xf32> -> tensor<2x3x1xf32>, tensor<2x3x3xf32>
  %6 = colossal.expand %e : tensor<3x1xf32> -> tensor<2x3x4xf32>
  %7 = colossal.trilu %x {upper = false, k = 0 : i64} : tensor<2x3x4xf32>
  return
}

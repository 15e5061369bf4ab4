// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-auto-mixed-precision))' | FileCheck %s
// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-auto-mixed-precision{compute=fp16}))' | FileCheck %s --check-prefix=FP16
// RUN: not colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-auto-mixed-precision{compute=int8}))' 2>&1 | FileCheck %s --check-prefix=OTHER

// compute=fp16: the same rewrite with f16 copies.
// FP16-LABEL: func.func @forward
// FP16: %[[XH:.*]] = colossal.cast %{{.*}} : tensor<4x8xf32> -> tensor<4x8xf16>
// FP16-NEXT: %[[WH:.*]] = colossal.cast %{{.*}} : tensor<8x16xf32> -> tensor<8x16xf16>
// FP16-NEXT: colossal.matmul %[[XH]], %[[WH]] : (tensor<4x8xf16>, tensor<8x16xf16>) -> tensor<4x16xf32>
// OTHER: error: colossal-auto-mixed-precision: compute=int8 is not bf16 or fp16

// The forward rewrite: each f32 contraction reads bf16 casts of its factors (parameters are cast
// at their use, never retyped) and keeps its f32 result; gemm's addend c stays f32; softmax and
// the other ops stay f32. A contraction that is not f32 is left alone.

// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32> {colossal.input = "x"}, %[[W:.*]]: tensor<8x16xf32> {colossal.param = "w"}, %[[V:.*]]: tensor<16x8xf32> {colossal.param = "v"}, %[[C:.*]]: tensor<16xf32> {colossal.param = "c"}, %[[D:.*]]: tensor<4x8xf64>
// CHECK-NEXT: %[[XB:.*]] = colossal.cast %[[X]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[WB:.*]] = colossal.cast %[[W]] : tensor<8x16xf32> -> tensor<8x16xbf16>
// CHECK-NEXT: %[[H:.*]] = colossal.matmul %[[XB]], %[[WB]] : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[S:.*]] = colossal.softmax %[[H]] {axis = 1 : i64} : tensor<4x16xf32>
// CHECK-NEXT: %[[XB2:.*]] = colossal.cast %[[X]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[VB:.*]] = colossal.cast %[[V]] : tensor<16x8xf32> -> tensor<16x8xbf16>
// CHECK-NEXT: %[[G:.*]] = colossal.gemm %[[XB2]], %[[VB]], %[[C]] {{.*}} : (tensor<4x8xbf16>, tensor<16x8xbf16>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[SUM:.*]] = colossal.add %[[S]], %[[G]] : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[DT:.*]] = colossal.transpose %[[D]]
// CHECK-NEXT: %{{.*}} = colossal.matmul %[[D]], %[[DT]] : (tensor<4x8xf64>, tensor<8x4xf64>) -> tensor<4x4xf64>
// CHECK-NOT: bf16
// CHECK: return
func.func @forward(%x: tensor<4x8xf32> {colossal.input = "x"}, %w: tensor<8x16xf32> {colossal.param = "w"},
                   %v: tensor<16x8xf32> {colossal.param = "v"}, %c: tensor<16xf32> {colossal.param = "c"},
                   %d: tensor<4x8xf64> {colossal.input = "d"})
    -> (tensor<4x16xf32> {colossal.output = "y"}, tensor<4x4xf64> {colossal.output = "z"}) {
  %h = colossal.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %s = colossal.softmax %h {axis = 1 : i64} : tensor<4x16xf32>
  %g = colossal.gemm %x, %v, %c {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %y = colossal.add %s, %g : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %dt = colossal.transpose %d {perm = array<i64: 1, 0>} : (tensor<4x8xf64>) -> tensor<8x4xf64>
  %z = colossal.matmul %d, %dt : (tensor<4x8xf64>, tensor<8x4xf64>) -> tensor<4x4xf64>
  return %y, %z : tensor<4x16xf32>, tensor<4x4xf64>
}

// -----

// The optimizer step updates f32 master weights: never lowered (a gemm there stays f32).

// CHECK-LABEL: func.func @optimizer_step
// CHECK-NOT: bf16
// CHECK: return
func.func @optimizer_step(%a: tensor<4x4xf32> {colossal.param = "a"}) -> (tensor<4x4xf32> {colossal.output = "y"})
    attributes {colossal.program = "optimizer_step"} {
  %y = colossal.gemm %a, %a {alpha = 1.0 : f32, beta = 0.0 : f32, trans_a = false, trans_b = false} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

// Attention: q, k and v in bf16, the mask as it is, the result f32.

// CHECK-LABEL: func.func @attention
// CHECK-SAME: %[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>, %[[M:[^:]*]]: tensor<4x4xf32>
// CHECK-NEXT: %[[QB:.*]] = colossal.cast %[[Q]] : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK-NEXT: %[[KB:.*]] = colossal.cast %[[K]] : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK-NEXT: %[[VB:.*]] = colossal.cast %[[V]] : tensor<1x2x4x8xf32> -> tensor<1x2x4x8xbf16>
// CHECK-NEXT: colossal.attention %[[QB]], %[[KB]], %[[VB]], %[[M]] {{.*}} : (tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<1x2x4x8xbf16>, tensor<4x4xf32>) -> tensor<1x2x4x8xf32>
func.func @attention(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %m: tensor<4x4xf32>) -> tensor<1x2x4x8xf32> {
  %y = colossal.attention %q, %k, %v, %m {causal = true, scale = 0.35 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<4x4xf32>) -> tensor<1x2x4x8xf32>
  return %y : tensor<1x2x4x8xf32>
}

// -----

// Conv: x and w in bf16, the bias f32, the result f32.

// CHECK-LABEL: func.func @conv
// CHECK-SAME: %[[X:[^:]*]]: tensor<1x4x7x6xf32>, %[[W:[^:]*]]: tensor<6x2x3x2xf32>, %[[B:[^:]*]]: tensor<6xf32>
// CHECK-NEXT: %[[XB:.*]] = colossal.cast %[[X]] : tensor<1x4x7x6xf32> -> tensor<1x4x7x6xbf16>
// CHECK-NEXT: %[[WB:.*]] = colossal.cast %[[W]] : tensor<6x2x3x2xf32> -> tensor<6x2x3x2xbf16>
// CHECK-NEXT: colossal.conv %[[XB]], %[[WB]], %[[B]] {{.*}} : (tensor<1x4x7x6xbf16>, tensor<6x2x3x2xbf16>, tensor<6xf32>) -> tensor<1x6x4x4xf32>
func.func @conv(%x: tensor<1x4x7x6xf32>, %w: tensor<6x2x3x2xf32>, %b: tensor<6xf32>) -> tensor<1x6x4x4xf32> {
  %0 = colossal.conv %x, %w, %b {dilations = array<i64: 1, 2>, group = 2 : i64, pads = array<i64: 1, 0, 1, 0>, strides = array<i64: 2, 1>} : (tensor<1x4x7x6xf32>, tensor<6x2x3x2xf32>, tensor<6xf32>) -> tensor<1x6x4x4xf32>
  return %0 : tensor<1x6x4x4xf32>
}

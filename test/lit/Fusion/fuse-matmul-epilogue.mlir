// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-fuse-matmul-epilogue))' | FileCheck %s

// A GPT MLP with its residual: the first projection takes its bias and the tanh GELU, the second
// its bias (written first, as some exporters order the Add) and the residual.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x4x8xf32>, %[[W1:[^:]*]]: tensor<8x16xf32>, %[[B1:[^:]*]]: tensor<16xf32>, %[[W2:[^:]*]]: tensor<16x8xf32>, %[[B2:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT: %[[H:.*]] = colossal.linear %[[X]], %[[W1]], %[[B1]] {activation = "gelu_tanh"}
// CHECK-NEXT: %[[Y:.*]] = colossal.linear %[[H]], %[[W2]], %[[B2]], %[[X]] :
// CHECK-NEXT: return %[[Y]]
func.func @mlp(%x: tensor<2x4x8xf32>, %w1: tensor<8x16xf32>, %b1: tensor<16xf32>, %w2: tensor<16x8xf32>, %b2: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %0 = colossal.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %1 = colossal.add %0, %b1 : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %2 = colossal.gelu %1 {approximate = "tanh"} : tensor<2x4x16xf32>
  %3 = colossal.matmul %2, %w2 : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %4 = colossal.add %b2, %3 : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %5 = colossal.add %x, %4 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %5 : tensor<2x4x8xf32>
}

// -----

// Training: the GELU's input is also returned (its VJP reads it), so only the bias folds and the
// GELU stays; a [1, N] bias is reshaped to [N].
// CHECK-LABEL: func.func @saved_for_backward
// CHECK:      %[[B:.*]] = colossal.reshape %{{.*}} : tensor<1x16xf32> -> tensor<16xf32>
// CHECK-NEXT: %[[H:.*]] = colossal.linear %{{.*}}, %{{.*}}, %[[B]] :
// CHECK-NEXT: %[[G:.*]] = colossal.gelu %[[H]]
// CHECK-NEXT: return %[[G]], %[[H]]
func.func @saved_for_backward(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<1x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %0 = colossal.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = colossal.add %0, %b : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  %2 = colossal.gelu %1 : tensor<4x16xf32>
  return %2, %1 : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// Nothing folds where the product is read twice, the addend is not a bias of N elements, or the
// weight has a batch.
// CHECK-LABEL: func.func @no_fusion
// CHECK-NOT: colossal.linear
func.func @no_fusion(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %full: tensor<4x16xf32>,
                     %bw: tensor<2x8x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>) {
  %0 = colossal.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = colossal.add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = colossal.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %3 = colossal.add %2, %full : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %4 = colossal.matmul %x, %bw : (tensor<4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %5 = colossal.add %4, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  return %1, %0, %3, %5 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>
}

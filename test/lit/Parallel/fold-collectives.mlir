// Redundant collectives removed by canonicalize: all_gather then the matching shard_slice is
// nothing; all_reduce then shard_slice over the same axes is one reduce_scatter.
// RUN: colossal-opt %s --canonicalize | FileCheck %s
module {
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
  // CHECK-LABEL: func.func @gather_slice
  // CHECK-NEXT: return %arg0
  func.func @gather_slice(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
    %g = colossal.all_gather %x {axes = ["tp"], dim = 1 : i64} : tensor<4x3xf32> -> tensor<4x6xf32>
    %s = colossal.shard_slice %g {axes = ["tp"], dim = 1 : i64} : tensor<4x6xf32> -> tensor<4x3xf32>
    return %s : tensor<4x3xf32>
  }
  // CHECK-LABEL: func.func @reduce_slice
  // CHECK-NEXT: %[[R:.*]] = colossal.reduce_scatter %arg0 {axes = ["tp"], dim = 0 : i64} : tensor<4x6xf32> -> tensor<2x6xf32>
  // CHECK-NEXT: return %[[R]]
  func.func @reduce_slice(%x: tensor<4x6xf32>) -> tensor<2x6xf32> {
    %r = colossal.all_reduce %x {axes = ["tp"]} : tensor<4x6xf32> -> tensor<4x6xf32>
    %s = colossal.shard_slice %r {axes = ["tp"], dim = 0 : i64} : tensor<4x6xf32> -> tensor<2x6xf32>
    return %s : tensor<2x6xf32>
  }
  // Other axes or dims stay.
  // CHECK-LABEL: func.func @other_axes
  // CHECK: colossal.all_gather
  // CHECK: colossal.shard_slice
  func.func @other_axes(%x: tensor<4x3xf32>) -> tensor<2x6xf32> {
    %g = colossal.all_gather %x {axes = ["tp"], dim = 1 : i64} : tensor<4x3xf32> -> tensor<4x6xf32>
    %s = colossal.shard_slice %g {axes = ["dp"], dim = 0 : i64} : tensor<4x6xf32> -> tensor<2x6xf32>
    return %s : tensor<2x6xf32>
  }
}

// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data}, colossal-split-batch)' | FileCheck %s

// Training under dp alone (no grad_accum): statistics over the batch (a training-mode batch norm)
// are the global batch's, as SyncBatchNorm computes them: a row block's mean is all_reduced over
// dp and halved, a sum is all_reduced, also through reshapes and constant scalings (the running
// statistic's update). The microbatch program takes 6 of the 12 rows; @forward stays whole.

// CHECK-LABEL: func.func @forward
// CHECK-SAME: tensor<12x4xf32>
// CHECK-LABEL: func.func @forward_microbatch
// CHECK-SAME: (%[[X:.*]]: tensor<6x4xf32> {colossal.input = "x"}
// CHECK: %[[M:.*]] = colossal.reduce_mean %[[X]] {axes = array<i64: 0>, keepdims = true} : (tensor<6x4xf32>) -> tensor<1x4xf32>
// CHECK: %[[R:.*]] = colossal.all_reduce %[[M]] {axes = ["dp"]} : tensor<1x4xf32> -> tensor<1x4xf32>
// CHECK: %[[HALF:.*]] = colossal.constant dense<5.000000e-01> : tensor<f32>
// CHECK: %[[G:.*]] = colossal.mul %[[R]], %[[HALF]]
// CHECK: colossal.sub %[[X]], %[[G]]
// CHECK: %[[S:.*]] = colossal.reduce_sum %[[X]] {axes = array<i64: 0>, keepdims = true}
// CHECK: %[[Q:.*]] = colossal.mul %[[S]], %{{.*}} : (tensor<1x4xf32>, tensor<f32>)
// CHECK: %[[T:.*]] = colossal.all_reduce %[[Q]] {axes = ["dp"]}
// CHECK-NEXT: colossal.sub %[[X]], %[[T]]
// CHECK-NOT: row_blocks
module attributes {colossal.train = {}} {
  func.func @forward(%x: tensor<12x4xf32> {colossal.input = "x"})
      -> (tensor<12x4xf32> {colossal.output = "y"}, tensor<12x4xf32> {colossal.output = "z"}) attributes {colossal.program = "forward"} {
    %m = colossal.reduce_mean %x {axes = array<i64: 0>, keepdims = true} : (tensor<12x4xf32>) -> tensor<1x4xf32>
    %y = colossal.sub %x, %m : (tensor<12x4xf32>, tensor<1x4xf32>) -> tensor<12x4xf32>
    %s = colossal.reduce_sum %x {axes = array<i64: 0>, keepdims = true} : (tensor<12x4xf32>) -> tensor<1x4xf32>
    %c = colossal.constant dense<2.500000e-01> : tensor<f32>
    %q = colossal.mul %s, %c : (tensor<1x4xf32>, tensor<f32>) -> tensor<1x4xf32>
    %z = colossal.sub %x, %q : (tensor<12x4xf32>, tensor<1x4xf32>) -> tensor<12x4xf32>
    return %y, %z : tensor<12x4xf32>, tensor<12x4xf32>
  }
}

// An op that reaches the partitioner without a sharding rule for its operands' shardings is an
// error naming the op and the shardings, never a silent all_gather: under tp=2 the column-
// parallel product reaches `det`, which has no rule. With whole operands (tp=1, or a hint that
// keeps the weight whole) the same op is fine.
// RUN: colossal-opt %s --verify-diagnostics --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition)'
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{hints="w=-/-"})' | FileCheck %s
// CHECK: colossal.det %{{.*}} : (tensor<4x4xf32>) -> tensor<f32>

func.func @forward(%x: tensor<4x8xf32> {colossal.input = "x"},
                   %w: tensor<8x4xf32> {colossal.param = "w"}) -> (tensor<f32> {colossal.output = "d"}) {
  %h = colossal.matmul %x, %w : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  // expected-error @below {{'colossal.det' has no sharding rule for operands #colossal.sharding<@mesh, [{}, {"tp"}]>; an op without a rule is never silently replicated: give its operands a whole layout with parallel.tensor.hints, or run it without tensor parallelism}}
  %d = colossal.det %h : (tensor<4x4xf32>) -> tensor<f32>
  return %d : tensor<f32>
}

// colossal-zero, a parameter whose dim 0 does not split into P chunks (e [3, 4] over dp=2, an
// embedding with an odd row count): stage 1 keeps it whole and warns; stage 3 splits it by its
// columns (dim 1), gathering along dim 1 before each reader (here the gradient is the parameter
// itself, so the accumulate's reader gathers it too) and reduce-scattering its gradient along dim 1.
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-zero{stage=3})' | FileCheck %s --check-prefix=S3
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-zero{stage=1})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=S1

// S1: warning: colossal-zero: stage 1: 1 of 1 parameters stay whole on every rank (12 of 12 local elements), because their dim 0 does not divide into 2 chunks (stages 1 and 2 split dim 0 only; stage 3 splits another dim too): e

// S3-LABEL: func.func @train_step
// S3-SAME: %arg1: tensor<3x2xf32> {colossal.param = "e", colossal.sharding = #colossal.sharding<@mesh, [{}, {"dp"}]>}
// S3-SAME: %arg2: tensor<3x2xf32> {colossal.sharding = #colossal.sharding<@mesh, [{}, {"dp"}]>, colossal.state = "e.grad"}
// S3-NEXT: %[[E:.*]] = colossal.all_gather %arg1 {axes = ["dp"], dim = 1 : i64} : tensor<3x2xf32> -> tensor<3x4xf32>
// S3-NEXT: %[[Y:.*]] = colossal.gather %[[E]], %arg0
// S3-NEXT: %[[E2:.*]] = colossal.all_gather %arg1 {axes = ["dp"], dim = 1 : i64} : tensor<3x2xf32> -> tensor<3x4xf32>
// S3-NEXT: %[[RS:.*]] = colossal.reduce_scatter %[[E2]] {axes = ["dp"], dim = 1 : i64} : tensor<3x4xf32> -> tensor<3x2xf32>
// S3-NEXT: colossal.accumulate_grad %arg2, %[[RS]]
// S3-LABEL: func.func @optimizer_step
// S3-SAME: %arg0: tensor<3x2xf32> {colossal.param = "e", colossal.sharding = #colossal.sharding<@mesh, [{}, {"dp"}]>}
// S3: colossal.sgd_update %arg0, %arg1, %arg2, %arg3

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @train_step(%ids: tensor<2xi64> {colossal.input = "ids"}, %e: tensor<3x4xf32> {colossal.param = "e"},
    %ge: tensor<3x4xf32> {colossal.state = "e.grad"}) -> (tensor<2x4xf32> {colossal.output = "y"}) attributes {colossal.program = "train_step"} {
  %y = colossal.gather %e, %ids {axis = 0 : i64} : (tensor<3x4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  colossal.accumulate_grad %ge, %e {scale = 5.000000e-01 : f64} : tensor<3x4xf32>, tensor<3x4xf32>
  return %y : tensor<2x4xf32>
}
func.func @optimizer_step(%e: tensor<3x4xf32> {colossal.param = "e"}, %ge: tensor<3x4xf32> {colossal.state = "e.grad"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) attributes {colossal.program = "optimizer_step"} {
  %n = colossal.global_norm %ge : tensor<3x4xf32>
  colossal.sgd_update %e, %ge, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false, max_grad_norm = 0.0 : f64} : tensor<3x4xf32>, tensor<3x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}

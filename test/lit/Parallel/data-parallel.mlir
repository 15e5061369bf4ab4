// colossal-data-parallel: the gradients the optimizer reads are summed over the mesh's data axes
// (not the tensor axis) at the start of @optimizer_step, one in-place all_reduce per gradient in
// the order of the global norm; colossal-bucket-gradients then fuses them (data-parallel and
// bucket-gradients.mlir). Without a data axis larger than 1 nothing changes.
// RUN: colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-data-parallel)' | FileCheck %s
// RUN: colossal-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(colossal-data-parallel)' -o /dev/null

// CHECK-LABEL: func.func @optimizer_step
// CHECK-NEXT: colossal.all_reduce_in_place %arg2 {axes = ["dp"]} : tensor<2x2xf32>
// CHECK-NEXT: colossal.all_reduce_in_place %arg3 {axes = ["dp"]} : tensor<2xf32>
// CHECK-NEXT: colossal.global_norm %arg2, %arg3
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
func.func @optimizer_step(%w: tensor<2x2xf32> {colossal.param = "w"}, %b: tensor<2xf32> {colossal.param = "b"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"}, %gb: tensor<2xf32> {colossal.state = "b.grad"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
  %n = colossal.global_norm %gw, %gb : tensor<2x2xf32>, tensor<2xf32>
  colossal.sgd_update %w, %gw, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false, max_grad_norm = 0.0 : f64} : tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  colossal.sgd_update %b, %gb, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false, max_grad_norm = 0.0 : f64} : tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}

// -----

// Tensor parallelism alone: no gradient sum.
// CHECK-LABEL: func.func @optimizer_step
// CHECK-NOT: all_reduce_in_place
colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
func.func @optimizer_step(%w: tensor<2xf32> {colossal.param = "w"}, %gw: tensor<2xf32> {colossal.state = "w.grad"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
  %n = colossal.global_norm %gw : tensor<2xf32>
  colossal.sgd_update %w, %gw, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false, max_grad_norm = 0.0 : f64} : tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}

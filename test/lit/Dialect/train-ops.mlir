// RUN: colossal-opt %s | FileCheck %s
// RUN: colossal-opt %s --mlir-print-op-generic | colossal-opt | FileCheck %s
// RUN: colossal-opt %s --pass-pipeline='builtin.module(func.func(canonicalize, cse))' | FileCheck %s --check-prefix=KEPT

// The training ops (ColossalTrainOps.td) parse, infer their types and print back; ignore_index
// and scale have defaults.

// CHECK-LABEL: func.func @loss
// CHECK: %[[L:.*]] = colossal.cross_entropy %arg0, %arg1 : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
// CHECK: colossal.cross_entropy %arg0, %arg1 {ignore_index = 0 : i64} : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
// CHECK: colossal.cross_entropy_grad %arg0, %arg1, %[[L]] : (tensor<6x5xf32>, tensor<6xi64>, tensor<f32>) -> tensor<6x5xf32>
func.func @loss(%logits: tensor<6x5xf32>, %labels: tensor<6xi64>) -> (tensor<f32>, tensor<f32>, tensor<6x5xf32>) {
  %0 = colossal.cross_entropy %logits, %labels : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
  %1 = colossal.cross_entropy %logits, %labels {ignore_index = 0 : i64} : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
  %2 = colossal.cross_entropy_grad %logits, %labels, %0 : (tensor<6x5xf32>, tensor<6xi64>, tensor<f32>) -> tensor<6x5xf32>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<6x5xf32>
}

// The update ops have no results but write their state operands: canonicalize and cse keep them
// (KEPT), in order, while the unused pure global_norm goes.

// CHECK-LABEL: func.func @optimizer_step
// CHECK: %[[N:.*]] = colossal.global_norm %arg1, %arg5 : tensor<3x4xf32>, tensor<4xf32>
// CHECK: colossal.accumulate_grad %arg1, %arg9 {scale = 2.500000e-01 : f64} : tensor<3x4xf32>, tensor<3x4xf32>
// CHECK: colossal.adamw_update %arg0, %arg1, %arg2, %arg3, %arg10, %arg11, %[[N]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899{{[0-9]*}} : f64, eps = 1.000000e-08 : f64, max_grad_norm = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64} : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
// CHECK: colossal.adam_update %arg0, %arg1, %arg2, %arg3, %arg10, %arg11, %[[N]] {{.*}}weight_decay = 0.000000e+00 : f64}
// CHECK: colossal.sgd_update %arg4, %arg5, %arg6, %arg10, %arg11, %[[N]] {dampening = 0.000000e+00 : f64, max_grad_norm = 0.000000e+00 : f64, momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 0.000000e+00 : f64} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
// CHECK: colossal.sgd_update %arg4, %arg5, %arg10, %arg11, %[[N]] {dampening = 0.000000e+00 : f64, max_grad_norm = 0.000000e+00 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64} : tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
// KEPT-LABEL: func.func @optimizer_step
// KEPT: colossal.global_norm
// KEPT-NEXT: colossal.accumulate_grad
// KEPT-NEXT: colossal.adamw_update
// KEPT-NEXT: colossal.adam_update
// KEPT-NEXT: colossal.sgd_update
// KEPT-NEXT: colossal.sgd_update
// KEPT-NOT: colossal.global_norm
// KEPT: return
func.func @optimizer_step(%p: tensor<3x4xf32> {colossal.param = "w"},
                          %g: tensor<3x4xf32> {colossal.state = "w.grad"},
                          %m: tensor<3x4xf32> {colossal.state = "w.exp_avg"},
                          %v: tensor<3x4xf32> {colossal.state = "w.exp_avg_sq"},
                          %q: tensor<4xf32> {colossal.param = "b"},
                          %gq: tensor<4xf32> {colossal.state = "b.grad"},
                          %buf: tensor<4xf32> {colossal.state = "b.momentum_buffer"},
                          %x: tensor<3x4xf32>, %y: tensor<4xf32>, %dw: tensor<3x4xf32>,
                          %lr: tensor<f32> {colossal.input = "lr"},
                          %step: tensor<i64> {colossal.input = "step"}) -> tensor<f32> {
  %n = colossal.global_norm %g, %gq : tensor<3x4xf32>, tensor<4xf32>
  colossal.accumulate_grad %g, %dw {scale = 0.25 : f64} : tensor<3x4xf32>, tensor<3x4xf32>
  colossal.adamw_update %p, %g, %m, %v, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, max_grad_norm = 1.0 : f64} : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  colossal.adam_update %p, %g, %m, %v, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64} : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  colossal.sgd_update %q, %gq, %buf, %lr, %step, %n {momentum = 0.9 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64, nesterov = true} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  colossal.sgd_update %q, %gq, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64, nesterov = false} : tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  %unused = colossal.global_norm %g : tensor<3x4xf32>
  return %n : tensor<f32>
}

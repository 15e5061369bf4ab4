// colossal-data-parallel sums gradients in place: one that is not a colossal.state argument of
// @optimizer_step cannot be.
// RUN: colossal-opt %s --verify-diagnostics --pass-pipeline='builtin.module(colossal-data-parallel)'

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @optimizer_step(%w: tensor<2xf32> {colossal.param = "w"}, %x: tensor<2xf32> {colossal.input = "x"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
  // expected-error @below {{colossal-data-parallel: this op reads a gradient that is not a colossal.state argument of @optimizer_step, so it cannot be summed over the data axes in place}}
  %n = colossal.global_norm %x : tensor<2xf32>
  return %n : tensor<f32>
}

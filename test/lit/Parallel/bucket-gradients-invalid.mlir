// colossal-bucket-gradients: a negative cap is an error.
// RUN: colossal-opt %s --verify-diagnostics --pass-pipeline='builtin.module(func.func(colossal-bucket-gradients{bucket-cap-mb=-1}))'

// expected-error @below {{colossal-bucket-gradients: bucket-cap-mb must be >= 0, got -1}}
func.func @optimizer_step(%a: tensor<4xf32> {colossal.state = "a.grad"}) {
  return
}

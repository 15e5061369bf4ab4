// colossal-split-batch in inference (into=forward): the runtime concatenates each output's dim 0
// over the dp ranks, so an output the row blocks do not split (one that does not depend on the
// batch rows) is an error naming it, never an output repeated dp times.
// RUN: colossal-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data}, colossal-split-batch{into=forward})'

// expected-error @below {{output 'wnorm' ('tensor<6xf32>') does not depend on the batch rows: under dp=2 every rank would compute all of it, and a data-parallel plan concatenates each output's dim 0 (the batch) over the ranks; make it an output with the batch in dim 0, or run the model with dp=1}}
func.func @forward(%x: tensor<8x4xf32> {colossal.input = "x"},
                   %w: tensor<4x6xf32> {colossal.param = "w"})
    -> (tensor<8x6xf32> {colossal.output = "y"}, tensor<6xf32> {colossal.output = "wnorm"}) {
  %y = colossal.matmul %x, %w : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  %a = colossal.abs %w : tensor<4x6xf32>
  %n = colossal.reduce_sum %a {axes = array<i64: 0>, keepdims = false} : (tensor<4x6xf32>) -> tensor<6xf32>
  return %y, %n : tensor<8x6xf32>, tensor<6xf32>
}

// -----

// A scalar output has no batch dim to gather.
// expected-error @below {{output 's' ('tensor<f32>') does not depend on the batch rows}}
func.func @forward(%x: tensor<8x4xf32> {colossal.input = "x"},
                   %w: tensor<4xf32> {colossal.param = "w"})
    -> (tensor<8x4xf32> {colossal.output = "y"}, tensor<f32> {colossal.output = "s"}) {
  %y = colossal.mul %x, %w : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %s = colossal.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %y, %s : tensor<8x4xf32>, tensor<f32>
}

// -----

// Outputs with the batch in dim 0 are split.
func.func @forward(%x: tensor<8x4xf32> {colossal.input = "x"},
                   %w: tensor<4xf32> {colossal.param = "w"})
    -> (tensor<8x4xf32> {colossal.output = "y"}) {
  %y = colossal.mul %x, %w : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// RUN: not colossal-opt %s -split-input-file --pass-pipeline='builtin.module(colossal-append-loss{logits=logits})' 2>&1 | FileCheck %s --check-prefix=CE
// RUN: not colossal-opt %s -split-input-file --pass-pipeline='builtin.module(colossal-append-loss{kind=output output=loss logits=logits})' 2>&1 | FileCheck %s --check-prefix=OUT

// Models colossal-append-loss cannot train, one error each, naming the spec key and tensor.

// CE: error: train.loss.logits: 'logits' is not an output of the model (outputs: 'y')
// OUT: error: train.loss.output: 'loss' is not an output of the model (outputs: 'y')
func.func @forward(%x: tensor<2x3xi64> {colossal.input = "x"}, %w: tensor<5x4xf32> {colossal.param = "w"})
    -> (tensor<2x3x4xf32> {colossal.output = "y"}) {
  %e = colossal.gather %w, %x {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  return %e : tensor<2x3x4xf32>
}

// -----

// CE: error: train.loss.labels: 'labels' is already an input of the model; the compiler creates the labels input, choose another name
func.func @forward(%x: tensor<2x3xi64> {colossal.input = "labels"}, %w: tensor<5x4xf32> {colossal.param = "w"})
    -> (tensor<2x3x4xf32> {colossal.output = "logits"}) {
  %e = colossal.gather %w, %x {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  return %e : tensor<2x3x4xf32>
}

// -----

// CE: error: training with cross_entropy needs a model with exactly one input left after the spec's values (the token ids [B, T]); it has 2: 'x', 'mask'; bind the others with the spec's values
func.func @forward(%x: tensor<2x3xi64> {colossal.input = "x"}, %m: tensor<2x3x4xf32> {colossal.input = "mask"}, %w: tensor<5x4xf32> {colossal.param = "w"})
    -> (tensor<2x3x4xf32> {colossal.output = "logits"}) {
  %e = colossal.gather %w, %x {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %y = colossal.add %e, %m : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}

// -----

// CE: error: training with cross_entropy needs a model with exactly one input left after the spec's values (the token ids [B, T]); it has 0
func.func @forward(%w: tensor<5x4xf32> {colossal.param = "w"}) -> (tensor<5x4xf32> {colossal.output = "logits"}) {
  return %w : tensor<5x4xf32>
}

// -----

// CE: error: the token input 'x' must be int64 or int32 [B, T], got 'tensor<2x3xf32>'
func.func @forward(%x: tensor<2x3xf32> {colossal.input = "x"}, %w: tensor<3x4xf32> {colossal.param = "w"})
    -> (tensor<2x4xf32> {colossal.output = "logits"}) {
  %y = colossal.matmul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// CE: error: the labels [6] (the logits' shape without the class dim) must have the token input's shape [2x3]: the training loop fills both from --data
func.func @forward(%x: tensor<2x3xi64> {colossal.input = "x"}, %w: tensor<5x4xf32> {colossal.param = "w"})
    -> (tensor<6x4xf32> {colossal.output = "logits"}) {
  %e = colossal.gather %w, %x {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %r = colossal.reshape %e : tensor<2x3x4xf32> -> tensor<6x4xf32>
  return %r : tensor<6x4xf32>
}

// -----

// CE: error: train.loss.logits: 'logits' must be f32 [..., C] of rank >= 2, got 'tensor<4xf32>'
func.func @forward(%x: tensor<2x3xi64> {colossal.input = "x"}, %w: tensor<4xf32> {colossal.param = "w"})
    -> (tensor<4xf32> {colossal.output = "logits"}) {
  return %w : tensor<4xf32>
}

// -----

// OUT: error: train.loss.labels: 'labels' is not an input of the model (inputs: 'x', 'y')
func.func @forward(%x: tensor<2x3xi64> {colossal.input = "x"}, %y: tensor<2x3xi64> {colossal.input = "y"}, %w: tensor<5x4xf32> {colossal.param = "w"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %x {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %s = colossal.reduce_sum %e {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// OUT: error: train.loss.output: 'loss' must be a scalar f32 loss, got 'tensor<2x3x4xf32>'
func.func @forward(%x: tensor<2x3xi64> {colossal.input = "x"}, %y: tensor<2x3xi64> {colossal.input = "labels"}, %w: tensor<5x4xf32> {colossal.param = "w"})
    -> (tensor<2x3x4xf32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %x {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  return %e : tensor<2x3x4xf32>
}

// -----

// CE: error: colossal-append-loss needs the forward program (the imported model)
// OUT: error: colossal-append-loss needs the forward program (the imported model)
func.func @model(%w: tensor<5x4xf32>) -> tensor<5x4xf32> {
  return %w : tensor<5x4xf32>
}

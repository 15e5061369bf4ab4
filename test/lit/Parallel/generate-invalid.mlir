// colossal-generate errors, each naming the model and the node or input.
// RUN: colossal-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(colossal-generate{max-seq-len=8 block-size=4 max-batch-seqs=2 max-batch-tokens=2})'
// An op that mixes positions outside the attention (a sum over the sequence) is the error.
module attributes {colossal.source = "mix.onnx"} {
func.func @forward(%ids: tensor<1x8xi64> {colossal.input = "ids"},
                   %wte: tensor<16x16xf32> {colossal.param = "wte", colossal.value = dense<0.01> : tensor<16x16xf32>})
    -> (tensor<1x8x16xf32> {colossal.output = "logits"}) attributes {colossal.program = "forward"} {
  %e = colossal.gather %wte, %ids {axis = 0 : i64} : (tensor<16x16xf32>, tensor<1x8xi64>) -> tensor<1x8x16xf32>
  // expected-error @+1 {{mix.onnx: this op mixes token positions}}
  %s = colossal.reduce_sum %e {axes = array<i64: 1>, keepdims = true} : (tensor<1x8x16xf32>) -> tensor<1x1x16xf32>
  %l = colossal.add %e, %s : (tensor<1x8x16xf32>, tensor<1x1x16xf32>) -> tensor<1x8x16xf32>
  return %l : tensor<1x8x16xf32>
}
}

// -----

// Attention with a mask operand (an attention_mask input) cannot be served from the cache.
module attributes {colossal.source = "masked.onnx"} {
func.func @forward(%ids: tensor<1x8xi64> {colossal.input = "ids"},
                   %x: tensor<1x2x8x4xf32> {colossal.param = "x", colossal.value = dense<0.01> : tensor<1x2x8x4xf32>},
                   %m: tensor<1x1x8x8xf32> {colossal.param = "m", colossal.value = dense<0.0> : tensor<1x1x8x8xf32>})
    -> (tensor<1x8x8xf32> {colossal.output = "logits"}) attributes {colossal.program = "forward"} {
  // expected-error @+1 {{masked.onnx: this attention is not causal self-attention without a mask operand}}
  %a = colossal.attention %x, %x, %x, %m {causal = true, scale = 0.5 : f32} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x1x8x8xf32>) -> tensor<1x2x8x4xf32>
  %t = colossal.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x4xf32>) -> tensor<1x8x2x4xf32>
  %l = colossal.reshape %t : tensor<1x8x2x4xf32> -> tensor<1x8x8xf32>
  return %l : tensor<1x8x8xf32>
}
}

// -----

// A second input the engine cannot feed.
module attributes {colossal.source = "two.onnx"} {
// expected-error @+1 {{two.onnx: input 'pixels'}}
func.func @forward(%ids: tensor<1x8xi64> {colossal.input = "ids"}, %px: tensor<1x8xf32> {colossal.input = "pixels"})
    -> (tensor<1x8x1xf32> {colossal.output = "logits"}) attributes {colossal.program = "forward"} {
  %r = colossal.reshape %px : tensor<1x8xf32> -> tensor<1x8x1xf32>
  return %r : tensor<1x8x1xf32>
}
}

// -----

// Four positions cannot be cut twice into steps of 4 (max-batch-tokens 3 rounds up to 4).
module attributes {colossal.source = "short.onnx"} {
// expected-error @+1 {{short.onnx: the model was imported with 4 positions}}
func.func @forward(%ids: tensor<1x4xi64> {colossal.input = "ids"},
                   %wte: tensor<16x16xf32> {colossal.param = "wte", colossal.value = dense<0.01> : tensor<16x16xf32>})
    -> (tensor<1x4x16xf32> {colossal.output = "logits"}) attributes {colossal.program = "forward"} {
  %e = colossal.gather %wte, %ids {axis = 0 : i64} : (tensor<16x16xf32>, tensor<1x4xi64>) -> tensor<1x4x16xf32>
  return %e : tensor<1x4x16xf32>
}
}

// colossal-split-batch errors: a batch dp x grad_accum does not divide, an op that mixes rows of
// the batch, a constant whose row blocks differ. Each names the input or node, dp and grad_accum.
// RUN: colossal-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data}, colossal-split-batch{grad-accum=3})'

// expected-error @below {{input 'ids': the batch (dim 0 = 8) is not divisible by dp=2 x train.grad_accum=3 = 6 row blocks}}
func.func @forward(%ids: tensor<8x6xi64> {colossal.input = "ids"},
                   %table: tensor<32x16xf32> {colossal.param = "wte"},
                   %pos: tensor<1x6x16xf32> {colossal.param = "wpe"}) -> (tensor<8x6x16xf32> {colossal.output = "h"}) {
  %e = colossal.gather %table, %ids {axis = 0 : i64} : (tensor<32x16xf32>, tensor<8x6xi64>) -> tensor<8x6x16xf32>
  %p = colossal.expand %pos : tensor<1x6x16xf32> -> tensor<8x6x16xf32>
  %h = colossal.add %e, %p : (tensor<8x6x16xf32>, tensor<8x6x16xf32>) -> tensor<8x6x16xf32>
  %r = colossal.reshape %h : tensor<8x6x16xf32> -> tensor<8x6x2x8xf32>
  %s = colossal.relu %r : tensor<8x6x2x8xf32>
  %b = colossal.reshape %s : tensor<8x6x2x8xf32> -> tensor<8x6x16xf32>
  %c = colossal.constant dense<0.5> : tensor<8x6x16xf32>
  %o = colossal.mul %b, %c : (tensor<8x6x16xf32>, tensor<8x6x16xf32>) -> tensor<8x6x16xf32>
  return %o : tensor<8x6x16xf32>
}


// -----

// expected-error @below {{input 'x' is a scalar: it has no batch dim (dim 0) to split over dp=2 x train.grad_accum=3}}
func.func @forward(%x: tensor<f32> {colossal.input = "x"}) -> (tensor<f32> {colossal.output = "y"}) {
  return %x : tensor<f32>
}

// -----

// Statistics over the batch (batch norm in training mode) mix its rows: no row block computes
// them alone.
func.func @forward(%x: tensor<12x4xf32> {colossal.input = "x"}) -> (tensor<12x4xf32> {colossal.output = "y"}) {
  // expected-error @below {{this op mixes rows of the batch (splitting it would need all_reduce across row blocks), so the model cannot be split over dp=2 x train.grad_accum=3; run it with dp=1 and train.grad_accum=1}}
  %s = colossal.reduce_sum %x {axes = array<i64: 0>, keepdims = true} : (tensor<12x4xf32>) -> tensor<1x4xf32>
  %y = colossal.sub %x, %s : (tensor<12x4xf32>, tensor<1x4xf32>) -> tensor<12x4xf32>
  return %y : tensor<12x4xf32>
}

// -----

// A constant whose rows differ between row blocks (a per-row table folded at the global batch).
func.func @forward(%x: tensor<12x2xf32> {colossal.input = "x"}) -> (tensor<12x2xf32> {colossal.output = "y"}) {
  %c = colossal.constant dense<[[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0], [5.0, 5.0], [6.0, 6.0], [7.0, 7.0], [8.0, 8.0], [9.0, 9.0], [10.0, 10.0], [11.0, 11.0]]> : tensor<12x2xf32>
  // expected-error @below {{a constant with the batch dim ('tensor<12x2xf32>') differs between row blocks, so the model cannot be split over dp=2 x train.grad_accum=3}}
  %y = colossal.add %x, %c : (tensor<12x2xf32>, tensor<12x2xf32>) -> tensor<12x2xf32>
  return %y : tensor<12x2xf32>
}

// -----

// An output with the batch in dim 1 (logits.transpose(0, 1)): outputs are gathered along dim 0.
// expected-error @below {{output 'y' does not keep the batch in dim 0 (its rows would need all_gather across row blocks), so the model cannot be split over dp=2 x train.grad_accum=3; run it with dp=1 and train.grad_accum=1}}
func.func @forward(%x: tensor<12x2xf32> {colossal.input = "x"}) -> (tensor<2x12xf32> {colossal.output = "y"}) {
  %y = colossal.transpose %x {perm = array<i64: 1, 0>} : (tensor<12x2xf32>) -> tensor<2x12xf32>
  return %y : tensor<2x12xf32>
}

// -----

// pad states its rule only when it leaves the batch dim alone (ShardingRuleOpInterface returns
// none for a pad of dim 0): padding the rows is no row-wise op.
func.func @forward(%x: tensor<12x4xf32> {colossal.input = "x"}) -> (tensor<14x4xf32> {colossal.output = "y"}) {
  // expected-error @below {{'colossal.pad' has no sharding rule for operands #colossal.sharding<@row_blocks, [{"row_blocks"}, {}]>; it has no row-wise rule, so the model cannot be split over dp=2 x train.grad_accum=3; run it with dp=1 and train.grad_accum=1}}
  %y = colossal.pad %x {mode = "constant", pads = array<i64: 1, 0, 1, 0>} : (tensor<12x4xf32>) -> tensor<14x4xf32>
  return %y : tensor<14x4xf32>
}

// -----

// A pad of the other dims is row-wise.
func.func @forward(%x: tensor<12x4xf32> {colossal.input = "x"}) -> (tensor<12x6xf32> {colossal.output = "y"}) {
  %y = colossal.pad %x {mode = "constant", pads = array<i64: 0, 1, 0, 1>} : (tensor<12x4xf32>) -> tensor<12x6xf32>
  return %y : tensor<12x6xf32>
}

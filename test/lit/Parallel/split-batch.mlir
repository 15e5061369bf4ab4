// colossal-split-batch: the program of one row block of the global batch. A model imported at a
// fixed batch of 8 rows (reshape targets, a causal-mask constant and a position table broadcast
// to the batch folded at 8) becomes the program of 8 / (dp x grad_accum) rows: the reshapes keep
// their trailing dims, the constant is resliced, the broadcast re-expanded. Inference (into =
// forward) rewrites @forward; train mode adds @forward_microbatch and keeps @forward whole.
// RUN: colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data}, colossal-split-batch{into=forward})' | FileCheck %s --check-prefix=DP2
// RUN: colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data}, colossal-split-batch{grad-accum=2})' | FileCheck %s --check-prefix=TRAIN

// DP2-LABEL: func.func @forward
// DP2-SAME: %arg0: tensor<4x6xi64> {colossal.input = "ids"}
// DP2-SAME: -> (tensor<4x6x16xf32>
// DP2: colossal.gather {{.*}} -> tensor<4x6x16xf32>
// DP2-NOT: tensor<8x6x16xf32>
// DP2: colossal.expand {{.*}} : tensor<1x6x16xf32> -> tensor<4x6x16xf32>
// DP2: colossal.reshape {{.*}} : tensor<4x6x16xf32> -> tensor<4x6x2x8xf32>
// DP2: colossal.constant dense<{{.*}}> : tensor<4x6x16xf32>
// DP2-NOT: colossal.all_gather
// DP2-NOT: colossal.shard_slice
// DP2: return {{.*}} : tensor<4x6x16xf32>

// TRAIN-LABEL: func.func @forward(
// TRAIN-SAME: tensor<8x6xi64>
// TRAIN-LABEL: func.func @forward_microbatch(
// TRAIN-SAME: %arg0: tensor<2x6xi64> {colossal.input = "ids"}
// TRAIN: colossal.reshape {{.*}} : tensor<2x6x16xf32> -> tensor<2x6x2x8xf32>
// TRAIN: return {{.*}} : tensor<2x6x16xf32>

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

// A constant with equal row blocks (a mask or position table folded at the batch) is resliced.
// DP2-LABEL: func.func @forward
// DP2: colossal.constant dense<{{\[}}[1.000000e+00, 2.000000e+00], [1.000000e+00, 2.000000e+00]]> : tensor<2x2xf32>
// TRAIN-LABEL: func.func @forward_microbatch
// TRAIN: colossal.constant dense<{{\[}}[1.000000e+00, 2.000000e+00]]> : tensor<1x2xf32>
func.func @forward(%x: tensor<4x2xf32> {colossal.input = "x"}) -> (tensor<4x2xf32> {colossal.output = "y"}) {
  %c = colossal.constant dense<[[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]> : tensor<4x2xf32>
  %y = colossal.add %x, %c : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  return %y : tensor<4x2xf32>
}

// -----

// Position ids broadcast to the batch (torch's arange(T).expand(B, T), folded at import) are split
// like an input, so the position embedding they gather follows the row block.
// DP2-LABEL: func.func @forward
// DP2: colossal.constant dense<{{\[}}[0, 1, 2], [0, 1, 2]]> : tensor<2x3xi64>
// DP2-NOT: shard_slice
// DP2: return {{.*}} : tensor<2x3x8xf32>
// TRAIN-LABEL: func.func @forward_microbatch
// TRAIN: colossal.constant dense<{{\[}}[0, 1, 2]]> : tensor<1x3xi64>
func.func @forward(%ids: tensor<4x3xi64> {colossal.input = "ids"},
                   %wte: tensor<16x8xf32> {colossal.param = "wte"},
                   %wpe: tensor<3x8xf32> {colossal.param = "wpe"}) -> (tensor<4x3x8xf32> {colossal.output = "h"}) {
  %pos = colossal.constant dense<[[0, 1, 2], [0, 1, 2], [0, 1, 2], [0, 1, 2]]> : tensor<4x3xi64>
  %e = colossal.gather %wte, %ids {axis = 0 : i64} : (tensor<16x8xf32>, tensor<4x3xi64>) -> tensor<4x3x8xf32>
  %p = colossal.gather %wpe, %pos {axis = 0 : i64} : (tensor<3x8xf32>, tensor<4x3xi64>) -> tensor<4x3x8xf32>
  %h = colossal.add %e, %p : (tensor<4x3x8xf32>, tensor<4x3x8xf32>) -> tensor<4x3x8xf32>
  return %h : tensor<4x3x8xf32>
}

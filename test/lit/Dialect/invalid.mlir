// RUN: colossal-opt %s -split-input-file -verify-diagnostics

// Every verifier and type-inference error of the colossal dialect, one per split. An op whose
// result type cannot be inferred reports the reason at the op, then that inference failed.

func.func @broadcast_mismatch(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  // expected-error @+2 {{shapes [2x3] and [4] do not broadcast}}
  // expected-error @+1 {{'colossal.add' op failed to infer returned types}}
  %0 = colossal.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @element_type_mismatch(%a: tensor<3xf32>, %b: tensor<3xf16>) -> tensor<3xf32> {
  // expected-error @+2 {{operand element types differ: 'f32' vs 'f16'}}
  // expected-error @+1 {{'colossal.mul' op failed to infer returned types}}
  %0 = colossal.mul %a, %b : (tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @wrong_result_type(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+2 {{'colossal.sub' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  // expected-error @+1 {{'colossal.sub' op failed to infer returned types}}
  %0 = colossal.sub %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @where_condition_not_bool(%c: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{condition must be i1, got 'f32'}}
  // expected-error @+1 {{'colossal.where' op failed to infer returned types}}
  %0 = colossal.where %c, %x, %x : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @gelu_bad_approximate(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'colossal.gelu' op approximate must be "none" or "tanh", got "fast"}}
  %0 = colossal.gelu %x {approximate = "fast"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @cast_changes_shape(%x: tensor<4xf32>) -> tensor<2x2xi32> {
  // expected-error @+1 {{'colossal.cast' op changes the shape}}
  %0 = colossal.cast %x : tensor<4xf32> -> tensor<2x2xi32>
  return %0 : tensor<2x2xi32>
}

// -----

func.func @softmax_bad_axis(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'colossal.softmax' op axis 2 out of range for rank 2}}
  %0 = colossal.softmax %x {axis = 2 : i64} : tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @log_softmax_negative_axis(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'colossal.log_softmax' op axis -1 out of range for rank 2}}
  %0 = colossal.log_softmax %x {axis = -1 : i64} : tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @layer_norm_scale_shape(%x: tensor<2x8xf32>, %w: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'colossal.layer_norm' op scale shape [2x8] must equal the normalized shape [8]}}
  %0 = colossal.layer_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @layer_norm_bias_shape(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<4xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'colossal.layer_norm' op bias shape [4] must equal the normalized shape [8]}}
  %0 = colossal.layer_norm %x, %w, %b {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @rms_norm_bad_axis(%x: tensor<2x8xf32>, %w: tensor<8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'colossal.rms_norm' op axis 2 out of range for rank 2}}
  %0 = colossal.rms_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @reduce_axes_unsorted(%x: tensor<2x3x4xf32>) -> tensor<3xf32> {
  // expected-error @+2 {{axes must be sorted, unique and in [0, 3)}}
  // expected-error @+1 {{'colossal.reduce_sum' op failed to infer returned types}}
  %0 = colossal.reduce_sum %x {axes = array<i64: 2, 0>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @reduce_axes_empty(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+2 {{axes must not be empty}}
  // expected-error @+1 {{'colossal.reduce_mean' op failed to infer returned types}}
  %0 = colossal.reduce_mean %x {axes = array<i64>, keepdims = true} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @matmul_contracting(%a: tensor<4x8xf32>, %b: tensor<6x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+2 {{contracting dims differ: [4x8] x [6x16]}}
  // expected-error @+1 {{'colossal.matmul' op failed to infer returned types}}
  %0 = colossal.matmul %a, %b : (tensor<4x8xf32>, tensor<6x16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @matmul_batch(%a: tensor<2x4x8xf32>, %b: tensor<3x8x16xf32>) -> tensor<2x4x16xf32> {
  // expected-error @+2 {{batch dims do not broadcast: [2x4x8] x [3x8x16]}}
  // expected-error @+1 {{'colossal.matmul' op failed to infer returned types}}
  %0 = colossal.matmul %a, %b : (tensor<2x4x8xf32>, tensor<3x8x16xf32>) -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

func.func @gemm_contracting(%a: tensor<4x8xf32>, %b: tensor<16x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+2 {{contracting dims differ: 8 vs 16}}
  // expected-error @+1 {{'colossal.gemm' op failed to infer returned types}}
  %0 = colossal.gemm %a, %b {alpha = 1.0 : f32, beta = 0.0 : f32, trans_a = false, trans_b = false} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @attention_gqa_divisibility(%q: tensor<1x3x5x16xf32>, %k: tensor<1x2x5x16xf32>, %v: tensor<1x2x5x16xf32>) -> tensor<1x3x5x16xf32> {
  // expected-error @+1 {{'colossal.attention' op query heads (3) must be a multiple of key/value heads (2)}}
  %0 = colossal.attention %q, %k, %v {causal = true, scale = 0.25 : f32} : (tensor<1x3x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>) -> tensor<1x3x5x16xf32>
  return %0 : tensor<1x3x5x16xf32>
}

// -----

func.func @attention_head_dim(%q: tensor<1x2x5x16xf32>, %k: tensor<1x2x5x8xf32>, %v: tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32> {
  // expected-error @+1 {{'colossal.attention' op q and k head dims differ: 16 vs 8}}
  %0 = colossal.attention %q, %k, %v {causal = false, scale = 0.25 : f32} : (tensor<1x2x5x16xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32>
  return %0 : tensor<1x2x5x16xf32>
}

// -----

func.func @attention_kv_disagree(%q: tensor<1x2x5x16xf32>, %k: tensor<1x2x5x16xf32>, %v: tensor<1x2x6x16xf32>) -> tensor<1x2x5x16xf32> {
  // expected-error @+1 {{'colossal.attention' op k and v must agree on heads and length}}
  %0 = colossal.attention %q, %k, %v {causal = false, scale = 0.25 : f32} : (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x6x16xf32>) -> tensor<1x2x5x16xf32>
  return %0 : tensor<1x2x5x16xf32>
}

// -----

func.func @attention_mask_shape(%q: tensor<1x2x5x16xf32>, %k: tensor<1x2x5x16xf32>, %v: tensor<1x2x5x16xf32>, %m: tensor<5x4xf32>) -> tensor<1x2x5x16xf32> {
  // expected-error @+1 {{'colossal.attention' op mask of shape [5x4] does not broadcast to scores [1x2x5x5]}}
  %0 = colossal.attention %q, %k, %v, %m {causal = false, scale = 0.25 : f32} : (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<5x4xf32>) -> tensor<1x2x5x16xf32>
  return %0 : tensor<1x2x5x16xf32>
}

// -----

func.func @attention_q_rank(%q: tensor<2x5x16xf32>, %k: tensor<1x2x5x16xf32>, %v: tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32> {
  // expected-error @+1 {{'colossal.attention' op q, k and v must be rank 4: [B, H, T, D]}}
  %0 = colossal.attention %q, %k, %v {causal = false, scale = 0.25 : f32} : (tensor<2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32>
  return %0 : tensor<1x2x5x16xf32>
}

// -----

func.func @attention_k_rank(%q: tensor<1x2x5x16xf32>, %k: tensor<2x5x16xf32>, %v: tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32> {
  // expected-error @+1 {{'colossal.attention' op q, k and v must be rank 4: [B, H, T, D]}}
  %0 = colossal.attention %q, %k, %v {causal = false, scale = 0.25 : f32} : (tensor<1x2x5x16xf32>, tensor<2x5x16xf32>, tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32>
  return %0 : tensor<1x2x5x16xf32>
}

// -----

func.func @reshape_numel(%x: tensor<2x3xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'colossal.reshape' op element count changes: [2x3] -> [4x2]}}
  %0 = colossal.reshape %x : tensor<2x3xf32> -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @transpose_not_permutation(%x: tensor<2x3xf32>) -> tensor<2x2xf32> {
  // expected-error @+2 {{perm is not a permutation}}
  // expected-error @+1 {{'colossal.transpose' op failed to infer returned types}}
  %0 = colossal.transpose %x {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

func.func @gather_bad_axis(%x: tensor<2x3xf32>, %i: tensor<4xi64>) -> tensor<2x3xf32> {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{'colossal.gather' op failed to infer returned types}}
  %0 = colossal.gather %x, %i {axis = 2 : i64} : (tensor<2x3xf32>, tensor<4xi64>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @gather_float_indices(%x: tensor<2x3xf32>, %i: tensor<4xf32>) -> tensor<4x3xf32> {
  // expected-error @+2 {{indices must be integers}}
  // expected-error @+1 {{'colossal.gather' op failed to infer returned types}}
  %0 = colossal.gather %x, %i {axis = 0 : i64} : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @slice_zero_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{step of dim 0 is zero}}
  // expected-error @+1 {{'colossal.slice' op failed to infer returned types}}
  %0 = colossal.slice %x {starts = array<i64: 0>, limits = array<i64: 4>, steps = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @slice_not_normalized(%x: tensor<4xf32>) -> tensor<2xf32> {
  // expected-error @+2 {{dim 0: start 2 limit 6 step 1 not normalized for size 4}}
  // expected-error @+1 {{'colossal.slice' op failed to infer returned types}}
  %0 = colossal.slice %x {starts = array<i64: 2>, limits = array<i64: 6>, steps = array<i64: 1>} : (tensor<4xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @concat_dims_differ(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<4x3xf32> {
  // expected-error @+2 {{inputs differ in dim 1}}
  // expected-error @+1 {{'colossal.concat' op failed to infer returned types}}
  %0 = colossal.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @split_sizes(%x: tensor<2x6xf32>) -> (tensor<2x2xf32>, tensor<2x3xf32>) {
  // expected-error @+1 {{'colossal.split' op result sizes sum to 5, input dim is 6}}
  %0:2 = colossal.split %x {axis = 1 : i64} : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x3xf32>
  return %0#0, %0#1 : tensor<2x2xf32>, tensor<2x3xf32>
}

// -----

func.func @split_other_dim(%x: tensor<2x6xf32>) -> (tensor<2x3xf32>, tensor<1x3xf32>) {
  // expected-error @+1 {{'colossal.split' op results differ from the input in dim 0}}
  %0:2 = colossal.split %x {axis = 1 : i64} : tensor<2x6xf32> -> tensor<2x3xf32>, tensor<1x3xf32>
  return %0#0, %0#1 : tensor<2x3xf32>, tensor<1x3xf32>
}

// -----

func.func @expand_not_broadcast(%x: tensor<3x2xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{'colossal.expand' op cannot broadcast [3x2] to [3x4]}}
  %0 = colossal.expand %x : tensor<3x2xf32> -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

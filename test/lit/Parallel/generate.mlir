// colossal-generate: @forward, one sequence of T = 8 positions, becomes @generate_<N> for N = 1, 2,
// 4 (max-batch-tokens 3 rounded up): each attention is kv_append + paged_attention over its
// layer's cache (states kv.0.k / kv.0.v, [kv_blocks, Hkv, block, D]), the token rows come in as
// `tokens` / `positions` / `slot_mapping` [N], a table over the 8 positions (a prefix of a longer
// parameter, as cos_cached[:T]) is gathered at the positions, the logits come out [N, V].
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-generate{max-seq-len=8 block-size=4 max-batch-seqs=2 max-batch-tokens=3})' | FileCheck %s

// CHECK: module attributes {colossal.generate = {block_size = 4 : i64, head_dim = 4 : i64, kv_block_bytes = 256 : i64, kv_heads = 2 : i64, layers = 1 : i64, max_batch_seqs = 2 : i64, max_batch_tokens = 3 : i64, max_blocks_per_seq = 2 : i64, max_seq_len = 8 : i64, num_blocks = 4 : i64, tokens_input = "ids", vocab_size = 16 : i64}
// CHECK-NOT: func.func @forward
// CHECK-LABEL: func.func @generate_1(
// CHECK-SAME: tensor<1xi64> {colossal.input = "tokens"}
// CHECK-SAME: tensor<1xi32> {colossal.input = "positions"}
// CHECK-SAME: tensor<1xi32> {colossal.input = "slot_mapping"}
// CHECK-SAME: tensor<2x2xi32> {colossal.input = "block_tables"}
// CHECK-SAME: tensor<2xi32> {colossal.input = "context_lens"}
// CHECK-SAME: tensor<3xi32> {colossal.input = "query_start_loc"}
// CHECK-SAME: tensor<4x2x4x4xf32> {colossal.state = "kv.0.k"}
// CHECK-SAME: tensor<4x2x4x4xf32> {colossal.state = "kv.0.v"}
// CHECK-SAME: -> (tensor<1x16xf32> {colossal.output = "logits"})
// CHECK-SAME: colossal.program = "generate", colossal.tokens = 1 : i64
// CHECK: colossal.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<32x4xf32>, tensor<1xi64>) -> tensor<1x4xf32>
// CHECK: colossal.kv_append
// CHECK: colossal.paged_attention {{.*}} : (tensor<1x4x4xf32>, tensor<4x2x4x4xf32>, tensor<4x2x4x4xf32>, tensor<2x2xi32>, tensor<2xi32>, tensor<3xi32>) -> tensor<1x4x4xf32>
// CHECK-NOT: colossal.all_gather
// CHECK-NOT: colossal.shard_slice
// CHECK: return {{.*}} : tensor<1x16xf32>
// CHECK-LABEL: func.func @generate_2(
// CHECK: -> (tensor<2x16xf32> {colossal.output = "logits"})
// CHECK-LABEL: func.func @generate_4(
// CHECK: colossal.paged_attention {{.*}} -> tensor<4x4x4xf32>
// CHECK: return {{.*}} : tensor<4x16xf32>

module attributes {colossal.source = "tiny.onnx"} {
func.func @forward(%ids: tensor<1x8xi64> {colossal.input = "ids"},
                   %wte: tensor<16x16xf32> {colossal.param = "wte", colossal.value = dense<0.01> : tensor<16x16xf32>},
                   %cos: tensor<32x4xf32> {colossal.param = "cos_cached", colossal.value = dense<0.5> : tensor<32x4xf32>},
                   %wq: tensor<16x16xf32> {colossal.param = "wq", colossal.value = dense<0.02> : tensor<16x16xf32>},
                   %wk: tensor<16x8xf32> {colossal.param = "wk", colossal.value = dense<0.03> : tensor<16x8xf32>},
                   %wv: tensor<16x8xf32> {colossal.param = "wv", colossal.value = dense<0.04> : tensor<16x8xf32>})
    -> (tensor<1x8x16xf32> {colossal.output = "logits"}) attributes {colossal.program = "forward"} {
  %e = colossal.gather %wte, %ids {axis = 0 : i64} : (tensor<16x16xf32>, tensor<1x8xi64>) -> tensor<1x8x16xf32>
  %q = colossal.matmul %e, %wq : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
  %k = colossal.matmul %e, %wk : (tensor<1x8x16xf32>, tensor<16x8xf32>) -> tensor<1x8x8xf32>
  %v = colossal.matmul %e, %wv : (tensor<1x8x16xf32>, tensor<16x8xf32>) -> tensor<1x8x8xf32>
  %q4 = colossal.reshape %q : tensor<1x8x16xf32> -> tensor<1x8x4x4xf32>
  %k4 = colossal.reshape %k : tensor<1x8x8xf32> -> tensor<1x8x2x4xf32>
  %v4 = colossal.reshape %v : tensor<1x8x8xf32> -> tensor<1x8x2x4xf32>
  %qt = colossal.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x4xf32>) -> tensor<1x4x8x4xf32>
  %kt = colossal.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x4xf32>) -> tensor<1x2x8x4xf32>
  %vt = colossal.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x4xf32>) -> tensor<1x2x8x4xf32>
  // A rotary-style table: rows [0, 8) of a 32-row parameter, broadcast over batch and heads.
  %c = colossal.slice %cos {starts = array<i64: 0, 0>, limits = array<i64: 8, 4>, steps = array<i64: 1, 1>} : (tensor<32x4xf32>) -> tensor<8x4xf32>
  %qr = colossal.mul %qt, %c : (tensor<1x4x8x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8x4xf32>
  %kr = colossal.mul %kt, %c : (tensor<1x2x8x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8x4xf32>
  %a = colossal.attention %qr, %kr, %vt {causal = true, scale = 0.5 : f32} : (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x4x8x4xf32>
  %at = colossal.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x4xf32>) -> tensor<1x8x4x4xf32>
  %h = colossal.reshape %at : tensor<1x8x4x4xf32> -> tensor<1x8x16xf32>
  %l = colossal.matmul %h, %wte : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
  return %l : tensor<1x8x16xf32>
}
}


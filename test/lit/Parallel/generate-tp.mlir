// colossal-generate under mesh tp=2, then colossal-spmd-partition over the step programs: the
// paged ops split their heads, so each layer's cache keeps rank r's key/value heads (states
// kv.0.k / kv.0.v [kv_blocks, Hkv / 2, block, D] with their sharding), the queries follow, and
// kv_block_bytes is one rank's share of a block.
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-generate{max-seq-len=8 block-size=4 max-batch-seqs=2 max-batch-tokens=3}, colossal-spmd-partition, canonicalize, cse)' | FileCheck %s
// At tp=4 the two key/value heads cannot be split four ways: one error naming the op.
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=4:tensor}, colossal-generate{max-seq-len=8 block-size=4 max-batch-seqs=2 max-batch-tokens=3}, colossal-spmd-partition)' 2>&1 | FileCheck %s --check-prefix=TP4

// CHECK: kv_block_bytes = 128 : i64
// CHECK-LABEL: func.func @generate_1(
// The RoPE table is read at the positions, whole on every rank (not vocab-parallel).
// CHECK-SAME: tensor<32x4xf32> {colossal.param = "cos_cached", colossal.value
// CHECK-SAME: tensor<16x8xf32> {colossal.param = "wq", colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}]>
// CHECK-SAME: tensor<4x1x4x4xf32> {colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}, {}, {}]>, colossal.state = "kv.0.k"}
// CHECK-SAME: tensor<4x1x4x4xf32> {colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}, {}, {}]>, colossal.state = "kv.0.v"}
// CHECK: colossal.gather %arg1, %{{.*}} {axis = 0 : i64} : (tensor<32x4xf32>, tensor<1xi64>) -> tensor<1x4xf32>
// CHECK: colossal.kv_append %arg11, %arg12, %{{.*}}, %{{.*}}, %arg7 : tensor<4x1x4x4xf32>, tensor<4x1x4x4xf32>, tensor<1x1x4xf32>, tensor<1x1x4xf32>, tensor<1xi32>
// CHECK: colossal.paged_attention {{.*}} : (tensor<1x2x4xf32>, tensor<4x1x4x4xf32>, tensor<4x1x4x4xf32>, tensor<2x2xi32>, tensor<2xi32>, tensor<3xi32>) -> tensor<1x2x4xf32>
// The output projection (the tied table, row-parallel here) sums over the ranks' heads.
// CHECK: colossal.all_reduce %{{.*}} {axes = ["tp"]} : tensor<1x16xf32> -> tensor<1x16xf32>
// CHECK-NOT: colossal.all_gather
// CHECK: return {{.*}} : tensor<1x16xf32>
// CHECK-LABEL: func.func @generate_4(
// CHECK: colossal.paged_attention {{.*}} -> tensor<4x2x4xf32>

// TP4: error: tensor parallelism over tp=4 cannot split the reshape
// TP4-SAME: key/value heads, must be divisible by the tensor-parallel size

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


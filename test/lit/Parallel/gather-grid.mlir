// A gather on a non-table axis of a value whose batch rows are split over a 2d grid (BERT's pooler
// `hidden[:, 0]`, the interleaved RoPE pairs `x[..., 0]` of the llama2.c exports) is a local
// gather: only a gather whose gathered axis is split is vocab-parallel (masked ids, axis_index).
// Regression (5cef528): the vocab-parallel masking used to key on dim 0 of the data (here the batch split
// over tp_row), so grid rank rows > 0 read zeros (found by e2e.tp.infer.*).
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp_row=2:grid_row,tp_col=2:grid_col}, colossal-spmd-partition{style=2d stage=propagate})' | FileCheck %s --check-prefix=PROPAGATE
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp_row=2:grid_row,tp_col=2:grid_col}, colossal-spmd-partition{style=2d})' | FileCheck %s --check-prefix=PARTITION

module {
  func.func @forward(%ids: tensor<4x8xi64> {colossal.input = "input_ids"},
                     %emb: tensor<16x16xf32> {colossal.param = "emb.weight"},
                     %w: tensor<16x16xf32> {colossal.param = "pool.weight"}) -> tensor<4x16xf32> {
    %h = colossal.gather %emb, %ids {axis = 0 : i64} : (tensor<16x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
    %zero = colossal.constant dense<0> : tensor<i64>
    %first = colossal.gather %h, %zero {axis = 1 : i64} : (tensor<4x8x16xf32>, tensor<i64>) -> tensor<4x16xf32>
    %p = colossal.matmul %first, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    return %p : tensor<4x16xf32>
  }
}

// PROPAGATE: colossal.gather %arg1, %arg0 {axis = 0 : i64, colossal.sharding = #colossal.sharding<@mesh, [{"tp_row"}, {}, {"tp_col"}]>}
// PROPAGATE: colossal.gather %{{.*}}, %{{.*}} {axis = 1 : i64, colossal.sharding = #colossal.sharding<@mesh, [{"tp_row"}, {"tp_col"}]>}

// PARTITION: %[[IDS:.*]] = colossal.shard_slice %arg0 {axes = ["tp_row"], dim = 0 : i64} : tensor<4x8xi64> -> tensor<2x8xi64>
// PARTITION: %[[H:.*]] = colossal.gather %arg1, %[[IDS]] {axis = 0 : i64} : (tensor<16x8xf32>, tensor<2x8xi64>) -> tensor<2x8x8xf32>
// PARTITION: %[[ZERO:.*]] = colossal.constant dense<0> : tensor<i64>
// PARTITION-NOT: axis_index
// PARTITION-NEXT: %[[FIRST:.*]] = colossal.gather %[[H]], %[[ZERO]] {axis = 1 : i64} : (tensor<2x8x8xf32>, tensor<i64>) -> tensor<2x8xf32>
// The pooler's matmul is SUMMA on the 2x2 grid: per step k, the activation panel broadcast
// along the grid row from column k, the weight panel along the grid column from row k.
// PARTITION-NEXT: colossal.broadcast %[[FIRST]] {axes = ["tp_col"], root = 0 : i64} : tensor<2x8xf32>
// PARTITION-NEXT: colossal.broadcast %arg2 {axes = ["tp_row"], root = 0 : i64} : tensor<8x8xf32>
// PARTITION-NEXT: colossal.matmul
// PARTITION-NEXT: colossal.broadcast %[[FIRST]] {axes = ["tp_col"], root = 1 : i64}
// PARTITION-NEXT: colossal.broadcast %arg2 {axes = ["tp_row"], root = 1 : i64}
// PARTITION-NEXT: colossal.matmul
// PARTITION-NEXT: colossal.add
// PARTITION-NOT: axis_index
// PARTITION: return

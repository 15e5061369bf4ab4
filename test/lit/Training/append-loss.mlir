// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-append-loss{logits=logits})' | FileCheck %s

// colossal-append-loss on a token MLP (tokens [B=4, T=2], vocabulary 8). @forward stays as it is;
// @eval and @train_step are built from @forward_microbatch (the model imported at 2 rows for
// grad_accum 2), which goes away. The labels input [2, 2] i64 is created, logits [2, 2, 8] and
// labels are flattened to [4, 8] and [4], and ops that do not reach the loss (the `hidden` output)
// are dropped. The module's colossal.train records the token input and the global shapes.

// CHECK-LABEL: module attributes
// CHECK-SAME: colossal.train = {global_batch = 4 : i64, ignore_index = -100 : i64, labels_input = "labels", logits_output = "logits", loss = "cross_entropy", seq_len = 2 : i64, tokens_input = "tokens", vocab_size = 8 : i64}
// CHECK: func.func @forward(%{{.*}}: tensor<4x2xi64> {colossal.input = "tokens"}
// CHECK: return %{{.*}}, %{{.*}} : tensor<4x2x8xf32>, tensor<4x2x6xf32>
// CHECK-NOT: @forward_microbatch
// CHECK-LABEL: func.func @eval
// CHECK-SAME: (%[[TOK:.*]]: tensor<2x2xi64> {colossal.input = "tokens"}, %[[EMB:.*]]: tensor<8x6xf32> {colossal.param = "emb"}, %[[W:.*]]: tensor<6x8xf32> {colossal.param = "head.weight"}, %[[LAB:.*]]: tensor<2x2xi64> {colossal.input = "labels"}) -> (tensor<f32> {colossal.output = "loss"})
// CHECK-NEXT: %[[E:.*]] = colossal.gather %[[EMB]], %[[TOK]]
// CHECK-NEXT: %[[L:.*]] = colossal.matmul %[[E]], %[[W]]
// CHECK-NEXT: %[[L2:.*]] = colossal.reshape %[[L]] : tensor<2x2x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[Y2:.*]] = colossal.reshape %[[LAB]] : tensor<2x2xi64> -> tensor<4xi64>
// CHECK-NEXT: %[[LOSS:.*]] = colossal.cross_entropy %[[L2]], %[[Y2]] : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<f32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%{{.*}}: tensor<2x2xi64> {colossal.input = "tokens"}, %{{.*}}: tensor<8x6xf32> {colossal.param = "emb"}, %{{.*}}: tensor<6x8xf32> {colossal.param = "head.weight"}, %{{.*}}: tensor<2x2xi64> {colossal.input = "labels"}) -> (tensor<f32> {colossal.output = "loss"})
// CHECK: colossal.cross_entropy
// CHECK-NEXT: return

module {
  func.func @forward(%tokens: tensor<4x2xi64> {colossal.input = "tokens"},
                     %emb: tensor<8x6xf32> {colossal.param = "emb"},
                     %w: tensor<6x8xf32> {colossal.param = "head.weight"})
      -> (tensor<4x2x8xf32> {colossal.output = "logits"}, tensor<4x2x6xf32> {colossal.output = "hidden"}) {
    %e = colossal.gather %emb, %tokens {axis = 0 : i64} : (tensor<8x6xf32>, tensor<4x2xi64>) -> tensor<4x2x6xf32>
    %h = colossal.relu %e : tensor<4x2x6xf32>
    %l = colossal.matmul %e, %w : (tensor<4x2x6xf32>, tensor<6x8xf32>) -> tensor<4x2x8xf32>
    return %l, %h : tensor<4x2x8xf32>, tensor<4x2x6xf32>
  }
  func.func @forward_microbatch(%tokens: tensor<2x2xi64> {colossal.input = "tokens"},
                                %emb: tensor<8x6xf32> {colossal.param = "emb"},
                                %w: tensor<6x8xf32> {colossal.param = "head.weight"})
      -> (tensor<2x2x8xf32> {colossal.output = "logits"}, tensor<2x2x6xf32> {colossal.output = "hidden"}) {
    %e = colossal.gather %emb, %tokens {axis = 0 : i64} : (tensor<8x6xf32>, tensor<2x2xi64>) -> tensor<2x2x6xf32>
    %h = colossal.relu %e : tensor<2x2x6xf32>
    %l = colossal.matmul %e, %w : (tensor<2x2x6xf32>, tensor<6x8xf32>) -> tensor<2x2x8xf32>
    return %l, %h : tensor<2x2x8xf32>, tensor<2x2x6xf32>
  }
}

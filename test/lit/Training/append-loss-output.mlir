// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-append-loss{kind=output output=loss labels=targets logits=logits})' | FileCheck %s
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-append-loss{kind=output output=loss labels=targets})' 2>&1 | FileCheck %s --check-prefix=NOLOGITS
// NOLOGITS: error: train.loss: kind output needs logits as well: name the model's logits output with train.loss.logits

// A model that computes its own loss (kind=output): its scalar output becomes @eval's result and
// its `targets` input is the labels; no loss op is added. The logits output gives vocab_size.

// CHECK-LABEL: module attributes
// CHECK-SAME: colossal.train = {global_batch = 3 : i64, ignore_index = -100 : i64, labels_input = "targets", logits_output = "logits", loss = "output", seq_len = 5 : i64, tokens_input = "tokens", vocab_size = 7 : i64}
// CHECK-LABEL: func.func @eval
// CHECK-SAME: (%[[TOK:.*]]: tensor<3x5xi64> {colossal.input = "tokens"}, %[[Y:.*]]: tensor<3x5xi64> {colossal.input = "targets"}, %[[W:.*]]: tensor<7x7xf32> {colossal.param = "w"}) -> (tensor<f32> {colossal.output = "loss"})
// CHECK-NOT: colossal.cross_entropy
// CHECK: colossal.reduce_sum
// CHECK: %[[R:.*]] = colossal.reshape %{{.*}} : tensor<1xf32> -> tensor<f32>
// CHECK-NEXT: return %[[R]] : tensor<f32>
// CHECK-LABEL: func.func @train_step
module {
  func.func @forward(%tokens: tensor<3x5xi64> {colossal.input = "tokens"},
                     %targets: tensor<3x5xi64> {colossal.input = "targets"},
                     %w: tensor<7x7xf32> {colossal.param = "w"})
      -> (tensor<1xf32> {colossal.output = "loss"}, tensor<3x5x7xf32> {colossal.output = "logits"}) {
    %e = colossal.gather %w, %tokens {axis = 0 : i64} : (tensor<7x7xf32>, tensor<3x5xi64>) -> tensor<3x5x7xf32>
    %s = colossal.reduce_sum %e {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<3x5x7xf32>) -> tensor<f32>
    %r = colossal.reshape %s : tensor<f32> -> tensor<1xf32>
    return %r, %e : tensor<1xf32>, tensor<3x5x7xf32>
  }
}

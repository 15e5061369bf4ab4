// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-autodiff{grad-accum=2})' | FileCheck %s
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-autodiff{grad-accum=2 frozen=w})' 2>&1 | FileCheck %s --check-prefix=FROZEN
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-autodiff{grad-accum=2 frozen=w,blocks\..*})' 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-autodiff{grad-accum=3})' 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-autodiff{grad-accum=1})' 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-autodiff{grad-accum=0})' 2>&1 | FileCheck %s --check-prefix=ZERO

// colossal-autodiff on the smallest @train_step: the parameter `w` is the logits. It is the only
// trainable parameter (`unused` does not reach the loss, `ids` is an integer table), so it alone
// gets an accumulator `w.grad`, inserted after the last parameter, and an accumulate_grad of
// cross_entropy's VJP with scale 1/grad_accum. @train_step takes 2 of the global batch's 4 rows.

// CHECK-LABEL: module attributes
// CHECK-SAME: colossal.train = {frozen = [], global_batch = 4 : i64, grad_accum = 2 : i64, tokens_input = "x", trainable = ["w"]}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%{{.*}}: tensor<2x3xi64> {colossal.input = "x"}, %[[W:.*]]: tensor<6x5xf32> {colossal.param = "w"}, %{{.*}}: tensor<6x5xf32> {colossal.param = "unused"}, %{{.*}}: tensor<6xi64> {colossal.param = "ids"}, %[[ACC:.*]]: tensor<6x5xf32> {colossal.state = "w.grad"}, %[[Y:.*]]: tensor<6xi64> {colossal.input = "labels"}) -> (tensor<f32> {colossal.output = "loss"})
// CHECK-NEXT: %[[LOSS:.*]] = colossal.cross_entropy %[[W]], %[[Y]] {ignore_index = 0 : i64}
// CHECK: %[[ONE:.*]] = colossal.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[G:.*]] = colossal.cross_entropy_grad %[[W]], %[[Y]], %[[ONE]] {ignore_index = 0 : i64} : (tensor<6x5xf32>, tensor<6xi64>, tensor<f32>) -> tensor<6x5xf32>
// CHECK: colossal.accumulate_grad %[[ACC]], %[[G]] {scale = 5.000000e-01 : f64} : tensor<6x5xf32>, tensor<6x5xf32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>

// FROZEN: error: no trainable parameter reaches the loss (3 parameters, 1 frozen)
// NOMATCH: error: train.frozen regex 'blocks\..*' matches no parameter (nor any node consuming one); regexes match whole names
// DIVIDE: error: the global batch 4 is not divisible by train.grad_accum 3
// ROWS: error: @train_step takes 2 rows of 'x', but a global batch of 4 in 1 microbatches needs 4 (run colossal-split-batch before colossal-append-loss to build the microbatch program @forward_microbatch, as colossal-opt does in train mode)
// ZERO: error: colossal-autodiff: grad-accum must be >= 1, got 0

module attributes {colossal.train = {tokens_input = "x", global_batch = 4 : i64}} {
  func.func @forward(%x: tensor<4x3xi64> {colossal.input = "x"}, %w: tensor<6x5xf32> {colossal.param = "w"},
                     %u: tensor<6x5xf32> {colossal.param = "unused"}, %ids: tensor<6xi64> {colossal.param = "ids"})
      -> (tensor<6x5xf32> {colossal.output = "logits"}) {
    return %w : tensor<6x5xf32>
  }
  func.func @train_step(%x: tensor<2x3xi64> {colossal.input = "x"}, %w: tensor<6x5xf32> {colossal.param = "w"},
                        %u: tensor<6x5xf32> {colossal.param = "unused"}, %ids: tensor<6xi64> {colossal.param = "ids"},
                        %labels: tensor<6xi64> {colossal.input = "labels"})
      -> (tensor<f32> {colossal.output = "loss"}) {
    %loss = colossal.cross_entropy %w, %labels {ignore_index = 0 : i64} : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

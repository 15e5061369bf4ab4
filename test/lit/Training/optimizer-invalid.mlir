// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adamw lr=0.001 no-decay=.*bias,ln_f.*})' 2>&1 | FileCheck %s --check-prefix=NODECAY
// NODECAY: error: train.no_decay regex 'ln_f.*' matches no parameter (nor any node consuming one); regexes match whole names
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adamw lr=0.001 no-decay=bias})' 2>&1 | FileCheck %s --check-prefix=WHOLE
// WHOLE: error: train.no_decay regex 'bias' matches no parameter
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adamw lr=0.001 no-decay=(})' 2>&1 | FileCheck %s --check-prefix=REGEX
// REGEX: error: train.no_decay regex '(' is invalid: parentheses not balanced
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adamw})' 2>&1 | FileCheck %s --check-prefix=LR
// LR: error: colossal-optimizer: lr must be a finite number > 0, got 0.000000e+00
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adam lr=1 beta2=1})' 2>&1 | FileCheck %s --check-prefix=BETA
// BETA: error: colossal-optimizer: beta1 and beta2 must be in [0, 1), got 9.000000e-01, 1.000000e+00
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adam lr=1 nesterov=true})' 2>&1 | FileCheck %s --check-prefix=NESTEROV
// NESTEROV: error: colossal-optimizer: nesterov needs kind=sgd, momentum > 0 and dampening 0
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adagrad lr=1})' 2>&1 | FileCheck %s --check-prefix=KIND
// KIND: error: colossal-optimizer: kind must be sgd, adam or adamw, got 'adagrad'
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{lr=1 lr-schedule=cosine warmup-steps=10 total-steps=5})' 2>&1 | FileCheck %s --check-prefix=COSINE
// COSINE: error: colossal-optimizer: the cosine schedule needs 0 <= warmup-steps <= total-steps, got 10 and 5
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{lr=1}, colossal-optimizer{lr=1})' 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: error: colossal-optimizer: the module already has an optimizer_step program
// RUN: not colossal-opt %S/append-loss-output.mlir --pass-pipeline='builtin.module(colossal-optimizer{lr=1})' 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not colossal-opt %S/append-loss-output.mlir --pass-pipeline='builtin.module(colossal-append-loss{kind=output output=loss labels=targets logits=logits}, colossal-optimizer{lr=1})' 2>&1 | FileCheck %s --check-prefix=NOGRADS
// NOGRADS: error: colossal-optimizer: @train_step has no gradient accumulators (run colossal-autodiff first)
// NOSTEP: error: colossal-optimizer needs @train_step (run colossal-append-loss and colossal-autodiff first)

// Bad colossal-optimizer options and modules, one error each.
func.func @forward(%x: tensor<2x3xi64> {colossal.input = "x"}, %w: tensor<5x4xf32> {colossal.param = "w"},
                   %b: tensor<4xf32> {colossal.param = "head.bias"})
    -> (tensor<2x3x4xf32> {colossal.output = "y"}) {
  %e = colossal.gather %w, %x {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %y = colossal.add %e, %b : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}
func.func @train_step(%x: tensor<2x3xi64> {colossal.input = "x"}, %w: tensor<5x4xf32> {colossal.param = "w"},
                      %b: tensor<4xf32> {colossal.param = "head.bias"},
                      %gw: tensor<5x4xf32> {colossal.state = "w.grad"}, %gb: tensor<4xf32> {colossal.state = "head.bias.grad"},
                      %labels: tensor<2x3xi64> {colossal.input = "labels"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %loss = colossal.constant dense<0.0> : tensor<f32>
  return %loss : tensor<f32>
}

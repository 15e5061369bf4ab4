// colossal-recompute (docs/training.md "Activation recompute"): two residual blocks
// h1 = h0 + gelu(h0·w0), h2 = h1 + gelu(h1·w1) after h0 = x + b, loss = sum(h2), with their
// backward part written as colossal-autodiff writes it. The blocks are one repeated pattern, so
// `full` recomputes each block's matmul (the value its backward part reads) right before that
// backward part, from the saved block input (h0, h1), and the backward readers read the clone.
// RUN: colossal-opt %s --pass-pipeline='builtin.module(func.func(colossal-recompute{mode=full}))' -mlir-print-debuginfo | FileCheck %s --check-prefix=FULL
// RUN: colossal-opt %s --pass-pipeline='builtin.module(func.func(colossal-recompute{mode=selective}))' | FileCheck %s --check-prefix=SEL
// RUN: colossal-opt %s --pass-pipeline='builtin.module(func.func(colossal-recompute{mode=auto budget-bytes=1000000}))' | FileCheck %s --check-prefix=ROOMY
// RUN: colossal-opt %s --pass-pipeline='builtin.module(func.func(colossal-recompute{mode=auto budget-bytes=0}))' -mlir-print-debuginfo | FileCheck %s --check-prefix=TIGHT
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(func.func(colossal-recompute{mode=some}))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: colossal-recompute: mode must be full, selective or auto; got 'some'

// FULL-LABEL: func.func @train_step
// FULL-SAME: colossal.recompute = {estimated_peak_bytes = {{[0-9]+}} : i64, flops = 1024 : i64, forward_flops = {{[0-9]+}} : i64, mode = "full", ops = 2 : i64, units = 2 : i64}
// FULL: %[[H0:.*]] = colossal.add %arg0, %arg1
// FULL-NEXT: %[[M0:.*]] = colossal.matmul %[[H0]], %arg2
// FULL: %[[H1:.*]] = colossal.add %[[H0]], %{{.*}}
// FULL-NEXT: %[[M1:.*]] = colossal.matmul %[[H1]], %arg3
// FULL: %[[DH2:.*]] = colossal.constant
// FULL-NEXT: %[[M1R:.*]] = colossal.matmul %[[H1]], %arg3
// FULL-NEXT: colossal.unary_grad "gelu_tanh" %[[M1R]], %[[DH2]]
// FULL: %[[M0R:.*]] = colossal.matmul %[[H0]], %arg2
// FULL-NEXT: colossal.unary_grad "gelu_tanh" %[[M0R]]
// FULL-NOT: colossal.matmul
// FULL: loc("m1 (recompute)")
// FULL: loc("m0 (recompute)")

// Selective recomputes attention cores only: there are none here.
// SEL: colossal.recompute = {{{.*}} mode = "selective", ops = 0 : i64, units = 0 : i64}
// RUN: colossal-opt %s --pass-pipeline='builtin.module(func.func(colossal-recompute{mode=selective}))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=SELWARN
// SELWARN: warning: memory.recompute selective: @train_step has no attention or softmax to recompute

// auto with room for everything recomputes nothing; with no room it picks the choice with the
// lowest estimated peak.
// ROOMY: colossal.recompute = {{{.*}} mode = "auto", ops = 0 : i64, units = 0 : i64}
// TIGHT: colossal.recompute = {{{.*}} mode = "auto", ops = {{[1-9][0-9]*}} : i64, units = {{[1-9][0-9]*}} : i64}
// TIGHT: (recompute)

module {
  func.func @train_step(%x: tensor<4x8xf32> {colossal.input = "x"},
                        %b: tensor<8xf32> {colossal.param = "b"},
                        %w0: tensor<8x8xf32> {colossal.param = "w0"},
                        %w1: tensor<8x8xf32> {colossal.param = "w1"},
                        %gw0: tensor<8x8xf32> {colossal.state = "w0.grad"},
                        %gw1: tensor<8x8xf32> {colossal.state = "w1.grad"})
      -> (tensor<f32> {colossal.output = "loss"}) attributes {colossal.program = "train_step"} {
    %h0 = colossal.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> loc("h0")
    %m0 = colossal.matmul %h0, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("m0")
    %a0 = colossal.gelu %m0 {approximate = "tanh"} : tensor<4x8xf32> loc("a0")
    %h1 = colossal.add %h0, %a0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("h1")
    %m1 = colossal.matmul %h1, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("m1")
    %a1 = colossal.gelu %m1 {approximate = "tanh"} : tensor<4x8xf32> loc("a1")
    %h2 = colossal.add %h1, %a1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("h2")
    %loss = colossal.reduce_sum %h2 {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<f32> loc("loss")
    %dh2 = colossal.constant dense<1.0> : tensor<4x8xf32>
    %dm1 = colossal.unary_grad "gelu_tanh" %m1, %dh2 : tensor<4x8xf32>
    %dw1 = colossal.gemm %h1, %dm1 {alpha = 1.000000e+00 : f32, beta = 1.000000e+00 : f32, trans_a = true, trans_b = false} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
    colossal.accumulate_grad %gw1, %dw1 : tensor<8x8xf32>, tensor<8x8xf32>
    %dh1a = colossal.gemm %dm1, %w1 {alpha = 1.000000e+00 : f32, beta = 1.000000e+00 : f32, trans_a = false, trans_b = true} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %dh1 = colossal.add %dh2, %dh1a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %dm0 = colossal.unary_grad "gelu_tanh" %m0, %dh1 : tensor<4x8xf32>
    %dw0 = colossal.gemm %h0, %dm0 {alpha = 1.000000e+00 : f32, beta = 1.000000e+00 : f32, trans_a = true, trans_b = false} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
    colossal.accumulate_grad %gw0, %dw0 : tensor<8x8xf32>, tensor<8x8xf32>
    return %loss : tensor<f32>
  }
}

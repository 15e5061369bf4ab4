// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-auto-mixed-precision), colossal-autodiff{grad-accum=1}, func.func(canonicalize, cse))' | FileCheck %s --check-prefix=GRAD

// Before autodiff: the backward products run on the bf16 copies the forward made (the saved
// activations are bf16), the f32 cotangent of the f32 result is cast to bf16 once, and the cast's
// VJP returns the weight gradient to f32 before it is accumulated into the f32 accumulator.

// GRAD-LABEL: func.func @train_step
// GRAD-SAME: %[[W:[^:]*]]: tensor<4x5xf32> {colossal.param = "w"}
// GRAD-SAME: %[[ACC:[^:]*]]: tensor<4x5xf32> {colossal.state = "w.grad"}
// GRAD: %[[HB:.*]] = colossal.cast %{{.*}} : tensor<6x4xf32> -> tensor<6x4xbf16>
// GRAD: %[[WB:.*]] = colossal.cast %[[W]] : tensor<4x5xf32> -> tensor<4x5xbf16>
// GRAD: %[[LOGITS:.*]] = colossal.matmul %[[HB]], %[[WB]] : (tensor<6x4xbf16>, tensor<4x5xbf16>) -> tensor<6x5xf32>
// GRAD: %[[DL:.*]] = colossal.cross_entropy_grad %[[LOGITS]]
// GRAD: %[[DLB:.*]] = colossal.cast %[[DL]] : tensor<6x5xf32> -> tensor<6x5xbf16>
// GRAD: %[[DWB:.*]] = colossal.gemm %[[HB]], %[[DLB]] {{.*}}trans_a = true, trans_b = false} : (tensor<6x4xbf16>, tensor<6x5xbf16>) -> tensor<4x5xbf16>
// GRAD: %[[DW:.*]] = colossal.cast %[[DWB]] : tensor<4x5xbf16> -> tensor<4x5xf32>
// GRAD: colossal.accumulate_grad %[[ACC]], %[[DW]] : tensor<4x5xf32>, tensor<4x5xf32>
module attributes {colossal.train = {tokens_input = "x", global_batch = 6 : i64}} {
  func.func @forward(%x: tensor<6x4xf32> {colossal.input = "x"}, %w: tensor<4x5xf32> {colossal.param = "w"})
      -> (tensor<6x5xf32> {colossal.output = "logits"}) {
    %l = colossal.matmul %x, %w : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
    return %l : tensor<6x5xf32>
  }
  func.func @train_step(%x: tensor<6x4xf32> {colossal.input = "x"}, %w: tensor<4x5xf32> {colossal.param = "w"},
                        %labels: tensor<6xi64> {colossal.input = "labels"})
      -> (tensor<f32> {colossal.output = "loss"}) {
    %h = colossal.tanh %x : tensor<6x4xf32>
    %l = colossal.matmul %h, %w : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
    %loss = colossal.cross_entropy %l, %labels {ignore_index = -100 : i64} : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Attention's VJP: attention_grad reads the bf16 q, k, v with the f32 output and cotangent and
// returns bf16 dq, dk, dv; the casts' VJPs make the parameter gradients f32 again.

// GRAD-LABEL: func.func @train_step
// GRAD: %[[QB:.*]] = colossal.cast %{{.*}} : tensor<1x2x3x4xf32> -> tensor<1x2x3x4xbf16>
// GRAD: %[[Y:.*]] = colossal.attention %[[QB]], %[[QB]], %[[QB]] {{.*}} -> tensor<1x2x3x4xf32>
// GRAD: %{{.*}}, %{{.*}}, %[[DV:.*]] = colossal.attention_grad %[[QB]], %[[QB]], %[[QB]], %[[Y]], %{{.*}} {{.*}} : (tensor<1x2x3x4xbf16>, tensor<1x2x3x4xbf16>, tensor<1x2x3x4xbf16>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> (tensor<1x2x3x4xbf16>, tensor<1x2x3x4xbf16>, tensor<1x2x3x4xbf16>)
// GRAD: colossal.cast %[[DV]] : tensor<1x2x3x4xbf16> -> tensor<1x2x3x4xf32>
// GRAD: colossal.accumulate_grad %{{.*}} : tensor<4x6xf32>, tensor<4x6xf32>
module attributes {colossal.train = {tokens_input = "x", global_batch = 6 : i64}} {
  func.func @forward(%x: tensor<6x4xf32> {colossal.input = "x"}, %w: tensor<4x6xf32> {colossal.param = "w"})
      -> (tensor<6x6xf32> {colossal.output = "logits"}) {
    %l = colossal.matmul %x, %w : (tensor<6x4xf32>, tensor<4x6xf32>) -> tensor<6x6xf32>
    return %l : tensor<6x6xf32>
  }
  func.func @train_step(%x: tensor<6x4xf32> {colossal.input = "x"}, %w: tensor<4x6xf32> {colossal.param = "w"},
                        %labels: tensor<6xi64> {colossal.input = "labels"})
      -> (tensor<f32> {colossal.output = "loss"}) {
    %h = colossal.reshape %w : tensor<4x6xf32> -> tensor<1x2x3x4xf32>
    %a = colossal.attention %h, %h, %h {causal = true, scale = 0.5 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
    %l = colossal.reshape %a : tensor<1x2x3x4xf32> -> tensor<6x4xf32>
    %t = colossal.tanh %l : tensor<6x4xf32>
    %z = colossal.matmul %t, %w : (tensor<6x4xf32>, tensor<4x6xf32>) -> tensor<6x6xf32>
    %loss = colossal.cross_entropy %z, %labels {ignore_index = -100 : i64} : (tensor<6x6xf32>, tensor<6xi64>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adamw lr=0.001 beta1=0.9 beta2=0.95 eps=1e-8 weight-decay=0.1 no-decay=.*bias,/head/MatMul max-grad-norm=1 lr-schedule=cosine warmup-steps=10 total-steps=100 min-lr=0.0001})' | FileCheck %s --check-prefix=ADAMW
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=adam lr=0.01 weight-decay=0.5})' | FileCheck %s --check-prefix=ADAM
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=sgd lr=0.1 momentum=0.9 nesterov=true weight-decay=0.01 no-decay=emb})' | FileCheck %s --check-prefix=MOMENTUM
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-optimizer{kind=sgd lr=0.1})' | FileCheck %s --check-prefix=SGD

// colossal-optimizer builds @optimizer_step for the parameters that have a gradient accumulator in
// @train_step (emb, onnx::MatMul_7, head.bias; `frozen.w` has none). A no-decay regex matches a
// parameter's name or the ONNX node consuming it in @forward: `/head/MatMul` reaches the
// transposed weight torch calls onnx::MatMul_7.

// ADAMW-LABEL: module attributes
// ADAMW-SAME: colossal.train = {global_batch = 2 : i64, grad_clip = 1.000000e+00 : f64, lr = 1.000000e-03 : f64, lr_schedule = "cosine", min_lr = 1.000000e-04 : f64, optimizer = "adamw", tokens_input = "x", total_steps = 100 : i64, warmup_steps = 10 : i64}
// ADAMW-LABEL: func.func @optimizer_step
// ADAMW-SAME: (%[[E:.*]]: tensor<5x4xf32> {colossal.param = "emb", colossal.source = "emb"}, %[[W:.*]]: tensor<4x5xf32> {colossal.param = "onnx::MatMul_7", colossal.source = "onnx::MatMul_7"}, %[[B:.*]]: tensor<5xf32> {colossal.param = "head.bias", colossal.source = "head.bias"},
// ADAMW-SAME: %[[GE:.*]]: tensor<5x4xf32> {colossal.state = "emb.grad"}, %[[GW:.*]]: tensor<4x5xf32> {colossal.state = "onnx::MatMul_7.grad"}, %[[GB:.*]]: tensor<5xf32> {colossal.state = "head.bias.grad"},
// ADAMW-SAME: %[[ME:.*]]: tensor<5x4xf32> {colossal.state = "emb.exp_avg"}, %[[VE:.*]]: tensor<5x4xf32> {colossal.state = "emb.exp_avg_sq"}, %[[MW:.*]]: tensor<4x5xf32> {colossal.state = "onnx::MatMul_7.exp_avg"}, %[[VW:.*]]: tensor<4x5xf32> {colossal.state = "onnx::MatMul_7.exp_avg_sq"}, %[[MB:.*]]: tensor<5xf32> {colossal.state = "head.bias.exp_avg"}, %[[VB:.*]]: tensor<5xf32> {colossal.state = "head.bias.exp_avg_sq"},
// ADAMW-SAME: %[[LR:.*]]: tensor<f32> {colossal.input = "lr"}, %[[STEP:.*]]: tensor<i64> {colossal.input = "step"}) -> (tensor<f32> {colossal.output = "grad_norm"})
// ADAMW-NEXT: %[[N:.*]] = colossal.global_norm %[[GE]], %[[GW]], %[[GB]] : tensor<5x4xf32>, tensor<4x5xf32>, tensor<5xf32>
// ADAMW-NEXT: colossal.adamw_update %[[E]], %[[GE]], %[[ME]], %[[VE]], %[[LR]], %[[STEP]], %[[N]] {beta1 = 9.000000e-01 : f64, beta2 = 0.9499{{[0-9]*}} : f64, eps = 1.000000e-08 : f64, max_grad_norm = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64}
// ADAMW-NEXT: colossal.adamw_update %[[W]], %[[GW]], %[[MW]], %[[VW]], %[[LR]], %[[STEP]], %[[N]] {{{.*}}weight_decay = 0.000000e+00 : f64}
// ADAMW-NEXT: colossal.adamw_update %[[B]], %[[GB]], %[[MB]], %[[VB]], %[[LR]], %[[STEP]], %[[N]] {{{.*}}weight_decay = 0.000000e+00 : f64}
// ADAMW-NEXT: return %[[N]] : tensor<f32>

// ADAM-LABEL: func.func @optimizer_step
// ADAM: colossal.global_norm
// ADAM-NEXT: colossal.adam_update {{.*}} {beta1 = 9.000000e-01 : f64, beta2 = 0.99899{{[0-9]*}} : f64, eps = 1.000000e-08 : f64, max_grad_norm = 0.000000e+00 : f64, weight_decay = 5.000000e-01 : f64}
// ADAM-NEXT: colossal.adam_update
// ADAM-NEXT: colossal.adam_update
// ADAM-NEXT: return

// MOMENTUM-LABEL: func.func @optimizer_step
// MOMENTUM-SAME: {colossal.state = "emb.momentum_buffer"}, %{{.*}}: tensor<4x5xf32> {colossal.state = "onnx::MatMul_7.momentum_buffer"}, %{{.*}}: tensor<5xf32> {colossal.state = "head.bias.momentum_buffer"}, %{{.*}}: tensor<f32> {colossal.input = "lr"}
// MOMENTUM: colossal.sgd_update %arg0, %arg3, %arg6, %arg9, %arg10, %{{.*}} {dampening = 0.000000e+00 : f64, max_grad_norm = 0.000000e+00 : f64, momentum = 9.000000e-01 : f64, nesterov = true, weight_decay = 0.000000e+00 : f64}
// MOMENTUM-NEXT: colossal.sgd_update %arg1, %arg4, %arg7, %arg9, %arg10, %{{.*}} {{{.*}}weight_decay = 1.000000e-02 : f64}

// SGD-LABEL: func.func @optimizer_step
// SGD-NOT: momentum_buffer
// SGD-SAME: %{{.*}}: tensor<5xf32> {colossal.state = "head.bias.grad"}, %{{.*}}: tensor<f32> {colossal.input = "lr"}
// SGD: colossal.sgd_update %arg0, %arg3, %arg6, %arg7, %{{.*}} {dampening = 0.000000e+00 : f64, max_grad_norm = 0.000000e+00 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64}

module attributes {colossal.train = {tokens_input = "x", global_batch = 2 : i64}} {
  func.func @forward(%x: tensor<2x3xi64> {colossal.input = "x"},
                     %emb: tensor<5x4xf32> {colossal.param = "emb", colossal.source = "emb"},
                     %w: tensor<4x5xf32> {colossal.param = "onnx::MatMul_7", colossal.source = "onnx::MatMul_7"},
                     %b: tensor<5xf32> {colossal.param = "head.bias", colossal.source = "head.bias"},
                     %f: tensor<5xf32> {colossal.param = "frozen.w", colossal.source = "frozen.w"})
      -> (tensor<2x3x5xf32> {colossal.output = "logits"}) {
    %e = colossal.gather %emb, %x {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32> loc("/embed/Gather")
    %l = colossal.matmul %e, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32> loc("/head/MatMul")
    %y = colossal.add %l, %b : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32> loc("/head/Add")
    %z = colossal.add %y, %f : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32> loc("/frozen/Add")
    return %z : tensor<2x3x5xf32>
  }
  // As colossal-autodiff leaves it (the backward ops are not needed here).
  func.func @train_step(%x: tensor<2x3xi64> {colossal.input = "x"},
                        %emb: tensor<5x4xf32> {colossal.param = "emb", colossal.source = "emb"},
                        %w: tensor<4x5xf32> {colossal.param = "onnx::MatMul_7", colossal.source = "onnx::MatMul_7"},
                        %b: tensor<5xf32> {colossal.param = "head.bias", colossal.source = "head.bias"},
                        %f: tensor<5xf32> {colossal.param = "frozen.w", colossal.source = "frozen.w"},
                        %gemb: tensor<5x4xf32> {colossal.state = "emb.grad"},
                        %gw: tensor<4x5xf32> {colossal.state = "onnx::MatMul_7.grad"},
                        %gb: tensor<5xf32> {colossal.state = "head.bias.grad"},
                        %labels: tensor<2x3xi64> {colossal.input = "labels"})
      -> (tensor<f32> {colossal.output = "loss"}) {
    %loss = colossal.constant dense<0.0> : tensor<f32>
    return %loss : tensor<f32>
  }
}

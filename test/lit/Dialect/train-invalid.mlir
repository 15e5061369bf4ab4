// RUN: colossal-opt %s -split-input-file -verify-diagnostics

// Verifier and type-inference errors of the training ops (ColossalTrainOps.td).

func.func @cross_entropy_rank(%logits: tensor<2x3x5xf32>, %labels: tensor<2x3xi64>) {
  // expected-error @+2 {{cross_entropy needs logits [N, C] of f32, got [2x3x5] of 'f32'}}
  // expected-error @+1 {{'colossal.cross_entropy' op failed to infer returned types}}
  %0 = colossal.cross_entropy %logits, %labels : (tensor<2x3x5xf32>, tensor<2x3xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_labels(%logits: tensor<6x5xf32>, %labels: tensor<6xi32>) {
  // expected-error @+2 {{cross_entropy needs labels [6] of i64 (one per logits row), got [6] of 'i32'}}
  // expected-error @+1 {{'colossal.cross_entropy' op failed to infer returned types}}
  %0 = colossal.cross_entropy %logits, %labels : (tensor<6x5xf32>, tensor<6xi32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_grad_dloss(%logits: tensor<6x5xf32>, %labels: tensor<6xi64>, %d: tensor<1xf32>) {
  // expected-error @+2 {{cross_entropy_grad needs dloss tensor<f32>, got 'tensor<1xf32>'}}
  // expected-error @+1 {{'colossal.cross_entropy_grad' op failed to infer returned types}}
  %0 = colossal.cross_entropy_grad %logits, %labels, %d : (tensor<6x5xf32>, tensor<6xi64>, tensor<1xf32>) -> tensor<6x5xf32>
  return
}

// -----

func.func @global_norm_int(%g: tensor<4xi64>) {
  // expected-error @+1 {{global_norm takes float tensors, got 'tensor<4xi64>'}}
  %0 = colossal.global_norm %g : tensor<4xi64>
  return
}

// -----

// An update writes its state operands in place: an SSA temporary is not a persistent tensor.
func.func @accumulate_into_temporary(%acc: tensor<4xf32> {colossal.state = "w.grad"}, %g: tensor<4xf32>) {
  %t = colossal.add %acc, %g : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // expected-error @+1 {{'colossal.accumulate_grad' op writes its operand 'acc' in place, so it must be a function argument marked colossal.param or colossal.state}}
  colossal.accumulate_grad %t, %g : tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @accumulate_into_input(%acc: tensor<4xf32> {colossal.input = "x"}, %g: tensor<4xf32>) {
  // expected-error @+1 {{writes its operand 'acc' in place}}
  colossal.accumulate_grad %acc, %g : tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @accumulate_types(%acc: tensor<4xf32> {colossal.state = "w.grad"}, %g: tensor<3xf32>) {
  // expected-error @+1 {{needs acc and g of one float type, got 'tensor<4xf32>' and 'tensor<3xf32>'}}
  colossal.accumulate_grad %acc, %g : tensor<4xf32>, tensor<3xf32>
  return
}

// -----

func.func @adamw_moment_not_state(%p: tensor<4xf32> {colossal.param = "w"}, %g: tensor<4xf32> {colossal.state = "w.grad"},
                                  %m: tensor<4xf32>, %v: tensor<4xf32> {colossal.state = "w.exp_avg_sq"},
                                  %lr: tensor<f32>, %step: tensor<i64>, %n: tensor<f32>) {
  // expected-error @+1 {{'colossal.adamw_update' op writes its operand 'm' in place}}
  colossal.adamw_update %p, %g, %m, %v, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, max_grad_norm = 0.0 : f64} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return
}

// -----

func.func @adam_betas(%p: tensor<4xf32> {colossal.param = "w"}, %g: tensor<4xf32> {colossal.state = "w.grad"},
                      %m: tensor<4xf32> {colossal.state = "w.exp_avg"}, %v: tensor<4xf32> {colossal.state = "w.exp_avg_sq"},
                      %lr: tensor<f32>, %step: tensor<i64>, %n: tensor<f32>) {
  // expected-error @+1 {{betas must be in [0, 1), got 9.000000e-01, 1.000000e+00}}
  colossal.adam_update %p, %g, %m, %v, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 1.0 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return
}

// -----

func.func @adamw_step_type(%p: tensor<4xf32> {colossal.param = "w"}, %g: tensor<4xf32> {colossal.state = "w.grad"},
                           %m: tensor<4xf32> {colossal.state = "w.exp_avg"}, %v: tensor<4xf32> {colossal.state = "w.exp_avg_sq"},
                           %lr: tensor<f32>, %step: tensor<f32>, %n: tensor<f32>) {
  // expected-error @+1 {{needs lr tensor<f32>, step tensor<i64> and grad_norm tensor<f32>}}
  colossal.adamw_update %p, %g, %m, %v, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>
  return
}

// -----

func.func @sgd_buffer_without_momentum(%p: tensor<4xf32> {colossal.param = "w"}, %g: tensor<4xf32> {colossal.state = "w.grad"},
                                       %buf: tensor<4xf32> {colossal.state = "w.momentum_buffer"},
                                       %lr: tensor<f32>, %step: tensor<i64>, %n: tensor<f32>) {
  // expected-error @+1 {{takes a momentum buffer exactly when momentum != 0 (momentum 0.000000e+00, with buffer)}}
  colossal.sgd_update %p, %g, %buf, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64, nesterov = false} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return
}

// -----

func.func @sgd_nesterov_dampening(%p: tensor<4xf32> {colossal.param = "w"}, %g: tensor<4xf32> {colossal.state = "w.grad"},
                                  %buf: tensor<4xf32> {colossal.state = "w.momentum_buffer"},
                                  %lr: tensor<f32>, %step: tensor<i64>, %n: tensor<f32>) {
  // expected-error @+1 {{nesterov needs momentum > 0 and dampening 0 (as torch.optim.SGD)}}
  colossal.sgd_update %p, %g, %buf, %lr, %step, %n {momentum = 0.9 : f64, dampening = 0.1 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64, nesterov = true} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return
}

// -----

func.func @sgd_negative_decay(%p: tensor<4xf32> {colossal.param = "w"}, %g: tensor<4xf32> {colossal.state = "w.grad"},
                              %lr: tensor<f32>, %step: tensor<i64>, %n: tensor<f32>) {
  // expected-error @+1 {{weight_decay must be >= 0, got -1.000000e-01}}
  colossal.sgd_update %p, %g, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = -0.1 : f64, max_grad_norm = 0.0 : f64, nesterov = false} : tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return
}

// -----

// update_buffer writes a buffer (a BatchNorm running statistic) in place: a param argument.
func.func @buffer_into_input(%buf: tensor<4xf32> {colossal.input = "x"}, %v: tensor<4xf32>) {
  // expected-error @+1 {{'colossal.update_buffer' op writes its operand 'buf' in place, so it must be a function argument marked colossal.param or colossal.state}}
  colossal.update_buffer %buf, %v : tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @buffer_types(%buf: tensor<4xf32> {colossal.param = "bn.running_mean"}, %v: tensor<3xf32>) {
  // expected-error @+1 {{needs buf and value of one float type, got 'tensor<4xf32>' and 'tensor<3xf32>'}}
  colossal.update_buffer %buf, %v : tensor<4xf32>, tensor<3xf32>
  return
}

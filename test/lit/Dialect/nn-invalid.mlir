// RUN: colossal-opt %s -split-input-file -verify-diagnostics

// Verifier and type-inference errors of the neural-network ops, one per split.

func.func @conv_groups(%x: tensor<1x3x5x5xf32>, %w: tensor<4x2x3x3xf32>) {
  // expected-error @+2 {{group 2 must divide the input channels (3) and the output channels (4)}}
  // expected-error @+1 {{'colossal.conv' op failed to infer returned types}}
  %0 = colossal.conv %x, %w {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x3x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32>
  return
}

// -----

func.func @conv_window_too_big(%x: tensor<1x1x2x2xf32>, %w: tensor<1x1x3x3xf32>) {
  // expected-error @+2 {{window of size 3 (dilation 1) does not fit spatial dim 0 of size 2 with its padding}}
  // expected-error @+1 {{'colossal.conv' op failed to infer returned types}}
  %0 = colossal.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x2x2xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x1x1xf32>
  return
}

// -----

func.func @conv_pads_arity(%x: tensor<1x1x5x5xf32>, %w: tensor<1x1x3x3xf32>) {
  // expected-error @+2 {{kernel, strides and dilations need 2 entries and pads 4 for 2 spatial dims}}
  // expected-error @+1 {{'colossal.conv' op failed to infer returned types}}
  %0 = colossal.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x5x5xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  return
}

// -----

func.func @pool_kind(%x: tensor<1x1x4x4xf32>) {
  // expected-error @+2 {{kind must be "max", "avg" or "lp", got "min"}}
  // expected-error @+1 {{'colossal.pool' op failed to infer returned types}}
  %0 = colossal.pool %x {kind = "min", kernel_shape = array<i64: 2, 2>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false, count_include_pad = false, p = 2 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x3x3xf32>
  return
}

// -----

func.func @pool_wrong_result(%x: tensor<1x1x4x4xf32>) {
  // expected-error @+2 {{'colossal.pool' op inferred type(s) 'tensor<1x1x3x3xf32>' are incompatible with return type(s) of operation 'tensor<1x1x2x2xf32>'}}
  // expected-error @+1 {{'colossal.pool' op failed to infer returned types}}
  %0 = colossal.pool %x {kind = "max", kernel_shape = array<i64: 2, 2>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false, count_include_pad = false, p = 2 : i64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32>
  return
}

// -----

func.func @resize_mode(%x: tensor<1x1x2x2xf32>) {
  // expected-error @+1 {{'colossal.resize' op mode must be nearest, linear or cubic, got "area"}}
  %0 = colossal.resize %x {mode = "area", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor", cubic_coeff_a = -7.500000e-01 : f32, exclude_outside = false, extrapolation_value = 0.000000e+00 : f32, scales = array<f64: 1.0, 1.0, 2.0, 2.0>, roi = array<f64>} : (tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @resize_crop_needs_roi(%x: tensor<1x1x2x2xf32>) {
  // expected-error @+1 {{'colossal.resize' op tf_crop_and_resize needs a roi of 8 entries}}
  %0 = colossal.resize %x {mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize", nearest_mode = "floor", cubic_coeff_a = -7.500000e-01 : f32, exclude_outside = false, extrapolation_value = 0.000000e+00 : f32, scales = array<f64: 1.0, 1.0, 2.0, 2.0>, roi = array<f64>} : (tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @nll_target_shape(%x: tensor<3x5x2xf32>, %t: tensor<3xi64>) {
  // expected-error @+2 {{target shape [3] must be the input's without the class dim: [3x2]}}
  // expected-error @+1 {{'colossal.nll_loss' op failed to infer returned types}}
  %0 = colossal.nll_loss %x, %t {reduction = "mean"} : (tensor<3x5x2xf32>, tensor<3xi64>) -> tensor<f32>
  return
}

// -----

func.func @quantize_zero_point_type(%x: tensor<4xf32>, %s: tensor<f32>, %z: tensor<i32>) {
  // expected-error @+2 {{zero_point must be ui8 or i8, got 'i32'}}
  // expected-error @+1 {{'colossal.quantize_linear' op failed to infer returned types}}
  %0 = colossal.quantize_linear %x, %s, %z {axis = 0 : i64} : (tensor<4xf32>, tensor<f32>, tensor<i32>) -> tensor<4xi32>
  return
}

// -----

func.func @quantize_per_axis_size(%x: tensor<2x3xf32>, %s: tensor<2xf32>, %z: tensor<2xui8>) {
  // expected-error @+2 {{scale must be a scalar, [1] or [3], got [2]}}
  // expected-error @+1 {{'colossal.quantize_linear' op failed to infer returned types}}
  %0 = colossal.quantize_linear %x, %s, %z {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2xf32>, tensor<2xui8>) -> tensor<2x3xui8>
  return
}

// -----

func.func @max_unpool_index_shape(%x: tensor<1x1x2x2xf32>, %i: tensor<1x1x2x2xi64>) {
  // expected-error @+1 {{'colossal.max_unpool' op index_shape [1x1x6x4] must fit in the result [1x1x5x5]}}
  %0 = colossal.max_unpool %x, %i {index_shape = array<i64: 1, 1, 6, 4>} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>) -> tensor<1x1x5x5xf32>
  return
}

// -----

func.func @conv_unknown_activation(%x: tensor<1x2x3x3xf32>, %w: tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32> {
  // expected-error @+1 {{unknown activation 'gelu' (relu, clip, hard_sigmoid, hard_swish or sigmoid)}}
  %0 = colossal.conv %x, %w {activation = "gelu", dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  return %0 : tensor<1x2x3x3xf32>
}

// -----

func.func @conv_clip_without_bounds(%x: tensor<1x2x3x3xf32>, %w: tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32> {
  // expected-error @+1 {{activation 'clip' needs activation_alpha and activation_beta}}
  %0 = colossal.conv %x, %w {activation = "clip", dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  return %0 : tensor<1x2x3x3xf32>
}

// -----

func.func @conv_grad_weight_dy_shape(%x: tensor<2x4x7x7xf32>, %dy: tensor<2x6x3x3xf32>) {
  // expected-error @+1 {{dy of shape [2x6x3x3] is not the result [2x6x4x4] of a conv of x with this weight}}
  %0 = colossal.conv_grad_weight %x, %dy {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<2x6x3x3xf32>) -> tensor<6x2x3x3xf32>
  return
}

// -----

func.func @conv_grad_weight_groups(%x: tensor<2x4x7x7xf32>, %dy: tensor<2x6x4x4xf32>) {
  // expected-error @+1 {{weight has 4 channels per group; input has 4 channels in 2 groups}}
  %0 = colossal.conv_grad_weight %x, %dy {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x7x7xf32>, tensor<2x6x4x4xf32>) -> tensor<6x4x3x3xf32>
  return
}

// -----

func.func @pool_grad_kind(%x: tensor<1x1x4x4xf32>, %dy: tensor<1x1x2x2xf32>) {
  // expected-error @+1 {{kind must be "max", "avg" or "lp", got "min"}}
  %0 = colossal.pool_grad %x, %dy {kind = "min", kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false, count_include_pad = false, p = 2 : i64} : (tensor<1x1x4x4xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32>
  return
}

// -----

func.func @pool_grad_dy_shape(%x: tensor<1x1x5x5xf32>, %dy: tensor<1x1x2x2xf32>) {
  // expected-error @+1 {{dy of shape [1x1x2x2] is not the pooled shape [1x1x3x3] of x}}
  %0 = colossal.pool_grad %x, %dy {kind = "max", kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true, count_include_pad = false, p = 2 : i64} : (tensor<1x1x5x5xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x5x5xf32>
  return
}

// -----

func.func @pad_grad_shape(%dy: tensor<2x6x8x8xf32>) {
  // expected-error @+1 {{dy of shape [2x6x8x8] is not the result [2x6x4x5] padded by these pads}}
  %0 = colossal.pad_grad %dy {mode = "constant", pads = array<i64: 0, 0, 2, 2, 0, 0, 2, 2>} : (tensor<2x6x8x8xf32>) -> tensor<2x6x4x5xf32>
  return
}

// -----

func.func @resize_grad_mode(%dy: tensor<1x1x4x4xf32>) {
  // expected-error @+1 {{mode must be nearest, linear or cubic, got "area"}}
  %0 = colossal.resize_grad %dy {mode = "area", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor", cubic_coeff_a = -7.500000e-01 : f32, exclude_outside = false, scales = array<f64: 1.0, 1.0, 2.0, 2.0>, roi = array<f64>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32>
  return
}

// RUN: colossal-opt %s -split-input-file -verify-diagnostics

// Verifier and type-inference errors of the indexing family, one per split.

func.func @reduce_unknown_kind(%x: tensor<3x4xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{kind must be one of sum, mean, max, min, prod, sum_square, l1, l2, log_sum, log_sum_exp; got 'median'}}
  %0 = colossal.reduce %x {axes = array<i64: 1>, keepdims = false, kind = "median"} : (tensor<3x4xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @reduce_l2_of_ints(%x: tensor<3x4xi64>) -> tensor<3xi64> {
  // expected-error @+1 {{kind 'l2' needs a floating-point input}}
  %0 = colossal.reduce %x {axes = array<i64: 1>, keepdims = false, kind = "l2"} : (tensor<3x4xi64>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

func.func @reduce_unsorted_axes(%x: tensor<3x4xf32>) -> tensor<f32> {
  // expected-error @+2 {{axes must be sorted, unique and in [0, 2)}}
  // expected-error @+1 {{'colossal.reduce' op failed to infer returned types}}
  %0 = colossal.reduce %x {axes = array<i64: 1, 0>, keepdims = false, kind = "min"} : (tensor<3x4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @argmax_axis(%x: tensor<3x4xf32>) -> tensor<3xi64> {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{'colossal.argmax' op failed to infer returned types}}
  %0 = colossal.argmax %x {axis = 2 : i64, keepdims = false, select_last_index = false} : (tensor<3x4xf32>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

func.func @gather_elements_float_indices(%x: tensor<3x4xf32>, %i: tensor<3x2xf32>) -> tensor<3x2xf32> {
  // expected-error @+2 {{indices must be i32 or i64}}
  // expected-error @+1 {{'colossal.gather_elements' op failed to infer returned types}}
  %0 = colossal.gather_elements %x, %i {axis = 1 : i64} : (tensor<3x4xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @gather_nd_too_many_coords(%x: tensor<3x4xf32>, %i: tensor<2x3xi64>) -> tensor<2xf32> {
  // expected-error @+2 {{the last dim of indices (3) must be in [1, 2]}}
  // expected-error @+1 {{'colossal.gather_nd' op failed to infer returned types}}
  %0 = colossal.gather_nd %x, %i {batch_dims = 0 : i64} : (tensor<3x4xf32>, tensor<2x3xi64>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @scatter_bad_reduction(%x: tensor<3x4xf32>, %i: tensor<3x2xi64>, %u: tensor<3x2xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{reduction must be one of none, add, mul, max, min; got 'avg'}}
  %0 = colossal.scatter_elements %x, %i, %u {axis = 1 : i64, reduction = "avg"} : (tensor<3x4xf32>, tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

func.func @scatter_nd_updates_shape(%x: tensor<3x4xf32>, %i: tensor<2x1xi64>, %u: tensor<2x3xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{updates shape [2x3], expected [2x4]}}
  %0 = colossal.scatter_nd %x, %i, %u {reduction = "add"} : (tensor<3x4xf32>, tensor<2x1xi64>, tensor<2x3xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

func.func @one_hot_values(%i: tensor<3xi64>, %v: tensor<3xf32>) -> tensor<3x5xf32> {
  // expected-error @+1 {{values must be [off, on]: tensor<2xT>}}
  %0 = colossal.one_hot %i, %v {axis = 1 : i64} : (tensor<3xi64>, tensor<3xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

func.func @topk_k_too_large(%x: tensor<3x4xf32>) -> (tensor<3x5xf32>, tensor<3x5xi64>) {
  // expected-error @+1 {{result shape [3x5] is not [3x4] with k <= 4 at axis 1}}
  %0:2 = colossal.topk %x {axis = 1 : i64, largest = true, sorted = true} : tensor<3x4xf32> -> tensor<3x5xf32>, tensor<3x5xi64>
  return %0#0, %0#1 : tensor<3x5xf32>, tensor<3x5xi64>
}

// -----

func.func @pad_mode(%x: tensor<3x4xf32>) -> tensor<3x5xf32> {
  // expected-error @+1 {{mode must be one of constant, reflect, edge, wrap; got 'mirror'}}
  %0 = colossal.pad %x {mode = "mirror", pads = array<i64: 0, 1, 0, 0>} : (tensor<3x4xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

func.func @pad_crop_below_zero(%x: tensor<3x4xf32>) -> tensor<3x0xf32> {
  // expected-error @+2 {{pads crop dim 1 of size 4 below zero}}
  // expected-error @+1 {{'colossal.pad' op failed to infer returned types}}
  %0 = colossal.pad %x {mode = "constant", pads = array<i64: 0, -3, 0, -3>} : (tensor<3x4xf32>) -> tensor<3x0xf32>
  return %0 : tensor<3x0xf32>
}

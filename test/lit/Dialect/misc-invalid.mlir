// RUN: colossal-opt %s -split-input-file -verify-diagnostics

// Verifier and type-inference errors of det, reverse_sequence, grid_sample and roi_align.

func.func @det_not_square(%m: tensor<2x3xf32>) {
  // expected-error @+2 {{det needs [..., M, M] square matrices, got [2x3]}}
  // expected-error @+1 {{'colossal.det' op failed to infer returned types}}
  %0 = colossal.det %m : (tensor<2x3xf32>) -> tensor<f32>
  return
}

// -----

func.func @reverse_sequence_lens(%x: tensor<4x2xf32>, %lens: tensor<3xi64>) {
  // expected-error @+2 {{sequence_lens must be i64 or i32 of shape [2], got [3]}}
  // expected-error @+1 {{'colossal.reverse_sequence' op failed to infer returned types}}
  %0 = colossal.reverse_sequence %x, %lens {batch_axis = 1 : i64, time_axis = 0 : i64} : (tensor<4x2xf32>, tensor<3xi64>) -> tensor<4x2xf32>
  return
}

// -----

func.func @reverse_sequence_axes(%x: tensor<4x2xf32>, %lens: tensor<2xi64>) {
  // expected-error @+2 {{batch_axis and time_axis must be 0 and 1 in some order}}
  // expected-error @+1 {{'colossal.reverse_sequence' op failed to infer returned types}}
  %0 = colossal.reverse_sequence %x, %lens {batch_axis = 1 : i64, time_axis = 1 : i64} : (tensor<4x2xf32>, tensor<2xi64>) -> tensor<4x2xf32>
  return
}

// -----

func.func @grid_sample_mode(%x: tensor<1x1x2x2xf32>, %g: tensor<1x1x1x2xf32>) {
  // expected-error @+1 {{mode must be bilinear, nearest or bicubic, got 'area'}}
  %0 = colossal.grid_sample %x, %g {align_corners = false, mode = "area", padding_mode = "zeros"} : (tensor<1x1x2x2xf32>, tensor<1x1x1x2xf32>) -> tensor<1x1x1x1xf32>
  return
}

// -----

func.func @grid_sample_grid(%x: tensor<1x1x2x2xf32>, %g: tensor<1x1x1x3xf32>) {
  // expected-error @+2 {{grid_sample needs x [N, C, H, W] and grid [N, Ho, Wo, 2]}}
  // expected-error @+1 {{'colossal.grid_sample' op failed to infer returned types}}
  %0 = colossal.grid_sample %x, %g {align_corners = false, mode = "nearest", padding_mode = "zeros"} : (tensor<1x1x2x2xf32>, tensor<1x1x1x3xf32>) -> tensor<1x1x1x1xf32>
  return
}

// -----

func.func @roi_align_mode(%x: tensor<1x1x4x4xf32>, %r: tensor<2x4xf32>, %i: tensor<2xi64>) {
  // expected-error @+1 {{mode must be avg or max, got 'sum'}}
  %0 = colossal.roi_align %x, %r, %i {half_pixel = false, mode = "sum", output_height = 1 : i64, output_width = 1 : i64, sampling_ratio = 0 : i64, spatial_scale = 1.0 : f32} : (tensor<1x1x4x4xf32>, tensor<2x4xf32>, tensor<2xi64>) -> tensor<2x1x1x1xf32>
  return
}

// -----

func.func @roi_align_indices(%x: tensor<1x1x4x4xf32>, %r: tensor<2x4xf32>, %i: tensor<3xi64>) {
  // expected-error @+2 {{batch_indices must be i64 or i32 of shape [2], got [3]}}
  // expected-error @+1 {{'colossal.roi_align' op failed to infer returned types}}
  %0 = colossal.roi_align %x, %r, %i {half_pixel = false, mode = "avg", output_height = 1 : i64, output_width = 1 : i64, sampling_ratio = 0 : i64, spatial_scale = 1.0 : f32} : (tensor<1x1x4x4xf32>, tensor<2x4xf32>, tensor<3xi64>) -> tensor<2x1x1x1xf32>
  return
}

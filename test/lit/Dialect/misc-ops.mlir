// RUN: colossal-opt %s | FileCheck %s
// RUN: colossal-opt %s --mlir-print-op-generic | colossal-opt | FileCheck %s

// The misc-family ops with kernels of their own parse, infer their types and print back.

// CHECK-LABEL: func.func @misc
// CHECK: colossal.det %arg0 : (tensor<2x3x3xf32>) -> tensor<2xf32>
// CHECK: colossal.reverse_sequence %arg1, %arg2 {batch_axis = 1 : i64, time_axis = 0 : i64} : (tensor<4x2x3xf32>, tensor<2xi64>) -> tensor<4x2x3xf32>
// CHECK: colossal.grid_sample %arg3, %arg4 {align_corners = false, mode = "bicubic", padding_mode = "reflection"} : (tensor<1x2x5x6xf32>, tensor<1x3x4x2xf32>) -> tensor<1x2x3x4xf32>
// CHECK: colossal.roi_align %arg3, %arg5, %arg6 {half_pixel = true, mode = "avg", output_height = 2 : i64, output_width = 3 : i64, sampling_ratio = 0 : i64, spatial_scale = 5.000000e-01 : f32} : (tensor<1x2x5x6xf32>, tensor<4x4xf32>, tensor<4xi32>) -> tensor<4x2x2x3xf32>
func.func @misc(%m: tensor<2x3x3xf32>, %x: tensor<4x2x3xf32>, %lens: tensor<2xi64>,
                %img: tensor<1x2x5x6xf32>, %grid: tensor<1x3x4x2xf32>, %rois: tensor<4x4xf32>,
                %idx: tensor<4xi32>) {
  %0 = colossal.det %m : (tensor<2x3x3xf32>) -> tensor<2xf32>
  %1 = colossal.reverse_sequence %x, %lens {batch_axis = 1 : i64, time_axis = 0 : i64} : (tensor<4x2x3xf32>, tensor<2xi64>) -> tensor<4x2x3xf32>
  %2 = colossal.grid_sample %img, %grid {align_corners = false, mode = "bicubic", padding_mode = "reflection"} : (tensor<1x2x5x6xf32>, tensor<1x3x4x2xf32>) -> tensor<1x2x3x4xf32>
  %3 = colossal.roi_align %img, %rois, %idx {half_pixel = true, mode = "avg", output_height = 2 : i64, output_width = 3 : i64, sampling_ratio = 0 : i64, spatial_scale = 0.5 : f32} : (tensor<1x2x5x6xf32>, tensor<4x4xf32>, tensor<4xi32>) -> tensor<4x2x2x3xf32>
  return
}

// RUN: not colossal-opt %s -split-input-file --pass-pipeline='builtin.module(colossal-test-gradients)' 2>&1 | FileCheck %s
//
// Locations are the ONNX nodes' names, as the importer sets them.

// An op without a vector-Jacobian product between a parameter and the loss is an error naming
// the op and the ONNX node it came from.
func.func @no_vjp(%w: tensor<2x4xf32> {colossal.param = "w"}) -> (tensor<f32> {colossal.output = "loss"}) {
// CHECK: error: loc("row_product"): autodiff: 'colossal.reduce' (ONNX node 'row_product') has no vector-Jacobian product (VJPOpInterface), but it lies on a path from a parameter to the loss
  %p = colossal.reduce %w {axes = array<i64: 1>, keepdims = false, kind = "prod"} : (tensor<2x4xf32>) -> tensor<2xf32> loc("row_product")
  %l = colossal.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : (tensor<2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// GatherND with batch_dims on the path: its VJP does not cover it and says so, naming the node.
func.func @gather_nd_batch_dims(%w: tensor<2x3x4xf32> {colossal.param = "w"}) -> (tensor<f32> {colossal.output = "loss"}) {
// CHECK: error: loc("pick"): autodiff: 'colossal.gather_nd' (ONNX node 'pick') with batch_dims 1 has no gradient yet (only batch_dims 0: a scatter_nd of the cotangent)
  %i = colossal.constant dense<[[1], [2]]> : tensor<2x1xi64>
  %v = colossal.gather_nd %w, %i {batch_dims = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x1xi64>) -> tensor<2x4xf32> loc("pick")
  %l = colossal.reduce_sum %v {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A VJP that does not cover a configuration says why, in one error that names the ONNX node:
// attention's mask computed from a parameter.
func.func @attention_mask_param(%q: tensor<1x2x4x8xf32> {colossal.param = "q"}, %m: tensor<4x4xf32> {colossal.param = "m"}) -> (tensor<f32> {colossal.output = "loss"}) {
// CHECK: error: loc("attn"): autodiff: 'colossal.attention' (ONNX node 'attn') has no gradient with respect to its mask, which is computed from the parameter(s) 'm'; list them in train.frozen to train the model with the mask fixed
// CHECK-NOT: error
  %y = colossal.attention %q, %q, %q, %m {causal = false, scale = 0.35 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<4x4xf32>) -> tensor<1x2x4x8xf32> loc("attn")
  %l = colossal.reduce_sum %y {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x2x4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A conv with a fused epilogue (an inference fusion) is not differentiated.
func.func @conv_epilogue(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32> {colossal.param = "w"}) -> (tensor<f32> {colossal.output = "loss"}) {
// CHECK: error: loc("conv_relu"): autodiff: 'colossal.conv' (ONNX node 'conv_relu') has a fused epilogue (activation or output scale/shift, an inference fusion) and no VJP
// CHECK-NOT: error
  %y = colossal.conv %x, %w {activation = "relu", dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf32> loc("conv_relu")
  %l = colossal.reduce_sum %y {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x1x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A transposed conv whose output_padding reaches its stride (possible with a larger dilation)
// adds rows that conv's output-size rule cannot give back.
func.func @conv_transpose_output_padding(%x: tensor<1x1x3x3xf32>, %w: tensor<1x1x2x2xf32> {colossal.param = "w"}) -> (tensor<f32> {colossal.output = "loss"}) {
// CHECK: error: loc("up"): autodiff: 'colossal.conv_transpose' (ONNX node 'up') output_padding 1 is not below its stride 1; no VJP
  %y = colossal.conv_transpose %x, %w {dilations = array<i64: 2, 2>, group = 1 : i64, output_padding = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x3x3xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x6x6xf32> loc("up")
  %l = colossal.reduce_sum %y {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x1x6x6xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Pad's constant value gets no gradient.
func.func @pad_value(%x: tensor<2x3xf32>, %v: tensor<f32> {colossal.param = "v"}) -> (tensor<f32> {colossal.output = "loss"}) {
// CHECK: error: loc("pad"): autodiff: 'colossal.pad' (ONNX node 'pad') has no gradient with respect to its padding value
  %p = colossal.pad %x, %v {mode = "constant", pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<4x5xf32> loc("pad")
  %l = colossal.reduce_sum %p {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// ScatterElements without a reduction and with duplicate (constant) indices: ONNX leaves which
// update lands undefined, so the updates have no gradient. Here rows 0 and 2 of column 1 both
// write data[1, 1] (axis 0; -2 is 1).
func.func @scatter_elements_duplicates(%x: tensor<3x2xf32> {colossal.param = "x"}, %u: tensor<3x2xf32> {colossal.param = "u"}) -> (tensor<f32> {colossal.output = "loss"}) {
// CHECK: error: loc("write_rows"): autodiff: 'colossal.scatter_elements' (ONNX node 'write_rows') with reduction 'none' writes data position [1, 1] from more than one update (duplicate indices, undefined in ONNX), so its updates have no gradient; use distinct indices or a reduction such as 'add'
// CHECK-NOT: error
  %i = colossal.constant dense<[[0, 1], [2, 0], [1, -2]]> : tensor<3x2xi64>
  %y = colossal.scatter_elements %x, %i, %u {axis = 0 : i64, reduction = "none"} : (tensor<3x2xf32>, tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x2xf32> loc("write_rows")
  %l = colossal.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<3x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The same for ScatterND: the tuples [2] and [-1] name one row of a [3, 2] tensor.
func.func @scatter_nd_duplicates(%x: tensor<3x2xf32>, %u: tensor<2x2xf32> {colossal.param = "u"}) -> (tensor<f32> {colossal.output = "loss"}) {
// CHECK: error: loc("write_slices"): autodiff: 'colossal.scatter_nd' (ONNX node 'write_slices') with reduction 'none' writes data position [2, 0] from more than one update
  %i = colossal.constant dense<[[2], [-1]]> : tensor<2x1xi64>
  %y = colossal.scatter_nd %x, %i, %u {reduction = "none"} : (tensor<3x2xf32>, tensor<2x1xi64>, tensor<2x2xf32>) -> tensor<3x2xf32> loc("write_slices")
  %l = colossal.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<3x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

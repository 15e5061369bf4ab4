// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-fuse-conv-epilogue))' | FileCheck %s

// Inference batch norm as the importer decomposes it, (y − mean) / √(var + ε) · γ + β, then ReLU:
// the four per-channel ops fold into new weights and bias, the ReLU becomes the conv's activation.
// Channel 0: s = 2/2 = 1, t = (0 − 1)·1 + 0.5 = −0.5; channel 1: s = 3/4, t = (1 − 2)·0.75 + 1 = 0.25.
// CHECK-LABEL: func.func @conv_bn_relu
// CHECK-SAME: (%[[X:.*]]: tensor<1x1x3x3xf32>)
// CHECK-DAG:  %[[W:.*]] = colossal.constant dense<{{\[\[\[\[}}1.000000e+00]]], {{\[\[\[}}1.500000e+00]]]]> : tensor<2x1x1x1xf32>
// CHECK-DAG:  %[[B:.*]] = colossal.constant dense<[-5.000000e-01, 2.500000e-01]> : tensor<2xf32>
// CHECK:      %[[Y:.*]] = colossal.conv %[[X]], %[[W]], %[[B]] {activation = "relu", dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>}
// CHECK-NEXT: return %[[Y]]
func.func @conv_bn_relu(%x: tensor<1x1x3x3xf32>) -> tensor<1x2x3x3xf32> {
  %w = colossal.constant dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>
  %b = colossal.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %mean = colossal.constant dense<[[[1.0]], [[2.0]]]> : tensor<2x1x1xf32>
  %sd = colossal.constant dense<[[[2.0]], [[4.0]]]> : tensor<2x1x1xf32>
  %gamma = colossal.constant dense<[[[2.0]], [[3.0]]]> : tensor<2x1x1xf32>
  %beta = colossal.constant dense<[[[0.5]], [[1.0]]]> : tensor<2x1x1xf32>
  %0 = colossal.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x3x3xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  %1 = colossal.sub %0, %mean : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %2 = colossal.div %1, %sd : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %3 = colossal.mul %2, %gamma : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %4 = colossal.add %3, %beta : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %5 = colossal.relu %4 : tensor<1x2x3x3xf32>
  return %5 : tensor<1x2x3x3xf32>
}

// -----

// HardSwish as Paddle exports it, x · clip(x + 3, 0, 6) / 6 (Clip imported as max then min), on a
// depthwise conv whose weights are a parameter with its value: the conv keeps its weights, only
// the activation moves.
// CHECK-LABEL: func.func @conv_hard_swish
// CHECK-SAME: (%[[X:.*]]: tensor<1x4x5x5xf32>, %[[W:.*]]: tensor<4x1x3x3xf32>
// CHECK-NEXT: %[[Y:.*]] = colossal.conv %[[X]], %[[W]] {activation = "hard_swish", dilations = array<i64: 1, 1>, group = 4 : i64
// CHECK-NEXT: return %[[Y]]
func.func @conv_hard_swish(%x: tensor<1x4x5x5xf32>, %w: tensor<4x1x3x3xf32> {colossal.param = "w"}) -> tensor<1x4x5x5xf32> {
  %three = colossal.constant dense<3.0> : tensor<f32>
  %zero = colossal.constant dense<0.0> : tensor<f32>
  %six = colossal.constant dense<6.0> : tensor<f32>
  %0 = colossal.conv %x, %w {dilations = array<i64: 1, 1>, group = 4 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x4x5x5xf32>, tensor<4x1x3x3xf32>) -> tensor<1x4x5x5xf32>
  %1 = colossal.add %0, %three : (tensor<1x4x5x5xf32>, tensor<f32>) -> tensor<1x4x5x5xf32>
  %2 = colossal.max %1, %zero : (tensor<1x4x5x5xf32>, tensor<f32>) -> tensor<1x4x5x5xf32>
  %3 = colossal.min %2, %six : (tensor<1x4x5x5xf32>, tensor<f32>) -> tensor<1x4x5x5xf32>
  %4 = colossal.mul %0, %3 : (tensor<1x4x5x5xf32>, tensor<1x4x5x5xf32>) -> tensor<1x4x5x5xf32>
  %5 = colossal.div %4, %six : (tensor<1x4x5x5xf32>, tensor<f32>) -> tensor<1x4x5x5xf32>
  return %5 : tensor<1x4x5x5xf32>
}

// -----

// ReLU6 as Clip(0, 6), and HardSigmoid (the squeeze-excitation gate) after a 1×1 conv with bias.
// CHECK-LABEL: func.func @conv_relu6_and_hard_sigmoid
// CHECK:      colossal.conv %{{.*}} {activation = "clip", activation_alpha = 0.000000e+00 : f32, activation_beta = 6.000000e+00 : f32
// CHECK:      colossal.conv %{{.*}} {activation = "hard_sigmoid", activation_alpha = 2.000000e-01 : f32, activation_beta = 5.000000e-01 : f32
// CHECK-NOT:  colossal.unary
// CHECK-NOT:  colossal.min
func.func @conv_relu6_and_hard_sigmoid(%x: tensor<1x2x1x1xf32>, %w: tensor<2x2x1x1xf32>, %b: tensor<2xf32>) -> (tensor<1x2x1x1xf32>, tensor<1x2x1x1xf32>) {
  %zero = colossal.constant dense<0.0> : tensor<f32>
  %six = colossal.constant dense<6.0> : tensor<f32>
  %0 = colossal.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x1x1xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x1x1xf32>
  %1 = colossal.max %0, %zero : (tensor<1x2x1x1xf32>, tensor<f32>) -> tensor<1x2x1x1xf32>
  %2 = colossal.min %1, %six : (tensor<1x2x1x1xf32>, tensor<f32>) -> tensor<1x2x1x1xf32>
  %3 = colossal.conv %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x1x1xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x1x1xf32>
  %4 = colossal.unary "hard_sigmoid" %3 {alpha = 2.000000e-01 : f32, beta = 5.000000e-01 : f32} : tensor<1x2x1x1xf32> -> tensor<1x2x1x1xf32>
  return %2, %4 : tensor<1x2x1x1xf32>, tensor<1x2x1x1xf32>
}

// -----

// Nothing folds when the conv result has another user (here: returned as well), when the
// constant varies along a spatial dim, or when the weights are not known at compile time.
// CHECK-LABEL: func.func @not_fused
// CHECK:      %[[C0:.*]] = colossal.conv %{{.*}} {dilations
// CHECK:      colossal.relu %[[C0]]
// CHECK:      %[[C1:.*]] = colossal.conv %{{.*}} {dilations
// CHECK:      colossal.mul %[[C1]]
// CHECK:      %[[C2:.*]] = colossal.conv %{{.*}} {dilations
// CHECK:      colossal.add %[[C2]]
func.func @not_fused(%x: tensor<1x2x3x3xf32>, %w: tensor<2x2x1x1xf32>) -> (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) {
  %wc = colossal.constant dense<1.0> : tensor<2x2x1x1xf32>
  %row = colossal.constant dense<[[1.0], [2.0], [3.0]]> : tensor<3x1xf32>
  %shift = colossal.constant dense<[[[1.0]], [[2.0]]]> : tensor<2x1x1xf32>
  %0 = colossal.conv %x, %wc {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %1 = colossal.relu %0 : tensor<1x2x3x3xf32>
  %2 = colossal.conv %x, %wc {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %3 = colossal.mul %2, %row : (tensor<1x2x3x3xf32>, tensor<3x1xf32>) -> tensor<1x2x3x3xf32>
  %4 = colossal.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %5 = colossal.add %4, %shift : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  return %0, %1, %3, %5 : tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>
}

// -----

// PP-LCNetV3's learnable affine block after the activation, 2·hard_swish(y) + 0.5 with [1]
// constants, stays in the epilogue as output_scale and output_shift.
// CHECK-LABEL: func.func @conv_hard_swish_affine
// CHECK-NEXT: %[[Y:.*]] = colossal.conv %{{.*}} {activation = "hard_swish", dilations = array<i64: 1, 1>, group = 1 : i64, output_scale = 2.000000e+00 : f32, output_shift = 5.000000e-01 : f32
// CHECK-NEXT: return %[[Y]]
func.func @conv_hard_swish_affine(%x: tensor<1x2x3x3xf32>, %w: tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32> {
  %scale = colossal.constant dense<2.0> : tensor<1xf32>
  %shift = colossal.constant dense<0.5> : tensor<1xf32>
  %0 = colossal.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %1 = colossal.unary "hard_swish" %0 : tensor<1x2x3x3xf32> -> tensor<1x2x3x3xf32>
  %2 = colossal.mul %scale, %1 : (tensor<1xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %3 = colossal.add %2, %shift : (tensor<1x2x3x3xf32>, tensor<1xf32>) -> tensor<1x2x3x3xf32>
  return %3 : tensor<1x2x3x3xf32>
}

// -----

// torch's x · relu6(x + 3) / 6: relu6 exported as Relu then Clip, and batch-norm statistics that
// are parameters (√(var + ε) computed from them); both fold.
// CHECK-LABEL: func.func @torch_bn_hard_swish
// CHECK-NOT:  colossal.sub
// CHECK:      %[[Y:.*]] = colossal.conv %{{.*}} {activation = "hard_swish"
// CHECK-NEXT: return %[[Y]]
func.func @torch_bn_hard_swish(%x: tensor<1x2x3x3xf32>, %w: tensor<2x2x1x1xf32> {colossal.param = "w", colossal.value = dense<1.0> : tensor<2x2x1x1xf32>}, %var: tensor<2xf32> {colossal.param = "var", colossal.value = dense<[1.0, 3.0]> : tensor<2xf32>}, %mean: tensor<2xf32> {colossal.param = "mean", colossal.value = dense<[0.5, -0.5]> : tensor<2xf32>}) -> tensor<1x2x3x3xf32> {
  %eps = colossal.constant dense<1.0e-5> : tensor<f32>
  %three = colossal.constant dense<3.0> : tensor<f32>
  %zero = colossal.constant dense<0.0> : tensor<f32>
  %six = colossal.constant dense<6.0> : tensor<f32>
  %0 = colossal.conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %m = colossal.reshape %mean : tensor<2xf32> -> tensor<2x1x1xf32>
  %v = colossal.reshape %var : tensor<2xf32> -> tensor<2x1x1xf32>
  %1 = colossal.sub %0, %m : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %ve = colossal.add %v, %eps : (tensor<2x1x1xf32>, tensor<f32>) -> tensor<2x1x1xf32>
  %sd = colossal.sqrt %ve : tensor<2x1x1xf32>
  %2 = colossal.div %1, %sd : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
  %3 = colossal.add %2, %three : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %4 = colossal.relu %3 : tensor<1x2x3x3xf32>
  %5 = colossal.max %4, %zero : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %6 = colossal.min %5, %six : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %7 = colossal.mul %2, %6 : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %8 = colossal.div %7, %six : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  return %8 : tensor<1x2x3x3xf32>
}

// -----

// DBNet's head: ConvTranspose, batch norm, ReLU. The scale of output channel m lands in
// w[:, m] (conv_transpose weights are [C, M/group, K...]): s = [2, 4] gives w' = [[2, 4]].
// CHECK-LABEL: func.func @conv_transpose_bn_relu
// CHECK-DAG:  %[[W:.*]] = colossal.constant dense<{{\[\[\[\[}}2.000000e+00]], {{\[\[}}4.000000e+00]]]]> : tensor<1x2x1x1xf32>
// CHECK:      colossal.conv_transpose %{{.*}}, %[[W]], %{{.*}} {activation = "relu"
// CHECK-NEXT: return
func.func @conv_transpose_bn_relu(%x: tensor<1x1x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %w = colossal.constant dense<1.0> : tensor<1x2x1x1xf32>
  %s = colossal.constant dense<[[[2.0]], [[4.0]]]> : tensor<2x1x1xf32>
  %0 = colossal.conv_transpose %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 0, 0>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x1x2x2xf32>, tensor<1x2x1x1xf32>) -> tensor<1x2x2x2xf32>
  %1 = colossal.mul %0, %s : (tensor<1x2x2x2xf32>, tensor<2x1x1xf32>) -> tensor<1x2x2x2xf32>
  %2 = colossal.relu %1 : tensor<1x2x2x2xf32>
  return %2 : tensor<1x2x2x2xf32>
}

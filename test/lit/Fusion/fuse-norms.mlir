// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-fuse-norms))' | FileCheck %s

// LayerNorm as torch.onnx exports nn.LayerNorm below opset 17: mean, centre, biased variance,
// divide by sqrt(var + eps), then weight and bias.
// CHECK-LABEL: func.func @layer_norm_weight_bias
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK:      %[[Y:.*]] = colossal.layer_norm %[[X]], %[[W]], %[[B]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK-SAME:   : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
// CHECK-NOT:  colossal.reduce_mean
// CHECK:      return %[[Y]]
func.func @layer_norm_weight_bias(%x: tensor<2x8x16xf32>, %w: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<2x8x16xf32> {
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-5> : tensor<f32>
  %m = colossal.reduce_mean %x {axes = array<i64: 2>, keepdims = true} : (tensor<2x8x16xf32>) -> tensor<2x8x1xf32>
  %d = colossal.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %p = colossal.pow %d, %two : (tensor<2x8x16xf32>, tensor<f32>) -> tensor<2x8x16xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 2>, keepdims = true} : (tensor<2x8x16xf32>) -> tensor<2x8x1xf32>
  %ve = colossal.add %v, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = colossal.sqrt %ve : tensor<2x8x1xf32>
  %n = colossal.div %d, %s : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %y = colossal.mul %n, %w : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %z = colossal.add %y, %b : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return %z : tensor<2x8x16xf32>
}

// -----

// Normalizing over the two trailing dims; the division is a multiplication by the reciprocal,
// the square a Mul, and operands of commutative ops come in the other order. No bias.
// CHECK-LABEL: func.func @layer_norm_two_axes_reciprocal
// CHECK-SAME: (%[[X:.*]]: tensor<4x8x16xf32>, %[[W:.*]]: tensor<8x16xf32>)
// CHECK:      %[[Y:.*]] = colossal.layer_norm %[[X]], %[[W]] {axis = 1 : i64, epsilon = 9.99999996E-13 : f32}
// CHECK-SAME:   : (tensor<4x8x16xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @layer_norm_two_axes_reciprocal(%x: tensor<4x8x16xf32>, %w: tensor<8x16xf32>) -> tensor<4x8x16xf32> {
  %eps = colossal.constant dense<1.0e-12> : tensor<1xf32>
  %m = colossal.reduce_mean %x {axes = array<i64: 1, 2>, keepdims = true} : (tensor<4x8x16xf32>) -> tensor<4x1x1xf32>
  %d = colossal.sub %x, %m : (tensor<4x8x16xf32>, tensor<4x1x1xf32>) -> tensor<4x8x16xf32>
  %p = colossal.mul %d, %d : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 1, 2>, keepdims = true} : (tensor<4x8x16xf32>) -> tensor<4x1x1xf32>
  %ve = colossal.add %eps, %v : (tensor<1xf32>, tensor<4x1x1xf32>) -> tensor<4x1x1xf32>
  %s = colossal.sqrt %ve : tensor<4x1x1xf32>
  %r = colossal.reciprocal %s : tensor<4x1x1xf32>
  %n = colossal.mul %r, %d : (tensor<4x1x1xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %y = colossal.mul %w, %n : (tensor<8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %y : tensor<4x8x16xf32>
}

// -----

// Without a weight (elementwise_affine=False) the scale is a constant of ones.
// CHECK-LABEL: func.func @layer_norm_no_affine
// CHECK-SAME: (%[[X:.*]]: tensor<3x16xf32>)
// CHECK:      %[[ONES:.*]] = colossal.constant dense<1.000000e+00> : tensor<16xf32>
// CHECK:      %[[Y:.*]] = colossal.layer_norm %[[X]], %[[ONES]] {axis = 1 : i64
// CHECK-NEXT: return %[[Y]]
func.func @layer_norm_no_affine(%x: tensor<3x16xf32>) -> tensor<3x16xf32> {
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-5> : tensor<f32>
  %m = colossal.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : (tensor<3x16xf32>) -> tensor<3x1xf32>
  %d = colossal.sub %x, %m : (tensor<3x16xf32>, tensor<3x1xf32>) -> tensor<3x16xf32>
  %p = colossal.pow %d, %two : (tensor<3x16xf32>, tensor<f32>) -> tensor<3x16xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<3x16xf32>) -> tensor<3x1xf32>
  %ve = colossal.add %v, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s = colossal.sqrt %ve : tensor<3x1xf32>
  %n = colossal.div %d, %s : (tensor<3x16xf32>, tensor<3x1xf32>) -> tensor<3x16xf32>
  return %n : tensor<3x16xf32>
}

// -----

// A weight of shape [1, 1, C] broadcasts like one of shape [C]: it is reshaped to the normalized
// shape.
// CHECK-LABEL: func.func @layer_norm_weight_leading_ones
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<1x1x16xf32>)
// CHECK:      %[[W2:.*]] = colossal.reshape %[[W]] : tensor<1x1x16xf32> -> tensor<16xf32>
// CHECK:      colossal.layer_norm %[[X]], %[[W2]] {axis = 2 : i64
func.func @layer_norm_weight_leading_ones(%x: tensor<2x8x16xf32>, %w: tensor<1x1x16xf32>) -> tensor<2x8x16xf32> {
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-5> : tensor<f32>
  %m = colossal.reduce_mean %x {axes = array<i64: 2>, keepdims = true} : (tensor<2x8x16xf32>) -> tensor<2x8x1xf32>
  %d = colossal.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %p = colossal.pow %d, %two : (tensor<2x8x16xf32>, tensor<f32>) -> tensor<2x8x16xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 2>, keepdims = true} : (tensor<2x8x16xf32>) -> tensor<2x8x1xf32>
  %ve = colossal.add %v, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %s = colossal.sqrt %ve : tensor<2x8x1xf32>
  %n = colossal.div %d, %s : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %y = colossal.mul %n, %w : (tensor<2x8x16xf32>, tensor<1x1x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// RMSNorm as Llama exports it: x * Reciprocal(Sqrt(mean(x^2) + eps)), then weight * that.
// CHECK-LABEL: func.func @rms_norm_llama
// CHECK-SAME: (%[[X:.*]]: tensor<1x5x32xf32>, %[[W:.*]]: tensor<32xf32>)
// CHECK:      %[[Y:.*]] = colossal.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32}
// CHECK-SAME:   : (tensor<1x5x32xf32>, tensor<32xf32>) -> tensor<1x5x32xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_llama(%x: tensor<1x5x32xf32>, %w: tensor<32xf32>) -> tensor<1x5x32xf32> {
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-6> : tensor<f32>
  %p = colossal.pow %x, %two : (tensor<1x5x32xf32>, tensor<f32>) -> tensor<1x5x32xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 2>, keepdims = true} : (tensor<1x5x32xf32>) -> tensor<1x5x1xf32>
  %ve = colossal.add %v, %eps : (tensor<1x5x1xf32>, tensor<f32>) -> tensor<1x5x1xf32>
  %s = colossal.sqrt %ve : tensor<1x5x1xf32>
  %r = colossal.reciprocal %s : tensor<1x5x1xf32>
  %n = colossal.mul %x, %r : (tensor<1x5x32xf32>, tensor<1x5x1xf32>) -> tensor<1x5x32xf32>
  %y = colossal.mul %w, %n : (tensor<32xf32>, tensor<1x5x32xf32>) -> tensor<1x5x32xf32>
  return %y : tensor<1x5x32xf32>
}

// -----

// rsqrt exported as Div(1, Sqrt(.)).
// CHECK-LABEL: func.func @rms_norm_div_one
// CHECK:      colossal.rms_norm %{{.*}}, %{{.*}} {axis = 1 : i64
// CHECK-NOT:  colossal.sqrt
func.func @rms_norm_div_one(%x: tensor<5x32xf32>, %w: tensor<32xf32>) -> tensor<5x32xf32> {
  %one = colossal.constant dense<1.0> : tensor<f32>
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-6> : tensor<f32>
  %p = colossal.pow %x, %two : (tensor<5x32xf32>, tensor<f32>) -> tensor<5x32xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<5x32xf32>) -> tensor<5x1xf32>
  %ve = colossal.add %v, %eps : (tensor<5x1xf32>, tensor<f32>) -> tensor<5x1xf32>
  %s = colossal.sqrt %ve : tensor<5x1xf32>
  %r = colossal.div %one, %s : (tensor<f32>, tensor<5x1xf32>) -> tensor<5x1xf32>
  %n = colossal.mul %r, %x : (tensor<5x1xf32>, tensor<5x32xf32>) -> tensor<5x32xf32>
  %y = colossal.mul %n, %w : (tensor<5x32xf32>, tensor<32xf32>) -> tensor<5x32xf32>
  return %y : tensor<5x32xf32>
}

// -----

// x / Sqrt(mean(x^2) + eps) with no weight: ones scale.
// CHECK-LABEL: func.func @rms_norm_div_no_weight
// CHECK:      %[[ONES:.*]] = colossal.constant dense<1.000000e+00> : tensor<32xf32>
// CHECK:      colossal.rms_norm %{{.*}}, %[[ONES]] {axis = 1 : i64
func.func @rms_norm_div_no_weight(%x: tensor<5x32xf32>) -> tensor<5x32xf32> {
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-6> : tensor<f32>
  %p = colossal.pow %x, %two : (tensor<5x32xf32>, tensor<f32>) -> tensor<5x32xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<5x32xf32>) -> tensor<5x1xf32>
  %ve = colossal.add %v, %eps : (tensor<5x1xf32>, tensor<f32>) -> tensor<5x1xf32>
  %s = colossal.sqrt %ve : tensor<5x1xf32>
  %n = colossal.div %x, %s : (tensor<5x32xf32>, tensor<5x1xf32>) -> tensor<5x32xf32>
  return %n : tensor<5x32xf32>
}

// -----

// NOT fused: the exponent is 3, so this is not a mean square.
// CHECK-LABEL: func.func @no_fuse_wrong_exponent
// CHECK-NOT:  colossal.rms_norm
// CHECK:      colossal.pow
func.func @no_fuse_wrong_exponent(%x: tensor<5x32xf32>) -> tensor<5x32xf32> {
  %three = colossal.constant dense<3.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-6> : tensor<f32>
  %p = colossal.pow %x, %three : (tensor<5x32xf32>, tensor<f32>) -> tensor<5x32xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<5x32xf32>) -> tensor<5x1xf32>
  %ve = colossal.add %v, %eps : (tensor<5x1xf32>, tensor<f32>) -> tensor<5x1xf32>
  %s = colossal.sqrt %ve : tensor<5x1xf32>
  %n = colossal.div %x, %s : (tensor<5x32xf32>, tensor<5x1xf32>) -> tensor<5x32xf32>
  return %n : tensor<5x32xf32>
}

// -----

// NOT fused: the variance reduces axis 1 of [B, T, C], which is not the trailing dim.
// CHECK-LABEL: func.func @no_fuse_non_trailing_axis
// CHECK-NOT:  colossal.layer_norm
// CHECK-NOT:  colossal.rms_norm
// CHECK:      return
func.func @no_fuse_non_trailing_axis(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-5> : tensor<f32>
  %m = colossal.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : (tensor<2x8x16xf32>) -> tensor<2x1x16xf32>
  %d = colossal.sub %x, %m : (tensor<2x8x16xf32>, tensor<2x1x16xf32>) -> tensor<2x8x16xf32>
  %p = colossal.pow %d, %two : (tensor<2x8x16xf32>, tensor<f32>) -> tensor<2x8x16xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<2x8x16xf32>) -> tensor<2x1x16xf32>
  %ve = colossal.add %v, %eps : (tensor<2x1x16xf32>, tensor<f32>) -> tensor<2x1x16xf32>
  %s = colossal.sqrt %ve : tensor<2x1x16xf32>
  %n = colossal.div %d, %s : (tensor<2x8x16xf32>, tensor<2x1x16xf32>) -> tensor<2x8x16xf32>
  return %n : tensor<2x8x16xf32>
}

// -----

// NOT fused: eps is a runtime value, not a scalar constant.
// CHECK-LABEL: func.func @no_fuse_eps_not_constant
// CHECK-NOT:  colossal.rms_norm
// CHECK:      colossal.sqrt
func.func @no_fuse_eps_not_constant(%x: tensor<5x32xf32>, %eps: tensor<f32>) -> tensor<5x32xf32> {
  %two = colossal.constant dense<2.0> : tensor<f32>
  %p = colossal.pow %x, %two : (tensor<5x32xf32>, tensor<f32>) -> tensor<5x32xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<5x32xf32>) -> tensor<5x1xf32>
  %ve = colossal.add %v, %eps : (tensor<5x1xf32>, tensor<f32>) -> tensor<5x1xf32>
  %s = colossal.sqrt %ve : tensor<5x1xf32>
  %n = colossal.div %x, %s : (tensor<5x32xf32>, tensor<5x1xf32>) -> tensor<5x32xf32>
  return %n : tensor<5x32xf32>
}

// -----

// The normalization fuses, but the following Mul is by a [T, C] tensor, not of the normalized
// shape [C]: it stays a Mul of the fused result.
// CHECK-LABEL: func.func @weight_of_other_shape_stays
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xf32>, %[[W:.*]]: tensor<8x16xf32>)
// CHECK:      %[[ONES:.*]] = colossal.constant dense<1.000000e+00> : tensor<16xf32>
// CHECK:      %[[N:.*]] = colossal.layer_norm %[[X]], %[[ONES]] {axis = 1 : i64
// CHECK:      colossal.mul %[[N]], %[[W]]
func.func @weight_of_other_shape_stays(%x: tensor<8x16xf32>, %w: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-5> : tensor<f32>
  %m = colossal.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
  %d = colossal.sub %x, %m : (tensor<8x16xf32>, tensor<8x1xf32>) -> tensor<8x16xf32>
  %p = colossal.pow %d, %two : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
  %v = colossal.reduce_mean %p {axes = array<i64: 1>, keepdims = true} : (tensor<8x16xf32>) -> tensor<8x1xf32>
  %ve = colossal.add %v, %eps : (tensor<8x1xf32>, tensor<f32>) -> tensor<8x1xf32>
  %s = colossal.sqrt %ve : tensor<8x1xf32>
  %n = colossal.div %d, %s : (tensor<8x16xf32>, tensor<8x1xf32>) -> tensor<8x16xf32>
  %y = colossal.mul %n, %w : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

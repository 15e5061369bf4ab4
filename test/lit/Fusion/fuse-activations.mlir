// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-fuse-activations))' | FileCheck %s

// GELU, erf form (`approximate = "none"`, the default, which the printer leaves out), in the order torch.onnx exports nn.GELU():
// Div(x, √2) -> Erf -> Add 1 -> Mul x -> Mul 0.5.
// CHECK-LABEL: func.func @gelu_erf_torch
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = colossal.gelu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gelu_erf_torch(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = colossal.constant dense<1.41421354> : tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %0 = colossal.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = colossal.erf %0 : tensor<2x8xf32>
  %2 = colossal.add %1, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = colossal.mul %x, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = colossal.mul %3, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// -----

// The same function written as (0.5 * x) * (1 + erf(x * (1/√2))).
// CHECK-LABEL: func.func @gelu_erf_other_order
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: colossal.gelu %[[X]] : tensor<4xf32>
func.func @gelu_erf_other_order(%x: tensor<4xf32>) -> tensor<4xf32> {
  %rsqrt2 = colossal.constant dense<0.707106769> : tensor<1xf32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %h = colossal.mul %half, %x : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %0 = colossal.mul %rsqrt2, %x : (tensor<1xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = colossal.erf %0 : tensor<4xf32>
  %2 = colossal.add %one, %1 : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = colossal.mul %h, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %3 : tensor<4xf32>
}

// -----

// GELU, tanh form, as torch.onnx exports nn.GELU(approximate="tanh"): x³ as x * (x * x).
// CHECK-LABEL: func.func @gelu_tanh_torch
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = colossal.gelu %[[X]] {approximate = "tanh"} : tensor<2x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gelu_tanh_torch(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %beta = colossal.constant dense<0.797884583> : tensor<f32>
  %kappa = colossal.constant dense<4.471500e-02> : tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %xx = colossal.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %x3 = colossal.mul %x, %xx : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %k = colossal.mul %kappa, %x3 : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = colossal.add %x, %k : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %in = colossal.mul %beta, %s : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = colossal.tanh %in : tensor<2x8xf32>
  %b = colossal.add %one, %t : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %xb = colossal.mul %x, %b : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %y = colossal.mul %half, %xb : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// GELU, tanh form, as GPT-2 / HF NewGELUActivation writes it: Pow(x, 3), (0.5 * x) * (...).
// CHECK-LABEL: func.func @gelu_tanh_pow
// CHECK-NEXT: colossal.gelu %{{.*}} {approximate = "tanh"}
// CHECK-NOT:  colossal.tanh
func.func @gelu_tanh_pow(%x: tensor<1x3x16xf32>) -> tensor<1x3x16xf32> {
  %three = colossal.constant dense<3.0> : tensor<f32>
  %beta = colossal.constant dense<0.797884583> : tensor<f32>
  %kappa = colossal.constant dense<4.471500e-02> : tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %h = colossal.mul %x, %half : (tensor<1x3x16xf32>, tensor<f32>) -> tensor<1x3x16xf32>
  %x3 = colossal.pow %x, %three : (tensor<1x3x16xf32>, tensor<f32>) -> tensor<1x3x16xf32>
  %k = colossal.mul %x3, %kappa : (tensor<1x3x16xf32>, tensor<f32>) -> tensor<1x3x16xf32>
  %s = colossal.add %k, %x : (tensor<1x3x16xf32>, tensor<1x3x16xf32>) -> tensor<1x3x16xf32>
  %in = colossal.mul %s, %beta : (tensor<1x3x16xf32>, tensor<f32>) -> tensor<1x3x16xf32>
  %t = colossal.tanh %in : tensor<1x3x16xf32>
  %b = colossal.add %t, %one : (tensor<1x3x16xf32>, tensor<f32>) -> tensor<1x3x16xf32>
  %y = colossal.mul %h, %b : (tensor<1x3x16xf32>, tensor<1x3x16xf32>) -> tensor<1x3x16xf32>
  return %y : tensor<1x3x16xf32>
}

// -----

// SiLU (Llama's MLP activation), both operand orders.
// CHECK-LABEL: func.func @silu
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[A:.*]] = colossal.silu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: %[[B:.*]] = colossal.silu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: colossal.add %[[A]], %[[B]]
func.func @silu(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = colossal.sigmoid %x : tensor<2x8xf32>
  %a = colossal.mul %x, %s : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %b = colossal.mul %s, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %c = colossal.add %a, %b : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %c : tensor<2x8xf32>
}

// -----

// NOT fused: x / 2 is not x / √2 (the constant is off by far more than the tolerance).
// CHECK-LABEL: func.func @no_fuse_erf_wrong_constant
// CHECK-NOT:  colossal.gelu
// CHECK:      colossal.erf
func.func @no_fuse_erf_wrong_constant(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = colossal.constant dense<2.0> : tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %0 = colossal.div %x, %c : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = colossal.erf %0 : tensor<4xf32>
  %2 = colossal.add %1, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = colossal.mul %x, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = colossal.mul %3, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// NOT fused: √2 rounded to 1.4142 differs from it by 1e-5 relative, more than the 1e-6 allowed.
// CHECK-LABEL: func.func @no_fuse_erf_imprecise_constant
// CHECK-NOT:  colossal.gelu
func.func @no_fuse_erf_imprecise_constant(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = colossal.constant dense<1.4142> : tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %0 = colossal.div %x, %c : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = colossal.erf %0 : tensor<4xf32>
  %2 = colossal.add %1, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = colossal.mul %x, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = colossal.mul %3, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// NOT fused: the outer factor is y, not the x inside erf.
// CHECK-LABEL: func.func @no_fuse_gelu_different_inputs
// CHECK-NOT:  colossal.gelu
func.func @no_fuse_gelu_different_inputs(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %c = colossal.constant dense<1.41421354> : tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %0 = colossal.div %x, %c : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = colossal.erf %0 : tensor<4xf32>
  %2 = colossal.add %1, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = colossal.mul %y, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = colossal.mul %3, %half : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// NOT fused: x^2 where the tanh form needs x^3.
// CHECK-LABEL: func.func @no_fuse_tanh_wrong_power
// CHECK-NOT:  colossal.gelu
// CHECK:      colossal.tanh
func.func @no_fuse_tanh_wrong_power(%x: tensor<4xf32>) -> tensor<4xf32> {
  %p = colossal.constant dense<2.0> : tensor<f32>
  %beta = colossal.constant dense<0.797884583> : tensor<f32>
  %kappa = colossal.constant dense<4.471500e-02> : tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %x3 = colossal.pow %x, %p : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %k = colossal.mul %kappa, %x3 : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %s = colossal.add %x, %k : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %in = colossal.mul %beta, %s : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %t = colossal.tanh %in : tensor<4xf32>
  %b = colossal.add %one, %t : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  %xb = colossal.mul %x, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %y = colossal.mul %half, %xb : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// NOT fused: x * sigmoid(y) is a gate (SwiGLU-like), not SiLU.
// CHECK-LABEL: func.func @no_fuse_sigmoid_gate
// CHECK-NOT:  colossal.silu
// CHECK:      colossal.mul
func.func @no_fuse_sigmoid_gate(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %s = colossal.sigmoid %y : tensor<4xf32>
  %a = colossal.mul %x, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}

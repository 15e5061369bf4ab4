// RUN: colossal-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// A contraction of bf16 operands may have a bf16 result (the VJPs' products) or an f32 one (summed
// in f32, colossal-auto-mixed-precision's form); nothing else changes type.

// CHECK-LABEL: func.func @mixed
// CHECK: colossal.matmul {{.*}} -> tensor<2x4xf32>
// CHECK: colossal.matmul {{.*}} -> tensor<2x4xbf16>
// CHECK: colossal.gemm {{.*}} -> tensor<2x4xf32>
func.func @mixed(%a: tensor<2x3xbf16>, %b: tensor<3x4xbf16>, %c: tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2x4xbf16>, tensor<2x4xf32>) {
  %0 = colossal.matmul %a, %b : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xf32>
  %1 = colossal.matmul %a, %b : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xbf16>
  %2 = colossal.gemm %a, %b, %c {alpha = 1.0 : f32, beta = 1.0 : f32, trans_a = false, trans_b = false} : (tensor<2x3xbf16>, tensor<3x4xbf16>, tensor<4xf32>) -> tensor<2x4xf32>
  return %0, %1, %2 : tensor<2x4xf32>, tensor<2x4xbf16>, tensor<2x4xf32>
}

// -----

func.func @f32_to_bf16(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xbf16> {
  // expected-error @+2 {{inferred type(s) 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<2x4xbf16>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = colossal.matmul %a, %b : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xbf16>
  return %0 : tensor<2x4xbf16>
}

// -----

func.func @operands_differ(%a: tensor<2x3xbf16>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+2 {{operand element types differ}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = colossal.matmul %a, %b : (tensor<2x3xbf16>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @bf16_to_f64(%a: tensor<2x3xbf16>, %b: tensor<3x4xbf16>) -> tensor<2x4xf64> {
  // expected-error @+2 {{inferred type(s) 'tensor<2x4xbf16>' are incompatible with return type(s) of operation 'tensor<2x4xf64>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = colossal.matmul %a, %b : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xf64>
  return %0 : tensor<2x4xf64>
}

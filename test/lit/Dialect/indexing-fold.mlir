// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(canonicalize))' | FileCheck %s

// Folders of the indexing family: reductions, arg-reductions, cumsum and gather_elements of
// constants become constants.

// CHECK-LABEL: func.func @reduce_kinds
// CHECK-DAG: colossal.constant dense<[2, 12]> : tensor<2xi64>
// CHECK-DAG: colossal.constant dense<[5.000000e+00, 2.500000e+01]> : tensor<2xf32>
// CHECK-NOT: colossal.reduce
func.func @reduce_kinds() -> (tensor<2xi64>, tensor<2xf32>) {
  %i = colossal.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  %f = colossal.constant dense<[[3.0, 4.0], [-7.0, 24.0]]> : tensor<2x2xf32>
  %0 = colossal.reduce %i {axes = array<i64: 1>, keepdims = false, kind = "prod"} : (tensor<2x2xi64>) -> tensor<2xi64>
  %1 = colossal.reduce %f {axes = array<i64: 1>, keepdims = false, kind = "l2"} : (tensor<2x2xf32>) -> tensor<2xf32>
  return %0, %1 : tensor<2xi64>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @argmax_last
// CHECK-NEXT: colossal.constant dense<[2, 0]> : tensor<2xi64>
func.func @argmax_last() -> tensor<2xi64> {
  %x = colossal.constant dense<[[1.0, 5.0, 5.0], [9.0, 2.0, 3.0]]> : tensor<2x3xf32>
  %0 = colossal.argmax %x {axis = 1 : i64, keepdims = false, select_last_index = true} : (tensor<2x3xf32>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// CHECK-LABEL: func.func @cumsum_exclusive_reverse
// CHECK-NEXT: colossal.constant dense<[5, 3, 0]> : tensor<3xi64>
func.func @cumsum_exclusive_reverse() -> tensor<3xi64> {
  %x = colossal.constant dense<[1, 2, 3]> : tensor<3xi64>
  %0 = colossal.cumsum %x {axis = 0 : i64, exclusive = true, reverse = true} : tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

// CHECK-LABEL: func.func @gather_elements
// CHECK-NEXT: colossal.constant dense<{{\[}}[2, 1], [3, 4]]> : tensor<2x2xi64>
func.func @gather_elements() -> tensor<2x2xi64> {
  %x = colossal.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  %i = colossal.constant dense<[[1, 0], [0, -1]]> : tensor<2x2xi64>
  %0 = colossal.gather_elements %x, %i {axis = 1 : i64} : (tensor<2x2xi64>, tensor<2x2xi64>) -> tensor<2x2xi64>
  return %0 : tensor<2x2xi64>
}

// RUN: colossal-opt %s -split-input-file | FileCheck %s
// RUN: colossal-opt %s -split-input-file --mlir-print-op-generic | colossal-opt -split-input-file | FileCheck %s
// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(canonicalize))' | FileCheck %s --check-prefix=FOLD

// colossal.unary and colossal.binary: `fn` names a row of ElementwiseFns.h; predicates and
// comparisons yield i1; parameters travel as alpha/beta. With constant operands they fold with
// the same formulas as the CPU kernels.

// CHECK-LABEL: func.func @unary
// CHECK: colossal.unary "cos" %arg0 : tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK: colossal.unary "elu" %arg0 {alpha = 5.000000e-01 : f32} : tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK: colossal.unary "is_nan" %arg0 : tensor<2x3xf32> -> tensor<2x3xi1>
// CHECK: colossal.unary "bitwise_not" %arg1 : tensor<4xi8> -> tensor<4xi8>
func.func @unary(%x: tensor<2x3xf32>, %i: tensor<4xi8>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>, tensor<4xi8>) {
  %0 = colossal.unary "cos" %x : tensor<2x3xf32> -> tensor<2x3xf32>
  %1 = colossal.unary "elu" %x {alpha = 0.5 : f32} : tensor<2x3xf32> -> tensor<2x3xf32>
  %2 = colossal.unary "is_nan" %x : tensor<2x3xf32> -> tensor<2x3xi1>
  %3 = colossal.unary "bitwise_not" %i : tensor<4xi8> -> tensor<4xi8>
  return %0, %1, %2, %3 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi1>, tensor<4xi8>
}

// -----

// CHECK-LABEL: func.func @binary
// CHECK: colossal.binary "mod" %arg0, %arg1 : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
// CHECK: colossal.binary "greater_equal" %arg0, %arg1 : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi1>
func.func @binary(%a: tensor<2x3xi32>, %b: tensor<3xi32>) -> (tensor<2x3xi32>, tensor<2x3xi1>) {
  %0 = colossal.binary "mod" %a, %b : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
  %1 = colossal.binary "greater_equal" %a, %b : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi1>
  return %0, %1 : tensor<2x3xi32>, tensor<2x3xi1>
}

// -----

// Python modulo takes the divisor's sign; fmod the dividend's; floor and round (halves to even).
// FOLD-LABEL: func.func @fold
// FOLD-DAG: colossal.constant dense<[2, -2, 1]> : tensor<3xi64>
// FOLD-DAG: colossal.constant dense<[-1, 1, 1]> : tensor<3xi64>
// FOLD-DAG: colossal.constant dense<[2.000000e+00, -2.000000e+00, 0.000000e+00]> : tensor<3xf32>
// FOLD-DAG: colossal.constant dense<[true, false, false]> : tensor<3xi1>
// FOLD-NOT: colossal.unary
// FOLD-NOT: colossal.binary
func.func @fold() -> (tensor<3xi64>, tensor<3xi64>, tensor<3xf32>, tensor<3xi1>) {
  %a = colossal.constant dense<[-4, 7, 5]> : tensor<3xi64>
  %b = colossal.constant dense<[3, -3, 2]> : tensor<3xi64>
  %x = colossal.constant dense<[2.5, -1.5, 0.5]> : tensor<3xf32>
  %0 = colossal.binary "mod" %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %1 = colossal.binary "fmod" %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %2 = colossal.unary "round" %x : tensor<3xf32> -> tensor<3xf32>
  %3 = colossal.binary "less_equal" %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
  return %0, %1, %2, %3 : tensor<3xi64>, tensor<3xi64>, tensor<3xf32>, tensor<3xi1>
}

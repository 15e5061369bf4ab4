// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(canonicalize))' | FileCheck %s

// Folders of the indexing family: reductions, arg-reductions, cumsum, gather_elements, gather_nd
// and scatter_nd of constants become constants.

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

// -----

// gather_nd: full index tuples, row slices (a negative index counts from the end), and one
// batch dim.
// CHECK-LABEL: func.func @gather_nd
// CHECK-DAG: colossal.constant dense<[2, 3]> : tensor<2xi64>
// CHECK-DAG: colossal.constant dense<{{\[}}[3, 4], [1, 2]]> : tensor<2x2xi64>
// CHECK-DAG: colossal.constant dense<[1, 4]> : tensor<2xi64>
// CHECK-NOT: colossal.gather_nd
func.func @gather_nd() -> (tensor<2xi64>, tensor<2x2xi64>, tensor<2xi64>) {
  %x = colossal.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  %pairs = colossal.constant dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>
  %rows = colossal.constant dense<[[-1], [0]]> : tensor<2x1xi64>
  %cols = colossal.constant dense<[[0], [1]]> : tensor<2x1xi64>
  %0 = colossal.gather_nd %x, %pairs {batch_dims = 0 : i64} : (tensor<2x2xi64>, tensor<2x2xi64>) -> tensor<2xi64>
  %1 = colossal.gather_nd %x, %rows {batch_dims = 0 : i64} : (tensor<2x2xi64>, tensor<2x1xi64>) -> tensor<2x2xi64>
  %2 = colossal.gather_nd %x, %cols {batch_dims = 1 : i64} : (tensor<2x2xi64>, tensor<2x1xi64>) -> tensor<2xi64>
  return %0, %1, %2 : tensor<2xi64>, tensor<2x2xi64>, tensor<2xi64>
}

// -----

// scatter_nd: torch's `shape[i] = n` on a shape vector (reduction none), and row updates added
// in index order (both into row 0).
// CHECK-LABEL: func.func @scatter_nd
// CHECK-DAG: colossal.constant dense<[1, 9, 3, 7]> : tensor<4xi64>
// CHECK-DAG: colossal.constant dense<{{\[}}[5.000000e+00, 7.000000e+00], [1.000000e+00, 1.000000e+00]]> : tensor<2x2xf32>
// CHECK-NOT: colossal.scatter_nd
func.func @scatter_nd() -> (tensor<4xi64>, tensor<2x2xf32>) {
  %shape = colossal.constant dense<[1, 2, 3, 4]> : tensor<4xi64>
  %at = colossal.constant dense<[[1], [-1]]> : tensor<2x1xi64>
  %vals = colossal.constant dense<[9, 7]> : tensor<2xi64>
  %0 = colossal.scatter_nd %shape, %at, %vals {reduction = "none"} : (tensor<4xi64>, tensor<2x1xi64>, tensor<2xi64>) -> tensor<4xi64>
  %ones = colossal.constant dense<1.0> : tensor<2x2xf32>
  %row0 = colossal.constant dense<[[0], [0]]> : tensor<2x1xi64>
  %upd = colossal.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %1 = colossal.scatter_nd %ones, %row0, %upd {reduction = "add"} : (tensor<2x2xf32>, tensor<2x1xi64>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %0, %1 : tensor<4xi64>, tensor<2x2xf32>
}

// -----

// Out-of-range indices are left to the runtime, which reports them with the instruction.
// CHECK-LABEL: func.func @gather_nd_out_of_range
// CHECK: colossal.gather_nd
func.func @gather_nd_out_of_range() -> tensor<1xi64> {
  %x = colossal.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  %i = colossal.constant dense<[[2, 0]]> : tensor<1x2xi64>
  %0 = colossal.gather_nd %x, %i {batch_dims = 0 : i64} : (tensor<2x2xi64>, tensor<1x2xi64>) -> tensor<1xi64>
  return %0 : tensor<1xi64>
}

// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(canonicalize))' | FileCheck %s

// canonicalize runs the folders of the colossal dialect: everything an imported model computes
// from constants (its shape arithmetic above all) becomes a constant once the spec binds the
// input shapes.

// Gather of a constant shape vector picks one dimension (ONNX Shape -> Gather).
// CHECK-LABEL: func.func @gather_shape_dim
// CHECK-NEXT: %[[C:.*]] = colossal.constant dense<8> : tensor<i64>
// CHECK-NEXT: return %[[C]]
func.func @gather_shape_dim() -> tensor<i64> {
  %shape = colossal.constant dense<[2, 8, 64]> : tensor<3xi64>
  %i = colossal.constant dense<1> : tensor<i64>
  %0 = colossal.gather %shape, %i {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  return %0 : tensor<i64>
}

// -----

// Negative indices count from the end.
// CHECK-LABEL: func.func @gather_negative_index
// CHECK-NEXT: colossal.constant dense<[64, 2]> : tensor<2xi64>
func.func @gather_negative_index() -> tensor<2xi64> {
  %shape = colossal.constant dense<[2, 8, 64]> : tensor<3xi64>
  %i = colossal.constant dense<[-1, 0]> : tensor<2xi64>
  %0 = colossal.gather %shape, %i {axis = 0 : i64} : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// An out-of-range index does not fold: the runtime reports it with the location.
// CHECK-LABEL: func.func @gather_out_of_range
// CHECK: colossal.gather
func.func @gather_out_of_range() -> tensor<i64> {
  %shape = colossal.constant dense<[2, 8, 64]> : tensor<3xi64>
  %i = colossal.constant dense<3> : tensor<i64>
  %0 = colossal.gather %shape, %i {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  return %0 : tensor<i64>
}

// -----

// The shape arithmetic of a head split, [B, T, C] -> [B, T, H, D]: Gather, Unsqueeze (a reshape)
// and Concat fold into one shape constant.
// CHECK-LABEL: func.func @head_split_shape
// CHECK-NEXT: %[[C:.*]] = colossal.constant dense<[2, 8, 4, 16]> : tensor<4xi64>
// CHECK-NEXT: return %[[C]]
func.func @head_split_shape() -> tensor<4xi64> {
  %shape = colossal.constant dense<[2, 8, 64]> : tensor<3xi64>
  %i0 = colossal.constant dense<0> : tensor<i64>
  %i1 = colossal.constant dense<1> : tensor<i64>
  %b = colossal.gather %shape, %i0 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %t = colossal.gather %shape, %i1 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %b1 = colossal.reshape %b : tensor<i64> -> tensor<1xi64>
  %t1 = colossal.reshape %t : tensor<i64> -> tensor<1xi64>
  %hd = colossal.constant dense<[4, 16]> : tensor<2xi64>
  %0 = colossal.concat %b1, %t1, %hd {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<2xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

// Slice with a negative step walks backwards.
// CHECK-LABEL: func.func @slice_constant
// CHECK-NEXT: colossal.constant dense<[14, 11]> : tensor<2xi64>
func.func @slice_constant() -> tensor<2xi64> {
  %c = colossal.constant dense<[10, 11, 12, 13, 14]> : tensor<5xi64>
  %0 = colossal.slice %c {starts = array<i64: 4>, limits = array<i64: 0>, steps = array<i64: -3>} : (tensor<5xi64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// Cast float -> int truncates toward zero; -> i1 is x != 0.
// CHECK-LABEL: func.func @cast_constant
// CHECK-DAG: colossal.constant dense<[-1, 0, 2]> : tensor<3xi64>
// CHECK-DAG: colossal.constant dense<[true, false, true]> : tensor<3xi1>
// CHECK-NOT: colossal.cast
func.func @cast_constant() -> (tensor<3xi64>, tensor<3xi1>) {
  %c = colossal.constant dense<[-1.5, 0.0, 2.7]> : tensor<3xf32>
  %0 = colossal.cast %c : tensor<3xf32> -> tensor<3xi64>
  %1 = colossal.cast %c : tensor<3xf32> -> tensor<3xi1>
  return %0, %1 : tensor<3xi64>, tensor<3xi1>
}

// -----

// Equal and Where on constants: torch's "replace -1 by 1" in Expand/Reshape shape operands.
// CHECK-LABEL: func.func @equal_where
// CHECK-NEXT: %[[C:.*]] = colossal.constant dense<[1, 1, 3]> : tensor<3xi64>
// CHECK-NEXT: return %[[C]]
func.func @equal_where() -> tensor<3xi64> {
  %a = colossal.constant dense<[1, -1, 3]> : tensor<3xi64>
  %m = colossal.constant dense<-1> : tensor<i64>
  %one = colossal.constant dense<1> : tensor<i64>
  %e = colossal.equal %a, %m : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  %0 = colossal.where %e, %one, %a : (tensor<3xi1>, tensor<i64>, tensor<3xi64>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

// Expand of a splat stays a splat; other constants are broadcast element by element.
// CHECK-LABEL: func.func @expand_constant
// CHECK-DAG: colossal.constant dense<1.000000e+00> : tensor<2x3xf32>
// CHECK-DAG: colossal.constant dense<{{\[}}[1, 1, 1], [2, 2, 2]]> : tensor<2x3xi64>
// CHECK-NOT: colossal.expand
func.func @expand_constant() -> (tensor<2x3xf32>, tensor<2x3xi64>) {
  %s = colossal.constant dense<1.0> : tensor<1xf32>
  %c = colossal.constant dense<[[1], [2]]> : tensor<2x1xi64>
  %0 = colossal.expand %s : tensor<1xf32> -> tensor<2x3xf32>
  %1 = colossal.expand %c : tensor<2x1xi64> -> tensor<2x3xi64>
  return %0, %1 : tensor<2x3xf32>, tensor<2x3xi64>
}

// -----

// A causal mask built at export time (Trilu of ones, Equal 0, Where -inf) folds to the additive
// constant that colossal-fuse-attention recognises as causal.
// CHECK-LABEL: func.func @causal_mask_chain
// CHECK-NEXT: colossal.constant dense<{{\[}}[0.000000e+00, 0xFF800000, 0xFF800000], [0.000000e+00, 0.000000e+00, 0xFF800000], [0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32>
// CHECK-NOT: colossal.trilu
func.func @causal_mask_chain() -> tensor<3x3xf32> {
  %ones = colossal.constant dense<1.0> : tensor<3x3xf32>
  %zero = colossal.constant dense<0.0> : tensor<f32>
  %ninf = colossal.constant dense<0xFF800000> : tensor<f32>
  %tril = colossal.trilu %ones {upper = false, k = 0 : i64} : tensor<3x3xf32>
  %hidden = colossal.equal %tril, %zero : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xi1>
  %0 = colossal.where %hidden, %ninf, %zero : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// Ops that do not change their operand fold to it: identity transpose, cast to the same type,
// reshape to the same shape, full slice, expand to the same shape, concat of one input.
// CHECK-LABEL: func.func @identities
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]], %[[X]] :
func.func @identities(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = colossal.transpose %x {perm = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = colossal.cast %x : tensor<2x3xf32> -> tensor<2x3xf32>
  %2 = colossal.reshape %x : tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = colossal.slice %x {starts = array<i64: 0, 0>, limits = array<i64: 2, 3>, steps = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = colossal.expand %x : tensor<2x3xf32> -> tensor<2x3xf32>
  %5 = colossal.concat %x {axis = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// Reshape of a reshape reads the original tensor.
// CHECK-LABEL: func.func @reshape_of_reshape
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[R:.*]] = colossal.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<24xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_of_reshape(%x: tensor<2x3x4xf32>) -> tensor<24xf32> {
  %0 = colossal.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %1 = colossal.reshape %0 : tensor<6x4xf32> -> tensor<24xf32>
  return %1 : tensor<24xf32>
}

// -----

// Reshape of a constant is the constant with the new shape.
// CHECK-LABEL: func.func @reshape_constant
// CHECK-NEXT: colossal.constant dense<{{\[}}[1, 2], [3, 4]]> : tensor<2x2xi64>
func.func @reshape_constant() -> tensor<2x2xi64> {
  %c = colossal.constant dense<[1, 2, 3, 4]> : tensor<4xi64>
  %0 = colossal.reshape %c : tensor<4xi64> -> tensor<2x2xi64>
  return %0 : tensor<2x2xi64>
}

// -----

// Integer division by zero does not fold: the runtime reports it.
// CHECK-LABEL: func.func @int_div_by_zero
// CHECK: colossal.div
func.func @int_div_by_zero() -> tensor<2xi64> {
  %a = colossal.constant dense<[6, 7]> : tensor<2xi64>
  %b = colossal.constant dense<[0, 2]> : tensor<2xi64>
  %0 = colossal.div %a, %b : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// Integer division truncates toward zero (ONNX Div): -7 / 2 = -3.
// CHECK-LABEL: func.func @int_arith
// CHECK-NEXT: colossal.constant dense<[-6, 6]> : tensor<2xi64>
func.func @int_arith() -> tensor<2xi64> {
  %a = colossal.constant dense<[-7, 7]> : tensor<2xi64>
  %b = colossal.constant dense<2> : tensor<i64>
  %0 = colossal.div %a, %b : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %1 = colossal.mul %0, %b : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  return %1 : tensor<2xi64>
}

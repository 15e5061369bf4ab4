// RUN: colossal-opt %s | FileCheck %s
// RUN: colossal-opt %s --mlir-print-op-generic | colossal-opt | FileCheck %s

// Every op of the indexing family (ColossalIndexingOps.td) parses, verifies and prints back.

// CHECK-LABEL: func.func @reductions
// CHECK: colossal.reduce %{{.*}} {axes = array<i64: 1>, keepdims = false, kind = "log_sum_exp"} : (tensor<3x4xf64>) -> tensor<3xf64>
// CHECK: colossal.argmax %{{.*}} {axis = 0 : i64, keepdims = true, select_last_index = false} : (tensor<3x4xf64>) -> tensor<1x4xi64>
// CHECK: colossal.argmin %{{.*}} {axis = 1 : i64, keepdims = false, select_last_index = true} : (tensor<3x4xf64>) -> tensor<3xi64>
// CHECK: colossal.cumsum %{{.*}} {axis = 1 : i64, exclusive = true, reverse = false} : tensor<3x4xf64>
func.func @reductions(%x: tensor<3x4xf64>) -> (tensor<3xf64>, tensor<1x4xi64>, tensor<3xi64>, tensor<3x4xf64>) {
  %0 = colossal.reduce %x {axes = array<i64: 1>, keepdims = false, kind = "log_sum_exp"} : (tensor<3x4xf64>) -> tensor<3xf64>
  %1 = colossal.argmax %x {axis = 0 : i64, keepdims = true, select_last_index = false} : (tensor<3x4xf64>) -> tensor<1x4xi64>
  %2 = colossal.argmin %x {axis = 1 : i64, keepdims = false, select_last_index = true} : (tensor<3x4xf64>) -> tensor<3xi64>
  %3 = colossal.cumsum %x {axis = 1 : i64, exclusive = true, reverse = false} : tensor<3x4xf64>
  return %0, %1, %2, %3 : tensor<3xf64>, tensor<1x4xi64>, tensor<3xi64>, tensor<3x4xf64>
}

// CHECK-LABEL: func.func @gathers_scatters
// CHECK: colossal.gather_elements %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<3x4xf32>, tensor<3x2xi64>) -> tensor<3x2xf32>
// CHECK: colossal.gather_nd %{{.*}}, %{{.*}} {batch_dims = 0 : i64} : (tensor<3x4xf32>, tensor<3x2xi64>) -> tensor<3xf32>
// CHECK: colossal.scatter_elements %{{.*}} {axis = 1 : i64, reduction = "add"} : (tensor<3x4xf32>, tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x4xf32>
// CHECK: colossal.scatter_nd %{{.*}} {reduction = "none"} : (tensor<3x4xf32>, tensor<3x2xi64>, tensor<3xf32>) -> tensor<3x4xf32>
func.func @gathers_scatters(%x: tensor<3x4xf32>, %i: tensor<3x2xi64>, %u: tensor<3x2xf32>, %v: tensor<3xf32>)
    -> (tensor<3x2xf32>, tensor<3xf32>, tensor<3x4xf32>, tensor<3x4xf32>) {
  %0 = colossal.gather_elements %x, %i {axis = 1 : i64} : (tensor<3x4xf32>, tensor<3x2xi64>) -> tensor<3x2xf32>
  %1 = colossal.gather_nd %x, %i {batch_dims = 0 : i64} : (tensor<3x4xf32>, tensor<3x2xi64>) -> tensor<3xf32>
  %2 = colossal.scatter_elements %x, %i, %u {axis = 1 : i64, reduction = "add"} : (tensor<3x4xf32>, tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x4xf32>
  %3 = colossal.scatter_nd %x, %i, %v {reduction = "none"} : (tensor<3x4xf32>, tensor<3x2xi64>, tensor<3xf32>) -> tensor<3x4xf32>
  return %0, %1, %2, %3 : tensor<3x2xf32>, tensor<3xf32>, tensor<3x4xf32>, tensor<3x4xf32>
}

// CHECK-LABEL: func.func @one_hot_topk_pad
// CHECK: colossal.one_hot %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<3xi64>, tensor<2xf32>) -> tensor<3x5xf32>
// CHECK: colossal.topk %{{.*}} {axis = 1 : i64, largest = true, sorted = true} : tensor<3x4xf32> -> tensor<3x2xf32>, tensor<3x2xi64>
// CHECK: colossal.pad %{{.*}}, %{{.*}} {mode = "constant", pads = array<i64: 0, 1, 0, 2>} : (tensor<3x4xf32>, tensor<f32>) -> tensor<3x7xf32>
// CHECK: colossal.pad %{{.*}} {mode = "reflect", pads = array<i64: 1, 0, 1, 0>} : (tensor<3x4xf32>) -> tensor<5x4xf32>
func.func @one_hot_topk_pad(%i: tensor<3xi64>, %vals: tensor<2xf32>, %x: tensor<3x4xf32>, %c: tensor<f32>)
    -> (tensor<3x5xf32>, tensor<3x2xf32>, tensor<3x2xi64>, tensor<3x7xf32>, tensor<5x4xf32>) {
  %0 = colossal.one_hot %i, %vals {axis = 1 : i64} : (tensor<3xi64>, tensor<2xf32>) -> tensor<3x5xf32>
  %1:2 = colossal.topk %x {axis = 1 : i64, largest = true, sorted = true} : tensor<3x4xf32> -> tensor<3x2xf32>, tensor<3x2xi64>
  %2 = colossal.pad %x, %c {mode = "constant", pads = array<i64: 0, 1, 0, 2>} : (tensor<3x4xf32>, tensor<f32>) -> tensor<3x7xf32>
  %3 = colossal.pad %x {mode = "reflect", pads = array<i64: 1, 0, 1, 0>} : (tensor<3x4xf32>) -> tensor<5x4xf32>
  return %0, %1#0, %1#1, %2, %3 : tensor<3x5xf32>, tensor<3x2xf32>, tensor<3x2xi64>, tensor<3x7xf32>, tensor<5x4xf32>
}

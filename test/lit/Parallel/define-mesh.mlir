// colossal-define-mesh: the module's device mesh, its axes in rank-layout order with their roles.
// Running it again with the same axes leaves the one mesh; the dialect verifies every mesh.
// RUN: colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data,tp=4:tensor})' | FileCheck %s
// RUN: colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data,tp=4:tensor}, colossal-define-mesh{axes=dp=2:data,tp=4:tensor})' | FileCheck %s --check-prefix=TWICE

// CHECK: colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 4] roles = ["data", "tensor"]
// CHECK-NEXT: func.func @forward
// TWICE: colossal.mesh @mesh
// TWICE-NOT: colossal.mesh
func.func @forward(%x: tensor<4xf32> {colossal.input = "x"}) -> (tensor<4xf32> {colossal.output = "y"}) {
  return %x : tensor<4xf32>
}

// #colossal.sharding parses and prints back (ColossalAttrs.td): per dim the mesh axes it is split
// over ({} = whole), block counts (/3), and the partial axes; on arguments and on ops.
// RUN: colossal-opt %s | FileCheck %s
// RUN: colossal-opt %s | colossal-opt | FileCheck %s

// CHECK: colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]

// CHECK-LABEL: func.func @forward
// CHECK-SAME: colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}/3]>
// CHECK-SAME: colossal.sharding = #colossal.sharding<@mesh, [{"dp", "tp"}]>
func.func @forward(%w: tensor<4x6xf32> {colossal.param = "w", colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}/3]>},
                   %b: tensor<2xf32> {colossal.param = "b", colossal.sharding = #colossal.sharding<@mesh, [{"dp", "tp"}]>}) -> tensor<4x6xf32> {
  // CHECK: colossal.sharding = #colossal.sharding<@mesh, [{}, {}], partial = {"tp"}>
  %0 = colossal.neg %w {colossal.sharding = #colossal.sharding<@mesh, [{}, {}], partial = {"tp"}>} : tensor<4x6xf32>
  // CHECK: colossal.sharding = [#colossal.sharding<@mesh, [{}, {"tp"}]>, #colossal.sharding<@mesh, [{}, {"tp"}]>]
  %1:2 = colossal.split %0 {axis = 1 : i64, colossal.sharding = [#colossal.sharding<@mesh, [{}, {"tp"}]>, #colossal.sharding<@mesh, [{}, {"tp"}]>]} : tensor<4x6xf32> -> tensor<4x2xf32>, tensor<4x4xf32>
  return %0 : tensor<4x6xf32>
}

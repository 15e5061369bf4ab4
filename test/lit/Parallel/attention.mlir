// A Llama-style attention block with grouped-query attention (4 query heads, 2 key/value heads,
// head dim 8) under tp=2: q/k/v projections column-parallel, heads split (each rank keeps 2 query
// heads and their 1 key/value head), out-projection row-parallel with one all_reduce. At tp=4
// the 2 key/value heads cannot be split and the compiler says so, naming the size.
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{stage=propagate})' | FileCheck %s --check-prefix=PROPAGATE
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition)' | FileCheck %s --check-prefix=PARTITION
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=4:tensor}, colossal-spmd-partition)' 2>&1 | FileCheck %s --check-prefix=TP4

module {
  func.func @forward(%x: tensor<2x8x32xf32> {colossal.input = "x"},
                     %wq: tensor<32x32xf32> {colossal.param = "wq"},
                     %wk: tensor<32x16xf32> {colossal.param = "wk"},
                     %wv: tensor<32x16xf32> {colossal.param = "wv"},
                     %wo: tensor<32x32xf32> {colossal.param = "wo"},
                     %g: tensor<32xf32> {colossal.param = "norm.weight"}) -> tensor<2x8x32xf32> {
    %n = colossal.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-5 : f32} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %q = colossal.matmul %n, %wq : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %k = colossal.matmul %n, %wk : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    %v = colossal.matmul %n, %wv : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    %q4 = colossal.reshape %q : tensor<2x8x32xf32> -> tensor<2x8x4x8xf32>
    %k4 = colossal.reshape %k : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %v4 = colossal.reshape %v : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %qt = colossal.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
    %kt = colossal.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %vt = colossal.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %a = colossal.attention %qt, %kt, %vt {causal = true, scale = 0.35355339 : f32} : (tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
    %at = colossal.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x8xf32>) -> tensor<2x8x4x8xf32>
    %a2 = colossal.reshape %at : tensor<2x8x4x8xf32> -> tensor<2x8x32xf32>
    %o = colossal.matmul %a2, %wo : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %r = colossal.add %x, %o : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    return %r : tensor<2x8x32xf32>
  }
}

// PROPAGATE: colossal.rms_norm {{.*}}colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {}]>
// PROPAGATE: colossal.matmul %{{.*}}, %arg1 {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {"tp"}]>}
// PROPAGATE: colossal.matmul %{{.*}}, %arg2 {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {"tp"}]>}
// PROPAGATE: colossal.reshape {{.*}}colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {"tp"}, {}]>
// PROPAGATE: colossal.attention {{.*}}colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}, {}, {}]>
// PROPAGATE: colossal.matmul %{{.*}}, %arg4 {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {}], partial = {"tp"}>}
// PROPAGATE: colossal.add %arg0, %{{.*}} {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {}]>}

// PARTITION: colossal.matmul %{{.*}}, %arg1 : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
// PARTITION: colossal.matmul %{{.*}}, %arg2 : (tensor<2x8x32xf32>, tensor<32x8xf32>) -> tensor<2x8x8xf32>
// PARTITION: colossal.attention {{.*}} : (tensor<2x2x8x8xf32>, tensor<2x1x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x2x8x8xf32>
// PARTITION: %[[O:.*]] = colossal.matmul %{{.*}}, %arg4 : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
// PARTITION-NEXT: %[[R:.*]] = colossal.all_reduce %[[O]] {axes = ["tp"]}
// PARTITION-NEXT: colossal.add %arg0, %[[R]]
// PARTITION-NOT: colossal.all_

// TP4: error: tensor parallelism over tp=4 cannot split the reshape [2x8x16] -> [2x8x2x8]: dim 2 of the result has size 2, not divisible by 4

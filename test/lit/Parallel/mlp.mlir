// A Megatron MLP block (Shoeybi et al. 2019, Fig. 3a) under tensor parallelism over tp=2, shown
// after each step of colossal-spmd-partition: the strategy (which parameters are split), the
// propagation (the sharding of every value; "partial(tp)" = a sum still to be reduced) and the
// per-rank program (local shapes and collectives). Sequence parallelism turns the all_reduce
// into reduce_scatter + all_gather along the sequence.
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{stage=strategy})' | FileCheck %s --check-prefix=STRATEGY
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{stage=propagate})' | FileCheck %s --check-prefix=PROPAGATE
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition)' | FileCheck %s --check-prefix=PARTITION
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{sequence-parallel=true})' | FileCheck %s --check-prefix=SP
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data,tp=2:tensor}, colossal-spmd-partition{hints="fc1\.weight=-/-"})' | FileCheck %s --check-prefix=HINT

module {
  func.func @forward(%x: tensor<4x8x16xf32> {colossal.input = "x"},
                     %w1: tensor<16x64xf32> {colossal.param = "fc1.weight"},
                     %b1: tensor<64xf32> {colossal.param = "fc1.bias"},
                     %w2: tensor<64x16xf32> {colossal.param = "fc2.weight"},
                     %b2: tensor<16xf32> {colossal.param = "fc2.bias"}) -> tensor<4x8x16xf32> {
    %h = colossal.matmul %x, %w1 : (tensor<4x8x16xf32>, tensor<16x64xf32>) -> tensor<4x8x64xf32>
    %hb = colossal.add %h, %b1 : (tensor<4x8x64xf32>, tensor<64xf32>) -> tensor<4x8x64xf32>
    %g = colossal.gelu %hb {approximate = "tanh"} : tensor<4x8x64xf32>
    %y = colossal.matmul %g, %w2 : (tensor<4x8x64xf32>, tensor<64x16xf32>) -> tensor<4x8x16xf32>
    %yb = colossal.add %y, %b2 : (tensor<4x8x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
    %r = colossal.add %x, %yb : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
    return %r : tensor<4x8x16xf32>
  }
}

// Column-parallel fc1 (and its bias), row-parallel fc2, fc2's bias whole.
// STRATEGY: colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
// STRATEGY: %arg1: tensor<16x64xf32> {colossal.param = "fc1.weight", colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}]>}
// STRATEGY-SAME: %arg2: tensor<64xf32> {colossal.param = "fc1.bias", colossal.sharding = #colossal.sharding<@mesh, [{"tp"}]>}
// STRATEGY-SAME: %arg3: tensor<64x16xf32> {colossal.param = "fc2.weight", colossal.sharding = #colossal.sharding<@mesh, [{"tp"}, {}]>}
// STRATEGY-SAME: %arg4: tensor<16xf32> {colossal.param = "fc2.bias", colossal.sharding = #colossal.sharding<@mesh, [{}]>}
// STRATEGY: colossal.matmul %arg0, %arg1 : (tensor<4x8x16xf32>, tensor<16x64xf32>)

// PROPAGATE: colossal.matmul %arg0, %arg1 {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {"tp"}]>}
// PROPAGATE: colossal.add %{{.*}}, %arg2 {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {"tp"}]>}
// PROPAGATE: colossal.gelu %{{.*}} {approximate = "tanh", colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {"tp"}]>}
// PROPAGATE: colossal.matmul %{{.*}}, %arg3 {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {}], partial = {"tp"}>}
// PROPAGATE: colossal.add %{{.*}}, %arg4 {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {}]>}
// PROPAGATE: colossal.add %arg0, %{{.*}} {colossal.sharding = #colossal.sharding<@mesh, [{}, {}, {}]>}

// One all_reduce, after the row-parallel matmul and before its bias.
// PARTITION: func.func @forward(%arg0: tensor<4x8x16xf32> {colossal.input = "x"}, %arg1: tensor<16x32xf32> {colossal.param = "fc1.weight", colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}]>}, %arg2: tensor<32xf32> {colossal.param = "fc1.bias", colossal.sharding = #colossal.sharding<@mesh, [{"tp"}]>}, %arg3: tensor<32x16xf32> {colossal.param = "fc2.weight", colossal.sharding = #colossal.sharding<@mesh, [{"tp"}, {}]>}, %arg4: tensor<16xf32> {colossal.param = "fc2.bias"})
// PARTITION-NEXT: %[[H:.*]] = colossal.matmul %arg0, %arg1 : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
// PARTITION-NEXT: %[[HB:.*]] = colossal.add %[[H]], %arg2 : (tensor<4x8x32xf32>, tensor<32xf32>) -> tensor<4x8x32xf32>
// PARTITION-NEXT: %[[G:.*]] = colossal.gelu %[[HB]]
// PARTITION-NEXT: %[[Y:.*]] = colossal.matmul %[[G]], %arg3 : (tensor<4x8x32xf32>, tensor<32x16xf32>) -> tensor<4x8x16xf32>
// PARTITION-NEXT: %[[R:.*]] = colossal.all_reduce %[[Y]] {axes = ["tp"]} : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
// PARTITION-NEXT: colossal.add %[[R]], %arg4
// PARTITION-NOT: colossal.all_

// Sequence parallel: the partial sum is reduce-scattered along the sequence (dim 1), the
// residual input sliced to match, and the result gathered back whole at the function's end.
// SP: colossal.matmul %arg0, %arg1
// SP: %[[Y:.*]] = colossal.matmul
// SP-NEXT: %[[RS:.*]] = colossal.reduce_scatter %[[Y]] {axes = ["tp"], dim = 1 : i64} : tensor<4x8x16xf32> -> tensor<4x4x16xf32>
// SP-NEXT: %[[B:.*]] = colossal.add %[[RS]], %arg4 : (tensor<4x4x16xf32>, tensor<16xf32>) -> tensor<4x4x16xf32>
// SP-NEXT: %[[X:.*]] = colossal.shard_slice %arg0 {axes = ["tp"], dim = 1 : i64} : tensor<4x8x16xf32> -> tensor<4x4x16xf32>
// SP-NEXT: %[[S:.*]] = colossal.add %[[X]], %[[B]]
// SP-NEXT: colossal.all_gather %[[S]] {axes = ["tp"], dim = 1 : i64} : tensor<4x4x16xf32> -> tensor<4x8x16xf32>

// A hint keeps fc1 whole; fc2 then has a whole input and is column-parallel, gathered at the end.
// `dp` is on the mesh but never in a sharding.
// HINT: colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
// HINT: %arg1: tensor<16x64xf32> {colossal.param = "fc1.weight"}
// HINT-SAME: %arg3: tensor<64x8xf32> {colossal.param = "fc2.weight", colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}]>}
// HINT: colossal.all_gather %{{.*}} {axes = ["tp"], dim = 2 : i64} : tensor<4x8x8xf32> -> tensor<4x8x16xf32>

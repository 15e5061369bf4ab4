// colossal-zero (docs/parallelism.md "ZeRO"): w [4, 2] splits into dim-0 chunks over dp=2; b [3]
// does not divide and keeps plain data parallelism's all_reduce and full update. Stage 1 shards
// the optimizer state, stage 2 also the gradient accumulator (reduce_scatter in @train_step),
// stage 3 also the parameter (one all_gather per reading op).
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-zero{stage=1})' | FileCheck %s --check-prefix=S1
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-zero{stage=2})' | FileCheck %s --check-prefix=S2
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-zero{stage=3})' | FileCheck %s --check-prefix=S3
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-zero{stage=3},func.func(colossal-bucket-gradients))' | FileCheck %s --check-prefix=S3
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-zero{stage=0})' | FileCheck %s --check-prefix=S0
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-zero{stage=4})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: colossal-zero: stage must be 0, 1, 2 or 3, got 4

// S0-NOT: shard_view
// S0-NOT: reduce_scatter

// S1-LABEL: func.func @train_step
// S1-SAME: %arg3: tensor<4x2xf32> {colossal.state = "w.grad"}
// S1-NOT: reduce_scatter
// S1-LABEL: func.func @optimizer_step
// S1-SAME: %arg4: tensor<2x2xf32> {colossal.sharding = #colossal.sharding<@mesh, [{"dp"}, {}]>, colossal.state = "w.exp_avg"}
// S1-SAME: %arg6: tensor<3xf32> {colossal.state = "b.exp_avg"}
// S1-NEXT: colossal.reduce_scatter_in_place %arg2 {axes = ["dp"]} : tensor<4x2xf32>
// S1-NEXT: colossal.all_reduce_in_place %arg3 {axes = ["dp"]} : tensor<3xf32>
// S1-NEXT: %[[GV:.*]] = colossal.shard_view %arg2 {axes = ["dp"]} : tensor<4x2xf32> -> tensor<2x2xf32>
// S1-NEXT: %[[N1:.*]] = colossal.global_norm %[[GV]] : tensor<2x2xf32>
// S1-NEXT: %[[SQ1:.*]] = colossal.mul %[[N1]], %[[N1]]
// S1-NEXT: %[[SUM:.*]] = colossal.all_reduce %[[SQ1]] {axes = ["dp"]}
// S1-NEXT: %[[N2:.*]] = colossal.global_norm %arg3 : tensor<3xf32>
// S1-NEXT: %[[SQ2:.*]] = colossal.mul %[[N2]], %[[N2]]
// S1-NEXT: %[[T:.*]] = colossal.add %[[SQ2]], %[[SUM]]
// S1-NEXT: %[[NORM:.*]] = colossal.sqrt %[[T]]
// S1-NEXT: %[[PV:.*]] = colossal.shard_view %arg0 {axes = ["dp"]} : tensor<4x2xf32> -> tensor<2x2xf32>
// S1-NEXT: %[[GV2:.*]] = colossal.shard_view %arg2 {axes = ["dp"]} : tensor<4x2xf32> -> tensor<2x2xf32>
// S1-NEXT: colossal.adamw_update %[[PV]], %[[GV2]], %arg4, %arg5, %arg8, %arg9, %[[NORM]]
// S1-NEXT: colossal.adamw_update %arg1, %arg3, %arg6, %arg7, %arg8, %arg9, %[[NORM]]
// S1-NEXT: colossal.all_gather_in_place %arg0 {axes = ["dp"]} : tensor<4x2xf32>
// S1-NEXT: return %[[NORM]]

// S2-LABEL: func.func @train_step
// S2-SAME: %arg3: tensor<2x2xf32> {colossal.sharding = #colossal.sharding<@mesh, [{"dp"}, {}]>, colossal.state = "w.grad"}
// S2: %[[RS:.*]] = colossal.reduce_scatter %arg1 {axes = ["dp"], dim = 0 : i64} : tensor<4x2xf32> -> tensor<2x2xf32>
// S2-NEXT: colossal.accumulate_grad %arg3, %[[RS]] {scale = 5.000000e-01 : f64} : tensor<2x2xf32>, tensor<2x2xf32>
// S2-NEXT: colossal.accumulate_grad %arg4, %arg2
// S2-LABEL: func.func @optimizer_step
// S2-SAME: %arg0: tensor<4x2xf32> {colossal.param = "w"}
// S2-SAME: %arg2: tensor<2x2xf32> {colossal.sharding = #colossal.sharding<@mesh, [{"dp"}, {}]>, colossal.state = "w.grad"}
// S2-NEXT: colossal.all_reduce_in_place %arg3 {axes = ["dp"]} : tensor<3xf32>
// S2-NEXT: colossal.global_norm %arg2 : tensor<2x2xf32>
// S2: %[[PV:.*]] = colossal.shard_view %arg0 {axes = ["dp"]}
// S2-NEXT: colossal.adamw_update %[[PV]], %arg2, %arg4, %arg5
// S2-NEXT: colossal.adamw_update %arg1, %arg3, %arg6, %arg7
// S2-NEXT: colossal.all_gather_in_place %arg0 {axes = ["dp"]} : tensor<4x2xf32>

// S3-LABEL: func.func @train_step
// S3-SAME: %arg1: tensor<2x2xf32> {colossal.param = "w", colossal.sharding = #colossal.sharding<@mesh, [{"dp"}, {}]>}
// S3-SAME: %arg2: tensor<3xf32> {colossal.param = "b"}
// S3-NEXT: %[[G1:.*]] = colossal.all_gather %arg1 {axes = ["dp"], dim = 0 : i64} : tensor<2x2xf32> -> tensor<4x2xf32>
// S3-NEXT: %[[Y:.*]] = colossal.matmul %arg0, %[[G1]]
// S3-NEXT: %[[G2:.*]] = colossal.all_gather %arg1 {axes = ["dp"], dim = 0 : i64}
// S3-NEXT: colossal.matmul %arg0, %[[G2]]
// S3-NEXT: %[[G3:.*]] = colossal.all_gather %arg1
// S3-NEXT: %[[RS:.*]] = colossal.reduce_scatter %[[G3]] {axes = ["dp"], dim = 0 : i64}
// S3-NEXT: colossal.accumulate_grad %arg3, %[[RS]]
// S3-LABEL: func.func @optimizer_step
// S3-SAME: %arg0: tensor<2x2xf32> {colossal.param = "w", colossal.sharding = #colossal.sharding<@mesh, [{"dp"}, {}]>}
// S3-NOT: shard_view
// S3: colossal.adamw_update %arg0, %arg2, %arg4, %arg5
// S3-NEXT: colossal.adamw_update %arg1, %arg3, %arg6, %arg7
// S3-NOT: all_gather_in_place
// S3: return
colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @train_step(%x: tensor<2x4xf32> {colossal.input = "x"}, %w: tensor<4x2xf32> {colossal.param = "w"}, %b: tensor<3xf32> {colossal.param = "b"},
    %gw: tensor<4x2xf32> {colossal.state = "w.grad"}, %gb: tensor<3xf32> {colossal.state = "b.grad"}) -> (tensor<2x2xf32> {colossal.output = "y"}) attributes {colossal.program = "train_step"} {
  %y = colossal.matmul %x, %w : (tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<2x2xf32>
  %d = colossal.matmul %x, %w : (tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<2x2xf32>
  colossal.accumulate_grad %gw, %w {scale = 5.000000e-01 : f64} : tensor<4x2xf32>, tensor<4x2xf32>
  colossal.accumulate_grad %gb, %b {scale = 5.000000e-01 : f64} : tensor<3xf32>, tensor<3xf32>
  return %y : tensor<2x2xf32>
}
func.func @optimizer_step(%w: tensor<4x2xf32> {colossal.param = "w"}, %b: tensor<3xf32> {colossal.param = "b"},
    %gw: tensor<4x2xf32> {colossal.state = "w.grad"}, %gb: tensor<3xf32> {colossal.state = "b.grad"},
    %mw: tensor<4x2xf32> {colossal.state = "w.exp_avg"}, %vw: tensor<4x2xf32> {colossal.state = "w.exp_avg_sq"},
    %mb: tensor<3xf32> {colossal.state = "b.exp_avg"}, %vb: tensor<3xf32> {colossal.state = "b.exp_avg_sq"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) attributes {colossal.program = "optimizer_step"} {
  %n = colossal.global_norm %gw, %gb : tensor<4x2xf32>, tensor<3xf32>
  colossal.adamw_update %w, %gw, %mw, %vw, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, max_grad_norm = 1.0 : f64} : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  colossal.adamw_update %b, %gb, %mb, %vb, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, max_grad_norm = 1.0 : f64} : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}

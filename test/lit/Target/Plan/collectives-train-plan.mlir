// A train-mode per-rank module on mesh dp=2 x tp=2 (colossal.mesh): the partitioner's collectives
// and the data-parallel gradient sum over 'dp' only (colossal.all_reduce_in_place at the start of
// optimizer_step, as colossal-data-parallel writes it) lower one to one.
// Report, by hand: global batch 4 (@forward's tokens), train_step takes 1 row, so grad_accum = 4
// and train_step runs 4 / dp = 2 times per rank per optimizer step; optimizer_step once; eval and
// forward are not part of a step. Bytes = each call's input buffer:
//   forward    all_reduce over 'tp' of [4, 3, 2] f32 = 96 bytes (not in the step)
//   train_step all_reduce over 'tp' of [1, 3, 2] f32 = 24 bytes, all_gather over 'tp' of [2] f32 =
//              8 bytes; per step 2 x 24 = 48 bytes, 2 x 8 = 16 bytes
//   optimizer_step all_reduce over 'dp' of w.grad [2, 2] f32 = 16 bytes
//   total per step: 48 + 16 + 16 = 80 bytes.
// RUN: rm -rf %t && mkdir -p %t
// RUN: colossal-opt %s --emit=plan -o %t/m.cplan --report | FileCheck %s --check-prefix=REPORT
// RUN: protoc --decode=colossal.plan.Plan -I %src/runtime/plan %src/runtime/plan/plan.proto < %t/m.cplan | FileCheck %s

// REPORT:      mesh: dp=2 x tp=2 (per-rank figures
// REPORT-NEXT: axis roles: dp data, tp tensor
// REPORT-NEXT: ranks (coordinates, row-major over the axes in order, the last fastest):
// REPORT-NEXT:   rank 0: dp=0 tp=0
// REPORT-NEXT:   rank 1: dp=0 tp=1
// REPORT-NEXT:   rank 2: dp=1 tp=0
// REPORT-NEXT:   rank 3: dp=1 tp=1
// REPORT-NEXT: collectives per program call (bytes = each call's input buffer on one rank):
// REPORT-NEXT:   forward (not part of a step):
// REPORT-NEXT:     all_reduce over 'tp': 1 call, 96 bytes
// REPORT-NEXT:   eval (not part of a step): none
// REPORT-NEXT:   train_step (2 calls per step):
// REPORT-NEXT:     all_gather over 'tp': 1 call, 8 bytes
// REPORT-NEXT:     all_reduce over 'tp': 1 call, 24 bytes
// REPORT-NEXT:   optimizer_step (1 call per step):
// REPORT-NEXT:     all_reduce over 'dp': 1 call, 16 bytes
// REPORT-NEXT: communication per optimizer step (bytes of each rank's collective inputs):
// REPORT-NEXT:   all_gather over 'tp': 16 bytes in 2 collectives
// REPORT-NEXT:   all_reduce over 'dp': 16 bytes in 1 collectives
// REPORT-NEXT:   all_reduce over 'tp': 48 bytes in 2 collectives
// REPORT-NEXT:   total: 80 bytes
// REPORT-NEXT:   (plus the runtime's all_reduce of the step's loss over 'dp': 8 bytes)

// CHECK:      name: "train_step"
// CHECK:        op: "all_reduce"
// CHECK-NEXT:   inputs: {{[0-9]+}}
// CHECK-NEXT:   outputs: {{[0-9]+}}
// CHECK-NEXT:   attrs {
// CHECK-NEXT:     key: "axes"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "tp"
// CHECK:        op: "all_gather"
// CHECK:      name: "optimizer_step"
// CHECK:        id: [[GRAD:[0-9]+]]
// CHECK-NEXT:   name: "w.grad"
// The first instruction: the gradient reduced in place over 'dp' only.
// CHECK:      instructions {
// CHECK-NEXT:   op: "all_reduce"
// CHECK-NEXT:   inputs: [[GRAD]]
// CHECK-NEXT:   outputs: [[GRAD]]
// CHECK-NEXT:   attrs {
// CHECK-NEXT:     key: "axes"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "dp"
// CHECK:        op: "global_norm"
// CHECK-NOT:    op: "all_reduce"
// CHECK:      mesh {
// CHECK-NEXT:   name: "dp"
// CHECK-NEXT:   size: 2
// CHECK-NEXT:   role: DATA
// CHECK-NEXT: }
// CHECK-NEXT: mesh {
// CHECK-NEXT:   name: "tp"
// CHECK-NEXT:   size: 2
// CHECK-NEXT:   role: TENSOR
// CHECK-NEXT: }
// CHECK:        global_batch: 4
// CHECK-NEXT:   seq_len: 3
// CHECK-NEXT:   grad_accum: 4

module attributes {colossal.train = {tokens_input = "tokens", labels_input = "labels",
                                     logits_output = "logits", optimizer = "adamw",
                                     lr = 1.0e-2 : f64, lr_schedule = "constant"}} {
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
func.func @forward(%tok: tensor<4x3xi64> {colossal.input = "tokens"},
    %w: tensor<2x2xf32> {colossal.param = "w",
                         colossal.value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>})
    -> (tensor<4x3x2xf32> {colossal.output = "logits"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<4x3xi64>) -> tensor<4x3x2xf32>
  %y = colossal.all_reduce %e {axes = ["tp"]} : tensor<4x3x2xf32> -> tensor<4x3x2xf32>
  return %y : tensor<4x3x2xf32>
}
func.func @eval(%w: tensor<2x2xf32> {colossal.param = "w"},
    %tok: tensor<1x3xi64> {colossal.input = "tokens"}, %lab: tensor<1x3xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<1x3xi64>) -> tensor<1x3x2xf32>
  %l = colossal.reduce_mean %e {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<1x3x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
func.func @train_step(%w: tensor<2x2xf32> {colossal.param = "w"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"},
    %tok: tensor<1x3xi64> {colossal.input = "tokens"}, %lab: tensor<1x3xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}, tensor<4xf32> {colossal.output = "gathered"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<1x3xi64>) -> tensor<1x3x2xf32>
  %r = colossal.all_reduce %e {axes = ["tp"]} : tensor<1x3x2xf32> -> tensor<1x3x2xf32>
  %l = colossal.reduce_mean %r {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<1x3x2xf32>) -> tensor<f32>
  %c = colossal.reduce_mean %w {axes = array<i64: 0>, keepdims = false} : (tensor<2x2xf32>) -> tensor<2xf32>
  %g = colossal.all_gather %c {axes = ["tp"], dim = 0} : tensor<2xf32> -> tensor<4xf32>
  %d = colossal.exp %w : tensor<2x2xf32>
  colossal.accumulate_grad %gw, %d {scale = 0.25 : f64} : tensor<2x2xf32>, tensor<2x2xf32>
  return %l, %g : tensor<f32>, tensor<4xf32>
}
func.func @optimizer_step(%w: tensor<2x2xf32> {colossal.param = "w"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"},
    %m: tensor<2x2xf32> {colossal.state = "w.exp_avg"}, %v: tensor<2x2xf32> {colossal.state = "w.exp_avg_sq"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
  colossal.all_reduce_in_place %gw {axes = ["dp"]} : tensor<2x2xf32>
  %n = colossal.global_norm %gw : tensor<2x2xf32>
  colossal.adamw_update %w, %gw, %m, %v, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, max_grad_norm = 0.0 : f64} : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}
}

// The collectives of a per-rank program (dialects/Colossal/ColossalParallelOps.td) lower one to
// one onto plan instructions of the same name (docs/plan.md "Collective instructions"): `axes`
// joined with ",", in the listed order; `dim` and `reduction` as attributes. The plan's mesh is the
// module's colossal.mesh: names, sizes and roles, in that order.
// Report bytes, by hand (bytes = each call's input buffer, f32 = 4 bytes):
//   all_reduce over 'tp'     x [4, 6]          96 bytes
//   all_gather over 'tp,dp'  a [4, 6]          96 bytes   (output [4, 24])
//   reduce_scatter over 'dp' g [4, 24]        384 bytes   (output [2, 24])
//   shard_slice, axis_index: no communication, not counted; total 576 bytes.
// RUN: rm -rf %t && mkdir -p %t
// RUN: colossal-opt %s --emit=plan -o %t/m.cplan --report | FileCheck %s --check-prefix=REPORT
// RUN: protoc --decode=colossal.plan.Plan -I %src/runtime/plan %src/runtime/plan/plan.proto < %t/m.cplan | FileCheck %s

// REPORT:      mesh: dp=2 x tp=2 (per-rank figures
// REPORT-NEXT: axis roles: dp data, tp tensor
// REPORT:      collectives per program call (bytes = each call's input buffer on one rank):
// REPORT-NEXT:   forward (1 call per run):
// REPORT-NEXT:     all_gather over 'tp,dp': 1 call, 96 bytes
// REPORT-NEXT:     all_reduce over 'tp': 1 call, 96 bytes
// REPORT-NEXT:     reduce_scatter over 'dp': 1 call, 384 bytes
// REPORT-NEXT: communication per run (bytes of each rank's collective inputs):
// REPORT-NEXT:   all_gather over 'tp,dp': 96 bytes in 1 collectives
// REPORT-NEXT:   all_reduce over 'tp': 96 bytes in 1 collectives
// REPORT-NEXT:   reduce_scatter over 'dp': 384 bytes in 1 collectives
// REPORT-NEXT:   total: 576 bytes

// CHECK:        op: "all_reduce"
// CHECK-NEXT:   inputs: 0
// CHECK-NEXT:   outputs: [[A:[0-9]+]]
// CHECK-NEXT:   attrs {
// CHECK-NEXT:     key: "axes"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "tp"
// CHECK:          key: "reduction"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "max"
// CHECK:        op: "all_gather"
// CHECK-NEXT:   inputs: [[A]]
// CHECK-NEXT:   outputs: [[G:[0-9]+]]
// CHECK-NEXT:   attrs {
// CHECK-NEXT:     key: "axes"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "tp,dp"
// CHECK:          key: "dim"
// CHECK-NEXT:     value {
// CHECK-NEXT:       i: 1
// CHECK:        op: "reduce_scatter"
// CHECK-NEXT:   inputs: [[G]]
// CHECK-NEXT:   outputs: [[R:[0-9]+]]
// CHECK-NEXT:   attrs {
// CHECK-NEXT:     key: "axes"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "dp"
// CHECK:          key: "dim"
// CHECK-NEXT:     value {
// CHECK-NEXT:       i: 0
// The dialect's default reduction (sum) is written explicitly.
// CHECK:          key: "reduction"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "sum"
// CHECK:        op: "shard_slice"
// CHECK-NEXT:   inputs: [[R]]
// CHECK-NEXT:   outputs: {{[0-9]+}}
// CHECK-NEXT:   attrs {
// CHECK-NEXT:     key: "axes"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "tp"
// CHECK:          key: "dim"
// CHECK-NEXT:     value {
// CHECK-NEXT:       i: 1
// CHECK:        op: "axis_index"
// CHECK-NEXT:   outputs: {{[0-9]+}}
// CHECK-NEXT:   attrs {
// CHECK-NEXT:     key: "axes"
// CHECK-NEXT:     value {
// CHECK-NEXT:       s: "dp,tp"
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

module {
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
func.func @forward(%x: tensor<4x6xf32> {colossal.input = "x"})
    -> (tensor<2x12xf32> {colossal.output = "s"}, tensor<i64> {colossal.output = "index"}) {
  %a = colossal.all_reduce %x {axes = ["tp"], reduction = "max"} : tensor<4x6xf32> -> tensor<4x6xf32>
  %g = colossal.all_gather %a {axes = ["tp", "dp"], dim = 1} : tensor<4x6xf32> -> tensor<4x24xf32>
  %r = colossal.reduce_scatter %g {axes = ["dp"], dim = 0} : tensor<4x24xf32> -> tensor<2x24xf32>
  %s = colossal.shard_slice %r {axes = ["tp"], dim = 1} : tensor<2x24xf32> -> tensor<2x12xf32>
  %i = colossal.axis_index {axes = ["dp", "tp"]} : tensor<i64>
  return %s, %i : tensor<2x12xf32>, tensor<i64>
}
}

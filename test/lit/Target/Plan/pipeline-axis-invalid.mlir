// A pipeline axis of size > 1 reaches the plan emitter only from hand-written IR (the spec refuses
// `pp`): pipeline parallelism has no runner yet, so lowering it is one error, not a plan that runs
// every stage's ops on every rank.
// RUN: rm -rf %t && mkdir -p %t
// RUN: not colossal-opt %s --emit=plan -o %t/m.cplan 2>&1 | FileCheck %s
// RUN: not test -e %t/m.cplan
// CHECK: error: mesh axis 'pp' is a pipeline axis of size 2 but the module has no pipeline stages

colossal.mesh @mesh axes = ["pp"] shape = [2] roles = ["pipeline"]
func.func @forward(%x: tensor<4xf32> {colossal.input = "x"}) -> (tensor<4xf32> {colossal.output = "y"}) {
  %y = colossal.neg %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

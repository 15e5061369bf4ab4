// The ZeRO ops' verifiers (dialects/Colossal/ColossalParallelOps.td): shard_view, all_gather_in_place
// and reduce_scatter_in_place name persistent tensors, split dim 0 by the group size.
// RUN: colossal-opt %s --split-input-file --verify-diagnostics -o /dev/null

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @f(%x: tensor<4x2xf32>) {
  // expected-error @+1 {{views a persistent tensor, so its operand must be a function argument marked colossal.state or colossal.param}}
  %v = colossal.shard_view %x {axes = ["dp"]} : tensor<4x2xf32> -> tensor<2x2xf32>
  return
}

// -----

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @f(%x: tensor<4x2xf32> {colossal.state = "w.grad"}) {
  // expected-error @+1 {{does not fit a group of 2 ranks}}
  %v = colossal.shard_view %x {axes = ["dp"]} : tensor<4x2xf32> -> tensor<1x2xf32>
  return
}

// -----

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @f(%x: tensor<3x2xf32> {colossal.param = "w"}) {
  // expected-error @+1 {{dim 0 of 'tensor<3x2xf32>' is not divisible by the group size 2}}
  colossal.all_gather_in_place %x {axes = ["dp"]} : tensor<3x2xf32>
  return
}

// -----

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @f(%x: tensor<4xi64> {colossal.state = "w.grad"}) {
  // expected-error @+1 {{needs operands of one float element type}}
  colossal.reduce_scatter_in_place %x {axes = ["dp"]} : tensor<4xi64>
  return
}

// -----

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{writes its operands in place, so each must be a function argument marked colossal.state or colossal.param}}
  colossal.reduce_scatter_in_place %x {axes = ["dp"]} : tensor<4xf32>
  return
}

// -----

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @f(%x: tensor<4xf32> {colossal.state = "w.grad"}) {
  // expected-error @+1 {{names an axis that is not on the module's mesh}}
  colossal.all_gather_in_place %x {axes = ["tp"]} : tensor<4xf32>
  return
}

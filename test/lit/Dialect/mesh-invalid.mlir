// The colossal.mesh verifier and all_reduce_in_place's operand rules.
// RUN: colossal-opt %s --split-input-file --verify-diagnostics

// expected-error @below {{'colossal.mesh' op needs one size and one role per axis, got 2 axes, 1 sizes and 2 roles}}
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2] roles = ["data", "tensor"]

// -----

// expected-error @below {{'colossal.mesh' op names axis 'dp' twice}}
colossal.mesh @mesh axes = ["dp", "dp"] shape = [2, 2] roles = ["data", "data"]

// -----

// expected-error @below {{'colossal.mesh' op axis 'tp' has size 0; sizes are >= 1}}
colossal.mesh @mesh axes = ["tp"] shape = [0] roles = ["tensor"]

// -----

// expected-error @below {{'colossal.mesh' op axis name '1x' is not [A-Za-z_][A-Za-z0-9_]*}}
colossal.mesh @mesh axes = ["1x"] shape = [2] roles = ["tensor"]

// -----

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @optimizer_step(%g: tensor<4xf32> {colossal.state = "w.grad"}, %x: tensor<4xf32>) {
  // expected-error @below {{'colossal.all_reduce_in_place' op writes its operands in place, so each must be a function argument marked colossal.state or colossal.param}}
  colossal.all_reduce_in_place %g, %x {axes = ["dp"]} : tensor<4xf32>, tensor<4xf32>
  return
}

// -----

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @optimizer_step(%g: tensor<4xf32> {colossal.state = "w.grad"}) {
  // expected-error @below {{'colossal.all_reduce_in_place' op names an axis that is not on the module's mesh: ["tp"]}}
  colossal.all_reduce_in_place %g {axes = ["tp"]} : tensor<4xf32>
  return
}

// -----

colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
func.func @optimizer_step(%g: tensor<4xf32> {colossal.state = "w.grad"}) {
  // expected-error @below {{'colossal.all_reduce_in_place' op names one operand twice}}
  colossal.all_reduce_in_place %g, %g {axes = ["dp"]} : tensor<4xf32>, tensor<4xf32>
  return
}

// -----

// expected-error @below {{'colossal.mesh' op is a second mesh of the module (@grid is the other); a module has one mesh}}
colossal.mesh @mesh axes = ["dp"] shape = [2] roles = ["data"]
colossal.mesh @grid axes = ["tp"] shape = [2] roles = ["tensor"]

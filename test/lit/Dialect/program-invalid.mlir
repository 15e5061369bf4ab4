// `colossal.program`: what a function is for (ColossalDialect.h ProgramRole), checked by the
// dialect: a known role, one function per role, each argument at most one of parameter, state and
// input, data (`colossal.value`) only on a parameter.
// RUN: colossal-opt %s --split-input-file --verify-diagnostics

// expected-error @below {{'func.func' op 'colossal.program' must be one of "forward", "microbatch", "eval", "train_step", "optimizer_step", "stage_forward", "stage_backward", "stage_optimizer", "stage_backward_weight", "generate"; got "backward"}}
func.func @f() attributes {colossal.program = "backward"} {
  return
}

// -----

// expected-error @below {{'func.func' op is the "forward" program, but so is @forward2}}
func.func @forward() attributes {colossal.program = "forward"} {
  return
}
// expected-error @below {{'func.func' op is the "forward" program, but so is @forward}}
func.func @forward2() attributes {colossal.program = "forward"} {
  return
}

// -----

// expected-error @below {{'func.func' op argument #0 is more than one of 'colossal.param', 'colossal.state' and 'colossal.input'}}
func.func @forward(%x: tensor<4xf32> {colossal.param = "w", colossal.input = "x"}) attributes {colossal.program = "forward"} {
  return
}

// -----

// expected-error @below {{'func.func' op argument #0 has 'colossal.value' but is no 'colossal.param'}}
func.func @forward(%x: tensor<2xf32> {colossal.input = "x", colossal.value = dense<1.0> : tensor<2xf32>}) attributes {colossal.program = "forward"} {
  return
}

// -----

// expected-error @below {{'builtin.module' op 'colossal.program' is for func.func only}}
module attributes {colossal.program = "forward"} {
}

// #colossal.sharding's verifier and the dialect's checks against the mesh and the value's type.
// RUN: colossal-opt %s --split-input-file --verify-diagnostics

colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
// expected-error @below {{a sharding names mesh axis 'tp' twice}}
func.func @f(%w: tensor<4x4xf32> {colossal.sharding = #colossal.sharding<@mesh, [{"tp"}, {"tp"}]>}) {
  return
}

// -----

colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
// expected-error @below {{a whole dim has no blocks; got {}/3}}
func.func @f(%w: tensor<4x6xf32> {colossal.sharding = #colossal.sharding<@mesh, [{}, {}/3]>}) {
  return
}

// -----

colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
// expected-error @below {{'func.func' op argument #0: 'colossal.sharding' dim 1 names axis 'mp', which is not on mesh @mesh}}
func.func @f(%w: tensor<4x4xf32> {colossal.sharding = #colossal.sharding<@mesh, [{}, {"mp"}]>}) {
  return
}

// -----

// expected-error @below {{'func.func' op argument #0: 'colossal.sharding' names mesh @grid, which is not a colossal.mesh of the module}}
func.func @f(%w: tensor<4x4xf32> {colossal.sharding = #colossal.sharding<@grid, [{}, {"tp"}]>}) {
  return
}

// -----

colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
// expected-error @below {{'func.func' op argument #0: 'colossal.sharding' gives 1 dims for a value of type 'tensor<4x4xf32>'}}
func.func @f(%w: tensor<4x4xf32> {colossal.sharding = #colossal.sharding<@mesh, [{"tp"}]>}) {
  return
}

// -----

colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
// expected-error @below {{'func.func' op argument #0: 'colossal.sharding' dim 1 (4 local) is not divisible by its block count 3}}
func.func @f(%w: tensor<4x4xf32> {colossal.sharding = #colossal.sharding<@mesh, [{}, {"tp"}/3]>}) {
  return
}

// -----

colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
// expected-error @below {{'func.func' op argument #0: 'colossal.sharding' must be a #colossal.sharding; got [[], ["tp"]]}}
func.func @f(%w: tensor<4x4xf32> {colossal.sharding = [[], ["tp"]]}) {
  return
}

// -----

colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
func.func @f(%w: tensor<3x4xf32>) -> tensor<3x4xf32> {
  // expected-error @below {{'colossal.neg' op result #0: 'colossal.sharding' dim 0 (3) is not divisible by its group size x blocks 2}}
  %0 = colossal.neg %w {colossal.sharding = #colossal.sharding<@mesh, [{"tp"}, {}]>} : tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"]
func.func @f(%w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @below {{'colossal.neg' op 'colossal.sharding' gives 2 shardings for 1 results}}
  %0 = colossal.neg %w {colossal.sharding = [#colossal.sharding<@mesh, [{}, {}]>, #colossal.sharding<@mesh, [{}, {}]>]} : tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// RUN: colossal-opt %s -split-input-file -verify-diagnostics

// Verifier errors of colossal.unary and colossal.binary.

func.func @unknown_fn(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{unknown unary function 'cosine'}}
  %0 = colossal.unary "cosine" %x : tensor<2xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @float_only(%x: tensor<2xi32>) -> tensor<2xi32> {
  // expected-error @+1 {{'cos' takes floating-point elements, got 'i32'}}
  %0 = colossal.unary "cos" %x : tensor<2xi32> -> tensor<2xi32>
  return %0 : tensor<2xi32>
}

// -----

func.func @missing_alpha(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'elu' takes 1 of the parameters alpha, beta}}
  %0 = colossal.unary "elu" %x : tensor<2xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @predicate_type(%x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{result element type must be 'i1'}}
  %0 = colossal.unary "is_inf" %x : tensor<2xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @logic_on_float(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{'and' takes i1 elements, got 'f32'}}
  %0 = colossal.binary "and" %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @compare_result(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{result type must be 'tensor<2xi1>'}}
  %0 = colossal.binary "less_equal" %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

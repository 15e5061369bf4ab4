// Sizes tensor parallelism cannot split, and bad hints: one error naming the parameter or node
// and the size, before anything runs.
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=4:tensor}, colossal-spmd-partition)' 2>&1 | FileCheck %s --check-prefix=TP4
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{hints="nothing\.matches=-/-"})' 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{hints="fc1\.weight=tp"})' 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{hints="fc1\.weight=xp/-"})' 2>&1 | FileCheck %s --check-prefix=AXIS
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{hints="fc2\.bias=tp"})' 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{stage=bogus})' 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{hints="fc1\.weight=tp*tp/-"})' 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{hints="fc1\.weight=tp/tp"})' 2>&1 | FileCheck %s --check-prefix=TWICE

// 6 output features: tp=4 does not divide them (tp=2 does).
// TP4: error: tensor parallelism over tp=4: parameter 'fc1.weight' [8x6] would be split by columns (Megatron column-parallel), but its 6 output features are not divisible by 4
// NOMATCH: error: parallel.tensor.hints: 'nothing\.matches' matches no parameter of the model
// RANK: error: parallel.tensor.hints: 'fc1\.weight' gives 1 dims but parameter 'fc1.weight' has shape [8x6]
// AXIS: error: parallel.tensor.hints: 'fc1\.weight': 'xp' is not a mesh axis
// DIVIDE: error: parallel.tensor.hints: 'fc2\.bias' splits parameter 'fc2.bias' [7] as #colossal.sharding<@mesh, [{"tp"}]>, which does not divide its shape
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=tp=2:tensor}, colossal-spmd-partition{hints={fc.\.weight=-/-,fc1.*=-/-}})' 2>&1 | FileCheck %s --check-prefix=BOTH
// BOTH: error: parallel.tensor.hints: parameter 'fc1.weight' matches both 'fc.\.weight' and 'fc1.*'; make the regexes exclusive
// TWICE: error: parallel.tensor.hints: 'fc1\.weight' names mesh axis 'tp' twice
// STAGE: error: colossal-spmd-partition: stage must be strategy, propagate or partition, got 'bogus'
module {
  func.func @forward(%x: tensor<2x8xf32> {colossal.input = "x"},
                     %w1: tensor<8x6xf32> {colossal.param = "fc1.weight"},
                     %w2: tensor<6x7xf32> {colossal.param = "fc2.weight"},
                     %b2: tensor<7xf32> {colossal.param = "fc2.bias"}) -> tensor<2x7xf32> {
    %h = colossal.matmul %x, %w1 : (tensor<2x8xf32>, tensor<8x6xf32>) -> tensor<2x6xf32>
    %y = colossal.matmul %h, %w2 : (tensor<2x6xf32>, tensor<6x7xf32>) -> tensor<2x7xf32>
    %z = colossal.add %y, %b2 : (tensor<2x7xf32>, tensor<7xf32>) -> tensor<2x7xf32>
    return %z : tensor<2x7xf32>
  }
}

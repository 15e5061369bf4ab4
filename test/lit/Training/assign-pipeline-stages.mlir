// colossal-assign-pipeline-stages (docs/parallelism.md "How the step is cut") on a three-matmul
// chain: h0 = x·w0 (4x8), h1 = h0·w1 (4x512, the wide value), h2 = h1·w2 (4x8), loss = sum(h2).
// The cost model puts h0 and h1 on stage 0 and h2 and the loss on stage 1 (h1 and h2 weigh about
// the same), and records the 8192 bytes of h1 crossing the cut; its stages' costs include the
// message at the cut (2 x 5 FLOPs per byte on each side). Cut points by node name override it;
// the errors name what is wrong.
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-assign-pipeline-stages{stages=2})' | FileCheck %s --check-prefix=AUTO
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-assign-pipeline-stages{stages=2 cuts=h0})' | FileCheck %s --check-prefix=CUT
// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-assign-pipeline-stages{stages=4})' | FileCheck %s --check-prefix=FOUR
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-assign-pipeline-stages{stages=2 cuts=h9})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-assign-pipeline-stages{stages=3 cuts=h0})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-assign-pipeline-stages{stages=8})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=MANY
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-assign-pipeline-stages{stages=2 cuts=loss})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=LAST

// AUTO: colossal.pipeline = {cut_bytes = array<i64: 8192>, microbatches = 1 : i64, schedule = "1f1b", stage_cost = array<i64: [[C0:[0-9]+]], [[C1:[0-9]+]]>, stage_ops = array<i64: 2, 2>, stages = 2 : i64, virtual_stages = 1 : i64}
// AUTO: colossal.matmul %arg0, %arg1 {colossal.stage = 0 : i64}
// AUTO: colossal.matmul %{{.*}}, %arg2 {colossal.stage = 0 : i64}
// AUTO: colossal.matmul %{{.*}}, %arg3 {colossal.stage = 1 : i64}
// AUTO: colossal.reduce_sum %{{.*}} {axes = array<i64: 0, 1>, colossal.stage = 1 : i64, keepdims = false}

// After h0 the cut carries h0 (4x8 f32, 128 bytes).
// CUT: cut_bytes = array<i64: 128>{{.*}}stage_ops = array<i64: 1, 3>
// CUT: colossal.matmul %arg0, %arg1 {colossal.stage = 0 : i64}
// CUT: colossal.matmul %{{.*}}, %arg2 {colossal.stage = 1 : i64}

// One op per stage when there are as many stages as ops.
// FOUR: cut_bytes = array<i64: 128, 8192, 128>{{.*}}stage_ops = array<i64: 1, 1, 1, 1>

// NONE: error: parallel.pipeline.stages: cut point 'h9' matches no node of the training step (node names here: 'h0', 'h1', 'h2', ...; a fused op (a norm, attention, GELU) answers to the name of its last node)
// COUNT: error: parallel.pipeline.stages lists 1 cut point; 3 stages (mesh pp) need 2
// MANY: error: mesh pp=8: more stages than the training step can be cut into (it has 4 ops)
// LAST: error: parallel.pipeline.stages: cut point 'loss' is after the last op: the last stage would be empty

module {
  func.func @train_step(%x: tensor<4x8xf32> {colossal.input = "x"},
                        %w0: tensor<8x8xf32> {colossal.param = "w0"},
                        %w1: tensor<8x512xf32> {colossal.param = "w1"},
                        %w2: tensor<512x8xf32> {colossal.param = "w2"})
      -> (tensor<f32> {colossal.output = "loss"}) attributes {colossal.program = "train_step"} {
    %h0 = colossal.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("h0")
    %h1 = colossal.matmul %h0, %w1 : (tensor<4x8xf32>, tensor<8x512xf32>) -> tensor<4x512xf32> loc("h1")
    %h2 = colossal.matmul %h1, %w2 : (tensor<4x512xf32>, tensor<512x8xf32>) -> tensor<4x8xf32> loc("h2")
    %loss = colossal.reduce_sum %h2 {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<f32> loc("loss")
    return %loss : tensor<f32>
  }
}

// A train-mode module (docs/training.md "Plan") lowered to a plan: four programs, the trainable
// parameter `w` as a STATE buffer in every program, the frozen `f` and the constant as WEIGHTs
// stored once in the weights file, update ops whose outputs are the STATE buffers they write,
// Plan.states with roles, Plan.train from `colossal.train`.
// The plan is decoded with protoc; the report's numbers are sizes of the shapes below
// (w: 2x2 f32 = 16 B; grads 16 B; AdamW's exp_avg + exp_avg_sq = 2 x 16 B).
// RUN: rm -rf %t && mkdir -p %t
// RUN: colossal-opt %s --emit=plan -o %t/m.cplan --report | FileCheck %s --check-prefix=REPORT
// RUN: protoc --decode=colossal.plan.Plan -I %src/runtime/plan %src/runtime/plan/plan.proto < %t/m.cplan | FileCheck %s
// RUN: %python -c "import json,struct,sys; b=open('%t/m.safetensors','rb').read(); n=struct.unpack('<Q',b[:8])[0]; print(sorted(k for k in json.loads(b[8:8+n]) if k != '__metadata__'))" | FileCheck %s --check-prefix=WEIGHTS

// REPORT: trainable parameters: 1 tensors, 4 elements
// REPORT-NEXT:   name  shape   count
// REPORT-NEXT:   w     [2, 2]      4
// REPORT-NEXT:   total             4
// REPORT-NEXT: frozen parameters (read-only weights): 1 (f)
// REPORT:        forward
// REPORT-NEXT:   eval
// REPORT-NEXT:   train_step
// REPORT-NEXT:   optimizer_step
// REPORT:        params {{.*}} 16 bytes
// REPORT-NEXT:   grads {{.*}} 16 bytes
// REPORT-NEXT:   optimizer state {{.*}} 32 bytes
// REPORT-NEXT:   read-only weights {{.*}} 16 bytes in 2 tensors

// WEIGHTS: ['const.0', 'f', 'w']

// CHECK: mode: "train"
// CHECK: programs {
// CHECK-NEXT: name: "forward"
// CHECK:        id: 1
// CHECK-NEXT:   name: "w"
// CHECK-NEXT:   dtype: F32
// CHECK-NEXT:   shape: 2
// CHECK-NEXT:   shape: 2
// CHECK-NEXT:   storage: STATE
// CHECK-NEXT:   size_bytes: 16
// CHECK-NEXT:   state_name: "w"
// CHECK:        id: 2
// CHECK-NEXT:   name: "f"
// CHECK:        storage: WEIGHT
// CHECK-NEXT:   size_bytes: 8
// CHECK-NEXT:   weight_name: "f"
// CHECK: programs {
// CHECK-NEXT: name: "eval"
// CHECK:        state_name: "w"
// CHECK:        weight_name: "const.0"
// CHECK: programs {
// CHECK-NEXT: name: "train_step"
// CHECK:        id: 2
// CHECK-NEXT:   name: "w.grad"
// CHECK:        storage: STATE
// CHECK-NEXT:   size_bytes: 16
// CHECK-NEXT:   state_name: "w.grad"
// CHECK:        weight_name: "const.0"
// The update writes its accumulator in place: output = input 0 = the STATE buffer.
// CHECK:        op: "accumulate_grad"
// CHECK-NEXT:   inputs: 2
// CHECK-NEXT:   inputs: {{[0-9]+}}
// CHECK-NEXT:   outputs: 2
// CHECK-NEXT:   attrs {
// CHECK-NEXT:     key: "scale"
// CHECK-NEXT:     value {
// CHECK-NEXT:       f: 1
// CHECK: programs {
// CHECK-NEXT: name: "optimizer_step"
// CHECK:        state_name: "w.exp_avg_sq"
// CHECK:        op: "global_norm"
// CHECK-NEXT:   inputs: 1
// CHECK-NEXT:   outputs: 6
// CHECK:        op: "adamw_update"
// CHECK-NEXT:   inputs: 0
// CHECK-NEXT:   inputs: 1
// CHECK-NEXT:   inputs: 2
// CHECK-NEXT:   inputs: 3
// CHECK-NEXT:   inputs: 4
// CHECK-NEXT:   inputs: 5
// CHECK-NEXT:   inputs: 6
// CHECK-NEXT:   outputs: 0
// CHECK-NEXT:   outputs: 1
// CHECK-NEXT:   outputs: 2
// CHECK-NEXT:   outputs: 3
// CHECK:          key: "weight_decay"
// CHECK-NEXT:     value {
// CHECK-NEXT:       f: 0.1
// CHECK:        outputs {
// CHECK-NEXT:     name: "grad_norm"
// CHECK-NEXT:     buffer: 6
// CHECK: states {
// CHECK-NEXT:   name: "w"
// CHECK-NEXT:   dtype: F32
// CHECK-NEXT:   shape: 2
// CHECK-NEXT:   shape: 2
// CHECK-NEXT:   role: PARAM
// CHECK-NEXT:   init_weight: "w"
// CHECK-NEXT:   source: "onnx::w"
// CHECK-NEXT: }
// CHECK-NEXT: states {
// CHECK-NEXT:   name: "w.grad"
// CHECK:        role: GRAD
// CHECK-NEXT:   param: "w"
// CHECK-NEXT: }
// CHECK-NEXT: states {
// CHECK-NEXT:   name: "w.exp_avg"
// CHECK:        role: OPTIMIZER
// CHECK-NEXT:   param: "w"
// CHECK-NEXT: }
// CHECK-NEXT: states {
// CHECK-NEXT:   name: "w.exp_avg_sq"
// CHECK:        role: OPTIMIZER
// CHECK-NEXT:   param: "w"
// CHECK-NEXT: }
// CHECK-NEXT: train {
// CHECK-NEXT:   tokens_input: "tokens"
// CHECK-NEXT:   labels_input: "labels"
// CHECK-NEXT:   logits_output: "logits"
// CHECK-NEXT:   vocab_size: 2
// CHECK-NEXT:   global_batch: 2
// CHECK-NEXT:   seq_len: 3
// CHECK-NEXT:   grad_accum: 1
// CHECK-NEXT:   optimizer: "adamw"
// CHECK-NEXT:   lr: 0.01
// CHECK-NEXT:   lr_schedule: "constant"
// CHECK-NEXT: }

module attributes {colossal.train = {tokens_input = "tokens", labels_input = "labels",
                                     logits_output = "logits", optimizer = "adamw",
                                     lr = 1.0e-2 : f64, lr_schedule = "constant"}} {
func.func @forward(%tok: tensor<2x3xi64> {colossal.input = "tokens"},
    %w: tensor<2x2xf32> {colossal.param = "w", colossal.source = "onnx::w",
                         colossal.value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>},
    %f: tensor<2xf32> {colossal.param = "f", colossal.value = dense<[0.5, 0.25]> : tensor<2xf32>})
    -> (tensor<2x3x2xf32> {colossal.output = "logits"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<2x3xi64>) -> tensor<2x3x2xf32>
  %y = colossal.mul %e, %f : (tensor<2x3x2xf32>, tensor<2xf32>) -> tensor<2x3x2xf32>
  return %y : tensor<2x3x2xf32>
}
func.func @eval(%w: tensor<2x2xf32> {colossal.param = "w"}, %f: tensor<2xf32> {colossal.param = "f"},
    %tok: tensor<2x3xi64> {colossal.input = "tokens"}, %lab: tensor<2x3xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<2x3xi64>) -> tensor<2x3x2xf32>
  %y = colossal.mul %e, %f : (tensor<2x3x2xf32>, tensor<2xf32>) -> tensor<2x3x2xf32>
  %c = colossal.constant dense<2.0> : tensor<2xf32>
  %z = colossal.mul %y, %c : (tensor<2x3x2xf32>, tensor<2xf32>) -> tensor<2x3x2xf32>
  %l = colossal.reduce_mean %z {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
func.func @train_step(%w: tensor<2x2xf32> {colossal.param = "w"}, %f: tensor<2xf32> {colossal.param = "f"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"},
    %tok: tensor<2x3xi64> {colossal.input = "tokens"}, %lab: tensor<2x3xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<2x3xi64>) -> tensor<2x3x2xf32>
  %y = colossal.mul %e, %f : (tensor<2x3x2xf32>, tensor<2xf32>) -> tensor<2x3x2xf32>
  %c = colossal.constant dense<2.0> : tensor<2xf32>
  %z = colossal.mul %y, %c : (tensor<2x3x2xf32>, tensor<2xf32>) -> tensor<2x3x2xf32>
  %l = colossal.reduce_mean %z {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x2xf32>) -> tensor<f32>
  %g = colossal.exp %w : tensor<2x2xf32>
  colossal.accumulate_grad %gw, %g {scale = 1.0 : f64} : tensor<2x2xf32>, tensor<2x2xf32>
  return %l : tensor<f32>
}
func.func @optimizer_step(%w: tensor<2x2xf32> {colossal.param = "w"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"},
    %m: tensor<2x2xf32> {colossal.state = "w.exp_avg"}, %v: tensor<2x2xf32> {colossal.state = "w.exp_avg_sq"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
  %n = colossal.global_norm %gw : tensor<2x2xf32>
  colossal.adamw_update %w, %gw, %m, %v, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, max_grad_norm = 0.0 : f64} : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}
}

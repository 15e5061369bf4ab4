// RUN: colossal-opt %s --pass-pipeline='builtin.module(colossal-append-loss{logits=logits data-inputs=image,labels})' | FileCheck %s
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-append-loss{logits=logits data-inputs=image})' 2>&1 | FileCheck %s --check-prefix=NOLABELS
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-append-loss{logits=logits data-inputs=labels})' 2>&1 | FileCheck %s --check-prefix=NOSOURCE
// RUN: not colossal-opt %s --pass-pipeline='builtin.module(colossal-append-loss{logits=logits data-inputs=image,labels,noise})' 2>&1 | FileCheck %s --check-prefix=NOINPUT

// colossal-append-loss with `data-inputs` (the spec's train.inputs): an image model [B=4, 3] with
// a training-mode BatchNorm's running mean as a buffer (colossal.update_buffer). No token input is
// chosen; the created labels [4] are a data input; colossal.train lists the data inputs and the
// batch. The buffer update stays in @train_step only: @forward and @eval leave the running
// statistics as they are.

// CHECK-LABEL: module attributes
// CHECK-SAME: colossal.train = {data_inputs = ["image", "labels"], global_batch = 4 : i64, ignore_index = -100 : i64, labels_input = "labels", logits_output = "logits", loss = "cross_entropy", tokens_input = "", vocab_size = 5 : i64}
// CHECK-LABEL: func.func @forward
// CHECK-NOT: colossal.update_buffer
// CHECK: return
// CHECK-LABEL: func.func @eval
// CHECK-SAME: %{{.*}}: tensor<4xi64> {colossal.input = "labels"}
// CHECK-NOT: colossal.update_buffer
// CHECK: colossal.cross_entropy
// CHECK-LABEL: func.func @train_step
// CHECK: %[[NEXT:.*]] = colossal.add
// CHECK: colossal.update_buffer %{{.*}}, %[[NEXT]] : tensor<3xf32>, tensor<3xf32>
// CHECK: colossal.cross_entropy

// Errors: the labels without a source, a model input without one, a source naming no input.
// NOLABELS: error: train.inputs: the labels 'labels' of the cross_entropy loss have no source (give them npy)
// NOSOURCE: error: train.inputs: input 'image' of the model has no source (give it npy, normal or uniform_int, or bind it with the spec's values; sources: 'labels')
// NOINPUT: error: train.inputs: 'noise' is not an input of the model (inputs: 'image', and the labels 'labels' of the loss)

module {
  func.func @forward(%image: tensor<4x3xf32> {colossal.input = "image"},
                     %mean: tensor<3xf32> {colossal.param = "bn.running_mean"},
                     %w: tensor<3x5xf32> {colossal.param = "fc.weight"})
      -> (tensor<4x5xf32> {colossal.output = "logits"}) {
    %m = colossal.reduce_mean %image {axes = array<i64: 0>, keepdims = false} : (tensor<4x3xf32>) -> tensor<3xf32>
    %next = colossal.add %mean, %m : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    colossal.update_buffer %mean, %next : tensor<3xf32>, tensor<3xf32>
    %c = colossal.sub %image, %m : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
    %l = colossal.matmul %c, %w : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
    return %l : tensor<4x5xf32>
  }
}

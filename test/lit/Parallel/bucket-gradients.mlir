// colossal-bucket-gradients: consecutive in-place all_reduces over the same axes fuse into buckets
// of at most bucket-cap-mb MiB (PyTorch DDP's bucket_cap_mb). Gradients of 4096, 1024 and 4096
// f32 (16, 4 and 16 KiB): a 0.03 MiB (31457 bytes) cap holds the first two (20 KiB), the third
// starts a bucket of its own; the default 25 MiB holds all three; 0 keeps one per tensor. An op
// between two all_reduces, or another axis, ends a bucket.
// RUN: colossal-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(colossal-bucket-gradients{bucket-cap-mb=0.03}))' | FileCheck %s --check-prefix=SMALL
// RUN: colossal-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(colossal-bucket-gradients))' | FileCheck %s --check-prefix=DEFAULT
// RUN: colossal-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(colossal-bucket-gradients{bucket-cap-mb=0}))' | FileCheck %s --check-prefix=NONE

// SMALL-LABEL: func.func @optimizer_step
// SMALL-NEXT: colossal.all_reduce_in_place %arg0, %arg1 {axes = ["dp"]} : tensor<4096xf32>, tensor<1024xf32>
// SMALL-NEXT: colossal.all_reduce_in_place %arg2 {axes = ["dp"]} : tensor<4096xf32>
// DEFAULT-LABEL: func.func @optimizer_step
// DEFAULT-NEXT: colossal.all_reduce_in_place %arg0, %arg1, %arg2 {axes = ["dp"]} : tensor<4096xf32>, tensor<1024xf32>, tensor<4096xf32>
// DEFAULT-NEXT: return
// NONE-LABEL: func.func @optimizer_step
// NONE-COUNT-3: colossal.all_reduce_in_place %arg{{[0-2]}} {axes = ["dp"]}
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
func.func @optimizer_step(%a: tensor<4096xf32> {colossal.state = "a.grad"}, %b: tensor<1024xf32> {colossal.state = "b.grad"},
                          %c: tensor<4096xf32> {colossal.state = "c.grad"}) {
  colossal.all_reduce_in_place %a {axes = ["dp"]} : tensor<4096xf32>
  colossal.all_reduce_in_place %b {axes = ["dp"]} : tensor<1024xf32>
  colossal.all_reduce_in_place %c {axes = ["dp"]} : tensor<4096xf32>
  return
}

// -----

// DEFAULT-LABEL: func.func @optimizer_step
// DEFAULT-NEXT: colossal.all_reduce_in_place %arg0 {axes = ["dp"]}
// DEFAULT-NEXT: colossal.all_reduce_in_place %arg1 {axes = ["tp"]}
// DEFAULT-NEXT: colossal.global_norm
// DEFAULT-NEXT: colossal.all_reduce_in_place %arg2 {axes = ["dp"]}
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
func.func @optimizer_step(%a: tensor<4xf32> {colossal.state = "a.grad"}, %b: tensor<4xf32> {colossal.state = "b.grad"},
                          %c: tensor<4xf32> {colossal.state = "c.grad"}) -> tensor<f32> {
  colossal.all_reduce_in_place %a {axes = ["dp"]} : tensor<4xf32>
  colossal.all_reduce_in_place %b {axes = ["tp"]} : tensor<4xf32>
  %n = colossal.global_norm %a : tensor<4xf32>
  colossal.all_reduce_in_place %c {axes = ["dp"]} : tensor<4xf32>
  return %n : tensor<f32>
}

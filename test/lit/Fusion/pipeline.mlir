// RUN: colossal-opt %s --pass-pipeline='builtin.module(func.func(canonicalize, colossal-fuse-norms, colossal-fuse-activations, colossal-fuse-attention, canonicalize, cse))' | FileCheck %s

// The fusion part of the driver's default pipeline on a GPT-2 block as torch.onnx exports it
// (1 sequence of 4 tokens, 2 heads of 8): canonicalize first folds the causal mask that the
// export computes from a constant buffer (Trilu, Cast, Slice), then LayerNorm, attention and GELU
// each become one op.

// CHECK-LABEL: func.func @gpt2_block
// CHECK-SAME: (%[[X:.*]]: tensor<1x4x16xf32>, %[[LNW:.*]]: tensor<16xf32>, %[[LNB:.*]]: tensor<16xf32>, %[[WQ:.*]]: tensor<16x16xf32>, %[[WK:.*]]: tensor<16x16xf32>, %[[WV:.*]]: tensor<16x16xf32>)
// CHECK:      %[[H:.*]] = colossal.layer_norm %[[X]], %[[LNW]], %[[LNB]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32}
// CHECK:      %[[Q:.*]] = colossal.transpose %{{.*}} {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK:      %[[K:.*]] = colossal.transpose %{{.*}} {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK:      %[[V:.*]] = colossal.transpose %{{.*}} {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NOT:  colossal.softmax
// CHECK:      %[[A:.*]] = colossal.attention %[[Q]], %[[K]], %[[V]] {causal = true, scale = 0.353553{{[0-9]*}} : f32}
// CHECK:      %[[Y:.*]] = colossal.reshape %{{.*}} : tensor<1x4x2x8xf32> -> tensor<1x4x16xf32>
// CHECK-NEXT: %[[G:.*]] = colossal.gelu %[[Y]] : tensor<1x4x16xf32>
// CHECK-NEXT: return %[[G]]
func.func @gpt2_block(%x: tensor<1x4x16xf32>, %lnw: tensor<16xf32>, %lnb: tensor<16xf32>, %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>) -> tensor<1x4x16xf32> {
  // ln_1
  %two = colossal.constant dense<2.0> : tensor<f32>
  %eps = colossal.constant dense<1.0e-5> : tensor<f32>
  %m = colossal.reduce_mean %x {axes = array<i64: 2>, keepdims = true} : (tensor<1x4x16xf32>) -> tensor<1x4x1xf32>
  %d = colossal.sub %x, %m : (tensor<1x4x16xf32>, tensor<1x4x1xf32>) -> tensor<1x4x16xf32>
  %p = colossal.pow %d, %two : (tensor<1x4x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
  %var = colossal.reduce_mean %p {axes = array<i64: 2>, keepdims = true} : (tensor<1x4x16xf32>) -> tensor<1x4x1xf32>
  %ve = colossal.add %var, %eps : (tensor<1x4x1xf32>, tensor<f32>) -> tensor<1x4x1xf32>
  %sd = colossal.sqrt %ve : tensor<1x4x1xf32>
  %n = colossal.div %d, %sd : (tensor<1x4x16xf32>, tensor<1x4x1xf32>) -> tensor<1x4x16xf32>
  %nw = colossal.mul %n, %lnw : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
  %h = colossal.add %nw, %lnb : (tensor<1x4x16xf32>, tensor<16xf32>) -> tensor<1x4x16xf32>
  // q, k, v: [B, T, C] -> [B, T, H, D] -> [B, H, T, D]
  %q0 = colossal.matmul %h, %wq : (tensor<1x4x16xf32>, tensor<16x16xf32>) -> tensor<1x4x16xf32>
  %k0 = colossal.matmul %h, %wk : (tensor<1x4x16xf32>, tensor<16x16xf32>) -> tensor<1x4x16xf32>
  %v0 = colossal.matmul %h, %wv : (tensor<1x4x16xf32>, tensor<16x16xf32>) -> tensor<1x4x16xf32>
  %q1 = colossal.reshape %q0 : tensor<1x4x16xf32> -> tensor<1x4x2x8xf32>
  %k1 = colossal.reshape %k0 : tensor<1x4x16xf32> -> tensor<1x4x2x8xf32>
  %v1 = colossal.reshape %v0 : tensor<1x4x16xf32> -> tensor<1x4x2x8xf32>
  %q = colossal.transpose %q1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
  %k = colossal.transpose %k1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
  %v = colossal.transpose %v1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x8xf32>) -> tensor<1x2x4x8xf32>
  // scores, causal mask from the registered `bias` buffer (tril of ones, 8x8, sliced to 4x4)
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %sqrt_d = colossal.constant dense<2.82842708> : tensor<f32>
  %ss = colossal.div %s, %sqrt_d : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %ones = colossal.constant dense<1.0> : tensor<1x1x8x8xf32>
  %tril = colossal.trilu %ones {upper = false, k = 0 : i64} : tensor<1x1x8x8xf32>
  %bias = colossal.cast %tril : tensor<1x1x8x8xf32> -> tensor<1x1x8x8xi1>
  %keep = colossal.slice %bias {starts = array<i64: 0, 0, 0, 0>, limits = array<i64: 1, 1, 4, 4>, steps = array<i64: 1, 1, 1, 1>} : (tensor<1x1x8x8xi1>) -> tensor<1x1x4x4xi1>
  %min = colossal.constant dense<-3.40282347E+38> : tensor<f32>
  %masked = colossal.where %keep, %ss, %min : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %probs = colossal.softmax %masked {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %a = colossal.matmul %probs, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  // merge heads
  %at = colossal.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x8xf32>) -> tensor<1x4x2x8xf32>
  %y = colossal.reshape %at : tensor<1x4x2x8xf32> -> tensor<1x4x16xf32>
  // GELU (erf)
  %sqrt2 = colossal.constant dense<1.41421354> : tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %half = colossal.constant dense<0.5> : tensor<f32>
  %g0 = colossal.div %y, %sqrt2 : (tensor<1x4x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
  %g1 = colossal.erf %g0 : tensor<1x4x16xf32>
  %g2 = colossal.add %g1, %one : (tensor<1x4x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
  %g3 = colossal.mul %y, %g2 : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
  %g4 = colossal.mul %g3, %half : (tensor<1x4x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
  return %g4 : tensor<1x4x16xf32>
}

// RUN: colossal-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(colossal-fuse-attention))' | FileCheck %s

// GPT-2 as HF exports it: q·kᵀ / √D, a constant lower-triangular keep-mask applied with
// Where(mask, scores, finfo.min), softmax over keys, times v. The constant mask is exactly the
// causal pattern, so it becomes `causal = true` and disappears.
// CHECK-LABEL: func.func @gpt2_causal_where
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x4x16xf32>, %[[K:.*]]: tensor<2x2x4x16xf32>, %[[V:.*]]: tensor<2x2x4x16xf32>)
// CHECK-NEXT: %[[O:.*]] = colossal.attention %[[Q]], %[[K]], %[[V]] {causal = true, scale = 2.500000e-01 : f32}
// CHECK-SAME:   : (tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
// CHECK-NEXT: return %[[O]]
func.func @gpt2_causal_where(%q: tensor<2x2x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32> {
  %sqrt_d = colossal.constant dense<4.0> : tensor<f32>
  %min = colossal.constant dense<-3.40282347E+38> : tensor<f32>
  %keep = colossal.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x4x16xf32>) -> tensor<2x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<2x2x4x16xf32>, tensor<2x2x16x4xf32>) -> tensor<2x2x4x4xf32>
  %ss = colossal.div %s, %sqrt_d : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %m = colossal.where %keep, %ss, %min : (tensor<1x1x4x4xi1>, tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %p = colossal.softmax %m {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  return %o : tensor<2x2x4x16xf32>
}

// -----

// Llama with grouped-query attention: 8 query heads, 2 kv heads repeated 4 times by repeat_kv
// (Reshape to [B,Hkv,1,T,D], Expand, Reshape to [B,Hkv·n,T,D]); the scores are multiplied by
// 1/√D and a constant additive causal mask (0 / finfo.min) is added. The fused op reads the
// un-repeated k and v.
// CHECK-LABEL: func.func @llama_gqa_additive_causal
// CHECK-SAME: (%[[Q:.*]]: tensor<1x8x4x16xf32>, %[[K:.*]]: tensor<1x2x4x16xf32>, %[[V:.*]]: tensor<1x2x4x16xf32>)
// CHECK-NEXT: %[[O:.*]] = colossal.attention %[[Q]], %[[K]], %[[V]] {causal = true, scale = 2.500000e-01 : f32}
// CHECK-SAME:   : (tensor<1x8x4x16xf32>, tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> tensor<1x8x4x16xf32>
// CHECK-NEXT: return %[[O]]
func.func @llama_gqa_additive_causal(%q: tensor<1x8x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x8x4x16xf32> {
  %scale = colossal.constant dense<0.25> : tensor<f32>
  %mask = colossal.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %k1 = colossal.reshape %k : tensor<1x2x4x16xf32> -> tensor<1x2x1x4x16xf32>
  %k2 = colossal.expand %k1 : tensor<1x2x1x4x16xf32> -> tensor<1x2x4x4x16xf32>
  %kr = colossal.reshape %k2 : tensor<1x2x4x4x16xf32> -> tensor<1x8x4x16xf32>
  %v1 = colossal.reshape %v : tensor<1x2x4x16xf32> -> tensor<1x2x1x4x16xf32>
  %v2 = colossal.expand %v1 : tensor<1x2x1x4x16xf32> -> tensor<1x2x4x4x16xf32>
  %vr = colossal.reshape %v2 : tensor<1x2x4x4x16xf32> -> tensor<1x8x4x16xf32>
  %kt = colossal.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x8x4x16xf32>) -> tensor<1x8x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x8x4x16xf32>, tensor<1x8x16x4xf32>) -> tensor<1x8x4x4xf32>
  %ss = colossal.mul %s, %scale : (tensor<1x8x4x4xf32>, tensor<f32>) -> tensor<1x8x4x4xf32>
  %m = colossal.add %ss, %mask : (tensor<1x8x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x8x4x4xf32>
  %p = colossal.softmax %m {axis = 3 : i64} : tensor<1x8x4x4xf32>
  %o = colossal.matmul %p, %vr : (tensor<1x8x4x4xf32>, tensor<1x8x4x16xf32>) -> tensor<1x8x4x16xf32>
  return %o : tensor<1x8x4x16xf32>
}

// -----

// Grouped-query attention written with torch's repeat_interleave(2, dim=1), as torch.onnx exports
// it once the shape arithmetic has folded: k split into its 2 heads, each head unsqueezed to
// [B,1,1,T,D], expanded to [B,1,2,T,D] and reshaped to [B,2,T,D], the heads concatenated in order.
// Query head h reads kv head h / 2, as with repeat_kv: one GQA attention on the un-repeated k, v.
// CHECK-LABEL: func.func @gqa_repeat_interleave
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x4x16xf32>, %[[K:.*]]: tensor<1x2x4x16xf32>, %[[V:.*]]: tensor<1x2x4x16xf32>)
// CHECK-NEXT: %[[O:.*]] = colossal.attention %[[Q]], %[[K]], %[[V]] {causal = false, scale = 2.500000e-01 : f32}
// CHECK-SAME:   : (tensor<1x4x4x16xf32>, tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> tensor<1x4x4x16xf32>
// CHECK-NEXT: return %[[O]]
func.func @gqa_repeat_interleave(%q: tensor<1x4x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x4x4x16xf32> {
  %sqrt_d = colossal.constant dense<4.0> : tensor<f32>
  %k0, %k1 = colossal.split %k {axis = 1 : i64} : tensor<1x2x4x16xf32> -> tensor<1x1x4x16xf32>, tensor<1x1x4x16xf32>
  %k0u = colossal.reshape %k0 : tensor<1x1x4x16xf32> -> tensor<1x1x1x4x16xf32>
  %k0e = colossal.expand %k0u : tensor<1x1x1x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %k0r = colossal.reshape %k0e : tensor<1x1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  %k1u = colossal.reshape %k1 : tensor<1x1x4x16xf32> -> tensor<1x1x1x4x16xf32>
  %k1e = colossal.expand %k1u : tensor<1x1x1x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %k1r = colossal.reshape %k1e : tensor<1x1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  %kr = colossal.concat %k0r, %k1r {axis = 1 : i64} : (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> tensor<1x4x4x16xf32>
  %v0, %v1 = colossal.split %v {axis = 1 : i64} : tensor<1x2x4x16xf32> -> tensor<1x1x4x16xf32>, tensor<1x1x4x16xf32>
  %v0u = colossal.reshape %v0 : tensor<1x1x4x16xf32> -> tensor<1x1x1x4x16xf32>
  %v0e = colossal.expand %v0u : tensor<1x1x1x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %v0r = colossal.reshape %v0e : tensor<1x1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  %v1u = colossal.reshape %v1 : tensor<1x1x4x16xf32> -> tensor<1x1x1x4x16xf32>
  %v1e = colossal.expand %v1u : tensor<1x1x1x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %v1r = colossal.reshape %v1e : tensor<1x1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  %vr = colossal.concat %v0r, %v1r {axis = 1 : i64} : (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> tensor<1x4x4x16xf32>
  %kt = colossal.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x4x16xf32>) -> tensor<1x4x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x4x4x16xf32>, tensor<1x4x16x4xf32>) -> tensor<1x4x4x4xf32>
  %ss = colossal.div %s, %sqrt_d : (tensor<1x4x4x4xf32>, tensor<f32>) -> tensor<1x4x4x4xf32>
  %p = colossal.softmax %ss {axis = 3 : i64} : tensor<1x4x4x4xf32>
  %o = colossal.matmul %p, %vr : (tensor<1x4x4x4xf32>, tensor<1x4x4x16xf32>) -> tensor<1x4x4x16xf32>
  return %o : tensor<1x4x4x16xf32>
}

// -----

// The repeat_interleave chain with the heads concatenated out of order (kv head 1 first): query
// head h reads kv head 1 - h / 2, which is not the fused op's grouping. The attention fuses on
// the repeated k and v (the concats stay).
// CHECK-LABEL: func.func @gqa_interleave_out_of_order_keeps_repeat
// CHECK:      %[[KR:.*]] = colossal.concat %{{.*}}, %{{.*}} {axis = 1 : i64}
// CHECK:      %[[VR:.*]] = colossal.concat %{{.*}}, %{{.*}} {axis = 1 : i64}
// CHECK:      colossal.attention %{{.*}}, %[[KR]], %[[VR]] {causal = false
// CHECK-SAME:   : (tensor<1x4x4x16xf32>, tensor<1x4x4x16xf32>, tensor<1x4x4x16xf32>) -> tensor<1x4x4x16xf32>
func.func @gqa_interleave_out_of_order_keeps_repeat(%q: tensor<1x4x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x4x4x16xf32> {
  %k0, %k1 = colossal.split %k {axis = 1 : i64} : tensor<1x2x4x16xf32> -> tensor<1x1x4x16xf32>, tensor<1x1x4x16xf32>
  %k0u = colossal.reshape %k0 : tensor<1x1x4x16xf32> -> tensor<1x1x1x4x16xf32>
  %k0e = colossal.expand %k0u : tensor<1x1x1x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %k0r = colossal.reshape %k0e : tensor<1x1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  %k1u = colossal.reshape %k1 : tensor<1x1x4x16xf32> -> tensor<1x1x1x4x16xf32>
  %k1e = colossal.expand %k1u : tensor<1x1x1x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %k1r = colossal.reshape %k1e : tensor<1x1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  %kr = colossal.concat %k1r, %k0r {axis = 1 : i64} : (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> tensor<1x4x4x16xf32>
  %v0, %v1 = colossal.split %v {axis = 1 : i64} : tensor<1x2x4x16xf32> -> tensor<1x1x4x16xf32>, tensor<1x1x4x16xf32>
  %v0u = colossal.reshape %v0 : tensor<1x1x4x16xf32> -> tensor<1x1x1x4x16xf32>
  %v0e = colossal.expand %v0u : tensor<1x1x1x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %v0r = colossal.reshape %v0e : tensor<1x1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  %v1u = colossal.reshape %v1 : tensor<1x1x4x16xf32> -> tensor<1x1x1x4x16xf32>
  %v1e = colossal.expand %v1u : tensor<1x1x1x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %v1r = colossal.reshape %v1e : tensor<1x1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  %vr = colossal.concat %v1r, %v0r {axis = 1 : i64} : (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> tensor<1x4x4x16xf32>
  %kt = colossal.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x4x16xf32>) -> tensor<1x4x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x4x4x16xf32>, tensor<1x4x16x4xf32>) -> tensor<1x4x4x4xf32>
  %p = colossal.softmax %s {axis = 3 : i64} : tensor<1x4x4x4xf32>
  %o = colossal.matmul %p, %vr : (tensor<1x4x4x4xf32>, tensor<1x4x4x16xf32>) -> tensor<1x4x4x16xf32>
  return %o : tensor<1x4x4x16xf32>
}

// -----

// torch's scaled_dot_product_attention export: q and kᵀ each multiplied by √scale, and a
// runtime attention mask added. The two factors multiply into `scale`; the mask becomes the
// additive mask operand.
// CHECK-LABEL: func.func @sdpa_additive_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x3x16xf32>, %[[K:.*]]: tensor<2x4x5x16xf32>, %[[V:.*]]: tensor<2x4x5x8xf32>, %[[M:.*]]: tensor<2x1x3x5xf32>)
// CHECK-NEXT: %[[O:.*]] = colossal.attention %[[Q]], %[[K]], %[[V]], %[[M]] {causal = false, scale = 2.500000e-01 : f32}
// CHECK-SAME:   : (tensor<2x4x3x16xf32>, tensor<2x4x5x16xf32>, tensor<2x4x5x8xf32>, tensor<2x1x3x5xf32>) -> tensor<2x4x3x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @sdpa_additive_mask(%q: tensor<2x4x3x16xf32>, %k: tensor<2x4x5x16xf32>, %v: tensor<2x4x5x8xf32>, %mask: tensor<2x1x3x5xf32>) -> tensor<2x4x3x8xf32> {
  %sqrt_scale = colossal.constant dense<0.5> : tensor<1xf32>
  %qs = colossal.mul %q, %sqrt_scale : (tensor<2x4x3x16xf32>, tensor<1xf32>) -> tensor<2x4x3x16xf32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x5x16xf32>) -> tensor<2x4x16x5xf32>
  %kts = colossal.mul %kt, %sqrt_scale : (tensor<2x4x16x5xf32>, tensor<1xf32>) -> tensor<2x4x16x5xf32>
  %s = colossal.matmul %qs, %kts : (tensor<2x4x3x16xf32>, tensor<2x4x16x5xf32>) -> tensor<2x4x3x5xf32>
  %m = colossal.add %s, %mask : (tensor<2x4x3x5xf32>, tensor<2x1x3x5xf32>) -> tensor<2x4x3x5xf32>
  %p = colossal.softmax %m {axis = 3 : i64} : tensor<2x4x3x5xf32>
  %o = colossal.matmul %p, %v : (tensor<2x4x3x5xf32>, tensor<2x4x5x8xf32>) -> tensor<2x4x3x8xf32>
  return %o : tensor<2x4x3x8xf32>
}

// -----

// GPT-2 with a padding mask: the causal Where first, then the runtime attention mask added.
// Both are recognised: causal = true and the additive mask operand.
// CHECK-LABEL: func.func @causal_and_padding_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x16xf32>, %[[K:.*]]: tensor<1x2x4x16xf32>, %[[V:.*]]: tensor<1x2x4x16xf32>, %[[M:.*]]: tensor<1x1x1x4xf32>)
// CHECK-NEXT: colossal.attention %[[Q]], %[[K]], %[[V]], %[[M]] {causal = true, scale = 2.500000e-01 : f32}
func.func @causal_and_padding_mask(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>, %pad: tensor<1x1x1x4xf32>) -> tensor<1x2x4x16xf32> {
  %sqrt_d = colossal.constant dense<4.0> : tensor<f32>
  %min = colossal.constant dense<-3.40282347E+38> : tensor<f32>
  %keep = colossal.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %ss = colossal.div %s, %sqrt_d : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %w = colossal.where %keep, %ss, %min : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %m = colossal.add %w, %pad : (tensor<1x2x4x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %m {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// Decoding with a KV cache: 2 new queries against 4 keys. The causal pattern is aligned to the
// bottom right (query i sees keys j <= i + Tk - Tq), which is what `causal` means.
// CHECK-LABEL: func.func @causal_kv_cache_bottom_right
// CHECK-NEXT: colossal.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = true, scale = 2.500000e-01 : f32}
func.func @causal_kv_cache_bottom_right(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x2x2x16xf32> {
  %sqrt_d = colossal.constant dense<4.0> : tensor<f32>
  %mask = colossal.constant dense<[[0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<2x4xf32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x2x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x2x4xf32>
  %ss = colossal.div %s, %sqrt_d : (tensor<1x2x2x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
  %m = colossal.add %mask, %ss : (tensor<2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %p = colossal.softmax %m {axis = 3 : i64} : tensor<1x2x2x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

// -----

// A constant mask that is NOT the causal pattern (top-left aligned tril with Tq < Tk: query 0
// sees only key 0) is kept as a mask operand, with causal = false.
// CHECK-LABEL: func.func @constant_mask_not_causal
// CHECK:      %[[MASK:.*]] = colossal.constant dense<{{.*}}> : tensor<2x4xf32>
// CHECK-NEXT: colossal.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[MASK]] {causal = false, scale = 2.500000e-01 : f32}
func.func @constant_mask_not_causal(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x2x2x16xf32> {
  %sqrt_d = colossal.constant dense<4.0> : tensor<f32>
  %mask = colossal.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000]]> : tensor<2x4xf32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x2x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x2x4xf32>
  %ss = colossal.div %s, %sqrt_d : (tensor<1x2x2x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
  %m = colossal.add %ss, %mask : (tensor<1x2x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2x4xf32>
  %p = colossal.softmax %m {axis = 3 : i64} : tensor<1x2x2x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

// -----

// A runtime boolean keep-mask through Where(mask, scores, -inf) becomes an i1 mask operand.
// CHECK-LABEL: func.func @where_runtime_keep_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x16xf32>, %[[K:.*]]: tensor<1x2x4x16xf32>, %[[V:.*]]: tensor<1x2x4x16xf32>, %[[KEEP:.*]]: tensor<1x1x4x4xi1>)
// CHECK-NEXT: colossal.attention %[[Q]], %[[K]], %[[V]], %[[KEEP]] {causal = false, scale = 1.000000e+00 : f32}
func.func @where_runtime_keep_mask(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>, %keep: tensor<1x1x4x4xi1>) -> tensor<1x2x4x16xf32> {
  %ninf = colossal.constant dense<0xFF800000> : tensor<f32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %w = colossal.where %keep, %s, %ninf : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %w {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// The inverted form Where(masked, -inf, scores): the keep-mask operand is masked == false.
// CHECK-LABEL: func.func @where_runtime_masked_inverted
// CHECK-SAME: %[[MASKED:[^:]*]]: tensor<1x1x4x4xi1>
// CHECK:      %[[F:.*]] = colossal.constant dense<false> : tensor<i1>
// CHECK-NEXT: %[[KEEP:.*]] = colossal.equal %[[MASKED]], %[[F]] : (tensor<1x1x4x4xi1>, tensor<i1>) -> tensor<1x1x4x4xi1>
// CHECK-NEXT: colossal.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[KEEP]] {causal = false
func.func @where_runtime_masked_inverted(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>, %masked: tensor<1x1x4x4xi1>) -> tensor<1x2x4x16xf32> {
  %ninf = colossal.constant dense<0xFF800000> : tensor<f32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %w = colossal.where %masked, %ninf, %s : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %w {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// k arrives as [B, T, H, D] and is transposed straight to kᵀ = [B, H, D, T] (perm 0,2,3,1):
// the fused op gets k = transpose(k, 0,2,1,3). The scale sits on q as a Div.
// CHECK-LABEL: func.func @k_from_bthd
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x16xf32>, %[[KR:.*]]: tensor<1x4x2x16xf32>, %[[V:.*]]: tensor<1x2x4x16xf32>)
// CHECK-NEXT: %[[K:.*]] = colossal.transpose %[[KR]] {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x16xf32>) -> tensor<1x2x4x16xf32>
// CHECK-NEXT: colossal.attention %[[Q]], %[[K]], %[[V]] {causal = false, scale = 2.500000e-01 : f32}
func.func @k_from_bthd(%q: tensor<1x2x4x16xf32>, %k: tensor<1x4x2x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32> {
  %sqrt_d = colossal.constant dense<4.0> : tensor<f32>
  %qs = colossal.div %q, %sqrt_d : (tensor<1x2x4x16xf32>, tensor<f32>) -> tensor<1x2x4x16xf32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x2x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %qs, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %s {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// Heads repeated with the tile order (unsqueeze at dim 1: head h reads kv head h mod Hkv) are not
// repeat_kv: the attention fuses, but on the repeated k and v.
// CHECK-LABEL: func.func @gqa_tile_order_keeps_repeat
// CHECK:      %[[KR:.*]] = colossal.reshape %{{.*}} : tensor<1x2x2x4x16xf32> -> tensor<1x4x4x16xf32>
// CHECK:      %[[VR:.*]] = colossal.reshape %{{.*}} : tensor<1x2x2x4x16xf32> -> tensor<1x4x4x16xf32>
// CHECK-NEXT: colossal.attention %{{.*}}, %[[KR]], %[[VR]] {causal = false
func.func @gqa_tile_order_keeps_repeat(%q: tensor<1x4x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x4x4x16xf32> {
  %k1 = colossal.reshape %k : tensor<1x2x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %k2 = colossal.expand %k1 : tensor<1x1x2x4x16xf32> -> tensor<1x2x2x4x16xf32>
  %kr = colossal.reshape %k2 : tensor<1x2x2x4x16xf32> -> tensor<1x4x4x16xf32>
  %v1 = colossal.reshape %v : tensor<1x2x4x16xf32> -> tensor<1x1x2x4x16xf32>
  %v2 = colossal.expand %v1 : tensor<1x1x2x4x16xf32> -> tensor<1x2x2x4x16xf32>
  %vr = colossal.reshape %v2 : tensor<1x2x2x4x16xf32> -> tensor<1x4x4x16xf32>
  %kt = colossal.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x4x16xf32>) -> tensor<1x4x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x4x4x16xf32>, tensor<1x4x16x4xf32>) -> tensor<1x4x4x4xf32>
  %p = colossal.softmax %s {axis = 3 : i64} : tensor<1x4x4x4xf32>
  %o = colossal.matmul %p, %vr : (tensor<1x4x4x4xf32>, tensor<1x4x4x16xf32>) -> tensor<1x4x4x16xf32>
  return %o : tensor<1x4x4x16xf32>
}

// -----

// NOT fused: the softmax normalizes over queries (axis 2), not keys.
// CHECK-LABEL: func.func @no_fuse_softmax_wrong_axis
// CHECK-NOT:  colossal.attention
// CHECK:      colossal.softmax
func.func @no_fuse_softmax_wrong_axis(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32> {
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %s {axis = 2 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// NOT fused: Where(mask, scores, 0) does not mask (exp(0 - max) is not 0).
// CHECK-LABEL: func.func @no_fuse_where_fill_zero
// CHECK-NOT:  colossal.attention
// CHECK:      colossal.where
func.func @no_fuse_where_fill_zero(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>, %keep: tensor<1x1x4x4xi1>) -> tensor<1x2x4x16xf32> {
  %zero = colossal.constant dense<0.0> : tensor<f32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %w = colossal.where %keep, %s, %zero : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %w {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// NOT fused: a per-head scale (a [1, H, 1, 1] tensor, not a scalar) has no `scale` attribute
// to become.
// CHECK-LABEL: func.func @no_fuse_per_head_scale
// CHECK-NOT:  colossal.attention
func.func @no_fuse_per_head_scale(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32> {
  %scale = colossal.constant dense<[[[[0.25]], [[0.5]]]]> : tensor<1x2x1x1xf32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %ss = colossal.mul %s, %scale : (tensor<1x2x4x4xf32>, tensor<1x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %ss {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

// -----

// NOT fused: the attention probabilities are also returned (output_attentions), so fusing would
// compute them twice.
// CHECK-LABEL: func.func @no_fuse_probs_escape
// CHECK-NOT:  colossal.attention
func.func @no_fuse_probs_escape(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> (tensor<1x2x4x16xf32>, tensor<1x2x4x4xf32>) {
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %s {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o, %p : tensor<1x2x4x16xf32>, tensor<1x2x4x4xf32>
}

// -----

// NOT fused: a scale applied after the mask would scale the mask too; the pattern only accepts
// masks added to the scaled scores.
// CHECK-LABEL: func.func @no_fuse_scale_after_mask
// CHECK-NOT:  colossal.attention
func.func @no_fuse_scale_after_mask(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>, %mask: tensor<1x1x4x4xf32>) -> tensor<1x2x4x16xf32> {
  %sqrt_d = colossal.constant dense<4.0> : tensor<f32>
  %kt = colossal.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x16xf32>) -> tensor<1x2x16x4xf32>
  %s = colossal.matmul %q, %kt : (tensor<1x2x4x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x4x4xf32>
  %m = colossal.add %s, %mask : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %ss = colossal.div %m, %sqrt_d : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = colossal.softmax %ss {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = colossal.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}

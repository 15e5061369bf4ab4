//===- paged_attention.cpp - Paged KV cache: append, block copy, attention (f32) -------------===//
//
// The KV-cache kernels of serving (docs/serving.md "KV-cache kernels"). The cache of one layer is
// two f32 tensors, k_cache [NB, Hkv, BS, D] and v_cache [NB, Hkv, BS, Dv]: NB blocks of BS token
// slots (serve/BlockManager.h); slot s is block s / BS, offset s % BS, and one (block, kv head)
// is a contiguous [BS, D] tile. A batch is ragged: sequence i contributes q_len_i tokens, stored
// one after the other (T = Σ q_len_i rows), no padding.
//
// kv_append      inputs  k_cache, v_cache, k [T, Hkv, D], v [T, Hkv, Dv], slot_mapping [T] i32
//                outputs k_cache, v_cache (the same buffers: colossal.kv_append is an update op),
//                updated in place: row t goes to slot slot_mapping[t]
//                (−1: a padding row, skipped); every other slot keeps its contents. Slots other
//                than −1 are distinct (the block manager hands out each once; of two rows sent to
//                one slot, which lands is unspecified). Error (at run time): a slot outside
//                [−1, NB·BS).
// kv_copy_blocks inputs  block_copies [N, 2] i32 (src, dst) — the block manager's copy-on-write
//                outputs k_cache, v_cache, in place: block dst (every head and slot) = block src,
//                in order. Error: a block outside [0, NB).
// paged_attention inputs q [T, Hq, D], k_cache, v_cache, block_tables [S, MB] i32,
//                context_lens [S] i32, query_start_loc [S + 1] i32; output y [T, Hq, Dv].
//                Rows [query_start_loc[S], T) belong to no sequence (a program's padding up
//                to its token count) and come out zero.
//                Sequence i owns rows [query_start_loc[i], query_start_loc[i+1]) of q and y, its
//                q_len queries at positions [ctx − q_len, ctx), ctx = context_lens[i] (the cache
//                already holds the keys and values of all ctx positions, this step's included:
//                kv_append runs first). Row at position p attends causally to positions [0, p],
//                position j read from block block_tables[i][j / BS] at offset j % BS. GQA: query
//                head h reads kv head h / (Hq / Hkv). attrs: scale (default 1/sqrt(D)).
//                y = softmax(q·kᵀ·scale)·v (Vaswani et al. 2017, §3.2.1).
//                Errors (at run time): query_start_loc not starting at 0, decreasing, or
//                ending past T; q_len > ctx; ctx > MB·BS; a block table entry outside [0, NB) among
//                the ⌈ctx / BS⌉ a sequence reads (entries past those are not read).
//
// Batch invariance. A row's result is a function of its query, its position p and the keys and
// values at positions [0, p] only: not of the other rows of its chunk, the other sequences of the
// batch, where its blocks are, the block size or the thread count. Each row runs the same code in
// the same order: one score per key (a dot product over D in 16 fixed lanes, added in a fixed
// tree), the exact max, the exponentials summed in 16 fixed lanes over key position, and the
// output accumulated over keys in position order; products are fused multiply-adds written out
// (AVX-512 fmadd, else std::fma where the target has FMA) and the file is compiled with
// -ffp-contract=off, so the compiler's contraction choices cannot differ between code paths. Up to 4 consecutive rows of a chunk share each key and value load; the
// arithmetic of each row is the same as alone. So a prompt prefilled whole, in chunks of 16 or
// 64, or decoded token by token gives bit-identical rows, and a request's tokens do not change
// with what else is running (vLLM #5543, #7845 describe what happens otherwise).
//
// Work items are (sequence, tile of 16 query rows, query head), run in parallel (OpenMP, dynamic)
// so that a long prefill chunk and many decodes in one batch spread over the threads. Scratch per
// thread: for each of 4 rows, its scores (MB·BS floats) and its output accumulator (Dv floats).
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "FastMath.h"

#include <cmath>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <limits>

namespace colossal::runtime::cpu {
namespace {

constexpr int kLanes = 16;        // fixed accumulation lanes (one AVX-512 vector of f32)
constexpr int64_t kRowTile = 16;  // query rows per work item
constexpr int kRowBlock = 4;      // query rows sharing each key and value load

/// c + a·b, rounded once where the target has FMA, else rounded twice. This file is compiled with
/// -ffp-contract=off: no product and sum is fused unless written so, so that a scalar loop, its
/// vectorized body and its epilogue compute the same bits (vectorization and alignment peeling
/// depend on trip counts and addresses, which a row must not depend on).
inline float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// Σ lane[0..16) in a fixed tree: t_i = l_i + l_{i+8}; t_i += t_{i+4}; (t_0 + t_2) + (t_1 + t_3).
inline float sumLanes(const float *lane) {
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = lane[i] + lane[i + 8];
  for (int i = 0; i < 4; ++i) t[i] += t[i + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

#if defined(__AVX512F__)
/// sumLanes of a vector, in the same tree with shuffles.
inline float sumLanes(__m512 v) {
  const __m256 lo = _mm256_castpd_ps(_mm512_castpd512_pd256(_mm512_castps_pd(v)));
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 t8 = _mm256_add_ps(lo, hi);
  const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  return _mm_cvtss_f32(_mm_add_ss(t2, _mm_shuffle_ps(t2, t2, 1)));
}

inline __mmask16 tailMask(int64_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1); }
#endif

/// Prefetches the cache lines of n floats at p into L1 (a KV row of the next block).
inline void prefetchRow(const float *p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 3);
}

/// out[r] = q_r · k over n floats for R query rows (q_r = q + r·qStride), sharing the loads of k:
/// lane i of row r sums the products at indices ≡ i (mod 16) in index order, then sumLanes. Row r's
/// result is the same bits for every R.
template <int R> inline void dots(const float *q, int64_t qStride, const float *k, int64_t n, float *out) {
#if defined(__AVX512F__)
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512 kv = _mm512_loadu_ps(k + i);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q + r * qStride + i), kv, acc[r]);
  }
  if (i < n) {  // the lanes past n keep their sums, as in the portable loop
    const __mmask16 m = tailMask(n - i);
    const __m512 kv = _mm512_maskz_loadu_ps(m, k + i);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, q + r * qStride + i), kv, acc[r], m);
  }
  for (int r = 0; r < R; ++r) out[r] = sumLanes(acc[r]);
#else
  float lane[R][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int r = 0; r < R; ++r)
      for (int l = 0; l < kLanes; ++l) lane[r][l] = madd(q[r * qStride + i + l], k[i + l], lane[r][l]);
  for (int r = 0; r < R; ++r)
    for (int l = 0; i + l < n; ++l) lane[r][l] = madd(q[r * qStride + i + l], k[i + l], lane[r][l]);
  for (int r = 0; r < R; ++r) out[r] = sumLanes(lane[r]);
#endif
}

/// Scores [0, n) → exp(score − max) in place; returns their sum (>= 1: the max's own term is e⁰),
/// summed in 16 fixed lanes by key position. Out of line: one copy of its arithmetic for all rows.
[[gnu::noinline]] float softmaxNumerators(float *scores, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, scores[j]);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) scores[j] = fastExp(scores[j] - mx);
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += scores[j + l];
  for (int l = 0; j + l < n; ++l) lane[l] += scores[j + l];
  return sumLanes(lane);
}

// ---------------------------------------------------------------------------- shapes and checks

struct CacheDims {
  int64_t NB, Hkv, BS, D, Dv;
};

CacheDims cacheDims(const TensorRef &K, const TensorRef &V) {
  return {K.shape[0], K.shape[1], K.shape[2], K.shape[3], V.shape[3]};
}

llvm::Error verifyCache(const TensorRef &K, const TensorRef &V) {
  if (llvm::Error e = verifyDType(K, DType::F32, "k_cache")) return e;
  if (llvm::Error e = verifyDType(V, DType::F32, "v_cache")) return e;
  if (K.rank() != 4 || V.rank() != 4)
    return kernelError("k_cache and v_cache must have rank 4 ([blocks, kv heads, block size, head dim]), got " +
                       shapeToString(K.shape) + " and " + shapeToString(V.shape));
  if (K.shape[0] != V.shape[0] || K.shape[1] != V.shape[1] || K.shape[2] != V.shape[2])
    return kernelError("k_cache " + shapeToString(K.shape) + " and v_cache " + shapeToString(V.shape) +
                       " differ in blocks, kv heads or block size");
  if (K.shape[1] < 1 || K.shape[2] < 1) return kernelError("k_cache needs >= 1 kv head and block size >= 1");
  return llvm::Error::success();
}

llvm::Error verifyIndexVector(const TensorRef &t, int64_t n, llvm::StringRef what) {
  if (llvm::Error e = verifyDType(t, DType::I32, what)) return e;
  if (t.rank() != 1 || t.shape[0] != n)
    return kernelError(what + " must be [" + llvm::Twine(n) + "], got " + shapeToString(t.shape));
  return llvm::Error::success();
}

// ---------------------------------------------------------------------------- kv_append

llvm::Error verifyKvAppend(const KernelCall &c) {
  const TensorRef &K = c.inputs[2], &V = c.inputs[3], &slots = c.inputs[4];
  const TensorRef &Kc = c.outputs[0], &Vc = c.outputs[1];
  if (c.inputs[0].data != Kc.data || c.inputs[1].data != Vc.data)
    return kernelError("kv_append writes k_cache and v_cache in place: inputs 0 and 1 must be its outputs");
  if (llvm::Error e = verifyCache(Kc, Vc)) return e;
  if (llvm::Error e = verifyDType(K, DType::F32, "k")) return e;
  if (llvm::Error e = verifyDType(V, DType::F32, "v")) return e;
  const CacheDims d = cacheDims(Kc, Vc);
  const int64_t T = K.rank() == 3 ? K.shape[0] : -1;
  if (K.shape != Shape{T, d.Hkv, d.D} || V.shape != Shape{T, d.Hkv, d.Dv})
    return kernelError("k " + shapeToString(K.shape) + " and v " + shapeToString(V.shape) +
                       " must be [T, kv heads, head dim] matching k_cache " + shapeToString(Kc.shape) +
                       " and v_cache " + shapeToString(Vc.shape));
  return verifyIndexVector(slots, T, "slot_mapping");
}

llvm::Error runKvAppend(const KernelCall &c) {
  const TensorRef &K = c.inputs[2], &V = c.inputs[3];
  const CacheDims d = cacheDims(c.outputs[0], c.outputs[1]);
  const int32_t *slots = c.inputs[4].as<const int32_t>();
  const int64_t T = K.shape[0], numSlots = d.NB * d.BS;
  for (int64_t t = 0; t < T; ++t)
    if (slots[t] < -1 || slots[t] >= numSlots)
      return kernelError("slot_mapping[" + llvm::Twine(t) + "] = " + llvm::Twine(slots[t]) + " is outside [-1, " +
                         llvm::Twine(numSlots) + ")");
  const float *k = K.as<const float>(), *v = V.as<const float>();
  float *kc = c.outputs[0].as<float>(), *vc = c.outputs[1].as<float>();
  parallelFor(T, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (slots[t] < 0) continue;
      const int64_t block = slots[t] / d.BS, offset = slots[t] % d.BS;
      for (int64_t h = 0; h < d.Hkv; ++h) {
        const int64_t dst = (block * d.Hkv + h) * d.BS + offset;
        std::memcpy(kc + dst * d.D, k + (t * d.Hkv + h) * d.D, d.D * sizeof(float));
        std::memcpy(vc + dst * d.Dv, v + (t * d.Hkv + h) * d.Dv, d.Dv * sizeof(float));
      }
    }
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------------------- kv_copy_blocks

llvm::Error verifyKvCopyBlocks(const KernelCall &c) {
  const TensorRef &copies = c.inputs[0];
  if (llvm::Error e = verifyCache(c.outputs[0], c.outputs[1])) return e;
  if (llvm::Error e = verifyDType(copies, DType::I32, "block_copies")) return e;
  if (copies.rank() != 2 || copies.shape[1] != 2)
    return kernelError("block_copies must be [N, 2] (src, dst), got " + shapeToString(copies.shape));
  return llvm::Error::success();
}

llvm::Error runKvCopyBlocks(const KernelCall &c) {
  const CacheDims d = cacheDims(c.outputs[0], c.outputs[1]);
  const int32_t *copies = c.inputs[0].as<const int32_t>();
  const int64_t n = c.inputs[0].shape[0];
  for (int64_t i = 0; i < 2 * n; ++i)
    if (copies[i] < 0 || copies[i] >= d.NB)
      return kernelError("block_copies[" + llvm::Twine(i / 2) + "][" + llvm::Twine(i % 2) + "] = " +
                         llvm::Twine(copies[i]) + " is outside [0, " + llvm::Twine(d.NB) + ")");
  float *kc = c.outputs[0].as<float>(), *vc = c.outputs[1].as<float>();
  const int64_t kBlock = d.Hkv * d.BS * d.D, vBlock = d.Hkv * d.BS * d.Dv;
  // In order: a later copy may read what an earlier one wrote.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = copies[2 * i], dst = copies[2 * i + 1];
    if (src == dst) continue;
    std::memcpy(kc + dst * kBlock, kc + src * kBlock, kBlock * sizeof(float));
    std::memcpy(vc + dst * vBlock, vc + src * vBlock, vBlock * sizeof(float));
  }
  return llvm::Error::success();
}

// ---------------------------------------------------------------------------- paged_attention

struct AttnDims {
  int64_t T, Hq, S, MB;
  CacheDims cache;
};

AttnDims attnDims(const KernelCall &c) {
  return {c.inputs[0].shape[0], c.inputs[0].shape[1], c.inputs[3].shape[0], c.inputs[3].shape[1],
          cacheDims(c.inputs[1], c.inputs[2])};
}

llvm::Error verifyPagedAttention(const KernelCall &c) {
  const TensorRef &Q = c.inputs[0], &tables = c.inputs[3], &Y = c.outputs[0];
  if (llvm::Error e = verifyCache(c.inputs[1], c.inputs[2])) return e;
  if (llvm::Error e = verifyDType(Q, DType::F32, "q")) return e;
  if (llvm::Error e = verifyDType(Y, DType::F32, "y")) return e;
  if (llvm::Error e = verifyDType(tables, DType::I32, "block_tables")) return e;
  if (Q.rank() != 3 || tables.rank() != 2)
    return kernelError("q must be [T, heads, head dim] and block_tables [sequences, blocks], got " +
                       shapeToString(Q.shape) + " and " + shapeToString(tables.shape));
  const AttnDims d = attnDims(c);
  if (Q.shape[2] != d.cache.D)
    return kernelError("q " + shapeToString(Q.shape) + " and k_cache " + shapeToString(c.inputs[1].shape) +
                       " differ in head dim");
  if (d.Hq % d.cache.Hkv != 0)
    return kernelError("query heads " + llvm::Twine(d.Hq) + " not a multiple of kv heads " + llvm::Twine(d.cache.Hkv));
  if (llvm::Error e = verifyIndexVector(c.inputs[4], d.S, "context_lens")) return e;
  if (llvm::Error e = verifyIndexVector(c.inputs[5], d.S + 1, "query_start_loc")) return e;
  const Shape want = {d.T, d.Hq, d.cache.Dv};
  if (Y.shape != want)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  if (c.hasAttr("scale") && !std::isfinite(c.attrFloat("scale", 1.0))) return kernelError("scale must be finite");
  return llvm::Error::success();
}

/// The data-dependent checks of paged_attention (header comment), before any row runs.
llvm::Error checkBatch(const KernelCall &c, const AttnDims &d) {
  const int32_t *tables = c.inputs[3].as<const int32_t>(), *ctx = c.inputs[4].as<const int32_t>(),
                *qsl = c.inputs[5].as<const int32_t>();
  if (qsl[0] != 0) return kernelError("query_start_loc[0] = " + llvm::Twine(qsl[0]) + ", must be 0");
  if (qsl[d.S] > d.T)
    return kernelError("query_start_loc[" + llvm::Twine(d.S) + "] = " + llvm::Twine(qsl[d.S]) +
                       " exceeds the number of query rows " + llvm::Twine(d.T));
  for (int64_t s = 0; s < d.S; ++s) {
    const int64_t qLen = int64_t(qsl[s + 1]) - qsl[s];
    const std::string where = "sequence " + std::to_string(s) + ": ";
    if (qLen < 0)
      return kernelError(where + "query_start_loc decreases (" + llvm::Twine(qsl[s]) + " then " +
                         llvm::Twine(qsl[s + 1]) + ")");
    if (ctx[s] > d.MB * d.cache.BS)
      return kernelError(where + "context length " + llvm::Twine(ctx[s]) + " exceeds the block table's " +
                         llvm::Twine(d.MB) + " blocks of " + llvm::Twine(d.cache.BS));
    if (qLen > ctx[s])
      return kernelError(where + llvm::Twine(qLen) + " queries but context length " + llvm::Twine(ctx[s]));
    for (int64_t b = 0; b < (ctx[s] + d.cache.BS - 1) / d.cache.BS; ++b) {
      const int32_t block = tables[s * d.MB + b];
      if (block < 0 || block >= d.cache.NB)
        return kernelError(where + "block_tables[" + llvm::Twine(s) + "][" + llvm::Twine(b) + "] = " +
                           llvm::Twine(block) + " is outside [0, " + llvm::Twine(d.cache.NB) + ")");
    }
  }
  return llvm::Error::success();
}

/// Per row of a row block: its scores (MB·BS floats) and its output accumulator (Dv floats).
size_t scoreFloats(const AttnDims &d) { return static_cast<size_t>((d.MB * d.cache.BS + 15) / 16 * 16); }
size_t accFloats(const AttnDims &d) { return static_cast<size_t>((d.cache.Dv + 15) / 16 * 16); }
size_t perThreadFloats(const AttnDims &d) { return kRowBlock * (scoreFloats(d) + accFloats(d)); }

size_t pagedAttentionWorkspace(const KernelCall &c, int threads) {
  const AttnDims d = attnDims(c);
  return sizeof(int64_t) * ((d.S + 1 + 7) / 8 * 8) + perThreadFloats(d) * sizeof(float) * std::max(threads, 1);
}

/// Where one work item reads and writes: one query head of one sequence.
struct RowArgs {
  const float *q;  // the first row's query; row r at q + r·qStride
  float *y;        // the first row's output; row r at y + r·yStride
  int64_t qStride, yStride;
  const int32_t *table;
  const float *kCache, *vCache;
  int64_t hk;  // kv head
  float scale;
  float *scores, *acc;  // scratch: R · scoreFloats, R · accFloats
  int64_t scoreStride, accStride;
};

#if defined(__AVX512F__)
/// weightedValues for the NV ≤ 4 vectors of output columns [c0, c0 + width): R × NV accumulators
/// that stay in registers over all keys (NV a constant, so the loops unroll; with it a runtime
/// count GCC kept them on the stack, a store-to-load round trip per key and row).
template <int R, bool SamePosition, int NV>
void weightedColumns(const RowArgs &a, int64_t p0, const CacheDims &d, const float *inv, int64_t c0, int64_t width) {
  const int64_t last = SamePosition ? p0 + 1 : p0 + R;
  auto visible = [&](int64_t j, int r) { return SamePosition || j <= p0 + r; };
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v) mask[v] = tailMask(width - v * kLanes);
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t j0 = 0, b = 0; j0 < last; j0 += d.BS, ++b) {
    const float *vb = a.vCache + (int64_t(a.table[b]) * d.Hkv + a.hk) * d.BS * d.Dv + c0;
    const float *vNext =
        j0 + d.BS < last ? a.vCache + (int64_t(a.table[b + 1]) * d.Hkv + a.hk) * d.BS * d.Dv + c0 : nullptr;
    for (int64_t j = j0; j < std::min(j0 + d.BS, last); ++j) {
      if (vNext) prefetchRow(vNext + (j - j0) * d.Dv, width);
      __m512 vv[NV];
      for (int v = 0; v < NV; ++v) vv[v] = _mm512_maskz_loadu_ps(mask[v], vb + (j - j0) * d.Dv + v * kLanes);
      for (int r = 0; r < R; ++r) {
        if (!visible(j, r)) continue;
        const __m512 w = _mm512_set1_ps(a.scores[r * a.scoreStride + j]);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(w, vv[v], acc[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(inv[r]);
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(a.y + r * a.yStride + c0 + v * kLanes, mask[v], _mm512_mul_ps(acc[r][v], s));
  }
}
#endif

/// y_r = inv_r · Σ_{j <= p0 + r} w_rj · v_j for R rows (w_r = a.scores row r), accumulated per
/// output element over keys in position order, one fused multiply-add per key. SamePosition: the
/// R rows all sit at p0 (query heads of one KV group), so each sums over j <= p0.
template <int R, bool SamePosition = false>
void weightedValues(const RowArgs &a, int64_t p0, const CacheDims &d, const float *inv) {
#if defined(__AVX512F__)
  // 64 output columns at a time (the last block maybe fewer), in registers over all keys.
  for (int64_t c0 = 0; c0 < d.Dv; c0 += 4 * kLanes) {
    const int64_t width = std::min<int64_t>(4 * kLanes, d.Dv - c0);
    switch ((width + kLanes - 1) / kLanes) {
    case 1: weightedColumns<R, SamePosition, 1>(a, p0, d, inv, c0, width); break;
    case 2: weightedColumns<R, SamePosition, 2>(a, p0, d, inv, c0, width); break;
    case 3: weightedColumns<R, SamePosition, 3>(a, p0, d, inv, c0, width); break;
    default: weightedColumns<R, SamePosition, 4>(a, p0, d, inv, c0, width); break;
    }
  }
#else
  const int64_t last = SamePosition ? p0 + 1 : p0 + R;
  auto visible = [&](int64_t j, int r) { return SamePosition || j <= p0 + r; };
  for (int r = 0; r < R; ++r) std::fill(a.acc + r * a.accStride, a.acc + r * a.accStride + d.Dv, 0.0f);
  for (int64_t j0 = 0, b = 0; j0 < last; j0 += d.BS, ++b) {
    const float *v = a.vCache + (int64_t(a.table[b]) * d.Hkv + a.hk) * d.BS * d.Dv;
    for (int64_t j = j0; j < std::min(j0 + d.BS, last); ++j) {
      const float *vj = v + (j - j0) * d.Dv;
      for (int r = 0; r < R; ++r) {
        if (!visible(j, r)) continue;
        const float w = a.scores[r * a.scoreStride + j];
        float *acc = a.acc + r * a.accStride;
        for (int64_t c = 0; c < d.Dv; ++c) acc[c] = madd(w, vj[c], acc[c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < d.Dv; ++c) a.y[r * a.yStride + c] = a.acc[r * a.accStride + c] * inv[r];
#endif
}

/// R query rows at positions p0 .. p0 + R − 1 (row r attends to keys [0, p0 + r]):
/// y_r = softmax(scale · q_r·kⱼ) · vⱼ. Keys [0, p0] are visible to every row and go through the
/// R-row loops (one load of each key and value for R rows); the few keys past p0 go row by row.
/// SamePosition: the R rows are the query heads of one KV group at one position p0 (a decode
/// step), so every row sees keys [0, p0]; each key and value is loaded once for the R heads
/// instead of once per head. Per row, every operation and its order is the same whatever R is and
/// whichever rows share a block, so rows are bit-identical however a batch is cut (header comment).
template <int R, bool SamePosition = false> void attendRows(const RowArgs &a, int64_t p0, const CacheDims &d) {
  const int64_t shared = p0 + 1, last = SamePosition ? shared : p0 + R;  // keys seen by all rows; by the last row
  for (int64_t j0 = 0, b = 0; j0 < last; j0 += d.BS, ++b) {
    const float *k = a.kCache + (int64_t(a.table[b]) * d.Hkv + a.hk) * d.BS * d.D;
    // The next block is elsewhere in the pool (the hardware prefetcher cannot guess it): each key
    // row prefetches the same row of the next block, a block ahead of its use.
    const float *kNext = j0 + d.BS < last ? a.kCache + (int64_t(a.table[b + 1]) * d.Hkv + a.hk) * d.BS * d.D : nullptr;
    for (int64_t j = j0; j < std::min(j0 + d.BS, last); ++j) {
      const float *kj = k + (j - j0) * d.D;
      if (kNext) prefetchRow(kNext + (j - j0) * d.D, d.D);
      float out[R];
      if (j < shared) {
        dots<R>(a.q, a.qStride, kj, d.D, out);
        for (int r = 0; r < R; ++r) a.scores[r * a.scoreStride + j] = out[r] * a.scale;
      } else {
        for (int r = static_cast<int>(j - p0); r < R; ++r) {
          dots<1>(a.q + r * a.qStride, 0, kj, d.D, out);
          a.scores[r * a.scoreStride + j] = out[0] * a.scale;
        }
      }
    }
  }
  float inv[R];
  for (int r = 0; r < R; ++r)
    inv[r] = 1.0f / softmaxNumerators(a.scores + r * a.scoreStride, SamePosition ? shared : shared + r);

  weightedValues<R, SamePosition>(a, p0, d, inv);
}

llvm::Error runPagedAttention(const KernelCall &c) {
  const AttnDims d = attnDims(c);
  if (llvm::Error e = checkBatch(c, d)) return e;
  if (d.T == 0 || d.cache.Dv == 0) return llvm::Error::success();
  const float *q = c.inputs[0].as<const float>(), *kc = c.inputs[1].as<const float>(),
              *vc = c.inputs[2].as<const float>();
  const int32_t *tables = c.inputs[3].as<const int32_t>(), *ctx = c.inputs[4].as<const int32_t>(),
                *qsl = c.inputs[5].as<const int32_t>();
  float *y = c.outputs[0].as<float>();
  if (qsl[d.S] < d.T)  // padding rows
    std::memset(y + int64_t(qsl[d.S]) * d.Hq * d.cache.Dv, 0, (d.T - qsl[d.S]) * d.Hq * d.cache.Dv * sizeof(float));
  const float scale = static_cast<float>(c.attrFloat("scale", 1.0 / std::sqrt(static_cast<double>(d.cache.D))));
  const int64_t group = d.Hq / d.cache.Hkv;
  const int64_t heads = std::min<int64_t>(group, kRowBlock);  // query heads a decode item attends together

  // firstItem[s]: the first work item of sequence s; its items are (tile, head), head fastest.
  int64_t *firstItem = static_cast<int64_t *>(c.workspace);
  firstItem[0] = 0;
  for (int64_t s = 0; s < d.S; ++s)
    firstItem[s + 1] = firstItem[s] + (qsl[s + 1] - qsl[s] + kRowTile - 1) / kRowTile * d.Hq;
  const int64_t items = firstItem[d.S];
  float *scratch = reinterpret_cast<float *>(firstItem + (d.S + 1 + 7) / 8 * 8);  // 64-byte aligned
  const size_t perThread = perThreadFloats(d);
  const int threads = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(omp_get_max_threads()), c.threads, items})));

parallelItems(items, threads, [&](int64_t item, int thread) {
    const int64_t s = std::upper_bound(firstItem, firstItem + d.S + 1, item) - firstItem - 1;
    const int64_t local = item - firstItem[s], h = local % d.Hq, tile = local / d.Hq;
    const int64_t qLen = qsl[s + 1] - qsl[s], r0 = tile * kRowTile, r1 = std::min(qLen, r0 + kRowTile);
    float *scores = scratch + perThread * thread;
    RowArgs a;
    a.qStride = d.Hq * d.cache.D;
    a.yStride = d.Hq * d.cache.Dv;
    a.table = tables + s * d.MB;
    a.kCache = kc;
    a.vCache = vc;
    a.hk = h / group;
    a.scale = scale;
    a.scores = scores;
    a.scoreStride = static_cast<int64_t>(scoreFloats(d));
    a.acc = scores + kRowBlock * scoreFloats(d);
    a.accStride = static_cast<int64_t>(accFloats(d));
    // One query row (decode) under GQA: the item of the first head of each run of up to kRowBlock
    // heads of a KV group attends for all of them; the items of the others have nothing to do.
    if (qLen == 1 && heads > 1) {
      if (h % group % heads) return;
      const int64_t row = qsl[s], pos = ctx[s] - 1, n = std::min(heads, group - h % group);
      a.q = q + (row * d.Hq + h) * d.cache.D;
      a.y = y + (row * d.Hq + h) * d.cache.Dv;
      a.qStride = d.cache.D;
      a.yStride = d.cache.Dv;
      switch (n) {
      case 1: attendRows<1>(a, pos, d.cache); break;
      case 2: attendRows<2, true>(a, pos, d.cache); break;
      case 3: attendRows<3, true>(a, pos, d.cache); break;
      default: attendRows<4, true>(a, pos, d.cache); break;
      }
      return;
    }
    for (int64_t r = r0; r < r1; r += kRowBlock) {
      const int64_t row = qsl[s] + r, pos = ctx[s] - qLen + r;
      a.q = q + (row * d.Hq + h) * d.cache.D;
      a.y = y + (row * d.Hq + h) * d.cache.Dv;
      switch (std::min<int64_t>(kRowBlock, r1 - r)) {
      case 1: attendRows<1>(a, pos, d.cache); break;
      case 2: attendRows<2>(a, pos, d.cache); break;
      case 3: attendRows<3>(a, pos, d.cache); break;
      default: attendRows<4>(a, pos, d.cache); break;
      }
    }
  });
  return llvm::Error::success();
}

}  // namespace

void registerPagedAttentionKernels(KernelRegistry &r) {
  KernelDesc append;
  append.op = "kv_append";
  append.minInputs = append.maxInputs = 5;
  append.minOutputs = append.maxOutputs = 2;
  append.verify = verifyKvAppend;
  append.run = runKvAppend;
  r.add(append);

  KernelDesc copy;
  copy.op = "kv_copy_blocks";
  copy.minInputs = copy.maxInputs = 1;
  copy.minOutputs = copy.maxOutputs = 2;
  copy.verify = verifyKvCopyBlocks;
  copy.run = runKvCopyBlocks;
  r.add(copy);

  KernelDesc attn;
  attn.op = "paged_attention";
  attn.minInputs = attn.maxInputs = 6;
  attn.attrs = {{"scale", AttrKind::Float}};
  attn.verify = verifyPagedAttention;
  attn.workspace = pagedAttentionWorkspace;
  attn.run = runPagedAttention;
  r.add(attn);
}

}  // namespace colossal::runtime::cpu

//===- attention.cpp - Fused scaled-dot-product attention CPU kernel (f32) ------------------===//
//
// y [B, Hq, Tq, Dv] = softmax(q·kᵀ·scale + mask [+ causal]) · v, with
//   q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], Hq % Hkv == 0 (GQA/MQA: query head h
//   reads kv head h / (Hq / Hkv)), optional mask broadcastable to [B, Hq, Tq, Tk]: additive f32, or
//   bool (true = keep). causal: key j is visible to query i iff j <= i + Tk - Tq (bottom-right
//   aligned, as for a KV cache). attrs: scale (default 1/sqrt(D)), causal (0/1).
// A query row that sees no key at all (fully masked) yields zeros. bf16 q, k, v
// (colossal-auto-mixed-precision) are widened to f32 first (Widen.h); y is f32.
//
// Algorithm: FlashAttention (Dao et al. 2022) on the CPU. Work items are (batch, head, up to
// kQBlocksPerItem blocks of kBlockQ queries), run in parallel. Each query block walks blocks of
// kBlockK keys, keeping per-row running max m, denominator l and unnormalised output O (online
// softmax, Milakov & Gimelshein 2018):
//   S = scale·Q_blk·K_blkᵀ + mask;  m' = max(m, rowmax S);  P = exp(S - m');
//   l = l·e^{m-m'} + rowsum P;  O = O·e^{m-m'} + P·V_blk;  finally y = O / l.
// Key blocks entirely above the causal diagonal are never visited; the [Tq, Tk] score matrix is
// never formed (only one [kBlockQ, kBlockK] tile per thread). The two tile products are small
// register-blocked GEMMs (4 query rows × 64 lanes with AVX-512, 4 rows × 16 lanes with AVX2,
// portable loops otherwise) over a transposed copy of the keys. The blocks of one item share
// that copy: each key block is transposed once per item, when first visited (the whole head's
// Kᵀ when it fits kKtCacheFloats, else one block at a time).
//
//===----------------------------------------------------------------------------------------===//
#include "AttentionMask.h"
#include "CpuCommon.h"
#include "Widen.h"
#include "FastMath.h"

#include <cmath>
#include <cstring>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#include <limits>

namespace colossal::runtime::cpu {
namespace {

constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 64;
/// Query blocks per work item: they share one transposed copy of the keys they see.
constexpr int64_t kQBlocksPerItem = 4;
/// A head's keys are transposed once per work item when Kᵀ [D, Tk] fits this many floats (512 KB,
/// half this machine's L2); longer heads transpose each key block as it is visited.
constexpr int64_t kKtCacheFloats = 128 * 1024;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Dims {
  int64_t B, Hq, Hkv, Tq, Tk, D, Dv;
};

Dims dimsOf(const KernelCall &c) {
  const TensorRef &Q = c.inputs[0], &K = c.inputs[1], &V = c.inputs[2];
  return {Q.shape[0], Q.shape[1], K.shape[1], Q.shape[2], K.shape[2], Q.shape[3], V.shape[3]};
}

llvm::Error verifyAttention(const KernelCall &c) {
  const TensorRef &Q = c.inputs[0], &K = c.inputs[1], &V = c.inputs[2], &Y = c.outputs[0];
  // f32, or bf16 q, k and v (colossal-auto-mixed-precision) with an f32 result.
  if (Q.dtype != DType::F32 && !isHalfFloat(Q.dtype))
    return kernelError("q, k and v must be f32, bf16 or f16, got " + dtypeName(Q.dtype));
  for (const TensorRef *t : {&K, &V})
    if (llvm::Error e = verifyDType(*t, Q.dtype, "q, k and v")) return e;
  if (llvm::Error e = verifyDType(Y, DType::F32, "y")) return e;
  if (Q.rank() != 4 || K.rank() != 4 || V.rank() != 4 || Y.rank() != 4)
    return kernelError("q, k, v and y must have rank 4 ([B, H, T, D])");
  Dims d = dimsOf(c);
  if (K.shape[0] != d.B || V.shape[0] != d.B || V.shape[1] != d.Hkv || V.shape[2] != d.Tk ||
      K.shape[3] != d.D)
    return kernelError("inconsistent shapes q " + shapeToString(Q.shape) + ", k " + shapeToString(K.shape) +
                       ", v " + shapeToString(V.shape));
  if (d.Hkv == 0 || d.Hq % d.Hkv != 0)
    return kernelError("query heads " + llvm::Twine(d.Hq) + " not a multiple of kv heads " + llvm::Twine(d.Hkv));
  Shape want = {d.B, d.Hq, d.Tq, d.Dv};
  if (Y.shape != want)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  if (c.inputs.size() == 4)
    if (llvm::Error e = verifyAttentionMask(c.inputs[3], {d.B, d.Hq, d.Tq, d.Tk})) return e;
  int64_t causal = c.attrInt("causal", 0);
  if (causal != 0 && causal != 1) return kernelError("causal must be 0 or 1");
  return llvm::Error::success();
}

/// The row length of the per-thread Kᵀ copy: every key of the head (rounded up to whole blocks)
/// when that fits kKtCacheFloats, else one key block.
int64_t ktStride(const Dims &d) {
  const int64_t all = (d.Tk + kBlockK - 1) / kBlockK * kBlockK;
  return d.D * all <= kKtCacheFloats ? all : kBlockK;
}

size_t perThreadFloats(const Dims &d) {
  // Kt [D, ktStride] + S [kBlockQ, kBlockK] + O [kBlockQ, Dv] + m, l [kBlockQ]; each rounded to 16.
  auto r = [](int64_t n) { return static_cast<size_t>((n + 15) / 16 * 16); };
  return r(d.D * ktStride(d)) + r(kBlockQ * kBlockK) + r(kBlockQ * d.Dv) + 2 * r(kBlockQ);
}

/// Widened copies of bf16 q, k, v (Widen.h), then the per-thread tiles.
size_t widenedBytes(const KernelCall &c) {
  return f32CopyBytes(c.inputs[0]) + f32CopyBytes(c.inputs[1]) + f32CopyBytes(c.inputs[2]);
}

size_t attentionWorkspace(const KernelCall &c, int threads) {
  return widenedBytes(c) + perThreadFloats(dimsOf(c)) * sizeof(float) * std::max(threads, 1);
}

#if defined(__AVX512F__)
/// Visible keys of rows [r, r + R) of a tile: those of its last row, clamp(r + R + diag, 0, nk),
/// where row i of the tile sees keys j <= i + diag (causal) and diag >= kBlockK when all are.
inline int64_t groupWidth(int64_t r, int64_t R, int64_t diag, int64_t nk) {
  return std::clamp<int64_t>(r + R + diag, 0, nk);
}

/// AVX-512 S[r, 0:16·NV] = scale · q[r, :] · Kt[:, 0:16·NV] for 4 rows (Kt rows `ldk` apart).
template <int NV>
void scoreRows4(const float *q, int64_t D, const float *Kt, int64_t ldk, const __m512 vs, float *S) {
  __m512 acc[4][NV];
  for (int i = 0; i < 4; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const float *kt = Kt + d * ldk;
    __m512 kv[NV];
    for (int v = 0; v < NV; ++v) kv[v] = _mm512_loadu_ps(kt + 16 * v);
    for (int i = 0; i < 4; ++i) {
      const __m512 a = _mm512_set1_ps(q[i * D + d]);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(a, kv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(S + i * kBlockK + 16 * v, _mm512_mul_ps(acc[i][v], vs));
}

/// AVX-512 S[r, 0:64] = scale · q[r, :] · Kt[:, 0:64] (Kt rows `ldk` apart): 4 rows × up to 4
/// vectors of accumulators. Lanes at or past a row group's visible width (groupWidth) are left
/// unwritten: the caller masks them.
void scoreTile(const float *q, int64_t D, const float *Kt, int64_t ldk, int64_t rows, float scale,
               int64_t diag, int64_t nk, float *S) {
  const __m512 vs = _mm512_set1_ps(scale);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float *qr = q + r * D;
    float *Sr = S + r * kBlockK;
    switch ((groupWidth(r, 4, diag, nk) + 15) / 16) {
    case 0: break;
    case 1: scoreRows4<1>(qr, D, Kt, ldk, vs, Sr); break;
    case 2: scoreRows4<2>(qr, D, Kt, ldk, vs, Sr); break;
    case 3: scoreRows4<3>(qr, D, Kt, ldk, vs, Sr); break;
    default: scoreRows4<4>(qr, D, Kt, ldk, vs, Sr); break;
    }
  }
  for (; r < rows; ++r) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t d = 0; d < D; ++d) {
      __m512 a = _mm512_set1_ps(q[r * D + d]);
      for (int v = 0; v < 4; ++v) acc[v] = _mm512_fmadd_ps(a, _mm512_loadu_ps(Kt + d * ldk + 16 * v), acc[v]);
    }
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(S + r * kBlockK + 16 * v, _mm512_mul_ps(acc[v], vs));
  }
}

/// O[0:R, c0:c0+16·NV) += P[0:R, 0:nk] · V[0:nk, c0:...] with the R (1..4) rows' accumulators in
/// registers (R and NV are compile-time, so nothing spills: 4 × 4 zmm at most); `tail` masks the
/// last vector's lanes.
template <int R, int NV>
void pvBlock(const float *P, const float *V, int64_t nk, int64_t Dv, float *O, int64_t c0, __mmask16 tail) {
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v)
      acc[i][v] = _mm512_maskz_loadu_ps(v == NV - 1 ? tail : 0xffff, O + i * Dv + c0 + 16 * v);
  for (int64_t j = 0; j < nk; ++j) {
    __m512 vv[NV];
    for (int v = 0; v < NV; ++v) vv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? tail : 0xffff, V + j * Dv + c0 + 16 * v);
    for (int i = 0; i < R; ++i) {
      const __m512 p = _mm512_set1_ps(P[i * kBlockK + j]);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(p, vv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(O + i * Dv + c0 + 16 * v, v == NV - 1 ? tail : 0xffff, acc[i][v]);
}

template <int NV>
void pvRows(const float *P, const float *V, int64_t nk, int64_t Dv, int64_t R, float *O, int64_t c0,
            __mmask16 tail) {
  switch (R) {
  case 1: pvBlock<1, NV>(P, V, nk, Dv, O, c0, tail); break;
  case 2: pvBlock<2, NV>(P, V, nk, Dv, O, c0, tail); break;
  case 3: pvBlock<3, NV>(P, V, nk, Dv, O, c0, tail); break;
  default: pvBlock<4, NV>(P, V, nk, Dv, O, c0, tail); break;
  }
}

/// O[r, :] += sum_j P[r, j] · V[j, :] over the row group's visible keys (groupWidth; P is 0 past
/// them).
void accumulatePV(const float *P, const float *V, int64_t diag, int64_t nk, int64_t Dv, int64_t rows, float *O) {
  for (int64_t r = 0; r < rows; r += 4) {
    const int64_t R = std::min<int64_t>(4, rows - r);
    const int64_t nkr = groupWidth(r, R, diag, nk);
    if (nkr == 0) continue;
    for (int64_t c0 = 0; c0 < Dv; c0 += 64) {
      const int64_t width = std::min<int64_t>(64, Dv - c0);
      const int nv = static_cast<int>((width + 15) / 16);
      const int rem = static_cast<int>(width - 16 * (nv - 1));
      const __mmask16 tail = static_cast<__mmask16>(rem == 16 ? 0xffff : (1u << rem) - 1);
      const float *Pr = P + r * kBlockK;
      float *Or = O + r * Dv;
      switch (nv) {
      case 1: pvRows<1>(Pr, V, nkr, Dv, R, Or, c0, tail); break;
      case 2: pvRows<2>(Pr, V, nkr, Dv, R, Or, c0, tail); break;
      case 3: pvRows<3>(Pr, V, nkr, Dv, R, Or, c0, tail); break;
      default: pvRows<4>(Pr, V, nkr, Dv, R, Or, c0, tail); break;
      }
    }
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
/// AVX2 S[r, c:c+16] = scale · q[r, :] · Kt[:, c:c+16] for R (1..4) rows held in 2R accumulators
/// (16 ymm registers in all, so 4 rows × 2 vectors per pass over D).
template <int R>
void scoreBlock(const float *q, int64_t D, const float *Kt, int64_t ldk, float scale, float *S) {
  __m256 acc[R][2];
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const __m256 k0 = _mm256_loadu_ps(Kt + d * ldk), k1 = _mm256_loadu_ps(Kt + d * ldk + 8);
    for (int i = 0; i < R; ++i) {
      const __m256 a = _mm256_broadcast_ss(q + i * D + d);
      acc[i][0] = _mm256_fmadd_ps(a, k0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, k1, acc[i][1]);
    }
  }
  const __m256 vs = _mm256_set1_ps(scale);
  for (int i = 0; i < R; ++i) {
    _mm256_storeu_ps(S + i * kBlockK, _mm256_mul_ps(acc[i][0], vs));
    _mm256_storeu_ps(S + i * kBlockK + 8, _mm256_mul_ps(acc[i][1], vs));
  }
}

/// AVX2 S[r, 0:64] = scale · q[r, :] · Kt[:, 0:64] (Kt rows `ldk` apart); 16-lane chunks at or
/// past a row group's visible width (groupWidth) are left unwritten: the caller masks them.
void scoreTile(const float *q, int64_t D, const float *Kt, int64_t ldk, int64_t rows, float scale,
               int64_t diag, int64_t nk, float *S) {
  for (int64_t c = 0; c < kBlockK; c += 16)
    for (int64_t r = 0; r < rows; r += 4) {
      if (c >= groupWidth(r, std::min<int64_t>(4, rows - r), diag, nk)) continue;
      const float *qr = q + r * D;
      float *Sr = S + r * kBlockK + c;
      switch (std::min<int64_t>(4, rows - r)) {
      case 1: scoreBlock<1>(qr, D, Kt + c, ldk, scale, Sr); break;
      case 2: scoreBlock<2>(qr, D, Kt + c, ldk, scale, Sr); break;
      case 3: scoreBlock<3>(qr, D, Kt + c, ldk, scale, Sr); break;
      default: scoreBlock<4>(qr, D, Kt + c, ldk, scale, Sr); break;
      }
    }
}

/// AVX2 O[i, c:c+8·NV] += Σ_j P[i, j] · V[j, c:c+8·NV] for R (1..4) rows in registers.
template <int R, int NV>
void pvBlock(const float *P, const float *V, int64_t nk, int64_t Dv, float *O) {
  __m256 acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_loadu_ps(O + i * Dv + 8 * v);
  for (int64_t j = 0; j < nk; ++j) {
    __m256 vv[NV];
    for (int v = 0; v < NV; ++v) vv[v] = _mm256_loadu_ps(V + j * Dv + 8 * v);
    for (int i = 0; i < R; ++i) {
      const __m256 p = _mm256_broadcast_ss(P + i * kBlockK + j);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(p, vv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(O + i * Dv + 8 * v, acc[i][v]);
}

template <int NV>
void pvRows(const float *P, const float *V, int64_t nk, int64_t Dv, int64_t R, float *O) {
  switch (R) {
  case 1: pvBlock<1, NV>(P, V, nk, Dv, O); break;
  case 2: pvBlock<2, NV>(P, V, nk, Dv, O); break;
  case 3: pvBlock<3, NV>(P, V, nk, Dv, O); break;
  default: pvBlock<4, NV>(P, V, nk, Dv, O); break;
  }
}

/// O[r, :] += sum_j P[r, j] · V[j, :] over the row group's visible keys (groupWidth; P is 0 past
/// them): 16 lanes at a time, then 8, then a scalar tail.
void accumulatePV(const float *P, const float *V, int64_t diag, int64_t nkAll, int64_t Dv, int64_t rows, float *O) {
  for (int64_t r = 0; r < rows; r += 4) {
    const int64_t R = std::min<int64_t>(4, rows - r);
    const int64_t nk = groupWidth(r, R, diag, nkAll);
    const float *Pr = P + r * kBlockK;
    float *Or = O + r * Dv;
    int64_t c = 0;
    for (; c + 16 <= Dv; c += 16) pvRows<2>(Pr, V + c, nk, Dv, R, Or + c);
    for (; c + 8 <= Dv; c += 8) pvRows<1>(Pr, V + c, nk, Dv, R, Or + c);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t cc = c; cc < Dv; ++cc) Or[i * Dv + cc] += Pr[i * kBlockK + j] * V[j * Dv + cc];
  }
}
#else
/// Portable S[r, 0:64] = scale · q[r, :] · Kt[:, 0:64] (Kt rows `ldk` apart; every lane, the
/// causal width is not used here).
void scoreTile(const float *q, int64_t D, const float *Kt, int64_t ldk, int64_t rows, float scale,
               int64_t /*diag*/, int64_t /*nk*/, float *S) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc[kBlockK] = {};
    for (int64_t d = 0; d < D; ++d) {
      float a = q[r * D + d];
      const float *kt = Kt + d * ldk;
      for (int64_t j = 0; j < kBlockK; ++j) acc[j] += a * kt[j];
    }
    for (int64_t j = 0; j < kBlockK; ++j) S[r * kBlockK + j] = acc[j] * scale;
  }
}

/// Portable O[r, :] += sum_j P[r, j] · V[j, :] (all nk keys; P is 0 past the visible ones).
void accumulatePV(const float *P, const float *V, int64_t /*diag*/, int64_t nk, int64_t Dv, int64_t rows, float *O) {
  for (int64_t r = 0; r < rows; ++r) {
    float *o = O + r * Dv;
    for (int64_t j = 0; j < nk; ++j) {
      float w = P[r * kBlockK + j];
      const float *v = V + j * Dv;
      for (int64_t c = 0; c < Dv; ++c) o[c] += w * v[c];
    }
  }
}
#endif

/// s[0] + ... + s[kBlockK − 1], as a tree: four vectors added, then one horizontal reduction
/// (a sequential sum, which is what GCC makes of the lanes without -ffast-math, is a chain of 64
/// dependent adds per row and was ~5% of the kernel).
inline float tileRowSum(const float *s) {
#if defined(__AVX512F__)
  static_assert(kBlockK == 64, "four 16-lane vectors per row");
  const __m512 a = _mm512_add_ps(_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16));
  const __m512 b = _mm512_add_ps(_mm512_loadu_ps(s + 32), _mm512_loadu_ps(s + 48));
  return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
#else
  float lanes[16] = {};
  for (int64_t j = 0; j < kBlockK; j += 16)
#pragma omp simd
    for (int i = 0; i < 16; ++i) lanes[i] += s[j + i];
  for (int w = 8; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) lanes[i] += lanes[i + w];
  return lanes[0];
#endif
}

llvm::Error runAttention(const KernelCall &c) {
  const Dims d = dimsOf(c);
  char *ws = static_cast<char *>(c.workspace);
  const float *q = widenedInput(c.inputs[0], ws), *k = widenedInput(c.inputs[1], ws),
              *v = widenedInput(c.inputs[2], ws);
  float *y = c.outputs[0].as<float>();
  const float scale = static_cast<float>(c.attrFloat("scale", 1.0 / std::sqrt(static_cast<double>(d.D))));
  const bool causal = c.attrInt("causal", 0) != 0;
  const int64_t group = d.Hq / d.Hkv;
  const int64_t causalOffset = d.Tk - d.Tq;  // key j visible to query i iff j <= i + causalOffset

  const AttentionMask mask(c.inputs.size() == 4 ? &c.inputs[3] : nullptr);

  const int64_t qBlocks = (d.Tq + kBlockQ - 1) / kBlockQ;
  const int64_t itemsPerHead = (qBlocks + kQBlocksPerItem - 1) / kQBlocksPerItem;
  const int64_t items = d.B * d.Hq * itemsPerHead;
  if (items == 0 || d.Dv == 0) return llvm::Error::success();
  const size_t perThread = perThreadFloats(d);
  const int64_t ldk = ktStride(d);
  const bool ktCached = ldk != kBlockK || d.Tk <= kBlockK;  // one transpose per key block and item
  const int threads = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(omp_get_max_threads()), c.threads, items})));
  float *workspace = reinterpret_cast<float *>(ws);

  parallelItems(items, threads, [&](int64_t item, int thread) {
    const int64_t qi0 = item % itemsPerHead, h = (item / itemsPerHead) % d.Hq, b = item / (itemsPerHead * d.Hq);
    const int64_t hk = h / group;
    float *Kt = workspace + perThread * thread;
    float *S = Kt + (d.D * ldk + 15) / 16 * 16;
    float *O = S + kBlockQ * kBlockK;
    float *m = O + (kBlockQ * d.Dv + 15) / 16 * 16;
    float *l = m + 16 * ((kBlockQ + 15) / 16);
    const float *kp = k + (b * d.Hkv + hk) * d.Tk * d.D;
    const float *vp = v + (b * d.Hkv + hk) * d.Tk * d.Dv;
    int64_t transposed = 0;  // with ktCached: keys [0, transposed) are in Kt

    for (int64_t qb = qi0 * kQBlocksPerItem; qb < std::min(qBlocks, (qi0 + 1) * kQBlocksPerItem); ++qb) {
      const int64_t q0 = qb * kBlockQ, rows = std::min(kBlockQ, d.Tq - q0);
      const float *qp = q + ((b * d.Hq + h) * d.Tq + q0) * d.D;
      std::fill(O, O + rows * d.Dv, 0.0f);
      std::fill(m, m + rows, kNegInf);
      std::fill(l, l + rows, 0.0f);

      // Keys past the last row's causal limit are invisible to the whole block.
      int64_t kEnd = d.Tk;
      if (causal) kEnd = std::max<int64_t>(0, std::min(d.Tk, q0 + rows - 1 + causalOffset + 1));
      for (int64_t k0 = 0; k0 < kEnd; k0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, d.Tk - k0);
        // Kt[dd, c0 + j] = k[k0 + j, dd] (c0 = k0 when the head's keys are cached, else 0); padding
        // lanes are zero (their scores are masked below).
        const int64_t c0 = ktCached ? k0 : 0;
        if (!ktCached || k0 >= transposed) {
          for (int64_t dd = 0; dd < d.D; ++dd) {
            float *row = Kt + dd * ldk + c0;
            for (int64_t j = 0; j < nk; ++j) row[j] = kp[(k0 + j) * d.D + dd];
            for (int64_t j = nk; j < kBlockK; ++j) row[j] = 0.0f;
          }
          transposed = k0 + kBlockK;
        }
        // Row r of the tile sees keys j <= r + diag (all of them without causal).
        const int64_t diag = causal ? q0 + causalOffset - k0 : kBlockK;
        scoreTile(qp, d.D, Kt + c0, ldk, rows, scale, diag, nk, S);
        for (int64_t r = 0; r < rows; ++r) {
          float *s = S + r * kBlockK;
          const int64_t qi = q0 + r;
          // Visible keys of this row within the block: [0, limit).
          int64_t limit = nk;
          if (causal) limit = std::max<int64_t>(0, std::min(nk, qi + causalOffset - k0 + 1));
          mask.apply(s, b, h, qi, k0, limit);
          for (int64_t j = limit; j < kBlockK; ++j) s[j] = kNegInf;
          const float bm = rowMax(s, limit, kNegInf);
          const float mNew = std::max(m[r], bm);
          if (mNew == kNegInf) {  // nothing visible to this row yet: contributes nothing
            for (int64_t j = 0; j < kBlockK; ++j) s[j] = 0.0f;
            continue;
          }
          const float alpha = fastExp(m[r] - mNew);  // 0 when m[r] = -inf
#pragma omp simd
          for (int64_t j = 0; j < kBlockK; ++j) s[j] = fastExp(s[j] - mNew);
          l[r] = l[r] * alpha + tileRowSum(s);
          m[r] = mNew;
          if (alpha != 1.0f) {
            float *o = O + r * d.Dv;
            for (int64_t cc = 0; cc < d.Dv; ++cc) o[cc] *= alpha;
          }
        }
        accumulatePV(S, vp + k0 * d.Dv, diag, nk, d.Dv, rows, O);
      }
      float *yp = y + ((b * d.Hq + h) * d.Tq + q0) * d.Dv;
      for (int64_t r = 0; r < rows; ++r) {
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int64_t cc = 0; cc < d.Dv; ++cc) yp[r * d.Dv + cc] = O[r * d.Dv + cc] * inv;
      }
    }
  });
  return llvm::Error::success();
}

}  // namespace

void registerAttentionKernels(KernelRegistry &r) {
  KernelDesc a;
  a.op = "attention";
  a.minInputs = 3;
  a.maxInputs = 4;
  a.attrs = {{"scale", AttrKind::Float}, {"causal", AttrKind::Int}};
  a.verify = verifyAttention;
  a.workspace = attentionWorkspace;
  a.run = runAttention;
  r.add(a);
}

}  // namespace colossal::runtime::cpu

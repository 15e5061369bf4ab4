//===- attention_grad.cpp - Backward of fused attention, CPU kernel (f32) -------------------===//
//
// attention_grad: q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], [mask], y [B, Hq, Tq, Dv]
// (the forward output), dy (y's shape) -> dq, dk, dv (the shapes of q, k, v). Attributes `scale`
// and `causal` and the mask semantics are the forward `attention`'s (attention.cpp, docs/plan.md):
// y = P·V with P = softmax(S), S = scale·q·kᵀ + mask [+ causal]. Gradients (Dao et al. 2022,
// FlashAttention backward; Dao 2023, FlashAttention-2):
//   dV = Pᵀ·dY,  dP = dY·Vᵀ,  dS = P ∘ (dP − D) with D_i = rowsum(dY ∘ Y)_i,
//   dQ = scale·dS·K,  dK = scale·dSᵀ·Q.
// GQA: query head h uses kv head h / (Hq/Hkv), so dk, dv of a kv head sum over its query heads.
// bf16 q, k, v (colossal-auto-mixed-precision): widened to f32 (Widen.h), y and dy stay f32, the
// f32 gradients are rounded to bf16 dq, dk, dv at the end.
//
// Algorithm. Work items are (batch, kv head), run in parallel (OpenMP, dynamic schedule); an item
// owns its dk and dv rows, so no two threads write the same element and every sum has a fixed
// order (results do not depend on the thread count; with a single item the region runs on one
// thread and the GEMMs themselves use the OpenMP threads, deterministic for a given count). Within an item, for each query head of the
// group and each block of Bq query rows, the kernel recomputes the block's scores against every
// visible key, S [Bq, kEnd] (keys past the block's last causal limit are skipped), takes the exact
// row max and sum from that strip (the forward saves no statistics, and one strip gives them
// without a second sweep), forms P, then
//   dP = dY_blk·Vᵀ,  dS = scale·P∘(dP − D),  dV += Pᵀ·dY_blk,  dQ_blk = dS·K,  dK += dSᵀ·Q_blk,
// five small GEMMs (Gemm.h: oneDNN sgemm, single-threaded inside the parallel region). Memory per
// thread is two [Bq, Tk] strips; Bq shrinks for long key sequences so the strips stay in L2. No
// [Tq, Tk] matrix is formed per head. A query row that sees no key (fully masked) has P = 0 and
// contributes nothing, matching the forward's zero output.
//
//===----------------------------------------------------------------------------------------===//
#include "AttentionMask.h"
#include "CpuCommon.h"
#include "Widen.h"
#include "FastMath.h"
#include "Gemm.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace colossal::runtime::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Dims {
  int64_t B, Hq, Hkv, Tq, Tk, D, Dv;
};

Dims dimsOf(const KernelCall &c) {
  const TensorRef &Q = c.inputs[0], &K = c.inputs[1], &V = c.inputs[2];
  return {Q.shape[0], Q.shape[1], K.shape[1], Q.shape[2], K.shape[2], Q.shape[3], V.shape[3]};
}

/// The optional mask is the 4th of 6 inputs; y and dy are always the last two.
const TensorRef *maskOf(const KernelCall &c) { return c.inputs.size() == 6 ? &c.inputs[3] : nullptr; }
const TensorRef &yOf(const KernelCall &c) { return c.inputs[c.inputs.size() - 2]; }
const TensorRef &dyOf(const KernelCall &c) { return c.inputs[c.inputs.size() - 1]; }

/// Query rows per block: 64, fewer when the keys are many, so that the two [Bq, Tk] strips of a
/// thread stay within ~512 KiB.
int64_t blockRows(int64_t Tk) {
  const int64_t bq = (64 * 1024) / std::max<int64_t>(Tk, 1);
  return std::clamp<int64_t>(bq / 8 * 8, 8, 64);
}

int64_t stripStride(int64_t Tk) { return (Tk + 15) / 16 * 16; }

llvm::Error verifyAttentionGrad(const KernelCall &c) {
  const TensorRef &Q = c.inputs[0], &K = c.inputs[1], &V = c.inputs[2];
  const TensorRef &Y = yOf(c), &DY = dyOf(c);
  // f32, or bf16 q, k, v and dq, dk, dv (colossal-auto-mixed-precision) with f32 y and dy.
  if (Q.dtype != DType::F32 && !isHalfFloat(Q.dtype))
    return kernelError("q, k and v must be f32, bf16 or f16, got " + dtypeName(Q.dtype));
  for (const TensorRef *t : {&K, &V})
    if (llvm::Error e = verifyDType(*t, Q.dtype, "q, k and v")) return e;
  for (const TensorRef *t : {&Y, &DY})
    if (llvm::Error e = verifyDType(*t, DType::F32, "y and dy")) return e;
  for (const TensorRef &t : c.outputs)
    if (llvm::Error e = verifyDType(t, Q.dtype, "dq, dk and dv (q's dtype)")) return e;
  if (Q.rank() != 4 || K.rank() != 4 || V.rank() != 4)
    return kernelError("q, k and v must have rank 4 ([B, H, T, D])");
  const Dims d = dimsOf(c);
  if (K.shape[0] != d.B || V.shape[0] != d.B || V.shape[1] != d.Hkv || V.shape[2] != d.Tk ||
      K.shape[3] != d.D)
    return kernelError("inconsistent shapes q " + shapeToString(Q.shape) + ", k " + shapeToString(K.shape) +
                       ", v " + shapeToString(V.shape));
  if (d.Hkv == 0 || d.Hq % d.Hkv != 0)
    return kernelError("query heads " + llvm::Twine(d.Hq) + " not a multiple of kv heads " + llvm::Twine(d.Hkv));
  const Shape yShape = {d.B, d.Hq, d.Tq, d.Dv};
  if (Y.shape != yShape || DY.shape != yShape)
    return kernelError("y " + shapeToString(Y.shape) + " and dy " + shapeToString(DY.shape) +
                       " must have the attention output's shape " + shapeToString(yShape));
  if (llvm::Error e = verifySameShape(c.outputs[0], Q, "dq and q")) return e;
  if (llvm::Error e = verifySameShape(c.outputs[1], K, "dk and k")) return e;
  if (llvm::Error e = verifySameShape(c.outputs[2], V, "dv and v")) return e;
  if (const TensorRef *Mk = maskOf(c))
    if (llvm::Error e = verifyAttentionMask(*Mk, {d.B, d.Hq, d.Tq, d.Tk})) return e;
  const int64_t causal = c.attrInt("causal", 0);
  if (causal != 0 && causal != 1) return kernelError("causal must be 0 or 1");
  return llvm::Error::success();
}

size_t perThreadFloats(const Dims &d) {
  return static_cast<size_t>(2 * blockRows(d.Tk) * stripStride(d.Tk));
}

/// f32 copies of bf16 q, k, v and f32 space for bf16 dq, dk, dv (Widen.h), then the per-thread
/// strips.
size_t widenedBytes(const KernelCall &c) {
  size_t n = 0;
  for (int i = 0; i < 3; ++i) n += f32CopyBytes(c.inputs[i]) + f32CopyBytes(c.outputs[i]);
  return n;
}

size_t attentionGradWorkspace(const KernelCall &c, int threads) {
  return widenedBytes(c) + perThreadFloats(dimsOf(c)) * sizeof(float) * std::max(threads, 1);
}

llvm::Error runAttentionGrad(const KernelCall &c) {
  const Dims d = dimsOf(c);
  char *ws = static_cast<char *>(c.workspace);
  const float *q = widenedInput(c.inputs[0], ws), *k = widenedInput(c.inputs[1], ws),
              *v = widenedInput(c.inputs[2], ws);
  const float *y = yOf(c).as<const float>(), *dy = dyOf(c).as<const float>();
  float *dq = f32Result(c.outputs[0], ws), *dk = f32Result(c.outputs[1], ws), *dv = f32Result(c.outputs[2], ws);
  const float scale = static_cast<float>(c.attrFloat("scale", 1.0 / std::sqrt(static_cast<double>(d.D))));
  const bool causal = c.attrInt("causal", 0) != 0;
  const int64_t group = d.Hq / d.Hkv;
  const int64_t causalOffset = d.Tk - d.Tq;  // key j visible to query i iff j <= i + causalOffset

  const AttentionMask mask(maskOf(c));

  const int64_t items = d.B * d.Hkv;
  if (items == 0) return llvm::Error::success();
  const int64_t Bq = blockRows(d.Tk), ld = stripStride(d.Tk);
  const size_t perThread = perThreadFloats(d);
  const int threads = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(omp_get_max_threads()), c.threads, items})));
  float *workspace = reinterpret_cast<float *>(ws);

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / d.Hkv, hk = item % d.Hkv;
    float *P = workspace + perThread * omp_get_thread_num();  // [Bq, ld]: probabilities
    float *dS = P + Bq * ld;                                   // [Bq, ld]: dP, then dS
    const float *kp = k + (b * d.Hkv + hk) * d.Tk * d.D;
    const float *vp = v + (b * d.Hkv + hk) * d.Tk * d.Dv;
    float *dkp = dk + (b * d.Hkv + hk) * d.Tk * d.D;
    float *dvp = dv + (b * d.Hkv + hk) * d.Tk * d.Dv;
    std::fill(dkp, dkp + d.Tk * d.D, 0.0f);
    std::fill(dvp, dvp + d.Tk * d.Dv, 0.0f);

    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const int64_t headRow = (b * d.Hq + h) * d.Tq;
      for (int64_t q0 = 0; q0 < d.Tq; q0 += Bq) {
        const int64_t rows = std::min(Bq, d.Tq - q0);
        // Keys past the last row's causal limit are invisible to the whole block.
        int64_t kEnd = d.Tk;
        if (causal) kEnd = std::max<int64_t>(0, std::min(d.Tk, q0 + rows - 1 + causalOffset + 1));
        if (kEnd == 0) {  // no visible key for the whole block
          std::fill(dq + (headRow + q0) * d.D, dq + (headRow + q0 + rows) * d.D, 0.0f);
          continue;
        }
        const float *qb = q + (headRow + q0) * d.D;
        const float *yb = y + (headRow + q0) * d.Dv, *dyb = dy + (headRow + q0) * d.Dv;

        // P = softmax(scale·Q_blk·Kᵀ + mask), exact per row over the strip of visible keys.
        sgemm(false, true, rows, kEnd, d.D, scale, qb, d.D, kp, d.D, 0.0f, P, ld);
        for (int64_t r = 0; r < rows; ++r) {
          float *s = P + r * ld;
          const int64_t qi = q0 + r;
          int64_t limit = kEnd;
          if (causal) limit = std::max<int64_t>(0, std::min(kEnd, qi + causalOffset + 1));
          mask.apply(s, b, h, qi, 0, limit);
          const float m = rowMax(s, limit, kNegInf);
          if (m == kNegInf) {  // the row sees no key: P = 0
            std::fill(s, s + kEnd, 0.0f);
            continue;
          }
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < limit; ++j) {
            s[j] = fastExp(s[j] - m);
            sum += s[j];
          }
          const float inv = 1.0f / sum;
#pragma omp simd
          for (int64_t j = 0; j < limit; ++j) s[j] *= inv;
          std::fill(s + limit, s + kEnd, 0.0f);
        }

        // dP = dY_blk·Vᵀ; dS = scale·P∘(dP − D), D_r = Σ dY∘Y over row r.
        sgemm(false, true, rows, kEnd, d.Dv, 1.0f, dyb, d.Dv, vp, d.Dv, 0.0f, dS, ld);
        for (int64_t r = 0; r < rows; ++r) {
          const float *yr = yb + r * d.Dv, *gr = dyb + r * d.Dv;
          float Dr = 0.0f;
#pragma omp simd reduction(+ : Dr)
          for (int64_t cc = 0; cc < d.Dv; ++cc) Dr += gr[cc] * yr[cc];
          const float *pr = P + r * ld;
          float *sr = dS + r * ld;
#pragma omp simd
          for (int64_t j = 0; j < kEnd; ++j) sr[j] = scale * pr[j] * (sr[j] - Dr);
        }

        // dV += Pᵀ·dY_blk;  dQ_blk = dS·K;  dK += dSᵀ·Q_blk.
        sgemm(true, false, kEnd, d.Dv, rows, 1.0f, P, ld, dyb, d.Dv, 1.0f, dvp, d.Dv);
        sgemm(false, false, rows, d.D, kEnd, 1.0f, dS, ld, kp, d.D, 0.0f, dq + (headRow + q0) * d.D, d.D);
        sgemm(true, false, kEnd, d.D, rows, 1.0f, dS, ld, qb, d.D, 1.0f, dkp, d.D);
      }
    }
  }
  roundResult(c.outputs[0], dq);
  roundResult(c.outputs[1], dk);
  roundResult(c.outputs[2], dv);
  return llvm::Error::success();
}

}  // namespace

void registerAttentionGradKernels(KernelRegistry &r) {
  // Keyed by dq: f32, or bf16 (bf16 q, k, v).
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    KernelDesc a;
    a.op = "attention_grad";
    a.dtype = dt;
    a.minInputs = 5;
    a.maxInputs = 6;
    a.minOutputs = a.maxOutputs = 3;
    a.attrs = {{"scale", AttrKind::Float}, {"causal", AttrKind::Int}};
    a.verify = verifyAttentionGrad;
    a.workspace = attentionGradWorkspace;
    a.run = runAttentionGrad;
    r.add(a);
  }
}

}  // namespace colossal::runtime::cpu

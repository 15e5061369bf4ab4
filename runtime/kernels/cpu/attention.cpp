//===- attention.cpp - Fused scaled-dot-product attention CPU kernel (f32) ------------------===//
//
// y [B, Hq, Tq, Dv] = softmax(q·kᵀ·scale + mask [+ causal]) · v, with
//   q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], Hq % Hkv == 0 (GQA/MQA: query head h
//   reads kv head h / (Hq / Hkv)), optional mask broadcastable to [B, Hq, Tq, Tk]: additive f32, or
//   bool (true = keep). causal: key j is visible to query i iff j <= i + Tk - Tq (bottom-right
//   aligned, as for a KV cache). attrs: scale (default 1/sqrt(D)), causal (0/1).
// A query row that sees no key at all (fully masked) yields zeros.
//
// Algorithm: FlashAttention (Dao et al. 2022) on the CPU. Work items are (batch, head, block of
// kBlockQ queries), run in parallel. Each walks blocks of kBlockK keys, keeping per-row running max
// m, denominator l and unnormalised output O (online softmax, Milakov & Gimelshein 2018):
//   S = scale·Q_blk·K_blkᵀ + mask;  m' = max(m, rowmax S);  P = exp(S - m');
//   l = l·e^{m-m'} + rowsum P;  O = O·e^{m-m'} + P·V_blk;  finally y = O / l.
// Key blocks entirely above the causal diagonal are never visited; the [Tq, Tk] score matrix is
// never formed (only one [kBlockQ, kBlockK] tile per thread). The two tile products are small
// register-blocked GEMMs (4 query rows × 64 lanes) over a transposed copy of the K block, which
// the compiler vectorizes with AVX-512.
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "FastMath.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace colossal::runtime::cpu {
namespace {

constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 64;
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
  for (const TensorRef *t : {&Q, &K, &V})
    if (llvm::Error e = verifyDType(*t, DType::F32, "q, k and v")) return e;
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
  if (c.inputs.size() == 4) {
    const TensorRef &Mk = c.inputs[3];
    if (Mk.dtype != DType::F32 && Mk.dtype != DType::Bool)
      return kernelError("mask must be f32 (additive) or bool, got " + dtypeName(Mk.dtype));
    Shape full = {d.B, d.Hq, d.Tq, d.Tk}, bc;
    if (Mk.rank() > 4 || !broadcastShapes(Mk.shape, full, bc) || bc != full)
      return kernelError("mask shape " + shapeToString(Mk.shape) + " does not broadcast to " +
                         shapeToString(full));
  }
  int64_t causal = c.attrInt("causal", 0);
  if (causal != 0 && causal != 1) return kernelError("causal must be 0 or 1");
  return llvm::Error::success();
}

size_t perThreadFloats(const Dims &d) {
  // Kt [D, kBlockK] + S [kBlockQ, kBlockK] + O [kBlockQ, Dv] + m, l [kBlockQ]; each rounded to 16.
  auto r = [](int64_t n) { return static_cast<size_t>((n + 15) / 16 * 16); };
  return r(d.D * kBlockK) + r(kBlockQ * kBlockK) + r(kBlockQ * d.Dv) + 2 * r(kBlockQ);
}

size_t attentionWorkspace(const KernelCall &c, int threads) {
  return perThreadFloats(dimsOf(c)) * sizeof(float) * std::max(threads, 1);
}

/// S[r, 0:64] = scale · q[r, :] · Kt[:, 0:64] for `rows` rows (groups of 4 share Kt loads).
void scoreTile(const float *q, int64_t D, const float *Kt, int64_t rows, float scale, float *S) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    float acc[4][kBlockK] = {};
    const float *q0 = q + r * D;
    for (int64_t d = 0; d < D; ++d) {
      const float *kt = Kt + d * kBlockK;
      float a0 = q0[d], a1 = q0[D + d], a2 = q0[2 * D + d], a3 = q0[3 * D + d];
      for (int64_t j = 0; j < kBlockK; ++j) {
        acc[0][j] += a0 * kt[j];
        acc[1][j] += a1 * kt[j];
        acc[2][j] += a2 * kt[j];
        acc[3][j] += a3 * kt[j];
      }
    }
    for (int i = 0; i < 4; ++i)
      for (int64_t j = 0; j < kBlockK; ++j) S[(r + i) * kBlockK + j] = acc[i][j] * scale;
  }
  for (; r < rows; ++r) {
    float acc[kBlockK] = {};
    for (int64_t d = 0; d < D; ++d) {
      float a = q[r * D + d];
      const float *kt = Kt + d * kBlockK;
      for (int64_t j = 0; j < kBlockK; ++j) acc[j] += a * kt[j];
    }
    for (int64_t j = 0; j < kBlockK; ++j) S[r * kBlockK + j] = acc[j] * scale;
  }
}

/// O[r, :] += sum_j P[r, j] · V[j, :] over `nk` keys, rows in groups of 4 sharing V loads.
void accumulatePV(const float *P, const float *V, int64_t nk, int64_t Dv, int64_t rows, float *O) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    float *o0 = O + r * Dv, *o1 = o0 + Dv, *o2 = o1 + Dv, *o3 = o2 + Dv;
    const float *p0 = P + r * kBlockK;
    for (int64_t j = 0; j < nk; ++j) {
      const float *v = V + j * Dv;
      float w0 = p0[j], w1 = p0[kBlockK + j], w2 = p0[2 * kBlockK + j], w3 = p0[3 * kBlockK + j];
      for (int64_t c = 0; c < Dv; ++c) {
        o0[c] += w0 * v[c];
        o1[c] += w1 * v[c];
        o2[c] += w2 * v[c];
        o3[c] += w3 * v[c];
      }
    }
  }
  for (; r < rows; ++r) {
    float *o = O + r * Dv;
    for (int64_t j = 0; j < nk; ++j) {
      float w = P[r * kBlockK + j];
      const float *v = V + j * Dv;
      for (int64_t c = 0; c < Dv; ++c) o[c] += w * v[c];
    }
  }
}

llvm::Error runAttention(const KernelCall &c) {
  const Dims d = dimsOf(c);
  const float *q = c.inputs[0].as<const float>(), *k = c.inputs[1].as<const float>(),
              *v = c.inputs[2].as<const float>();
  float *y = c.outputs[0].as<float>();
  const float scale = static_cast<float>(c.attrFloat("scale", 1.0 / std::sqrt(static_cast<double>(d.D))));
  const bool causal = c.attrInt("causal", 0) != 0;
  const int64_t group = d.Hq / d.Hkv;
  const int64_t causalOffset = d.Tk - d.Tq;  // key j visible to query i iff j <= i + causalOffset

  // Mask: element strides over [B, Hq, Tq, Tk] (0 on broadcast dims).
  const TensorRef *mask = c.inputs.size() == 4 ? &c.inputs[3] : nullptr;
  int64_t ms[4] = {0, 0, 0, 0};
  if (mask) {
    int64_t stride = 1;
    for (int64_t i = mask->rank() - 1, dim = 3; i >= 0; --i, --dim) {
      ms[dim] = mask->shape[i] == 1 ? 0 : stride;
      stride *= mask->shape[i];
    }
  }
  const bool maskBool = mask && mask->dtype == DType::Bool;

  const int64_t qBlocks = (d.Tq + kBlockQ - 1) / kBlockQ;
  const int64_t items = d.B * d.Hq * qBlocks;
  if (items == 0 || d.Dv == 0) return llvm::Error::success();
  const size_t perThread = perThreadFloats(d);
  const int threads = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(omp_get_max_threads()), c.threads, items})));
  float *workspace = static_cast<float *>(c.workspace);

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t qb = item % qBlocks, h = (item / qBlocks) % d.Hq, b = item / (qBlocks * d.Hq);
    const int64_t hk = h / group;
    float *Kt = workspace + perThread * omp_get_thread_num();
    float *S = Kt + (d.D * kBlockK + 15) / 16 * 16;
    float *O = S + kBlockQ * kBlockK;
    float *m = O + (kBlockQ * d.Dv + 15) / 16 * 16;
    float *l = m + 16 * ((kBlockQ + 15) / 16);

    const int64_t q0 = qb * kBlockQ, rows = std::min(kBlockQ, d.Tq - q0);
    const float *qp = q + ((b * d.Hq + h) * d.Tq + q0) * d.D;
    const float *kp = k + (b * d.Hkv + hk) * d.Tk * d.D;
    const float *vp = v + (b * d.Hkv + hk) * d.Tk * d.Dv;
    std::fill(O, O + rows * d.Dv, 0.0f);
    std::fill(m, m + rows, kNegInf);
    std::fill(l, l + rows, 0.0f);

    // Keys past the last row's causal limit are invisible to the whole block.
    int64_t kEnd = d.Tk;
    if (causal) kEnd = std::max<int64_t>(0, std::min(d.Tk, q0 + rows - 1 + causalOffset + 1));
    for (int64_t k0 = 0; k0 < kEnd; k0 += kBlockK) {
      const int64_t nk = std::min(kBlockK, d.Tk - k0);
      // Kt[dd, j] = k[k0 + j, dd]; padding lanes are zero (their scores are masked below).
      for (int64_t dd = 0; dd < d.D; ++dd) {
        float *row = Kt + dd * kBlockK;
        for (int64_t j = 0; j < nk; ++j) row[j] = kp[(k0 + j) * d.D + dd];
        for (int64_t j = nk; j < kBlockK; ++j) row[j] = 0.0f;
      }
      scoreTile(qp, d.D, Kt, rows, scale, S);
      for (int64_t r = 0; r < rows; ++r) {
        float *s = S + r * kBlockK;
        const int64_t qi = q0 + r;
        // Visible keys of this row within the block: [0, limit).
        int64_t limit = nk;
        if (causal) limit = std::max<int64_t>(0, std::min(nk, qi + causalOffset - k0 + 1));
        if (mask) {
          const int64_t base = b * ms[0] + h * ms[1] + qi * ms[2] + k0 * ms[3];
          if (maskBool) {
            const uint8_t *mp = mask->as<const uint8_t>() + base;
            for (int64_t j = 0; j < limit; ++j) s[j] = mp[j * ms[3]] ? s[j] : kNegInf;
          } else {
            const float *mp = mask->as<const float>() + base;
            for (int64_t j = 0; j < limit; ++j) s[j] += mp[j * ms[3]];
          }
        }
        for (int64_t j = limit; j < kBlockK; ++j) s[j] = kNegInf;
        float bm = kNegInf;
        for (int64_t j = 0; j < limit; ++j) bm = std::max(bm, s[j]);
        const float mNew = std::max(m[r], bm);
        if (mNew == kNegInf) {  // nothing visible to this row yet: contributes nothing
          for (int64_t j = 0; j < kBlockK; ++j) s[j] = 0.0f;
          continue;
        }
        const float alpha = fastExp(m[r] - mNew);  // 0 when m[r] = -inf
        float sum = 0.0f;
        for (int64_t j = 0; j < kBlockK; ++j) {
          s[j] = fastExp(s[j] - mNew);
          sum += s[j];
        }
        l[r] = l[r] * alpha + sum;
        m[r] = mNew;
        if (alpha != 1.0f) {
          float *o = O + r * d.Dv;
          for (int64_t cc = 0; cc < d.Dv; ++cc) o[cc] *= alpha;
        }
      }
      accumulatePV(S, vp + k0 * d.Dv, nk, d.Dv, rows, O);
    }
    float *yp = y + ((b * d.Hq + h) * d.Tq + q0) * d.Dv;
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      for (int64_t cc = 0; cc < d.Dv; ++cc) yp[r * d.Dv + cc] = O[r * d.Dv + cc] * inv;
    }
  }
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

//===- softmax.cpp - softmax and log_softmax CPU kernels (f32) ------------------------------===//
//
// Along one axis (attr `axis`, non-negative; default last): x viewed as [outer, A, inner].
//   softmax:     y = exp(x - max) / sum(exp(x - max))
//   log_softmax: y = x - max - log(sum(exp(x - max)))
// (ONNX Softmax-13 / LogSoftmax-13 semantics: one axis.) Last axis (inner == 1): per row SIMD max,
// exp and sum; other axes: blocks of 64 inner lanes accumulated across A. Parallel over rows.
// In-place safe.
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "FastMath.h"

#include <cmath>
#include <limits>

namespace colossal::runtime::cpu {
namespace {

llvm::Error verifySoftmax(const KernelCall &c) {
  const TensorRef &X = c.inputs[0];
  if (llvm::Error e = verifyDType(X, DType::F32, "input")) return e;
  if (llvm::Error e = verifySameShape(X, c.outputs[0], "input and output")) return e;
  int64_t axis = c.attrInt("axis", X.rank() - 1);
  if (axis < 0 || axis >= X.rank())
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(X.rank()));
  return llvm::Error::success();
}

template <bool LOG> llvm::Error runSoftmax(const KernelCall &c) {
  const TensorRef &X = c.inputs[0];
  int64_t outer, A, inner;
  splitAxis(X.shape, c.attrInt("axis", X.rank() - 1), outer, A, inner);
  if (X.numel() == 0) return llvm::Error::success();
  const float *x = X.as<const float>();
  float *y = c.outputs[0].as<float>();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (inner == 1) {
    parallelFor(outer, std::max<int64_t>(1, 8192 / A), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const float *px = x + o * A;
        float *py = y + o * A;
        float m = rowMax(px, A, kNegInf);
        if (m == kNegInf) m = 0;  // all -inf: exp gives 0s, sum 0 -> NaN as in PyTorch
        float s = 0;
        if constexpr (LOG) {
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < A; ++i) s += fastExp(px[i] - m);
          float lse = m + std::log(s);
          for (int64_t i = 0; i < A; ++i) py[i] = px[i] - lse;
        } else {
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < A; ++i) {
            py[i] = fastExp(px[i] - m);
            s += py[i];
          }
          float inv = 1.0f / s;
          for (int64_t i = 0; i < A; ++i) py[i] *= inv;
        }
      }
    });
    return llvm::Error::success();
  }
  constexpr int64_t kLanes = 64;
  int64_t blocks = (inner + kLanes - 1) / kLanes;
  parallelFor(outer * blocks, std::max<int64_t>(1, 8192 / (A * kLanes)), [&](int64_t b, int64_t e) {
    float m[kLanes], s[kLanes];
    for (int64_t w = b; w < e; ++w) {
      int64_t o = w / blocks, j0 = (w % blocks) * kLanes, n = std::min(kLanes, inner - j0);
      const float *px = x + o * A * inner + j0;
      float *py = y + o * A * inner + j0;
      for (int64_t j = 0; j < n; ++j) { m[j] = kNegInf; s[j] = 0; }
      for (int64_t a = 0; a < A; ++a)
        for (int64_t j = 0; j < n; ++j) m[j] = std::max(m[j], px[a * inner + j]);
      for (int64_t j = 0; j < n; ++j) m[j] = m[j] == kNegInf ? 0 : m[j];
      for (int64_t a = 0; a < A; ++a)
        for (int64_t j = 0; j < n; ++j) {
          float v = fastExp(px[a * inner + j] - m[j]);
          if constexpr (!LOG) py[a * inner + j] = v;
          s[j] += v;
        }
      if constexpr (LOG) {
        for (int64_t j = 0; j < n; ++j) s[j] = m[j] + std::log(s[j]);
        for (int64_t a = 0; a < A; ++a)
          for (int64_t j = 0; j < n; ++j) py[a * inner + j] = px[a * inner + j] - s[j];
      } else {
        for (int64_t j = 0; j < n; ++j) s[j] = 1.0f / s[j];
        for (int64_t a = 0; a < A; ++a)
          for (int64_t j = 0; j < n; ++j) py[a * inner + j] *= s[j];
      }
    }
  });
  return llvm::Error::success();
}

}  // namespace

void registerSoftmaxKernels(KernelRegistry &r) {
  KernelDesc d;
  d.op = "softmax";
  d.attrs = {{"axis", AttrKind::Int}};
  d.verify = verifySoftmax;
  d.run = runSoftmax<false>;
  r.add(d);
  d.op = "log_softmax";
  d.run = runSoftmax<true>;
  r.add(d);
}

}  // namespace colossal::runtime::cpu

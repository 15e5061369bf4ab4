//===- norm.cpp - layer_norm and rms_norm CPU kernels (f32) ---------------------------------===//
//
// x [d0..dn), normalized over dims [axis, n): rows = prod(d0..axis), N = prod(axis..n).
//   layer_norm: y = (x - mean) / sqrt(var + eps) * scale + bias   (biased variance; Ba et al. 2016,
//               ONNX LayerNormalization)
//   rms_norm:   y = x / sqrt(mean(x²) + eps) * scale               (Zhang & Sennrich 2019)
// scale/bias have shape x.shape[axis:]. Two passes per row (mean, then centred variance) for
// accuracy; SIMD reductions; parallel over rows. In-place safe.
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"

#include <cmath>

namespace colossal::runtime::cpu {
namespace {

llvm::Error verifyNorm(const KernelCall &c) {
  const TensorRef &X = c.inputs[0];
  if (llvm::Error e = verifySameShape(X, c.outputs[0], "input and output")) return e;
  for (const TensorRef &t : c.inputs)
    if (llvm::Error e = verifyDType(t, DType::F32, "operand")) return e;
  int64_t axis = c.attrInt("axis", X.rank() - 1);
  if (axis < 0 || axis >= std::max<int64_t>(X.rank(), 1))
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(X.rank()));
  llvm::ArrayRef<int64_t> tail = llvm::ArrayRef<int64_t>(X.shape).drop_front(axis);
  for (size_t i = 1; i < c.inputs.size(); ++i)
    if (llvm::ArrayRef<int64_t>(c.inputs[i].shape) != tail)
      return kernelError((i == 1 ? "scale" : "bias") + llvm::Twine(" has shape ") +
                         shapeToString(c.inputs[i].shape) + ", expected " + shapeToString(tail));
  return llvm::Error::success();
}

template <bool RMS> llvm::Error runNorm(const KernelCall &c) {
  const TensorRef &X = c.inputs[0];
  int64_t axis = c.attrInt("axis", X.rank() - 1);
  float eps = static_cast<float>(c.attrFloat("epsilon", 1e-5));
  int64_t rows = 1, N = 1;
  for (int64_t i = 0; i < X.rank(); ++i) (i < axis ? rows : N) *= X.shape[i];
  if (N == 0) return llvm::Error::success();
  const float *x = X.as<const float>(), *scale = c.inputs[1].as<const float>();
  const float *bias = c.inputs.size() > 2 ? c.inputs[2].as<const float>() : nullptr;
  float *y = c.outputs[0].as<float>();
  parallelFor(rows, std::max<int64_t>(1, 4096 / N), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float *px = x + r * N;
      float *py = y + r * N;
      if constexpr (RMS) {
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < N; ++i) ss += px[i] * px[i];
        float inv = 1.0f / std::sqrt(ss / static_cast<float>(N) + eps);
        for (int64_t i = 0; i < N; ++i) py[i] = px[i] * inv * scale[i];
      } else {
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < N; ++i) s += px[i];
        float mean = s / static_cast<float>(N);
        float v = 0;
#pragma omp simd reduction(+ : v)
        for (int64_t i = 0; i < N; ++i) v += (px[i] - mean) * (px[i] - mean);
        float inv = 1.0f / std::sqrt(v / static_cast<float>(N) + eps);
        if (bias)
          for (int64_t i = 0; i < N; ++i) py[i] = (px[i] - mean) * inv * scale[i] + bias[i];
        else
          for (int64_t i = 0; i < N; ++i) py[i] = (px[i] - mean) * inv * scale[i];
      }
    }
  });
  return llvm::Error::success();
}

}  // namespace

void registerNormKernels(KernelRegistry &r) {
  KernelDesc ln;
  ln.op = "layer_norm";
  ln.minInputs = 2;
  ln.maxInputs = 3;
  ln.attrs = {{"axis", AttrKind::Int}, {"epsilon", AttrKind::Float}};
  ln.verify = verifyNorm;
  ln.run = runNorm<false>;
  r.add(ln);
  KernelDesc rms = ln;
  rms.op = "rms_norm";
  rms.maxInputs = 2;
  rms.run = runNorm<true>;
  r.add(rms);
}

}  // namespace colossal::runtime::cpu

//===- FastMath.h - Vectorizable float math for CPU kernels ---------------------*- C++ -*-===//
//
// Branch-free scalar functions that GCC/Clang vectorize inside loops (libm calls do not). Accuracy
// is stated per function; kernel tests compare against libm.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_FASTMATH_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_FASTMATH_H

#include <cstdint>
#include <cstring>
#include <limits>

namespace colossal::runtime::cpu {

// Always inlined: a call per element keeps the loop around it scalar. GCC declined to inline
// fastExp into the single-thread path of mapUnary (CpuCommon.h parallelFor's direct call), which
// left silu, sigmoid, exp, tanh and gelu at ~8 ns an element on one thread.
#define COLOSSAL_FAST_MATH_INLINE inline __attribute__((always_inline))

/// e^x with ~2 ulp relative error on [-87, 88]; 0 below, +inf above, NaN for NaN.
/// Cody–Waite range reduction x = n·ln2 + r and the degree-6 minimax polynomial of Cephes expf.
COLOSSAL_FAST_MATH_INLINE float fastExp(float x) {
  float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float t = xc * 1.44269504088896341f;
  float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest (1.5·2^23 trick)
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  float y = p * scale;
  y = x < -87.0f ? 0.0f : y;
  y = x > 88.0f ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}

/// 1 / (1 + e^-x).
COLOSSAL_FAST_MATH_INLINE float fastSigmoid(float x) { return 1.0f / (1.0f + fastExp(-x)); }

/// tanh(x): odd Taylor polynomial for |x| < 0.0625, else 1 - 2/(e^{2x} + 1); |error| < 3e-7.
COLOSSAL_FAST_MATH_INLINE float fastTanh(float x) {
  float x2 = x * x;
  float small = x * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f))));
  float big = 1.0f - 2.0f / (fastExp(2.0f * x) + 1.0f);
  float ax = x < 0 ? -x : x;
  return ax < 0.0625f ? small : big;
}

/// erf(x): rational approximation on [-4, 4] (saturated outside), as in Eigen's
/// generic_fast_erf_float; max abs error ~1e-7 (within float rounding of erf).
COLOSSAL_FAST_MATH_INLINE float fastErf(float x) {
  float xc = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
  float x2 = xc * xc;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * xc;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  float y = p / q;
  return x != x ? x : y;
}

/// max(init, x[0], ..., x[n-1]) for the row maxima of softmax, attention and cross-entropy.
/// Spelled `m > x ? m : x` because GCC 12 vectorizes that (vmaxps) but leaves std::max's
/// `m < x ? x : m` scalar: max is exact, so the lane order changes nothing for finite values.
/// A NaN element may or may not reach the result; the callers' rows are NaN either way (their
/// Σ exp(x − m) holds exp(NaN)).
COLOSSAL_FAST_MATH_INLINE float rowMax(const float *x, int64_t n, float init) {
  float m = init;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = m > x[i] ? m : x[i];
  return m;
}

#undef COLOSSAL_FAST_MATH_INLINE

}  // namespace colossal::runtime::cpu

#endif

//===- Activations.h - the activation functions the elementwise and GEMM kernels share -*- C++ -*-===//
//
// One definition of each activation, so that an epilogue fused into a GEMM (matmul.cpp's
// `linear`) rounds exactly as the standalone elementwise kernel does (elementwise.cpp): the
// fusion changes where the function runs, never its value. float uses the vectorizable
// FastMath.h forms (|error| < 3e-7), double the C library. Internal to runtime/kernels/cpu.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_ACTIVATIONS_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_ACTIVATIONS_H

#include "FastMath.h"

#include <cmath>

namespace colossal::runtime::cpu {

/// max(x, 0).
struct Relu { template <typename T> static T f(T x) { return x > 0 ? x : T(0); } };

struct Tanh {
  static float f(float x) { return fastTanh(x); }
  static double f(double x) { return std::tanh(x); }
};

/// GELU, erf form: 0.5·x·(1 + erf(x/√2)) (Hendrycks & Gimpel 2016).
struct GeluErf {
  static float f(float x) { return 0.5f * x * (1.0f + fastErf(x * 0.70710678118654752f)); }
  static double f(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752)); }
};

/// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
/// float evaluates it as x·σ(2u) = x / (1 + e^{−2u}), u = √(2/π)·(x + 0.044715·x³), the same
/// function (0.5·(1 + tanh u) = σ(2u)): one exp and one division, and no cancellation in 1 + tanh u
/// for negative x (the tanh form's relative error reaches 0.3 there; this one stays < 2e-6).
struct GeluTanh {
  static float f(float x) {
    const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return x / (1.0f + fastExp(-2.0f * u));
  }
  static double f(double x) {
    return 0.5 * x * (1.0 + std::tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
  }
};

}  // namespace colossal::runtime::cpu

#endif

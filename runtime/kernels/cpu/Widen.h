//===- Widen.h - f32 views of bf16 tensors inside a kernel's workspace -----------*- C++ -*-===//
//
// colossal-auto-mixed-precision gives contractions and attention bf16 (or fp16) operands. Their
// kernels compute in f32 (every bf16 and f16 value is exactly an f32, so widening is exact): each
// 16-bit operand is widened into the workspace, a 16-bit result is computed into the workspace and
// rounded to nearest even at the end. f32 tensors are used in place. Internal to
// runtime/kernels/cpu.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_WIDEN_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_WIDEN_H

#include "CpuCommon.h"
#include "Half.h"

namespace colossal::runtime::cpu {

/// Workspace bytes an f32 copy of `t` needs: 0 when t is f32, else its elements as floats rounded
/// up to 64 bytes (so the next copy stays aligned).
inline size_t f32CopyBytes(const TensorRef &t) {
  if (t.dtype == DType::F32) return 0;
  return (static_cast<size_t>(t.numel()) * sizeof(float) + 63) / 64 * 64;
}

/// `t` as f32: its own data when f32, else a widened copy at `ws` (which moves past it).
inline const float *widenedInput(const TensorRef &t, char *&ws) {
  if (t.dtype == DType::F32) return t.as<const float>();
  float *f = reinterpret_cast<float *>(ws);
  ws += f32CopyBytes(t);
  const uint16_t *h = t.as<const uint16_t>();
  const bool half = t.dtype == DType::F16;
  parallelFor(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    if (half) halfToFloatN(h + b, f + b, e - b);
    else bfloat16ToFloatN(h + b, f + b, e - b);
  });
  return f;
}

/// The 16-bit float types a mixed-precision kernel widens (bf16, f16).
inline bool isHalfFloat(DType d) { return d == DType::BF16 || d == DType::F16; }

/// Where an f32 result for output `t` goes: its own data when f32, else f32 space at `ws`
/// (which moves past it); roundResult() then stores it.
inline float *f32Result(const TensorRef &t, char *&ws) {
  if (t.dtype == DType::F32) return t.as<float>();
  float *f = reinterpret_cast<float *>(ws);
  ws += f32CopyBytes(t);
  return f;
}

/// Rounds the f32 result `f` (from f32Result) into a bf16 or f16 output `t`; nothing for an f32
/// output.
inline void roundResult(const TensorRef &t, const float *f) {
  if (!isHalfFloat(t.dtype)) return;
  uint16_t *h = t.as<uint16_t>();
  const bool half = t.dtype == DType::F16;
  parallelFor(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    if (half) floatToHalfN(f + b, h + b, e - b);
    else floatToBfloat16N(f + b, h + b, e - b);
  });
}

}  // namespace colossal::runtime::cpu

#endif

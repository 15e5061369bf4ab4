//===- Half.h - IEEE binary16 <-> binary32 conversion ---------------------------*- C++ -*-===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_HALF_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_HALF_H

#include "colossal/runtime/DType.h"

#include <cstdint>
#include <cstring>

namespace colossal::runtime::cpu {

/// binary16 bits -> float (exact; subnormals, inf and NaN preserved).
inline float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; man <<= 1; } while (!(man & 0x400u));
      bits = sign | ((112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// float -> binary16 bits, round to nearest even; overflow -> inf, NaN stays NaN.
inline uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t e = ax >> 23, man = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14..24
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((ax >> 13) - (112u << 10));
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

/// bfloat16: the runtime's one conversion (DType.h).
using runtime::bfloat16ToFloat;
using runtime::floatToBfloat16;

/// n bfloat16 -> float (exact). A loop the compiler vectorizes.
inline void bfloat16ToFloatN(const uint16_t *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16ToFloat(in[i]);
}

/// n float -> bfloat16, round to nearest even (floatToBfloat16 per element).
inline void floatToBfloat16N(const float *in, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = floatToBfloat16(in[i]);
}

/// n float16 -> float (exact).
inline void halfToFloatN(const uint16_t *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = halfToFloat(in[i]);
}

/// n float -> float16, round to nearest even (floatToHalf per element).
inline void floatToHalfN(const float *in, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = floatToHalf(in[i]);
}

}  // namespace colossal::runtime::cpu

#endif

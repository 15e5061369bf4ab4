//===- NumericTypes.h - dtype dispatch for kernels that do arithmetic ------------*- C++ -*-===//
//
// Kernels that compare or accumulate (reduce, argmax, cumsum, topk, scatter reductions) are
// written once over a storage type S and its accumulator Num<S>::Acc: f32 → float, f64 → double,
// f16 → float (converted on load/store, Half.h), integers → int64_t. dispatchNumeric calls
// f(S{}) for the dtype. Internal to runtime/kernels/cpu.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_NUMERICTYPES_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_NUMERICTYPES_H

#include "CpuCommon.h"
#include "Half.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace colossal::runtime::cpu {

/// binary16 storage (distinct from uint16_t so that dispatch can tell them apart).
struct F16Bits {
  uint16_t bits;
};

template <typename S> struct Num {
  using Acc = std::conditional_t<std::is_floating_point_v<S>, S, int64_t>;
  static constexpr bool isFloat = std::is_floating_point_v<S>;
  static Acc load(const S *p, int64_t i) { return static_cast<Acc>(p[i]); }
  static void store(S *p, int64_t i, Acc v) { p[i] = static_cast<S>(v); }
};
template <> struct Num<F16Bits> {
  using Acc = float;
  static constexpr bool isFloat = true;
  static float load(const F16Bits *p, int64_t i) { return halfToFloat(p[i].bits); }
  static void store(F16Bits *p, int64_t i, float v) { p[i].bits = floatToHalf(v); }
};

/// NaN test that is false for integer accumulators.
template <typename A> inline bool isNaN(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  else return false;
}

/// The dtypes dispatchNumeric accepts.
inline bool isNumeric(DType d) {
  switch (d) {
  case DType::F32: case DType::F64: case DType::F16: case DType::I64: case DType::I32:
  case DType::I16: case DType::I8: case DType::U8:
    return true;
  default:
    return false;
  }
}

/// Calls f(S{}) with the storage type of `d`; false for a dtype without arithmetic here.
template <typename F> bool dispatchNumeric(DType d, F &&f) {
  switch (d) {
  case DType::F32: f(float{}); return true;
  case DType::F64: f(double{}); return true;
  case DType::F16: f(F16Bits{}); return true;
  case DType::I64: f(int64_t{}); return true;
  case DType::I32: f(int32_t{}); return true;
  case DType::I16: f(int16_t{}); return true;
  case DType::I8: f(int8_t{}); return true;
  case DType::U8: f(uint8_t{}); return true;
  default: return false;
  }
}

/// Every dtype dispatchNumeric accepts, for registration loops.
inline constexpr DType kNumericDTypes[] = {DType::F32, DType::F64, DType::F16, DType::I64,
                                           DType::I32, DType::I16, DType::I8,  DType::U8};

}  // namespace colossal::runtime::cpu

#endif

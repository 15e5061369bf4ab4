//===- DType.h - Element types shared by plan, kernels and file formats ---------*- C++ -*-===//
//
// The runtime's element types. The numeric values are those of `colossal.plan.DType` in
// runtime/plan/plan.proto, so a plan's enum converts with a static_cast after isValidDType().
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_DTYPE_H
#define COLOSSAL_RUNTIME_DTYPE_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace colossal::runtime {

/// Element type of a tensor. Values match plan.proto's `DType`.
enum class DType : uint8_t {
  Invalid = 0,
  F32 = 1,
  F16 = 2,
  BF16 = 3,
  F64 = 4,
  I64 = 5,
  I32 = 6,
  I16 = 7,
  I8 = 8,
  U8 = 9,
  Bool = 10,
  U16 = 11,
  U32 = 12,
  U64 = 13,
};

/// The largest enumerator, for loops over every dtype: `for (int v = 1; v <= kLastDType; ++v)`.
inline constexpr int kLastDType = 13;

/// bfloat16 bits -> float (exact: the upper half of a binary32). The one bfloat16 conversion
/// (kernels, communication, the tools' .npy boundary).
inline float bfloat16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// float -> bfloat16 bits, round to nearest even; NaN stays (quiet) NaN.
inline uint16_t floatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

/// True when `value` is one of the non-invalid enumerators above (e.g. read from a plan).
bool isValidDType(int64_t value);

/// Bytes per element: F32 4, F16 2, BF16 2, F64 8, I64 8, I32 4, I16 2, I8 1, U8 1, Bool 1, U16 2,
/// U32 4, U64 8; 0 for Invalid.
size_t dtypeSize(DType dtype);

/// Short lower-case name for messages: "f32", "i64", "bool", ...
llvm::StringRef dtypeName(DType dtype);

/// The safetensors spelling ("F32", "BF16", "BOOL", ...), and its inverse (nullopt when unknown).
llvm::StringRef safetensorsDTypeName(DType dtype);
std::optional<DType> dtypeFromSafetensorsName(llvm::StringRef name);

/// The NumPy `descr` written for `dtype` ("<f4", "|b1", ...); empty for BF16 (which NumPy lacks:
/// bfloat16 travels as float32) and Invalid.
llvm::StringRef npyDescr(DType dtype);

/// Maps a NumPy `descr` to a dtype: accepts "<" or "=" (little-endian host) for multi-byte types and
/// "|", "<", "=" for one-byte types. nullopt for anything else (big-endian, complex, strings, ...).
std::optional<DType> dtypeFromNpyDescr(llvm::StringRef descr);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_DTYPE_H

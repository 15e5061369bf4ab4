//===- DType.cpp - Element type tables ------------------------------------------------------===//
#include "colossal/runtime/DType.h"

namespace colossal::runtime {

bool isValidDType(int64_t value) { return value >= 1 && value <= kLastDType; }

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32: case DType::I32: case DType::U32: return 4;
  case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
  case DType::F64: case DType::I64: case DType::U64: return 8;
  case DType::I8: case DType::U8: case DType::Bool: return 1;
  case DType::Invalid: return 0;
  }
  return 0;
}

llvm::StringRef dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::F64: return "f64";
  case DType::I64: return "i64";
  case DType::I32: return "i32";
  case DType::I16: return "i16";
  case DType::I8: return "i8";
  case DType::U8: return "u8";
  case DType::Bool: return "bool";
  case DType::U16: return "u16";
  case DType::U32: return "u32";
  case DType::U64: return "u64";
  case DType::Invalid: return "invalid";
  }
  return "invalid";
}

llvm::StringRef safetensorsDTypeName(DType dtype) {
  switch (dtype) {
  case DType::F32: return "F32";
  case DType::F16: return "F16";
  case DType::BF16: return "BF16";
  case DType::F64: return "F64";
  case DType::I64: return "I64";
  case DType::I32: return "I32";
  case DType::I16: return "I16";
  case DType::I8: return "I8";
  case DType::U8: return "U8";
  case DType::Bool: return "BOOL";
  case DType::U16: return "U16";
  case DType::U32: return "U32";
  case DType::U64: return "U64";
  case DType::Invalid: return "";
  }
  return "";
}

std::optional<DType> dtypeFromSafetensorsName(llvm::StringRef name) {
  for (int v = 1; v <= kLastDType; ++v)
    if (safetensorsDTypeName(static_cast<DType>(v)) == name) return static_cast<DType>(v);
  return std::nullopt;
}

llvm::StringRef npyDescr(DType dtype) {
  switch (dtype) {
  case DType::F32: return "<f4";
  case DType::F16: return "<f2";
  case DType::F64: return "<f8";
  case DType::I64: return "<i8";
  case DType::I32: return "<i4";
  case DType::I16: return "<i2";
  case DType::I8: return "|i1";
  case DType::U8: return "|u1";
  case DType::Bool: return "|b1";
  case DType::U16: return "<u2";
  case DType::U32: return "<u4";
  case DType::U64: return "<u8";
  case DType::BF16: case DType::Invalid: return "";
  }
  return "";
}

std::optional<DType> dtypeFromNpyDescr(llvm::StringRef descr) {
  if (descr.size() < 2) return std::nullopt;
  char order = descr[0];
  llvm::StringRef kind = descr.drop_front();
  for (int v = 1; v <= kLastDType; ++v) {
    DType d = static_cast<DType>(v);
    llvm::StringRef canon = npyDescr(d);
    if (canon.empty() || canon.drop_front() != kind) continue;
    bool oneByte = dtypeSize(d) == 1;
    if (order == '<' || order == '=' || (oneByte && order == '|')) return d;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace colossal::runtime

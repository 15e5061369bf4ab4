//===- cast.cpp - copy and cast CPU kernels -------------------------------------------------===//
//
// copy: any dtype, y = x (bytes). cast: ONNX Cast between f32, f16, bf16, f64, i64, i32, i16, i8, u8
// and bool:
// float -> int truncates toward zero (out-of-range values are undefined in ONNX; here they give
// whatever the hardware conversion gives, never a trap), -> bool is x != 0, bool -> number is 0/1,
// f16 and bf16 conversions round to nearest even. The kernel is keyed by the output dtype and dispatches on
// the input dtype. copy is in-place safe (a no-op then).
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "Half.h"

#include <cstring>

namespace colossal::runtime::cpu {
namespace {

// Storage types: f16 is carried as uint16_t bits, bool as uint8_t.
struct F16 { uint16_t bits; };
struct BF16 { uint16_t bits; };

template <typename To, typename From> To convert(From v) {
  if constexpr (std::is_same_v<From, F16>) {
    return convert<To, float>(halfToFloat(v.bits));
  } else if constexpr (std::is_same_v<From, BF16>) {
    return convert<To, float>(bfloat16ToFloat(v.bits));
  } else if constexpr (std::is_same_v<To, F16>) {
    return F16{floatToHalf(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, BF16>) {
    return BF16{floatToBfloat16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

template <typename To, typename From> void castLoop(const void *src, void *dst, int64_t n) {
  const From *x = static_cast<const From *>(src);
  To *y = static_cast<To *>(dst);
  parallelFor(n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = convert<To, From>(x[i]);
  });
}

template <typename To> bool castFrom(DType from, const void *src, void *dst, int64_t n) {
  switch (from) {
  case DType::F32: castLoop<To, float>(src, dst, n); return true;
  case DType::F64: castLoop<To, double>(src, dst, n); return true;
  case DType::F16: castLoop<To, F16>(src, dst, n); return true;
  case DType::BF16: castLoop<To, BF16>(src, dst, n); return true;
  case DType::I16: castLoop<To, int16_t>(src, dst, n); return true;
  case DType::I64: castLoop<To, int64_t>(src, dst, n); return true;
  case DType::I32: castLoop<To, int32_t>(src, dst, n); return true;
  case DType::I8: castLoop<To, int8_t>(src, dst, n); return true;
  case DType::U8: castLoop<To, uint8_t>(src, dst, n); return true;
  case DType::Bool: castLoop<To, uint8_t>(src, dst, n); return true;  // 0/1 bytes
  default: return false;
  }
}

bool castInto(DType to, DType from, const void *src, void *dst, int64_t n) {
  switch (to) {
  case DType::F32: return castFrom<float>(from, src, dst, n);
  case DType::F64: return castFrom<double>(from, src, dst, n);
  case DType::F16: return castFrom<F16>(from, src, dst, n);
  case DType::BF16: return castFrom<BF16>(from, src, dst, n);
  case DType::I16: return castFrom<int16_t>(from, src, dst, n);
  case DType::I64: return castFrom<int64_t>(from, src, dst, n);
  case DType::I32: return castFrom<int32_t>(from, src, dst, n);
  case DType::I8: return castFrom<int8_t>(from, src, dst, n);
  case DType::U8: return castFrom<uint8_t>(from, src, dst, n);
  case DType::Bool: {
    // bool output: x != 0 as 0/1 bytes (convert<bool> then stored as uint8_t).
    static_assert(sizeof(bool) == 1, "bool must be one byte");
    return castFrom<bool>(from, src, dst, n);
  }
  default: return false;
  }
}

bool castable(DType d) {
  switch (d) {
  case DType::F32: case DType::F64: case DType::F16: case DType::BF16: case DType::I64:
  case DType::I32: case DType::I16: case DType::I8: case DType::U8: case DType::Bool: return true;
  default: return false;
  }
}

llvm::Error verifyCast(const KernelCall &c) {
  if (!castable(c.inputs[0].dtype))
    return kernelError("cast from " + dtypeName(c.inputs[0].dtype) + " is not implemented");
  return verifySameShape(c.inputs[0], c.outputs[0], "input and output");
}

llvm::Error runCast(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (X.dtype == Y.dtype) {
    if (X.data != Y.data) std::memcpy(Y.data, X.data, Y.bytes());
    return llvm::Error::success();
  }
  castInto(Y.dtype, X.dtype, X.data, Y.data, Y.numel());
  return llvm::Error::success();
}

llvm::Error verifyCopy(const KernelCall &c) {
  if (c.inputs[0].dtype != c.outputs[0].dtype)
    return kernelError("copy between dtypes " + dtypeName(c.inputs[0].dtype).str() + " and " +
                       dtypeName(c.outputs[0].dtype).str() + " (use cast)");
  return verifySameShape(c.inputs[0], c.outputs[0], "input and output");
}

llvm::Error runCopy(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (X.data == Y.data) return llvm::Error::success();
  const char *src = static_cast<const char *>(X.data);
  char *dst = static_cast<char *>(Y.data);
  parallelFor(static_cast<int64_t>(Y.bytes()), 1 << 20, [&](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, e - b);
  });
  return llvm::Error::success();
}

}  // namespace

void registerCastKernels(KernelRegistry &r) {
  for (int v = 1; v <= 10; ++v) {
    DType d = static_cast<DType>(v);
    KernelDesc copy;
    copy.op = "copy";
    copy.dtype = d;
    copy.verify = verifyCopy;
    copy.run = runCopy;
    r.add(copy);
    if (!castable(d)) continue;
    KernelDesc cast;
    cast.op = "cast";
    cast.dtype = d;
    cast.verify = verifyCast;
    cast.run = runCast;
    r.add(cast);
  }
}

}  // namespace colossal::runtime::cpu

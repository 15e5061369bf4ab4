//===- quantize.cpp - quantize_linear, dequantize_linear, dynamic_quantize_linear -------------===//
//
// quantize_linear (u8/i8 out): y = saturate(round_half_even(x / scale) + zero_point), x f32, scale
//   f32 and zero_point of y's dtype either one value or one per index of dim `axis` (ONNX
//   QuantizeLinear).
// dequantize_linear (f32 out): y = (x − zero_point) · scale, x u8/i8/i32 (ONNX DequantizeLinear).
// dynamic_quantize_linear (u8, f32 [], u8 [] out): scale = (max(0, max x) − min(0, min x)) / 255,
//   zero_point = saturate(round_half_even(−min(0, min x) / scale)), y = quantize_linear(x) (ONNX
//   DynamicQuantizeLinear); an all-zero x gives scale 0, zero point 0 and y = 0.
// Rounding uses the current (default: to nearest even) rounding mode via std::nearbyint.
//
//===----------------------------------------------------------------------------------------===//
#include "NN.h"

#include <cmath>
#include <limits>

namespace colossal::runtime::cpu {
namespace {

/// Element loops over x viewed as [outer, mid (the axis), inner] with per-mid parameters.
struct AxisView {
  int64_t outer = 1, mid = 1, inner = 1;
  bool perAxis = false;
};

llvm::Error viewFor(const KernelCall &c, AxisView &v) {
  const TensorRef &X = c.inputs[0], &S = c.inputs[1], &Z = c.inputs[2];
  if (S.numel() != Z.numel()) return kernelError("scale and zero_point differ in size");
  if (S.numel() == 1 || X.rank() == 0) {
    v.inner = X.numel();
    return llvm::Error::success();
  }
  int64_t axis = c.attrInt("axis", 1);
  if (axis < 0 || axis >= X.rank())
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(X.rank()));
  splitAxis(X.shape, axis, v.outer, v.mid, v.inner);
  if (S.numel() != v.mid)
    return kernelError("scale has " + llvm::Twine(S.numel()) + " values for axis size " + llvm::Twine(v.mid));
  v.perAxis = true;
  return llvm::Error::success();
}

template <typename Q> Q saturate(float v) {
  constexpr float lo = float(std::numeric_limits<Q>::min()), hi = float(std::numeric_limits<Q>::max());
  return static_cast<Q>(std::min(std::max(v, lo), hi));
}

llvm::Error verifyQuantize(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (llvm::Error e = verifyDType(X, DType::F32, "input")) return e;
  if (llvm::Error e = verifyDType(c.inputs[1], DType::F32, "scale")) return e;
  if (c.inputs[2].dtype != Y.dtype) return kernelError("zero_point must have the output's dtype");
  if (X.shape != Y.shape) return kernelError("output shape differs from the input's");
  AxisView v;
  return viewFor(c, v);
}

template <typename Q> llvm::Error runQuantize(const KernelCall &c) {
  AxisView v;
  if (llvm::Error e = viewFor(c, v)) return e;
  const float *x = c.inputs[0].as<const float>(), *scale = c.inputs[1].as<const float>();
  const Q *zp = c.inputs[2].as<const Q>();
  Q *y = c.outputs[0].as<Q>();
  parallelFor(v.outer * v.mid, std::max<int64_t>(1, 32768 / std::max<int64_t>(v.inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t m = v.perAxis ? r % v.mid : 0;
      float s = scale[m], z = float(zp[m]);
      const float *xr = x + r * v.inner;
      Q *yr = y + r * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) yr[i] = saturate<Q>(std::nearbyint(xr[i] / s) + z);
    }
  });
  return llvm::Error::success();
}

llvm::Error verifyDequantize(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (X.dtype != DType::U8 && X.dtype != DType::I8 && X.dtype != DType::I32)
    return kernelError("input must be u8, i8 or i32");
  if (llvm::Error e = verifyDType(c.inputs[1], DType::F32, "scale")) return e;
  if (c.inputs[2].dtype != X.dtype) return kernelError("zero_point must have the input's dtype");
  if (X.shape != Y.shape) return kernelError("output shape differs from the input's");
  AxisView v;
  return viewFor(c, v);
}

template <typename Q> void dequantize(const KernelCall &c, const AxisView &v) {
  const Q *x = c.inputs[0].as<const Q>(), *zp = c.inputs[2].as<const Q>();
  const float *scale = c.inputs[1].as<const float>();
  float *y = c.outputs[0].as<float>();
  parallelFor(v.outer * v.mid, std::max<int64_t>(1, 32768 / std::max<int64_t>(v.inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t m = v.perAxis ? r % v.mid : 0;
      float s = scale[m];
      int64_t z = int64_t(zp[m]);
      const Q *xr = x + r * v.inner;
      float *yr = y + r * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) yr[i] = float(int64_t(xr[i]) - z) * s;
    }
  });
}

llvm::Error runDequantize(const KernelCall &c) {
  AxisView v;
  if (llvm::Error e = viewFor(c, v)) return e;
  switch (c.inputs[0].dtype) {
  case DType::U8: dequantize<uint8_t>(c, v); break;
  case DType::I8: dequantize<int8_t>(c, v); break;
  default: dequantize<int32_t>(c, v); break;
  }
  return llvm::Error::success();
}

llvm::Error verifyDynamic(const KernelCall &c) {
  const TensorRef &X = c.inputs[0];
  if (llvm::Error e = verifyDType(X, DType::F32, "input")) return e;
  if (llvm::Error e = verifyDType(c.outputs[0], DType::U8, "y")) return e;
  if (llvm::Error e = verifyDType(c.outputs[1], DType::F32, "y_scale")) return e;
  if (llvm::Error e = verifyDType(c.outputs[2], DType::U8, "y_zero_point")) return e;
  if (c.outputs[0].shape != X.shape || c.outputs[1].numel() != 1 || c.outputs[2].numel() != 1)
    return kernelError("outputs must be y (x's shape), a scalar scale and a scalar zero point");
  return llvm::Error::success();
}

llvm::Error runDynamic(const KernelCall &c) {
  const TensorRef &X = c.inputs[0];
  const float *x = X.as<const float>();
  int64_t n = X.numel();
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  float scale = (hi - lo) / 255.0f;
  uint8_t zp = scale == 0 ? 0 : saturate<uint8_t>(std::nearbyint(-lo / scale));
  uint8_t *y = c.outputs[0].as<uint8_t>();
  parallelFor(n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = scale == 0 ? 0 : saturate<uint8_t>(std::nearbyint(x[i] / scale) + float(zp));
  });
  c.outputs[1].as<float>()[0] = scale;
  c.outputs[2].as<uint8_t>()[0] = zp;
  return llvm::Error::success();
}

}  // namespace

void registerQuantizeKernels(KernelRegistry &r) {
  KernelDesc q;
  q.op = "quantize_linear";
  q.minInputs = q.maxInputs = 3;
  q.attrs = {{"axis", AttrKind::Int}};
  q.verify = verifyQuantize;
  q.dtype = DType::U8;
  q.run = runQuantize<uint8_t>;
  r.add(q);
  q.dtype = DType::I8;
  q.run = runQuantize<int8_t>;
  r.add(q);

  KernelDesc dq = q;
  dq.op = "dequantize_linear";
  dq.dtype = DType::F32;
  dq.verify = verifyDequantize;
  dq.run = runDequantize;
  r.add(dq);

  KernelDesc dyn;
  dyn.op = "dynamic_quantize_linear";
  dyn.dtype = DType::U8;
  dyn.minOutputs = dyn.maxOutputs = 3;
  dyn.verify = verifyDynamic;
  dyn.run = runDynamic;
  r.add(dyn);
}

}  // namespace colossal::runtime::cpu

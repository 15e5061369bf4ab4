//===- pool.cpp - pool, max_pool_with_indices, max_unpool CPU kernels ----------------------------===//
//
// pool: x [N, C, D...] -> y [N, C, O...], `kind` max / avg / lp over a strided, dilated, padded
//   window (ONNX MaxPool, AveragePool, LpPool; output size rule in NN.h). Elements in the padding
//   never take part in max/lp; avg divides by the in-input count, or with count_include_pad by the
//   count inside the padded input. max: f32, f64, f16, i8, u8; avg and lp: f32.
// max_pool_with_indices: max pooling plus the flat index (i64) of each maximum in x, row-major or
//   (storage_order 1) column-major over the spatial dims; ties keep the first (ONNX MaxPool's
//   Indices).
// pool_grad: the VJP of pool (f32): dx = 0, then each window's dy goes to its argmax, recomputed
//   from x with the forward's tie rule (max), split over its in-input taps by the forward's divisor
//   (avg), or to its taps times sign(x)·|x|^(p−1) / y^(p−1) with the norm y recomputed (lp).
// max_unpool: y = 0 except x[i] lands at the coordinates indices[i] names in `index_shape` (ONNX
//   MaxUnpool); f32.
// Parallel over the N·C planes (and over output rows when there are few planes).
//
//===----------------------------------------------------------------------------------------===//
#include "Half.h"
#include "NN.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace colossal::runtime::cpu {
namespace {

enum class Kind { Max, Avg, Lp };

struct F16 { uint16_t bits; };
template <typename T> float toF(T v) { return static_cast<float>(v); }
template <> float toF<F16>(F16 v) { return halfToFloat(v.bits); }

/// Accumulation type per storage type: max compares in the storage domain (exact for integers).
template <typename T> struct MaxTraits {
  using Acc = T;
  static Acc lowest() { return std::numeric_limits<T>::lowest(); }
  static Acc load(T v) { return v; }
  static T store(Acc v) { return v; }
};
template <> struct MaxTraits<F16> {
  using Acc = float;
  static Acc lowest() { return -std::numeric_limits<float>::infinity(); }
  static Acc load(F16 v) { return halfToFloat(v.bits); }
  static F16 store(Acc v) { return F16{floatToHalf(v)}; }
};
template <> struct MaxTraits<float> {
  using Acc = float;
  static Acc lowest() { return -std::numeric_limits<float>::infinity(); }
  static Acc load(float v) { return v; }
  static float store(Acc v) { return v; }
};
template <> struct MaxTraits<double> {
  using Acc = double;
  static Acc lowest() { return -std::numeric_limits<double>::infinity(); }
  static Acc load(double v) { return v; }
  static double store(Acc v) { return v; }
};

/// The taps [lo, hi) of a window starting at input index `start` (stride·o − padBegin) that fall
/// inside [0, in) (multiples of the dilation), for one dim.
inline void tapRange(int64_t start, int64_t k, int64_t dil, int64_t in, int64_t &lo, int64_t &hi) {
  if (dil == 1) {  // no division (it cost more than the window's loads)
    lo = start >= 0 ? 0 : std::min(-start, k);
    hi = std::max(lo, std::min<int64_t>(k, in - start));
    return;
  }
  const int64_t t0 = start >= 0 ? 0 : (-start + dil - 1) / dil;
  const int64_t t1 = start >= in ? 0 : std::min<int64_t>(k, (in - start + dil - 1) / dil);
  lo = t0;
  hi = std::max(t0, t1);
}

/// Calls f(out0, out1, out2, lo[3], hi[3]) for every output position of one plane, where [lo, hi)
/// are the window's taps (multiples of the dilation) that fall inside the input, per dim.
template <typename F> void forEachWindow(const Window3 &w, int64_t begin, int64_t end, F &&f) {
  for (int64_t o = begin; o < end; ++o) {
    int64_t idx[3] = {o / (w.out[1] * w.out[2]), (o / w.out[2]) % w.out[1], o % w.out[2]};
    int64_t lo[3], hi[3];
    for (int d = 0; d < 3; ++d) tapRange(idx[d] * w.stride[d] - w.padBegin[d], w.k[d], w.dil[d], w.in[d], lo[d], hi[d]);
    f(o, idx, lo, hi);
  }
}

llvm::Error verifyPoolCommon(const KernelCall &c, Window3 &w) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (Y.dtype != X.dtype) return kernelError("output dtype differs from the input's");
  if (X.rank() < 3 || Y.shape[0] != X.shape[0] || Y.shape[1] != X.shape[1])
    return kernelError("output must be [N, C, ...] like the input");
  return readWindow(c, X, Y, {}, c.attrInt("ceil_mode", 0) != 0, w);
}

llvm::Error verifyPool(const KernelCall &c) {
  Window3 w;
  if (llvm::Error e = verifyPoolCommon(c, w)) return e;
  std::string kind = c.attrString("kind", "max");
  if (kind != "max" && kind != "avg" && kind != "lp")
    return kernelError("kind must be max, avg or lp, got '" + kind + "'");
  if (kind != "max" && c.inputs[0].dtype != DType::F32)
    return kernelError(kind + " pooling is implemented for f32 only");
  if (kind == "lp" && c.attrInt("p", 2) < 1) return kernelError("p must be positive");
  return llvm::Error::success();
}

/// The row-major offset in the plane of window `idx`'s maximum (the first one; NaN wins), or -1
/// when no tap of the window falls inside the input.
template <typename T>
int64_t windowArgmax(const T *xp, const Window3 &w, const int64_t *idx, const int64_t *lo, const int64_t *hi) {
  using Tr = MaxTraits<T>;
  typename Tr::Acc best = Tr::lowest();
  int64_t where = -1;
  for (int64_t t0 = lo[0]; t0 < hi[0]; ++t0) {
    int64_t i0 = idx[0] * w.stride[0] - w.padBegin[0] + t0 * w.dil[0];
    for (int64_t t1 = lo[1]; t1 < hi[1]; ++t1) {
      int64_t i1 = idx[1] * w.stride[1] - w.padBegin[1] + t1 * w.dil[1];
      for (int64_t t2 = lo[2]; t2 < hi[2]; ++t2) {
        int64_t i2 = idx[2] * w.stride[2] - w.padBegin[2] + t2 * w.dil[2];
        int64_t off = (i0 * w.in[1] + i1) * w.in[2] + i2;
        typename Tr::Acc v = Tr::load(xp[off]);
        if (where < 0 || v > best || (v != v && best == best)) {
          best = v;
          where = off;
        }
      }
    }
  }
  return where;
}

/// max_pool_with_indices: each window's maximum and the flat index of its first maximum.
template <typename T> void maxPool(const KernelCall &c, const Window3 &w, int64_t *indices, bool colMajor) {
  using Tr = MaxTraits<T>;
  const T *x = c.inputs[0].as<const T>();
  T *y = c.outputs[0].as<T>();
  const int64_t planes = c.inputs[0].shape[0] * c.inputs[0].shape[1], S = w.inSize(), O = w.outSize();
  parallelFor(planes * O, 256, [&](int64_t b, int64_t e) {
    while (b < e) {
      int64_t p = b / O, o0 = b % O, o1 = std::min(O, o0 + (e - b));
      const T *xp = x + p * S;
      forEachWindow(w, o0, o1, [&](int64_t o, const int64_t *idx, const int64_t *lo, const int64_t *hi) {
        int64_t where = windowArgmax(xp, w, idx, lo, hi);
        y[p * O + o] = where < 0 ? Tr::store(Tr::lowest()) : xp[where];
        int64_t i0 = where / (w.in[1] * w.in[2]), i1 = (where / w.in[2]) % w.in[1], i2 = where % w.in[2];
        if (where >= 0 && colMajor) where = (i2 * w.in[1] + i1) * w.in[0] + i0;
        indices[p * O + o] = p * S + std::max<int64_t>(where, 0);
      });
      b += o1 - o0;
    }
  });
}

/// maxPool without indices: the same values (each window's maximum, NaN winning, lowest() for
/// a window with no tap inside), computed row by row of the output with the window's taps
/// clipped once per row and per column instead of per output element (no divisions, no argmax
/// bookkeeping). Parallel over the planes' output rows.
template <typename T> void maxPoolValues(const KernelCall &c, const Window3 &w) {
  using Tr = MaxTraits<T>;
  const T *x = c.inputs[0].as<const T>();
  T *y = c.outputs[0].as<T>();
  const int64_t planes = c.inputs[0].shape[0] * c.inputs[0].shape[1], S = w.inSize();
  const int64_t rowsPerPlane = w.out[0] * w.out[1], cols = w.out[2];
  parallelFor(planes * rowsPerPlane, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t p = r / rowsPerPlane, o0 = (r % rowsPerPlane) / w.out[1], o1 = r % w.out[1];
      const T *xp = x + p * S;
      T *yr = y + r * cols;
      const int64_t s0 = o0 * w.stride[0] - w.padBegin[0], s1 = o1 * w.stride[1] - w.padBegin[1];
      int64_t lo0, hi0, lo1, hi1;
      tapRange(s0, w.k[0], w.dil[0], w.in[0], lo0, hi0);
      tapRange(s1, w.k[1], w.dil[1], w.in[1], lo1, hi1);
      for (int64_t o2 = 0; o2 < cols; ++o2) {
        const int64_t s2 = o2 * w.stride[2] - w.padBegin[2];
        int64_t lo2, hi2;
        tapRange(s2, w.k[2], w.dil[2], w.in[2], lo2, hi2);
        using Acc = typename Tr::Acc;
        Acc best = Tr::lowest();
        bool nan = false;  // NaN wins: kept aside so that the max itself has no branch
        for (int64_t t0 = lo0; t0 < hi0; ++t0)
          for (int64_t t1 = lo1; t1 < hi1; ++t1) {
            const T *row = xp + ((s0 + t0 * w.dil[0]) * w.in[1] + s1 + t1 * w.dil[1]) * w.in[2] + s2;
            for (int64_t t2 = lo2; t2 < hi2; ++t2) {
              // maxss / a compare-and-select, not a branch: a max over data in no order
              // mispredicts about half of its branches.
              const Acc v = Tr::load(row[t2 * w.dil[2]]);
              best = v > best ? v : best;
              nan |= v != v;
            }
          }
        if constexpr (std::is_floating_point_v<Acc>)
          if (nan) best = std::numeric_limits<Acc>::quiet_NaN();
        yr[o2] = Tr::store(best);
      }
    }
  });
}

/// The divisor of average pooling for window `idx`: its taps inside the input, or with
/// `includePad` those inside the padded input [−padBegin, in + padEnd).
int64_t windowCount(const Window3 &w, const int64_t *idx, const int64_t *lo, const int64_t *hi, bool includePad) {
  int64_t count = 1;
  for (int d = 0; d < 3; ++d) {
    if (!includePad) {
      count *= hi[d] - lo[d];
      continue;
    }
    int64_t start = idx[d] * w.stride[d] - w.padBegin[d], n = 0;
    for (int64_t t = 0; t < w.k[d]; ++t) {
      int64_t i = start + t * w.dil[d];
      n += i >= -w.padBegin[d] && i < w.in[d] + w.padEnd[d];
    }
    count *= n;
  }
  return count;
}

template <Kind K> void floatPool(const KernelCall &c, const Window3 &w) {
  const float *x = c.inputs[0].as<const float>();
  float *y = c.outputs[0].as<float>();
  const bool includePad = c.attrInt("count_include_pad", 0) != 0;
  const double p = double(c.attrInt("p", 2));
  const int64_t planes = c.inputs[0].shape[0] * c.inputs[0].shape[1], S = w.inSize(), O = w.outSize();
  parallelFor(planes * O, 256, [&](int64_t b, int64_t e) {
    while (b < e) {
      int64_t pl = b / O, o0 = b % O, o1 = std::min(O, o0 + (e - b));
      const float *xp = x + pl * S;
      forEachWindow(w, o0, o1, [&](int64_t o, const int64_t *idx, const int64_t *lo, const int64_t *hi) {
        double acc = 0;
        for (int64_t t0 = lo[0]; t0 < hi[0]; ++t0) {
          int64_t i0 = idx[0] * w.stride[0] - w.padBegin[0] + t0 * w.dil[0];
          for (int64_t t1 = lo[1]; t1 < hi[1]; ++t1) {
            int64_t i1 = idx[1] * w.stride[1] - w.padBegin[1] + t1 * w.dil[1];
            const float *row = xp + (i0 * w.in[1] + i1) * w.in[2];
            for (int64_t t2 = lo[2]; t2 < hi[2]; ++t2) {
              float v = row[idx[2] * w.stride[2] - w.padBegin[2] + t2 * w.dil[2]];
              if constexpr (K == Kind::Lp) acc += p == 2 ? double(v) * v : std::pow(std::fabs(double(v)), p);
              else acc += v;
            }
          }
        }
        if constexpr (K == Kind::Lp) {
          y[pl * O + o] = static_cast<float>(p == 2 ? std::sqrt(acc) : std::pow(acc, 1.0 / p));
        } else {
          int64_t count = windowCount(w, idx, lo, hi, includePad);
          y[pl * O + o] = count ? static_cast<float>(acc / double(count)) : 0.0f;
        }
      });
      b += o1 - o0;
    }
  });
}

llvm::Error runPool(const KernelCall &c) {
  Window3 w;
  if (llvm::Error e = verifyPoolCommon(c, w)) return e;
  std::string kind = c.attrString("kind", "max");
  if (kind == "avg") floatPool<Kind::Avg>(c, w);
  else if (kind == "lp") floatPool<Kind::Lp>(c, w);
  else
    switch (c.inputs[0].dtype) {
    case DType::F32: maxPoolValues<float>(c, w); break;
    case DType::F64: maxPoolValues<double>(c, w); break;
    case DType::F16: maxPoolValues<F16>(c, w); break;
    case DType::I8: maxPoolValues<int8_t>(c, w); break;
    case DType::U8: maxPoolValues<uint8_t>(c, w); break;
    default: return kernelError("max pooling of " + dtypeName(c.inputs[0].dtype) + " is not implemented");
    }
  return llvm::Error::success();
}

llvm::Error verifyMaxPoolIdx(const KernelCall &c) {
  Window3 w;
  if (llvm::Error e = verifyPoolCommon(c, w)) return e;
  if (llvm::Error e = verifyDType(c.outputs[1], DType::I64, "indices")) return e;
  if (c.outputs[1].shape != c.outputs[0].shape) return kernelError("indices must have the output's shape");
  if (c.inputs[0].dtype != DType::F32) return kernelError("max_pool_with_indices is implemented for f32 only");
  int64_t order = c.attrInt("storage_order", 0);
  if (order != 0 && order != 1) return kernelError("storage_order must be 0 or 1");
  return llvm::Error::success();
}

llvm::Error runMaxPoolIdx(const KernelCall &c) {
  Window3 w;
  if (llvm::Error e = verifyPoolCommon(c, w)) return e;
  maxPool<float>(c, w, c.outputs[1].as<int64_t>(), c.attrInt("storage_order", 0) == 1);
  return llvm::Error::success();
}

llvm::Error verifyMaxUnpool(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &Y = c.outputs[0];
  if (llvm::Error e = verifyDType(X, DType::F32, "input")) return e;
  if (llvm::Error e = verifyDType(Y, DType::F32, "output")) return e;
  if (llvm::Error e = verifyDType(I, DType::I64, "indices")) return e;
  if (I.shape != X.shape) return kernelError("indices must have the input's shape");
  auto is = c.attrInts("index_shape");
  if (int64_t(is.size()) != Y.rank()) return kernelError("index_shape must have one entry per output dim");
  for (int64_t d = 0; d < Y.rank(); ++d)
    if (is[d] < 1 || is[d] > Y.shape[d]) return kernelError("index_shape must fit in the output");
  return llvm::Error::success();
}

llvm::Error runMaxUnpool(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &Y = c.outputs[0];
  float *y = Y.as<float>();
  const float *x = X.as<const float>();
  const int64_t *idx = I.as<const int64_t>();
  std::memset(y, 0, Y.bytes());
  auto is = c.attrInts("index_shape");
  int64_t n = X.numel(), total = numElements(is);
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= total)
      return kernelError("index " + llvm::Twine(idx[i]) + " is outside the unpooled shape " + shapeToString(is));
    // coordinates in index_shape -> offset in the (possibly larger) output
    int64_t rest = idx[i], off = 0, stride = 1;
    for (int64_t d = Y.rank() - 1; d >= 0; --d) {
      off += (rest % is[d]) * stride;
      rest /= is[d];
      stride *= Y.shape[d];
    }
    y[off] = x[i];
  }
  return llvm::Error::success();
}

llvm::Error verifyPoolGrad(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &DY = c.inputs[1], &DX = c.outputs[0];
  for (const TensorRef *t : {&X, &DY, &DX})
    if (llvm::Error e = verifyDType(*t, DType::F32, "x, dy and dx")) return e;
  if (DX.shape != X.shape) return kernelError("dx must have x's shape");
  if (X.rank() < 3 || DY.rank() != X.rank() || DY.shape[0] != X.shape[0] || DY.shape[1] != X.shape[1])
    return kernelError("dy must be [N, C, ...] like x");
  std::string kind = c.attrString("kind", "max");
  if (kind != "max" && kind != "avg" && kind != "lp") return kernelError("kind must be max, avg or lp, got '" + kind + "'");
  if (kind == "lp" && c.attrInt("p", 2) < 1) return kernelError("p must be positive");
  Window3 w;
  return readWindow(c, X, DY, {}, c.attrInt("ceil_mode", 0) != 0, w);
}

/// Calls f(offset) for the plane offset of every tap of window `idx` inside the input.
template <typename F>
void forEachTap(const Window3 &w, const int64_t *idx, const int64_t *lo, const int64_t *hi, F &&f) {
  for (int64_t t0 = lo[0]; t0 < hi[0]; ++t0) {
    int64_t i0 = idx[0] * w.stride[0] - w.padBegin[0] + t0 * w.dil[0];
    for (int64_t t1 = lo[1]; t1 < hi[1]; ++t1) {
      int64_t i1 = idx[1] * w.stride[1] - w.padBegin[1] + t1 * w.dil[1];
      int64_t row = (i0 * w.in[1] + i1) * w.in[2];
      for (int64_t t2 = lo[2]; t2 < hi[2]; ++t2) f(row + idx[2] * w.stride[2] - w.padBegin[2] + t2 * w.dil[2]);
    }
  }
}

/// dx = 0, then each window's dy goes to its argmax (max), divided by the forward's count to each
/// of its taps inside the input (avg), or times the norm's derivative to each tap (lp). Parallel
/// over the N·C planes.
llvm::Error runPoolGrad(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &DY = c.inputs[1], &DX = c.outputs[0];
  Window3 w;
  if (llvm::Error e = readWindow(c, X, DY, {}, c.attrInt("ceil_mode", 0) != 0, w)) return e;
  const std::string kind = c.attrString("kind", "max");
  const bool max = kind == "max", lp = kind == "lp", includePad = c.attrInt("count_include_pad", 0) != 0;
  const double power = double(c.attrInt("p", 2));
  const float *x = X.as<const float>(), *dy = DY.as<const float>();
  float *dx = DX.as<float>();
  std::memset(dx, 0, DX.bytes());
  const int64_t planes = X.shape[0] * X.shape[1], S = w.inSize(), O = w.outSize();
  parallelFor(planes, std::max<int64_t>(1, 4096 / std::max<int64_t>(O, 1)), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float *xp = x + p * S, *dyp = dy + p * O;
      float *dxp = dx + p * S;
      forEachWindow(w, 0, O, [&](int64_t o, const int64_t *idx, const int64_t *lo, const int64_t *hi) {
        if (max) {
          int64_t where = windowArgmax(xp, w, idx, lo, hi);
          if (where >= 0) dxp[where] += dyp[o];
          return;
        }
        if (lp) {
          // y = (Σ |x|^p)^(1/p), ∂y/∂x = sign(x)·|x|^(p−1) / y^(p−1)
          double acc = 0;
          forEachTap(w, idx, lo, hi, [&](int64_t off) {
            double v = xp[off];
            acc += power == 2 ? v * v : std::pow(std::fabs(v), power);
          });
          if (acc == 0) return;
          const double y = power == 2 ? std::sqrt(acc) : std::pow(acc, 1.0 / power);
          const double scale = dyp[o] / std::pow(y, power - 1);
          forEachTap(w, idx, lo, hi, [&](int64_t off) {
            double v = xp[off];
            double d = power == 2 ? v : (v > 0 ? 1 : v < 0 ? -1 : 0) * std::pow(std::fabs(v), power - 1);
            dxp[off] += static_cast<float>(scale * d);
          });
          return;
        }
        int64_t count = windowCount(w, idx, lo, hi, includePad);
        if (!count) return;
        const float v = static_cast<float>(double(dyp[o]) / double(count));
        forEachTap(w, idx, lo, hi, [&](int64_t off) { dxp[off] += v; });
      });
    }
  });
  return llvm::Error::success();
}

}  // namespace

void registerPoolKernels(KernelRegistry &r) {
  KernelDesc pool;
  pool.op = "pool";
  pool.attrs = {{"kind", AttrKind::String},    {"kernel_shape", AttrKind::Ints}, {"strides", AttrKind::Ints},
                {"pads", AttrKind::Ints},      {"dilations", AttrKind::Ints},    {"ceil_mode", AttrKind::Int},
                {"count_include_pad", AttrKind::Int}, {"p", AttrKind::Int}};
  pool.verify = verifyPool;
  pool.run = runPool;
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::I8, DType::U8}) {
    pool.dtype = d;
    r.add(pool);
  }

  KernelDesc idx;
  idx.op = "max_pool_with_indices";
  idx.minOutputs = idx.maxOutputs = 2;
  idx.attrs = {{"kernel_shape", AttrKind::Ints}, {"strides", AttrKind::Ints}, {"pads", AttrKind::Ints},
               {"dilations", AttrKind::Ints},    {"ceil_mode", AttrKind::Int}, {"storage_order", AttrKind::Int}};
  idx.verify = verifyMaxPoolIdx;
  idx.run = runMaxPoolIdx;
  r.add(idx);

  KernelDesc grad;
  grad.op = "pool_grad";
  grad.minInputs = grad.maxInputs = 2;
  grad.attrs = {{"kind", AttrKind::String}, {"kernel_shape", AttrKind::Ints}, {"strides", AttrKind::Ints},
                {"pads", AttrKind::Ints},   {"dilations", AttrKind::Ints},    {"ceil_mode", AttrKind::Int},
                {"count_include_pad", AttrKind::Int}, {"p", AttrKind::Int}};
  grad.verify = verifyPoolGrad;
  grad.run = runPoolGrad;
  r.add(grad);

  KernelDesc unpool;
  unpool.op = "max_unpool";
  unpool.minInputs = unpool.maxInputs = 2;
  unpool.attrs = {{"index_shape", AttrKind::Ints}};
  unpool.verify = verifyMaxUnpool;
  unpool.run = runMaxUnpool;
  r.add(unpool);
}

}  // namespace colossal::runtime::cpu

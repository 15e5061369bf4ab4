//===- grad.cpp - Backward CPU kernels: softmax, norms, unary, gather, slice ----------------===//
//
// The training instructions of docs/plan.md ("Training instructions") other than attention_grad
// (attention_grad.cpp) and the optimizer family. `dy` is the cotangent of the forward op's output;
// every kernel is registered for f32 and f64 (f64 serves float64 gradient checks; f32 uses the
// vectorizable FastMath functions, f64 libm).
//
//   softmax_grad      y, dy -> dx        dx = y·(dy − Σ_axis dy·y)            (y = softmax(x))
//   log_softmax_grad  y, dy -> dx        dx = dy − exp(y)·Σ_axis dy           (y = log_softmax(x))
//   layer_norm_grad   x, scale, dy -> dx, dscale, dbias
//   rms_norm_grad     x, scale, dy -> dx, dscale
//   unary_grad        x, dy -> dx        dx = dy·f'(x), f chosen by `fn`
//   gather_grad       indices, dy -> ddata      adjoint of `gather` (scatter-add)
//   slice_grad        dy -> dx                  adjoint of `slice` (zero-fill and scatter)
//
// Norm gradients (Ba et al. 2016 for layer norm, Zhang & Sennrich 2019 for RMSNorm) recompute the
// row statistics from x, then make one fused sweep per row. The parameter gradients dscale/dbias
// are row reductions: rows are cut into a fixed number of chunks (independent of the thread
// count), each chunk sums its rows into its own workspace slot, and the slots are added in chunk
// order, so the result is bit-identical from run to run and for any thread count.
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "FastMath.h"

#include <cmath>
#include <cstring>

namespace colossal::runtime::cpu {
namespace {

/// Scalar math on the kernel's compute type: FastMath on f32 (vectorizes), libm on f64.
template <typename T> struct Math;
template <> struct Math<float> {
  static float exp(float x) { return fastExp(x); }
  static float tanh(float x) { return fastTanh(x); }
  static float erf(float x) { return fastErf(x); }
  static float sigmoid(float x) { return fastSigmoid(x); }
};
template <> struct Math<double> {
  static double exp(double x) { return std::exp(x); }
  static double tanh(double x) { return std::tanh(x); }
  static double erf(double x) { return std::erf(x); }
  static double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
};

int kernelThreads(const KernelCall &c) {
  return std::max(1, std::min(omp_get_max_threads(), c.threads));
}

/// Every operand of `c` must have the output's float dtype (f32 or f64).
llvm::Error verifyAllSameFloat(const KernelCall &c) {
  const DType want = c.outputs[0].dtype;
  if (want != DType::F32 && want != DType::F64)
    return kernelError("operands must be f32 or f64, got " + dtypeName(want));
  for (const TensorRef &t : c.inputs)
    if (llvm::Error e = verifyDType(t, want, "every operand")) return e;
  for (const TensorRef &t : c.outputs)
    if (llvm::Error e = verifyDType(t, want, "every operand")) return e;
  return llvm::Error::success();
}

llvm::Error verifyAxis(int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= std::max<int64_t>(rank, 1))
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(rank));
  return llvm::Error::success();
}

// ---------------------------------------------------------------- softmax_grad, log_softmax_grad
// y, dy -> dx (all the same shape); `axis` defaults to the last dim.

llvm::Error verifySoftmaxGrad(const KernelCall &c) {
  if (llvm::Error e = verifyAllSameFloat(c)) return e;
  const TensorRef &Y = c.inputs[0];
  if (llvm::Error e = verifySameShape(Y, c.inputs[1], "y and dy")) return e;
  if (llvm::Error e = verifySameShape(Y, c.outputs[0], "y and dx")) return e;
  return verifyAxis(c.attrInt("axis", Y.rank() - 1), Y.rank());
}

/// dx = y·(dy − Σ dy·y) (softmax) or dx = dy − exp(y)·Σ dy (log_softmax) along one axis, viewed as
/// [outer, A, inner]. Each output element is written after its own y and dy are read, and the row
/// sums are complete before any write, so dx may alias dy.
template <typename T, bool LOG> llvm::Error runSoftmaxGrad(const KernelCall &c) {
  const TensorRef &Y = c.inputs[0];
  if (Y.numel() == 0) return llvm::Error::success();
  int64_t outer, A, inner;
  splitAxis(Y.shape, c.attrInt("axis", Y.rank() - 1), outer, A, inner);
  const T *y = Y.as<const T>(), *dy = c.inputs[1].as<const T>();
  T *dx = c.outputs[0].as<T>();
  if (inner == 1) {
    parallelFor(outer, std::max<int64_t>(1, 8192 / A), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T *py = y + o * A, *pg = dy + o * A;
        T *pd = dx + o * A;
        T s = 0;
        if constexpr (LOG) {
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < A; ++i) s += pg[i];
          for (int64_t i = 0; i < A; ++i) pd[i] = pg[i] - Math<T>::exp(py[i]) * s;
        } else {
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < A; ++i) s += pg[i] * py[i];
          for (int64_t i = 0; i < A; ++i) pd[i] = py[i] * (pg[i] - s);
        }
      }
    });
    return llvm::Error::success();
  }
  constexpr int64_t kLanes = 64;
  const int64_t blocks = (inner + kLanes - 1) / kLanes;
  parallelFor(outer * blocks, std::max<int64_t>(1, 8192 / (A * kLanes)), [&](int64_t b, int64_t e) {
    T s[kLanes];
    for (int64_t w = b; w < e; ++w) {
      const int64_t o = w / blocks, j0 = (w % blocks) * kLanes, n = std::min(kLanes, inner - j0);
      const int64_t base = o * A * inner + j0;
      for (int64_t j = 0; j < n; ++j) s[j] = 0;
      for (int64_t a = 0; a < A; ++a)
        for (int64_t j = 0; j < n; ++j)
          s[j] += LOG ? dy[base + a * inner + j] : dy[base + a * inner + j] * y[base + a * inner + j];
      for (int64_t a = 0; a < A; ++a)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t i = base + a * inner + j;
          dx[i] = LOG ? dy[i] - Math<T>::exp(y[i]) * s[j] : y[i] * (dy[i] - s[j]);
        }
    }
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- layer_norm_grad, rms_norm_grad
// x [d0..dn), scale = x.shape[axis:], dy = x's shape -> dx (x's shape), dscale (scale's shape)
// [, dbias (scale's shape)]. Rows = prod(d0..axis), N = prod(axis..n).

/// Row chunks of the dscale/dbias reduction: fixed, so the summation order never depends on the
/// thread count.
constexpr int64_t kReduceChunks = 16;

llvm::Error verifyNormGrad(const KernelCall &c) {
  if (llvm::Error e = verifyAllSameFloat(c)) return e;
  const TensorRef &X = c.inputs[0], &Scale = c.inputs[1], &DY = c.inputs[2];
  const int64_t axis = c.attrInt("axis", X.rank() - 1);
  if (llvm::Error e = verifyAxis(axis, X.rank())) return e;
  if (llvm::Error e = verifySameShape(X, DY, "x and dy")) return e;
  if (llvm::Error e = verifySameShape(X, c.outputs[0], "x and dx")) return e;
  llvm::ArrayRef<int64_t> tail = llvm::ArrayRef<int64_t>(X.shape).drop_front(axis);
  if (llvm::ArrayRef<int64_t>(Scale.shape) != tail)
    return kernelError("scale has shape " + shapeToString(Scale.shape) + ", expected " + shapeToString(tail));
  for (size_t i = 1; i < c.outputs.size(); ++i)
    if (llvm::ArrayRef<int64_t>(c.outputs[i].shape) != tail)
      return kernelError((i == 1 ? "dscale" : "dbias") + llvm::Twine(" has shape ") +
                         shapeToString(c.outputs[i].shape) + ", expected " + shapeToString(tail));
  if (c.attrFloat("epsilon", 1e-5) < 0) return kernelError("epsilon must be non-negative");
  return llvm::Error::success();
}

void normRowsAndWidth(const KernelCall &c, int64_t &rows, int64_t &N) {
  const TensorRef &X = c.inputs[0];
  const int64_t axis = c.attrInt("axis", X.rank() - 1);
  rows = 1;
  N = 1;
  for (int64_t i = 0; i < X.rank(); ++i) (i < axis ? rows : N) *= X.shape[i];
}

template <typename T> size_t normGradWorkspace(const KernelCall &c, int) {
  int64_t rows, N;
  normRowsAndWidth(c, rows, N);
  // One dscale and one dbias partial per chunk.
  return static_cast<size_t>(2 * kReduceChunks * N) * sizeof(T);
}

/// layer_norm (RMS = false):  x̂ = (x − mean)·σ⁻¹, σ⁻¹ = 1/√(var + eps), ĝ = dy·scale,
///   dx = σ⁻¹·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)),  dscale = Σ_rows dy·x̂,  dbias = Σ_rows dy.
/// rms_norm (RMS = true):     r = 1/√(mean(x²) + eps),
///   dx = r·ĝ − x·r³·mean(ĝ·x),  dscale = Σ_rows dy·x·r.
/// Statistics are computed as the forward kernel does (two passes for mean and centred variance).
template <typename T, bool RMS> llvm::Error runNormGrad(const KernelCall &c) {
  int64_t rows, N;
  normRowsAndWidth(c, rows, N);
  const T *x = c.inputs[0].as<const T>(), *scale = c.inputs[1].as<const T>(),
          *dy = c.inputs[2].as<const T>();
  T *dx = c.outputs[0].as<T>(), *dscale = c.outputs[1].as<T>();
  T *dbias = RMS ? nullptr : c.outputs[2].as<T>();
  if (N == 0) return llvm::Error::success();
  if (rows == 0) {
    std::fill(dscale, dscale + N, T(0));
    if (dbias) std::fill(dbias, dbias + N, T(0));
    return llvm::Error::success();
  }
  const T eps = static_cast<T>(c.attrFloat("epsilon", 1e-5));
  const T invN = T(1) / static_cast<T>(N);
  const int64_t chunks = std::min(kReduceChunks, rows);
  T *partS = static_cast<T *>(c.workspace), *partB = partS + kReduceChunks * N;
  const int threads = static_cast<int>(std::min<int64_t>(kernelThreads(c), chunks));

#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && !omp_in_parallel())
  for (int64_t ch = 0; ch < chunks; ++ch) {
    T *ps = partS + ch * N, *pb = partB + ch * N;
    std::fill(ps, ps + N, T(0));
    if (!RMS) std::fill(pb, pb + N, T(0));
    for (int64_t r = rows * ch / chunks, rEnd = rows * (ch + 1) / chunks; r < rEnd; ++r) {
      const T *px = x + r * N, *pg = dy + r * N;
      T *pd = dx + r * N;
      if constexpr (RMS) {
        T ss = 0, sgx = 0;
#pragma omp simd reduction(+ : ss, sgx)
        for (int64_t i = 0; i < N; ++i) {
          ss += px[i] * px[i];
          sgx += pg[i] * scale[i] * px[i];
        }
        const T rr = T(1) / std::sqrt(ss * invN + eps);
        const T k = rr * rr * rr * sgx * invN;
#pragma omp simd
        for (int64_t i = 0; i < N; ++i) {
          pd[i] = rr * pg[i] * scale[i] - px[i] * k;
          ps[i] += pg[i] * px[i] * rr;
        }
      } else {
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < N; ++i) s += px[i];
        const T mean = s * invN;
        T var = 0, sg = 0, sgc = 0;  // Σ(x−mean)², Σĝ, Σĝ·(x−mean)
#pragma omp simd reduction(+ : var, sg, sgc)
        for (int64_t i = 0; i < N; ++i) {
          const T xc = px[i] - mean, g = pg[i] * scale[i];
          var += xc * xc;
          sg += g;
          sgc += g * xc;
        }
        const T rstd = T(1) / std::sqrt(var * invN + eps);
        const T meanG = sg * invN, meanGX = sgc * rstd * invN;
#pragma omp simd
        for (int64_t i = 0; i < N; ++i) {
          const T xh = (px[i] - mean) * rstd;
          pd[i] = rstd * (pg[i] * scale[i] - meanG - xh * meanGX);
          ps[i] += pg[i] * xh;
          pb[i] += pg[i];
        }
      }
    }
  }
  // Chunk partials added in chunk order (deterministic).
  std::memcpy(dscale, partS, N * sizeof(T));
  if (dbias) std::memcpy(dbias, partB, N * sizeof(T));
  for (int64_t ch = 1; ch < chunks; ++ch) {
    const T *ps = partS + ch * N, *pb = partB + ch * N;
#pragma omp simd
    for (int64_t i = 0; i < N; ++i) dscale[i] += ps[i];
    if (dbias) {
#pragma omp simd
      for (int64_t i = 0; i < N; ++i) dbias[i] += pb[i];
    }
  }
  return llvm::Error::success();
}

// ---------------------------------------------------------------- unary_grad
// x, dy -> dx (same shape): dx = dy·f'(x). Derivatives at kinks follow PyTorch's autograd:
// relu'(0) = 0, abs'(0) = 0, leaky_relu'(0) = alpha, elu'(0) = alpha.

#define DFN(Name, expr)                                                                         \
  struct Name {                                                                                 \
    template <typename T> static T d(T x, T alpha) {                                            \
      (void)alpha;                                                                              \
      return expr;                                                                              \
    }                                                                                           \
  };
DFN(DRelu, x > T(0) ? T(1) : T(0))
DFN(DSigmoid, [&] { T s = Math<T>::sigmoid(x); return s * (T(1) - s); }())
DFN(DTanh, [&] { T t = Math<T>::tanh(x); return T(1) - t * t; }())
DFN(DExp, Math<T>::exp(x))
DFN(DLog, T(1) / x)
DFN(DSqrt, T(0.5) / std::sqrt(x))
DFN(DReciprocal, -T(1) / (x * x))
// erf'(x) = 2/√π · e^{−x²}
DFN(DErf, T(1.1283791670955126) * Math<T>::exp(-x * x))
DFN(DAbs, x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)))
// silu = x·σ(x): σ(x)·(1 + x·(1 − σ(x)))
DFN(DSilu, [&] { T s = Math<T>::sigmoid(x); return s * (T(1) + x * (T(1) - s)); }())
// gelu = x·Φ(x): Φ(x) + x·φ(x), Φ(x) = ½(1 + erf(x/√2)), φ(x) = e^{−x²/2}/√(2π)
DFN(DGelu, T(0.5) * (T(1) + Math<T>::erf(x * T(0.70710678118654752))) +
               x * T(0.3989422804014327) * Math<T>::exp(T(-0.5) * x * x))
// gelu_tanh = ½x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³):
//   ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²)
// d/dx of 0.5·x·(1 + tanh u), u = k·(x + c·x³): with s = σ(2u) = 0.5·(1 + tanh u) (and so
// 0.5·(1 − tanh² u) = 2·s·(1 − s)) it is s + 2·x·s·(1 − s)·k·(1 + 3c·x²) — one exp, one division,
// and no cancellation in 1 + tanh u for negative x (Activations.h GeluTanh, the same identity).
struct DGeluTanh {
  template <typename T> static T d(T x, T) {
    const T k = T(0.7978845608028654), c = T(0.044715);
    const T s = Math<T>::sigmoid(T(2) * k * (x + c * x * x * x));
    return s + T(2) * x * s * (T(1) - s) * k * (T(1) + T(3) * c * x * x);
  }
};
DFN(DSin, std::cos(x))
DFN(DCos, -std::sin(x))
// softplus = log(1 + e^x): σ(x)
DFN(DSoftplus, Math<T>::sigmoid(x))
DFN(DLeakyRelu, x > T(0) ? T(1) : alpha)
DFN(DElu, x > T(0) ? T(1) : alpha * Math<T>::exp(x))
#undef DFN

template <typename F, typename T> llvm::Error runUnaryGradFn(const KernelCall &c) {
  const T *x = c.inputs[0].as<const T>(), *dy = c.inputs[1].as<const T>();
  T *dx = c.outputs[0].as<T>();
  const T alpha = static_cast<T>(c.attrFloat("alpha", 0));
  // dx may alias dy: element i reads x[i] and dy[i] before writing dx[i].
  parallelFor(c.outputs[0].numel(), 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * F::template d<T>(x[i], alpha);
  });
  return llvm::Error::success();
}

struct UnaryGradRow {
  const char *fn;
  bool takesAlpha;
  llvm::Error (*f32)(const KernelCall &);
  llvm::Error (*f64)(const KernelCall &);
};
#define ROW(name, F, alpha) {name, alpha, runUnaryGradFn<F, float>, runUnaryGradFn<F, double>}
const UnaryGradRow kUnaryGradRows[] = {
    ROW("relu", DRelu, false),       ROW("sigmoid", DSigmoid, false),
    ROW("tanh", DTanh, false),       ROW("exp", DExp, false),
    ROW("log", DLog, false),         ROW("sqrt", DSqrt, false),
    ROW("reciprocal", DReciprocal, false), ROW("erf", DErf, false),
    ROW("abs", DAbs, false),         ROW("silu", DSilu, false),
    ROW("gelu", DGelu, false),       ROW("gelu_tanh", DGeluTanh, false),
    ROW("sin", DSin, false),         ROW("cos", DCos, false),
    ROW("softplus", DSoftplus, false), ROW("leaky_relu", DLeakyRelu, true),
    ROW("elu", DElu, true),
};
#undef ROW

const UnaryGradRow *findUnaryGradRow(llvm::StringRef fn) {
  for (const UnaryGradRow &r : kUnaryGradRows)
    if (fn == r.fn) return &r;
  return nullptr;
}

llvm::Error verifyUnaryGrad(const KernelCall &c) {
  if (llvm::Error e = verifyAllSameFloat(c)) return e;
  if (llvm::Error e = verifySameShape(c.inputs[0], c.inputs[1], "x and dy")) return e;
  if (llvm::Error e = verifySameShape(c.inputs[0], c.outputs[0], "x and dx")) return e;
  if (!c.hasAttr("fn")) return kernelError("missing attribute 'fn'");
  const std::string fn = c.attrString("fn", "");
  const UnaryGradRow *row = findUnaryGradRow(fn);
  if (!row) {
    std::string known;
    for (const UnaryGradRow &r : kUnaryGradRows) known += (known.empty() ? "" : " ") + std::string(r.fn);
    return kernelError("unknown fn '" + fn + "' (known: " + known + ")");
  }
  if (row->takesAlpha != c.hasAttr("alpha"))
    return kernelError("fn '" + fn + "' takes " + (row->takesAlpha ? "the" : "no") + " attribute alpha");
  return llvm::Error::success();
}

llvm::Error runUnaryGrad(const KernelCall &c) {
  const UnaryGradRow *row = findUnaryGradRow(c.attrString("fn", ""));
  return c.outputs[0].dtype == DType::F64 ? row->f64(c) : row->f32(c);
}

// ---------------------------------------------------------------- gather_grad
// indices (i64/i32) [I...], dy [d0..axis) ++ [I...] ++ (axis..n] -> ddata [d0..dn).

llvm::Error verifyGatherGrad(const KernelCall &c) {
  const TensorRef &I = c.inputs[0], &DY = c.inputs[1], &DD = c.outputs[0];
  if (DD.dtype != DType::F32 && DD.dtype != DType::F64)
    return kernelError("ddata must be f32 or f64, got " + dtypeName(DD.dtype));
  if (llvm::Error e = verifyDType(DY, DD.dtype, "dy")) return e;
  if (I.dtype != DType::I64 && I.dtype != DType::I32)
    return kernelError("indices must be i64 or i32, got " + dtypeName(I.dtype));
  const int64_t axis = c.attrInt("axis", 0);
  if (axis < 0 || axis >= DD.rank())
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(DD.rank()));
  Shape want(DD.shape.begin(), DD.shape.begin() + axis);
  want.append(I.shape.begin(), I.shape.end());
  want.append(DD.shape.begin() + axis + 1, DD.shape.end());
  if (want != DY.shape)
    return kernelError("dy has shape " + shapeToString(DY.shape) + ", expected " + shapeToString(want) +
                       " for ddata " + shapeToString(DD.shape) + " and indices " + shapeToString(I.shape));
  return llvm::Error::success();
}

/// ddata = 0; ddata[o, idx[i], :] += dy[o, i, :] for i in index order. Parallel over ranges of
/// destination rows (o, v): each range is owned by one thread, which scans the indices in order
/// and adds the rows that land in it, so the summation order is the index order for any thread
/// count (no atomics, deterministic).
template <typename T, typename Idx> llvm::Error gatherGradImpl(const KernelCall &c) {
  const TensorRef &I = c.inputs[0], &DD = c.outputs[0];
  int64_t outer, axisDim, inner;
  splitAxis(DD.shape, c.attrInt("axis", 0), outer, axisDim, inner);
  const int64_t n = I.numel();
  const Idx *idx = I.as<const Idx>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = idx[i];
    if (v < -axisDim || v >= axisDim)
      return kernelError("index " + llvm::Twine(v) + " at position " + llvm::Twine(i) +
                         " is out of range for axis of size " + llvm::Twine(axisDim));
  }
  const T *dy = c.inputs[1].as<const T>();
  T *dd = DD.as<T>();
  const int64_t destRows = outer * axisDim;
  parallelFor(destRows, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    std::fill(dd + b * inner, dd + e * inner, T(0));
    for (int64_t o = b / axisDim; o <= (e - 1) / axisDim; ++o) {
      const int64_t lo = std::max(b - o * axisDim, int64_t(0)), hi = std::min(e - o * axisDim, axisDim);
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = idx[i];
        if (v < 0) v += axisDim;
        if (v < lo || v >= hi) continue;
        T *dst = dd + (o * axisDim + v) * inner;
        const T *src = dy + (o * n + i) * inner;
#pragma omp simd
        for (int64_t j = 0; j < inner; ++j) dst[j] += src[j];
      }
    }
  });
  return llvm::Error::success();
}

template <typename T> llvm::Error runGatherGrad(const KernelCall &c) {
  return c.inputs[0].dtype == DType::I64 ? gatherGradImpl<T, int64_t>(c) : gatherGradImpl<T, int32_t>(c);
}

// ---------------------------------------------------------------- slice_grad
// dy -> dx; `starts`, `steps` are the forward slice's (one per dim of dx, normalized).

llvm::Error verifySliceGrad(const KernelCall &c) {
  const TensorRef &DY = c.inputs[0], &DX = c.outputs[0];
  if (llvm::Error e = verifyDType(DY, DX.dtype, "dy")) return e;
  auto starts = c.attrInts("starts"), steps = c.attrInts("steps");
  if (static_cast<int64_t>(starts.size()) != DX.rank() || static_cast<int64_t>(steps.size()) != DX.rank() ||
      DY.rank() != DX.rank())
    return kernelError("starts and steps need one entry per dim of rank " + llvm::Twine(DX.rank()) +
                       ", and dy must have that rank");
  for (int64_t d = 0; d < DX.rank(); ++d) {
    if (steps[d] == 0) return kernelError("step 0 in dim " + llvm::Twine(d));
    if (DY.shape[d] == 0) continue;
    const int64_t last = starts[d] + (DY.shape[d] - 1) * steps[d];
    if (starts[d] < 0 || starts[d] >= DX.shape[d] || last < 0 || last >= DX.shape[d])
      return kernelError("dim " + llvm::Twine(d) + ": start " + llvm::Twine(starts[d]) + ", step " +
                         llvm::Twine(steps[d]) + ", count " + llvm::Twine(DY.shape[d]) +
                         " leave dx's size " + llvm::Twine(DX.shape[d]));
  }
  if (DX.rank() > kMaxRank) return kernelError("rank exceeds 8");
  return llvm::Error::success();
}

/// dx = 0, then dx[starts + i·steps] = dy[i]. The sliced positions are distinct (no step is 0),
/// so rows of dy are written in parallel without conflicts.
template <typename T> llvm::Error runSliceGrad(const KernelCall &c) {
  const TensorRef &DY = c.inputs[0], &DX = c.outputs[0];
  T *dx = DX.as<T>();
  const T *dy = DY.as<const T>();
  parallelFor(DX.numel(), 1 << 16, [&](int64_t b, int64_t e) { std::fill(dx + b, dx + e, T(0)); });
  if (DY.numel() == 0) return llvm::Error::success();
  auto starts = c.attrInts("starts"), steps = c.attrInts("steps");
  const int rank = static_cast<int>(DX.rank());
  if (rank == 0) {
    dx[0] = dy[0];
    return llvm::Error::success();
  }
  int64_t xstride[kMaxRank];
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    xstride[d] = s;
    s *= DX.shape[d];
  }
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) base += starts[d] * xstride[d];
  const int64_t inner = DY.shape[rank - 1], innerStep = steps[rank - 1];
  const int64_t rows = DY.numel() / inner;
  parallelFor(rows, std::max<int64_t>(1, 8192 / inner), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t off = base, rem = r;
      for (int d = rank - 2; d >= 0; --d) {
        off += (rem % DY.shape[d]) * steps[d] * xstride[d];
        rem /= DY.shape[d];
      }
      for (int64_t j = 0; j < inner; ++j) dx[off + j * innerStep] = dy[r * inner + j];
    }
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- registration

KernelDesc makeDesc(const char *op, DType dtype, int minIn, int maxIn, int nOut, std::vector<AttrSpec> attrs,
                    llvm::Error (*verify)(const KernelCall &), llvm::Error (*run)(const KernelCall &)) {
  KernelDesc d;
  d.op = op;
  d.dtype = dtype;
  d.minInputs = minIn;
  d.maxInputs = maxIn;
  d.minOutputs = d.maxOutputs = nOut;
  d.attrs = std::move(attrs);
  d.verify = verify;
  d.run = run;
  return d;
}

template <typename T> void registerGradKernelsOf(KernelRegistry &r, DType dt) {
  const std::vector<AttrSpec> axisAttr = {{"axis", AttrKind::Int}};
  const std::vector<AttrSpec> normAttrs = {{"axis", AttrKind::Int}, {"epsilon", AttrKind::Float}};
  r.add(makeDesc("softmax_grad", dt, 2, 2, 1, axisAttr, verifySoftmaxGrad, runSoftmaxGrad<T, false>));
  r.add(makeDesc("log_softmax_grad", dt, 2, 2, 1, axisAttr, verifySoftmaxGrad, runSoftmaxGrad<T, true>));
  KernelDesc ln = makeDesc("layer_norm_grad", dt, 3, 3, 3, normAttrs, verifyNormGrad, runNormGrad<T, false>);
  ln.workspace = normGradWorkspace<T>;
  r.add(ln);
  KernelDesc rms = makeDesc("rms_norm_grad", dt, 3, 3, 2, normAttrs, verifyNormGrad, runNormGrad<T, true>);
  rms.workspace = normGradWorkspace<T>;
  r.add(rms);
  r.add(makeDesc("unary_grad", dt, 2, 2, 1, {{"fn", AttrKind::String}, {"alpha", AttrKind::Float}},
                 verifyUnaryGrad, runUnaryGrad));
  r.add(makeDesc("gather_grad", dt, 2, 2, 1, axisAttr, verifyGatherGrad, runGatherGrad<T>));
  r.add(makeDesc("slice_grad", dt, 1, 1, 1, {{"starts", AttrKind::Ints}, {"steps", AttrKind::Ints}},
                 verifySliceGrad, runSliceGrad<T>));
}

}  // namespace

void registerGradKernels(KernelRegistry &r) {
  registerGradKernelsOf<float>(r, DType::F32);
  registerGradKernelsOf<double>(r, DType::F64);
}

}  // namespace colossal::runtime::cpu

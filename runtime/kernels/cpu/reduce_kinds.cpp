//===- reduce_kinds.cpp - reduce {kind}, argmax/argmin, cumsum CPU kernels (every numeric dtype) -===//
//
// reduce:          x -> y over `axes` (sorted, non-negative, non-empty), `keepdims`, `kind` one of
//                  sum mean max min prod sum_square l1 l2 log_sum log_sum_exp (ONNX ReduceX).
//                  Also registered under reduce_sum / reduce_mean / reduce_max for the dtypes other
//                  than f32 (reduce.cpp keeps the tuned f32 kernels).
// argmax / argmin: i64 index of the extremum along `axis`; `select_last_index` breaks ties to the
//                  last; the first NaN wins (NumPy).
// cumsum:          running sum along `axis`, `exclusive`, `reverse` (ONNX CumSum).
//
// Adjacent kept/reduced dims are merged; a single reduced block [outer, R, inner] runs as lanes of
// up to 256 inner elements (contiguous loads, parallel over outer × lane chunks); several reduced
// blocks fall back to a per-output odometer. Accumulation: f32/f16 in float, f64 in double,
// integers in int64 (Num<S> in NumericTypes.h).
//
//===----------------------------------------------------------------------------------------===//
#include "NumericTypes.h"

#include <optional>

namespace colossal::runtime::cpu {
namespace {

enum class RK { Sum, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSum, LogSumExp };

std::optional<RK> parseKind(llvm::StringRef s) {
  static const std::pair<const char *, RK> kinds[] = {
      {"sum", RK::Sum},           {"mean", RK::Mean}, {"max", RK::Max}, {"min", RK::Min},
      {"prod", RK::Prod},         {"sum_square", RK::SumSquare},        {"l1", RK::L1},
      {"l2", RK::L2},             {"log_sum", RK::LogSum},              {"log_sum_exp", RK::LogSumExp}};
  for (auto &[name, k] : kinds)
    if (s == name) return k;
  return std::nullopt;
}

bool floatOnly(RK k) { return k == RK::L2 || k == RK::LogSum || k == RK::LogSumExp; }

/// The output shape of reducing `axes` of `in`.
Shape reducedShape(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> axes, bool keep) {
  Shape s;
  for (int64_t d = 0, k = 0; d < static_cast<int64_t>(in.size()); ++d) {
    bool reduced = k < static_cast<int64_t>(axes.size()) && axes[k] == d;
    if (reduced) ++k;
    if (!reduced) s.push_back(in[d]);
    else if (keep) s.push_back(1);
  }
  return s;
}

llvm::Error verifyAxes(const TensorRef &X, llvm::ArrayRef<int64_t> axes) {
  if (axes.empty()) return kernelError("axes must be a non-empty list");
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= X.rank())
      return kernelError("axis " + llvm::Twine(axes[i]) + " out of range for rank " + llvm::Twine(X.rank()));
    if (i && axes[i] <= axes[i - 1]) return kernelError("axes must be sorted and unique");
  }
  return llvm::Error::success();
}

/// The kernel's kind: fixed for reduce_sum / reduce_mean / reduce_max (Fixed >= 0), else `kind`.
template <int Fixed> std::optional<RK> kindOf(const KernelCall &c) {
  if constexpr (Fixed >= 0) return static_cast<RK>(Fixed);
  else return parseKind(c.attrString("kind", ""));
}

llvm::Error verifyReduceKind(const KernelCall &c, std::optional<RK> kind) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (!kind) return kernelError("kind must be one of sum, mean, max, min, prod, sum_square, l1, l2, log_sum, log_sum_exp");
  if (X.dtype != Y.dtype) return kernelError("input and output dtypes differ");
  if (!isNumeric(X.dtype)) return kernelError("reduce of dtype " + dtypeName(X.dtype) + " is not implemented");
  if (floatOnly(*kind) && X.dtype != DType::F32 && X.dtype != DType::F64 && X.dtype != DType::F16)
    return kernelError("this kind needs a floating-point input");
  auto axes = c.attrInts("axes");
  if (llvm::Error e = verifyAxes(X, axes)) return e;
  Shape want = reducedShape(X.shape, axes, c.attrInt("keepdims", 1) != 0);
  if (want != Y.shape)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  return llvm::Error::success();
}

/// One reduction kind over accumulator A.
template <RK K, typename A> struct Reducer {
  static A init() {
    if constexpr (K == RK::Prod) return A(1);
    else if constexpr (K == RK::Max || K == RK::LogSumExp) {
      if constexpr (std::is_floating_point_v<A>) return -std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::lowest();
    } else if constexpr (K == RK::Min) {
      if constexpr (std::is_floating_point_v<A>) return std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::max();
    } else return A(0);
  }
  /// acc ⊕ v; for LogSumExp this is the max pass.
  static A step(A acc, A v) {
    if constexpr (K == RK::Max || K == RK::LogSumExp) return (v > acc || isNaN(v)) ? v : acc;
    else if constexpr (K == RK::Min) return (v < acc || isNaN(v)) ? v : acc;
    else if constexpr (K == RK::Prod) return acc * v;
    else if constexpr (K == RK::SumSquare || K == RK::L2) return acc + v * v;
    else if constexpr (K == RK::L1) return acc + (v < 0 ? -v : v);
    else return acc + v;
  }
  /// LogSumExp's second pass: Σ e^(v − m).
  static A expStep(A acc, A v, A m) {
    if constexpr (std::is_floating_point_v<A>) return acc + (std::isinf(m) ? A(0) : std::exp(v - m));
    else return acc;
  }
  static A finish(A acc, int64_t count, A m) {
    if constexpr (K == RK::Mean) {
      if constexpr (std::is_floating_point_v<A>) return acc / static_cast<A>(count);
      else return count ? acc / count : 0;
    } else if constexpr (std::is_floating_point_v<A>) {
      if constexpr (K == RK::L2) return std::sqrt(acc);
      else if constexpr (K == RK::LogSum) return std::log(acc);
      else if constexpr (K == RK::LogSumExp) return std::isinf(m) || isNaN(m) ? m : m + std::log(acc);
      else return acc;
    } else return acc;
  }
};

template <RK K, typename S> void reduceImpl(const KernelCall &c) {
  using N = Num<S>;
  using A = typename N::Acc;
  using R = Reducer<K, A>;
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  auto axes = c.attrInts("axes");
  const S *x = X.as<const S>();
  S *y = Y.as<S>();
  llvm::SmallVector<int64_t, 8> gdims;
  llvm::SmallVector<bool, 8> greduced;
  const int64_t count = groupReduceDims(X.shape, axes, gdims, greduced);
  const int64_t outN = Y.numel();
  if (outN == 0) return;
  int numReducedGroups = 0;
  for (bool r : greduced) numReducedGroups += r;
  if (numReducedGroups <= 1) {
    int64_t outer = 1, Rn = 1, inner = 1;
    bool seen = false;
    for (size_t g = 0; g < gdims.size(); ++g) {
      if (greduced[g]) { Rn = gdims[g]; seen = true; }
      else if (!seen) outer *= gdims[g];
      else inner *= gdims[g];
    }
    if (count == 0) Rn = 0;
    constexpr int64_t kChunk = 256;
    const int64_t chunks = (inner + kChunk - 1) / kChunk;
    parallelFor(outer * chunks, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, Rn * std::min(inner, kChunk))),
                [&](int64_t b, int64_t e) {
      A acc[kChunk], m[kChunk];
      for (int64_t w = b; w < e; ++w) {
        const int64_t o = w / chunks, j0 = (w % chunks) * kChunk, n = std::min(kChunk, inner - j0);
        const int64_t base = o * Rn * inner + j0;
        for (int64_t j = 0; j < n; ++j) acc[j] = R::init();
        for (int64_t r = 0; r < Rn; ++r)
          for (int64_t j = 0; j < n; ++j) acc[j] = R::step(acc[j], N::load(x, base + r * inner + j));
        if constexpr (K == RK::LogSumExp) {
          for (int64_t j = 0; j < n; ++j) { m[j] = acc[j]; acc[j] = A(0); }
          for (int64_t r = 0; r < Rn; ++r)
            for (int64_t j = 0; j < n; ++j) acc[j] = R::expStep(acc[j], N::load(x, base + r * inner + j), m[j]);
        }
        for (int64_t j = 0; j < n; ++j) N::store(y, o * inner + j0 + j, R::finish(acc[j], count, m[j]));
      }
    });
    return;
  }
  // General: per output element, walk the reduced index space with an odometer.
  const int rank = static_cast<int>(gdims.size());
  llvm::SmallVector<int64_t, 8> gstride(rank, 1);
  for (int g = rank - 2; g >= 0; --g) gstride[g] = gstride[g + 1] * gdims[g + 1];
  llvm::SmallVector<int, 8> keptG, redG;
  for (int g = 0; g < rank; ++g) (greduced[g] ? redG : keptG).push_back(g);
  parallelFor(outN, 1024, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t base = 0, rem = o;
      for (int i = static_cast<int>(keptG.size()) - 1; i >= 0; --i) {
        int g = keptG[i];
        base += (rem % gdims[g]) * gstride[g];
        rem /= gdims[g];
      }
      auto walk = [&](auto &&visit) {
        int64_t idx[kMaxRank] = {0};
        for (int64_t n = 0; n < count; ++n) {
          int64_t off = base;
          for (size_t i = 0; i < redG.size(); ++i) off += idx[i] * gstride[redG[i]];
          visit(N::load(x, off));
          for (int i = static_cast<int>(redG.size()) - 1; i >= 0; --i) {
            if (++idx[i] < gdims[redG[i]]) break;
            idx[i] = 0;
          }
        }
      };
      A acc = R::init(), m = A(0);
      walk([&](A v) { acc = R::step(acc, v); });
      if constexpr (K == RK::LogSumExp) {
        m = acc;
        acc = A(0);
        walk([&](A v) { acc = R::expStep(acc, v, m); });
      }
      N::store(y, o, R::finish(acc, count, m));
    }
  });
}

template <typename S> void reduceDispatch(const KernelCall &c, RK k) {
  switch (k) {
  case RK::Sum: return reduceImpl<RK::Sum, S>(c);
  case RK::Mean: return reduceImpl<RK::Mean, S>(c);
  case RK::Max: return reduceImpl<RK::Max, S>(c);
  case RK::Min: return reduceImpl<RK::Min, S>(c);
  case RK::Prod: return reduceImpl<RK::Prod, S>(c);
  case RK::SumSquare: return reduceImpl<RK::SumSquare, S>(c);
  case RK::L1: return reduceImpl<RK::L1, S>(c);
  case RK::L2: return reduceImpl<RK::L2, S>(c);
  case RK::LogSum: return reduceImpl<RK::LogSum, S>(c);
  case RK::LogSumExp: return reduceImpl<RK::LogSumExp, S>(c);
  }
}

template <int Fixed> llvm::Error verifyReduce(const KernelCall &c) {
  return verifyReduceKind(c, kindOf<Fixed>(c));
}

template <int Fixed> llvm::Error runReduce(const KernelCall &c) {
  RK k = *kindOf<Fixed>(c);
  dispatchNumeric(c.inputs[0].dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (Num<S>::isFloat) reduceDispatch<S>(c, k);
    else if (!floatOnly(k)) reduceDispatch<S>(c, k);
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- argmax / argmin
llvm::Error verifyArg(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (llvm::Error e = verifyDType(Y, DType::I64, "output")) return e;
  if (!isNumeric(X.dtype)) return kernelError("arg-reduction of dtype " + dtypeName(X.dtype) + " is not implemented");
  int64_t axis = c.attrInt("axis", 0);
  if (axis < 0 || axis >= X.rank())
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(X.rank()));
  if (X.shape[axis] == 0) return kernelError("cannot take the arg-extremum of an empty axis");
  Shape want = reducedShape(X.shape, {axis}, c.attrInt("keepdims", 1) != 0);
  if (want != Y.shape)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  return llvm::Error::success();
}

template <bool IsMax, typename S> void argImpl(const KernelCall &c) {
  using N = Num<S>;
  using A = typename N::Acc;
  const TensorRef &X = c.inputs[0];
  int64_t outer, n, inner;
  splitAxis(X.shape, c.attrInt("axis", 0), outer, n, inner);
  const bool last = c.attrInt("select_last_index", 0) != 0;
  const S *x = X.as<const S>();
  int64_t *y = c.outputs[0].as<int64_t>();
  constexpr int64_t kChunk = 256;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  parallelFor(outer * chunks, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
    A best[kChunk];
    for (int64_t w = b; w < e; ++w) {
      const int64_t o = w / chunks, j0 = (w % chunks) * kChunk, m = std::min(kChunk, inner - j0);
      const int64_t base = o * n * inner + j0;
      int64_t *yi = y + o * inner + j0;
      for (int64_t j = 0; j < m; ++j) { best[j] = N::load(x, base + j); yi[j] = 0; }
      for (int64_t k = 1; k < n; ++k)
        for (int64_t j = 0; j < m; ++j) {
          A v = N::load(x, base + k * inner + j), bv = best[j];
          bool better;
          if (isNaN(bv)) better = last && isNaN(v);
          else if (isNaN(v)) better = true;
          else if (IsMax) better = v > bv || (last && v == bv);
          else better = v < bv || (last && v == bv);
          if (better) { best[j] = v; yi[j] = k; }
        }
    }
  });
}

template <bool IsMax> llvm::Error runArg(const KernelCall &c) {
  dispatchNumeric(c.inputs[0].dtype, [&](auto tag) { argImpl<IsMax, decltype(tag)>(c); });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- cumsum
llvm::Error verifyCumSum(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (X.dtype != Y.dtype || X.shape != Y.shape) return kernelError("output must match the input's shape and dtype");
  if (!isNumeric(X.dtype)) return kernelError("cumsum of dtype " + dtypeName(X.dtype) + " is not implemented");
  int64_t axis = c.attrInt("axis", 0);
  if (axis < 0 || axis >= X.rank())
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(X.rank()));
  return llvm::Error::success();
}

template <typename S> void cumsumImpl(const KernelCall &c) {
  using N = Num<S>;
  using A = typename N::Acc;
  const TensorRef &X = c.inputs[0];
  int64_t outer, n, inner;
  splitAxis(X.shape, c.attrInt("axis", 0), outer, n, inner);
  const bool excl = c.attrInt("exclusive", 0) != 0, rev = c.attrInt("reverse", 0) != 0;
  const S *x = X.as<const S>();
  S *y = c.outputs[0].as<S>();
  constexpr int64_t kChunk = 256;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  parallelFor(outer * chunks, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
    A acc[kChunk];
    for (int64_t w = b; w < e; ++w) {
      const int64_t o = w / chunks, j0 = (w % chunks) * kChunk, m = std::min(kChunk, inner - j0);
      for (int64_t j = 0; j < m; ++j) acc[j] = A(0);
      for (int64_t s = 0; s < n; ++s) {
        const int64_t k = rev ? n - 1 - s : s, off = (o * n + k) * inner + j0;
        for (int64_t j = 0; j < m; ++j) {
          A v = N::load(x, off + j);
          N::store(y, off + j, excl ? acc[j] : acc[j] + v);
          acc[j] += v;
        }
      }
    }
  });
}

llvm::Error runCumSum(const KernelCall &c) {
  dispatchNumeric(c.inputs[0].dtype, [&](auto tag) { cumsumImpl<decltype(tag)>(c); });
  return llvm::Error::success();
}

void add(KernelRegistry &r, const char *op, DType dtype, std::vector<AttrSpec> attrs,
         llvm::Error (*verify)(const KernelCall &), llvm::Error (*run)(const KernelCall &)) {
  KernelDesc d;
  d.op = op;
  d.dtype = dtype;
  d.attrs = std::move(attrs);
  d.verify = verify;
  d.run = run;
  r.add(d);
}

}  // namespace

void registerReduceKindKernels(KernelRegistry &r) {
  const std::vector<AttrSpec> reduceAttrs = {{"axes", AttrKind::Ints}, {"keepdims", AttrKind::Int}};
  std::vector<AttrSpec> kindAttrs = reduceAttrs;
  kindAttrs.push_back({"kind", AttrKind::String});
  for (DType d : kNumericDTypes) {
    add(r, "reduce", d, kindAttrs, verifyReduce<-1>, runReduce<-1>);
    add(r, "cumsum", d, {{"axis", AttrKind::Int}, {"exclusive", AttrKind::Int}, {"reverse", AttrKind::Int}},
        verifyCumSum, runCumSum);
    if (d == DType::F32) continue;  // reduce.cpp: the tuned f32 kernels
    add(r, "reduce_sum", d, reduceAttrs, verifyReduce<int(RK::Sum)>, runReduce<int(RK::Sum)>);
    add(r, "reduce_mean", d, reduceAttrs, verifyReduce<int(RK::Mean)>, runReduce<int(RK::Mean)>);
    add(r, "reduce_max", d, reduceAttrs, verifyReduce<int(RK::Max)>, runReduce<int(RK::Max)>);
  }
  const std::vector<AttrSpec> argAttrs = {{"axis", AttrKind::Int}, {"keepdims", AttrKind::Int},
                                          {"select_last_index", AttrKind::Int}};
  add(r, "argmax", DType::I64, argAttrs, verifyArg, runArg<true>);
  add(r, "argmin", DType::I64, argAttrs, verifyArg, runArg<false>);
}

}  // namespace colossal::runtime::cpu

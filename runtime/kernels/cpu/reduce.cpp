//===- reduce.cpp - reduce_sum, reduce_mean, reduce_max CPU kernels (f32) --------------------===//
//
// x [d0..dn) -> y with `axes` (sorted, non-negative, non-empty) reduced; y's shape has the axes
// removed (keepdims = 0) or set to 1 (keepdims = 1). ONNX ReduceSum/ReduceMean/ReduceMax.
// Adjacent kept/reduced dims are merged; a single reduced block [outer, R, inner] (the common case:
// last axis, or one middle block) runs vectorized (SIMD reductions over R when inner == 1, vector
// accumulation over inner otherwise) and parallel over outer rows. Several separated reduced blocks
// fall back to a per-output-element loop.
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace colossal::runtime::cpu {
namespace {

enum class Kind { Sum, Mean, Max };

llvm::Error verifyReduce(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (llvm::Error e = verifyDType(X, DType::F32, "input")) return e;
  llvm::SmallVector<int64_t, 6> axes = c.attrInts("axes");
  if (axes.empty()) return kernelError("axes must be a non-empty list");
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= X.rank())
      return kernelError("axis " + llvm::Twine(axes[i]) + " out of range for rank " + llvm::Twine(X.rank()));
    if (i && axes[i] <= axes[i - 1]) return kernelError("axes must be sorted and unique");
  }
  bool keep = c.attrInt("keepdims", 1) != 0;
  Shape expected;
  for (int64_t d = 0, k = 0; d < X.rank(); ++d) {
    bool reduced = k < static_cast<int64_t>(axes.size()) && axes[k] == d;
    if (reduced) ++k;
    if (!reduced) expected.push_back(X.shape[d]);
    else if (keep) expected.push_back(1);
  }
  if (expected != Y.shape)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(expected));
  return llvm::Error::success();
}

template <Kind K> float init() {
  return K == Kind::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
}

template <Kind K> float reduceContiguous(const float *x, int64_t n) {
  if constexpr (K == Kind::Max) {
    float m = -std::numeric_limits<float>::infinity();
    bool nan = false;
#pragma omp simd reduction(max : m) reduction(|| : nan)
    for (int64_t i = 0; i < n; ++i) {
      m = std::max(m, x[i]);
      nan = nan || x[i] != x[i];
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : m;
  } else {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
}

template <Kind K> llvm::Error runReduce(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  llvm::SmallVector<int64_t, 6> axes = c.attrInts("axes");
  const float *x = X.as<const float>();
  float *y = Y.as<float>();
  // Merge dims into groups of alternating kept/reduced (dropping size-1 dims).
  llvm::SmallVector<int64_t, 8> gdims;
  llvm::SmallVector<bool, 8> greduced;
  const int64_t count = groupReduceDims(X.shape, axes, gdims, greduced);
  const int64_t outN = Y.numel();
  if (outN == 0) return llvm::Error::success();
  const float scale = K == Kind::Mean ? 1.0f / static_cast<float>(count) : 1.0f;
  auto finish = [&](float v) { return K == Kind::Mean ? v * scale : v; };
  if (count == 0) {  // reducing an empty axis: sum 0, mean NaN (0/0), max -inf
    for (int64_t i = 0; i < outN; ++i)
      y[i] = K == Kind::Mean ? std::numeric_limits<float>::quiet_NaN() : init<K>();
    return llvm::Error::success();
  }
  int numReducedGroups = 0;
  for (bool r : greduced) numReducedGroups += r;
  if (numReducedGroups <= 1) {
    // [outer, R, inner] with outer/inner possibly 1.
    int64_t outer = 1, R = 1, inner = 1;
    bool seen = false;
    for (size_t g = 0; g < gdims.size(); ++g) {
      if (greduced[g]) { R = gdims[g]; seen = true; }
      else if (!seen) outer *= gdims[g];
      else inner *= gdims[g];
    }
    if (inner == 1) {
      parallelFor(outer, std::max<int64_t>(1, (1 << 15) / R), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) y[o] = finish(reduceContiguous<K>(x + o * R, R));
      });
      return llvm::Error::success();
    }
    // Vector accumulation over the inner dim, parallel over (outer, inner chunks).
    constexpr int64_t kChunk = 256;
    int64_t chunks = (inner + kChunk - 1) / kChunk;
    parallelFor(outer * chunks, std::max<int64_t>(1, (1 << 15) / (R * kChunk)), [&](int64_t b, int64_t e) {
      for (int64_t w = b; w < e; ++w) {
        int64_t o = w / chunks, j0 = (w % chunks) * kChunk, n = std::min(kChunk, inner - j0);
        float *py = y + o * inner + j0;
        const float *px = x + o * R * inner + j0;
        for (int64_t j = 0; j < n; ++j) py[j] = init<K>();
        for (int64_t r = 0; r < R; ++r) {
          const float *row = px + r * inner;
          if constexpr (K == Kind::Max) {
            for (int64_t j = 0; j < n; ++j) py[j] = (row[j] > py[j] || row[j] != row[j]) ? row[j] : py[j];
          } else {
            for (int64_t j = 0; j < n; ++j) py[j] += row[j];
          }
        }
        if constexpr (K == Kind::Mean)
          for (int64_t j = 0; j < n; ++j) py[j] *= scale;
      }
    });
    return llvm::Error::success();
  }
  // General: per output element, walk the reduced index space with an odometer.
  int rank = static_cast<int>(gdims.size());
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
      int64_t idx[8] = {0};
      // Sums accumulate in double (as torch's CPU reductions do): over the N·H·W elements of a
      // batch norm's channel a float sum loses several ulps of the mean.
      using Acc = std::conditional_t<K == Kind::Max, float, double>;
      Acc acc = init<K>();
      for (int64_t n = 0; n < count; ++n) {
        int64_t off = base;
        for (size_t i = 0; i < redG.size(); ++i) off += idx[i] * gstride[redG[i]];
        float v = x[off];
        if constexpr (K == Kind::Max) acc = (v > acc || v != v) ? v : acc;
        else acc += v;
        for (int i = static_cast<int>(redG.size()) - 1; i >= 0; --i) {
          if (++idx[i] < gdims[redG[i]]) break;
          idx[i] = 0;
        }
      }
      if constexpr (K == Kind::Mean) y[o] = static_cast<float>(acc / static_cast<double>(count));
      else y[o] = static_cast<float>(acc);
    }
  });
  return llvm::Error::success();
}

void add(KernelRegistry &r, const char *op, llvm::Error (*run)(const KernelCall &)) {
  KernelDesc d;
  d.op = op;
  d.dtype = DType::F32;
  d.attrs = {{"axes", AttrKind::Ints}, {"keepdims", AttrKind::Int}};
  d.verify = verifyReduce;
  d.run = run;
  r.add(d);
}

}  // namespace

void registerReduceKernels(KernelRegistry &r) {
  add(r, "reduce_sum", runReduce<Kind::Sum>);
  add(r, "reduce_mean", runReduce<Kind::Mean>);
  add(r, "reduce_max", runReduce<Kind::Max>);
}

}  // namespace colossal::runtime::cpu

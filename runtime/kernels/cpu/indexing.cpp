//===- indexing.cpp - gather_elements gather_nd scatter_* one_hot topk pad pad_grad (+ f64 matmul) ===//
//
// Index-driven data movement (docs/plan.md; ONNX GatherElements, GatherND, ScatterElements,
// ScatterND, OneHot, TopK, Pad). Pure moves work on element bytes and are registered for every
// dtype; scatter reductions and topk compare or accumulate and cover the numeric dtypes
// (NumericTypes.h). Index operands are i64 or i32; negative indices count from the end and an
// index out of range is an error naming its position.
// matmul f64: a plain blocked kernel, so that Einsum on float64 (which the importer lowers to
// batched matmul) runs; f32 stays on the BLAS kernel of matmul.cpp.
//
//===----------------------------------------------------------------------------------------===//
#include "NumericTypes.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace colossal::runtime::cpu {
namespace {

/// Calls f(T{}) with an unsigned type of `size` bytes (moves only).
template <typename F> void withBytes(size_t size, F &&f) {
  switch (size) {
  case 1: f(uint8_t{}); break;
  case 2: f(uint16_t{}); break;
  case 4: f(uint32_t{}); break;
  default: f(uint64_t{}); break;
  }
}

llvm::Error verifyIndexDType(const TensorRef &I) {
  if (I.dtype != DType::I64 && I.dtype != DType::I32)
    return kernelError("indices must be i64 or i32, got " + dtypeName(I.dtype));
  return llvm::Error::success();
}

/// Index k of `I` as int64.
inline int64_t indexAt(const TensorRef &I, int64_t k) {
  return I.dtype == DType::I64 ? I.as<const int64_t>()[k] : I.as<const int32_t>()[k];
}

/// Normalizes index `v` against `n`, or an error naming position `pos`.
llvm::Error normIndex(int64_t &v, int64_t n, int64_t pos) {
  if (v < -n || v >= n)
    return kernelError("index " + llvm::Twine(v) + " at position " + llvm::Twine(pos) +
                       " is out of range for a dim of size " + llvm::Twine(n));
  if (v < 0) v += n;
  return llvm::Error::success();
}

Shape stridesOf(llvm::ArrayRef<int64_t> shape) {
  Shape s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

// ---------------------------------------------------------------- gather_elements
llvm::Error verifyGatherElements(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &Y = c.outputs[0];
  if (llvm::Error e = verifyIndexDType(I)) return e;
  if (X.dtype != Y.dtype) return kernelError("data and output dtypes differ");
  int64_t axis = c.attrInt("axis", 0);
  if (X.rank() != I.rank() || X.rank() == 0 || axis < 0 || axis >= X.rank())
    return kernelError("data and indices need one rank >= 1 and axis in range");
  if (Y.shape != I.shape) return kernelError("output shape must be the indices' shape");
  for (int64_t d = 0; d < X.rank(); ++d)
    if (d != axis && I.shape[d] > X.shape[d]) return kernelError("indices exceed data in dim " + llvm::Twine(d));
  if (X.rank() > kMaxRank) return kernelError("rank exceeds 8");
  return llvm::Error::success();
}

llvm::Error runGatherElements(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &Y = c.outputs[0];
  const int64_t axis = c.attrInt("axis", 0), rank = X.rank(), n = I.numel(), axisN = X.shape[axis];
  Shape xs = stridesOf(X.shape);
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = indexAt(I, k);
    if (llvm::Error e = normIndex(v, axisN, k)) return e;
  }
  const int64_t inner = I.shape[rank - 1];
  if (n == 0) return llvm::Error::success();
  withBytes(dtypeSize(X.dtype), [&](auto tag) {
    using T = decltype(tag);
    const T *x = X.as<const T>();
    T *y = Y.as<T>();
    parallelFor(n / inner, std::max<int64_t>(1, 4096 / inner), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t base = 0, rem = row;  // offset of the row's outer coordinates (axis excluded)
        for (int64_t d = rank - 2; d >= 0; --d) {
          int64_t i = rem % I.shape[d];
          rem /= I.shape[d];
          if (d != axis) base += i * xs[d];
        }
        for (int64_t j = 0; j < inner; ++j) {
          int64_t k = row * inner + j, v = indexAt(I, k);
          if (v < 0) v += axisN;
          int64_t off = base + v * xs[axis] + (axis == rank - 1 ? 0 : j * xs[rank - 1]);
          y[k] = x[off];
        }
      }
    });
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- gather_nd
llvm::Error verifyGatherND(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &Y = c.outputs[0];
  if (llvm::Error e = verifyIndexDType(I)) return e;
  if (X.dtype != Y.dtype) return kernelError("data and output dtypes differ");
  int64_t b = c.attrInt("batch_dims", 0), r = X.rank(), q = I.rank();
  if (q < 1 || b < 0 || b >= std::min(q, r)) return kernelError("batch_dims out of range");
  int64_t m = I.shape[q - 1];
  if (m < 1 || m > r - b) return kernelError("the last dim of indices is out of range");
  Shape want(I.shape.begin(), I.shape.end() - 1);
  want.append(X.shape.begin() + b + m, X.shape.end());
  if (want != Y.shape)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  for (int64_t d = 0; d < b; ++d)
    if (X.shape[d] != I.shape[d]) return kernelError("batch dims of data and indices differ");
  return llvm::Error::success();
}

llvm::Error runGatherND(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &Y = c.outputs[0];
  const int64_t b = c.attrInt("batch_dims", 0), q = I.rank(), m = I.shape[q - 1];
  Shape xs = stridesOf(X.shape);
  int64_t batch = 1;
  for (int64_t d = 0; d < b; ++d) batch *= X.shape[d];
  const int64_t tuples = I.numel() / m, perBatch = batch ? tuples / batch : 0;
  const int64_t sliceElems = b + m < X.rank() ? xs[b + m - 1] : 1;
  const int64_t batchStride = b ? xs[b - 1] : 0;
  const size_t es = dtypeSize(X.dtype);
  // Resolve every tuple's source offset first, so that a bad index fails before writing.
  for (int64_t t = 0; t < tuples; ++t)
    for (int64_t k = 0; k < m; ++k) {
      int64_t v = indexAt(I, t * m + k);
      if (llvm::Error e = normIndex(v, X.shape[b + k], t * m + k)) return e;
    }
  const char *x = static_cast<const char *>(X.data);
  char *y = static_cast<char *>(Y.data);
  parallelFor(tuples, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, sliceElems)), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      int64_t off = perBatch ? (t / perBatch) * batchStride : 0;
      for (int64_t k = 0; k < m; ++k) {
        int64_t v = indexAt(I, t * m + k);
        if (v < 0) v += X.shape[b + k];
        off += v * xs[b + k];
      }
      std::memcpy(y + t * sliceElems * es, x + off * es, sliceElems * es);
    }
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- scatter_elements / scatter_nd
enum class Red { None, Add, Mul, Max, Min };

std::optional<Red> parseRed(llvm::StringRef s) {
  if (s == "none") return Red::None;
  if (s == "add") return Red::Add;
  if (s == "mul") return Red::Mul;
  if (s == "max") return Red::Max;
  if (s == "min") return Red::Min;
  return std::nullopt;
}

/// out[k] = combine(out[k], u) for `red`.
template <typename S> inline void combine(S *out, int64_t k, const S *upd, int64_t u, Red red) {
  using N = Num<S>;
  if (red == Red::None) { out[k] = upd[u]; return; }
  auto a = N::load(out, k), v = N::load(upd, u);
  switch (red) {
  case Red::Add: a = a + v; break;
  case Red::Mul: a = a * v; break;
  case Red::Max: a = std::max(a, v); break;
  case Red::Min: a = std::min(a, v); break;
  case Red::None: break;
  }
  N::store(out, k, a);
}

llvm::Error verifyScatterCommon(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &U = c.inputs[2], &Y = c.outputs[0];
  if (llvm::Error e = verifyIndexDType(I)) return e;
  if (X.dtype != Y.dtype || U.dtype != Y.dtype || X.shape != Y.shape)
    return kernelError("data, updates and output must share the dtype; output keeps data's shape");
  auto red = parseRed(c.attrString("reduction", "none"));
  if (!red) return kernelError("reduction must be none, add, mul, max or min");
  if (*red != Red::None && !isNumeric(X.dtype))
    return kernelError("reduction on dtype " + dtypeName(X.dtype) + " is not implemented");
  return llvm::Error::success();
}

llvm::Error verifyScatterElements(const KernelCall &c) {
  if (llvm::Error e = verifyScatterCommon(c)) return e;
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &U = c.inputs[2];
  int64_t axis = c.attrInt("axis", 0);
  if (X.rank() != I.rank() || I.shape != U.shape || axis < 0 || axis >= X.rank())
    return kernelError("indices and updates must share a shape of data's rank; axis in range");
  for (int64_t d = 0; d < X.rank(); ++d)
    if (d != axis && I.shape[d] > X.shape[d]) return kernelError("indices exceed data in dim " + llvm::Twine(d));
  return llvm::Error::success();
}

/// Element bytes moved without arithmetic (reduction none).
template <typename T> struct Raw { using type = T; };
template <typename S> struct IsRaw : std::false_type {};
template <typename T> struct IsRaw<Raw<T>> : std::true_type {};

/// Calls f(S{}) with the numeric storage type of `d` when `arithmetic`, else f(Raw<T>{}) with an
/// unsigned type of the element's size.
template <typename F> void withStorage(DType d, bool arithmetic, F &&f) {
  if (arithmetic && dispatchNumeric(d, f)) return;
  withBytes(dtypeSize(d), [&](auto tag) { f(Raw<decltype(tag)>{}); });
}

llvm::Error runScatterElements(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &U = c.inputs[2], &Y = c.outputs[0];
  const int64_t axis = c.attrInt("axis", 0), rank = X.rank(), n = I.numel();
  const Red red = *parseRed(c.attrString("reduction", "none"));
  Shape xs = stridesOf(X.shape);
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = indexAt(I, k);
    if (llvm::Error e = normIndex(v, X.shape[axis], k)) return e;
  }
  if (X.data != Y.data) std::memcpy(Y.data, X.data, X.bytes());
  withStorage(X.dtype, red != Red::None, [&](auto tag) {
    using Tag = decltype(tag);
    using S = typename std::conditional_t<IsRaw<Tag>::value, Tag, Raw<Tag>>::type;
    S *y = Y.as<S>();
    const S *u = U.as<const S>();
    int64_t idx[kMaxRank] = {0};
    for (int64_t k = 0; k < n; ++k) {  // serial: duplicate indices apply in order
      int64_t off = 0;
      for (int64_t d = 0; d < rank; ++d) {
        int64_t i = idx[d];
        if (d == axis) {
          i = indexAt(I, k);
          if (i < 0) i += X.shape[axis];
        }
        off += i * xs[d];
      }
      if constexpr (IsRaw<Tag>::value)
        y[off] = u[k];
      else
        combine(y, off, u, k, red);
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < I.shape[d]) break;
        idx[d] = 0;
      }
    }
  });
  return llvm::Error::success();
}

llvm::Error verifyScatterND(const KernelCall &c) {
  if (llvm::Error e = verifyScatterCommon(c)) return e;
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &U = c.inputs[2];
  if (I.rank() < 1) return kernelError("indices must have rank >= 1");
  int64_t m = I.shape[I.rank() - 1];
  if (m < 1 || m > X.rank()) return kernelError("the last dim of indices is out of range");
  Shape want(I.shape.begin(), I.shape.end() - 1);
  want.append(X.shape.begin() + m, X.shape.end());
  if (want != U.shape)
    return kernelError("updates shape " + shapeToString(U.shape) + ", expected " + shapeToString(want));
  return llvm::Error::success();
}

llvm::Error runScatterND(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &U = c.inputs[2], &Y = c.outputs[0];
  const int64_t m = I.shape[I.rank() - 1], tuples = I.numel() / m;
  const Red red = *parseRed(c.attrString("reduction", "none"));
  Shape xs = stridesOf(X.shape);
  const int64_t slice = m < X.rank() ? xs[m - 1] : 1;
  for (int64_t k = 0; k < I.numel(); ++k) {
    int64_t v = indexAt(I, k);
    if (llvm::Error e = normIndex(v, X.shape[k % m], k)) return e;
  }
  if (X.data != Y.data) std::memcpy(Y.data, X.data, X.bytes());
  withStorage(X.dtype, red != Red::None, [&](auto tag) {
    using Tag = decltype(tag);
    using S = typename std::conditional_t<IsRaw<Tag>::value, Tag, Raw<Tag>>::type;
    S *y = Y.as<S>();
    const S *u = U.as<const S>();
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t k = 0; k < m; ++k) {
        int64_t v = indexAt(I, t * m + k);
        if (v < 0) v += X.shape[k];
        off += v * xs[k];
      }
      if constexpr (IsRaw<Tag>::value)
        std::memcpy(y + off, u + t * slice, slice * sizeof(S));
      else
        for (int64_t j = 0; j < slice; ++j) combine(y, off + j, u, t * slice + j, red);
    }
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- one_hot
llvm::Error verifyOneHot(const KernelCall &c) {
  const TensorRef &I = c.inputs[0], &V = c.inputs[1], &Y = c.outputs[0];
  if (llvm::Error e = verifyIndexDType(I)) return e;
  if (V.numel() != 2 || V.dtype != Y.dtype) return kernelError("values must be [off, on] of the output's dtype");
  int64_t axis = c.attrInt("axis", 0);
  if (Y.rank() != I.rank() + 1 || axis < 0 || axis >= Y.rank())
    return kernelError("output rank must be the indices' rank + 1, axis in range");
  for (int64_t d = 0, k = 0; d < Y.rank(); ++d)
    if (d != axis && Y.shape[d] != I.shape[k++])
      return kernelError("output shape " + shapeToString(Y.shape) + " does not extend indices " + shapeToString(I.shape));
  return llvm::Error::success();
}

llvm::Error runOneHot(const KernelCall &c) {
  const TensorRef &I = c.inputs[0], &V = c.inputs[1], &Y = c.outputs[0];
  int64_t outer, depth, inner;
  splitAxis(Y.shape, c.attrInt("axis", 0), outer, depth, inner);
  withBytes(dtypeSize(Y.dtype), [&](auto tag) {
    using T = decltype(tag);
    const T off = V.as<const T>()[0], on = V.as<const T>()[1];
    T *y = Y.as<T>();
    parallelFor(outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, depth * inner)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        std::fill(y + o * depth * inner, y + (o + 1) * depth * inner, off);
        for (int64_t j = 0; j < inner; ++j) {
          int64_t v = indexAt(I, o * inner + j);
          if (v < 0) v += depth;
          if (v >= 0 && v < depth) y[(o * depth + v) * inner + j] = on;
        }
      }
    });
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- topk
llvm::Error verifyTopK(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &V = c.outputs[0], &Ix = c.outputs[1];
  if (!isNumeric(X.dtype)) return kernelError("topk of dtype " + dtypeName(X.dtype) + " is not implemented");
  if (V.dtype != X.dtype) return kernelError("values must keep the input's dtype");
  if (llvm::Error e = verifyDType(Ix, DType::I64, "indices")) return e;
  int64_t axis = c.attrInt("axis", 0);
  if (axis < 0 || axis >= X.rank() || V.rank() != X.rank() || V.shape != Ix.shape)
    return kernelError("axis out of range or results of the wrong rank");
  for (int64_t d = 0; d < X.rank(); ++d)
    if (d == axis ? V.shape[d] > X.shape[d] : V.shape[d] != X.shape[d])
      return kernelError("result shape " + shapeToString(V.shape) + " is not the input's with k at the axis");
  return llvm::Error::success();
}

size_t topkWorkspace(const KernelCall &c, int threads) {
  return static_cast<size_t>(threads) * c.inputs[0].shape[c.attrInt("axis", 0)] * sizeof(int64_t);
}

template <typename S> void topkImpl(const KernelCall &c) {
  using N = Num<S>;
  using A = typename N::Acc;
  const TensorRef &X = c.inputs[0], &V = c.outputs[0], &Ix = c.outputs[1];
  const int64_t axis = c.attrInt("axis", 0), k = V.shape[axis];
  const bool largest = c.attrInt("largest", 1) != 0;
  int64_t outer, n, inner;
  splitAxis(X.shape, axis, outer, n, inner);
  const S *x = X.as<const S>();
  S *v = V.as<S>();
  int64_t *ix = Ix.as<int64_t>();
  int64_t *scratch = static_cast<int64_t *>(c.workspace);
  parallelFor(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
    int64_t *order = scratch + static_cast<int64_t>(omp_get_thread_num()) * n;
    for (int64_t lane = b; lane < e; ++lane) {
      const int64_t o = lane / inner, j = lane % inner, base = o * n * inner + j;
      std::iota(order, order + n, int64_t(0));
      // Ties keep the lower index first; NaN ranks above every number.
      auto before = [&](int64_t p, int64_t q) {
        A a = N::load(x, base + p * inner), bq = N::load(x, base + q * inner);
        bool an = isNaN(a), bn = isNaN(bq);
        if (an || bn) {
          if (an && bn) return p < q;
          return largest ? an : bn;
        }
        if (a != bq) return largest ? a > bq : a < bq;
        return p < q;
      };
      std::partial_sort(order, order + k, order + n, before);
      for (int64_t t = 0; t < k; ++t) {
        const int64_t dst = (o * k + t) * inner + j;
        v[dst] = x[base + order[t] * inner];
        ix[dst] = order[t];
      }
    }
  });
}

llvm::Error runTopK(const KernelCall &c) {
  if (c.outputs[0].numel() == 0) return llvm::Error::success();
  dispatchNumeric(c.inputs[0].dtype, [&](auto tag) { topkImpl<decltype(tag)>(c); });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- pad
enum class PadMode { Constant, Reflect, Edge, Wrap };

std::optional<PadMode> parsePadMode(llvm::StringRef s) {
  if (s == "constant") return PadMode::Constant;
  if (s == "reflect") return PadMode::Reflect;
  if (s == "edge") return PadMode::Edge;
  if (s == "wrap") return PadMode::Wrap;
  return std::nullopt;
}

llvm::Error verifyPad(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (X.dtype != Y.dtype) return kernelError("input and output dtypes differ");
  auto mode = parsePadMode(c.attrString("mode", "constant"));
  if (!mode) return kernelError("mode must be constant, reflect, edge or wrap");
  if (c.inputs.size() > 1 && (c.inputs[1].numel() != 1 || c.inputs[1].dtype != X.dtype))
    return kernelError("value must be one element of the input's dtype");
  auto pads = c.attrInts("pads");
  const int64_t r = X.rank();
  if (static_cast<int64_t>(pads.size()) != 2 * r) return kernelError("pads needs 2 * rank entries");
  if (r > kMaxRank) return kernelError("rank exceeds 8");
  for (int64_t d = 0; d < r; ++d) {
    if (Y.shape[d] != X.shape[d] + pads[d] + pads[d + r])
      return kernelError("output shape " + shapeToString(Y.shape) + " does not match the pads");
    if (*mode != PadMode::Constant && X.shape[d] == 0 && Y.shape[d] > 0)
      return kernelError("cannot " + c.attrString("mode", "") + "-pad an empty dim");
  }
  return llvm::Error::success();
}

/// Source coordinate of output coordinate `o` along a dim of size n with `before` padding;
/// -1 when the constant value goes there.
inline int64_t padSource(int64_t o, int64_t before, int64_t n, PadMode mode) {
  int64_t i = o - before;
  if (i >= 0 && i < n) return i;
  switch (mode) {
  case PadMode::Constant: return -1;
  case PadMode::Edge: return i < 0 ? 0 : n - 1;
  case PadMode::Wrap: return ((i % n) + n) % n;
  case PadMode::Reflect: {
    if (n == 1) return 0;
    int64_t period = 2 * (n - 1);
    i = ((i % period) + period) % period;
    return i < n ? i : period - i;
  }
  }
  return -1;
}

/// The input offset of output row `row` of a pad (rows: every dim but the last, of `outShape`;
/// `xs`: the input's strides), or -1 when some dim of the row falls in the constant padding.
/// Shared by pad and pad_grad so both map rows alike.
inline int64_t padRowSource(int64_t row, const Shape &outShape, llvm::ArrayRef<int64_t> pads,
                            const Shape &inShape, const Shape &xs, PadMode mode) {
  int64_t off = 0, rem = row;
  bool fill = false;
  for (int64_t d = static_cast<int64_t>(outShape.size()) - 2; d >= 0; --d) {
    int64_t o = rem % outShape[d];
    rem /= outShape[d];
    int64_t s = padSource(o, pads[d], inShape[d], mode);
    if (s < 0) fill = true;
    else off += s * xs[d];
  }
  return fill ? -1 : off;
}

llvm::Error runPad(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  const PadMode mode = *parsePadMode(c.attrString("mode", "constant"));
  auto pads = c.attrInts("pads");
  const int64_t r = X.rank();
  if (Y.numel() == 0) return llvm::Error::success();
  if (r == 0) { std::memcpy(Y.data, X.data, X.bytes()); return llvm::Error::success(); }
  Shape xs = stridesOf(X.shape);
  const int64_t inner = Y.shape[r - 1], rows = Y.numel() / inner;
  withBytes(dtypeSize(X.dtype), [&](auto tag) {
    using T = decltype(tag);
    T value{};
    if (c.inputs.size() > 1) std::memcpy(&value, c.inputs[1].data, sizeof(T));
    const T *x = X.as<const T>();
    T *y = Y.as<T>();
    parallelFor(rows, std::max<int64_t>(1, 8192 / inner), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        T *dst = y + row * inner;
        const int64_t off = padRowSource(row, Y.shape, pads, X.shape, xs, mode);
        if (off < 0) { std::fill(dst, dst + inner, value); continue; }
        const int64_t n = X.shape[r - 1], before = pads[r - 1];
        const T *src = x + off;
        for (int64_t j = 0; j < inner; ++j) {
          int64_t s = padSource(j, before, n, mode);
          dst[j] = s < 0 ? value : src[s];
        }
      }
    });
  });
  return llvm::Error::success();
}

// pad_grad, the VJP of pad: dx = 0, then dx[src(o)] += dy[o] for every output position o whose
// value the forward copied from x (padSource), so an edge element collects its reflected or
// repeated copies. Parallel over the leading dims that have no padding (N, C of an image), whose
// blocks of dx are disjoint; serial within a block, in output order (deterministic).
llvm::Error verifyPadGrad(const KernelCall &c) {
  const TensorRef &DY = c.inputs[0], &DX = c.outputs[0];
  if (DY.dtype != DX.dtype) return kernelError("dy and dx dtypes differ");
  if (!parsePadMode(c.attrString("mode", "constant"))) return kernelError("mode must be constant, reflect, edge or wrap");
  auto pads = c.attrInts("pads");
  const int64_t r = DX.rank();
  if (DY.rank() != r || static_cast<int64_t>(pads.size()) != 2 * r) return kernelError("pads needs 2 * rank entries");
  if (r > kMaxRank) return kernelError("rank exceeds 8");
  for (int64_t d = 0; d < r; ++d)
    if (DY.shape[d] != DX.shape[d] + pads[d] + pads[d + r])
      return kernelError("dy shape " + shapeToString(DY.shape) + " is not dx's " + shapeToString(DX.shape) +
                         " padded by the pads");
  return llvm::Error::success();
}

template <typename T> void padGrad(const KernelCall &c) {
  const TensorRef &DY = c.inputs[0], &DX = c.outputs[0];
  const PadMode mode = *parsePadMode(c.attrString("mode", "constant"));
  auto pads = c.attrInts("pads");
  const int64_t r = DX.rank();
  const T *dy = DY.as<const T>();
  T *dx = DX.as<T>();
  std::fill(dx, dx + DX.numel(), T(0));
  if (DY.numel() == 0 || DX.numel() == 0) return;
  if (r == 0) { dx[0] = dy[0]; return; }
  Shape xs = stridesOf(DX.shape);
  int64_t lead = 0, blocks = 1;  // leading unpadded dims: disjoint blocks of dx
  while (lead < r - 1 && pads[lead] == 0 && pads[lead + r] == 0) blocks *= DX.shape[lead++];
  const int64_t inner = DY.shape[r - 1], rows = DY.numel() / inner, rowsPerBlock = rows / blocks;
  parallelFor(blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t row = b * rowsPerBlock; row < e * rowsPerBlock; ++row) {
      const int64_t off = padRowSource(row, DY.shape, pads, DX.shape, xs, mode);
      if (off < 0) continue;
      const T *src = dy + row * inner;
      T *dst = dx + off;
      for (int64_t j = 0; j < inner; ++j) {
        int64_t s = padSource(j, pads[r - 1], DX.shape[r - 1], mode);
        if (s >= 0) dst[s] += src[j];
      }
    }
  });
}

llvm::Error runPadGrad(const KernelCall &c) {
  if (c.outputs[0].dtype == DType::F64) padGrad<double>(c);
  else padGrad<float>(c);
  return llvm::Error::success();
}

// ---------------------------------------------------------------- matmul f64
llvm::Error verifyMatmulF64(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  for (const TensorRef *t : {&A, &B})
    if (llvm::Error e = verifyDType(*t, DType::F64, "operand")) return e;
  if (A.rank() < 2 || B.rank() < 2 || A.shape[A.rank() - 1] != B.shape[B.rank() - 2])
    return kernelError("operands must be [..., M, K] and [..., K, N]");
  Shape batch;
  if (!broadcastShapes(llvm::ArrayRef<int64_t>(A.shape).drop_back(2), llvm::ArrayRef<int64_t>(B.shape).drop_back(2), batch))
    return kernelError("batch dimensions do not broadcast");
  batch.push_back(A.shape[A.rank() - 2]);
  batch.push_back(B.shape[B.rank() - 1]);
  if (batch != Y.shape) return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(batch));
  return llvm::Error::success();
}

llvm::Error runMatmulF64(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  const int rank = static_cast<int>(Y.rank());
  const int64_t M = Y.shape[rank - 2], N = Y.shape[rank - 1], K = A.shape[A.rank() - 1];
  llvm::ArrayRef<int64_t> outBatch = llvm::ArrayRef<int64_t>(Y.shape).drop_back(2);
  const int64_t nBatch = numElements(outBatch);
  if (nBatch == 0 || M == 0 || N == 0) return llvm::Error::success();
  llvm::ArrayRef<int64_t> shapes[2] = {llvm::ArrayRef<int64_t>(A.shape).drop_back(2),
                                       llvm::ArrayRef<int64_t>(B.shape).drop_back(2)};
  Shape as = stridesOf(shapes[0]), bs = stridesOf(shapes[1]);
  const double *a = A.as<const double>(), *b = B.as<const double>();
  double *y = Y.as<double>();
  parallelFor(nBatch * M, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, N * K)), [&](int64_t lo, int64_t hi) {
    for (int64_t w = lo; w < hi; ++w) {
      const int64_t batch = w / M, i = w % M;
      int64_t ao = 0, bo = 0, rem = batch;  // broadcast batch offsets, right-aligned
      for (int64_t d = static_cast<int64_t>(outBatch.size()) - 1; d >= 0; --d) {
        int64_t idx = rem % outBatch[d];
        rem /= outBatch[d];
        int64_t da = d - (outBatch.size() - shapes[0].size()), db = d - (outBatch.size() - shapes[1].size());
        if (da >= 0 && shapes[0][da] != 1) ao += idx * as[da];
        if (db >= 0 && shapes[1][db] != 1) bo += idx * bs[db];
      }
      const double *arow = a + ao * M * K + i * K, *bm = b + bo * K * N;
      double *yrow = y + batch * M * N + i * N;
      std::fill(yrow, yrow + N, 0.0);
      for (int64_t kk = 0; kk < K; ++kk) {
        const double av = arow[kk];
        const double *brow = bm + kk * N;
        for (int64_t j = 0; j < N; ++j) yrow[j] += av * brow[j];
      }
    }
  });
  return llvm::Error::success();
}

KernelDesc desc(const char *op, DType dtype, int minIn, int maxIn, std::vector<AttrSpec> attrs,
                llvm::Error (*verify)(const KernelCall &), llvm::Error (*run)(const KernelCall &)) {
  KernelDesc d;
  d.op = op;
  d.dtype = dtype;
  d.minInputs = minIn;
  d.maxInputs = maxIn;
  d.attrs = std::move(attrs);
  d.verify = verify;
  d.run = run;
  return d;
}

}  // namespace

void registerIndexingKernels(KernelRegistry &r) {
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32,
                       DType::I16, DType::I8,  DType::U8,   DType::Bool, DType::U16, DType::U32,
                       DType::U64};
  for (DType d : all) {
    r.add(desc("gather_elements", d, 2, 2, {{"axis", AttrKind::Int}}, verifyGatherElements, runGatherElements));
    r.add(desc("gather_nd", d, 2, 2, {{"batch_dims", AttrKind::Int}}, verifyGatherND, runGatherND));
    r.add(desc("scatter_elements", d, 3, 3, {{"axis", AttrKind::Int}, {"reduction", AttrKind::String}},
               verifyScatterElements, runScatterElements));
    r.add(desc("scatter_nd", d, 3, 3, {{"reduction", AttrKind::String}}, verifyScatterND, runScatterND));
    r.add(desc("one_hot", d, 2, 2, {{"axis", AttrKind::Int}}, verifyOneHot, runOneHot));
    r.add(desc("pad", d, 1, 2, {{"pads", AttrKind::Ints}, {"mode", AttrKind::String}}, verifyPad, runPad));
  }
  for (DType d : kNumericDTypes) {
    KernelDesc t = desc("topk", d, 1, 1, {{"axis", AttrKind::Int}, {"largest", AttrKind::Int}, {"sorted", AttrKind::Int}},
                        verifyTopK, runTopK);
    t.minOutputs = t.maxOutputs = 2;
    t.workspace = topkWorkspace;
    r.add(t);
  }
  for (DType d : {DType::F32, DType::F64})
    r.add(desc("pad_grad", d, 1, 1, {{"pads", AttrKind::Ints}, {"mode", AttrKind::String}}, verifyPadGrad, runPadGrad));
  r.add(desc("matmul", DType::F64, 2, 2, {}, verifyMatmulF64, runMatmulF64));
}

}  // namespace colossal::runtime::cpu

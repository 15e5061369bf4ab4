//===- shape.cpp - Data-movement CPU kernels: transpose gather slice concat split expand trilu -===//
//
// All move elements without arithmetic, so they work on raw element bytes and are registered for
// every dtype (f32, i64 and bool among them). Semantics: docs/plan.md / ONNX Transpose, Gather,
// Slice (normalized starts and steps), Concat, Split, Expand, Trilu.
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"

#include <cstring>

namespace colossal::runtime::cpu {
namespace {

/// Calls f(T{}) with an unsigned type of `size` bytes.
template <typename F> void withElement(size_t size, F &&f) {
  switch (size) {
  case 1: f(uint8_t{}); break;
  case 2: f(uint16_t{}); break;
  case 4: f(uint32_t{}); break;
  default: f(uint64_t{}); break;
  }
}

llvm::Error verifySameDType(const KernelCall &c) {
  for (const TensorRef &t : c.inputs)
    if (t.dtype != c.outputs[0].dtype)
      return kernelError("operand dtype " + dtypeName(t.dtype).str() + " differs from output " +
                         dtypeName(c.outputs[0].dtype).str());
  for (const TensorRef &t : c.outputs)
    if (t.dtype != c.outputs[0].dtype) return kernelError("outputs have different dtypes");
  return llvm::Error::success();
}

// ---------------------------------------------------------------- transpose
llvm::Error verifyTranspose(const KernelCall &c) {
  if (llvm::Error e = verifySameDType(c)) return e;
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  auto perm = c.attrInts("perm");
  if (static_cast<int64_t>(perm.size()) != X.rank() || X.rank() != Y.rank())
    return kernelError("perm has " + llvm::Twine(perm.size()) + " entries for rank " + llvm::Twine(X.rank()));
  llvm::SmallVector<bool, 8> seen(X.rank(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= X.rank() || seen[perm[i]]) return kernelError("perm is not a permutation");
    seen[perm[i]] = true;
    if (Y.shape[i] != X.shape[perm[i]])
      return kernelError("output shape " + shapeToString(Y.shape) + " does not match perm of " +
                         shapeToString(X.shape));
  }
  if (X.rank() > kMaxRank) return kernelError("rank exceeds 8");
  return llvm::Error::success();
}

llvm::Error runTranspose(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  auto perm = c.attrInts("perm");
  const size_t es = dtypeSize(X.dtype);
  if (Y.numel() == 0) return llvm::Error::success();
  // Input strides seen from output dims, size-1 dims dropped, contiguous runs merged.
  int64_t xstride[kMaxRank], dims[kMaxRank], strides[kMaxRank];
  int64_t s = 1;
  for (int64_t i = X.rank() - 1; i >= 0; --i) { xstride[i] = s; s *= X.shape[i]; }
  int rank = 0;
  for (int64_t i = 0; i < Y.rank(); ++i) {
    if (Y.shape[i] == 1) continue;
    int64_t st = xstride[perm[i]];
    if (rank && strides[rank - 1] == st * Y.shape[i]) {
      dims[rank - 1] *= Y.shape[i];
      strides[rank - 1] = st;
    } else {
      dims[rank] = Y.shape[i];
      strides[rank] = st;
      ++rank;
    }
  }
  if (rank == 0) { dims[0] = 1; strides[0] = 1; rank = 1; }
  const int64_t inner = dims[rank - 1], innerStride = strides[rank - 1];
  const int64_t rows = Y.numel() / inner;
  const char *x = static_cast<const char *>(X.data);
  char *y = static_cast<char *>(Y.data);
  withElement(es, [&](auto tag) {
    using T = decltype(tag);
    parallelFor(rows, std::max<int64_t>(1, 8192 / inner), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t off = 0, rem = r;
        for (int d = rank - 2; d >= 0; --d) {
          off += (rem % dims[d]) * strides[d];
          rem /= dims[d];
        }
        const T *src = reinterpret_cast<const T *>(x) + off;
        T *dst = reinterpret_cast<T *>(y) + r * inner;
        if (innerStride == 1) std::memcpy(dst, src, inner * sizeof(T));
        else
          for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * innerStride];
      }
    });
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- gather
llvm::Error verifyGather(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &Y = c.outputs[0];
  if (X.dtype != Y.dtype) return kernelError("data and output dtypes differ");
  if (I.dtype != DType::I64 && I.dtype != DType::I32)
    return kernelError("indices must be i64 or i32, got " + dtypeName(I.dtype));
  int64_t axis = c.attrInt("axis", 0);
  if (axis < 0 || axis >= X.rank())
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(X.rank()));
  Shape want(X.shape.begin(), X.shape.begin() + axis);
  want.append(I.shape.begin(), I.shape.end());
  want.append(X.shape.begin() + axis + 1, X.shape.end());
  if (want != Y.shape)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  return llvm::Error::success();
}

template <typename Idx> llvm::Error gatherImpl(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &I = c.inputs[1], &Y = c.outputs[0];
  int64_t outer, axisDim, inner;
  splitAxis(X.shape, c.attrInt("axis", 0), outer, axisDim, inner);
  const int64_t n = I.numel();
  const Idx *idx = I.as<const Idx>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = idx[i];
    if (v < -axisDim || v >= axisDim)
      return kernelError("index " + llvm::Twine(v) + " at position " + llvm::Twine(i) +
                         " is out of range for axis of size " + llvm::Twine(axisDim));
  }
  const size_t rowBytes = inner * dtypeSize(X.dtype);
  const char *x = static_cast<const char *>(X.data);
  char *y = static_cast<char *>(Y.data);
  parallelFor(outer * n, std::max<int64_t>(1, (1 << 16) / std::max<size_t>(rowBytes, 1)), [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      int64_t o = w / n, i = w % n, v = idx[i];
      if (v < 0) v += axisDim;
      std::memcpy(y + w * rowBytes, x + (o * axisDim + v) * rowBytes, rowBytes);
    }
  });
  return llvm::Error::success();
}

llvm::Error runGather(const KernelCall &c) {
  return c.inputs[1].dtype == DType::I64 ? gatherImpl<int64_t>(c) : gatherImpl<int32_t>(c);
}

// ---------------------------------------------------------------- slice
llvm::Error verifySlice(const KernelCall &c) {
  if (llvm::Error e = verifySameDType(c)) return e;
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  auto starts = c.attrInts("starts"), steps = c.attrInts("steps");
  if (static_cast<int64_t>(starts.size()) != X.rank() || static_cast<int64_t>(steps.size()) != X.rank() ||
      Y.rank() != X.rank())
    return kernelError("starts and steps need one entry per dim of rank " + llvm::Twine(X.rank()));
  for (int64_t d = 0; d < X.rank(); ++d) {
    if (steps[d] == 0) return kernelError("step 0 in dim " + llvm::Twine(d));
    if (Y.shape[d] == 0) continue;
    int64_t last = starts[d] + (Y.shape[d] - 1) * steps[d];
    if (starts[d] < 0 || starts[d] >= X.shape[d] || last < 0 || last >= X.shape[d])
      return kernelError("dim " + llvm::Twine(d) + ": start " + llvm::Twine(starts[d]) + ", step " +
                         llvm::Twine(steps[d]) + ", count " + llvm::Twine(Y.shape[d]) +
                         " leave the input's size " + llvm::Twine(X.shape[d]));
  }
  if (X.rank() > kMaxRank) return kernelError("rank exceeds 8");
  return llvm::Error::success();
}

llvm::Error runSlice(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (Y.numel() == 0) return llvm::Error::success();
  auto starts = c.attrInts("starts"), steps = c.attrInts("steps");
  const int rank = static_cast<int>(X.rank());
  if (rank == 0) {
    std::memcpy(Y.data, X.data, Y.bytes());
    return llvm::Error::success();
  }
  int64_t xstride[kMaxRank];
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) { xstride[d] = s; s *= X.shape[d]; }
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) base += starts[d] * xstride[d];
  const int64_t inner = Y.shape[rank - 1], innerStep = steps[rank - 1];
  const int64_t rows = Y.numel() / inner;
  withElement(dtypeSize(X.dtype), [&](auto tag) {
    using T = decltype(tag);
    const T *x = X.as<const T>();
    T *y = Y.as<T>();
    parallelFor(rows, std::max<int64_t>(1, 8192 / inner), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t off = base, rem = r;
        for (int d = rank - 2; d >= 0; --d) {
          off += (rem % Y.shape[d]) * steps[d] * xstride[d];
          rem /= Y.shape[d];
        }
        if (innerStep == 1) std::memcpy(y + r * inner, x + off, inner * sizeof(T));
        else
          for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = x[off + j * innerStep];
      }
    });
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- concat / split
/// Checks that `parts` stacked along `axis` make `whole`.
llvm::Error verifyPieces(llvm::ArrayRef<TensorRef> parts, const TensorRef &whole, int64_t axis) {
  if (axis < 0 || axis >= whole.rank())
    return kernelError("axis " + llvm::Twine(axis) + " out of range for rank " + llvm::Twine(whole.rank()));
  int64_t total = 0;
  for (const TensorRef &p : parts) {
    if (p.rank() != whole.rank()) return kernelError("operands have different ranks");
    for (int64_t d = 0; d < whole.rank(); ++d)
      if (d != axis && p.shape[d] != whole.shape[d])
        return kernelError("shape " + shapeToString(p.shape) + " differs from " + shapeToString(whole.shape) +
                           " outside axis " + llvm::Twine(axis));
    total += p.shape[axis];
  }
  if (total != whole.shape[axis])
    return kernelError("pieces add up to " + llvm::Twine(total) + " along axis " + llvm::Twine(axis) +
                       ", the whole has " + llvm::Twine(whole.shape[axis]));
  return llvm::Error::success();
}

llvm::Error verifyConcat(const KernelCall &c) {
  if (llvm::Error e = verifySameDType(c)) return e;
  return verifyPieces(c.inputs, c.outputs[0], c.attrInt("axis", 0));
}
llvm::Error verifySplit(const KernelCall &c) {
  if (llvm::Error e = verifySameDType(c)) return e;
  return verifyPieces(c.outputs, c.inputs[0], c.attrInt("axis", 0));
}

/// Copies between `whole` and its pieces along `axis`; toWhole selects concat or split.
void movePieces(llvm::ArrayRef<TensorRef> parts, const TensorRef &whole, int64_t axis, bool toWhole) {
  int64_t outer, axisDim, inner;
  splitAxis(whole.shape, axis, outer, axisDim, inner);
  const size_t es = dtypeSize(whole.dtype);
  const size_t wholeRow = axisDim * inner * es;
  parallelFor(outer, std::max<int64_t>(1, (1 << 16) / std::max<size_t>(wholeRow, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      size_t at = 0;
      for (const TensorRef &p : parts) {
        size_t bytes = p.shape[axis] * inner * es;
        char *w = static_cast<char *>(whole.data) + o * wholeRow + at;
        char *pp = static_cast<char *>(p.data) + o * bytes;
        if (toWhole) std::memcpy(w, pp, bytes);
        else std::memcpy(pp, w, bytes);
        at += bytes;
      }
    }
  });
}

llvm::Error runConcat(const KernelCall &c) {
  movePieces(c.inputs, c.outputs[0], c.attrInt("axis", 0), true);
  return llvm::Error::success();
}
llvm::Error runSplit(const KernelCall &c) {
  movePieces(c.outputs, c.inputs[0], c.attrInt("axis", 0), false);
  return llvm::Error::success();
}

// ---------------------------------------------------------------- expand
llvm::Error verifyExpand(const KernelCall &c) {
  if (llvm::Error e = verifySameDType(c)) return e;
  return verifyStretchesTo(c.inputs[0], c.outputs[0].shape);
}

llvm::Error runExpand(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  llvm::ArrayRef<int64_t> shapes[1] = {X.shape};
  BroadcastLayout l = makeBroadcastLayout(Y.shape, shapes);
  withElement(dtypeSize(X.dtype), [&](auto tag) {
    using T = decltype(tag);
    const T *x = X.as<const T>();
    T *y = Y.as<T>();
    forEachBroadcastRow(l, [&](int64_t yo, const int64_t *offs, int64_t n, const int64_t *st) {
      if (st[0]) std::memcpy(y + yo, x + offs[0], n * sizeof(T));
      else std::fill(y + yo, y + yo + n, x[offs[0]]);
    });
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- trilu
llvm::Error verifyTrilu(const KernelCall &c) {
  if (llvm::Error e = verifySameDType(c)) return e;
  if (c.inputs[0].rank() < 2) return kernelError("input must have rank >= 2");
  return verifySameShape(c.inputs[0], c.outputs[0], "input and output");
}

llvm::Error runTrilu(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  const bool upper = c.attrInt("upper", 1) != 0;
  const int64_t k = c.attrInt("k", 0);
  const int64_t N = X.shape[X.rank() - 2], M = X.shape[X.rank() - 1];
  const int64_t rows = X.numel() / std::max<int64_t>(M, 1);
  if (X.numel() == 0) return llvm::Error::success();
  withElement(dtypeSize(X.dtype), [&](auto tag) {
    using T = decltype(tag);
    const T *x = X.as<const T>();
    T *y = Y.as<T>();
    parallelFor(rows, std::max<int64_t>(1, 8192 / M), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t i = r % N;
        for (int64_t j = 0; j < M; ++j) {
          bool keep = upper ? (j - i >= k) : (j - i <= k);
          y[r * M + j] = keep ? x[r * M + j] : T(0);
        }
      }
    });
  });
  return llvm::Error::success();
}

void add(KernelRegistry &r, const char *op, int minIn, int maxIn, int minOut, int maxOut,
         std::vector<AttrSpec> attrs, llvm::Error (*verify)(const KernelCall &),
         llvm::Error (*run)(const KernelCall &)) {
  for (int v = 1; v <= kLastDType; ++v) {
    KernelDesc d;
    d.op = op;
    d.dtype = static_cast<DType>(v);
    d.minInputs = minIn;
    d.maxInputs = maxIn;
    d.minOutputs = minOut;
    d.maxOutputs = maxOut;
    d.attrs = attrs;
    d.verify = verify;
    d.run = run;
    r.add(d);
  }
}

}  // namespace

void registerShapeKernels(KernelRegistry &r) {
  add(r, "transpose", 1, 1, 1, 1, {{"perm", AttrKind::Ints}}, verifyTranspose, runTranspose);
  add(r, "gather", 2, 2, 1, 1, {{"axis", AttrKind::Int}}, verifyGather, runGather);
  add(r, "slice", 1, 1, 1, 1, {{"starts", AttrKind::Ints}, {"steps", AttrKind::Ints}}, verifySlice, runSlice);
  add(r, "concat", 1, -1, 1, 1, {{"axis", AttrKind::Int}}, verifyConcat, runConcat);
  add(r, "split", 1, 1, 1, -1, {{"axis", AttrKind::Int}}, verifySplit, runSplit);
  add(r, "expand", 1, 1, 1, 1, {}, verifyExpand, runExpand);
  add(r, "trilu", 1, 1, 1, 1, {{"upper", AttrKind::Int}, {"k", AttrKind::Int}}, verifyTrilu, runTrilu);
}

}  // namespace colossal::runtime::cpu

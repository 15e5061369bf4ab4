//===- CpuCommon.h - Shared helpers of the CPU kernels --------------------------*- C++ -*-===//
//
// Parallel loops (OpenMP), NumPy broadcasting, shape checks and error helpers used by every CPU
// kernel family. Internal to runtime/kernels/cpu.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_CPUCOMMON_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_CPUCOMMON_H

#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>
#include <omp.h>

namespace colossal::runtime::cpu {

constexpr int kMaxRank = 8;

inline llvm::Error kernelError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

/// Runs f(begin, end) over [0, n) split into contiguous ranges, one per OpenMP thread, when n is
/// larger than `grain` (the smallest range worth a thread); serially otherwise.
template <typename F> void parallelFor(int64_t n, int64_t grain, F &&f) {
  int threads = omp_get_max_threads();
  if (threads <= 1 || n <= grain || omp_in_parallel()) {
    if (n > 0) f(int64_t(0), n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) f(n * c / chunks, n * (c + 1) / chunks);
}

/// Runs f(item, thread) for every item in [0, n), spread over `threads` OpenMP threads with
/// dynamic scheduling (one item at a time); `thread` in [0, threads) indexes per-thread scratch.
/// With one thread (or inside a parallel region) a plain loop on thread 0: entering an OpenMP
/// region costs libgomp a pair of futex calls even for a team of one, which a decode step of
/// ~100 small kernels would pay every step.
template <typename F> void parallelItems(int64_t n, int threads, F &&f) {
  if (threads <= 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) f(i, 0);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) f(i, omp_get_thread_num());
}

/// NumPy broadcast of `a` and `b` (right-aligned; 1 stretches). False when incompatible.
bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b, Shape &out);

/// Checks that `inputs` broadcast to exactly `out`; the error names both shapes.
llvm::Error verifyBroadcastTo(llvm::ArrayRef<TensorRef> inputs, llvm::ArrayRef<int64_t> out);

/// Checks that `input` stretches to `out` (ONNX unidirectional broadcast: Expand, Gemm's c).
llvm::Error verifyStretchesTo(const TensorRef &input, llvm::ArrayRef<int64_t> out);

/// Checks rank == expected etc. with a message naming `what`.
llvm::Error verifySameShape(const TensorRef &a, const TensorRef &b, llvm::StringRef what);
llvm::Error verifyDType(const TensorRef &t, DType want, llvm::StringRef what);

/// Element strides of a broadcast: operands right-aligned against the output shape, stride 0 on
/// stretched dims, with size-1 dims dropped and adjacent dims merged where every operand is
/// contiguous across them. After this, the innermost stride of each operand is 0 or 1.
struct BroadcastLayout {
  int rank = 0;  // >= 1
  int numInputs = 0;
  int64_t dims[kMaxRank];
  int64_t strides[4][kMaxRank];
  int64_t numel = 1;

  /// Rows of the innermost dimension and its length.
  int64_t rows() const { return numel / dims[rank - 1]; }
  int64_t inner() const { return dims[rank - 1]; }
  /// Element offsets of each input at the start of row `row`.
  void rowOffsets(int64_t row, int64_t *offsets) const {
    for (int k = 0; k < numInputs; ++k) offsets[k] = 0;
    for (int d = rank - 2; d >= 0; --d) {
      int64_t i = row % dims[d];
      row /= dims[d];
      for (int k = 0; k < numInputs; ++k) offsets[k] += i * strides[k][d];
    }
  }
};
BroadcastLayout makeBroadcastLayout(llvm::ArrayRef<int64_t> out,
                                    llvm::ArrayRef<llvm::ArrayRef<int64_t>> inputs);

/// Runs rowFn(outOffset, inOffsets, n, innerStrides) over the whole broadcast, in parallel over rows
/// (or over chunks of the single row when the layout collapsed to one dimension).
template <typename RowFn> void forEachBroadcastRow(const BroadcastLayout &l, RowFn &&rowFn) {
  if (l.numel == 0) return;
  int64_t inner = l.inner();
  int64_t innerStrides[4];
  for (int k = 0; k < l.numInputs; ++k) innerStrides[k] = l.strides[k][l.rank - 1];
  constexpr int64_t kGrainElems = 1 << 15;
  if (l.rank == 1) {
    parallelFor(inner, kGrainElems, [&](int64_t b, int64_t e) {
      int64_t offs[4];
      for (int k = 0; k < l.numInputs; ++k) offs[k] = b * innerStrides[k];
      rowFn(b, offs, e - b, innerStrides);
    });
    return;
  }
  parallelFor(l.rows(), std::max<int64_t>(1, kGrainElems / std::max<int64_t>(inner, 1)),
              [&](int64_t b, int64_t e) {
                int64_t offs[4];
                for (int64_t r = b; r < e; ++r) {
                  l.rowOffsets(r, offs);
                  rowFn(r * inner, offs, inner, innerStrides);
                }
              });
}

/// Splits `shape` around `axis` into (outer, axis size, inner) element counts.
inline void splitAxis(llvm::ArrayRef<int64_t> shape, int64_t axis, int64_t &outer, int64_t &mid,
                      int64_t &inner) {
  outer = 1;
  inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  mid = shape[axis];
  for (size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
}

/// Registration helpers of the kernel families (each in its own .cpp).
void registerElementwiseKernels(KernelRegistry &r);
void registerMathKernels(KernelRegistry &r);
void registerCastKernels(KernelRegistry &r);
void registerReduceKernels(KernelRegistry &r);
void registerNormKernels(KernelRegistry &r);
void registerSoftmaxKernels(KernelRegistry &r);
void registerMatmulKernels(KernelRegistry &r);
void registerAttentionKernels(KernelRegistry &r);
void registerPagedAttentionKernels(KernelRegistry &r);  // paged_attention.cpp (serving's KV cache)
void registerShapeKernels(KernelRegistry &r);
void registerNNKernels(KernelRegistry &r);
void registerReduceKindKernels(KernelRegistry &r);  // reduce_kinds.cpp
void registerIndexingKernels(KernelRegistry &r);    // indexing.cpp
void registerMiscKernels(KernelRegistry &r);
void registerOptimKernels(KernelRegistry &r);         // optim.cpp
void registerCrossEntropyKernels(KernelRegistry &r);  // cross_entropy.cpp

/// Reduction layout: merges `shape` into alternating groups of kept and reduced dims (size-1 dims
/// dropped), so a reduction over sorted `axes` walks at most a few strided loops. Returns the
/// number of elements reduced into each output element.
inline int64_t groupReduceDims(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> axes,
                               llvm::SmallVectorImpl<int64_t> &gdims,
                               llvm::SmallVectorImpl<bool> &greduced) {
  int64_t count = 1;
  for (int64_t d = 0, k = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    bool reduced = k < static_cast<int64_t>(axes.size()) && axes[k] == d;
    if (reduced) { ++k; count *= shape[d]; }
    if (shape[d] == 1) continue;
    if (!gdims.empty() && greduced.back() == reduced) gdims.back() *= shape[d];
    else { gdims.push_back(shape[d]); greduced.push_back(reduced); }
  }
  return count;
}

}  // namespace colossal::runtime::cpu

#endif

//===- CpuCommon.cpp - Broadcasting and checks shared by CPU kernels -------------------------===//
#include "CpuCommon.h"

namespace colossal::runtime {

namespace cpu {
// Training (backward) kernel families; declared here rather than in CpuCommon.h, which every
// kernel includes.
void registerGradKernels(KernelRegistry &r);           // grad.cpp
void registerAttentionGradKernels(KernelRegistry &r);  // attention_grad.cpp
}  // namespace cpu
void registerCollectiveKernels(KernelRegistry &r);      // runtime/comm/Collectives.cpp

void registerCpuKernels(KernelRegistry &r) {
  cpu::registerElementwiseKernels(r);
  cpu::registerMathKernels(r);
  cpu::registerCastKernels(r);
  cpu::registerReduceKernels(r);
  cpu::registerNormKernels(r);
  cpu::registerSoftmaxKernels(r);
  cpu::registerMatmulKernels(r);
  cpu::registerAttentionKernels(r);
  cpu::registerPagedAttentionKernels(r);
  cpu::registerShapeKernels(r);
  cpu::registerNNKernels(r);
  cpu::registerReduceKindKernels(r);
  cpu::registerIndexingKernels(r);
  cpu::registerMiscKernels(r);
  cpu::registerOptimKernels(r);
  cpu::registerCrossEntropyKernels(r);
  cpu::registerGradKernels(r);
  cpu::registerAttentionGradKernels(r);
  registerCollectiveKernels(r);
}

namespace cpu {

bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b, Shape &out) {
  size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

llvm::Error verifyBroadcastTo(llvm::ArrayRef<TensorRef> inputs, llvm::ArrayRef<int64_t> out) {
  Shape acc;
  std::string shapes;
  for (const TensorRef &t : inputs) {
    shapes += (shapes.empty() ? "" : " and ") + shapeToString(t.shape);
    Shape next;
    if (!broadcastShapes(acc, t.shape, next))
      return kernelError("input shapes " + shapes + " do not broadcast");
    acc = next;
  }
  if (llvm::ArrayRef<int64_t>(acc) != out)
    return kernelError("input shapes " + shapes + " broadcast to " + shapeToString(acc) +
                       ", but the output has shape " + shapeToString(out));
  if (out.size() > kMaxRank) return kernelError("rank " + llvm::Twine(out.size()) + " exceeds 8");
  return llvm::Error::success();
}

llvm::Error verifyStretchesTo(const TensorRef &input, llvm::ArrayRef<int64_t> out) {
  Shape bc;
  if (!broadcastShapes(input.shape, out, bc) || llvm::ArrayRef<int64_t>(bc) != out)
    return kernelError("shape " + shapeToString(input.shape) + " does not broadcast to " + shapeToString(out));
  if (out.size() > kMaxRank) return kernelError("rank " + llvm::Twine(out.size()) + " exceeds 8");
  return llvm::Error::success();
}

llvm::Error verifySameShape(const TensorRef &a, const TensorRef &b, llvm::StringRef what) {
  if (a.shape != b.shape)
    return kernelError(what + ": shapes " + shapeToString(a.shape) + " and " + shapeToString(b.shape) +
                       " differ");
  return llvm::Error::success();
}

llvm::Error verifyDType(const TensorRef &t, DType want, llvm::StringRef what) {
  if (t.dtype != want)
    return kernelError(what + " must be " + dtypeName(want) + ", got " + dtypeName(t.dtype));
  return llvm::Error::success();
}

BroadcastLayout makeBroadcastLayout(llvm::ArrayRef<int64_t> out,
                                    llvm::ArrayRef<llvm::ArrayRef<int64_t>> inputs) {
  BroadcastLayout l;
  l.numInputs = static_cast<int>(inputs.size());
  // Full-rank strides per operand, then drop size-1 output dims.
  int64_t dims[kMaxRank], strides[4][kMaxRank];
  int rank = 0;
  int outRank = static_cast<int>(out.size());
  for (int d = 0; d < outRank; ++d) {
    if (out[d] == 1) continue;
    dims[rank] = out[d];
    for (int k = 0; k < l.numInputs; ++k) {
      llvm::ArrayRef<int64_t> s = inputs[k];
      int id = d - (outRank - static_cast<int>(s.size()));
      int64_t stride = 0;
      if (id >= 0 && s[id] != 1) {
        stride = 1;
        for (size_t j = id + 1; j < s.size(); ++j) stride *= s[j];
      }
      strides[k][rank] = stride;
    }
    ++rank;
  }
  if (rank == 0) {
    l.rank = 1;
    l.dims[0] = 1;
    for (int k = 0; k < l.numInputs; ++k) l.strides[k][0] = 1;
    l.numel = 1;
    return l;
  }
  // Merge dim d into the previous kept dim when every operand is contiguous across them.
  l.rank = 0;
  for (int d = 0; d < rank; ++d) {
    if (l.rank > 0) {
      bool mergeable = true;
      for (int k = 0; k < l.numInputs; ++k)
        if (l.strides[k][l.rank - 1] != strides[k][d] * dims[d]) mergeable = false;
      if (mergeable) {
        l.dims[l.rank - 1] *= dims[d];
        for (int k = 0; k < l.numInputs; ++k) l.strides[k][l.rank - 1] = strides[k][d];
        continue;
      }
    }
    l.dims[l.rank] = dims[d];
    for (int k = 0; k < l.numInputs; ++k) l.strides[k][l.rank] = strides[k][d];
    ++l.rank;
  }
  l.numel = 1;
  for (int d = 0; d < l.rank; ++d) l.numel *= l.dims[d];
  return l;
}

}  // namespace cpu
}  // namespace colossal::runtime

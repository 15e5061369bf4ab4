//===- CostModel.cpp - sizes and FLOPs of colossal ops (CostModel.h) ---------------===//
#include "passes/Memory/CostModel.h"
#include "dialects/Colossal/ColossalOps.h"

#include "mlir/IR/BuiltinTypes.h"

#include <algorithm>

using namespace mlir;

namespace colossal {

uint64_t numElements(Type type) {
  auto t = llvm::dyn_cast<RankedTensorType>(type);
  return t && t.hasStaticShape() ? static_cast<uint64_t>(t.getNumElements()) : 0;
}

uint64_t numBytes(Type type) {
  auto t = llvm::dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape())
    return 0;
  return numElements(t) * std::max<uint64_t>(1, (t.getElementTypeBitWidth() + 7) / 8);
}

uint64_t opFlops(Operation *op) {
  uint64_t out = 0;
  for (Value r : op->getResults())
    out += numElements(r.getType());
  auto shape = [&](unsigned i) { return llvm::cast<RankedTensorType>(op->getOperand(i).getType()).getShape(); };
  if (llvm::isa<MatMulOp, LinearOp>(op))
    return 2 * out * static_cast<uint64_t>(shape(0).back());
  if (auto gemm = llvm::dyn_cast<GemmOp>(op))
    return 2 * out * static_cast<uint64_t>(gemm.getTransA() ? shape(0)[0] : shape(0)[1]);
  if (auto attn = llvm::dyn_cast<AttentionOp>(op)) {
    uint64_t flops = 4 * numElements(op->getOperand(0).getType()) *
                     static_cast<uint64_t>(shape(1)[shape(1).size() - 2]);
    return attn.getCausal() ? flops / 2 : flops;
  }
  if (llvm::isa<ConvOp>(op)) {
    uint64_t perOutput = 1;
    for (int64_t d : shape(1).drop_front())
      perOutput *= static_cast<uint64_t>(d);
    return 2 * out * perOutput;
  }
  return out;
}

} // namespace colossal

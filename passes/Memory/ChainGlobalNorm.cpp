//===- ChainGlobalNorm.cpp - colossal-chain-global-norm: one gradient per norm op ----------===//
//
// Passes.td "ChainGlobalNorm"; docs/training.md "Offload". `global_norm g0, ..., gN` reads every
// gradient in one instruction, so with offloaded gradients all of them would have to be resident
// at once. The chain `s0 = global_norm{partial} g0; s1 = global_norm{partial} s0, g1; ...;
// n = global_norm s(N-1), gN` reads one gradient per instruction and adds the same squares in the
// same order in f64 (the kernel continues the running sum), so `n` is bit-equal.
//===----------------------------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace colossal {
#define GEN_PASS_DEF_CHAINGLOBALNORM
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;

namespace colossal {
namespace {

struct ChainGlobalNormPass : impl::ChainGlobalNormBase<ChainGlobalNormPass> {
  void runOnOperation() override {
    SmallVector<GlobalNormOp> norms;
    getOperation().walk([&](GlobalNormOp op) {
      if (!op.getPartial() && op.getGrads().size() > 1 &&
          !llvm::cast<RankedTensorType>(op.getGrads().front().getType()).getElementType().isF64())
        norms.push_back(op);
    });
    for (GlobalNormOp op : norms) {
      OpBuilder b(op);
      auto f64 = RankedTensorType::get({}, b.getF64Type());
      Value running;
      auto grads = op.getGrads();
      for (size_t k = 0; k + 1 < grads.size(); ++k) {
        SmallVector<Value> operands;
        if (running)
          operands.push_back(running);
        operands.push_back(grads[k]);
        running = GlobalNormOp::create(b, op.getLoc(), f64, operands, /*partial=*/true);
      }
      Value norm = GlobalNormOp::create(b, op.getLoc(), op.getType(), ValueRange{running, grads.back()},
                                        /*partial=*/false);
      op.replaceAllUsesWith(norm);
      op.erase();
    }
  }
};

} // namespace
} // namespace colossal

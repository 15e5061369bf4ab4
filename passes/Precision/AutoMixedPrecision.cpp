//===- AutoMixedPrecision.cpp - contractions in bf16 with f32 accumulation ------------------===//
//
// torch.autocast's split for bf16, as a rewrite of the forward programs before autodiff: the
// contractions (matmul, gemm, conv) and the fused attention read bf16 copies of their f32 operands and
// keep an f32 result (products exact in f32, sums in f32); everything else (softmax, norms,
// losses, reductions, elementwise) stays f32. Parameters stay f32 arguments: each use in a contraction
// reads a `colossal.cast` to bf16 of it, so the optimizer updates f32 master weights and its state
// stays f32. Because the pass runs before colossal-autodiff, the VJPs of the contractions read
// the bf16 copies (the activations saved for backward are bf16), their products run in bf16 too,
// and the casts' VJPs turn the gradients back into f32 before they reach the accumulators.
//
//===----------------------------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "dialects/Colossal/Programs.h"

#include "llvm/ADT/STLExtras.h"

namespace colossal {
#define GEN_PASS_DEF_AUTOMIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;

namespace {

/// Which operands of an op the pass lowers (rules as data: one row per op kind). An op that is
/// not listed stays in f32.
struct LowPrecisionRule {
  llvm::StringLiteral op;
  llvm::ArrayRef<unsigned> operands;
};
constexpr unsigned kBothFactors[] = {0, 1};
constexpr unsigned kQKV[] = {0, 1, 2};
constexpr LowPrecisionRule kRules[] = {
    {MatMulOp::getOperationName(), kBothFactors}, // lhs, rhs
    {GemmOp::getOperationName(), kBothFactors},   // a, b; the addend c stays f32
    {AttentionOp::getOperationName(), kQKV},      // q, k, v; the mask stays as it is
    {ConvOp::getOperationName(), kBothFactors},   // x, w; the bias stays f32
};

const LowPrecisionRule *ruleFor(Operation *op) {
  for (const LowPrecisionRule &r : kRules)
    if (op->getName().getStringRef() == r.op)
      return &r;
  return nullptr;
}

bool isF32Tensor(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

struct AutoMixedPrecisionPass
    : colossal::impl::AutoMixedPrecisionBase<AutoMixedPrecisionPass> {
  using AutoMixedPrecisionBase::AutoMixedPrecisionBase;

  void runOnOperation() override {
    func::FuncOp f = getOperation();
    if (compute != "bf16" && compute != "fp16") {
      f.emitError() << "colossal-auto-mixed-precision: compute=" << compute << " is not bf16 or fp16";
      return signalPassFailure();
    }
    // The optimizer updates f32 master weights with f32 state: never lowered.
    if (programRole(f) == ProgramRole::OptimizerStep)
      return;
    Type low = compute == "fp16" ? Type(Float16Type::get(&getContext()))
                                 : Type(BFloat16Type::get(&getContext()));
    f.walk([&](Operation *op) {
      const LowPrecisionRule *rule = ruleFor(op);
      if (!rule || op->getNumResults() != 1 || !isF32Tensor(op->getResult(0)))
        return;
      // Every lowered operand must be f32 (an op already in another type is left as it is).
      if (!llvm::all_of(rule->operands, [&](unsigned i) { return isF32Tensor(op->getOperand(i)); }))
        return;
      OpBuilder b(op);
      for (unsigned i : rule->operands) {
        Value x = op->getOperand(i);
        auto t = llvm::cast<RankedTensorType>(x.getType());
        // The cast carries the consumer's location (its ONNX node name), so regexes over
        // consuming nodes (train.frozen, sharding hints) still see it.
        op->setOperand(i, CastOp::create(b, op->getLoc(), RankedTensorType::get(t.getShape(), low), x));
      }
    });
  }
};

} // namespace

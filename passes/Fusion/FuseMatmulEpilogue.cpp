//===- FuseMatmulEpilogue.cpp - fold bias, activation and residual into the matmul ---===//
//
// A linear layer as exporters write it is MatMul(x, W) then Add(·, b); GPT-style blocks follow
// it with GELU (the MLP's first projection) or with the residual Add (attention's output
// projection and the MLP's second). Each of those is a full pass over the activation tensor,
// reading and writing it from memory once the tensor outgrows the caches. This pass rewrites
//
//   matmul(x, w) → add(·, bias) → [gelu | relu] → [add(·, residual)]
//
// into one colossal.linear, whose kernel runs the GEMM and then the whole epilogue in one pass
// over its result (docs/kernels.md "Linear epilogue"). A link joins the chain only
// when nothing else reads the value before it (in training, gelu's input is read by its VJP, so
// only the bias and the residual fold there). Runs last in the pipeline, on the per-rank
// programs: tensor parallelism's row-parallel matmuls reach their bias only through an
// all-reduce, so they never match, and nothing after this pass differentiates or partitions.
//===----------------------------------------------------------------------===//
#include "passes/Fusion/Match.h"
#include "passes/Passes.h"

#include "dialects/Colossal/Programs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace colossal {
#define GEN_PASS_DEF_FUSEMATMULEPILOGUE
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::match;

namespace {

bool isF32Tensor(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32() && t.hasStaticShape();
}

/// The one op that reads `v`, when exactly one operand anywhere reads it.
Operation *soleUser(Value v) {
  if (!v.hasOneUse())
    return nullptr;
  return v.getUses().begin()->getOwner();
}

/// When `add` is t + other or other + t for t = `from` with add's result of t's type, returns
/// `other`; null otherwise.
Value otherAddend(AddOp add, Value from) {
  if (add.getType() != from.getType())
    return nullptr;
  if (add.getLhs() == from)
    return add.getRhs();
  if (add.getRhs() == from)
    return add.getLhs();
  return nullptr;
}

/// Whether `bias` has N f32 elements and only unit dims before the last ([N], [1, N], ...).
bool isBiasVector(Value bias, int64_t n) {
  auto t = llvm::dyn_cast<RankedTensorType>(bias.getType());
  if (!t || !t.hasStaticShape() || !t.getElementType().isF32() || t.getRank() == 0 || t.getShape().back() != n)
    return false;
  return llvm::all_of(t.getShape().drop_back(), [](int64_t d) { return d == 1; });
}

void fuse(MatMulOp mm) {
  Value x = mm.getLhs(), w = mm.getRhs(), t = mm.getResult();
  if (!isF32Tensor(x) || !isF32Tensor(w) || !isF32Tensor(t) ||
      llvm::cast<RankedTensorType>(w.getType()).getRank() != 2 || mm->hasAttr(kBatchInvariantAttr))
    return;
  auto biasAdd = llvm::dyn_cast_or_null<AddOp>(soleUser(t));
  if (!biasAdd)
    return;
  const int64_t n = llvm::cast<RankedTensorType>(t.getType()).getShape().back();
  Value bias = otherAddend(biasAdd, t);
  if (!bias || !isBiasVector(bias, n))
    return;
  SmallVector<Operation *> chain{biasAdd};  // the ops the linear replaces after the matmul
  StringRef activation = "none";
  if (Operation *user = soleUser(biasAdd.getResult())) {
    if (auto gelu = llvm::dyn_cast<GeluOp>(user)) {
      activation = gelu.getApproximate() == "tanh" ? "gelu_tanh" : "gelu";
      chain.push_back(gelu);
    } else if (llvm::isa<ReluOp>(user)) {
      activation = "relu";
      chain.push_back(user);
    }
  }
  Value residual;
  Value v = chain.back()->getResult(0);
  if (auto add = llvm::dyn_cast_or_null<AddOp>(soleUser(v)))
    if (Value r = otherAddend(add, v); r && r.getType() == v.getType()) {
      residual = r;
      chain.push_back(add);
    }
  Operation *last = chain.back();
  OpBuilder b(last);
  if (llvm::cast<RankedTensorType>(bias.getType()).getRank() != 1)
    bias = b.create<ReshapeOp>(biasAdd.getLoc(), RankedTensorType::get({n}, b.getF32Type()), bias);
  auto linear = b.create<LinearOp>(last->getLoc(), last->getResult(0).getType(), x, w, bias, residual,
                                   b.getStringAttr(activation));
  // What later stages read from the op it replaces (pipeline stage, names) stays.
  for (NamedAttribute a : last->getDiscardableAttrs())
    linear->setAttr(a.getName(), a.getValue());
  last->getResult(0).replaceAllUsesWith(linear.getResult());
  for (Operation *op : llvm::reverse(chain))
    op->erase();
  mm->erase();
}

struct FuseMatmulEpiloguePass : colossal::impl::FuseMatmulEpilogueBase<FuseMatmulEpiloguePass> {
  void runOnOperation() override {
    SmallVector<MatMulOp> matmuls;
    getOperation().walk([&](MatMulOp mm) { matmuls.push_back(mm); });
    for (MatMulOp mm : matmuls)
      fuse(mm);
  }
};

} // namespace

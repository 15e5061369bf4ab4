//===- Autodiff.cpp - reverse-mode differentiation over the colossal dialect ---------===//
//
// The driver behind buildGradients (Autodiff.h, docs/training.md "Autodiff"). Classic reverse
// accumulation (Griewank & Walther, "Evaluating Derivatives", ch. 3): the function body is a
// single block in topological order, so walking it backwards visits every op after all users of
// its results. The math lives in each op's VJPOpInterface::buildVJP next to the op's definition;
// this file only decides which ops to ask, in which order, and sums cotangents.
//===---------------------------------------------------------------------------------===//
#include "passes/Autodiff/Autodiff.h"

#include "dialects/Colossal/ColossalDialect.h"
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/VJP.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace colossal {

namespace {

bool isFloatTensor(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  return t && llvm::isa<FloatType>(t.getElementType());
}

/// The ONNX node an op came from: the first NameLoc in its location (fused ops carry a FusedLoc
/// of the nodes they replace).
std::string onnxNode(Location loc) {
  std::string name;
  loc->walk([&](Location l) {
    if (auto n = llvm::dyn_cast<NameLoc>(l)) {
      name = n.getName().str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return name;
}

/// Calls `vjp.buildVJP`. When it fails, its own diagnostics (why it does not cover this op)
/// become one error that also names the ONNX node (`where`): "autodiff: 'colossal.x' (ONNX node
/// 'n') <the VJP's reason>". The reason's notes are dropped (the VJPs attach none; MLIR's own
/// "see current operation" note comes with the new error).
LogicalResult buildVJPOrExplain(VJPOpInterface vjp, OpBuilder &b, ArrayRef<Value> resultGrads,
                                ArrayRef<bool> needed, SmallVectorImpl<Value> &operandGrads,
                                StringRef where) {
  Operation *op = vjp.getOperation();
  std::string reason;
  LogicalResult built = failure();
  {
    ScopedDiagnosticHandler capture(op->getContext(), [&](Diagnostic &d) {
      if (d.getSeverity() != DiagnosticSeverity::Error || !reason.empty())
        return failure(); // not ours to rewrite: pass it on
      reason = d.str();
      return success();
    });
    built = vjp.buildVJP(b, resultGrads, needed, operandGrads);
  }
  if (succeeded(built) && reason.empty())
    return success();
  // emitOpError's "'colossal.x' op " becomes the subject of the sentence.
  std::string subject = "'" + op->getName().getStringRef().str() + "'";
  StringRef why = reason;
  InFlightDiagnostic diag = op->emitError() << "autodiff: " << subject << where;
  if (why.consume_front(subject + " op "))
    diag << " " << why;
  else
    diag << " cannot be differentiated" << (why.empty() ? "" : ": ") << why;
  return failure();
}

} // namespace

FailureOr<SmallVector<Value>> buildGradients(func::FuncOp func, Value loss, Value seed,
                                             ArrayRef<Value> wrt) {
  Block &body = func.getBody().front();
  Operation *terminator = body.getTerminator();
  if (!isFloatTensor(loss))
    return emitError(loss.getLoc()) << "autodiff: the loss must be a float tensor, got "
                                    << loss.getType();
  if (seed.getType() != loss.getType())
    return emitError(seed.getLoc()) << "autodiff: the seed's type " << seed.getType()
                                    << " differs from the loss's " << loss.getType();

  // The ops of the forward body, in order (backward ops are appended before the terminator).
  SmallVector<Operation *> forwardOps;
  for (Operation &op : body.without_terminator())
    forwardOps.push_back(&op);

  // Forward sweep: float values that depend on some `wrt` entry.
  DenseSet<Value> varied;
  for (Value w : wrt)
    if (isFloatTensor(w))
      varied.insert(w);
  for (Operation *op : forwardOps) {
    if (!llvm::any_of(op->getOperands(), [&](Value v) { return varied.contains(v); }))
      continue;
    for (Value r : op->getResults())
      if (isFloatTensor(r))
        varied.insert(r);
  }
  // Backward sweep: values the loss depends on. `active` = varied and useful.
  DenseSet<Value> useful;
  useful.insert(loss);
  for (Operation *op : llvm::reverse(forwardOps)) {
    if (!llvm::any_of(op->getResults(), [&](Value r) { return useful.contains(r); }))
      continue;
    for (Value v : op->getOperands())
      useful.insert(v);
  }
  auto active = [&](Value v) { return varied.contains(v) && useful.contains(v); };

  OpBuilder b(terminator);
  DenseMap<Value, Value> grads;
  auto accumulate = [&](Value v, Value g) {
    auto [it, inserted] = grads.try_emplace(v, g);
    if (!inserted)
      it->second = AddOp::create(b, g.getLoc(), it->second, g);
  };
  if (active(loss))
    grads[loss] = seed;

  for (Operation *op : llvm::reverse(forwardOps)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      auto it = grads.find(r);
      resultGrads.push_back(it == grads.end() ? Value() : it->second);
      any |= it != grads.end();
    }
    if (!any)
      continue;
    SmallVector<bool> needed;
    bool anyNeeded = false;
    for (Value v : op->getOperands()) {
      needed.push_back(active(v));
      anyNeeded |= needed.back();
    }
    if (!anyNeeded)
      continue;
    auto vjp = llvm::dyn_cast<VJPOpInterface>(op);
    std::string node = onnxNode(op->getLoc());
    std::string where = node.empty() ? std::string() : " (ONNX node '" + node + "')";
    if (!vjp)
      return op->emitError() << "autodiff: '" << op->getName() << "'" << where
                             << " has no vector-Jacobian product (VJPOpInterface), but it lies on "
                                "a path from a parameter to the loss";
    SmallVector<Value> operandGrads(op->getNumOperands(), Value());
    // Pipeline parallelism: the VJP's ops (and the cotangent sums below) run on the op's stage.
    Operation *before = terminator->getPrevNode();
    if (failed(buildVJPOrExplain(vjp, b, resultGrads, needed, operandGrads, where)))
      return failure();
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      Value g = operandGrads[i];
      if (!needed[i] || !g)
        continue;
      if (g.getType() != v.getType())
        return op->emitError() << "autodiff: the VJP of '" << op->getName() << "'" << where
                               << " gave operand #" << i << " a cotangent of type " << g.getType()
                               << ", expected " << v.getType();
      accumulate(v, g);
    }
    if (Attribute stage = op->getAttr(kStageAttr))
      for (Operation *o = before ? before->getNextNode() : &body.front(); o != terminator;
           o = o->getNextNode())
        o->setAttr(kStageAttr, stage);
  }

  SmallVector<Value> result;
  for (Value w : wrt) {
    auto it = grads.find(w);
    if (it != grads.end())
      result.push_back(it->second);
    else
      result.push_back(splatConstant(b, w.getLoc(), llvm::cast<RankedTensorType>(w.getType()), 0.0));
  }
  return result;
}

} // namespace colossal

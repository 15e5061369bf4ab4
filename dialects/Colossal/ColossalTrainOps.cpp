//===- ColossalTrainOps.cpp - type inference, verifiers and VJP of the training ops ---===//
//
// cross_entropy, cross_entropy_grad, global_norm and the update ops (ColossalTrainOps.td). The
// ODS-generated definitions are emitted by ColossalOps.cpp with the rest of the dialect.
//===----------------------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace colossal;

// ColossalOps.h.
LogicalResult colossal::verifyStateOperand(Operation *op, Value v, StringRef what) {
  // A shard_view is this rank's rows of such an argument (ZeRO), written through in place.
  if (auto view = v.getDefiningOp<ShardViewOp>())
    v = view.getX();
  auto arg = llvm::dyn_cast<BlockArgument>(v);
  auto fn = arg ? llvm::dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp())
                : FunctionOpInterface();
  if (!fn || arg.getOwner() != &fn.getFunctionBody().front() ||
      (!fn.getArgAttr(arg.getArgNumber(), kParamAttr) &&
       !fn.getArgAttr(arg.getArgNumber(), kStateAttr)))
    return op->emitOpError() << "writes its operand '" << what
                             << "' in place, so it must be a function argument marked "
                             << kParamAttr << " or " << kStateAttr;
  return success();
}

namespace {

/// Checks logits [N, C] float32 and labels [N] int64, as cross_entropy and its gradient take them.
LogicalResult checkLogitsLabels(std::optional<Location> loc, RankedTensorType logits,
                                RankedTensorType labels) {
  if (logits.getRank() != 2 || !logits.getElementType().isF32())
    return emitOptionalError(loc, "cross_entropy needs logits [N, C] of f32, got ",
                             shapeStr(logits.getShape()), " of ", logits.getElementType());
  if (labels.getRank() != 1 || !labels.getElementType().isInteger(64) ||
      labels.getDimSize(0) != logits.getDimSize(0))
    return emitOptionalError(loc, "cross_entropy needs labels [", logits.getDimSize(0),
                             "] of i64 (one per logits row), got ", shapeStr(labels.getShape()),
                             " of ", labels.getElementType());
  return success();
}

bool isScalarOf(Type t, Type element) {
  auto rt = llvm::dyn_cast<RankedTensorType>(t);
  return rt && rt.getRank() == 0 && rt.getElementType() == element;
}


/// Shared checks of the optimizer updates: state operands of one float type, the scalar
/// `lr` f32 / `step` i64 / `grad_norm` f32 operands, non-negative hyperparameters.
LogicalResult verifyUpdate(Operation *op, ArrayRef<std::pair<Value, StringRef>> states, Value lr,
                           Value step, Value gradNorm, double weightDecay, double maxGradNorm) {
  Type type = states.front().first.getType();
  if (!llvm::isa<FloatType>(llvm::cast<RankedTensorType>(type).getElementType()))
    return op->emitOpError() << "updates float parameters, got " << type;
  for (auto [v, what] : states) {
    if (v.getType() != type)
      return op->emitOpError() << "operand '" << what << "' has type " << v.getType()
                               << ", expected the parameter's type " << type;
    if (failed(verifyStateOperand(op, v, what)))
      return failure();
  }
  MLIRContext *ctx = op->getContext();
  if (!isScalarOf(lr.getType(), Float32Type::get(ctx)) ||
      !isScalarOf(step.getType(), IntegerType::get(ctx, 64)) ||
      !isScalarOf(gradNorm.getType(), Float32Type::get(ctx)))
    return op->emitOpError() << "needs lr tensor<f32>, step tensor<i64> and grad_norm "
                                "tensor<f32>, got "
                             << lr.getType() << ", " << step.getType() << ", "
                             << gradNorm.getType();
  if (!(weightDecay >= 0))
    return op->emitOpError() << "weight_decay must be >= 0, got " << weightDecay;
  if (!(maxGradNorm >= 0))
    return op->emitOpError() << "max_grad_norm must be >= 0 (0: no clipping), got "
                             << maxGradNorm;
  return success();
}

LogicalResult verifyAdam(Operation *op, double beta1, double beta2, double eps) {
  // torch.optim.Adam(W) rejects the same values.
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return op->emitOpError() << "betas must be in [0, 1), got " << beta1 << ", " << beta2;
  if (!(eps >= 0))
    return op->emitOpError() << "eps must be >= 0, got " << eps;
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                               Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  if (failed(checkLogitsLabels(loc, rankedType(adaptor.getLogits()),
                               rankedType(adaptor.getLabels()))))
    return failure();
  inferred.push_back(RankedTensorType::get({}, Float32Type::get(ctx)));
  return success();
}

LogicalResult CrossEntropyOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                                       SmallVectorImpl<Value> &operandGrads) {
  // Only the logits get a gradient; the labels are integers.
  if (needed[0])
    operandGrads[0] = CrossEntropyGradOp::create(b, getLoc(), getLogits().getType(), getLogits(),
                                                 getLabels(), resultGrads[0], getIgnoreIndex());
  return success();
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   SmallVectorImpl<Type> &inferred) {
  auto logits = rankedType(adaptor.getLogits());
  if (failed(checkLogitsLabels(loc, logits, rankedType(adaptor.getLabels()))))
    return failure();
  if (!isScalarOf(adaptor.getDloss().getType(), Float32Type::get(ctx)))
    return emitOptionalError(loc, "cross_entropy_grad needs dloss tensor<f32>, got ",
                             adaptor.getDloss().getType());
  inferred.push_back(logits);
  return success();
}

//===----------------------------------------------------------------------===//
// global_norm
//===----------------------------------------------------------------------===//

LogicalResult GlobalNormOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto grads = adaptor.getGrads();
  const bool running = !grads.empty() && rankedType(grads.front()).getRank() == 0 &&
                       rankedType(grads.front()).getElementType().isF64();
  if (grads.size() < (running ? 2u : 1u))
    return emitOptionalError(loc, "global_norm needs at least one gradient");
  for (Value g : grads.drop_front(running ? 1 : 0))
    if (!llvm::isa<FloatType>(rankedType(g).getElementType()))
      return emitOptionalError(loc, "global_norm takes float tensors, got ", g.getType());
  inferred.push_back(RankedTensorType::get(
      {}, adaptor.getPartial() ? static_cast<Type>(Float64Type::get(ctx)) : Float32Type::get(ctx)));
  return success();
}

//===----------------------------------------------------------------------===//
// Update ops
//===----------------------------------------------------------------------===//

LogicalResult AccumulateGradOp::verify() {
  if (getAcc().getType() != getG().getType() ||
      !llvm::isa<FloatType>(getAcc().getType().getElementType()))
    return emitOpError() << "needs acc and g of one float type, got " << getAcc().getType()
                         << " and " << getG().getType();
  if (!(getScale().convertToDouble() > 0))
    return emitOpError() << "scale must be > 0, got " << getScale().convertToDouble();
  return verifyStateOperand(*this, getAcc(), "acc");
}

LogicalResult UpdateBufferOp::verify() {
  if (getBuf().getType() != getValue().getType() ||
      !llvm::isa<FloatType>(getBuf().getType().getElementType()))
    return emitOpError() << "needs buf and value of one float type, got " << getBuf().getType()
                         << " and " << getValue().getType();
  return verifyStateOperand(*this, getBuf(), "buf");
}

LogicalResult AdamWUpdateOp::verify() {
  if (failed(verifyUpdate(*this, {{getP(), "p"}, {getG(), "g"}, {getM(), "m"}, {getV(), "v"}},
                          getLr(), getStep(), getGradNorm(), getWeightDecay().convertToDouble(),
                          getMaxGradNorm().convertToDouble())))
    return failure();
  return verifyAdam(*this, getBeta1().convertToDouble(), getBeta2().convertToDouble(),
                    getEps().convertToDouble());
}

LogicalResult AdamUpdateOp::verify() {
  if (failed(verifyUpdate(*this, {{getP(), "p"}, {getG(), "g"}, {getM(), "m"}, {getV(), "v"}},
                          getLr(), getStep(), getGradNorm(), getWeightDecay().convertToDouble(),
                          getMaxGradNorm().convertToDouble())))
    return failure();
  return verifyAdam(*this, getBeta1().convertToDouble(), getBeta2().convertToDouble(),
                    getEps().convertToDouble());
}

LogicalResult SgdUpdateOp::verify() {
  SmallVector<std::pair<Value, StringRef>> states = {{getP(), "p"}, {getG(), "g"}};
  if (getBuf())
    states.push_back({getBuf(), "buf"});
  if (failed(verifyUpdate(*this, states, getLr(), getStep(), getGradNorm(),
                          getWeightDecay().convertToDouble(),
                          getMaxGradNorm().convertToDouble())))
    return failure();
  double momentum = getMomentum().convertToDouble(), dampening = getDampening().convertToDouble();
  if (!(momentum >= 0))
    return emitOpError() << "momentum must be >= 0, got " << momentum;
  if (bool(getBuf()) != (momentum != 0))
    return emitOpError() << "takes a momentum buffer exactly when momentum != 0 (momentum "
                         << momentum << ", " << (getBuf() ? "with" : "without") << " buffer)";
  if (getNesterov() && (momentum <= 0 || dampening != 0))
    return emitOpError() << "nesterov needs momentum > 0 and dampening 0 (as torch.optim.SGD)";
  return success();
}

//===- VJP.cpp - helpers for writing vector-Jacobian products ------------------------===//
#include "dialects/Colossal/VJP.h"

#include "dialects/Colossal/ColossalOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/SmallVector.h"

#include "dialects/Colossal/ColossalInterfaces.cpp.inc"

using namespace mlir;

namespace colossal {

Value reduceToShape(OpBuilder &b, Location loc, Value grad, RankedTensorType target) {
  auto gradType = llvm::cast<RankedTensorType>(grad.getType());
  if (gradType.getShape() == target.getShape())
    return grad;
  int64_t gRank = gradType.getRank(), tRank = target.getRank();
  int64_t lead = gRank - tRank;
  llvm::SmallVector<int64_t> axes;
  for (int64_t i = 0; i < gRank; ++i) {
    bool extra = i < lead;
    bool stretched = !extra && target.getDimSize(i - lead) == 1 && gradType.getDimSize(i) != 1;
    if (extra || stretched)
      axes.push_back(i);
  }
  Value reduced = grad;
  if (!axes.empty()) {
    llvm::SmallVector<int64_t> kept;
    for (int64_t i = 0; i < gRank; ++i)
      if (!llvm::is_contained(axes, i))
        kept.push_back(gradType.getDimSize(i));
    auto type = RankedTensorType::get(kept, gradType.getElementType());
    reduced = ReduceSumOp::create(b, loc, type, grad, b.getDenseI64ArrayAttr(axes),
                                  b.getBoolAttr(false));
  }
  if (llvm::cast<RankedTensorType>(reduced.getType()) == target)
    return reduced;
  return ReshapeOp::create(b, loc, target, reduced);
}

Value splatConstant(OpBuilder &b, Location loc, RankedTensorType type, double value) {
  Attribute element;
  if (llvm::isa<FloatType>(type.getElementType()))
    element = b.getFloatAttr(type.getElementType(), value);
  else
    element = b.getIntegerAttr(type.getElementType(), static_cast<int64_t>(value));
  return ConstantOp::create(b, loc, DenseElementsAttr::get(type, element));
}

Value scalarConstant(OpBuilder &b, Location loc, Type elementType, double value) {
  return splatConstant(b, loc, RankedTensorType::get({}, elementType), value);
}

Value unaryGrad(OpBuilder &b, Location loc, llvm::StringRef fn, Value x, Value dy,
                std::optional<double> alpha) {
  FloatAttr alphaAttr = alpha ? b.getF32FloatAttr(float(*alpha)) : FloatAttr();
  return UnaryGradOp::create(b, loc, dy.getType(), b.getStringAttr(fn), x, dy, alphaAttr);
}

} // namespace colossal

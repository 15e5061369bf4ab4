//===- ColossalGradOps.cpp - verifiers and type inference of the backward ops --------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace colossal;

namespace {

LogicalResult verifyAxisIn(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError("axis ") << axis << " out of range for rank " << rank;
  return success();
}

/// x: [R..., N...], scale: [N...] (N = dims [axis, rank)), dy: x's type.
LogicalResult verifyNormGrad(Operation *op, Value x, Value scale, Value dy, int64_t axis) {
  auto xt = rankedType(x);
  if (failed(verifyAxisIn(op, axis, xt.getRank())))
    return failure();
  if (rankedType(scale).getShape() != xt.getShape().drop_front(axis))
    return op->emitOpError("scale shape ") << shapeStr(rankedType(scale).getShape())
                                           << " must equal the normalized shape "
                                           << shapeStr(xt.getShape().drop_front(axis));
  if (dy.getType() != x.getType())
    return op->emitOpError("dy type ") << dy.getType() << " differs from x's " << x.getType();
  return success();
}

} // namespace

LogicalResult SoftmaxGradOp::verify() {
  return verifyAxisIn(*this, getAxis(), getY().getType().getRank());
}
LogicalResult LogSoftmaxGradOp::verify() {
  return verifyAxisIn(*this, getAxis(), getY().getType().getRank());
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                                Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  inferred.push_back(adaptor.getX().getType());
  inferred.push_back(adaptor.getScale().getType());
  inferred.push_back(adaptor.getScale().getType());
  return success();
}
LogicalResult LayerNormGradOp::verify() {
  return verifyNormGrad(*this, getX(), getScale(), getDy(), getAxis());
}

LogicalResult RmsNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                              Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  inferred.push_back(adaptor.getX().getType());
  inferred.push_back(adaptor.getScale().getType());
  return success();
}
LogicalResult RmsNormGradOp::verify() {
  return verifyNormGrad(*this, getX(), getScale(), getDy(), getAxis());
}

LogicalResult UnaryGradOp::verify() {
  if (!llvm::isa<FloatType>(getX().getType().getElementType()))
    return emitOpError("x must be a float tensor");
  int params = llvm::StringSwitch<int>(getFn())
                   .Cases({"relu", "sigmoid", "tanh", "exp", "log", "sqrt", "reciprocal"}, 0)
                   .Cases({"erf", "abs", "silu", "gelu", "gelu_tanh", "sin", "cos", "softplus"}, 0)
                   .Cases({"leaky_relu", "elu"}, 1)
                   .Default(-1);
  if (params < 0)
    return emitOpError("unknown fn '") << getFn() << "'";
  if (bool(getAlpha()) != (params == 1))
    return emitOpError("fn '") << getFn() << "' " << (params ? "takes" : "takes no") << " alpha";
  return success();
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                                Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  inferred.push_back(adaptor.getQ().getType());
  inferred.push_back(adaptor.getK().getType());
  inferred.push_back(adaptor.getV().getType());
  return success();
}
LogicalResult AttentionGradOp::verify() {
  auto q = getQ().getType(), k = getK().getType(), v = getV().getType();
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return emitOpError("q, k and v must be rank 4: [B, H, T, D]");
  auto qs = q.getShape(), ks = k.getShape(), vs = v.getShape();
  if (qs[0] != ks[0] || ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] || qs[3] != ks[3] ||
      ks[1] == 0 || qs[1] % ks[1] != 0)
    return emitOpError("q, k, v shapes ")
           << shapeStr(qs) << ", " << shapeStr(ks) << ", " << shapeStr(vs)
           << " are not those of an attention";
  // y and dy: q's element type, or f32 for bf16/f16 q, k, v (the forward's f32 result).
  Type e = q.getElementType();
  if ((e.isBF16() || e.isF16()) && rankedType(getY()).getElementType().isF32())
    e = Float32Type::get(getContext());
  auto yt = RankedTensorType::get({qs[0], qs[1], qs[2], vs[3]}, e);
  if (getY().getType() != yt || getDy().getType() != yt)
    return emitOpError("y and dy must be ") << yt;
  if (Value m = getMask()) {
    SmallVector<int64_t> scores{qs[0], qs[1], qs[2], ks[2]}, bc;
    auto ms = rankedType(m).getShape();
    if (ms.size() > 4 || !broadcastShapes(ms, scores, bc) ||
        ArrayRef<int64_t>(bc) != ArrayRef<int64_t>(scores))
      return emitOpError("mask of shape ") << shapeStr(ms) << " does not broadcast to scores "
                                           << shapeStr(scores);
  }
  return success();
}

LogicalResult GatherGradOp::verify() {
  auto data = getType(), idx = getIndices().getType(), dy = getDy().getType();
  if (!idx.getElementType().isInteger(64) && !idx.getElementType().isInteger(32))
    return emitOpError("indices must be i64 or i32");
  int64_t axis = getAxis();
  if (failed(verifyAxisIn(*this, axis, data.getRank())))
    return failure();
  SmallVector<int64_t> expect(data.getShape().take_front(axis));
  llvm::append_range(expect, idx.getShape());
  llvm::append_range(expect, data.getShape().drop_front(axis + 1));
  if (dy.getShape() != ArrayRef<int64_t>(expect) || dy.getElementType() != data.getElementType())
    return emitOpError("dy of shape ") << shapeStr(dy.getShape()) << " is not gather's result "
                                       << shapeStr(expect) << " for this data and indices";
  return success();
}

LogicalResult SliceGradOp::verify() {
  auto x = getType(), dy = getDy().getType();
  int64_t r = x.getRank();
  if (dy.getRank() != r || dy.getElementType() != x.getElementType())
    return emitOpError("dy ") << dy << " and result " << x << " differ in rank or element type";
  auto starts = getStarts(), steps = getSteps();
  if (int64_t(starts.size()) != r || int64_t(steps.size()) != r)
    return emitOpError("starts and steps need one entry per dim");
  for (int64_t d = 0; d < r; ++d) {
    int64_t n = dy.getDimSize(d);
    if (n == 0)
      continue;
    int64_t first = starts[d], last = starts[d] + (n - 1) * steps[d];
    if (steps[d] == 0 || first < 0 || first >= x.getDimSize(d) || last < 0 ||
        last >= x.getDimSize(d))
      return emitOpError("dim ") << d << ": " << n << " elements from " << starts[d]
                                 << " step " << steps[d] << " leave [0, " << x.getDimSize(d) << ")";
  }
  return success();
}

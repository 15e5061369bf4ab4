//===- ColossalParallelOps.cpp - verifiers of the collectives and mesh queries ---===//
//
// ColossalParallelOps.td. The mesh is the enclosing module's `colossal.mesh_axes` (names, in
// the spec's order) and `colossal.mesh_shape` (sizes); a module without them has no mesh, and
// the shapes are checked only for what the group size cannot change.
//===----------------------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace colossal;

std::optional<int64_t> colossal::meshGroupSize(Operation *op, ArrayAttr axes) {
  auto module = op->getParentOfType<ModuleOp>();
  if (!module)
    return std::nullopt;
  auto names = module->getAttrOfType<ArrayAttr>("colossal.mesh_axes");
  auto sizes = module->getAttrOfType<DenseI64ArrayAttr>("colossal.mesh_shape");
  if (!names || !sizes || names.size() != static_cast<size_t>(sizes.size()))
    return std::nullopt;
  int64_t group = 1;
  for (Attribute axis : axes) {
    auto it = llvm::find(names, axis);
    if (it == names.end())
      return -1;
    group *= sizes[it - names.begin()];
  }
  return group;
}

namespace {

/// Axes present, unique and on the mesh; returns the group size (or nullopt without a mesh).
FailureOr<std::optional<int64_t>> checkAxes(Operation *op, ArrayAttr axes) {
  if (axes.empty())
    return op->emitOpError("needs at least one mesh axis in 'axes'");
  llvm::SmallDenseSet<Attribute> seen;
  for (Attribute axis : axes)
    if (!seen.insert(axis).second)
      return op->emitOpError("names mesh axis ") << axis << " twice";
  std::optional<int64_t> group = meshGroupSize(op, axes);
  if (group && *group < 0)
    return op->emitOpError("names an axis that is not on the module's mesh: ") << axes;
  return group;
}

/// Result = operand with dim `dim` multiplied (`scale` > 0) or divided (< 0) by the group size.
LogicalResult checkResized(Operation *op, ArrayAttr axes, int64_t dim, bool grow) {
  auto group = checkAxes(op, axes);
  if (failed(group))
    return failure();
  auto in = cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = cast<RankedTensorType>(op->getResult(0).getType());
  if (in.getElementType() != out.getElementType() || in.getRank() != out.getRank())
    return op->emitOpError("result ")
           << out << " must have the operand's rank and element type (" << in << ")";
  if (dim < 0 || dim >= in.getRank())
    return op->emitOpError("dim ") << dim << " is out of range for rank " << in.getRank();
  for (int64_t i = 0; i < in.getRank(); ++i)
    if (i != dim && in.getDimSize(i) != out.getDimSize(i))
      return op->emitOpError("changes dim ")
             << i << " (" << shapeStr(in.getShape()) << " -> " << shapeStr(out.getShape()) << ")";
  if (!*group)
    return success();
  int64_t p = **group, a = in.getDimSize(dim), b = out.getDimSize(dim);
  if (grow ? b != a * p : (a % p != 0 || b != a / p))
    return op->emitOpError("dim ")
           << dim << " of " << shapeStr(in.getShape()) << " -> " << shapeStr(out.getShape())
           << " does not fit a group of " << p << " ranks";
  return success();
}

LogicalResult checkReduction(Operation *op, StringRef reduction) {
  if (reduction != "sum" && reduction != "max" && reduction != "min")
    return op->emitOpError("reduction must be sum, max or min, got '") << reduction << "'";
  return success();
}

} // namespace

LogicalResult AllReduceOp::verify() {
  if (failed(checkAxes(*this, getAxes())) || failed(checkReduction(*this, getReduction())))
    return failure();
  if (getX().getType() != getY().getType())
    return emitOpError("result type must equal the operand's");
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto group = checkAxes(*this, getAxes());
  if (failed(group))
    return failure();
  if (getX().getType() != getY().getType())
    return emitOpError("result type must equal the operand's");
  if (getRoot() < 0 || (*group && getRoot() >= **group))
    return emitOpError("root ") << getRoot() << " is outside the group";
  return success();
}

LogicalResult AllGatherOp::verify() {
  return checkResized(*this, getAxes(), getDim(), /*grow=*/true);
}

LogicalResult ReduceScatterOp::verify() {
  if (failed(checkReduction(*this, getReduction())))
    return failure();
  return checkResized(*this, getAxes(), getDim(), /*grow=*/false);
}

LogicalResult ShardSliceOp::verify() {
  return checkResized(*this, getAxes(), getDim(), /*grow=*/false);
}

LogicalResult AxisIndexOp::verify() {
  if (failed(checkAxes(*this, getAxes())))
    return failure();
  auto type = cast<RankedTensorType>(getIndex().getType());
  if (type.getRank() != 0 || !type.getElementType().isInteger(64))
    return emitOpError("result must be tensor<i64>, got ") << type;
  return success();
}

OpFoldResult ShardSliceOp::fold(FoldAdaptor) {
  auto gather = getX().getDefiningOp<AllGatherOp>();
  if (gather && gather.getAxes() == getAxes() && gather.getDim() == getDim() &&
      gather.getX().getType() == getY().getType())
    return gather.getX();
  return {};
}

namespace {
/// shard_slice(all_reduce(x, sum, A), A, dim) → reduce_scatter(x, A, dim) when the all_reduce
/// has no other use: the same values, 1/P of the bytes received.
struct AllReduceThenSlice : OpRewritePattern<ShardSliceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ShardSliceOp slice, PatternRewriter &rewriter) const override {
    auto reduce = slice.getX().getDefiningOp<AllReduceOp>();
    if (!reduce || !reduce->hasOneUse() || reduce.getAxes() != slice.getAxes())
      return failure();
    rewriter.replaceOpWithNewOp<ReduceScatterOp>(slice, slice.getY().getType(), reduce.getX(),
                                                 slice.getAxes(), slice.getDimAttr(),
                                                 reduce.getReductionAttr());
    return success();
  }
};
} // namespace

void ShardSliceOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *ctx) {
  patterns.add<AllReduceThenSlice>(ctx);
}

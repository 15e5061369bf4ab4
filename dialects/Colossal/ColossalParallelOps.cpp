//===- ColossalParallelOps.cpp - verifiers of the collectives and mesh queries ---===//
//
// ColossalParallelOps.td. The mesh is the enclosing module's `colossal.mesh`; a module without one
// has no mesh, and the shapes are checked only for what the group size cannot change.
//===----------------------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace colossal;

llvm::StringRef colossal::axisRoleName(AxisRole role) {
  switch (role) {
  case AxisRole::Data: return "data";
  case AxisRole::Tensor: return "tensor";
  case AxisRole::Pipeline: return "pipeline";
  case AxisRole::GridRow: return "grid_row";
  case AxisRole::GridCol: return "grid_col";
  case AxisRole::GridDepth: return "grid_depth";
  }
  llvm_unreachable("AxisRole");
}

std::optional<AxisRole> colossal::parseAxisRole(llvm::StringRef name) {
  for (AxisRole r : {AxisRole::Data, AxisRole::Tensor, AxisRole::Pipeline, AxisRole::GridRow,
                     AxisRole::GridCol, AxisRole::GridDepth})
    if (axisRoleName(r) == name)
      return r;
  return std::nullopt;
}

MeshOp colossal::lookupMesh(Operation *op) {
  auto module = isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  if (!module)
    return nullptr;
  auto meshes = module.getOps<MeshOp>();
  return meshes.empty() ? nullptr : *meshes.begin();
}

std::optional<int64_t> colossal::meshGroupSize(Operation *op, ArrayAttr axes) {
  MeshOp mesh = lookupMesh(op);
  if (!mesh)
    return std::nullopt;
  ArrayAttr names = mesh.getAxes();
  int64_t group = 1;
  for (Attribute axis : axes) {
    auto it = llvm::find(names, axis);
    if (it == names.end())
      return -1;
    group *= mesh.getShape()[it - names.begin()];
  }
  return group;
}

SmallVector<int> MeshOp::axesWithRole(AxisRole role) {
  SmallVector<int> out;
  for (auto [i, r] : llvm::enumerate(getRoles()))
    if (parseAxisRole(cast<StringAttr>(r).getValue()) == role)
      out.push_back(static_cast<int>(i));
  return out;
}

int64_t MeshOp::numRanks() {
  int64_t n = 1;
  for (int64_t s : getShape())
    n *= s;
  return n;
}

LogicalResult MeshOp::verify() {
  if (!isa_and_nonnull<ModuleOp>((*this)->getParentOp()))
    return emitOpError("must be at the top level of a module");
  for (MeshOp other : cast<ModuleOp>((*this)->getParentOp()).getOps<MeshOp>())
    if (other != *this)
      return emitOpError() << "is a second mesh of the module (@" << other.getSymName()
                           << " is the other); a module has one mesh";
  ArrayAttr axes = getAxes(), roles = getRoles();
  ArrayRef<int64_t> shape = getShape();
  if (axes.size() != shape.size() || roles.size() != shape.size())
    return emitOpError() << "needs one size and one role per axis, got " << axes.size()
                         << " axes, " << shape.size() << " sizes and " << roles.size() << " roles";
  llvm::StringSet<> seen;
  int64_t ranks = 1;
  for (auto [axis, size, role] : llvm::zip(axes, shape, roles)) {
    StringRef name = cast<StringAttr>(axis).getValue();
    bool word = !name.empty() && !llvm::isDigit(name[0]) &&
                llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_'; });
    if (!word)
      return emitOpError() << "axis name '" << name << "' is not [A-Za-z_][A-Za-z0-9_]*";
    if (!seen.insert(name).second)
      return emitOpError() << "names axis '" << name << "' twice";
    if (size < 1)
      return emitOpError() << "axis '" << name << "' has size " << size << "; sizes are >= 1";
    if (!parseAxisRole(cast<StringAttr>(role).getValue()))
      return emitOpError() << "axis '" << name << "' has role " << role
                           << "; roles are data, tensor, pipeline, grid_row, grid_col, grid_depth";
    if (ranks > (int64_t(1) << 30) / size)
      return emitOpError() << "has more than 2^30 ranks";
    ranks *= size;
  }
  return success();
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

// y = Σ over the group of x, with every rank's loss reading y: ∂L/∂x on a rank is the sum over
// the group of the ranks' ∂L_r/∂y, the all_reduce of the cotangent.
LogicalResult AllReduceOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &og) {
  if (getReduction() != "sum")
    return emitOpError() << "has a VJP for reduction sum only, not " << getReduction();
  if (needed[0])
    og[0] = AllReduceOp::create(b, getLoc(), resultGrads[0].getType(), resultGrads[0], getAxesAttr(),
                                getReductionAttr());
  return success();
}

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

LogicalResult AllReduceInPlaceOp::verify() {
  if (getXs().empty())
    return emitOpError("needs at least one operand");
  Type element = cast<RankedTensorType>(getXs().front().getType()).getElementType();
  for (Value x : getXs()) {
    if (cast<RankedTensorType>(x.getType()).getElementType() != element ||
        !isa<FloatType>(element))
      return emitOpError() << "needs operands of one float element type, got " << x.getType()
                           << " after " << getXs().front().getType();
    auto arg = dyn_cast<BlockArgument>(x);
    auto fn = arg ? dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp())
                  : FunctionOpInterface();
    if (!fn || (!fn.getArgAttr(arg.getArgNumber(), kStateAttr) &&
                !fn.getArgAttr(arg.getArgNumber(), kParamAttr)))
      return emitOpError() << "writes its operands in place, so each must be a function argument "
                              "marked "
                           << kStateAttr << " or " << kParamAttr;
  }
  llvm::SmallPtrSet<Value, 8> unique;
  for (Value x : getXs())
    if (!unique.insert(x).second)
      return emitOpError("names one operand twice");
  if (failed(checkAxes(*this, getAxes())) || failed(checkReduction(*this, getReduction())))
    return failure();
  return success();
}

namespace {

/// Whether `x` is an argument of its function marked colossal.state or colossal.param.
bool isStateArgument(Value x) {
  auto arg = dyn_cast<BlockArgument>(x);
  auto fn = arg ? dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp())
                : FunctionOpInterface();
  return fn && (fn.getArgAttr(arg.getArgNumber(), kStateAttr) ||
                fn.getArgAttr(arg.getArgNumber(), kParamAttr));
}

/// The operands of all_gather_in_place / reduce_scatter_in_place: state arguments of one element
/// type (float when `needsFloat`), each named once, dim 0 divisible by the group size.
LogicalResult checkChunkedStates(Operation *op, ValueRange xs, ArrayAttr axes, bool needsFloat) {
  if (xs.empty())
    return op->emitOpError("needs at least one operand");
  auto group = checkAxes(op, axes);
  if (failed(group))
    return failure();
  Type element = cast<RankedTensorType>(xs.front().getType()).getElementType();
  llvm::SmallPtrSet<Value, 8> unique;
  for (Value x : xs) {
    auto type = cast<RankedTensorType>(x.getType());
    if (type.getElementType() != element || (needsFloat && !isa<FloatType>(element)))
      return op->emitOpError() << "needs operands of one " << (needsFloat ? "float " : "")
                               << "element type, got " << x.getType() << " after "
                               << xs.front().getType();
    if (!isStateArgument(x))
      return op->emitOpError() << "writes its operands in place, so each must be a function "
                                  "argument marked "
                               << kStateAttr << " or " << kParamAttr;
    if (!unique.insert(x).second)
      return op->emitOpError("names one operand twice");
    if (type.getRank() == 0)
      return op->emitOpError("operand ") << x.getType() << " has no dim 0 to split";
    if (*group && type.getDimSize(0) % **group != 0)
      return op->emitOpError("dim 0 of ")
             << x.getType() << " is not divisible by the group size " << **group;
  }
  return success();
}

} // namespace

LogicalResult ShardViewOp::verify() {
  if (!isStateArgument(getX()))
    return emitOpError() << "views a persistent tensor, so its operand must be a function argument "
                            "marked "
                         << kStateAttr << " or " << kParamAttr;
  if (getX().getType().getRank() == 0)
    return emitOpError("operand ") << getX().getType() << " has no dim 0 to split";
  return checkResized(*this, getAxes(), 0, /*grow=*/false);
}

LogicalResult AllGatherInPlaceOp::verify() {
  return checkChunkedStates(*this, getXs(), getAxes(), /*needsFloat=*/false);
}

LogicalResult ReduceScatterInPlaceOp::verify() {
  return checkChunkedStates(*this, getXs(), getAxes(), /*needsFloat=*/true);
}

//===- ColossalDialect.cpp - the colossal dialect ------------------------===//
#include "dialects/Colossal/ColossalDialect.h"
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/Programs.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace colossal;

#include "dialects/Colossal/ColossalDialect.cpp.inc"

void ColossalDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Colossal/ColossalOps.cpp.inc"
      >();
  registerAttributes();
}

Operation *ColossalDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                                Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

namespace {
/// Checks `sharding` against the mesh it names (looked up from `anchor`) and against `type`, the
/// local type of the value it describes (`local`: an argument, whose dims are the global dims
/// divided by their group sizes) or its global type (an op's result in `stage=propagate`).
LogicalResult verifySharding(Operation *anchor, ShardingAttr sharding, Type type, bool local,
                             llvm::function_ref<InFlightDiagnostic()> emitError) {
  auto meshOp = llvm::dyn_cast_or_null<MeshOp>(
      SymbolTable::lookupNearestSymbolFrom(anchor, sharding.getMesh()));
  if (!meshOp)
    return emitError() << "'" << kShardingAttr << "' names mesh " << sharding.getMesh()
                       << ", which is not a colossal.mesh of the module";
  auto axisSize = [&](StringAttr axis) -> std::optional<int64_t> {
    auto it = llvm::find(meshOp.getAxes(), axis);
    if (it == meshOp.getAxes().end())
      return std::nullopt;
    return meshOp.getShape()[it - meshOp.getAxes().begin()];
  };
  for (StringAttr a : sharding.getPartial())
    if (!axisSize(a))
      return emitError() << "'" << kShardingAttr << "' partial names axis '" << a.getValue()
                         << "', which is not on mesh " << sharding.getMesh();
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return emitError() << "'" << kShardingAttr << "' is on a value of type " << type
                       << ", not a ranked tensor";
  if (tensor.getRank() != static_cast<int64_t>(sharding.getDims().size()))
    return emitError() << "'" << kShardingAttr << "' gives " << sharding.getDims().size()
                       << " dims for a value of type " << tensor;
  for (auto [d, dim] : llvm::enumerate(sharding.getDims())) {
    int64_t group = 1;
    for (StringAttr a : dim.getAxes()) {
      std::optional<int64_t> size = axisSize(a);
      if (!size)
        return emitError() << "'" << kShardingAttr << "' dim " << d << " names axis '"
                           << a.getValue() << "', which is not on mesh " << sharding.getMesh();
      group *= *size;
    }
    int64_t extent = tensor.getDimSize(d);
    int64_t need = local ? dim.getBlocks() : dim.getBlocks() * group;
    if (ShapedType::isDynamic(extent) || extent % need != 0)
      return emitError() << "'" << kShardingAttr << "' dim " << d << " (" << extent
                         << (local ? " local" : "") << ") is not divisible by "
                         << (local ? "its block count " : "its group size x blocks ") << need;
  }
  return success();
}
} // namespace

LogicalResult ColossalDialect::verifyRegionArgAttribute(Operation *op, unsigned region,
                                                        unsigned arg, NamedAttribute attr) {
  if (attr.getName() != kShardingAttr)
    return success();
  auto emitError = [&]() {
    return op->emitOpError() << "argument #" << arg << ": ";
  };
  auto sharding = llvm::dyn_cast<ShardingAttr>(attr.getValue());
  if (!sharding)
    return emitError() << "'" << kShardingAttr << "' must be a #colossal.sharding; got "
                       << attr.getValue();
  if (region >= op->getNumRegions() || op->getRegion(region).empty() ||
      arg >= op->getRegion(region).getNumArguments())
    return success();
  return verifySharding(op, sharding, op->getRegion(region).getArgument(arg).getType(),
                        /*local=*/true, emitError);
}

namespace {
/// `colossal.program` on a function: a known role, stated by no other function of the module,
/// and every argument at most one of parameter, state, input.
LogicalResult verifyProgram(Operation *op, Attribute value) {
  auto f = llvm::dyn_cast<func::FuncOp>(op);
  if (!f)
    return op->emitOpError() << "'" << kProgramAttr << "' is for func.func only";
  auto name = llvm::dyn_cast<StringAttr>(value);
  std::optional<ProgramRole> role = name ? parseProgramRole(name.getValue()) : std::nullopt;
  if (!role)
    return op->emitOpError() << "'" << kProgramAttr << "' must be one of \"forward\", "
                             << "\"microbatch\", \"eval\", \"train_step\", \"optimizer_step\", "
                             << "\"stage_forward\", \"stage_backward\", \"stage_optimizer\", "
                             << "\"stage_backward_weight\", \"generate\"; got "
                             << value;
  // A stage role is one program per stage (`colossal.stage`), generate one per token count
  // (`colossal.tokens`), any other role one per module.
  const bool staged = *role == ProgramRole::StageForward || *role == ProgramRole::StageBackward ||
                      *role == ProgramRole::StageOptimizer || *role == ProgramRole::StageBackwardWeight;
  const bool generate = *role == ProgramRole::Generate;
  if (staged && !f->getAttrOfType<IntegerAttr>(kStageAttr))
    return op->emitOpError() << "is a " << name << " program without '" << kStageAttr << "'";
  if (generate && !f->getAttrOfType<IntegerAttr>(kTokensAttr))
    return op->emitOpError() << "is a " << name << " program without '" << kTokensAttr << "'";
  llvm::StringLiteral key = generate ? kTokensAttr : kStageAttr;
  if (auto module = f->getParentOfType<ModuleOp>())
    for (func::FuncOp other : module.getOps<func::FuncOp>())
      if (other != f && other->getAttr(kProgramAttr) == value &&
          (!(staged || generate) || other->getAttr(key) == f->getAttr(key)))
        return op->emitOpError() << "is the " << name << " program, but so is @"
                                 << other.getSymName();
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    int kinds = 0;
    for (llvm::StringRef kind : {kParamAttr, kStateAttr, kInputAttr})
      kinds += f.getArgAttr(i, kind) ? 1 : 0;
    if (kinds > 1)
      return op->emitOpError() << "argument #" << i << " is more than one of '" << kParamAttr
                               << "', '" << kStateAttr << "' and '" << kInputAttr << "'";
    if (f.getArgAttr(i, kValueAttr) && !f.getArgAttr(i, kParamAttr))
      return op->emitOpError() << "argument #" << i << " has '" << kValueAttr
                               << "' but is no '" << kParamAttr << "'";
  }
  return success();
}
} // namespace

LogicalResult ColossalDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() == kProgramAttr)
    return verifyProgram(op, attr.getValue());
  if (attr.getName() != kShardingAttr)
    return success();
  // An op's results: one sharding, or one per result.
  SmallVector<ShardingAttr> shardings;
  if (auto one = llvm::dyn_cast<ShardingAttr>(attr.getValue())) {
    shardings.push_back(one);
  } else if (auto many = llvm::dyn_cast<ArrayAttr>(attr.getValue())) {
    for (Attribute a : many) {
      auto s = llvm::dyn_cast<ShardingAttr>(a);
      if (!s)
        return op->emitOpError() << "'" << kShardingAttr
                                 << "' must be a #colossal.sharding or one per result; got " << a;
      shardings.push_back(s);
    }
  } else {
    return op->emitOpError() << "'" << kShardingAttr
                             << "' must be a #colossal.sharding or one per result; got "
                             << attr.getValue();
  }
  if (shardings.size() != op->getNumResults())
    return op->emitOpError() << "'" << kShardingAttr << "' gives " << shardings.size()
                             << " shardings for " << op->getNumResults() << " results";
  for (auto [s, r] : llvm::zip(shardings, op->getResults()))
    if (failed(verifySharding(op, s, r.getType(), /*local=*/false,
                              [&]() { return op->emitOpError() << "result #" << r.getResultNumber() << ": "; })))
      return failure();
  return success();
}

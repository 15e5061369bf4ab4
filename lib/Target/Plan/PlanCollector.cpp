//===- PlanCollector.cpp - @forward as an abstract program for the plan ---------------------===//
#include "PlanCollector.h"

#include "OpTable.h"

#include "colossal/runtime/DType.h"
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/Programs.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

using namespace mlir;

namespace colossal {

namespace {

//===----------------------------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------------------------===//

std::optional<plan::DType> toPlanDType(Type type) {
  if (type.isF32())
    return plan::F32;
  if (type.isF16())
    return plan::F16;
  if (type.isBF16())
    return plan::BF16;
  if (type.isF64())
    return plan::F64;
  if (auto it = llvm::dyn_cast<IntegerType>(type)) {
    if (it.isUnsigned()) {
      switch (it.getWidth()) {
      case 8: return plan::U8;
      case 16: return plan::U16;
      case 32: return plan::U32;
      case 64: return plan::U64;
      default: return std::nullopt;
      }
    }
    if (!it.isSignless())
      return std::nullopt;
    switch (it.getWidth()) {
    case 1: return plan::BOOL;
    case 8: return plan::I8;
    case 16: return plan::I16;
    case 32: return plan::I32;
    case 64: return plan::I64;
    default: return std::nullopt;
    }
  }
  return std::nullopt;
}

uint64_t dtypeBytes(plan::DType dtype) {
  return runtime::dtypeSize(static_cast<runtime::DType>(dtype));
}

/// A static, supported tensor type, or nullopt with `why` set.
std::optional<TensorType> toTensorType(Type type, std::string &why) {
  auto ranked = llvm::dyn_cast<RankedTensorType>(type);
  if (!ranked) {
    llvm::raw_string_ostream(why) << "type " << type << " is not a ranked tensor";
    return std::nullopt;
  }
  if (!ranked.hasStaticShape()) {
    llvm::raw_string_ostream(why) << "type " << type
                                  << " has a dynamic shape; the plan needs static shapes";
    return std::nullopt;
  }
  auto dtype = toPlanDType(ranked.getElementType());
  if (!dtype) {
    llvm::raw_string_ostream(why) << "element type " << ranked.getElementType()
                                  << " is not supported by the plan (f32, f16, bf16, f64, i64, "
                                     "i32, i16, i8, ui8, ui16, ui32, ui64, i1)";
    return std::nullopt;
  }
  TensorType t;
  t.dtype = *dtype;
  t.shape.assign(ranked.getShape().begin(), ranked.getShape().end());
  t.bytes = static_cast<uint64_t>(ranked.getNumElements()) * dtypeBytes(*dtype);
  return t;
}

//===----------------------------------------------------------------------------------------===//
// Locations
//===----------------------------------------------------------------------------------------===//

void printLoc(Location loc, llvm::raw_ostream &os) {
  if (auto name = llvm::dyn_cast<NameLoc>(loc)) {
    os << name.getName().getValue();
    if (!llvm::isa<UnknownLoc>(name.getChildLoc())) {
      std::string child;
      llvm::raw_string_ostream cs(child);
      printLoc(name.getChildLoc(), cs);
      if (!child.empty())
        os << " (" << child << ")";
    }
  } else if (auto file = llvm::dyn_cast<FileLineColLoc>(loc)) {
    os << file.getFilename().getValue() << ":" << file.getLine() << ":" << file.getColumn();
  } else if (auto fused = llvm::dyn_cast<FusedLoc>(loc)) {
    llvm::interleave(fused.getLocations(), os, [&](Location l) { printLoc(l, os); }, ", ");
  } else if (auto call = llvm::dyn_cast<CallSiteLoc>(loc)) {
    printLoc(call.getCallee(), os);
  }
}

std::string locString(Location loc) {
  std::string s;
  llvm::raw_string_ostream os(s);
  printLoc(loc, os);
  return s;
}

/// The first name in `loc` (the ONNX node name the importer attached), or "".
std::string locName(Location loc) {
  if (auto name = llvm::dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = llvm::dyn_cast<FusedLoc>(loc))
    for (Location l : fused.getLocations())
      if (std::string n = locName(l); !n.empty())
        return n;
  if (auto call = llvm::dyn_cast<CallSiteLoc>(loc))
    return locName(call.getCallee());
  return "";
}

//===----------------------------------------------------------------------------------------===//
// Module-wide tables
//===----------------------------------------------------------------------------------------===//

// kTrainAttr, kStateAttr, kSourceAttr: dialects/Colossal/ColossalDialect.h.
constexpr llvm::StringLiteral kNoDecayAttr = "colossal.no_decay"; // param argument: UnitAttr/BoolAttr
// Tensor parallelism (docs/parallelism.md "IR after colossal-spmd-partition").
// kShardingAttr: dialects/Colossal/ColossalDialect.h; #colossal.sharding: ColossalAttrs.td.

/// The module's mesh (name, size) in order, empty without one.
using MeshTable = std::vector<std::pair<std::string, int64_t>>;

/// Argument `i`'s `#colossal.sharding` as plan.proto's Sharding, global shape computed from its
/// local type (global dim = local dim x the product of its axes' sizes); nullopt when the argument
/// has none. The dialect verified the attribute against the mesh and the argument's type; a
/// partial sum cannot be a program's argument. Errors are emitted on `func`, naming the argument.
FailureOr<std::optional<plan::Sharding>> argSharding(func::FuncOp func, unsigned i, llvm::StringRef name,
                                                      const TensorType &local, const MeshTable &mesh) {
  Attribute attr = func.getArgAttr(i, kShardingAttr);
  if (!attr)
    return std::optional<plan::Sharding>();
  auto where = [&]() {
    return func.emitError() << "argument #" << i << " ('" << name << "'): ";
  };
  auto sharding = llvm::dyn_cast<ShardingAttr>(attr);
  if (!sharding || sharding.getDims().size() != local.shape.size())
    return where() << "'" << kShardingAttr << "' must be a #colossal.sharding with one entry per dim ("
                   << local.shape.size() << "); got " << attr;
  if (!sharding.getPartial().empty())
    return where() << "'" << kShardingAttr << "' is a partial sum, which no program argument may be";
  plan::Sharding out;
  for (auto [d, dim] : llvm::enumerate(sharding.getDims())) {
    plan::DimSharding *ds = out.add_dims();
    int64_t group = 1;
    for (StringAttr axis : dim.getAxes()) {
      auto it = llvm::find_if(mesh, [&](const auto &m) { return m.first == axis.getValue(); });
      if (it == mesh.end())
        return where() << "'" << kShardingAttr << "' dim " << d << " names axis '" << axis.getValue()
                       << "', which is not on the module's mesh";
      ds->add_axes(axis.getValue().str());
      group *= it->second;
    }
    if (dim.getBlocks() > 1)
      ds->set_blocks(dim.getBlocks());
    out.add_global_shape(local.shape[d] * group);
  }
  return std::optional<plan::Sharding>(std::move(out));
}

/// `local` with the sharding's global shape.
TensorType globalTensorType(const TensorType &local, const plan::Sharding &sharding) {
  TensorType t = local;
  uint64_t count = 1;
  t.shape.assign(sharding.global_shape().begin(), sharding.global_shape().end());
  for (int64_t d : t.shape)
    count *= static_cast<uint64_t>(d);
  t.bytes = count * dtypeBytes(local.dtype);
  return t;
}

/// Whether two shardings are equal (by their wire bytes: the messages hold no maps).
bool sameSharding(const plan::Sharding &a, const plan::Sharding &b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

/// A parameter as seen across every lowered function.
struct ParamInfo {
  TensorType type;       // local (the argument's)
  TensorType globalType; // of `value`: `type` unless sharded
  std::optional<plan::Sharding> sharding;
  Type mlirType;
  ElementsAttr value;  // the first `colossal.value` found
  std::string source;  // `colossal.source`, or the name
  bool noDecay = false;
  bool trainable = false; // a persistent state: trained, or a buffer an update op writes
  bool gradient = false;  // has a gradient accumulator or an optimizer update (trained)
  std::optional<double> weightDecay; // the `weight_decay` of the update op writing it
  mutable func::FuncOp firstFunc; // mutable: emitError is not const
  unsigned firstArg = 0;
};

struct StateInfo {
  TensorType type;
  std::optional<plan::Sharding> sharding; // its own `colossal.sharding`
  Type mlirType;
  mutable func::FuncOp firstFunc; // mutable: emitError is not const
  unsigned firstArg = 0;
};

/// What every Collector shares: weights (stored once for the whole plan), parameters, states.
struct ModuleTables {
  bool train = false;
  bool generate = false; // mode generate: its states are the KV cache
  MeshTable mesh;
  llvm::StringMap<ParamInfo> params;
  std::vector<std::string> paramOrder;
  llvm::StringMap<StateInfo> states;
  std::vector<std::string> stateOrder;
  llvm::StringSet<> weightNames;
  llvm::DenseMap<Attribute, std::string> constantWeights; // deduplicates equal constants
  unsigned nextConstant = 0;
};

//===----------------------------------------------------------------------------------------===//
// Collected program
//===----------------------------------------------------------------------------------------===//

class Collector {
public:
  Collector(func::FuncOp func, ModuleTables &tables, CollectedModule &module,
            CollectedProgram &out)
      : func(func), tables(tables), module(module), out(out), asmState(func) {}

  LogicalResult run();

private:
  LogicalResult collectArguments();
  LogicalResult collectOp(Operation *op);
  LogicalResult collectOutputs(Operation *terminator);
  LogicalResult convertAttr(Operation *op, llvm::StringRef name, Attribute attr,
                            plan::Attr &result);
  std::string ssaName(Value v);

  uint32_t addTensor(Tensor t) {
    out.tensors.push_back(std::move(t));
    return static_cast<uint32_t>(out.tensors.size() - 1);
  }

  func::FuncOp func;
  ModuleTables &tables;
  CollectedModule &module;
  CollectedProgram &out;
  AsmState asmState;
  llvm::DenseMap<Value, uint32_t> ids;
};

std::string Collector::ssaName(Value v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  v.printAsOperand(os, asmState);
  return s;
}

std::string uniqueWeightName(ModuleTables &tables, const llvm::Twine &wanted) {
  std::string name = wanted.str();
  while (tables.weightNames.contains(name))
    name = ("const." + llvm::Twine(tables.nextConstant++)).str();
  tables.weightNames.insert(name);
  return name;
}

/// The bytes of `value` laid out as `type` (materialized into `module` for splats and i1).
LogicalResult weightData(ElementsAttr value, const TensorType &type,
                         llvm::function_ref<InFlightDiagnostic()> emitError,
                         CollectedModule &module, llvm::ArrayRef<char> &data) {
  // Constants are embedded in the weights file; one larger than this is almost certainly a shape
  // mistake (a mask or fill over a huge bound dimension), and would need that much memory twice.
  constexpr uint64_t kMaxConstantBytes = uint64_t(1) << 30;
  if (type.bytes > kMaxConstantBytes)
    return emitError() << "constant of " << type.bytes
                       << " bytes is larger than the 1 GiB limit for embedded constants";
  if (auto dense = llvm::dyn_cast<DenseElementsAttr>(value)) {
    if (type.dtype == plan::BOOL) {
      // i1 is bit-packed in MLIR's storage: write one byte per element, as the plan expects.
      std::vector<char> &bytes = module.materialized.emplace_back();
      bytes.reserve(type.bytes);
      for (bool b : dense.getValues<bool>())
        bytes.push_back(b ? 1 : 0);
      data = bytes;
    } else if (dense.isSplat()) {
      llvm::ArrayRef<char> one = dense.getRawData();
      uint64_t elemBytes = dtypeBytes(type.dtype);
      if (one.size() < elemBytes)
        return emitError() << "splat constant holds " << one.size() << " bytes, expected "
                           << elemBytes;
      std::vector<char> &bytes = module.materialized.emplace_back();
      bytes.reserve(type.bytes);
      for (uint64_t i = 0; i < type.bytes / std::max<uint64_t>(elemBytes, 1); ++i)
        bytes.insert(bytes.end(), one.begin(), one.begin() + elemBytes);
      data = bytes;
    } else {
      data = dense.getRawData();
    }
  } else if (auto resource = llvm::dyn_cast<DenseResourceElementsAttr>(value)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return emitError() << "dense resource '" << resource.getRawHandle().getKey()
                         << "' has no data";
    data = blob->getData();
  } else {
    return emitError() << "cannot read the data of " << value
                       << " (expected a dense or dense_resource elements attribute)";
  }
  if (data.size() != type.bytes)
    return emitError() << "data holds " << data.size() << " bytes, its type needs "
                       << type.bytes;
  return success();
}

LogicalResult Collector::collectArguments() {
  llvm::StringSet<> inputNames, paramNames, stateNames;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto inputName = func.getArgAttrOfType<StringAttr>(i, kInputAttr);
    auto paramName = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
    auto stateName = func.getArgAttrOfType<StringAttr>(i, kStateAttr);
    // Validated by the module walk (collectModule): exactly one is set, names are non-empty and
    // types consistent.
    Tensor t;
    std::string why;
    t.type = *toTensorType(arg.getType(), why); // checked by the module walk
    if (inputName) {
      llvm::StringRef name = inputName.getValue();
      if (!inputNames.insert(name).second)
        return func.emitError() << "two inputs are named '" << name << "'";
      t.name = name.str();
      t.isInput = true;
      uint32_t id = addTensor(std::move(t));
      ids[arg] = id;
      out.inputs.push_back({name.str(), id});
      continue;
    }
    if (paramName) {
      llvm::StringRef name = paramName.getValue();
      if (!paramNames.insert(name).second)
        return func.emitError() << "two parameters are named '" << name << "'";
      t.name = name.str();
      if (tables.params[name].trainable) {
        t.isState = true;
        t.stateName = name.str();
      } else {
        t.isWeight = true;
        t.weightName = name.str();
        t.sharding = tables.params[name].sharding;
      }
      ids[arg] = addTensor(std::move(t));
      continue;
    }
    llvm::StringRef name = stateName.getValue();
    if (!stateNames.insert(name).second)
      return func.emitError() << "two state arguments are named '" << name << "'";
    t.name = name.str();
    t.isState = true;
    t.stateName = name.str();
    ids[arg] = addTensor(std::move(t));
  }
  return success();
}

LogicalResult Collector::convertAttr(Operation *op, llvm::StringRef name, Attribute attr,
                                     plan::Attr &result) {
  if (auto b = llvm::dyn_cast<BoolAttr>(attr))
    result.set_i(b.getValue() ? 1 : 0);
  else if (auto i = llvm::dyn_cast<IntegerAttr>(attr))
    result.set_i(i.getValue().getSExtValue());
  else if (auto f = llvm::dyn_cast<FloatAttr>(attr))
    result.set_f(f.getValueAsDouble());
  else if (auto s = llvm::dyn_cast<StringAttr>(attr))
    result.set_s(s.getValue().str());
  else if (auto ints = llvm::dyn_cast<DenseI64ArrayAttr>(attr))
    for (int64_t v : ints.asArrayRef())
      result.mutable_ints()->add_values(v);
  else if (auto ints32 = llvm::dyn_cast<DenseI32ArrayAttr>(attr))
    for (int32_t v : ints32.asArrayRef())
      result.mutable_ints()->add_values(v);
  else if (auto floats = llvm::dyn_cast<DenseF32ArrayAttr>(attr))
    for (float v : floats.asArrayRef())
      result.mutable_floats()->add_values(v);
  else if (auto doubles = llvm::dyn_cast<DenseF64ArrayAttr>(attr))
    for (double v : doubles.asArrayRef())
      result.mutable_floats()->add_values(v);
  else if (auto list = llvm::dyn_cast<ArrayAttr>(attr);
           list && llvm::all_of(list, [](Attribute a) { return llvm::isa<StringAttr>(a); })) {
    // A list of names (a collective's mesh `axes`): one string joined with ",", in order.
    std::string joined;
    for (Attribute a : list) {
      llvm::StringRef item = llvm::cast<StringAttr>(a).getValue();
      if (item.empty() || item.contains(','))
        return op->emitError() << "attribute '" << name << "' (" << attr
                               << "): a name in the list is empty or contains ','";
      joined += (joined.empty() ? "" : ",") + item.str();
    }
    result.set_s(joined);
  } else
    return op->emitError() << "attribute '" << name << "' (" << attr
                           << ") has no plan representation";
  // An empty list still has to say which kind it is.
  if (llvm::isa<DenseI64ArrayAttr, DenseI32ArrayAttr>(attr))
    result.mutable_ints();
  if (llvm::isa<DenseF32ArrayAttr, DenseF64ArrayAttr>(attr))
    result.mutable_floats();
  return success();
}

LogicalResult Collector::collectOp(Operation *op) {
  const OpLowering *row = lookupOpLowering(op->getName().getStringRef());
  if (!row || op->getNumRegions() != 0)
    return op->emitError() << "'" << op->getName()
                           << "' cannot be lowered to the plan: no instruction implements it";

  llvm::SmallVector<TensorType, 2> resultTypes;
  for (OpResult result : op->getResults()) {
    std::string why;
    auto type = toTensorType(result.getType(), why);
    if (!type)
      return op->emitError() << "result #" << result.getResultNumber() << ": " << why;
    resultTypes.push_back(*type);
  }
  for (Value operand : op->getOperands())
    if (!ids.count(operand))
      return op->emitError() << "operand " << ssaName(operand) << " is not defined in @"
                             << func.getName() << "'s body";

  std::string baseName = locName(op->getLoc());
  auto resultName = [&](OpResult r) {
    if (baseName.empty())
      return ssaName(r);
    return op->getNumResults() == 1 ? baseName
                                    : baseName + ":" + std::to_string(r.getResultNumber());
  };

  switch (row->kind) {
  case OpLowering::Kind::Constant: {
    if (op->use_empty())
      return success(); // folded away: nothing reads it
    auto value = llvm::dyn_cast_or_null<ElementsAttr>(op->getInherentAttr("value").value_or(nullptr));
    if (!value || op->getNumResults() != 1)
      return op->emitError() << "expected one result and an elements attribute 'value'";
    Tensor t;
    t.type = resultTypes[0];
    t.isWeight = true;
    auto [it, inserted] = tables.constantWeights.try_emplace(value, std::string());
    if (inserted) {
      it->second = uniqueWeightName(tables, "const." + llvm::Twine(tables.nextConstant++));
      llvm::ArrayRef<char> data;
      if (failed(weightData(value, t.type, [&] { return op->emitError(); }, module, data)))
        return failure();
      module.weights.push_back({it->second, t.type, data});
    }
    t.weightName = it->second;
    t.name = baseName.empty() ? it->second : baseName;
    ids[op->getResult(0)] = addTensor(std::move(t));
    return success();
  }
  case OpLowering::Kind::Alias: {
    if (op->getNumOperands() != 1 || op->getNumResults() != 1)
      return op->emitError() << "expected one operand and one result";
    uint32_t source = ids.lookup(op->getOperand(0));
    if (out.tensors[source].type.bytes != resultTypes[0].bytes ||
        out.tensors[source].type.dtype != resultTypes[0].dtype)
      return op->emitError() << "cannot alias " << out.tensors[source].type.bytes << " bytes of "
                             << op->getOperand(0).getType() << " as " << resultTypes[0].bytes
                             << " bytes of " << op->getResult(0).getType();
    Tensor t;
    t.name = resultName(op->getResult(0));
    t.type = resultTypes[0];
    t.isWeight = out.tensors[source].isWeight;
    t.weightName = out.tensors[source].weightName;
    t.isState = out.tensors[source].isState;
    t.stateName = out.tensors[source].stateName;
    t.sharding = out.tensors[source].sharding; // a view of a sharded weight: the weight's sharding
    t.aliasOf = static_cast<int32_t>(source);
    ids[op->getResult(0)] = addTensor(std::move(t));
    return success();
  }
  case OpLowering::Kind::ChunkView: {
    // A view of this rank's rows of a persistent tensor (colossal.shard_view): no bytes of its own.
    uint32_t source = ids.lookup(op->getOperand(0));
    const Tensor &src = out.tensors[source];
    if (!src.isState || src.aliasOf >= 0 || !llvm::isa<BlockArgument>(op->getOperand(0)))
      return op->emitError() << "views the rows of a persistent tensor, so its operand must be a '"
                             << kParamAttr << "' or '" << kStateAttr << "' argument of @"
                             << func.getName();
    Tensor t;
    t.name = resultName(op->getResult(0));
    t.type = resultTypes[0];
    t.isState = true;
    t.stateName = src.stateName;
    t.aliasOf = static_cast<int32_t>(source);
    for (Attribute axis : llvm::cast<ArrayAttr>(op->getAttr("axes")))
      t.chunkAxes.push_back(llvm::cast<StringAttr>(axis).str());
    ids[op->getResult(0)] = addTensor(std::move(t));
    return success();
  }
  case OpLowering::Kind::Update: {
    // Side effects only: the leading operands are persistent tensors written in place.
    if (op->getNumResults() != 0)
      return op->emitError() << "an update op has no results, found " << op->getNumResults();
    if (op->getNumOperands() <= row->readOnlyTail)
      return op->emitError() << "expected more than " << row->readOnlyTail << " operands";
    for (unsigned i = 0, e = op->getNumOperands() - row->readOnlyTail; i < e; ++i) {
      Value operand = op->getOperand(i);
      for (unsigned j = 0; j < i; ++j)
        if (op->getOperand(j) == operand)
          return op->emitError() << "operands #" << j << " and #" << i << " are the same value "
                                 << ssaName(operand) << "; each written tensor must be distinct";
      const Tensor &target = out.tensors[ids.lookup(operand)];
      const bool chunkView = target.isState && !target.chunkAxes.empty(); // shard_view of a state
      if (!target.isState || (target.aliasOf >= 0 && !chunkView) ||
          (!chunkView && !llvm::isa<BlockArgument>(operand)))
        return op->emitError() << "operand #" << i << " (" << ssaName(operand)
                               << ") is written in place, so it must be a trainable '"
                               << kParamAttr << "' or a '" << kStateAttr << "' argument of @"
                               << func.getName();
    }
    break;
  }
  case OpLowering::Kind::Kernel:
    break;
  }

  PendingInstruction inst;
  inst.kernel = row->kernel.str();
  if (row->copyWhenSameType && op->getNumOperands() == 1 && op->getNumResults() == 1 &&
      op->getOperand(0).getType() == op->getResult(0).getType())
    inst.kernel = "copy";
  inst.inPlaceSafe = row->inPlaceSafe;
  inst.loc = locString(op->getLoc());
  for (llvm::StringRef name : row->attrs) {
    Attribute attr = op->getInherentAttr(name).value_or(nullptr);
    if (!attr)
      continue; // unset default-valued attribute: the kernel's default is the dialect's
    plan::Attr converted;
    if (failed(convertAttr(op, name, attr, converted)))
      return failure();
    inst.attrs.emplace_back(name.str(), std::move(converted));
  }
  if (op->hasAttr(kBatchInvariantAttr)) {
    plan::Attr one;
    one.set_i(1);
    inst.attrs.emplace_back("batch_invariant", std::move(one));
  }
  for (Value operand : op->getOperands())
    inst.inputs.push_back(ids.lookup(operand));
  if (row->kind == OpLowering::Kind::Update)
    inst.outputs.append(inst.inputs.begin(), inst.inputs.end() - row->readOnlyTail);
  for (OpResult result : op->getResults()) {
    Tensor t;
    t.name = resultName(result);
    t.type = resultTypes[result.getResultNumber()];
    uint32_t id = addTensor(std::move(t));
    ids[result] = id;
    inst.outputs.push_back(id);
  }
  out.instructions.push_back(std::move(inst));
  return success();
}

LogicalResult Collector::collectOutputs(Operation *terminator) {
  auto root = [&](uint32_t id) {
    while (out.tensors[id].aliasOf >= 0)
      id = static_cast<uint32_t>(out.tensors[id].aliasOf);
    return id;
  };
  llvm::StringSet<> names;
  llvm::DenseSet<uint32_t> boundRoots;
  for (OpOperand &operand : terminator->getOpOperands()) {
    unsigned i = operand.getOperandNumber();
    auto name = func.getResultAttrOfType<StringAttr>(i, kOutputAttr);
    if (!name || name.getValue().empty())
      return func.emitError() << "result #" << i << " has no '" << kOutputAttr << "' name";
    if (!names.insert(name.getValue()).second)
      return func.emitError() << "two outputs are named '" << name.getValue() << "'";
    auto it = ids.find(operand.get());
    if (it == ids.end())
      return terminator->emitError() << "operand #" << i << " is not defined in @"
                                     << func.getName();
    uint32_t id = it->second;
    uint32_t r = root(id);
    // An output binding owns its bytes: the runtime reads it after the last instruction, so it
    // must not be a weight (read-only file), an input's storage, or another output's storage.
    if (out.tensors[r].isWeight || out.tensors[r].isState || out.tensors[r].isInput ||
        !boundRoots.insert(r).second) {
      Tensor copy;
      copy.name = name.getValue().str();
      copy.type = out.tensors[id].type;
      uint32_t copyId = addTensor(std::move(copy));
      PendingInstruction inst;
      inst.kernel = "copy";
      inst.inputs.push_back(id);
      inst.outputs.push_back(copyId);
      inst.loc = locString(terminator->getLoc());
      out.instructions.push_back(std::move(inst));
      boundRoots.insert(copyId);
      id = copyId;
    } else {
      out.tensors[id].name = name.getValue().str();
    }
    out.outputs.push_back({name.getValue().str(), id});
  }
  return success();
}

LogicalResult Collector::run() {
  if (func.getBody().getBlocks().size() != 1)
    return func.emitError() << "@" << func.getName() << " must have exactly one block";
  if (failed(collectArguments()))
    return failure();
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator())
    if (failed(collectOp(&op)))
      return failure();
  Operation *terminator = body.getTerminator();
  if (!llvm::isa<func::ReturnOp>(terminator))
    return terminator->emitError() << "expected func.return to end @" << func.getName();
  return collectOutputs(terminator);
}

/// The parameter name p of a state "<p>.<suffix>" (the longest known parameter before a dot),
/// or "" when there is none.
llvm::StringRef stateParam(llvm::StringRef state, const ModuleTables &tables) {
  for (size_t dot = state.rfind('.'); dot != llvm::StringRef::npos && dot > 0;
       dot = state.rfind('.', dot)) {
    llvm::StringRef p = state.take_front(dot);
    if (tables.params.count(p))
      return p;
  }
  return "";
}

/// The module walk: classifies every argument of every lowered function, checks that one name
/// means one type everywhere, and finds the trainable parameters.
LogicalResult collectTables(ModuleOp moduleOp, llvm::ArrayRef<func::FuncOp> funcs,
                            ModuleTables &tables) {
  for (func::FuncOp func : funcs) {
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto inputName = func.getArgAttrOfType<StringAttr>(i, kInputAttr);
      auto paramName = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
      auto stateName = func.getArgAttrOfType<StringAttr>(i, kStateAttr);
      int kinds = int(bool(inputName)) + int(bool(paramName)) + int(bool(stateName));
      if (kinds != 1 || (stateName && !tables.train && !tables.generate)) {
        if (!tables.train)
          return func.emitError() << "argument #" << i << " must carry exactly one of '"
                                  << kInputAttr << "' and '" << kParamAttr << "'"
                                  << (stateName ? " ('" + kStateAttr.str() +
                                                      "' needs a train-mode module, one with '" +
                                                      kTrainAttr.str() + "')"
                                                : std::string());
        return func.emitError() << "argument #" << i << " must carry exactly one of '"
                                << kInputAttr << "', '" << kParamAttr << "' and '" << kStateAttr
                                << "'";
      }
      llvm::StringRef name = inputName   ? inputName.getValue()
                             : paramName ? paramName.getValue()
                                         : stateName.getValue();
      std::string why;
      auto type = toTensorType(arg.getType(), why);
      if (!type)
        return func.emitError() << "argument #" << i << " ('" << name << "'): " << why;
      if (name.empty())
        return func.emitError() << "argument #" << i << " has an empty name";
      if (inputName)
        continue;
      if (name.starts_with("__"))
        return func.emitError() << (paramName ? "parameter" : "state") << " name '" << name
                                << "' is reserved by safetensors (starts with \"__\")";

      auto sharding = argSharding(func, i, name, *type, tables.mesh);
      if (failed(sharding))
        return failure();
      if (stateName) {
        auto [it, inserted] = tables.states.try_emplace(name);
        if (inserted) {
          it->second = {*type, *sharding, arg.getType(), func, i};
          tables.stateOrder.push_back(name.str());
        } else if (it->second.mlirType != arg.getType()) {
          return func.emitError() << "state '" << name << "' (argument #" << i << ") is "
                                  << arg.getType() << " here but " << it->second.mlirType
                                  << " in @" << it->second.firstFunc.getName();
        } else if (it->second.sharding.has_value() != sharding->has_value() ||
                   (*sharding && !sameSharding(**sharding, *it->second.sharding))) {
          return func.emitError() << "state '" << name << "' (argument #" << i
                                  << ") has another '" << kShardingAttr << "' than in @"
                                  << it->second.firstFunc.getName();
        }
        continue;
      }

      // A sharded argument is the local shard; its data is the global tensor.
      TensorType globalType = *sharding ? globalTensorType(*type, **sharding) : *type;
      auto value = func.getArgAttrOfType<ElementsAttr>(i, kValueAttr);
      if (value && (value.getShapedType().getShape() != llvm::ArrayRef<int64_t>(globalType.shape) ||
                    value.getShapedType().getElementType() !=
                        llvm::cast<ShapedType>(arg.getType()).getElementType())) {
        InFlightDiagnostic diag = func.emitError() << "parameter '" << name << "' has data of type "
                                                   << value.getShapedType() << " but is declared "
                                                   << arg.getType();
        if (*sharding)
          diag << " (sharded: its data must be the global tensor, of shape "
               << RankedTensorType::get(globalType.shape,
                                        llvm::cast<ShapedType>(arg.getType()).getElementType())
               << ")";
        return diag;
      }
      auto [it, inserted] = tables.params.try_emplace(name);
      ParamInfo &info = it->second;
      if (inserted) {
        info.type = *type;
        info.globalType = globalType;
        info.sharding = *sharding;
        info.mlirType = arg.getType();
        info.firstFunc = func;
        info.firstArg = i;
        info.source = name.str();
        tables.paramOrder.push_back(name.str());
      } else if (info.mlirType != arg.getType()) {
        return func.emitError() << "parameter '" << name << "' (argument #" << i << ") is "
                                << arg.getType() << " here but " << info.mlirType << " in @"
                                << info.firstFunc.getName();
      } else if (info.sharding.has_value() != sharding->has_value() ||
                 (*sharding && !sameSharding(**sharding, *info.sharding))) {
        return func.emitError() << "parameter '" << name << "' (argument #" << i
                                << ") has another '" << kShardingAttr << "' than in @"
                                << info.firstFunc.getName();
      }
      if (value) {
        if (info.value && info.value != value)
          return func.emitError() << "parameter '" << name << "' (argument #" << i
                                  << ") has other '" << kValueAttr << "' data than in @"
                                  << info.firstFunc.getName();
        info.value = value;
      }
      if (auto source = func.getArgAttrOfType<StringAttr>(i, kSourceAttr))
        info.source = source.getValue().str();
      if (Attribute noDecay = func.getArgAttr(i, kNoDecayAttr))
        info.noDecay = !llvm::isa<BoolAttr>(noDecay) || llvm::cast<BoolAttr>(noDecay).getValue();
    }
  }

  for (const std::string &name : tables.paramOrder) {
    const ParamInfo &info = tables.params[name];
    if (!info.value)
      return info.firstFunc.emitError() << "parameter '" << name << "' (argument #"
                                        << info.firstArg << ") has no '" << kValueAttr
                                        << "' data";
    if (tables.states.count(name))
      return info.firstFunc.emitError() << "'" << name
                                        << "' names both a parameter and a state";
  }
  if (!tables.train)
    return success();

  // Trainable: a parameter with a gradient accumulator, or one an update op writes.
  for (const std::string &state : tables.stateOrder) {
    const StateInfo &info = tables.states[state];
    llvm::StringRef p = stateParam(state, tables);
    if (p.empty())
      return info.firstFunc.emitError()
             << "state '" << state << "' (argument #" << info.firstArg
             << ") must be named \"<parameter>.<kind>\" after a parameter of the module";
    if (llvm::StringRef(state).drop_front(p.size()) == ".grad")
      tables.params[p].trainable = tables.params[p].gradient = true;
  }
  for (func::FuncOp func : funcs) {
    WalkResult walk = func.walk([&](Operation *op) {
      const OpLowering *row = lookupOpLowering(op->getName().getStringRef());
      if (!row || row->kind != OpLowering::Kind::Update)
        return WalkResult::advance();
      for (unsigned i = 0, e = op->getNumOperands(); i + row->readOnlyTail < e; ++i) {
        auto arg = llvm::dyn_cast<BlockArgument>(op->getOperand(i));
        if (!arg || arg.getOwner()->getParentOp() != func.getOperation())
          continue; // collectOp names the problem
        if (auto p = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kParamAttr)) {
          ParamInfo &info = tables.params[p.getValue()];
          info.trainable = true;
          // update_buffer writes a buffer (BatchNorm's running statistics), which is a state of
          // the plan but no trained parameter of `trainable`.
          info.gradient |= !llvm::isa<UpdateBufferOp>(op);
          if (auto wd = op->getAttrOfType<FloatAttr>("weight_decay"))
            info.weightDecay = wd.getValueAsDouble();
        }
      }
      return WalkResult::advance();
    });
    (void)walk;
  }
  // no_decay: marked on the argument, or the optimizer decays some parameters but not this one
  // (colossal-optimizer gives a `no_decay` match weight_decay 0).
  bool anyDecay = llvm::any_of(tables.params, [](const auto &entry) {
    return entry.getValue().weightDecay.value_or(0) != 0;
  });
  for (auto &entry : tables.params)
    if (anyDecay && entry.getValue().weightDecay == 0.0)
      entry.getValue().noDecay = true;

  // The passes' own list of trainable parameters (colossal.train's `trainable`), when present,
  // must be the one found here: a mismatch means the module breaks the conventions.
  if (auto dict = moduleOp->getAttrOfType<DictionaryAttr>(kTrainAttr))
    if (auto listed = dict.getAs<ArrayAttr>("trainable")) {
      llvm::StringSet<> names;
      for (Attribute a : listed) {
        auto name = llvm::dyn_cast<StringAttr>(a);
        if (!name || !tables.params.count(name.getValue()) ||
            !tables.params[name.getValue()].gradient)
          return moduleOp.emitError()
                 << "'" << kTrainAttr << "': 'trainable' lists " << a
                 << ", which is not a parameter with a gradient accumulator or an update";
        names.insert(name.getValue());
      }
      for (const std::string &name : tables.paramOrder)
        if (tables.params[name].gradient && !names.contains(name))
          return moduleOp.emitError() << "'" << kTrainAttr << "': 'trainable' does not list '"
                                      << name << "', which has a gradient accumulator or an "
                                      << "update";
    }
  // Every state belongs to a trainable parameter.
  for (const std::string &state : tables.stateOrder) {
    llvm::StringRef p = stateParam(state, tables);
    if (!tables.params[p].trainable) {
      const StateInfo &info = tables.states[state];
      return info.firstFunc.emitError()
             << "state '" << state << "' belongs to parameter '" << p
             << "', which is frozen (no gradient accumulator '" << p
             << ".grad' and no update op writes it)";
    }
  }
  return success();
}

} // namespace

llvm::ArrayRef<ProgramRole> programRoles(bool train) {
  static constexpr ProgramRole kTrain[] = {ProgramRole::Forward, ProgramRole::Eval,
                                           ProgramRole::TrainStep, ProgramRole::OptimizerStep};
  return train ? llvm::ArrayRef<ProgramRole>(kTrain) : llvm::ArrayRef<ProgramRole>(kTrain).take_front(1);
}

LogicalResult collectModule(ModuleOp moduleOp, CollectedModule &out) {
  ModuleTables tables;
  tables.train = out.train = moduleOp->hasAttr(kTrainAttr);
  tables.generate = moduleOp->hasAttr(kGenerateAttr);
  if (MeshOp mesh = lookupMesh(moduleOp))
    for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getShape()))
      tables.mesh.push_back({llvm::cast<StringAttr>(axis).getValue().str(), size});
  llvm::SmallVector<func::FuncOp, 4> funcs;
  // Mode generate: the step programs, by token count, and no forward.
  if (tables.generate) {
    std::vector<std::pair<int64_t, func::FuncOp>> steps;
    for (func::FuncOp f : moduleOp.getOps<func::FuncOp>())
      if (programRole(f) == ProgramRole::Generate)
        steps.emplace_back(f->getAttrOfType<IntegerAttr>(kTokensAttr).getInt(), f);
    if (steps.empty())
      return moduleOp.emitError() << "a generate module (one with '" << kGenerateAttr
                                  << "') must define generate programs";
    std::sort(steps.begin(), steps.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    for (auto &[n, f] : steps)
      funcs.push_back(f);
  }
  for (ProgramRole role : programRoles(out.train)) {
    if (tables.generate)
      break;
    func::FuncOp func = lookupProgram(moduleOp, role);
    if (!func) {
      if (out.train)
        return moduleOp.emitError()
               << "a train-mode module (one with '" << kTrainAttr << "') must define the "
               << programRoleName(role) << " program (a func.func with " << kProgramAttr << " = \""
               << programRoleName(role) << "\"; docs/training.md: forward, eval, train_step, "
               << "optimizer_step)";
      return moduleOp.emitError() << "no forward program (a func.func with " << kProgramAttr
                                  << " = \"forward\") to lower to a plan";
    }
    funcs.push_back(func);
  }
  // Pipeline parallelism: the stage programs, by stage, each stage forward, backward, optimizer.
  {
    std::vector<std::tuple<int64_t, int, func::FuncOp>> staged;
    for (func::FuncOp f : moduleOp.getOps<func::FuncOp>()) {
      std::optional<ProgramRole> role = programRole(f);
      if (!role || (*role != ProgramRole::StageForward && *role != ProgramRole::StageBackward &&
                    *role != ProgramRole::StageOptimizer && *role != ProgramRole::StageBackwardWeight))
        continue;
      auto stage = f->getAttrOfType<IntegerAttr>(kStageAttr);
      staged.emplace_back(stage ? stage.getInt() : -1, static_cast<int>(*role), f);
    }
    std::sort(staged.begin(), staged.end(), [](const auto &a, const auto &b) {
      return std::make_pair(std::get<0>(a), std::get<1>(a)) < std::make_pair(std::get<0>(b), std::get<1>(b));
    });
    for (auto &entry : staged)
      funcs.push_back(std::get<2>(entry));
  }
  if (failed(collectTables(moduleOp, funcs, tables)))
    return failure();

  // Weights: every parameter once, by name (a trainable one as its state's initial value).
  for (const std::string &name : tables.paramOrder) {
    const ParamInfo &info = tables.params[name];
    tables.weightNames.insert(name);
    llvm::ArrayRef<char> data;
    if (failed(weightData(info.value, info.globalType,
                          [&] {
                            return info.firstFunc.emitError()
                                   << "parameter '" << name << "' (argument #" << info.firstArg
                                   << "): ";
                          },
                          out, data)))
      return failure();
    out.weights.push_back({name, info.globalType, data});
  }
  // States: the trainable parameters and their companions, in first-use order.
  auto addState = [&](const std::string &name, const TensorType &type,
                      plan::StateTensor::Role role) -> plan::StateTensor & {
    plan::StateTensor &st = out.states.emplace_back();
    st.set_name(name);
    st.set_dtype(type.dtype);
    for (int64_t d : type.shape)
      st.add_shape(d);
    st.set_role(role);
    return st;
  };
  if (tables.generate)
    for (const std::string &name : tables.stateOrder)
      addState(name, tables.states[name].type, plan::StateTensor::KV_CACHE);
  if (out.train) {
    for (const std::string &name : tables.paramOrder) {
      const ParamInfo &info = tables.params[name];
      if (!info.trainable) {
        out.frozen.push_back(name);
        continue;
      }
      plan::StateTensor &st = addState(name, info.type, plan::StateTensor::PARAM);
      st.set_init_weight(name);
      st.set_source(info.source);
      st.set_no_decay(info.noDecay);
      if (info.sharding)
        *st.mutable_sharding() = *info.sharding;
      uint64_t count = 1;
      for (int64_t d : info.type.shape)
        count *= static_cast<uint64_t>(d);
      out.trainable.push_back({name, info.type, count, !info.gradient});
    }
    for (const std::string &name : tables.stateOrder) {
      llvm::StringRef p = stateParam(name, tables);
      bool grad = llvm::StringRef(name).drop_front(p.size()) == ".grad";
      const StateInfo &info = tables.states[name];
      plan::StateTensor &st =
          addState(name, info.type, grad ? plan::StateTensor::GRAD : plan::StateTensor::OPTIMIZER);
      st.set_param(p.str());
      // Its own sharding, else its parameter's when it is shaped like the parameter's shard.
      const ParamInfo &param = tables.params[p];
      if (info.sharding)
        *st.mutable_sharding() = *info.sharding;
      else if (param.sharding && info.type.shape == param.type.shape)
        *st.mutable_sharding() = *param.sharding;
    }
  }

  for (func::FuncOp func : funcs) {
    CollectedProgram &program = out.programs.emplace_back();
    program.name = func.getName().str();
    program.role = *programRole(func);
    program.func = func;
    if (auto stage = func->getAttrOfType<IntegerAttr>(kStageAttr))
      program.stage = stage.getInt();
    if (failed(Collector(func, tables, out, program).run()))
      return failure();
  }
  return success();
}

} // namespace colossal

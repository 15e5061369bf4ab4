//===- Importer.cpp - ONNX ModelProto → colossal dialect ------------------===//
//
// Model-level work: reading the file (and external data), binding input shapes and values from
// the spec, initializers as parameters or constants, walking nodes, and building @forward.
// The per-op translations live in OpImporters.cpp.
//===----------------------------------------------------------------------===//
#include "colossal/Import/ONNX.h"
#include "ImporterImpl.h"
#include "SchemaCheck.h"
#include "dialects/Colossal/Programs.h"

#include "colossal/runtime/ExternalData.h"
#include "colossal/runtime/Npy.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

using namespace mlir;

namespace colossal::onnx_import {

Type elementTypeFor(int t, MLIRContext *ctx) {
  switch (t) {
  case onnx::TensorProto::FLOAT:
    return Float32Type::get(ctx);
  case onnx::TensorProto::FLOAT16:
    return Float16Type::get(ctx);
  case onnx::TensorProto::BFLOAT16:
    return BFloat16Type::get(ctx);
  case onnx::TensorProto::DOUBLE:
    return Float64Type::get(ctx);
  case onnx::TensorProto::INT64:
    return IntegerType::get(ctx, 64);
  case onnx::TensorProto::INT32:
    return IntegerType::get(ctx, 32);
  case onnx::TensorProto::INT16:
    return IntegerType::get(ctx, 16);
  case onnx::TensorProto::INT8:
    return IntegerType::get(ctx, 8);
  case onnx::TensorProto::UINT8:
    return IntegerType::get(ctx, 8, IntegerType::Unsigned);
  case onnx::TensorProto::UINT16:
    return IntegerType::get(ctx, 16, IntegerType::Unsigned);
  case onnx::TensorProto::UINT32:
    return IntegerType::get(ctx, 32, IntegerType::Unsigned);
  case onnx::TensorProto::UINT64:
    return IntegerType::get(ctx, 64, IntegerType::Unsigned);
  case onnx::TensorProto::BOOL:
    return IntegerType::get(ctx, 1);
  default:
    return Type();
  }
}

std::string onnxTypeName(int t) {
  if (onnx::TensorProto_DataType_IsValid(t))
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(t));
  return "type " + std::to_string(t);
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

class GraphImporter {
public:
  GraphImporter(StringRef path, const ImportOptions &options, MLIRContext &ctx)
      : path(path.str()), options(options), ctx(ctx), b(&ctx) {}

  OwningOpRef<ModuleOp> run();

  /// Whether `name` is an initializer of the graph being imported (isInitializerName).
  bool hasInitializer(const std::string &name) const { return initializers.count(name) != 0; }

  /// File-level error: `error: MODEL.onnx: message`.
  void fileError(const Twine &msg) {
    if (!failed_)
      llvm::errs() << "error: " << path << ": " << msg << "\n";
    failed_ = true;
  }

  /// TensorProto (with raw, typed or external data) → DenseElementsAttr. `what` names it in errors.
  FailureOr<DenseElementsAttr> tensorAttr(const onnx::TensorProto &t, const Twine &what);

  /// Imports a control-flow body (If branch, Loop/Scan body) inline at the current insertion
  /// point: `inputs` bind the subgraph's formal inputs in order; names not defined in the
  /// subgraph resolve to the enclosing scopes. The subgraph's names are dropped afterwards.
  /// Errors are printed (naming the node inside the subgraph) and yield failure.
  FailureOr<SmallVector<Value>> importSubgraph(const onnx::GraphProto &graph,
                                               ArrayRef<Value> inputs);
  bool hasFailed() const { return failed_; }

  /// The model inputs and parameters (arguments of @forward) that `v` is computed from, each in
  /// argument order: what a value that does not fold to a constant depends on.
  void argumentsFeeding(Value v, SmallVectorImpl<std::string> &inputs,
                        SmallVectorImpl<std::string> &params) const;

private:
  LogicalResult loadModel();
  LogicalResult importInputs();
  /// Graph inputs that are also initializers (an exporter's keep_initializers_as_inputs, IR < 4):
  /// the spec's `values:` overrides the initializer (ONNX: such an initializer is the input's
  /// default), so the name leaves `initializers` and imports as a value-bound input; `inputs:` may
  /// restate the initializer's shape only. Adds the names to `seen`.
  LogicalResult bindInitializerInputs(llvm::StringSet<> &seen);
  /// Reads the `values:` arrays of the graph's inputs into specValues.
  LogicalResult readSpecValues();
  /// ONNX IR: one dim_param is one size throughout a graph. Records the size of each dim_param of
  /// an input the spec binds (`inputs:` shape, or the shape of its `values:` array) in dimParams;
  /// inputShape gives those sizes to the inputs the spec leaves unbound. Two bindings that give
  /// one dim_param different sizes are an error naming both inputs.
  LogicalResult bindDimParams();
  /// ImportOptions::tokenRows: every integer input of rank 2 the spec leaves unbound gets shape
  /// [1, tokenRows], a dim the model fixes keeping its size.
  void bindTokenInputs();
  /// Input `name`'s import shape: declared dims, then the spec's binding (or dimParams). Dims
  /// still dynamic stay kDynamic (importInputs reports them).
  FailureOr<SmallVector<int64_t>> inputShape(const std::string &name,
                                             const onnx::TypeProto::Tensor &tt);
  /// Input `name` as a constant of its `values:` array; errors name the .npy file.
  LogicalResult bindSpecValue(const std::string &name, const onnx::TypeProto::Tensor &tt,
                              ArrayRef<int64_t> shape);
  LogicalResult importNode(const onnx::NodeProto &node);
  Value initializer(const std::string &name, bool asConstant);
  /// The bytes of `t`'s external data (runtime/ExternalData.h: confined to the model's folder).
  FailureOr<std::unique_ptr<llvm::MemoryBuffer>> readExternal(const onnx::TensorProto &t,
                                                              const Twine &what);
  Location nodeLoc(const onnx::NodeProto &node);

  std::string path;
  ImportOptions options; // a copy: tokenRows adds the token inputs' shapes to inputShapes
  MLIRContext &ctx;
  OpBuilder b;
  onnx::ModelProto model;
  int64_t opset = 0;
  /// Opset of the ai.onnx.preview.training domain (0: not imported).
  int64_t trainingOpset = 0;
  bool failed_ = false;

  Block *body = nullptr;
  SmallVector<DictionaryAttr> argAttrs;
  std::unordered_map<std::string, Value> values;
  std::unordered_map<std::string, const onnx::TensorProto *> initializers;
  std::unordered_map<const onnx::TensorProto *, Value> constValues;
  /// Parameters by (initializer, name): in train mode each Identity alias is its own parameter.
  std::map<std::pair<const onnx::TensorProto *, std::string>, Value> paramValues;
  /// Train mode: initializers some node reads as a weight (see markTrainedInitializers); they are
  /// parameters at every use, never folded into constants.
  llvm::DenseSet<const onnx::TensorProto *> trainedInitializers;
  /// Train mode: float tensors that would train but hold values no weight has (isMaskTensor), by
  /// tensor, once each.
  llvm::DenseMap<const onnx::TensorProto *, bool> maskTensors;
  void markTrainedInitializers();
  /// Train mode: the `value` tensors of main-graph float Constant nodes, imported as initializers
  /// named after the node's output (docs/training.md "Which initializers train").
  std::unordered_map<const onnx::TensorProto *, std::string> constantNodeOutputs;
  void registerConstantWeights();
  bool isRegisteredConstant(const onnx::NodeProto &node) const;
  /// An initializer's name, or the output name of the Constant node holding `t`.
  const std::string &tensorName(const onnx::TensorProto &t) const;
  /// Train mode: the main graph's initializers and registered Constant tensors in model order, and
  /// the (op type, input index) of each node that reads them (through Identity too).
  std::vector<const onnx::TensorProto *> weightOrder;
  std::unordered_map<const onnx::TensorProto *, std::vector<std::pair<std::string, int>>> readers;
  /// Sets kConstantWeightsAttr: each tensor of weightOrder that is not a parameter, and why.
  void recordConstantWeights(ModuleOp module);
  std::string constantReason(const onnx::TensorProto &t);
  llvm::StringSet<> graphOutputs;
  /// The spec's `values:` arrays by input name (readSpecValues).
  llvm::StringMap<runtime::NpyArray> specValues;
  /// dim_param → (size, the input whose binding gave it) (bindDimParams).
  llvm::StringMap<std::pair<int64_t, std::string>> dimParams;
  size_t anonymous = 0;
};

FailureOr<std::unique_ptr<llvm::MemoryBuffer>>
GraphImporter::readExternal(const onnx::TensorProto &t, const Twine &what) {
  SmallVector<std::pair<StringRef, StringRef>> entries;
  for (const auto &kv : t.external_data())
    entries.emplace_back(kv.key(), kv.value());
  auto data = [&]() -> llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> {
    auto ref = runtime::parseExternalDataRef(entries);
    if (!ref)
      return ref.takeError();
    return runtime::readExternalData(path, *ref);
  }();
  if (!data) {
    fileError(what + ": " + llvm::toString(data.takeError()));
    return failure();
  }
  return std::move(*data);
}

FailureOr<DenseElementsAttr> GraphImporter::tensorAttr(const onnx::TensorProto &t,
                                                       const Twine &what) {
  Type et = elementTypeFor(t.data_type(), &ctx);
  if (!et) {
    fileError(what + ": unsupported data type " + onnxTypeName(t.data_type()));
    return failure();
  }
  SmallVector<int64_t> shape;
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) {
      fileError(what + ": negative dimension " + Twine(d));
      return failure();
    }
    if (d != 0 && numel > kMaxTensorElements / d) {
      fileError(what + ": the dims hold more than 2^40 elements");
      return failure();
    }
    shape.push_back(d);
    numel *= d;
  }
  auto type = RankedTensorType::get(shape, et);
  StringRef raw;
  bool hasRaw = false;
  std::unique_ptr<llvm::MemoryBuffer> external;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    auto data = readExternal(t, what);
    if (failed(data))
      return failure();
    external = std::move(*data);
    raw = external->getBuffer();
    hasRaw = true;
  } else if (t.has_raw_data()) {
    raw = t.raw_data();
    hasRaw = true;
  }
  unsigned bytes = et.isInteger(1) ? 1 : (et.getIntOrFloatBitWidth() + 7) / 8;
  if (hasRaw) {
    if (int64_t(raw.size()) != numel * int64_t(bytes)) {
      fileError(what + ": holds " + Twine(raw.size()) + " bytes, expected " +
                Twine(numel * bytes) + " for shape and type");
      return failure();
    }
    if (et.isInteger(1)) {
      SmallVector<bool> v(numel);
      for (int64_t k = 0; k < numel; ++k)
        v[k] = raw[k] != 0;
      return DenseElementsAttr::get(type, v);
    }
    return DenseElementsAttr::getFromRawBuffer(type, ArrayRef<char>(raw.data(), raw.size()));
  }
  // Typed fields (ONNX stores 8/16-bit types, bool and half floats in int32_data, uint32 and uint64
  // in uint64_data).
  auto count = [&](int64_t n) -> LogicalResult {
    if (n == numel)
      return success();
    fileError(what + ": holds " + Twine(n) + " values, expected " + Twine(numel));
    return failure();
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    if (failed(count(t.float_data_size())))
      return failure();
    return DenseElementsAttr::get(type, ArrayRef<float>(t.float_data().data(), numel));
  case onnx::TensorProto::DOUBLE:
    if (failed(count(t.double_data_size())))
      return failure();
    return DenseElementsAttr::get(type, ArrayRef<double>(t.double_data().data(), numel));
  case onnx::TensorProto::INT64:
    if (failed(count(t.int64_data_size())))
      return failure();
    return DenseElementsAttr::get(type, ArrayRef<int64_t>(t.int64_data().data(), numel));
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64: {
    if (failed(count(t.uint64_data_size())))
      return failure();
    unsigned w = et.getIntOrFloatBitWidth();
    SmallVector<APInt> v;
    for (uint64_t x : t.uint64_data())
      v.push_back(APInt(w, x, /*isSigned=*/false, /*implicitTrunc=*/true));
    return DenseElementsAttr::get(type, v);
  }
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16: {
    if (failed(count(t.int32_data_size())))
      return failure();
    SmallVector<uint16_t> v(t.int32_data().begin(), t.int32_data().end());
    return DenseElementsAttr::getFromRawBuffer(
        type, ArrayRef<char>(reinterpret_cast<const char *>(v.data()), v.size() * 2));
  }
  default: {
    if (failed(count(t.int32_data_size())))
      return failure();
    if (et.isInteger(1)) {
      SmallVector<bool> v;
      for (int32_t x : t.int32_data())
        v.push_back(x != 0);
      return DenseElementsAttr::get(type, v);
    }
    unsigned w = et.getIntOrFloatBitWidth();
    SmallVector<APInt> v;
    for (int32_t x : t.int32_data())
      v.push_back(APInt(w, uint64_t(int64_t(x)), /*isSigned=*/true, /*implicitTrunc=*/true));
    return DenseElementsAttr::get(type, v);
  }
  }
}

LogicalResult GraphImporter::loadModel() {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf) {
    fileError("cannot read model: " + buf.getError().message());
    return failure();
  }
  if (!model.ParseFromArray((*buf)->getBufferStart(), int((*buf)->getBufferSize()))) {
    fileError("not a valid ONNX model (protobuf parse failed)");
    return failure();
  }
  if (!model.has_graph()) {
    fileError("model has no graph");
    return failure();
  }
  bool otherDomains = false;
  for (const auto &os : model.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx")
      opset = os.version();
    else if (os.domain() == kTrainingDomain)
      trainingOpset = os.version();
    else
      otherDomains = true;
  }
  if (trainingOpset != 0 && trainingOpset != 1) {
    fileError("domain '" + Twine(kTrainingDomain) + "' opset " + Twine(trainingOpset) +
              " is not supported (supported: 1)");
    return failure();
  }
  if (opset == 0 && model.opset_import_size() == 0)
    opset = 1; // IR version < 3 models carry no opset_import: opset 1
  // A model of training-domain operators alone (ONNX's optimizer tests) imports no default domain;
  // a default-domain node in it is reported by importNode.
  if (opset == 0 && trainingOpset != 0 && !otherDomains)
    return success();
  if (opset == 0) {
    fileError(otherDomains ? "the model imports no default-domain (ai.onnx) opset; only the "
                             "default domain is supported"
                           : "default-domain opset 0 is not valid");
    return failure();
  }
  if (opset > 21) {
    fileError("default-domain opset " + Twine(opset) + " is not supported (supported: 1 to 21; "
              "most operators from opset 7)");
    return failure();
  }
  return success();
}

/// Whether input `index` of `opType` reads a buffer rather than a weight (docs/training.md "Which
/// initializers train"): every input of shape and index arithmetic, comparisons, masks and table
/// lookups; BatchNormalization's running statistics (input_mean, input_var).
static bool readsBuffer(llvm::StringRef opType, int index) {
  static const llvm::StringSet<> bufferReaders = {
      "Shape", "Slice", "Equal", "Less", "Greater", "Where", "Not", "Trilu",
      "ConstantOfShape", "Range", "Size", "NonZero", "Unique", "Compress", "Resize", "Upsample"};
  static const llvm::StringMap<SmallVector<int, 2>> bufferInputs = {
      {"BatchNormalization", {3, 4}}};
  if (bufferReaders.contains(opType))
    return true;
  auto it = bufferInputs.find(opType);
  return it != bufferInputs.end() && llvm::is_contained(it->second, index);
}

/// Train mode: a float initializer (or float Constant node, registerConstantWeights) is a weight (a
/// parameter, trained) unless every node reading it
/// (directly or through Identity) is one that reads buffers, not weights: shape and index
/// arithmetic, comparisons, masks and table lookups (Slice or Where of a RoPE or mask table).
/// Value-preserving data movement (Transpose, Reshape, Squeeze, Unsqueeze, Flatten, Cast, Expand,
/// Concat) counts as a weight use, so a Linear weight exported as `Transpose(W)` (torch with
/// constant folding off) trains; and an initializer with one weight use is a parameter at all its
/// uses, so no stale constant copy of a trained weight survives. Nodes inside If, Loop and Scan
/// bodies count like the graph's own. Records every reader for constantReason.
void GraphImporter::markTrainedInitializers() {
  llvm::StringMap<const onnx::TensorProto *> alias;
  for (const auto &[name, t] : initializers)
    alias[name] = t;
  // The nodes of If/Loop/Scan bodies read outer initializers too: each graph's nodes in order,
  // a node's bodies right after it.
  std::vector<const onnx::NodeProto *> nodes;
  std::function<void(const onnx::GraphProto &)> collect = [&](const onnx::GraphProto &g) {
    for (const auto &node : g.node()) {
      nodes.push_back(&node);
      for (const auto &a : node.attribute()) {
        if (a.has_g())
          collect(a.g());
        for (const auto &sub : a.graphs())
          collect(sub);
      }
    }
  };
  collect(model.graph());
  for (const onnx::NodeProto *n : nodes) {
    const onnx::NodeProto &node = *n;
    if (node.op_type() == "Identity" && node.input_size() == 1 && node.output_size() == 1) {
      if (auto it = alias.find(node.input(0)); it != alias.end())
        alias[node.output(0)] = it->second;
      continue;
    }
    for (int i = 0; i < node.input_size(); ++i)
      if (auto it = alias.find(node.input(i)); it != alias.end()) {
        readers[it->second].push_back({node.op_type(), i});
        if (!readsBuffer(node.op_type(), i))
          trainedInitializers.insert(it->second);
      }
  }
}

/// Only a Constant with one float `value` tensor of more than one element (a possible weight),
/// whose output no other node, input or initializer defines; the rest (scalars, integer shape
/// constants, value_float(s), sparse values) import as before.
void GraphImporter::registerConstantWeights() {
  const auto &graph = model.graph();
  llvm::StringMap<int> defined;
  for (const auto &input : graph.input())
    ++defined[input.name()];
  for (const auto &node : graph.node())
    for (const std::string &out : node.output())
      ++defined[out];
  for (const auto &node : graph.node()) {
    if (node.op_type() != "Constant" || !(node.domain().empty() || node.domain() == "ai.onnx") ||
        node.input_size() != 0 || node.output_size() != 1 || node.attribute_size() != 1)
      continue;
    const onnx::AttributeProto &a = node.attribute(0);
    if (a.name() != "value" || a.type() != onnx::AttributeProto::TENSOR || !a.has_t())
      continue;
    Type et = elementTypeFor(a.t().data_type(), &ctx);
    int64_t numel = 1;
    for (int64_t d : a.t().dims())
      numel *= d;
    const std::string &out = node.output(0);
    if (!et || !llvm::isa<FloatType>(et) || numel <= 1 || out.empty() ||
        defined.lookup(out) != 1 || initializers.count(out))
      continue;
    initializers[out] = &a.t();
    constantNodeOutputs[&a.t()] = out;
    weightOrder.push_back(&a.t());
  }
}

bool GraphImporter::isRegisteredConstant(const onnx::NodeProto &node) const {
  if (node.op_type() != "Constant" || node.output_size() != 1 || node.attribute_size() != 1)
    return false;
  auto it = initializers.find(node.output(0));
  return it != initializers.end() && it->second == &node.attribute(0).t() &&
         constantNodeOutputs.count(it->second);
}

const std::string &GraphImporter::tensorName(const onnx::TensorProto &t) const {
  auto it = constantNodeOutputs.find(&t);
  return it != constantNodeOutputs.end() ? it->second : t.name();
}

/// "constant: integer, feeds Reshape's shape": the kind of tensor that never trains, then up to
/// two of the inputs that read it.
std::string GraphImporter::constantReason(const onnx::TensorProto &t) {
  Type et = elementTypeFor(t.data_type(), &ctx);
  int64_t numel = 1;
  for (int64_t d : t.dims())
    numel *= d;
  const auto &uses = readers[&t];
  std::string why = "constant: ";
  if (!llvm::isa<FloatType>(et))
    why += et.isInteger(1) ? "bool" : "integer";
  else if (uses.empty())
    why += "read by no node";
  else if (numel <= 1)
    why += "one element";
  else if (maskTensors.lookup(&t))
    why += "holds ±inf, NaN or |v| ≥ 1e30 (a mask, not a weight)";
  else
    why += "read only as a buffer";
  std::vector<std::string> feeds;
  for (const auto &[op, index] : uses) {
    std::string input = schemaInputName(op, opset, index);
    std::string feed = op + "'s " + (input.empty() ? "input " + std::to_string(index) : input);
    if (llvm::find(feeds, feed) == feeds.end())
      feeds.push_back(feed);
  }
  for (size_t i = 0; i < feeds.size() && i < 2; ++i)
    why += (i ? ", " : ", feeds ") + feeds[i];
  if (feeds.size() > 2)
    why += " and " + std::to_string(feeds.size() - 2) + " more";
  return why;
}

void GraphImporter::recordConstantWeights(ModuleOp module) {
  llvm::DenseSet<const onnx::TensorProto *> params;
  for (const auto &[key, value] : paramValues)
    params.insert(key.first);
  SmallVector<Attribute> rows;
  for (const onnx::TensorProto *t : weightOrder) {
    Type et = elementTypeFor(t->data_type(), &ctx);
    if (!et || params.contains(t))
      continue;
    SmallVector<int64_t> shape(t->dims().begin(), t->dims().end());
    rows.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("name", b.getStringAttr(tensorName(*t))),
         b.getNamedAttr("type", TypeAttr::get(RankedTensorType::get(shape, et))),
         b.getNamedAttr("why", b.getStringAttr(constantReason(*t)))}));
  }
  module->setAttr(kConstantWeightsAttr, b.getArrayAttr(rows));
}

/// Whether float `values` hold an element no trained weight has: ±inf, NaN or |v| ≥ 1e30.
static bool isMaskTensor(DenseElementsAttr values) {
  auto unlike = [](double v) { return !std::isfinite(v) || std::abs(v) >= 1e30; };
  if (values.getElementType().isF32()) {
    for (float v : values.getValues<float>())
      if (unlike(v))
        return true;
    return false;
  }
  for (const APFloat &v : values.getValues<APFloat>())
    if (unlike(v.convertToDouble()))
      return true;
  return false;
}

Value GraphImporter::initializer(const std::string &alias, bool asConstant) {
  const onnx::TensorProto &t = *initializers.at(alias);
  const std::string &name = tensorName(t);
  Type et = elementTypeFor(t.data_type(), &ctx);
  int64_t numel = 1;
  for (int64_t d : t.dims())
    numel *= d;
  // Float tensors with more than one element are parameters; everything else is a constant.
  if (options.trainParams && trainedInitializers.contains(&t))
    asConstant = false;
  bool param = et && llvm::isa<FloatType>(et) && numel > 1 && !(asConstant && numel <= kMaxFoldElements);
  // A tensor holding ±inf, NaN or huge values (an additive attention mask: 0 / -inf, or torch's
  // finfo.min) is no weight: training it would only spread non-finite gradients. It stays a
  // constant (docs/training.md "Which initializers train").
  const std::string what = (constantNodeOutputs.count(&t) ? "Constant '" : "initializer '") + name + "'";
  std::optional<DenseElementsAttr> read;  // the values, when the mask check read them first
  if (param && options.trainParams) {
    auto [it, inserted] = maskTensors.try_emplace(&t, false);
    if (inserted) {
      auto values = tensorAttr(t, what);
      if (failed(values))
        return Value();
      read = *values;
      it->second = isMaskTensor(*values);
    }
    if (it->second)
      param = false;
  }
  // Train mode (docs/training.md): an Identity of an initializer is a parameter of its own, named
  // after the Identity's output; `colossal.source` records the ONNX name for export.
  std::string paramName = options.trainParams ? alias : name;
  if (param) {
    if (auto it = paramValues.find({&t, paramName}); it != paramValues.end())
      return it->second;
  } else if (auto it = constValues.find(&t); it != constValues.end()) {
    return it->second;
  }
  FailureOr<DenseElementsAttr> attr = read ? FailureOr<DenseElementsAttr>(*read) : tensorAttr(t, what);
  if (failed(attr))
    return Value();
  if (param) {
    Value v = body->addArgument(attr->getType(), NameLoc::get(b.getStringAttr(paramName)));
    SmallVector<NamedAttribute> attrs = {b.getNamedAttr(kParamAttr, b.getStringAttr(paramName)),
                                         b.getNamedAttr(kValueAttr, *attr)};
    if (options.trainParams)
      attrs.push_back(b.getNamedAttr(kSourceAttr, b.getStringAttr(paramName)));
    argAttrs.push_back(b.getDictionaryAttr(attrs));
    paramValues[{&t, paramName}] = v;
    return v;
  }
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(body);
  Value v = ConstantOp::create(b, NameLoc::get(b.getStringAttr(name)), *attr);
  constValues[&t] = v;
  return v;
}

namespace {

std::string dimsText(ArrayRef<int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

/// The .npy dtype that holds values of an ONNX element type (the spec's `values:`).
bool npyHolds(Type et, runtime::DType dtype) {
  using runtime::DType;
  static const std::pair<std::pair<unsigned, IntegerType::SignednessSemantics>, DType> ints[] = {
      {{64, IntegerType::Signless}, DType::I64}, {{32, IntegerType::Signless}, DType::I32},
      {{1, IntegerType::Signless}, DType::Bool}, {{8, IntegerType::Unsigned}, DType::U8},
      {{16, IntegerType::Unsigned}, DType::U16}, {{32, IntegerType::Unsigned}, DType::U32},
      {{64, IntegerType::Unsigned}, DType::U64}};
  if (et.isF32())
    return dtype == DType::F32;
  auto it = llvm::dyn_cast<IntegerType>(et);
  if (!it)
    return false;
  for (const auto &[key, d] : ints)
    if (key.first == it.getWidth() && key.second == it.getSignedness())
      return dtype == d;
  return false;
}

} // namespace

LogicalResult GraphImporter::bindInitializerInputs(llvm::StringSet<> &seen) {
  for (const auto &input : model.graph().input()) {
    const std::string &name = input.name();
    auto init = initializers.find(name);
    if (init == initializers.end())
      continue;
    seen.insert(name);
    if (options.inputValues.count(name)) {
      initializers.erase(init); // imported below as an input bound to the spec's value
      continue;
    }
    auto bound = options.inputShapes.find(name);
    if (bound == options.inputShapes.end())
      continue;
    ArrayRef<int64_t> dims(init->second->dims().data(), init->second->dims_size());
    if (ArrayRef<int64_t>(bound->second) != dims) {
      fileError("input '" + name + "' is also an initializer (an exporter's "
                "keep_initializers_as_inputs), of shape " + dimsText(dims) +
                "; the spec's inputs give " + dimsText(bound->second) +
                " (bind another value with the spec's values)");
      return failure();
    }
  }
  return success();
}

LogicalResult GraphImporter::readSpecValues() {
  for (const auto &input : model.graph().input()) {
    const std::string &name = input.name();
    auto vf = options.inputValues.find(name);
    if (vf == options.inputValues.end() || initializers.count(name) || specValues.count(name))
      continue;
    auto arr = runtime::readNpy(vf->second);
    if (!arr) {
      fileError("input '" + name + "': spec values: " + llvm::toString(arr.takeError()));
      return failure();
    }
    specValues.try_emplace(name, std::move(*arr));
  }
  return success();
}

void GraphImporter::bindTokenInputs() {
  for (const auto &input : model.graph().input()) {
    const std::string &name = input.name();
    if (initializers.count(name) || options.inputShapes.count(name) ||
        options.inputValues.count(name) || !input.type().has_tensor_type() ||
        !input.type().tensor_type().has_shape())
      continue;
    const auto &tt = input.type().tensor_type();
    Type et = elementTypeFor(tt.elem_type(), &ctx);
    if (!et || !isa<IntegerType>(et) || tt.shape().dim_size() != 2)
      continue;
    std::vector<int64_t> shape{1, options.tokenRows};
    for (int i = 0; i < 2; ++i)
      if (tt.shape().dim(i).has_dim_value())
        shape[i] = tt.shape().dim(i).dim_value();
    options.inputShapes[name] = shape;
  }
}

LogicalResult GraphImporter::bindDimParams() {
  for (const auto &input : model.graph().input()) {
    const std::string &name = input.name();
    if (initializers.count(name) || !input.type().has_tensor_type() ||
        !input.type().tensor_type().has_shape())
      continue;
    ArrayRef<int64_t> given;
    if (auto s = options.inputShapes.find(name); s != options.inputShapes.end())
      given = s->second;
    else if (auto v = specValues.find(name); v != specValues.end())
      given = v->second.shape;
    else
      continue;
    const auto &shape = input.type().tensor_type().shape();
    if (int64_t(given.size()) != shape.dim_size())
      continue; // importInputs reports the rank
    for (int i = 0; i < shape.dim_size(); ++i) {
      const auto &dim = shape.dim(i);
      if (dim.has_dim_value() || dim.dim_param().empty())
        continue;
      auto [it, fresh] = dimParams.try_emplace(dim.dim_param(), given[i], name);
      if (!fresh && it->second.first != given[i]) {
        fileError("input '" + name + "': dim " + Twine(i) + " ('" + dim.dim_param() +
                  "') is bound to " + Twine(given[i]) + ", but input '" + it->second.second +
                  "' binds '" + dim.dim_param() + "' to " + Twine(it->second.first) +
                  " (one dim_param is one size throughout the graph)");
        return failure();
      }
    }
  }
  return success();
}

FailureOr<SmallVector<int64_t>> GraphImporter::inputShape(const std::string &name,
                                                         const onnx::TypeProto::Tensor &tt) {
  SmallVector<int64_t> shape;
  if (tt.has_shape())
    for (const auto &dim : tt.shape().dim())
      shape.push_back(dim.has_dim_value() ? dim.dim_value() : ShapedType::kDynamic);
  auto bound = options.inputShapes.find(name);
  if (bound != options.inputShapes.end()) {
    const auto &want = bound->second;
    if (tt.has_shape() && want.size() != shape.size()) {
      fileError("input '" + name + "': the spec's inputs give rank " + Twine(want.size()) +
                " but the model declares rank " + Twine(shape.size()));
      return failure();
    }
    for (size_t i = 0; i < shape.size(); ++i)
      if (!ShapedType::isDynamic(shape[i]) && shape[i] != want[i]) {
        fileError("input '" + name + "': the spec's inputs give dim " + Twine(i) + " = " +
                  Twine(want[i]) + " but the model fixes it to " + Twine(shape[i]));
        return failure();
      }
    shape.assign(want.begin(), want.end());
  } else if (!specValues.count(name)) {
    // Dims named like a dim the spec binds elsewhere (bindDimParams).
    for (size_t i = 0; i < shape.size(); ++i)
      if (ShapedType::isDynamic(shape[i]))
        if (auto it = dimParams.find(tt.shape().dim(i).dim_param()); it != dimParams.end())
          shape[i] = it->second.first;
  }
  int64_t n = 1;
  for (int64_t d : shape)
    if (!ShapedType::isDynamic(d)) {
      if (d != 0 && n > kMaxTensorElements / d) {
        fileError("input '" + name + "': the shape has more than 2^40 elements");
        return failure();
      }
      n *= d;
    }
  return shape;
}

LogicalResult GraphImporter::bindSpecValue(const std::string &name,
                                           const onnx::TypeProto::Tensor &tt,
                                           ArrayRef<int64_t> shape) {
  const runtime::NpyArray &arr = specValues.find(name)->second;
  const std::string &file = options.inputValues.find(name)->second;
  Type aet = elementTypeFor(tt.elem_type(), &ctx);
  if (!npyHolds(aet, arr.dtype)) {
    fileError("input '" + name + "': spec values file '" + file + "' has dtype " +
              runtime::dtypeName(arr.dtype) + ", the model expects " +
              onnxTypeName(tt.elem_type()));
    return failure();
  }
  SmallVector<int64_t> ashape(arr.shape.begin(), arr.shape.end());
  bool fits = !tt.has_shape() || shape.size() == ashape.size();
  for (size_t i = 0; fits && tt.has_shape() && i < shape.size(); ++i)
    fits = ShapedType::isDynamic(shape[i]) || shape[i] == ashape[i];
  if (!fits) {
    fileError("input '" + name + "': spec values file '" + file + "' has shape " +
              dimsText(ashape) + ", which does not match the input's shape");
    return failure();
  }
  auto atype = RankedTensorType::get(ashape, aet);
  const char *data = reinterpret_cast<const char *>(arr.data.data());
  DenseElementsAttr attr;
  if (aet.isInteger(1)) {
    SmallVector<bool> v(atype.getNumElements());
    for (size_t k = 0; k < v.size(); ++k)
      v[k] = data[k] != 0;
    attr = DenseElementsAttr::get(atype, v);
  } else {
    attr = DenseElementsAttr::getFromRawBuffer(atype, ArrayRef<char>(data, arr.bytes()));
  }
  values[name] = ConstantOp::create(b, NameLoc::get(b.getStringAttr(name)), attr);
  return success();
}

LogicalResult GraphImporter::importInputs() {
  const auto &graph = model.graph();
  for (const auto &init : graph.initializer()) {
    if (init.name().empty()) {
      fileError("an initializer has no name");
      return failure();
    }
    initializers[init.name()] = &init;
    weightOrder.push_back(&init);
  }
  llvm::StringSet<> seen;
  if (failed(bindInitializerInputs(seen)))
    return failure();
  if (options.trainParams) {
    registerConstantWeights();
    markTrainedInitializers();
  }
  if (options.tokenRows > 0)
    bindTokenInputs();
  if (failed(readSpecValues()) || failed(bindDimParams()))
    return failure();
  // A spec key naming no graph input is reported before any input's own error (a misspelt name
  // otherwise surfaces as the real input's unbound dynamic dims). A key naming an initializer
  // that is not among the graph inputs is not an input either.
  for (const auto &input : graph.input())
    if (!initializers.count(input.name()))
      seen.insert(input.name()); // IR < 4 lists initializers among the inputs
  auto unknown = [&](StringRef key, StringRef name) {
    fileError("spec " + key + ": the model has no input named '" + name + "'" +
              (initializers.count(name.str()) ? " (it is an initializer, not a graph input)" : ""));
    return failure();
  };
  for (const auto &entry : options.inputShapes)
    if (!seen.contains(entry.getKey()))
      return unknown("inputs", entry.getKey());
  for (const auto &entry : options.inputValues)
    if (!seen.contains(entry.getKey()))
      return unknown("values", entry.getKey());
  for (const auto &input : graph.input()) {
    const std::string &name = input.name();
    if (initializers.count(name))
      continue;
    if (!input.type().has_tensor_type()) {
      fileError("input '" + name + "': only tensor inputs are supported (sequence, map and "
                "optional inputs are not)");
      return failure();
    }
    const auto &tt = input.type().tensor_type();
    Type et = elementTypeFor(tt.elem_type(), &ctx);
    if (!et) {
      fileError("input '" + name + "': unsupported data type " + onnxTypeName(tt.elem_type()));
      return failure();
    }
    auto shape = inputShape(name, tt);
    if (failed(shape))
      return failure();
    if (specValues.count(name)) {
      if (failed(bindSpecValue(name, tt, *shape)))
        return failure();
      continue;
    }
    auto type = RankedTensorType::get(*shape, et);
    if (!type.hasStaticShape()) {
      std::string dims;
      for (int i = 0; i < tt.shape().dim_size(); ++i)
        if (!tt.shape().dim(i).has_dim_value() && ShapedType::isDynamic((*shape)[i]))
          dims += (dims.empty() ? "'" : ", '") +
                  (tt.shape().dim(i).dim_param().empty() ? "?" : tt.shape().dim(i).dim_param()) +
                  "'";
      if (options.tokenRows > 0) // mode generate: the spec has no inputs: to bind them with
        fileError("input '" + name + "' has dynamic dims " + dims +
                  ": mode generate feeds a decoder its token ids (one integer input [batch, "
                  "sequence]) and optionally position_ids; other inputs (an attention mask, "
                  "images) are not supported: bind them with the spec's values: or export the "
                  "model without them");
      else
        fileError("input '" + name + "' has dynamic dims " + dims +
                  "; bind them with the spec's inputs, e.g. inputs: {" + name + ": [...]}");
      return failure();
    }
    values[name] = body->addArgument(type, NameLoc::get(b.getStringAttr(name)));
    argAttrs.push_back(b.getDictionaryAttr({b.getNamedAttr(kInputAttr, b.getStringAttr(name))}));
  }
  return success();
}

Location GraphImporter::nodeLoc(const onnx::NodeProto &node) {
  std::string name = node.name();
  if (name.empty())
    name = node.output_size() ? node.output(0) : node.op_type();
  return NameLoc::get(b.getStringAttr(name), FileLineColLoc::get(&ctx, path, 0, 0));
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node) {
  std::string label = node.name().empty()
                          ? (node.output_size() ? node.output(0) : std::string("?"))
                          : node.name();
  bool training = node.domain() == kTrainingDomain;
  int64_t nodeOpset = training ? trainingOpset : opset;
  auto report = [&](const Twine &msg) {
    // One diagnostic per model: an error inside a subgraph was already printed.
    if (!failed_)
      llvm::errs() << "error: " << path << ": node '" << label << "' ("
                   << (training ? node.domain() + "." : std::string()) << node.op_type()
                   << (nodeOpset ? ", opset " + std::to_string(nodeOpset) : std::string())
                   << "): " << msg << "\n";
    failed_ = true;
    if (options.failedAtNode)
      *options.failedAtNode = true;
    return failure();
  };
  if (!node.domain().empty() && node.domain() != "ai.onnx" && !training)
    return report("operator domain '" + node.domain() + "' is not supported");
  if (nodeOpset == 0)
    return report(training ? "the model does not import the operator's domain"
                           : "the model imports no default-domain (ai.onnx) opset");
  const auto &table = opImporters();
  // Operators of other domains are keyed "domain.OpType".
  auto it = table.find(training ? node.domain() + "." + node.op_type() : node.op_type());
  if (it == table.end())
    return report("unsupported operator");
  if (!training && opset < 7 && opset < oldestOpset(node.op_type()))
    return report("this operator is supported from opset " + Twine(oldestOpset(node.op_type())) +
                  " (its earlier versions have other semantics)");

  // Train mode: a float Constant is imported like an initializer, where a consumer reads it.
  if (isRegisteredConstant(node))
    return success();

  // An Identity of an initializer (torch's exporter shares equal initializers this way) is
  // resolved lazily, so each consumer decides between the parameter and the constant form.
  if (node.op_type() == "Identity" && node.input_size() == 1 && node.output_size() == 1 &&
      !values.count(node.input(0)) && initializers.count(node.input(0)) &&
      !graphOutputs.contains(node.output(0))) {
    initializers[node.output(0)] = initializers.at(node.input(0));
    return success();
  }

  if (std::string why = checkNodeAgainstSchema(node, nodeOpset, training ? node.domain() : "");
      !why.empty())
    return report(why);

  // Each attribute once; each output name defined once in the graph (SSA form).
  {
    llvm::StringSet<> attrs;
    for (const auto &a : node.attribute())
      if (!attrs.insert(a.name()).second)
        return report("attribute '" + a.name() + "' is given more than once");
    for (const std::string &out : node.output())
      if (!out.empty() && (values.count(out) || initializers.count(out)))
        return report("output '" + out + "' is already defined by an input, initializer or "
                      "earlier node");
  }

  NodeContext nc(*this, node, nodeOpset, b, nodeLoc(node));
  bool foldInit = foldsInitializers(node.op_type());
  // Train mode: a training-mode BatchNormalization's running statistics are buffers its steps
  // update (torch.nn.BatchNorm2d), so they stay arguments (docs/training.md "Batch norm").
  bool runningStats = options.trainParams && node.op_type() == "BatchNormalization" &&
                      nodeOpset >= 14 && nc.attrInt("training_mode", 0) != 0;
  for (int i = 0; i < node.input_size(); ++i) {
    const std::string &name = node.input(i);
    if (name.empty()) {
      nc.in.push_back(Value());
      continue;
    }
    if (auto v = values.find(name); v != values.end()) {
      nc.in.push_back(v->second);
      continue;
    }
    if (initializers.count(name)) {
      // Train mode: a buffer input (BatchNormalization's running statistics) takes the constant.
      const bool buffer = runningStats && (i == 3 || i == 4);
      Value v = initializer(name, foldInit || (options.trainParams && !buffer &&
                                               readsBuffer(node.op_type(), i)));
      if (!v)
        return failure();
      nc.in.push_back(v);
      continue;
    }
    return report("input '" + name + "' is not produced by any earlier node, input or initializer");
  }
  for (Value v : nc.in)
    if (v && !llvm::cast<RankedTensorType>(v.getType()).hasStaticShape())
      return report("dynamic shapes are not supported");
  nc.runningStatsAreBuffers = runningStats && nc.in.size() >= 5 &&
                              llvm::all_of(ArrayRef<Value>(nc.in).slice(3, 2), [&](Value v) {
                                auto arg = llvm::dyn_cast_or_null<BlockArgument>(v);
                                return arg && arg.getArgNumber() < argAttrs.size() &&
                                       argAttrs[arg.getArgNumber()].get(kParamAttr);
                              });
  if (failed(it->second(nc)))
    return report(nc.errorMessage.empty() ? "import failed" : nc.errorMessage);
  if (nc.out.size() < size_t(node.output_size())) {
    for (int i = nc.out.size(); i < node.output_size(); ++i)
      if (!node.output(i).empty())
        return report("output " + Twine(i) + " ('" + node.output(i) + "') is not supported");
  }
  for (int i = 0; i < node.output_size(); ++i)
    if (!node.output(i).empty() && nc.out[i])
      values[node.output(i)] = nc.out[i];
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  if (failed(loadModel()))
    return nullptr;
  auto module = ModuleOp::create(FileLineColLoc::get(&ctx, path, 0, 0));
  OwningOpRef<ModuleOp> owned(module);
  auto bodyOwner = std::make_unique<Block>();
  body = bodyOwner.get();
  b.setInsertionPointToEnd(body);
  if (failed(importInputs()))
    return nullptr;
  for (const auto &output : model.graph().output())
    graphOutputs.insert(output.name());
  for (const auto &node : model.graph().node())
    if (failed(importNode(node)))
      return nullptr;

  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  for (const auto &output : model.graph().output()) {
    auto v = values.find(output.name());
    Value value;
    if (v != values.end())
      value = v->second;
    else if (initializers.count(output.name()))
      value = initializer(output.name(), false);
    if (!value) {
      fileError("graph output '" + output.name() + "' is not produced by any node");
      return nullptr;
    }
    results.push_back(value);
    resultAttrs.push_back(
        b.getDictionaryAttr({b.getNamedAttr(kOutputAttr, b.getStringAttr(output.name()))}));
  }
  if (results.empty()) {
    fileError("graph has no outputs");
    return nullptr;
  }
  func::ReturnOp::create(b, FileLineColLoc::get(&ctx, path, 0, 0), results);

  b.setInsertionPointToEnd(module.getBody());
  auto fnType = FunctionType::get(&ctx, body->getArgumentTypes(), ValueRange(results).getTypes());
  auto fn = func::FuncOp::create(b, module.getLoc(), programSymbol(ProgramRole::Forward), fnType);
  setProgramRole(fn, ProgramRole::Forward);
  fn.getBody().push_back(bodyOwner.release());
  fn.setAllArgAttrs(argAttrs);
  fn.setAllResultAttrs(resultAttrs);
  module->setAttr(kSourceAttr, b.getStringAttr(llvm::sys::path::filename(path)));
  module->setAttr(kOpsetAttr, b.getI64IntegerAttr(opset));
  if (options.trainParams)
    recordConstantWeights(module);
  if (failed(verify(module))) {
    fileError("internal error: the imported module does not verify");
    return nullptr;
  }
  return owned;
}

FailureOr<SmallVector<Value>> GraphImporter::importSubgraph(const onnx::GraphProto &graph,
                                                            ArrayRef<Value> inputs) {
  if (int64_t(inputs.size()) != graph.input_size()) {
    fileError("subgraph '" + graph.name() + "' declares " + Twine(graph.input_size()) +
              " inputs, its node gives " + Twine(inputs.size()));
    return failure();
  }
  // Lexical scoping: the subgraph sees the enclosing names; its own (inputs, initializers, node
  // outputs) shadow them and are dropped afterwards.
  auto savedValues = values;
  auto savedInitializers = initializers;
  llvm::StringSet<> savedOutputs = graphOutputs;
  llvm::scope_exit restore([&] {
    values = std::move(savedValues);
    initializers = std::move(savedInitializers);
    graphOutputs = std::move(savedOutputs);
  });
  for (const auto &init : graph.initializer()) {
    values.erase(init.name());
    initializers[init.name()] = &init;
  }
  for (int i = 0; i < graph.input_size(); ++i) {
    initializers.erase(graph.input(i).name());
    values[graph.input(i).name()] = inputs[i];
  }
  for (const auto &output : graph.output())
    graphOutputs.insert(output.name());
  for (const auto &node : graph.node())
    if (failed(importNode(node)))
      return failure();
  SmallVector<Value> results;
  for (const auto &output : graph.output()) {
    Value value;
    if (auto v = values.find(output.name()); v != values.end())
      value = v->second;
    else if (initializers.count(output.name()))
      value = initializer(output.name(), false);
    if (!value) {
      fileError("subgraph '" + graph.name() + "' output '" + output.name() +
                "' is not produced by any node");
      return failure();
    }
    results.push_back(value);
  }
  return results;
}

void GraphImporter::argumentsFeeding(Value v, SmallVectorImpl<std::string> &inputs,
                                     SmallVectorImpl<std::string> &params) const {
  llvm::DenseSet<Value> seen{v};
  SmallVector<Value> work{v};
  llvm::SmallBitVector args(argAttrs.size());
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (auto arg = llvm::dyn_cast<BlockArgument>(x)) {
      if (arg.getOwner() == body && arg.getArgNumber() < argAttrs.size())
        args.set(arg.getArgNumber());
      continue;
    }
    for (Value operand : x.getDefiningOp()->getOperands())
      if (seen.insert(operand).second)
        work.push_back(operand);
  }
  for (unsigned k : args.set_bits()) {
    DictionaryAttr attrs = argAttrs[k];
    if (auto name = attrs.getAs<StringAttr>(kInputAttr))
      inputs.push_back(name.str());
    else if (auto name = attrs.getAs<StringAttr>(kParamAttr))
      params.push_back(name.str());
  }
}

FailureOr<SmallVector<Value>> importSubgraph(GraphImporter &g, const onnx::GraphProto &graph,
                                             ArrayRef<Value> inputs) {
  return g.importSubgraph(graph, inputs);
}

bool isInitializerName(const GraphImporter &g, llvm::StringRef name) { return g.hasInitializer(name.str()); }

FailureOr<DenseElementsAttr> importTensor(GraphImporter &g, const onnx::TensorProto &t,
                                          const Twine &what) {
  return g.tensorAttr(t, what);
}

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

LogicalResult NodeContext::requireInputs(size_t minimum) {
  for (size_t i = 0; i < minimum; ++i)
    if (!has(i))
      return error("expects at least " + Twine(minimum) + " inputs, input " + Twine(i) +
                   " is missing");
  return success();
}

const onnx::AttributeProto *NodeContext::attr(StringRef name) const {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
int64_t NodeContext::attrInt(StringRef name, int64_t dflt) const {
  const auto *a = attr(name);
  return a ? a->i() : dflt;
}
float NodeContext::attrFloat(StringRef name, float dflt) const {
  const auto *a = attr(name);
  return a ? a->f() : dflt;
}
std::string NodeContext::attrString(StringRef name, StringRef dflt) const {
  const auto *a = attr(name);
  return a ? a->s() : dflt.str();
}
std::optional<SmallVector<int64_t>> NodeContext::attrInts(StringRef name) const {
  const auto *a = attr(name);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

/// "'a'", "'a' and 'b'", "'a', 'b', 'c' and 2 more".
static std::string quotedList(ArrayRef<std::string> names, size_t shown = 3) {
  std::string s;
  size_t n = std::min(names.size(), shown);
  for (size_t k = 0; k < n; ++k) {
    if (k)
      s += k + 1 == n && names.size() == n ? " and " : ", ";
    s += "'" + names[k] + "'";
  }
  if (names.size() > n)
    s += " and " + std::to_string(names.size() - n) + " more";
  return s;
}

std::string NodeContext::dependence(Value v) {
  SmallVector<std::string> inputs, params;
  graph.argumentsFeeding(v, inputs, params);
  if (!inputs.empty())
    return "it depends on model input" + std::string(inputs.size() > 1 ? "s " : " ") +
           quotedList(inputs) + " (bind " + (inputs.size() > 1 ? "them" : "it") +
           " with the spec's values to fix " + (inputs.size() > 1 ? "them" : "it") +
           " at compile time)";
  if (!params.empty())
    return "it is computed from weights (" + quotedList(params) +
           "), which are not folded at compile time";
  return "it depends on values computed at run time";
}

FailureOr<HostTensor> NodeContext::constInput(size_t i, StringRef what) {
  Attribute value;
  if (!has(i) || !matchPattern(in[i], m_Constant(&value)))
    return FailureOr<HostTensor>(
        error("input " + Twine(i) + " (" + what + (i < size_t(node.input_size()) ? ", '" + node.input(i) + "'" : std::string()) +
              ") must be a compile-time constant" +
              (has(i) ? "; " + dependence(in[i]) : std::string())));
  auto host = HostTensor::from(value);
  if (!host)
    return FailureOr<HostTensor>(error("input " + Twine(i) + " (" + what + ") is too large to evaluate"));
  return *host;
}

FailureOr<SmallVector<int64_t>> NodeContext::constInts(size_t i, StringRef what) {
  auto t = constInput(i, what);
  if (failed(t))
    return failure();
  if (t->isFloat())
    return FailureOr<SmallVector<int64_t>>(error(what + " must be an integer tensor"));
  return SmallVector<int64_t>(t->i.begin(), t->i.end());
}

FailureOr<int64_t> NodeContext::normAxis(int64_t axis, int64_t rank, StringRef what) {
  if (axis < -rank || axis >= rank)
    return FailureOr<int64_t>(
        error(what + " " + Twine(axis) + " is out of range for rank " + Twine(rank)));
  return axis < 0 ? axis + rank : axis;
}

FailureOr<SmallVector<int64_t>> axesOperand(NodeContext &c, int64_t inputSinceOpset, bool required) {
  std::optional<SmallVector<int64_t>> axes;
  if (c.opset >= inputSinceOpset) {
    if (c.has(1)) {
      auto a = c.constInts(1, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
  } else {
    axes = c.attrInts("axes");
  }
  if (!axes && required)
    return FailureOr<SmallVector<int64_t>>(c.error("missing axes"));
  return axes ? *axes : SmallVector<int64_t>();
}

Value NodeContext::constant(DenseElementsAttr value) { return ConstantOp::create(b, loc, value); }

FailureOr<Value> NodeContext::reshape(Value v, ArrayRef<int64_t> shape) {
  auto t = llvm::cast<RankedTensorType>(v.getType());
  if (t.getShape() == shape)
    return v;
  return makeTyped1<ReshapeOp>(RankedTensorType::get(shape, t.getElementType()), v);
}

LogicalResult NodeContext::checkOperands(OperationState &state) {
  for (auto [i, v] : llvm::enumerate(state.operands))
    if (!v)
      return error("operand " + Twine(i) + " is missing (a blank input name where a value is needed)");
  return success();
}

LogicalResult NodeContext::checkElementCount(ArrayRef<int64_t> shape, StringRef what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return error(what + " has a negative dimension");
    if (d != 0 && n > kMaxTensorElements / d)
      return error(what + " has more than 2^40 elements");
    n *= d;
  }
  return success();
}

FailureOr<Value> NodeContext::finish(OperationState &state) {
  auto r = finishMulti(state);
  if (failed(r))
    return failure();
  return (*r)[0];
}

FailureOr<SmallVector<Value>> NodeContext::finishMulti(OperationState &state) {
  for (Type t : state.types)
    if (auto rt = llvm::dyn_cast<RankedTensorType>(t))
      if (failed(checkElementCount(rt.getShape(), "the result")))
        return failure();
  Operation *op = b.create(state);
  std::string diag;
  {
    ScopedDiagnosticHandler handler(ctx(), [&](Diagnostic &d) {
      if (diag.empty())
        diag = d.str();
      return success();
    });
    if (failed(mlir::verify(op, /*verifyRecursively=*/false))) {
      op->erase();
      return FailureOr<SmallVector<Value>>(error(diag.empty() ? "invalid op" : diag));
    }
  }
  SmallVector<Value> results;
  if (succeeded(b.tryFold(op, results)) && !results.empty()) {
    op->erase();
    return results;
  }
  return SmallVector<Value>(op->getResults().begin(), op->getResults().end());
}

} // namespace colossal::onnx_import

namespace colossal {
OwningOpRef<ModuleOp> importONNX(StringRef path, const ImportOptions &options,
                                 MLIRContext &context) {
  onnx_import::GraphImporter importer(path, options, context);
  return importer.run();
}
} // namespace colossal

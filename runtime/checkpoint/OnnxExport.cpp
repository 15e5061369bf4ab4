//===- OnnxExport.cpp - Trained parameters back into the source ONNX model -------------------===//
//
// See include/colossal/runtime/OnnxExport.h. The model is edited as a protobuf message (libonnx's
// onnx_proto); nothing here interprets the graph beyond initializer names, Identity nodes and
// (with `inference`) BatchNormalization's training_mode.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/OnnxExport.h"

#include "colossal/runtime/Checkpoint.h"
#include "colossal/runtime/ExternalData.h"

#include "colossal/runtime/Safetensors.h"
#include "colossal/runtime/StateStore.h"
#include "colossal/runtime/Device.h"
#include "support/AtomicFile.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace colossal::runtime {
namespace {

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string hex(uint64_t v) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format_hex(v, 18);
  return s;
}

std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

llvm::ArrayRef<int64_t> dimsOf(const onnx::TensorProto &t) {
  return llvm::ArrayRef<int64_t>(t.dims().data(), t.dims().size());
}

/// The ONNX TensorProto data type holding `dtype`'s bytes as raw_data (0 when none does).
int onnxDataType(DType dtype) {
  switch (dtype) {
  case DType::F32: return onnx::TensorProto::FLOAT;
  case DType::F16: return onnx::TensorProto::FLOAT16;
  case DType::BF16: return onnx::TensorProto::BFLOAT16;
  case DType::F64: return onnx::TensorProto::DOUBLE;
  case DType::I64: return onnx::TensorProto::INT64;
  case DType::I32: return onnx::TensorProto::INT32;
  case DType::I16: return onnx::TensorProto::INT16;
  case DType::I8: return onnx::TensorProto::INT8;
  case DType::U8: return onnx::TensorProto::UINT8;
  case DType::Bool: return onnx::TensorProto::BOOL;
  case DType::U16: return onnx::TensorProto::UINT16;
  case DType::U32: return onnx::TensorProto::UINT32;
  case DType::U64: return onnx::TensorProto::UINT64;
  case DType::Invalid: break;
  }
  return 0;
}

/// Bytes per element of the fixed-size ONNX data types (0 for STRING and unknown types).
size_t onnxElementSize(int dataType) {
  switch (dataType) {
  case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64:
  case onnx::TensorProto::COMPLEX64:
    return 8;
  case onnx::TensorProto::COMPLEX128:
    return 16;
  case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16: case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

/// Reads the external data of `t` (runtime/ExternalData.h: confined to the model's folder) and
/// stores it inline as raw_data. `what` names the tensor in errors.
llvm::Error inlineExternal(onnx::TensorProto &t, llvm::StringRef modelPath, const llvm::Twine &what) {
  auto prefixed = [&](llvm::Error e) {
    return err(modelPath + ": " + what + ": " + llvm::toString(std::move(e)));
  };
  std::vector<std::pair<llvm::StringRef, llvm::StringRef>> entries;
  for (const auto &kv : t.external_data()) entries.emplace_back(kv.key(), kv.value());
  llvm::Expected<ExternalDataRef> ref = parseExternalDataRef(entries);
  if (!ref) return prefixed(ref.takeError());
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> buf = readExternalData(modelPath, *ref);
  if (!buf) return prefixed(buf.takeError());
  uint64_t length = (*buf)->getBufferSize();
  if (size_t elem = onnxElementSize(t.data_type())) {
    uint64_t need = elem;  // saturates: dims whose product wraps 64 bits never match
    for (int64_t d : t.dims()) need = llvm::SaturatingMultiply(need, static_cast<uint64_t>(d));
    if (length != need)
      return err(modelPath + ": " + what + ": external data holds " + llvm::Twine(length) +
                 " bytes, its dims " + shapeStr(dimsOf(t)) + " need " + llvm::Twine(need));
  }
  t.set_raw_data((*buf)->getBufferStart(), static_cast<size_t>(length));
  t.clear_external_data();
  t.set_data_location(onnx::TensorProto::DEFAULT);
  return llvm::Error::success();
}

/// Calls `fn(tensor, name)` on every TensorProto of `graph`: initializers, sparse initializers'
/// values and indices, tensor attributes, recursing into subgraph attributes.
template <typename Fn>
llvm::Error forEachTensor(onnx::GraphProto &graph, Fn &&fn) {
  for (onnx::TensorProto &t : *graph.mutable_initializer())
    if (llvm::Error e = fn(t, "initializer '" + t.name() + "'")) return e;
  for (onnx::SparseTensorProto &s : *graph.mutable_sparse_initializer()) {
    std::string name = s.values().name();
    if (llvm::Error e = fn(*s.mutable_values(), "sparse initializer '" + name + "' values")) return e;
    if (llvm::Error e = fn(*s.mutable_indices(), "sparse initializer '" + name + "' indices")) return e;
  }
  for (onnx::NodeProto &node : *graph.mutable_node()) {
    for (onnx::AttributeProto &attr : *node.mutable_attribute()) {
      std::string what = "node '" + node.name() + "' attribute '" + attr.name() + "'";
      if (attr.has_t())
        if (llvm::Error e = fn(*attr.mutable_t(), what)) return e;
      for (onnx::TensorProto &t : *attr.mutable_tensors())
        if (llvm::Error e = fn(t, what)) return e;
      if (attr.has_sparse_tensor()) {
        if (llvm::Error e = fn(*attr.mutable_sparse_tensor()->mutable_values(), what)) return e;
        if (llvm::Error e = fn(*attr.mutable_sparse_tensor()->mutable_indices(), what)) return e;
      }
      if (attr.has_g())
        if (llvm::Error e = forEachTensor(*attr.mutable_g(), fn)) return e;
      for (onnx::GraphProto &g : *attr.mutable_graphs())
        if (llvm::Error e = forEachTensor(g, fn)) return e;
    }
  }
  return llvm::Error::success();
}

/// The external data files `model` refers to (locations as written).
void externalLocations(onnx::GraphProto &graph, llvm::StringSet<> &out) {
  llvm::consumeError(forEachTensor(graph, [&](onnx::TensorProto &t, const std::string &) -> llvm::Error {
    if (t.data_location() == onnx::TensorProto::EXTERNAL)
      for (const auto &kv : t.external_data())
        if (kv.key() == "location") out.insert(kv.value());
    return llvm::Error::success();
  }));
}

/// Stores `value` as `t`'s data (raw_data, little-endian), dropping any other data field.
void setRawData(onnx::TensorProto &t, const ParamValue &value) {
  t.clear_float_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_double_data();
  t.clear_uint64_data();
  t.clear_string_data();
  t.clear_external_data();
  t.set_data_location(onnx::TensorProto::DEFAULT);
  t.set_raw_data(value.data, value.sizeBytes);
}

/// `inference`: every main-graph BatchNormalization with training_mode = 1 gets training_mode = 0
/// and its one output Y (its running-statistics outputs dropped), so it normalises with the running
/// statistics, as torch's eval mode does. A dropped output that a node or the graph reads is an
/// error naming the node.
llvm::Error batchNormToInference(onnx::GraphProto &graph, llvm::StringRef modelPath) {
  llvm::StringSet<> read;
  for (const onnx::NodeProto &n : graph.node())
    for (const std::string &in : n.input()) read.insert(in);
  for (const onnx::ValueInfoProto &out : graph.output()) read.insert(out.name());
  for (onnx::NodeProto &n : *graph.mutable_node()) {
    if (n.op_type() != "BatchNormalization") continue;
    for (onnx::AttributeProto &a : *n.mutable_attribute()) {
      if (a.name() != "training_mode" || a.i() == 0) continue;
      for (int k = 1; k < n.output_size(); ++k)
        if (!n.output(k).empty() && read.contains(n.output(k)))
          return err(modelPath + ": node '" + n.name() + "' (BatchNormalization): --inference drops its output '" +
                     n.output(k) + "' (a training-mode output), which the graph reads");
      a.set_i(0);
      while (n.output_size() > 1) n.mutable_output()->RemoveLast();
    }
  }
  return llvm::Error::success();
}

}  // namespace

llvm::Error exportOnnx(const LoadedPlan &loaded, ParamLookup lookup, llvm::StringRef outPath, bool inference) {
  const plan::Plan &plan = loaded.plan;
  const std::string &planPath = loaded.path;
  const std::string &modelPath = plan.train().source_model();
  if (modelPath.empty())
    return err(planPath + ": the plan records no source model (TrainConfig.source_model); "
               "recompile it with this colossal-opt to export");

  // The model must be the one compiled: same bytes (FNV-1a 64 of the whole file).
  auto buf = llvm::MemoryBuffer::getFile(modelPath, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return err(modelPath + ": cannot read the source model recorded in " + planPath + ": " +
               buf.getError().message());
  uint64_t hash = fnv1a64((*buf)->getBufferStart(), (*buf)->getBufferSize());
  if (hash != plan.train().source_model_hash())
    return err(modelPath + ": the model changed since compilation (FNV-1a 64 " + hex(hash) +
               ", " + planPath + " recorded " + hex(plan.train().source_model_hash()) + ")");
  if ((*buf)->getBufferSize() > kMaxOnnxModelBytes)
    return err(modelPath + ": larger than protobuf's 2 GiB limit");

  // Never write over the inputs: the model or one of its external data files, the plan, its weights.
  if (llvm::sys::fs::equivalent(outPath, modelPath))
    return err(outPath + " is the source model " + modelPath + "; choose another --onnx path");
  if (llvm::sys::fs::equivalent(outPath, planPath))
    return err(outPath + " is the plan " + planPath + "; choose another --onnx path");
  if (loaded.weights && llvm::sys::fs::equivalent(outPath, loaded.weights->path()))
    return err(outPath + " is the plan's weights file " + loaded.weights->path() + "; choose another --onnx path");
  if (llvm::sys::fs::is_directory(outPath))
    return err(outPath + " is a directory; --onnx takes the path of the file to write");

  onnx::ModelProto model;
  if (!model.ParseFromArray((*buf)->getBufferStart(), static_cast<int>((*buf)->getBufferSize())))
    return err(modelPath + ": not a valid ONNX model (protobuf parse failed)");
  buf->reset();
  onnx::GraphProto &graph = *model.mutable_graph();
  llvm::SmallString<256> modelDir = llvm::sys::path::parent_path(modelPath);
  {
    llvm::StringSet<> locations;
    externalLocations(graph, locations);
    for (const auto &loc : locations) {
      llvm::SmallString<256> full(modelDir);
      llvm::sys::path::append(full, loc.getKey());
      if (llvm::sys::fs::equivalent(outPath, full))
        return err(outPath + " is an external data file of the source model " + modelPath +
                   "; choose another --onnx path");
    }
  }

  // Main-graph initializers and Identity nodes by name. Indices, not pointers: new initializers
  // are appended while we go.
  std::map<std::string, int> initializerIndex;
  for (int i = 0; i < graph.initializer_size(); ++i)
    initializerIndex.emplace(graph.initializer(i).name(), i);
  std::map<std::string, int> identityByOutput;  // Identity output -> node index
  // Constant output -> node index: a float Constant node trains like an initializer
  // (docs/training.md "Which initializers train"); its `value` tensor takes the trained data.
  std::map<std::string, int> constantByOutput;
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto &n = graph.node(i);
    bool core = n.domain().empty() || n.domain() == "ai.onnx";
    if (core && n.op_type() == "Identity" && n.input_size() == 1 && n.output_size() == 1)
      identityByOutput.emplace(n.output(0), i);
    if (core && n.op_type() == "Constant" && n.output_size() == 1 && n.attribute_size() == 1 &&
        n.attribute(0).name() == "value" && n.attribute(0).has_t())
      constantByOutput.emplace(n.output(0), i);
  }
  // The tensor a main-graph name holds: an initializer's, or a Constant node's `value`.
  auto tensorNamed = [&](const std::string &name) -> onnx::TensorProto * {
    if (auto it = initializerIndex.find(name); it != initializerIndex.end())
      return graph.mutable_initializer(it->second);
    if (auto it = constantByOutput.find(name); it != constantByOutput.end())
      return graph.mutable_node(it->second)->mutable_attribute(0)->mutable_t();
    return nullptr;
  };

  std::vector<int> identitiesToRemove;
  for (const plan::StateTensor &state : plan.states()) {
    if (state.role() != plan::StateTensor::PARAM) continue;
    std::string what = planPath + ": parameter '" + state.name() + "'";
    const std::string &source = state.source();
    if (source.empty()) return err(what + " has no source (StateTensor.source)");
    DType dtype = static_cast<DType>(state.dtype());
    std::vector<int64_t> shape(state.shape().begin(), state.shape().end());
    if (state.has_sharding())  // the whole tensor (the plan's shape is one rank's shard)
      shape.assign(state.sharding().global_shape().begin(), state.sharding().global_shape().end());

    auto value = lookup(state.name());
    if (!value) return value.takeError();
    if (value->dtype != dtype)
      return err(what + ": the value is " + dtypeName(value->dtype) + ", the plan says " +
                 dtypeName(dtype));
    if (value->shape != llvm::ArrayRef<int64_t>(shape))
      return err(what + ": the value has shape " + shapeStr(value->shape) + ", the plan says " +
                 shapeStr(shape));
    uint64_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
    if (!isValidDType(static_cast<int64_t>(dtype)) || dtype == DType::Invalid ||
        value->sizeBytes != numel * dtypeSize(dtype) || !value->data)
      return err(what + ": the value holds " + llvm::Twine(value->sizeBytes) + " bytes, " +
                 dtypeName(dtype) + " " + shapeStr(shape) + " needs " +
                 llvm::Twine(numel * dtypeSize(dtype)));

    // The initializer or Constant the parameter came from, and whether it is tied through an
    // Identity.
    onnx::TensorProto *target = tensorNamed(source);
    int identity = -1;
    if (!target) {
      if (auto id = identityByOutput.find(source); id != identityByOutput.end()) {
        identity = id->second;
        target = tensorNamed(graph.node(identity).input(0));
      }
    }
    if (!target)
      return err(what + ": its source '" + source + "' is neither an initializer or Constant of " +
                 modelPath + " nor the output of an Identity of one");
    const onnx::TensorProto &orig = *target;
    std::string origName = identity < 0 ? source : graph.node(identity).input(0);
    std::string label = (initializerIndex.count(origName) ? "initializer '" : "Constant '") +
                        origName + "'";
    if (orig.data_type() != onnxDataType(dtype))
      return err(what + ": " + label + " of " + modelPath + " has ONNX data type " +
                 llvm::Twine(orig.data_type()) + ", the parameter is " + dtypeName(dtype));
    if (dimsOf(orig) != llvm::ArrayRef<int64_t>(shape))
      return err(what + ": " + label + " of " + modelPath + " has dims " +
                 shapeStr(dimsOf(orig)) + ", the parameter " +
                 shapeStr(shape));

    if (identity < 0) {
      setRawData(*target, *value);
      continue;
    }
    // An Identity-tied copy: a new initializer under the Identity's output name replaces the node.
    onnx::TensorProto copy;
    copy.set_name(source);
    copy.set_data_type(orig.data_type());
    *copy.mutable_dims() = orig.dims();
    setRawData(copy, *value);
    initializerIndex.emplace(source, graph.initializer_size());
    *graph.add_initializer() = std::move(copy);
    identitiesToRemove.push_back(identity);
    identityByOutput.erase(source);
    // Before IR version 4 every initializer must also be a graph input.
    if (model.ir_version() < 4) {
      onnx::ValueInfoProto *in = graph.add_input();
      in->set_name(source);
      auto *tt = in->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(orig.data_type());
      for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
    }
  }
  // Remove the replaced Identity nodes (highest index first keeps the others' indices valid).
  std::sort(identitiesToRemove.rbegin(), identitiesToRemove.rend());
  for (int i : identitiesToRemove) graph.mutable_node()->DeleteSubrange(i, 1);

  if (inference)
    if (llvm::Error e = batchNormToInference(graph, modelPath)) return e;

  // Every remaining weight inline.
  if (llvm::Error e = forEachTensor(graph, [&](onnx::TensorProto &t, const std::string &what) -> llvm::Error {
        if (t.data_location() != onnx::TensorProto::EXTERNAL) return llvm::Error::success();
        return inlineExternal(t, modelPath, what);
      }))
    return e;

  uint64_t bytes = model.ByteSizeLong();
  if (bytes > kMaxOnnxModelBytes)
    return err(outPath + ": the exported model would be " + llvm::Twine(bytes) +
               " bytes, over protobuf's 2 GiB limit for one ONNX file (weights are written inline)");
  std::string serialized;
  if (!model.SerializeToString(&serialized))
    return err(outPath + ": cannot serialize the exported model");
  return writeFileAtomically(outPath, [&](llvm::raw_ostream &os) {
    os.write(serialized.data(), serialized.size());
    return llvm::Error::success();
  });
}

llvm::Expected<std::string> resolveCheckpointDir(llvm::StringRef dir) {
  return checkpointStepDir(dir);  // one definition of the layout: runtime/checkpoint/Checkpoint.cpp
}

llvm::Error exportOnnxCommand(const LoadedPlan &plan, llvm::StringRef checkpointDir,
                              llvm::StringRef outPath, bool allowNonFinite, bool inference) {
  llvm::StringMap<std::string> initWeight;
  for (const plan::StateTensor &s : plan.plan.states())
    if (s.role() == plan::StateTensor::PARAM) initWeight[s.name()] = s.init_weight();
  if (checkpointDir.empty()) {
    const SafetensorsFile *source = plan.weights.get();
    auto lookup = [&](llvm::StringRef param) -> llvm::Expected<ParamValue> {
      std::string key = initWeight.lookup(param);
      if (!source)
        return err(plan.path + ": the plan has no weights file holding parameter '" + param + "'");
      const SafetensorsTensor *t = source->find(key);
      if (!t) return err(source->path() + ": no tensor '" + key + "' (parameter '" + param + "')");
      return ParamValue{t->dtype, t->shape, t->data, t->size_bytes};
    };
    return exportOnnx(plan, lookup, outPath, inference);
  }

  // A checkpoint: never write over one of its files (the step folder's, or DIR/latest).
  auto folder = resolveCheckpointDir(checkpointDir);
  if (!folder) return folder.takeError();
  std::vector<std::string> files;
  llvm::SmallString<256> latest(checkpointDir);
  llvm::sys::path::append(latest, "latest");
  files.push_back(std::string(latest));
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(*folder, ec), end; it != end && !ec; it.increment(ec))
    files.push_back(it->path());
  for (const std::string &f : files)
    if (llvm::sys::fs::equivalent(outPath, f))
      return err(outPath + " is " + f + ", a file of the checkpoint " + checkpointDir + "; choose another --onnx path");

  // The values through the checkpoint loader (runtime/checkpoint/Checkpoint.cpp), which checks the
  // manifest's sizes and FNV-1a hashes and every tensor's name, dtype and shape, like train --resume
  // and sample do.
  // Whole tensors (a sharded plan's states at their global shapes, as checkpoints hold them).
  std::unique_ptr<Device> device = createCpuDevice();
  auto store = StateStore::create(plan, *device, /*globalShapes=*/true);
  if (!store) return store.takeError();
  llvm::Expected<CheckpointInfo> info = loadCheckpoint(checkpointDir, **store, allowNonFinite);
  if (!info) return info.takeError();
  std::map<std::string, std::vector<char>> host;
  auto lookup = [&](llvm::StringRef param) -> llvm::Expected<ParamValue> {
    const StateEntry *e = (*store)->find(param);
    if (!e) return err(plan.path + ": no state '" + param + "'");
    std::vector<char> &bytes = host[param.str()];
    bytes.resize(e->tensor.bytes());
    if (llvm::Error r = (*store)->read(param, bytes.data())) return std::move(r);
    return ParamValue{e->tensor.dtype, e->tensor.shape, bytes.data(), bytes.size()};
  };
  return exportOnnx(plan, lookup, outPath, inference);
}

}  // namespace colossal::runtime

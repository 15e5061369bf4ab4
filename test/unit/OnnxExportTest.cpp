//===- OnnxExportTest.cpp - exportOnnx on a hand-built plan and ONNX model ------------------===//
//
// The model is built here with libonnx's protobuf messages:
//   x[1,2] -MatMul(w[2,3])-> h; h -MatMul(tied[3,2])-> a; tied -Identity-> tied_copy;
//   h -MatMul(tied_copy)-> b; (a + b) + c -> y
// `tied` and the constant `c` live in an external data file; `w` is inline float_data. The plan's
// PARAM states are w, tied and tied_copy (the Identity-split copy); `c` is not a parameter.
// Expected values are the ones the test hands to the exporter, compared bit for bit.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/OnnxExport.h"
#include "colossal/runtime/Device.h"
#include "colossal/runtime/StateStore.h"
#include "colossal/runtime/Checkpoint.h"
#include "colossal/runtime/Safetensors.h"

#include "onnx/onnx_pb.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace colossal::runtime;
namespace plan = colossal::plan;

namespace {

struct Value {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

std::vector<float> floatsOf(const onnx::TensorProto &t) {
  if (!t.raw_data().empty()) {
    std::vector<float> v(t.raw_data().size() / 4);
    std::memcpy(v.data(), t.raw_data().data(), v.size() * 4);
    return v;
  }
  return {t.float_data().begin(), t.float_data().end()};
}

class OnnxExportTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-onnx-export", dir));
    writeModel();
    makePlan();
    values["w"] = {{2, 3}, {10, 11, 12, 13, 14, 15}};
    values["tied"] = {{3, 2}, {-1, -2, -3, -4, -5, -6}};
    values["tied_copy"] = {{3, 2}, {0.5f, 0.25f, 0.125f, 2, 4, 8}};
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(const std::string &name) {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }

  static void writeFile(const std::string &p, const std::string &bytes) {
    std::ofstream os(p, std::ios::binary);
    os.write(bytes.data(), bytes.size());
  }

  void writeModel() {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    onnx::GraphProto &g = *m.mutable_graph();
    g.set_name("tied");
    auto addInput = [](google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> *list,
                       const std::string &name, std::vector<int64_t> shape) {
      onnx::ValueInfoProto *v = list->Add();
      v->set_name(name);
      auto *tt = v->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(onnx::TensorProto::FLOAT);
      for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
    };
    addInput(g.mutable_input(), "x", {1, 2});
    addInput(g.mutable_output(), "y", {1, 2});
    onnx::TensorProto *w = g.add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(2);
    w->add_dims(3);
    for (float f : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) w->add_float_data(f);
    // External data: 8 junk bytes, then tied (6 floats), then c (2 floats).
    std::vector<float> tied = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, c = {7, 8};
    std::string bin(8, 'j');
    bin.append(reinterpret_cast<const char *>(tied.data()), 24);
    bin.append(reinterpret_cast<const char *>(c.data()), 8);
    writeFile(path("weights.bin"), bin);
    auto external = [&](const std::string &name, std::vector<int64_t> dims, int64_t offset,
                        int64_t length) {
      onnx::TensorProto *t = g.add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : dims) t->add_dims(d);
      t->set_data_location(onnx::TensorProto::EXTERNAL);
      auto kv = [&](const std::string &k, const std::string &v) {
        auto *e = t->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      kv("location", "weights.bin");
      kv("offset", std::to_string(offset));
      kv("length", std::to_string(length));
    };
    external("tied", {3, 2}, 8, 24);
    external("c", {2}, 32, 8);
    auto node = [&](const std::string &op, std::vector<std::string> in, const std::string &out) {
      onnx::NodeProto *n = g.add_node();
      n->set_op_type(op);
      n->set_name(op + "_" + out);
      for (auto &i : in) n->add_input(i);
      n->add_output(out);
    };
    node("MatMul", {"x", "w"}, "h");
    node("MatMul", {"h", "tied"}, "a");
    node("Identity", {"tied"}, "tied_copy");
    node("MatMul", {"h", "tied_copy"}, "b");
    node("Add", {"a", "b"}, "s");
    node("Add", {"s", "c"}, "y");
    std::string bytes;
    ASSERT_TRUE(m.SerializeToString(&bytes));
    writeFile(path("model.onnx"), bytes);
  }

  void makePlan() {
    loaded.path = path("model.cplan");
    loaded.plan.set_version(kPlanVersion);
    loaded.plan.set_mode("train");
    loaded.plan.mutable_train()->set_source_model(path("model.onnx"));
    auto hash = fnv1a64File(path("model.onnx"));
    ASSERT_TRUE(static_cast<bool>(hash));
    loaded.plan.mutable_train()->set_source_model_hash(*hash);
    auto state = [&](const std::string &name, std::vector<int64_t> shape, plan::StateTensor::Role role,
                     const std::string &source) {
      plan::StateTensor *s = loaded.plan.add_states();
      s->set_name(name);
      s->set_dtype(plan::F32);
      for (int64_t d : shape) s->add_shape(d);
      s->set_role(role);
      if (role == plan::StateTensor::PARAM) {
        s->set_source(source);
        s->set_init_weight("init." + name);
      } else {
        s->set_param(source);
      }
    };
    state("w", {2, 3}, plan::StateTensor::PARAM, "w");
    state("w.grad", {2, 3}, plan::StateTensor::GRAD, "w");
    state("tied", {3, 2}, plan::StateTensor::PARAM, "tied");
    state("tied_copy", {3, 2}, plan::StateTensor::PARAM, "tied_copy");
    state("tied_copy.exp_avg", {3, 2}, plan::StateTensor::OPTIMIZER, "tied_copy");
  }

  llvm::Error exportWith(const std::map<std::string, Value> &vals, const std::string &out, bool inference = false) {
    return exportOnnx(loaded, [&](llvm::StringRef name) -> llvm::Expected<ParamValue> {
      auto it = vals.find(name.str());
      if (it == vals.end())
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "test: no value for '" + name.str() + "'");
      return ParamValue{DType::F32, it->second.shape, it->second.data.data(),
                        it->second.data.size() * 4};
    }, out, inference);
  }

  onnx::ModelProto readModel(const std::string &p) {
    onnx::ModelProto m;
    auto buf = llvm::MemoryBuffer::getFile(p);
    EXPECT_TRUE(static_cast<bool>(buf)) << p;
    if (buf) EXPECT_TRUE(m.ParseFromArray((*buf)->getBufferStart(), (*buf)->getBufferSize()));
    return m;
  }

  std::string errorOf(llvm::Error e) {
    EXPECT_TRUE(static_cast<bool>(e)) << "expected an error";
    return e ? llvm::toString(std::move(e)) : "";
  }

  /// Checks the exported model holds `vals` for the parameters and the original `c`, all inline,
  /// with the Identity replaced by an initializer.
  void expectExported(const std::string &out, const std::map<std::string, Value> &vals) {
    onnx::ModelProto m = readModel(out);
    std::map<std::string, const onnx::TensorProto *> inits;
    for (const onnx::TensorProto &t : m.graph().initializer()) {
      EXPECT_TRUE(inits.emplace(t.name(), &t).second) << "duplicate initializer " << t.name();
      EXPECT_NE(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();
      EXPECT_EQ(t.external_data_size(), 0) << t.name();
    }
    ASSERT_EQ(inits.size(), 4u);
    for (const char *name : {"w", "tied", "tied_copy"}) {
      ASSERT_TRUE(inits.count(name)) << name;
      const onnx::TensorProto &t = *inits[name];
      EXPECT_EQ(t.data_type(), onnx::TensorProto::FLOAT) << name;
      EXPECT_EQ(std::vector<int64_t>(t.dims().begin(), t.dims().end()), vals.at(name).shape) << name;
      EXPECT_EQ(floatsOf(t), vals.at(name).data) << name;
    }
    ASSERT_TRUE(inits.count("c"));
    EXPECT_EQ(floatsOf(*inits["c"]), (std::vector<float>{7, 8}));
    std::vector<std::string> ops;
    for (const onnx::NodeProto &n : m.graph().node()) ops.push_back(n.op_type());
    EXPECT_EQ(ops, (std::vector<std::string>{"MatMul", "MatMul", "MatMul", "Add", "Add"}));
    // The consumer of the former Identity output now reads the new initializer.
    EXPECT_EQ(m.graph().node(2).input(1), "tied_copy");
  }

  llvm::SmallString<128> dir;
  LoadedPlan loaded;
  std::map<std::string, Value> values;
};

TEST_F(OnnxExportTest, ReplacesParametersAndSplitsIdentityTies) {
  ASSERT_FALSE(static_cast<bool>(exportWith(values, path("out.onnx"))));
  expectExported(path("out.onnx"), values);
  // The source model is untouched.
  auto hash = fnv1a64File(path("model.onnx"));
  ASSERT_TRUE(static_cast<bool>(hash));
  EXPECT_EQ(*hash, loaded.plan.train().source_model_hash());
}

// paddle2onnx's form: the weights `w` (inline) and `tied` (external data) as Constant nodes, the
// Identity tie reading the Constant. The Constants keep their place and take the new values (the
// external one inline); the Identity becomes an initializer of its own.
TEST_F(OnnxExportTest, ReplacesConstantNodeWeights) {
  onnx::ModelProto m = readModel(path("model.onnx"));
  onnx::GraphProto &g = *m.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (const onnx::TensorProto &t : g.initializer()) {
    if (t.name() == "c") {
      *kept.Add() = t;
      continue;
    }
    onnx::NodeProto *n = nodes.Add();
    n->set_op_type("Constant");
    n->set_name(t.name() + "_const");
    n->add_output(t.name());
    onnx::AttributeProto *a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = t;
  }
  for (const onnx::NodeProto &n : g.node()) *nodes.Add() = n;
  *g.mutable_node() = nodes;
  *g.mutable_initializer() = kept;
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  writeFile(path("model.onnx"), bytes);
  auto hash = fnv1a64File(path("model.onnx"));
  ASSERT_TRUE(static_cast<bool>(hash));
  loaded.plan.mutable_train()->set_source_model_hash(*hash);

  ASSERT_FALSE(static_cast<bool>(exportWith(values, path("out.onnx"))));
  onnx::ModelProto out = readModel(path("out.onnx"));
  std::map<std::string, const onnx::TensorProto *> constants;
  std::vector<std::string> ops;
  for (const onnx::NodeProto &n : out.graph().node()) {
    ops.push_back(n.op_type());
    if (n.op_type() == "Constant") constants[n.output(0)] = &n.attribute(0).t();
  }
  EXPECT_EQ(ops, (std::vector<std::string>{"Constant", "Constant", "MatMul", "MatMul", "MatMul",
                                           "Add", "Add"}));
  for (const char *name : {"w", "tied"}) {
    ASSERT_TRUE(constants.count(name)) << name;
    EXPECT_EQ(constants[name]->data_location(), onnx::TensorProto::DEFAULT) << name;
    EXPECT_EQ(floatsOf(*constants[name]), values.at(name).data) << name;
  }
  ASSERT_EQ(out.graph().initializer_size(), 2);  // c, and the Identity's own copy
  EXPECT_EQ(out.graph().initializer(1).name(), "tied_copy");
  EXPECT_EQ(floatsOf(out.graph().initializer(1)), values.at("tied_copy").data);
}

// export --inference: a training-mode BatchNormalization (torch's TrainingMode.TRAINING export:
// outputs Y, running_mean, running_var) becomes an inference one with its output Y alone; a
// dropped output that another node reads is an error naming the node.
TEST_F(OnnxExportTest, InferenceTurnsTrainingModeBatchNormIntoInference) {
  auto withBatchNorm = [&](bool readRunningMean) {
    onnx::ModelProto m = readModel(path("model.onnx"));
    onnx::NodeProto *bn = m.mutable_graph()->add_node();
    bn->set_op_type("BatchNormalization");
    bn->set_name("bn");
    for (const char *in : {"s", "c", "c", "c", "c"}) bn->add_input(in);
    for (const char *out : {"z", "bn.running_mean_out", "bn.running_var_out"}) bn->add_output(out);
    onnx::AttributeProto *a = bn->add_attribute();
    a->set_name("training_mode");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
    if (readRunningMean) {
      onnx::NodeProto *n = m.mutable_graph()->add_node();
      n->set_op_type("Identity");
      n->set_name("reads_mean");
      n->add_input("bn.running_mean_out");
      n->add_output("m");
    }
    std::string bytes;
    ASSERT_TRUE(m.SerializeToString(&bytes));
    writeFile(path("model.onnx"), bytes);
    auto hash = fnv1a64File(path("model.onnx"));
    ASSERT_TRUE(static_cast<bool>(hash));
    loaded.plan.mutable_train()->set_source_model_hash(*hash);
  };
  auto batchNormOf = [&](const std::string &file) {
    onnx::ModelProto out = readModel(file);
    for (const onnx::NodeProto &n : out.graph().node())
      if (n.op_type() == "BatchNormalization") return n;
    ADD_FAILURE() << "no BatchNormalization in " << file;
    return onnx::NodeProto();
  };
  withBatchNorm(false);
  ASSERT_FALSE(static_cast<bool>(exportWith(values, path("train.onnx"))));
  onnx::NodeProto kept = batchNormOf(path("train.onnx"));
  EXPECT_EQ(kept.output_size(), 3);
  EXPECT_EQ(kept.attribute(0).i(), 1);
  ASSERT_FALSE(static_cast<bool>(exportWith(values, path("eval.onnx"), /*inference=*/true)));
  onnx::NodeProto bn = batchNormOf(path("eval.onnx"));
  ASSERT_EQ(bn.output_size(), 1);
  EXPECT_EQ(bn.output(0), "z");
  EXPECT_EQ(bn.attribute(0).name(), "training_mode");
  EXPECT_EQ(bn.attribute(0).i(), 0);

  withBatchNorm(true);
  EXPECT_EQ(errorOf(exportWith(values, path("bad.onnx"), /*inference=*/true)),
            path("model.onnx") + ": node 'bn' (BatchNormalization): --inference drops its output "
                                 "'bn.running_mean_out' (a training-mode output), which the graph reads");
  EXPECT_FALSE(llvm::sys::fs::exists(path("bad.onnx")));
}

TEST_F(OnnxExportTest, ModelWithoutParametersIsCopiedInline) {
  loaded.plan.clear_states();  // an inference plan: nothing replaced, external data inlined
  ASSERT_FALSE(static_cast<bool>(exportWith({}, path("out.onnx"))));
  onnx::ModelProto m = readModel(path("out.onnx"));
  ASSERT_EQ(m.graph().initializer_size(), 3);
  EXPECT_EQ(floatsOf(m.graph().initializer(0)), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(floatsOf(m.graph().initializer(1)),
            (std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}));
  EXPECT_EQ(floatsOf(m.graph().initializer(2)), (std::vector<float>{7, 8}));
  EXPECT_EQ(m.graph().node_size(), 6);  // the Identity stays
}

TEST_F(OnnxExportTest, ValuesFromPlanWeightsAndFromCheckpoint) {
  // No checkpoint: the plan's initial weights (keys init.<name>).
  std::vector<NamedTensor> init;
  for (auto &[name, v] : values)
    init.push_back({"init." + name, DType::F32, v.shape, v.data.data(), v.data.size() * 4});
  ASSERT_FALSE(static_cast<bool>(writeSafetensors(path("model.safetensors"), init)));
  auto opened = SafetensorsFile::open(path("model.safetensors"));
  ASSERT_TRUE(static_cast<bool>(opened));
  loaded.weights = std::move(*opened);
  ASSERT_FALSE(static_cast<bool>(exportOnnxCommand(loaded, "", path("from-init.onnx"))));
  expectExported(path("from-init.onnx"), values);

  // A checkpoint (written by saveCheckpoint) found through `latest`: tensors named like the states.
  std::map<std::string, Value> trained = values;
  for (auto &[name, v] : trained)
    for (float &f : v.data) f = f * 3 + 1;
  std::unique_ptr<Device> device = createCpuDevice();
  auto store = StateStore::create(loaded, *device);
  ASSERT_TRUE(static_cast<bool>(store)) << llvm::toString(store.takeError());
  for (auto &[name, v] : trained) ASSERT_FALSE(static_cast<bool>((*store)->write(name, v.data.data(), v.data.size() * 4)));
  auto saved = saveCheckpoint(path("ckpt"), **store, CheckpointInfo{7, 7, 0, 0});
  ASSERT_TRUE(static_cast<bool>(saved)) << llvm::toString(saved.takeError());
  ASSERT_FALSE(static_cast<bool>(exportOnnxCommand(loaded, path("ckpt"), path("from-ckpt.onnx"))));
  expectExported(path("from-ckpt.onnx"), trained);

  // The export never writes over the plan, its weights, a file of the checkpoint or a folder.
  writeFile(path("model.cplan"), "plan");
  std::string msg;
  for (const char *f : {"model.cplan", "model.safetensors", "ckpt/latest", "ckpt/step-00000007/model.safetensors",
                        "ckpt/step-00000007/manifest.json", "ckpt"}) {
    auto before = fnv1a64File(path(f));
    msg = errorOf(exportOnnxCommand(loaded, path("ckpt"), path(f)));
    EXPECT_NE(msg.find(path(f) + " is "), std::string::npos) << f << ": " << msg;
    EXPECT_TRUE(msg.find("choose another --onnx path") != std::string::npos ||
                msg.find("is a directory; --onnx takes the path of the file to write") != std::string::npos)
        << msg;
    if (before) {
      auto after = fnv1a64File(path(f));
      ASSERT_TRUE(static_cast<bool>(after));
      EXPECT_EQ(*before, *after) << f;
    } else {
      llvm::consumeError(before.takeError());
    }
  }
  EXPECT_TRUE(llvm::sys::fs::is_directory(path("ckpt")));

  // A flipped bit in the checkpoint is found by the loader's manifest check, not exported.
  std::string model = path("ckpt/step-00000007/model.safetensors");
  auto buf = llvm::MemoryBuffer::getFile(model);
  ASSERT_TRUE(static_cast<bool>(buf));
  std::string bytes = (*buf)->getBuffer().str();
  bytes[bytes.size() - 3] ^= 0x10;
  writeFile(model, bytes);
  msg = errorOf(exportOnnxCommand(loaded, path("ckpt/step-00000007"), path("bad.onnx")));
  EXPECT_NE(msg.find(model + ": FNV-1a hash "), std::string::npos) << msg;
  EXPECT_FALSE(llvm::sys::fs::exists(path("bad.onnx")));

  msg = errorOf(exportOnnxCommand(loaded, path("nowhere"), path("bad.onnx")));
  EXPECT_NE(msg.find("nowhere"), std::string::npos) << msg;
}

TEST_F(OnnxExportTest, MissingOrChangedModel) {
  loaded.plan.mutable_train()->set_source_model(path("gone.onnx"));
  std::string msg = errorOf(exportWith(values, path("out.onnx")));
  EXPECT_NE(msg.find(path("gone.onnx")), std::string::npos) << msg;

  loaded.plan.mutable_train()->set_source_model(path("model.onnx"));
  loaded.plan.mutable_train()->set_source_model_hash(loaded.plan.train().source_model_hash() ^ 1);
  msg = errorOf(exportWith(values, path("out.onnx")));
  EXPECT_NE(msg.find("the model changed since compilation"), std::string::npos) << msg;

  loaded.plan.mutable_train()->clear_source_model();
  msg = errorOf(exportWith(values, path("out.onnx")));
  EXPECT_NE(msg.find("records no source model"), std::string::npos) << msg;
  EXPECT_FALSE(llvm::sys::fs::exists(path("out.onnx")));
}

TEST_F(OnnxExportTest, RefusesToOverwriteItsInputs) {
  std::string msg = errorOf(exportWith(values, path("model.onnx")));
  EXPECT_NE(msg.find("is the source model"), std::string::npos) << msg;
  msg = errorOf(exportWith(values, path("weights.bin")));
  EXPECT_NE(msg.find("is an external data file"), std::string::npos) << msg;
  auto hash = fnv1a64File(path("model.onnx"));
  ASSERT_TRUE(static_cast<bool>(hash));
  EXPECT_EQ(*hash, loaded.plan.train().source_model_hash());
}

TEST_F(OnnxExportTest, BadValuesAndSourcesLeaveOutputUntouched) {
  writeFile(path("out.onnx"), "previous");
  auto expectError = [&](const std::map<std::string, Value> &vals, const std::string &needle) {
    std::string msg = errorOf(exportWith(vals, path("out.onnx")));
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    auto buf = llvm::MemoryBuffer::getFile(path("out.onnx"));
    ASSERT_TRUE(static_cast<bool>(buf));
    EXPECT_EQ((*buf)->getBuffer(), "previous");
  };
  auto missing = values;
  missing.erase("tied_copy");
  expectError(missing, "test: no value for 'tied_copy'");

  auto badShape = values;
  badShape["w"].shape = {3, 2};
  expectError(badShape, "parameter 'w': the value has shape [3, 2], the plan says [2, 3]");

  loaded.plan.mutable_states(2)->set_source("nope");
  expectError(values, "parameter 'tied': its source 'nope' is neither an initializer");
  loaded.plan.mutable_states(2)->set_source("");
  expectError(values, "parameter 'tied' has no source");
  loaded.plan.mutable_states(2)->set_source("tied");

  // The plan's shape disagrees with the model's initializer.
  loaded.plan.mutable_states(0)->set_shape(0, 3);
  loaded.plan.mutable_states(0)->set_shape(1, 2);
  auto transposed = values;
  transposed["w"].shape = {3, 2};
  expectError(transposed, "initializer 'w' of");
}

TEST_F(OnnxExportTest, ExternalDataOutOfRange) {
  writeFile(path("weights.bin"), std::string(12, 'x'));  // shorter than tied's range
  std::string msg = errorOf(exportWith(values, path("out.onnx")));
  EXPECT_NE(msg.find("initializer 'c': external data range [32, 40) exceeds 'weights.bin'"),
            std::string::npos)
      << msg;
}

// export --onnx reads external data by the importer's rule (runtime/ExternalData.h): a symlink
// leaving the model's folder, to a file or through a folder, is refused, whatever its bytes.
TEST_F(OnnxExportTest, ExternalDataSymlinkLeavingTheFolder) {
  llvm::SmallString<128> outside;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-onnx-export-outside", outside));
  llvm::SmallString<128> secret(outside);
  llvm::sys::path::append(secret, "weights.bin");
  ASSERT_FALSE(llvm::sys::fs::rename(path("weights.bin"), secret));
  ASSERT_FALSE(llvm::sys::fs::create_link(secret, path("weights.bin")));
  std::string msg = errorOf(exportWith(values, path("out.onnx")));
  EXPECT_NE(msg.find("external data location 'weights.bin' resolves to '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("', outside the model's folder '"), std::string::npos) << msg;
  EXPECT_FALSE(llvm::sys::fs::exists(path("out.onnx")));

  // The same through a symlinked folder: weights.bin -> sub/weights.bin, sub -> OUTSIDE.
  ASSERT_FALSE(llvm::sys::fs::remove(path("weights.bin")));
  ASSERT_FALSE(llvm::sys::fs::create_link(outside, path("sub")));
  ASSERT_FALSE(llvm::sys::fs::create_link("sub/weights.bin", path("weights.bin")));
  msg = errorOf(exportWith(values, path("out.onnx")));
  EXPECT_NE(msg.find("resolves to '"), std::string::npos) << msg;
  EXPECT_FALSE(llvm::sys::fs::exists(path("out.onnx")));
  llvm::sys::fs::remove_directories(outside);
}

}  // namespace

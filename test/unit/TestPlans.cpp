//===- TestPlans.cpp - The MLP plan fixture --------------------------------------------------===//
#include "TestPlans.h"

#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Safetensors.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace colossal::runtime::testing {

namespace {
plan::Buffer *addBuffer(plan::Program &p, const std::string &name, std::vector<int64_t> shape,
                        plan::Storage storage, uint64_t offset = 0, const std::string &weight = "") {
  plan::Buffer *b = p.add_buffers();
  b->set_id(p.buffers_size() - 1);
  b->set_name(name);
  b->set_dtype(plan::F32);
  for (int64_t d : shape) b->add_shape(d);
  b->set_storage(storage);
  b->set_offset(offset);
  b->set_size_bytes(numElements(shape) * 4);
  b->set_weight_name(weight);
  return b;
}

void addInst(plan::Program &p, const std::string &op, std::vector<uint32_t> in, std::vector<uint32_t> out,
             const std::string &loc) {
  plan::Instruction *i = p.add_instructions();
  i->set_op(op);
  for (uint32_t v : in) i->add_inputs(v);
  for (uint32_t v : out) i->add_outputs(v);
  i->set_loc(loc);
}
}  // namespace

void MlpPlanTest::SetUp() {
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-plan", dir));
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto fill = [&](std::vector<float> &v, size_t n) {
    v.resize(n);
    for (float &f : v) f = dist(rng);
  };
  fill(x, 32);
  fill(w1, 128);
  fill(b1, 16);
  fill(w2, 48);

  model.set_version(kPlanVersion);
  model.set_producer("unit test");
  model.set_mode("inference");
  model.set_weights_file("model.safetensors");
  plan::Program &p = *model.add_programs();
  p.set_name("forward");
  p.set_role(plan::Program::FORWARD);
  p.set_device(plan::CPU);
  p.set_arena_bytes(512);
  addBuffer(p, "x", {4, 8}, plan::ARENA, 0);                              // 0
  addBuffer(p, "fc1.weight", {8, 16}, plan::WEIGHT, 0, "fc1.weight");     // 1
  addBuffer(p, "fc1.bias", {16}, plan::WEIGHT, 0, "fc1.bias");            // 2
  addBuffer(p, "h", {4, 16}, plan::ARENA, 128);                           // 3
  addBuffer(p, "h_relu", {4, 16}, plan::ARENA, 128);                      // 4 (aliases h)
  addBuffer(p, "fc2.weight", {16, 3}, plan::WEIGHT, 0, "fc2.weight");     // 5
  addBuffer(p, "logits", {4, 3}, plan::ARENA, 384);                       // 6
  addBuffer(p, "probs", {4, 3}, plan::ARENA, 448);                        // 7
  addInst(p, "matmul", {0, 1}, {3}, "/fc1/MatMul");
  addInst(p, "add", {3, 2}, {3}, "/fc1/Add");
  addInst(p, "relu", {3}, {4}, "/act/Relu");
  addInst(p, "matmul", {4, 5}, {6}, "/fc2/MatMul");
  addInst(p, "softmax", {6}, {7}, "/Softmax");
  (*p.mutable_instructions(4)->mutable_attrs())["axis"].set_i(1);
  plan::Binding *in = p.add_inputs();
  in->set_name("x");
  in->set_buffer(0);
  plan::Binding *o1 = p.add_outputs();
  o1->set_name("logits");
  o1->set_buffer(6);
  plan::Binding *o2 = p.add_outputs();
  o2->set_name("probs");
  o2->set_buffer(7);
  writeWeights();
}

void MlpPlanTest::TearDown() { llvm::sys::fs::remove_directories(dir); }

std::string MlpPlanTest::path(const std::string &name) const {
  llvm::SmallString<128> p(dir);
  llvm::sys::path::append(p, name);
  return std::string(p);
}

void MlpPlanTest::writeWeights() {
  std::vector<NamedTensor> ts = {{"fc1.weight", DType::F32, {8, 16}, w1.data(), w1.size() * 4},
                                 {"fc1.bias", DType::F32, {16}, b1.data(), b1.size() * 4},
                                 {"fc2.weight", DType::F32, {16, 3}, w2.data(), w2.size() * 4}};
  ASSERT_NO_ERR(writeSafetensors(path("model.safetensors"), ts));
  uint64_t size = 0;
  ASSERT_FALSE(llvm::sys::fs::file_size(path("model.safetensors"), size));
  auto hash = fnv1a64File(path("model.safetensors"));
  ASSERT_TRUE(static_cast<bool>(hash));
  model.set_weights_size(size);
  model.set_weights_hash(*hash);
}

std::string MlpPlanTest::writePlan(const std::string &name) {
  const std::string bytes = serializePlan(model);
  std::error_code ec;
  llvm::raw_fd_ostream os(path(name), ec);
  os << bytes;
  return path(name);
}

void MlpPlanTest::reference(const std::vector<float> &in, std::vector<float> &logits,
                            std::vector<float> &probs) const {
  std::vector<double> h(64);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 16; ++j) {
      double s = b1[j];
      for (int k = 0; k < 8; ++k) s += double(in[i * 8 + k]) * w1[k * 16 + j];
      h[i * 16 + j] = s > 0 ? s : 0;
    }
  logits.assign(12, 0);
  probs.assign(12, 0);
  for (int i = 0; i < 4; ++i) {
    double m = -INFINITY, z = 0;
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 16; ++k) s += h[i * 16 + k] * w2[k * 3 + j];
      logits[i * 3 + j] = static_cast<float>(s);
      m = std::max(m, s);
    }
    for (int j = 0; j < 3; ++j) z += std::exp(logits[i * 3 + j] - m);
    for (int j = 0; j < 3; ++j) probs[i * 3 + j] = static_cast<float>(std::exp(logits[i * 3 + j] - m) / z);
  }
}

}  // namespace colossal::runtime::testing

//===- ExecutorTest.cpp - Running the hand-built MLP plan -----------------------------------===//
#include "TestPlans.h"

#include "colossal/runtime/Executor.h"

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

class ExecutorTest : public MlpPlanTest {};

TEST_F(ExecutorTest, RunsMlpAgainstReference) {
  auto loaded = loadPlan(writePlan(), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  auto device = createCpuDevice();
  auto ex = Executor::create(**loaded, KernelRegistry::cpu(), *device);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  ASSERT_EQ((*ex)->inputs().size(), 1u);
  ASSERT_EQ((*ex)->outputs().size(), 2u);
  std::vector<float> logits, probs;
  reference(x, logits, probs);
  for (int run = 0; run < 3; ++run) {  // repeated runs give the same result
    ASSERT_NO_ERR((*ex)->setInput("x", DType::F32, {4, 8}, x.data()));
    ASSERT_NO_ERR((*ex)->run());
    auto l = (*ex)->output("logits");
    auto p = (*ex)->output("probs");
    ASSERT_TRUE(static_cast<bool>(l) && static_cast<bool>(p));
    EXPECT_EQ(l->shape, Shape({4, 3}));
    expectClose(l->as<float>(), logits.data(), 12, 1e-5f, 1e-5f);
    expectClose(p->as<float>(), probs.data(), 12, 1e-5f, 1e-5f);
  }
}

TEST_F(ExecutorTest, InputErrors) {
  auto loaded = loadPlan(writePlan(), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  auto device = createCpuDevice();
  auto ex = Executor::create(**loaded, KernelRegistry::cpu(), *device);
  ASSERT_TRUE(static_cast<bool>(ex));
  EXPECT_EQ(errorMessage((*ex)->setInput("y", DType::F32, {4, 8}, x.data())),
            "unknown input 'y' (the plan's inputs: x)");
  EXPECT_EQ(errorMessage((*ex)->setInput("x", DType::I64, {4, 8}, x.data())),
            "input 'x': expected dtype f32, got i64");
  EXPECT_EQ(errorMessage((*ex)->setInput("x", DType::F32, {8, 4}, x.data())),
            "input 'x': expected shape [4, 8], got [8, 4]");
  EXPECT_EQ(errorMessage((*ex)->output("nope").takeError()), "unknown output 'nope'");
}

TEST_F(ExecutorTest, UnknownProgram) {
  auto loaded = loadPlan(writePlan(), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded));
  auto device = createCpuDevice();
  auto ex = Executor::create(**loaded, KernelRegistry::cpu(), *device, "backward");
  ASSERT_FALSE(static_cast<bool>(ex));
  EXPECT_NE(llvm::toString(ex.takeError()).find("no program named 'backward'"), std::string::npos);
}

TEST_F(ExecutorTest, DataDependentKernelErrorNamesInstruction) {
  // gather with an index read from the input: out of range at run time.
  plan::Program &p = *model.mutable_programs(0);
  plan::Buffer *idx = p.add_buffers();
  idx->set_id(8);
  idx->set_name("ids");
  idx->set_dtype(plan::I64);
  idx->add_shape(2);
  idx->set_storage(plan::ARENA);
  idx->set_offset(512);
  idx->set_size_bytes(16);
  plan::Buffer *rows = p.add_buffers();
  rows->set_id(9);
  rows->set_name("rows");
  rows->set_dtype(plan::F32);
  rows->add_shape(2);
  rows->add_shape(3);
  rows->set_storage(plan::ARENA);
  rows->set_offset(576);
  rows->set_size_bytes(24);
  p.set_arena_bytes(640);
  plan::Instruction *g = p.add_instructions();
  g->set_op("gather");
  g->add_inputs(6);
  g->add_inputs(8);
  g->add_outputs(9);
  g->set_loc("/Gather");
  plan::Binding *b = p.add_inputs();
  b->set_name("ids");
  b->set_buffer(8);
  auto loaded = loadPlan(writePlan(), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  auto device = createCpuDevice();
  auto ex = Executor::create(**loaded, KernelRegistry::cpu(), *device);
  ASSERT_TRUE(static_cast<bool>(ex));
  int64_t ids[2] = {1, 4};
  ASSERT_NO_ERR((*ex)->setInput("x", DType::F32, {4, 8}, x.data()));
  ASSERT_NO_ERR((*ex)->setInput("ids", DType::I64, {2}, ids));
  EXPECT_EQ(errorMessage((*ex)->run()),
            "instruction 5 (gather at /Gather): index 4 at position 1 is out of range for axis of size 4");
}

}  // namespace

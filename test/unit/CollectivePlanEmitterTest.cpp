//===- CollectivePlanEmitterTest.cpp - lowering of the tensor-parallel collectives -------------===//
//
// The collectives of ColossalParallelOps.td lowered to plan instructions (lib/Target/Plan), the
// plan's mesh (names, sizes, roles) taken from the module's colossal.mesh, and the data-parallel
// gradient all_reduce_in_place (one per gradient, or one bucket) under a mesh with more axes
// than dp. Emitted plans
// are loaded by the runtime's loader (which validates collectives against the mesh) and, on a
// one-rank mesh, run by the executor against values computed here.
//
//===----------------------------------------------------------------------------------------===//
#include "PlanEmitterFixture.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Device.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/Mesh.h"
#include "colossal/runtime/Plan.h"

#include <gtest/gtest.h>

namespace {

namespace rt = colossal::runtime;
namespace plan = colossal::plan;
using CollectivePlanTest = colossal::test::PlanEmitterFixture;

/// `x` [4, 6] through every collective on the mesh `meshOp` (a colossal.mesh op).
std::string collectiveModule(const std::string &meshOp, int64_t tp, int64_t dp) {
  auto s = [](int64_t v) { return std::to_string(v); };
  return "module {\n" + meshOp + R"mlir(
func.func @forward(%x: tensor<4x6xf32> {colossal.input = "x"})
    -> (tensor<4x6xf32> {colossal.output = "ar"}, tensor<4x)mlir" + s(6 * tp * dp) +
         R"mlir(xf32> {colossal.output = "ag"},
        tensor<)mlir" + s(4 / dp) + R"mlir(x6xf32> {colossal.output = "rs"},
        tensor<4x)mlir" + s(6 / tp) + R"mlir(xf32> {colossal.output = "ss"},
        tensor<i64> {colossal.output = "idx"}) {
  %a = colossal.all_reduce %x {axes = ["tp"], reduction = "min"} : tensor<4x6xf32> -> tensor<4x6xf32>
  %g = colossal.all_gather %x {axes = ["tp", "dp"], dim = 1} : tensor<4x6xf32> -> tensor<4x)mlir" +
         s(6 * tp * dp) + R"mlir(xf32>
  %r = colossal.reduce_scatter %x {axes = ["dp"], dim = 0} : tensor<4x6xf32> -> tensor<)mlir" +
         s(4 / dp) + R"mlir(x6xf32>
  %t = colossal.shard_slice %x {axes = ["tp"], dim = 1} : tensor<4x6xf32> -> tensor<4x)mlir" +
         s(6 / tp) + R"mlir(xf32>
  %i = colossal.axis_index {axes = ["dp", "tp"]} : tensor<i64>
  return %a, %g, %r, %t, %i : tensor<4x6xf32>, tensor<4x)mlir" + s(6 * tp * dp) +
         R"mlir(xf32>, tensor<)mlir" + s(4 / dp) + R"mlir(x6xf32>, tensor<4x)mlir" + s(6 / tp) +
         R"mlir(xf32>, tensor<i64>
}
}
)mlir";
}

std::string meshAttrs(int64_t dp, int64_t tp) {
  return "colossal.mesh @mesh axes = [\"dp\", \"tp\"] shape = [" + std::to_string(dp) + ", " +
         std::to_string(tp) + "] roles = [\"data\", \"tensor\"]";
}

std::map<std::string, std::string> stringAttrs(const plan::Instruction &inst) {
  std::map<std::string, std::string> out;
  for (const auto &[k, v] : inst.attrs())
    out[k] = v.has_s() ? v.s() : std::to_string(v.i());
  return out;
}

TEST_F(CollectivePlanTest, OneToOneWithJoinedAxes) {
  ASSERT_TRUE(succeeded(emit(collectiveModule(meshAttrs(2, 2), 2, 2)))) << diagnostics;
  plan::Plan p = readPlan();
  ASSERT_EQ(p.mesh_size(), 2);
  EXPECT_EQ(p.mesh(0).name(), "dp");
  EXPECT_EQ(p.mesh(0).size(), 2);
  EXPECT_EQ(p.mesh(0).role(), plan::MeshAxis::DATA);
  EXPECT_EQ(p.mesh(1).name(), "tp");
  EXPECT_EQ(p.mesh(1).size(), 2);
  EXPECT_EQ(p.mesh(1).role(), plan::MeshAxis::TENSOR);
  const plan::Program &prog = p.programs(0);
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> got;
  for (const plan::Instruction &inst : prog.instructions())
    if (inst.op() != "copy")
      got.push_back({inst.op(), stringAttrs(inst)});
  using Attrs = std::map<std::string, std::string>;
  EXPECT_EQ(got, (std::vector<std::pair<std::string, Attrs>>{
                     {"all_reduce", Attrs{{"axes", "tp"}, {"reduction", "min"}}},
                     {"all_gather", Attrs{{"axes", "tp,dp"}, {"dim", "1"}}},
                     {"reduce_scatter", Attrs{{"axes", "dp"}, {"dim", "0"}, {"reduction", "sum"}}},
                     {"shard_slice", Attrs{{"axes", "tp"}, {"dim", "1"}}},
                     {"axis_index", Attrs{{"axes", "dp,tp"}}},
                 }));
  colossal::test::expectSoundLayout(prog);
  // The runtime's loader accepts it (collectives checked against the 2 x 2 mesh).
  auto loaded = rt::loadPlan(path("model.cplan"), rt::KernelRegistry::cpu());
  EXPECT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
}

/// A one-rank plan whose axes have size 1, run with a local communication context (no MPI):
/// every collective of a one-rank group gives its input (the slice is the whole tensor) and
/// axis_index gives 0.
TEST_F(CollectivePlanTest, OneRankMeshRuns) {
  ASSERT_TRUE(succeeded(emit(collectiveModule(meshAttrs(1, 1), 1, 1)))) << diagnostics;
  auto loaded = rt::loadPlan(path("model.cplan"), rt::KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  auto mesh = rt::Mesh::fromPlan((*loaded)->plan, "model.cplan");
  ASSERT_TRUE(static_cast<bool>(mesh)) << llvm::toString(mesh.takeError());
  auto comm = rt::CommContext::create(*mesh, rt::CommOptions());
  ASSERT_TRUE(static_cast<bool>(comm)) << llvm::toString(comm.takeError());
  ASSERT_FALSE(static_cast<bool>((*comm)->prepare((*loaded)->plan.programs(0))));
  std::unique_ptr<rt::Device> device = rt::createCpuDevice();
  rt::ExecutorOptions options;
  options.comm = comm->get();
  auto ex = rt::Executor::create(**loaded, rt::KernelRegistry::cpu(), *device, "forward", options);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i)
    x[i] = 0.25f * i - 3.0f;
  ASSERT_FALSE(static_cast<bool>((*ex)->setInput("x", rt::DType::F32, {4, 6}, x.data())));
  llvm::Error run = (*ex)->run();
  ASSERT_FALSE(static_cast<bool>(run)) << llvm::toString(std::move(run));
  for (const char *name : {"ar", "ag", "rs", "ss"}) {
    auto t = (*ex)->output(name);
    ASSERT_TRUE(static_cast<bool>(t)) << name;
    EXPECT_EQ(std::vector<float>(t->as<float>(), t->as<float>() + t->numel()), x) << name;
  }
  auto idx = (*ex)->output("idx");
  ASSERT_TRUE(static_cast<bool>(idx));
  EXPECT_EQ(*idx->as<int64_t>(), 0);
}

/// Without a colossal.mesh the plan has no mesh (one rank); a collective then names no axis the
/// plan knows, which the dialect cannot check but the runtime's loader refuses.
TEST_F(CollectivePlanTest, NoMeshIsOneRank) {
  constexpr const char *kModule = R"mlir(
func.func @forward(%x: tensor<4x6xf32> {colossal.input = "x"}) -> (tensor<4x6xf32> {colossal.output = "y"}) {
  %y = colossal.relu %x : tensor<4x6xf32>
  return %y : tensor<4x6xf32>
}
)mlir";
  ASSERT_TRUE(succeeded(emit(kModule))) << diagnostics;
  EXPECT_EQ(readPlan().mesh_size(), 0);
}

/// A train module on mesh dp=2 x tp=2 whose optimizer_step starts with the data-parallel
/// gradient sum over 'dp' (colossal-data-parallel's output): GRADIENT_SUMS is replaced by one
/// all_reduce_in_place per gradient or by one bucket of both.
constexpr const char *kTrainModule = R"mlir(
module attributes {colossal.train = {tokens_input = "tokens", labels_input = "labels",
                                     optimizer = "sgd", lr = 1.0e-2 : f64}} {
colossal.mesh @mesh axes = ["dp", "tp"] shape = [2, 2] roles = ["data", "tensor"]
func.func @forward(%tok: tensor<4x3xi64> {colossal.input = "tokens"},
    %w: tensor<2x2xf32> {colossal.param = "w", colossal.value = dense<1.0> : tensor<2x2xf32>},
    %b: tensor<2xf32> {colossal.param = "b", colossal.value = dense<0.5> : tensor<2xf32>})
    -> (tensor<4x3x2xf32> {colossal.output = "logits"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<4x3xi64>) -> tensor<4x3x2xf32>
  %y = colossal.add %e, %b : (tensor<4x3x2xf32>, tensor<2xf32>) -> tensor<4x3x2xf32>
  return %y : tensor<4x3x2xf32>
}
func.func @eval(%w: tensor<2x2xf32> {colossal.param = "w"},
    %tok: tensor<1x3xi64> {colossal.input = "tokens"}, %lab: tensor<1x3xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %l = colossal.reduce_mean %w {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
func.func @train_step(%w: tensor<2x2xf32> {colossal.param = "w"}, %b: tensor<2xf32> {colossal.param = "b"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"}, %gb: tensor<2xf32> {colossal.state = "b.grad"},
    %tok: tensor<1x3xi64> {colossal.input = "tokens"}, %lab: tensor<1x3xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %l = colossal.reduce_mean %w {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x2xf32>) -> tensor<f32>
  colossal.accumulate_grad %gw, %w {scale = 0.25 : f64} : tensor<2x2xf32>, tensor<2x2xf32>
  colossal.accumulate_grad %gb, %b {scale = 0.25 : f64} : tensor<2xf32>, tensor<2xf32>
  return %l : tensor<f32>
}
func.func @optimizer_step(%w: tensor<2x2xf32> {colossal.param = "w"}, %b: tensor<2xf32> {colossal.param = "b"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"}, %gb: tensor<2xf32> {colossal.state = "b.grad"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
GRADIENT_SUMS
  %n = colossal.global_norm %gw, %gb : tensor<2x2xf32>, tensor<2xf32>
  colossal.sgd_update %w, %gw, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false, max_grad_norm = 0.0 : f64} : tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  colossal.sgd_update %b, %gb, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false, max_grad_norm = 0.0 : f64} : tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}
}
)mlir";

std::string trainModule(const std::string &sums) {
  std::string m = kTrainModule;
  return m.replace(m.find("GRADIENT_SUMS"), std::string("GRADIENT_SUMS").size(), sums);
}

TEST_F(CollectivePlanTest, DataParallelGradientsOverDpOnlyOnDpTpMesh) {
  colossal::PlanOptions options;
  options.mode = "train";
  std::string report;
  ASSERT_TRUE(succeeded(emit(trainModule(R"mlir(
  colossal.all_reduce_in_place %gw {axes = ["dp"]} : tensor<2x2xf32>
  colossal.all_reduce_in_place %gb {axes = ["dp"]} : tensor<2xf32>)mlir"),
                             &report, options)))
      << diagnostics;
  plan::Plan p = readPlan();
  ASSERT_EQ(p.programs_size(), 4);
  const plan::Program &opt = p.programs(3);
  ASSERT_EQ(opt.name(), "optimizer_step");
  std::vector<std::string> reduced;
  for (const plan::Instruction &inst : opt.instructions()) {
    if (inst.op() != "all_reduce")
      continue;
    EXPECT_EQ(stringAttrs(inst), (std::map<std::string, std::string>{{"axes", "dp"},
                                                                      {"reduction", "sum"}}));
    ASSERT_EQ(inst.inputs_size(), 1);
    EXPECT_EQ(inst.inputs(0), inst.outputs(0));
    reduced.push_back(opt.buffers(inst.inputs(0)).state_name());
  }
  EXPECT_EQ(reduced, (std::vector<std::string>{"w.grad", "b.grad"}));
  EXPECT_EQ(opt.instructions(0).op(), "all_reduce");
  EXPECT_EQ(opt.instructions(1).op(), "all_reduce");
  for (int k = 0; k < 3; ++k)
    for (const plan::Instruction &inst : p.programs(k).instructions())
      EXPECT_NE(inst.op(), "all_reduce") << p.programs(k).name();
  // Report: grad_accum = 4 (global batch 4, train_step 1 row), dp = 2; the gradients are
  // 16 + 8 = 24 bytes of f32 reduced once per step.
  EXPECT_NE(report.find("  all_reduce over 'dp': 24 bytes in 2 collectives; 12 elements (ZeRO count) = 2.000 Ψ\n"), std::string::npos)
      << report;
  EXPECT_NE(report.find("  train_step (2 calls per step): none\n"), std::string::npos) << report;
  EXPECT_NE(report.find("  total: 24 bytes; 12 elements (ZeRO count) = 2.000 Ψ with Ψ = 6 trainable elements\n"), std::string::npos) << report;
}

/// The same module with one gradient bucket (colossal-bucket-gradients' output): both gradients
/// in one in-place all_reduce (w.grad, b.grad), first in optimizer_step; the report counts one
/// call of 24 bytes.
TEST_F(CollectivePlanTest, DataParallelGradientBucketIsOneInstruction) {
  colossal::PlanOptions options;
  options.mode = "train";
  std::string report;
  ASSERT_TRUE(succeeded(emit(trainModule(R"mlir(
  colossal.all_reduce_in_place %gw, %gb {axes = ["dp"]} : tensor<2x2xf32>, tensor<2xf32>)mlir"),
                             &report, options)))
      << diagnostics;
  plan::Plan p = readPlan();
  const plan::Program &opt = p.programs(3);
  ASSERT_EQ(opt.name(), "optimizer_step");
  const plan::Instruction &bucket = opt.instructions(0);
  ASSERT_EQ(bucket.op(), "all_reduce");
  ASSERT_EQ(bucket.inputs_size(), 2);
  EXPECT_EQ(std::vector<uint32_t>(bucket.inputs().begin(), bucket.inputs().end()),
            std::vector<uint32_t>(bucket.outputs().begin(), bucket.outputs().end()));
  EXPECT_EQ(opt.buffers(bucket.inputs(0)).state_name(), "w.grad");
  EXPECT_EQ(opt.buffers(bucket.inputs(1)).state_name(), "b.grad");
  for (int i = 1; i < opt.instructions_size(); ++i)
    EXPECT_NE(opt.instructions(i).op(), "all_reduce");
  EXPECT_NE(report.find("    all_reduce over 'dp': 1 call, 24 bytes\n"), std::string::npos) << report;
  EXPECT_NE(report.find("  all_reduce over 'dp': 24 bytes in 1 collectives; 12 elements (ZeRO count) = 2.000 Ψ\n"), std::string::npos) << report;
}

} // namespace

//===- ShardedPlanTest.cpp - sharded weights and states from the IR to the runtime ----------===//
//
// A hand-written per-rank train module on mesh tp=2 (docs/parallelism.md "IR after
// colossal-spmd-partition"): a trainable embedding `w` split by rows, a frozen fused QKV weight
// split by columns in 3 blocks (with a reshape view of it). Checked: the weights file holds the
// GLOBAL tensors byte for byte; Buffer.sharding / StateTensor.sharding (the grad and AdamW
// moments inherit the param's); the runtime slices each rank's shard (weights, PARAM initial
// values) equal to a naive index formula over the global values, and the forward on each rank
// computes from its own shard; the loader's sharding checks and the emitter's errors.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/Checkpoint.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Safetensors.h"
#include "colossal/runtime/StateStore.h"
#include "PlanEmitterFixture.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

namespace plan = colossal::plan;
namespace rt = colossal::runtime;

namespace {

using ShardedPlanTest = colossal::test::PlanEmitterFixture;

/// w: global [8, 4], w[i][j] = 10 i + j; qkv: global [2, 12], qkv[i][j] = 100 i + j.
std::string denseRows(int rows, int cols, int rowScale) {
  std::string s = "dense<[";
  for (int i = 0; i < rows; ++i) {
    s += i ? ", [" : "[";
    for (int j = 0; j < cols; ++j)
      s += (j ? ", " : "") + std::to_string(rowScale * i + j) + ".0";
    s += "]";
  }
  return s + "]>";
}

std::string module(llvm::StringRef wSharding = R"(#colossal.sharding<@mesh, [{"tp"}, {}]>)",
                   llvm::StringRef wValueType = "tensor<8x4xf32>",
                   llvm::StringRef meshOp = R"(colossal.mesh @mesh axes = ["tp"] shape = [2] roles = ["tensor"])") {
  int rows = 0, cols = 0;  // of wValueType, "tensor<RxCxf32>"
  std::sscanf(wValueType.str().c_str(), "tensor<%dx%dx", &rows, &cols);
  std::string w = "{colossal.param = \"w\", colossal.sharding = " + wSharding.str() +
                  ", colossal.value = " + denseRows(rows, cols, 10) + " : " + wValueType.str() + "}";
  std::string qkv = "{colossal.param = \"qkv\", colossal.sharding = "
                    "#colossal.sharding<@mesh, [{}, {\"tp\"}/3]>, colossal.value = " +
                    denseRows(2, 12, 100) + " : tensor<2x12xf32>}";
  return R"(module attributes {
  colossal.train = {tokens_input = "tokens", labels_input = "labels", logits_output = "logits",
                    optimizer = "adamw", lr = 1.0e-3 : f64, trainable = ["w"]}} {
)" + meshOp.str() + R"(
func.func @forward(%tok: tensor<2x3xi64> {colossal.input = "tokens"}, %w: tensor<4x4xf32> )" + w +
         R"(, %q: tensor<2x6xf32> )" + qkv + R"()
    -> (tensor<2x3x4xf32> {colossal.output = "logits"}, tensor<3x4xf32> {colossal.output = "qv"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<4x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %v = colossal.reshape %q : tensor<2x6xf32> -> tensor<3x4xf32>
  %v2 = colossal.add %v, %v : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %e, %v2 : tensor<2x3x4xf32>, tensor<3x4xf32>
}
func.func @eval(%w: tensor<4x4xf32> {colossal.param = "w", colossal.sharding = )" + wSharding.str() + R"(}, %tok: tensor<2x3xi64> {colossal.input = "tokens"},
    %lab: tensor<2x3xi64> {colossal.input = "labels"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<4x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %m = colossal.reduce_mean %e {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  return %m : tensor<f32>
}
func.func @train_step(%w: tensor<4x4xf32> {colossal.param = "w", colossal.sharding = )" + wSharding.str() + R"(}, %gw: tensor<4x4xf32> {colossal.state = "w.grad"},
    %tok: tensor<2x3xi64> {colossal.input = "tokens"}, %lab: tensor<2x3xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<4x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %m = colossal.reduce_mean %e {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  colossal.accumulate_grad %gw, %w {scale = 1.0 : f64} : tensor<4x4xf32>, tensor<4x4xf32>
  return %m : tensor<f32>
}
func.func @optimizer_step(%w: tensor<4x4xf32> {colossal.param = "w", colossal.sharding = )" + wSharding.str() + R"(}, %gw: tensor<4x4xf32> {colossal.state = "w.grad"},
    %mw: tensor<4x4xf32> {colossal.state = "w.exp_avg"}, %vw: tensor<4x4xf32> {colossal.state = "w.exp_avg_sq"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
  %n = colossal.global_norm %gw : tensor<4x4xf32>
  colossal.adamw_update %w, %gw, %mw, %vw, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64} : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}
}
)";
}

std::vector<int64_t> vec(const google::protobuf::RepeatedField<int64_t> &r) {
  return std::vector<int64_t>(r.begin(), r.end());
}

/// The reference shards, from the doc's formula. w rows split over tp=2: rank r holds rows
/// [4r, 4r + 4). qkv [2, 12] as 3 blocks of 4 columns, each split in 2: rank r holds columns
/// 4b + 2r + {0, 1} of block b.
float wGlobal(int i, int j) { return 10.0f * i + j; }
float qkvGlobal(int i, int j) { return 100.0f * i + j; }
std::vector<float> wShard(int r) {
  std::vector<float> out;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      out.push_back(wGlobal(4 * r + i, j));
  return out;
}
std::vector<float> qkvShard(int r) {
  std::vector<float> out;
  for (int i = 0; i < 2; ++i)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 2; ++c)
        out.push_back(qkvGlobal(i, 4 * b + 2 * r + c));
  return out;
}

TEST_F(ShardedPlanTest, GlobalWeightsFileAndShardingsInThePlan) {
  ASSERT_TRUE(succeeded(emit(module()))) << diagnostics;
  plan::Plan p = readPlan();
  // The mesh comes from the module.
  ASSERT_EQ(p.mesh_size(), 1);
  EXPECT_EQ(p.mesh(0).name(), "tp");
  EXPECT_EQ(p.mesh(0).size(), 2);

  // Weights file: global tensors.
  auto weights = rt::SafetensorsFile::open(path("model.safetensors"));
  ASSERT_TRUE(bool(weights)) << llvm::toString(weights.takeError());
  const rt::SafetensorsTensor *w = (*weights)->find("w");
  const rt::SafetensorsTensor *q = (*weights)->find("qkv");
  ASSERT_TRUE(w && q);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(q->shape, (std::vector<int64_t>{2, 12}));
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(static_cast<const float *>(w->data)[i * 4 + j], wGlobal(i, j));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 12; ++j)
      EXPECT_EQ(static_cast<const float *>(q->data)[i * 12 + j], qkvGlobal(i, j));

  // States: local shapes; the param's sharding on it, its grad and its moments.
  ASSERT_EQ(p.states_size(), 4);
  for (const plan::StateTensor &st : p.states()) {
    SCOPED_TRACE(st.name());
    EXPECT_EQ(vec(st.shape()), (std::vector<int64_t>{4, 4}));
    ASSERT_TRUE(st.has_sharding());
    EXPECT_EQ(vec(st.sharding().global_shape()), (std::vector<int64_t>{8, 4}));
    ASSERT_EQ(st.sharding().dims_size(), 2);
    EXPECT_EQ(std::vector<std::string>(st.sharding().dims(0).axes().begin(), st.sharding().dims(0).axes().end()),
              (std::vector<std::string>{"tp"}));
    EXPECT_EQ(st.sharding().dims(1).axes_size(), 0);
  }
  // The frozen qkv: WEIGHT buffers with blocks, and its reshape view carrying the same sharding.
  const plan::Program &fwd = p.programs(0);
  int seen = 0;
  for (const plan::Buffer &b : fwd.buffers()) {
    if (b.storage() != plan::WEIGHT || b.weight_name() != "qkv") continue;
    ++seen;
    ASSERT_TRUE(b.has_sharding()) << b.name();
    EXPECT_EQ(vec(b.sharding().global_shape()), (std::vector<int64_t>{2, 12}));
    EXPECT_EQ(b.sharding().dims(1).blocks(), 3);
    EXPECT_EQ(b.sharding().dims(1).axes(0), "tp");
    EXPECT_TRUE(vec(b.shape()) == (std::vector<int64_t>{2, 6}) || vec(b.shape()) == (std::vector<int64_t>{3, 4}))
        << b.name();
  }
  EXPECT_EQ(seen, 2);  // the argument and its view
}

TEST_F(ShardedPlanTest, EachRankGetsItsShard) {
  ASSERT_TRUE(succeeded(emit(module()))) << diagnostics;
  const rt::KernelRegistry &registry = rt::KernelRegistry::cpu();
  auto loaded = rt::loadPlan(path("model.cplan"), registry);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  std::unique_ptr<rt::Device> device = rt::createCpuDevice();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_FALSE(bool(rt::selectRank(**loaded, r)));
    auto states = rt::StateStore::create(**loaded, *device);
    ASSERT_TRUE(bool(states)) << llvm::toString(states.takeError());
    const rt::StateEntry *w = (*states)->find("w");
    ASSERT_TRUE(w && w->layout);
    EXPECT_EQ(w->tensor.shape, (rt::Shape{4, 4}));
    EXPECT_EQ(w->globalShape(), (rt::Shape{8, 4}));
    std::vector<float> got(16);
    ASSERT_FALSE(bool((*states)->read("w", got.data())));
    EXPECT_EQ(got, wShard(r));
    // Moments and the gradient start at zero, local.
    ASSERT_FALSE(bool((*states)->read("w.exp_avg", got.data())));
    EXPECT_EQ(got, std::vector<float>(16, 0.0f));

    // The forward on this rank: gather from its rows of w, and 2 x its qkv shard through the view.
    rt::ExecutorOptions opts;
    opts.states = states->get();
    auto ex = rt::Executor::create(**loaded, registry, *device, "forward", opts);
    ASSERT_TRUE(bool(ex)) << llvm::toString(ex.takeError());
    std::vector<int64_t> tok = {0, 1, 2, 3, 3, 0};
    ASSERT_FALSE(bool((*ex)->setInput("tokens", rt::DType::I64, {2, 3}, tok.data())));
    ASSERT_FALSE(bool((*ex)->run()));
    auto logits = (*ex)->output("logits");
    auto qv = (*ex)->output("qv");
    ASSERT_TRUE(logits && qv);
    for (int n = 0; n < 6; ++n)
      for (int j = 0; j < 4; ++j)
        EXPECT_EQ(logits->as<float>()[n * 4 + j], wGlobal(4 * r + tok[n], j));
    std::vector<float> q = qkvShard(r);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(qv->as<float>()[i], 2 * q[i]);
  }
  // The global store (export): whole tensors.
  auto whole = rt::StateStore::create(**loaded, *device, /*globalShapes=*/true);
  ASSERT_TRUE(bool(whole));
  const rt::StateEntry *w = (*whole)->find("w");
  ASSERT_TRUE(w && !w->layout);
  EXPECT_EQ(w->tensor.shape, (rt::Shape{8, 4}));
  std::vector<float> got(32), want;
  ASSERT_FALSE(bool((*whole)->read("w", got.data())));
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) want.push_back(wGlobal(i, j));
  EXPECT_EQ(got, want);
  llvm::Error bad = rt::selectRank(**loaded, 2);
  ASSERT_TRUE(bool(bad));
  EXPECT_NE(llvm::toString(std::move(bad)).find("rank 2 is not on the plan's mesh tp=2"), std::string::npos);
}

TEST_F(ShardedPlanTest, LoaderRejectsInconsistentShardings) {
  ASSERT_TRUE(succeeded(emit(module()))) << diagnostics;
  const plan::Plan good = readPlan();
  const rt::KernelRegistry &registry = rt::KernelRegistry::cpu();
  ASSERT_FALSE(bool(rt::validatePlan(good, "m.cplan", registry)));
  auto expectError = [&](const plan::Plan &p, llvm::StringRef want) {
    llvm::Error e = rt::validatePlan(p, "m.cplan", registry);
    ASSERT_TRUE(bool(e)) << "accepted; expected: " << want.str();
    std::string msg = llvm::toString(std::move(e));
    EXPECT_NE(msg.find(want.str()), std::string::npos) << msg;
  };
  auto stateW = [](plan::Plan &p) -> plan::StateTensor & { return *p.mutable_states(0); };
  {
    plan::Plan p = good;
    stateW(p).mutable_sharding()->mutable_dims(0)->set_axes(0, "dp");
    expectError(p, "state 'w': sharding dim 0 names mesh axis 'dp', which is not on the plan's mesh (its axes: tp)");
  }
  {
    plan::Plan p = good;
    stateW(p).set_shape(0, 8);  // a global shape where the local one belongs
    expectError(p, "state 'w': shape [8, 4] is not the local shard [4, 4] of its sharding [[tp], []] of [8, 4] on mesh tp=2");
  }
  {
    plan::Plan p = good;
    stateW(p).mutable_sharding()->set_global_shape(0, 7);
    expectError(p, "global dim 0 of size 7 is not divisible by group size 2");
  }
  {
    plan::Plan p = good;
    p.mutable_states(1)->clear_sharding();  // w.grad
    // Without its sharding the accumulator's [4, 4] is the whole tensor: not the param's [8, 4].
    expectError(p, "state 'w.grad': gradient accumulator must have its param's dtype and global shape (f32 [8, 4])");
  }
  {
    plan::Plan p = good;  // the same global shape, split on the other dim
    plan::Sharding *g = p.mutable_states(1)->mutable_sharding();
    g->mutable_dims(0)->clear_axes();
    g->mutable_dims(1)->add_axes("tp");
    p.mutable_states(1)->set_shape(0, 8);  // the local shard [8, 2] of that sharding
    p.mutable_states(1)->set_shape(1, 2);
    expectError(p, "state 'w.grad': gradient accumulator must have its param's sharding ([[tp], []] of [8, 4]) or "
                   "that sharding with one dim split over more axes (ZeRO), has [[], [tp]] of [8, 4]");
  }
  {
    plan::Plan p = good;
    for (plan::Buffer &b : *p.mutable_programs(0)->mutable_buffers())
      if (b.storage() == plan::ARENA) {
        *b.mutable_sharding() = good.states(0).sharding();
        break;
      }
    expectError(p, "only WEIGHT buffers carry a sharding");
  }
  {
    plan::Plan p = good;
    for (plan::Buffer &b : *p.mutable_programs(0)->mutable_buffers())
      if (b.storage() == plan::WEIGHT && b.weight_name() == "qkv" && b.shape(0) == 3) {
        b.mutable_sharding()->mutable_dims(1)->set_blocks(1);
        break;
      }
    expectError(p, "weight 'qkv' is used with two shardings");
  }
  {
    plan::Plan p = good;
    p.mutable_mesh(0)->set_size(4);
    expectError(p, "state 'w': shape [4, 4] is not the local shard [2, 4]");
  }
}

TEST_F(ShardedPlanTest, CheckpointsHoldGlobalTensorsAndLoadSlices) {
  ASSERT_TRUE(succeeded(emit(module()))) << diagnostics;
  const rt::KernelRegistry &registry = rt::KernelRegistry::cpu();
  auto loaded = rt::loadPlan(path("model.cplan"), registry);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  std::unique_ptr<rt::Device> device = rt::createCpuDevice();
  // A checkpoint written from whole tensors (as rank 0 writes after gathering): w = -(10 i + j),
  // its first moment = i.
  auto whole = rt::StateStore::create(**loaded, *device, /*globalShapes=*/true);
  ASSERT_TRUE(bool(whole));
  std::vector<float> w(32), m(32);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) {
      w[i * 4 + j] = -wGlobal(i, j);
      m[i * 4 + j] = static_cast<float>(i);
    }
  ASSERT_FALSE(bool((*whole)->write("w", w.data(), w.size() * 4)));
  ASSERT_FALSE(bool((*whole)->write("w.exp_avg", m.data(), m.size() * 4)));
  rt::CheckpointInfo info;
  info.step = 3;
  auto saved = rt::saveCheckpoint(path("ckpt"), **whole, info);
  ASSERT_TRUE(bool(saved)) << llvm::toString(saved.takeError());
  // Its manifest and files hold the global shape.
  auto model = rt::SafetensorsFile::open(*saved + "/model.safetensors");
  ASSERT_TRUE(bool(model));
  ASSERT_TRUE((*model)->find("w"));
  EXPECT_EQ((*model)->find("w")->shape, (std::vector<int64_t>{8, 4}));

  // Loading into rank 1's store keeps rows 4..7.
  ASSERT_FALSE(bool(rt::selectRank(**loaded, 1)));
  auto shard = rt::StateStore::create(**loaded, *device);
  ASSERT_TRUE(bool(shard));
  auto got = rt::loadCheckpoint(path("ckpt"), **shard);
  ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
  std::vector<float> local(16);
  ASSERT_FALSE(bool((*shard)->read("w", local.data())));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(local[i * 4 + j], -wGlobal(4 + i, j));
  ASSERT_FALSE(bool((*shard)->read("w.exp_avg", local.data())));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(local[i], static_cast<float>(4 + i / 4));

  // Saving a store that holds shards needs every rank: without the job's communicator, an error.
  auto refused = rt::saveCheckpoint(path("ckpt2"), **shard, info);
  ASSERT_FALSE(bool(refused));
  EXPECT_EQ(llvm::toString(refused.takeError()),
            "state 'w' is sharded over the mesh tp=2: gathering it needs the job's communicator on all 2 ranks");
  EXPECT_FALSE(llvm::sys::fs::exists(path("ckpt2")));
}

TEST_F(ShardedPlanTest, EmitterErrors) {
  // The value must be the global tensor.
  EXPECT_TRUE(failed(emit(module(R"(#colossal.sharding<@mesh, [{"tp"}, {}]>)", "tensor<4x4xf32>"))));
  EXPECT_NE(diagnostics.find("parameter 'w' has data of type 'tensor<4x4xf32>' but is declared 'tensor<4x4xf32>' "
                             "(sharded: its data must be the global tensor, of shape 'tensor<8x4xf32>')"),
            std::string::npos)
      << diagnostics;
  EXPECT_TRUE(failed(emit(module(R"(#colossal.sharding<@mesh, [{"mp"}, {}]>)"))));
  EXPECT_NE(diagnostics.find("argument #1: 'colossal.sharding' dim 0 names axis 'mp', which is not on mesh @mesh"),
            std::string::npos)
      << diagnostics;
  EXPECT_TRUE(failed(emit(module(R"(#colossal.sharding<@mesh, [{"tp"}]>)"))));
  EXPECT_NE(diagnostics.find("'colossal.sharding' gives 1 dims for a value of type 'tensor<4x4xf32>'"), std::string::npos)
      << diagnostics;
  EXPECT_TRUE(failed(emit(module(R"(#colossal.sharding<@mesh, [{"tp"}, {"tp"}]>)", "tensor<8x8xf32>"))));
  EXPECT_NE(diagnostics.find("a sharding names mesh axis 'tp' twice"), std::string::npos) << diagnostics;
  EXPECT_TRUE(failed(emit(module(R"(#colossal.sharding<@mesh, [{"tp"}, {}]>)", "tensor<8x4xf32>", ""))));
  EXPECT_NE(diagnostics.find("'colossal.sharding' names mesh @mesh, which is not a colossal.mesh of the module"),
            std::string::npos)
      << diagnostics;
}

}  // namespace

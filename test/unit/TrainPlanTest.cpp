//===- TrainPlanTest.cpp - Training plans: validation, the state store, STATE binding -------===//
#include "TrainPlans.h"

#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/StateStore.h"

#include "llvm/Support/FileSystem.h"

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

class TrainPlanTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-trainplan", dir));
    model = buildTrainPlan(dir, cfg, &W, &U);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string loadError() {
    auto loaded = loadPlan(writePlanFile(dir, model), KernelRegistry::cpu());
    return loaded ? "" : llvm::toString(loaded.takeError());
  }
  void expectError(const std::string &needle) {
    std::string msg = loadError();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
    EXPECT_NE(msg.find("train."), std::string::npos) << "message names no file: " << msg;
  }
  plan::Program &prog(const std::string &name) {
    for (plan::Program &p : *model.mutable_programs())
      if (p.name() == name) return p;
    ADD_FAILURE() << "no program " << name;
    return *model.mutable_programs(0);
  }
  plan::StateTensor &state(const std::string &name) {
    for (plan::StateTensor &s : *model.mutable_states())
      if (s.name() == name) return s;
    ADD_FAILURE() << "no state " << name;
    return *model.mutable_states(0);
  }
  /// Index of the first instruction of `op` in program `p`.
  int instIndex(plan::Program &p, const std::string &op) {
    for (int i = 0; i < p.instructions_size(); ++i)
      if (p.instructions(i).op() == op) return i;
    ADD_FAILURE() << "no " << op;
    return 0;
  }

  llvm::SmallString<128> dir;
  TrainPlanConfig cfg;
  plan::Plan model;
  std::vector<float> W, U;
};

TEST_F(TrainPlanTest, ValidTrainingPlanLoads) { EXPECT_EQ(loadError(), ""); }

TEST_F(TrainPlanTest, StateErrors) {
  plan::Plan good = model;
  state("U").set_name("W");
  expectError("state 'W': appears twice");
  model = good;
  state("W.grad").set_param("V");
  expectError("state 'W.grad': its param 'V' is not a PARAM state of the plan");
  model = good;
  state("W.exp_avg").set_param("U.grad");  // names a GRAD, not a PARAM
  expectError("state 'W.exp_avg': its param 'U.grad' is not a PARAM state");
  model = good;
  state("U.grad").set_shape(0, 99);
  expectError("state 'U.grad': gradient accumulator must have its param's dtype and global shape (f32 [6, 16])");
  model = good;
  state("W").set_role(plan::StateTensor::ROLE_INVALID);
  expectError("state 'W': invalid role 0");
  model = good;
  state("W").clear_init_weight();
  expectError("state 'W': PARAM without init_weight");
}

TEST_F(TrainPlanTest, ParamInitialWeightChecked) {
  plan::Plan good = model;
  state("W").set_init_weight("init.missing");
  expectError("weight 'init.missing' (initial value of state 'W'");
  EXPECT_NE(loadError().find("not in the weights file"), std::string::npos);
  model = good;
  state("W").set_init_weight("init.U");  // [6, 16] for a [16, 6] state
  expectError("plan expects f32 [16, 6], file has f32 [6, 16]");
}

TEST_F(TrainPlanTest, StateBufferErrors) {
  plan::Plan good = model;
  plan::Program &fwd = prog("forward");
  fwd.mutable_buffers(1)->set_state_name("nope");
  expectError("program 'forward': buffer 1 ('W'): state 'nope' is not in the plan's states");
  model = good;
  prog("forward").mutable_buffers(1)->set_state_name("U");  // [16, 6] buffer, U is [6, 16]: same count
  EXPECT_EQ(loadError(), "") << "a STATE view with the same element count is allowed";
  model = good;
  prog("forward").mutable_buffers(1)->set_dtype(plan::F64);
  prog("forward").mutable_buffers(1)->set_size_bytes(cfg.V * cfg.D * 8);
  expectError("buffer 1 ('W'): is f64 [16, 6] but state 'W' is f32 [16, 6]");
  model = good;
  prog("forward").mutable_buffers(1)->clear_state_name();
  expectError("STATE buffer without state_name");
}

// Data parallelism (docs/parallelism.md): an all_reduce may write a STATE buffer in place (the
// gradient accumulators in optimizer_step), not out of place.
TEST_F(TrainPlanTest, InPlaceAllReduceWritesState) {
  plan::MeshAxis *axis = model.add_mesh();
  axis->set_name("dp");
  axis->set_size(1);
  axis->set_role(plan::MeshAxis::DATA);
  plan::Plan good = model;
  plan::Program &ts = prog("train_step");
  uint32_t w = ts.instructions(instIndex(ts, "gather")).inputs(0);
  plan::Instruction *ar = ts.add_instructions();
  ar->set_op("all_reduce");
  ar->add_inputs(w);
  ar->add_outputs(w);
  (*ar->mutable_attrs())["axes"].set_s("dp");
  EXPECT_EQ(loadError(), "") << "an in-place all_reduce of a STATE buffer is allowed";
  model = good;
  plan::Program &ts2 = prog("train_step");
  int g = instIndex(ts2, "gather");
  uint32_t w2 = ts2.instructions(g).inputs(0);
  uint32_t activation = ts2.instructions(g).outputs(0);
  plan::Instruction *bad = ts2.add_instructions();
  bad->set_op("all_reduce");
  bad->add_inputs(activation);
  bad->add_outputs(w2);
  (*bad->mutable_attrs())["axes"].set_s("dp");
  expectError("(all_reduce): writes STATE buffer " + std::to_string(w2) + " ('W')");
}

TEST_F(TrainPlanTest, OnlyUpdatesWriteState) {
  plan::Plan good = model;
  // A relu writing the parameter W.
  plan::Program &ts = prog("train_step");
  int g = instIndex(ts, "gather");
  uint32_t w = ts.instructions(g).inputs(0);
  plan::Instruction *bad = ts.add_instructions();
  bad->set_op("relu");
  bad->add_inputs(w);
  bad->add_outputs(w);
  expectError("(relu): writes STATE buffer " + std::to_string(w) +
              " ('W'); only accumulate_grad, update_buffer, adamw_update, adam_update, sgd_update, "
              "all_gather_in_place, reduce_scatter_in_place and kv_append may");
  model = good;
  // accumulate_grad whose output is not its accumulator input.
  plan::Program &ts2 = prog("train_step");
  int acc = instIndex(ts2, "accumulate_grad");
  uint32_t other = ts2.instructions(acc + 1).inputs(0);  // U.grad
  ts2.mutable_instructions(acc)->set_outputs(0, other);
  expectError("output 0 (buffer " + std::to_string(other) +
              ", state 'U.grad') must be the same buffer as input 0");
  model = good;
  // An update writing an arena buffer.
  plan::Program &ts3 = prog("train_step");
  int acc3 = instIndex(ts3, "accumulate_grad");
  uint32_t dW = ts3.instructions(acc3).inputs(1);
  ts3.mutable_instructions(acc3)->set_outputs(0, dW);
  ts3.mutable_instructions(acc3)->set_inputs(0, dW);
  expectError("output 0 (buffer " + std::to_string(dW) + ") is not a STATE buffer");
  model = good;
  // adamw_update with its moments swapped between outputs.
  plan::Program &opt = prog("optimizer_step");
  int up = instIndex(opt, "adamw_update");
  uint32_t m = opt.instructions(up).outputs(2), v = opt.instructions(up).outputs(3);
  opt.mutable_instructions(up)->set_outputs(2, v);
  opt.mutable_instructions(up)->set_outputs(3, m);
  expectError("(adamw_update at /optimizer_step/adamw_update_1): output 2");
}

TEST_F(TrainPlanTest, TrainConfigErrors) {
  plan::Plan good = model;
  model.mutable_train()->set_grad_accum(3);
  expectError("TrainConfig: grad_accum 3 must be >= 1 and divide global_batch 4");
  model = good;
  model.mutable_train()->set_optimizer("lion");
  expectError("optimizer 'lion' (expected sgd, adam or adamw)");
  model = good;
  model.mutable_train()->set_lr_schedule("step");
  expectError("lr_schedule 'step' (expected constant or cosine)");
  model = good;
  model.mutable_train()->set_tokens_input("ids");
  expectError("program 'forward' input 'ids': missing (named by the plan's TrainConfig");
  model = good;
  model.mutable_train()->set_vocab_size(17);
  expectError("program 'forward' output 'logits': f32 [4, 5, 16], expected f32 [4, 5, 17]");
  model = good;
  model.mutable_train()->set_seq_len(6);
  expectError("program 'forward' input 'input_ids': shape [4, 5], expected [4, 6]");
  model = good;
  // Programs are found by role, not by name: a renamed eval program is still the eval program.
  for (int i = 0; i < model.programs_size(); ++i)
    if (model.programs(i).name() == "eval") model.mutable_programs(i)->set_name("evaluate");
  EXPECT_EQ(loadError(), "");
  model = good;
  for (int i = 0; i < model.programs_size(); ++i)
    if (model.programs(i).name() == "eval") model.mutable_programs(i)->set_role(plan::Program::ROLE_UNSPECIFIED);
  expectError("program 'eval' has no role (Program.role: forward, eval, train_step or optimizer_step)");
  model = good;
  for (int i = 0; i < model.programs_size(); ++i)
    if (model.programs(i).name() == "eval") model.mutable_programs(i)->set_role(plan::Program::TRAIN_STEP);
  expectError("programs 'eval' and 'train_step' are both the train_step program");
  model = good;
  prog("optimizer_step").mutable_inputs(1)->set_name("t");
  expectError("program 'optimizer_step' input 'step': missing");
  model = good;
  model.clear_train();
  expectError("mode is 'train' but the plan has no TrainConfig");
}

TEST_F(TrainPlanTest, StateStoreInitialValues) {
  auto loaded = loadPlan(writePlanFile(dir, model), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  auto device = createCpuDevice();
  auto store = StateStore::create(**loaded, *device);
  ASSERT_TRUE(static_cast<bool>(store)) << llvm::toString(store.takeError());
  ASSERT_EQ((*store)->entries().size(), 8u);  // W U, 2 grads, 2x2 moments
  for (const StateEntry &e : (*store)->entries()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(e.tensor.data) % kArenaAlignment, 0u) << e.name();
    const float *v = e.tensor.as<float>();
    const std::vector<float> *init = e.name() == "W" ? &W : e.name() == "U" ? &U : nullptr;
    for (int64_t i = 0; i < e.tensor.numel(); ++i)
      ASSERT_EQ(v[i], init ? (*init)[i] : 0.f) << e.name() << "[" << i << "]";
  }
  // write/read round trip, errors, reset.
  std::vector<float> ones(cfg.V * cfg.D, 1.f), back(cfg.V * cfg.D);
  ASSERT_NO_ERR((*store)->write("W.exp_avg", ones.data(), ones.size() * 4));
  ASSERT_NO_ERR((*store)->read("W.exp_avg", back.data()));
  EXPECT_EQ(back, ones);
  EXPECT_EQ(errorMessage((*store)->write("W.exp_avg", ones.data(), 8)),
            "state 'W.exp_avg': 8 bytes given, f32 [16, 6] holds 384");
  EXPECT_EQ(errorMessage((*store)->read("Q", back.data())), "state 'Q' is not in the plan");
  ASSERT_NO_ERR((*store)->reset());
  ASSERT_NO_ERR((*store)->read("W.exp_avg", back.data()));
  EXPECT_EQ(back, std::vector<float>(back.size(), 0.f));
}

// The forward program reads W and U from the store: changing the store changes the logits, and
// two programs in one shared arena see the same parameters.
TEST_F(TrainPlanTest, StateBuffersAreBoundToTheStore) {
  auto loaded = loadPlan(writePlanFile(dir, model), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  auto device = createCpuDevice();
  auto store = StateStore::create(**loaded, *device);
  ASSERT_TRUE(static_cast<bool>(store));

  // Without a store: a clear error.
  auto noStore = Executor::create(**loaded, KernelRegistry::cpu(), *device, "forward");
  ASSERT_FALSE(static_cast<bool>(noStore));
  EXPECT_NE(llvm::toString(noStore.takeError()).find("buffer 1 (state 'W'): the program has STATE buffers but runs "
                                                     "without a state store"),
            std::string::npos);

  uint64_t arenaBytes = maxArenaBytes((*loaded)->plan);
  uint64_t largest = 0;
  for (const plan::Program &p : (*loaded)->plan.programs()) largest = std::max<uint64_t>(largest, p.arena_bytes());
  EXPECT_EQ(arenaBytes, largest);
  AlignedBuffer arena(arenaBytes);
  ExecutorOptions opts;
  opts.states = store->get();
  opts.arena = arena.data();
  opts.arenaBytes = arena.size();
  auto fwd = Executor::create(**loaded, KernelRegistry::cpu(), *device, "forward", opts);
  ASSERT_TRUE(static_cast<bool>(fwd)) << llvm::toString(fwd.takeError());
  auto ev = Executor::create(**loaded, KernelRegistry::cpu(), *device, "eval", opts);
  ASSERT_TRUE(static_cast<bool>(ev)) << llvm::toString(ev.takeError());

  ExecutorOptions small = opts;
  small.arenaBytes = 64;
  auto tooSmall = Executor::create(**loaded, KernelRegistry::cpu(), *device, "eval", small);
  ASSERT_FALSE(static_cast<bool>(tooSmall));
  EXPECT_NE(llvm::toString(tooSmall.takeError()).find("needs an arena of"), std::string::npos);

  std::mt19937 rng(3);
  std::vector<int64_t> tokens(cfg.B * cfg.T), labels(cfg.B * cfg.T);
  for (int64_t &t : tokens) t = rng() % cfg.V;
  for (int64_t &t : labels) t = rng() % cfg.V;
  auto logitsOf = [&](std::vector<float> &out) {
    ASSERT_NO_ERR((*fwd)->setInput("input_ids", DType::I64, {cfg.B, cfg.T}, tokens.data()));
    ASSERT_NO_ERR((*fwd)->run());
    auto l = (*fwd)->output("logits");
    ASSERT_TRUE(static_cast<bool>(l));
    out.assign(l->as<float>(), l->as<float>() + l->numel());
  };
  std::vector<float> before, after;
  logitsOf(before);
  // Reference: W[token] · U in float64.
  for (int64_t n = 0; n < cfg.B * cfg.T; ++n)
    for (int64_t v = 0; v < cfg.V; ++v) {
      double s = 0;
      for (int64_t d = 0; d < cfg.D; ++d) s += double(W[tokens[n] * cfg.D + d]) * U[d * cfg.V + v];
      ASSERT_NEAR(before[n * cfg.V + v], s, 1e-5) << n << "," << v;
    }
  // Scale U in the store by 2: logits double.
  std::vector<float> u2(U);
  for (float &x : u2) x *= 2;
  ASSERT_NO_ERR((*store)->write("U", u2.data(), u2.size() * 4));
  // eval runs in the same arena in between; forward's inputs are set again before its run.
  ASSERT_NO_ERR((*ev)->setInput("input_ids", DType::I64, {cfg.B, cfg.T}, tokens.data()));
  ASSERT_NO_ERR((*ev)->setInput("labels", DType::I64, {cfg.B, cfg.T}, labels.data()));
  ASSERT_NO_ERR((*ev)->run());
  logitsOf(after);
  for (size_t i = 0; i < before.size(); ++i) ASSERT_FLOAT_EQ(after[i], 2 * before[i]) << i;
}

}  // namespace

//===- TrainPlanEmitterTest.cpp - lowering a train-mode module to a plan --------------------===//
//
// Hand-written train-mode modules (docs/training.md: @forward, @eval, @train_step,
// @optimizer_step with `colossal.param` / `colossal.state` / `colossal.input` arguments and the
// `colossal.train` module attribute) are emitted and read back with protobuf and the runtime's
// safetensors reader: programs, STATE buffers and Plan.states, shared weights, TrainConfig, an
// independent arena-overlap check per program, and the --report numbers against sizes computed
// here from the shapes. The memory planner's handling of states and update steps is tested on
// its own.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/Target/Plan.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Safetensors.h"
#include "dialects/Colossal/ColossalOps.h"
#include "lib/Target/Plan/MemoryPlanner.h"
#include "PlanEmitterFixture.h"

#include "plan.pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace mlir;
namespace plan = colossal::plan;
namespace rt = colossal::runtime;

namespace {

using TrainPlanTest = colossal::test::PlanEmitterFixture;

const plan::Program *program(const plan::Plan &p, llvm::StringRef name) {
  for (const plan::Program &prog : p.programs())
    if (prog.name() == name)
      return &prog;
  return nullptr;
}

/// The buffer bound to input/output `name`, or nullptr.
const plan::Buffer *bound(const plan::Program &p,
                          const google::protobuf::RepeatedPtrField<plan::Binding> &bindings,
                          llvm::StringRef name) {
  for (const plan::Binding &b : bindings)
    if (b.name() == name)
      return &p.buffers(b.buffer());
  return nullptr;
}

//===----------------------------------------------------------------------------------------===//
// A small language model: embedding wte [V=5, D=4] (trainable), a frozen scale [4], a constant
// 0.5 (used by three programs), head w [4, 5] and bias b [5] (trainable). Global batch B = 4
// rows of T = 3 tokens, grad_accum = 2, AdamW. The loss is written with existing ops.
//===----------------------------------------------------------------------------------------===//

constexpr const char *kTrainModule = R"mlir(
module attributes {colossal.train = {tokens_input = "tokens", labels_input = "labels",
                                     logits_output = "logits", optimizer = "adamw", lr = 1.0e-3 : f64,
                                     lr_schedule = "cosine", warmup_steps = 10 : i64,
                                     total_steps = 100 : i64, min_lr = 1.0e-4 : f64,
                                     grad_clip = 1.0 : f64, frozen = [],
                                     trainable = ["wte", "head.w", "head.b"]}} {
func.func @forward(%tok: tensor<4x3xi64> {colossal.input = "tokens"},
    %wte: tensor<5x4xf32> {colossal.param = "wte", colossal.source = "onnx::wte",
                           colossal.value = dense<0.25> : tensor<5x4xf32>},
    %scale: tensor<4xf32> {colossal.param = "scale", colossal.value = dense<2.0> : tensor<4xf32>},
    %w: tensor<4x5xf32> {colossal.param = "head.w", colossal.value = dense<0.125> : tensor<4x5xf32>},
    %b: tensor<5xf32> {colossal.param = "head.b", colossal.no_decay,
                       colossal.value = dense<[0.0, 1.0, 2.0, 3.0, 4.0]> : tensor<5xf32>})
    -> (tensor<4x3x5xf32> {colossal.output = "logits"}) {
  %e = colossal.gather %wte, %tok {axis = 0} : (tensor<5x4xf32>, tensor<4x3xi64>) -> tensor<4x3x4xf32>
  %h = colossal.mul %e, %scale : (tensor<4x3x4xf32>, tensor<4xf32>) -> tensor<4x3x4xf32>
  %half = colossal.constant dense<0.5> : tensor<4xf32>
  %h2 = colossal.mul %h, %half : (tensor<4x3x4xf32>, tensor<4xf32>) -> tensor<4x3x4xf32>
  %l = colossal.matmul %h2, %w : (tensor<4x3x4xf32>, tensor<4x5xf32>) -> tensor<4x3x5xf32>
  %y = colossal.add %l, %b : (tensor<4x3x5xf32>, tensor<5xf32>) -> tensor<4x3x5xf32>
  return %y : tensor<4x3x5xf32>
}
func.func @eval(%wte: tensor<5x4xf32> {colossal.param = "wte"},
    %scale: tensor<4xf32> {colossal.param = "scale"},
    %w: tensor<4x5xf32> {colossal.param = "head.w"},
    %b: tensor<5xf32> {colossal.param = "head.b"},
    %tok: tensor<2x3xi64> {colossal.input = "tokens"},
    %lab: tensor<2x3xi64> {colossal.input = "labels"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %wte, %tok {axis = 0} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %h = colossal.mul %e, %scale : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %half = colossal.constant dense<0.5> : tensor<4xf32>
  %h2 = colossal.mul %h, %half : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %l = colossal.matmul %h2, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %y = colossal.add %l, %b : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %p = colossal.log_softmax %y {axis = 2} : tensor<2x3x5xf32>
  %m = colossal.reduce_mean %p {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x5xf32>) -> tensor<f32>
  %loss = colossal.neg %m : tensor<f32>
  return %loss : tensor<f32>
}
func.func @train_step(%wte: tensor<5x4xf32> {colossal.param = "wte"},
    %scale: tensor<4xf32> {colossal.param = "scale"},
    %w: tensor<4x5xf32> {colossal.param = "head.w"},
    %b: tensor<5xf32> {colossal.param = "head.b"},
    %gwte: tensor<5x4xf32> {colossal.state = "wte.grad"},
    %gw: tensor<4x5xf32> {colossal.state = "head.w.grad"},
    %gb: tensor<5xf32> {colossal.state = "head.b.grad"},
    %tok: tensor<2x3xi64> {colossal.input = "tokens"},
    %lab: tensor<2x3xi64> {colossal.input = "labels"}) -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %wte, %tok {axis = 0} : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %h = colossal.mul %e, %scale : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %half = colossal.constant dense<0.5> : tensor<4xf32>
  %h2 = colossal.mul %h, %half : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %l = colossal.matmul %h2, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %y = colossal.add %l, %b : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %p = colossal.log_softmax %y {axis = 2} : tensor<2x3x5xf32>
  %m = colossal.reduce_mean %p {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x5xf32>) -> tensor<f32>
  %loss = colossal.neg %m : tensor<f32>
  return %loss : tensor<f32>
}
func.func @optimizer_step(%wte: tensor<5x4xf32> {colossal.param = "wte"},
    %w: tensor<4x5xf32> {colossal.param = "head.w"},
    %b: tensor<5xf32> {colossal.param = "head.b"},
    %gwte: tensor<5x4xf32> {colossal.state = "wte.grad"},
    %gw: tensor<4x5xf32> {colossal.state = "head.w.grad"},
    %gb: tensor<5xf32> {colossal.state = "head.b.grad"},
    %mwte: tensor<5x4xf32> {colossal.state = "wte.exp_avg"},
    %vwte: tensor<5x4xf32> {colossal.state = "wte.exp_avg_sq"},
    %mw: tensor<4x5xf32> {colossal.state = "head.w.exp_avg"},
    %vw: tensor<4x5xf32> {colossal.state = "head.w.exp_avg_sq"},
    %mb: tensor<5xf32> {colossal.state = "head.b.exp_avg"},
    %vb: tensor<5xf32> {colossal.state = "head.b.exp_avg_sq"},
    %lr: tensor<f32> {colossal.input = "lr"},
    %step: tensor<i64> {colossal.input = "step"}) -> (tensor<f32> {colossal.output = "grad_norm"}) {
  %flat = colossal.reshape %gb : tensor<5xf32> -> tensor<1x5xf32>
  %n = colossal.reduce %flat {axes = array<i64: 0, 1>, keepdims = false, kind = "l2"} : (tensor<1x5xf32>) -> tensor<f32>
  return %n : tensor<f32>
}
}
)mlir";

// Sizes computed from the shapes above.
constexpr uint64_t kTrainableCount = 5 * 4 + 4 * 5 + 5; // wte, head.w, head.b
constexpr uint64_t kFrozenBytes = 4 * 4;                 // scale
constexpr uint64_t kConstBytes = 4 * 4;                  // the 0.5 constant

TEST_F(TrainPlanTest, FourProgramsStatesAndSharedWeights) {
  colossal::PlanOptions options;
  options.mode = "train";
  options.sourceModel = "/abs/model.onnx";
  options.sourceModelHash = 0x1234abcdULL;
  options.specHash = 0xfeedULL;
  ASSERT_TRUE(succeeded(emit(kTrainModule, nullptr, options))) << diagnostics;
  EXPECT_EQ(files(), (std::vector<std::string>{"model.cplan", "model.safetensors"}));
  plan::Plan p = readPlan();
  EXPECT_EQ(p.mode(), "train");
  ASSERT_EQ(p.programs_size(), 4);
  EXPECT_EQ(p.programs(0).name(), "forward");
  EXPECT_EQ(p.programs(1).name(), "eval");
  EXPECT_EQ(p.programs(2).name(), "train_step");
  EXPECT_EQ(p.programs(3).name(), "optimizer_step");
  // Each program says what it is for (the runtime finds them by role).
  EXPECT_EQ(p.programs(0).role(), plan::Program::FORWARD);
  EXPECT_EQ(p.programs(1).role(), plan::Program::EVAL);
  EXPECT_EQ(p.programs(2).role(), plan::Program::TRAIN_STEP);
  EXPECT_EQ(p.programs(3).role(), plan::Program::OPTIMIZER_STEP);
  for (const plan::Program &prog : p.programs())
    colossal::test::expectSoundLayout(prog);

  // States: the three trainable parameters (first-use order), then grads and AdamW moments.
  std::vector<std::string> names;
  for (const plan::StateTensor &st : p.states())
    names.push_back(st.name());
  EXPECT_EQ(names, (std::vector<std::string>{"wte", "head.w", "head.b", "wte.grad", "head.w.grad",
                                             "head.b.grad", "wte.exp_avg", "wte.exp_avg_sq",
                                             "head.w.exp_avg", "head.w.exp_avg_sq",
                                             "head.b.exp_avg", "head.b.exp_avg_sq"}));
  const plan::StateTensor &wte = p.states(0);
  EXPECT_EQ(wte.role(), plan::StateTensor::PARAM);
  EXPECT_EQ(wte.init_weight(), "wte");
  EXPECT_EQ(wte.source(), "onnx::wte");
  EXPECT_EQ(wte.dtype(), plan::F32);
  EXPECT_EQ(std::vector<int64_t>(wte.shape().begin(), wte.shape().end()),
            (std::vector<int64_t>{5, 4}));
  EXPECT_FALSE(wte.no_decay());
  EXPECT_EQ(p.states(1).source(), "head.w"); // no colossal.source: the parameter's own name
  EXPECT_TRUE(p.states(2).no_decay());
  EXPECT_EQ(p.states(3).role(), plan::StateTensor::GRAD);
  EXPECT_EQ(p.states(3).param(), "wte");
  EXPECT_EQ(p.states(4).role(), plan::StateTensor::GRAD);
  EXPECT_EQ(p.states(4).param(), "head.w"); // the longest parameter name before the suffix
  EXPECT_EQ(p.states(9).role(), plan::StateTensor::OPTIMIZER);
  EXPECT_EQ(p.states(9).param(), "head.w");
  EXPECT_TRUE(p.states(9).init_weight().empty());

  // Every program sees a trainable parameter as its STATE, the frozen one as a WEIGHT.
  for (const plan::Program &prog : p.programs()) {
    std::set<std::string> stateNames, weightNames;
    for (const plan::Buffer &b : prog.buffers()) {
      if (b.storage() == plan::STATE)
        stateNames.insert(b.state_name());
      if (b.storage() == plan::WEIGHT)
        weightNames.insert(b.weight_name());
    }
    EXPECT_TRUE(stateNames.count("wte") && stateNames.count("head.w") && stateNames.count("head.b"))
        << prog.name();
    EXPECT_FALSE(weightNames.count("wte") || weightNames.count("head.w")) << prog.name();
    if (prog.name() != "optimizer_step")
      EXPECT_EQ(weightNames, (std::set<std::string>{"scale", "const.0"})) << prog.name();
  }
  const plan::Program &opt = *program(p, "optimizer_step");
  EXPECT_EQ(opt.buffers(0).storage(), plan::STATE);
  EXPECT_EQ(opt.buffers(0).name(), "wte");
  EXPECT_EQ(opt.buffers(6).state_name(), "wte.exp_avg");
  EXPECT_EQ(opt.buffers(6).size_bytes(), 80u);
  // A reshape of a state is a view of the same state.
  const plan::Buffer &flat = opt.buffers(opt.instructions(0).inputs(0));
  EXPECT_EQ(flat.storage(), plan::STATE);
  EXPECT_EQ(flat.state_name(), "head.b.grad");
  EXPECT_EQ(flat.shape_size(), 2);

  // Bindings: train_step takes B / grad_accum rows, the driver's inputs are arena buffers.
  const plan::Program &step = *program(p, "train_step");
  ASSERT_TRUE(bound(step, step.inputs(), "tokens"));
  EXPECT_EQ(bound(step, step.inputs(), "tokens")->shape(0), 2);
  ASSERT_TRUE(bound(step, step.outputs(), "loss"));
  EXPECT_EQ(bound(step, step.outputs(), "loss")->shape_size(), 0);
  ASSERT_TRUE(bound(opt, opt.inputs(), "lr"));
  ASSERT_TRUE(bound(opt, opt.inputs(), "step"));
  EXPECT_EQ(bound(opt, opt.inputs(), "step")->dtype(), plan::I64);

  // One weights file: every parameter once (trainable ones as initial values) and the constant
  // once, though three programs read it.
  auto file = rt::SafetensorsFile::open(path("model.safetensors"));
  ASSERT_TRUE(bool(file)) << llvm::toString(file.takeError());
  std::set<std::string> keys;
  for (const auto &t : (*file)->tensors())
    keys.insert(t.name);
  EXPECT_EQ(keys, (std::set<std::string>{"wte", "scale", "head.w", "head.b", "const.0"}));
  const auto *b = (*file)->find("head.b");
  ASSERT_TRUE(b);
  EXPECT_EQ(static_cast<const float *>(b->data)[4], 4.0f);
  EXPECT_EQ(static_cast<const float *>((*file)->find("const.0")->data)[3], 0.5f);
  uint64_t size = 0;
  ASSERT_FALSE(llvm::sys::fs::file_size(path("model.safetensors"), size));
  EXPECT_EQ(p.weights_size(), size);

  // TrainConfig: the attribute's keys, the shapes the programs imply, the driver's hashes.
  const plan::TrainConfig &tc = p.train();
  EXPECT_EQ(tc.tokens_input(), "tokens");
  EXPECT_EQ(tc.labels_input(), "labels");
  EXPECT_EQ(tc.logits_output(), "logits");
  EXPECT_EQ(tc.vocab_size(), 5);
  EXPECT_EQ(tc.global_batch(), 4);
  EXPECT_EQ(tc.seq_len(), 3);
  EXPECT_EQ(tc.grad_accum(), 2);
  EXPECT_EQ(tc.optimizer(), "adamw");
  EXPECT_DOUBLE_EQ(tc.lr(), 1.0e-3);
  EXPECT_EQ(tc.lr_schedule(), "cosine");
  EXPECT_EQ(tc.warmup_steps(), 10);
  EXPECT_EQ(tc.total_steps(), 100);
  EXPECT_DOUBLE_EQ(tc.min_lr(), 1.0e-4);
  EXPECT_DOUBLE_EQ(tc.grad_clip(), 1.0);
  EXPECT_EQ(tc.source_model(), "/abs/model.onnx");
  EXPECT_EQ(tc.source_model_hash(), 0x1234abcdULL);
  EXPECT_EQ(tc.spec_hash(), 0xfeedULL);
}

TEST_F(TrainPlanTest, ForwardIsLoweredAsInInference) {
  // @forward of the train module and the same function alone in an inference module give the
  // same instructions and arena; only the parameters' storage differs.
  ASSERT_TRUE(succeeded(emit(kTrainModule))) << diagnostics;
  plan::Program train = readPlan().programs(0);
  std::string text = kTrainModule;
  std::string forward = text.substr(text.find("func.func @forward"));
  forward = forward.substr(0, forward.find("func.func @eval"));
  ASSERT_TRUE(succeeded(emit(forward))) << diagnostics;
  plan::Plan inference = readPlan();
  EXPECT_EQ(inference.mode(), "inference");
  EXPECT_EQ(inference.states_size(), 0);
  EXPECT_FALSE(inference.has_train());
  const plan::Program &inf = inference.programs(0);
  ASSERT_EQ(inf.instructions_size(), train.instructions_size());
  for (int k = 0; k < inf.instructions_size(); ++k) {
    plan::Instruction a = inf.instructions(k), b = train.instructions(k);
    a.clear_loc(); // line numbers differ
    b.clear_loc();
    EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString()) << k;
  }
  EXPECT_EQ(inf.arena_bytes(), train.arena_bytes());
  for (int i = 0; i < inf.buffers_size(); ++i) {
    EXPECT_EQ(inf.buffers(i).offset(), train.buffers(i).offset());
    bool trainable = llvm::is_contained({"wte", "head.w", "head.b"}, train.buffers(i).name());
    EXPECT_EQ(train.buffers(i).storage(), trainable ? plan::STATE : inf.buffers(i).storage())
        << train.buffers(i).name();
  }
}

TEST_F(TrainPlanTest, ReportCountsParamsGradsOptimizerStateAndPeak) {
  std::string report;
  ASSERT_TRUE(succeeded(emit(kTrainModule, &report))) << diagnostics;
  plan::Plan p = readPlan();
  uint64_t largestArena = 0;
  std::string largestName;
  for (const plan::Program &prog : p.programs())
    if (prog.arena_bytes() > largestArena) {
      largestArena = prog.arena_bytes();
      largestName = prog.name();
    }
  const uint64_t params = kTrainableCount * 4, grads = params, adamw = 2 * kTrainableCount * 4;
  const uint64_t readOnly = kFrozenBytes + kConstBytes;
  auto line = [&](llvm::StringRef label) {
    size_t at = report.find(("\n  " + label).str());
    EXPECT_NE(at, std::string::npos) << label.str() << "\n" << report;
    if (at == std::string::npos)
      return std::string();
    return report.substr(at + 1, report.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(report.find("trainable parameters: 3 tensors, 45 elements"), std::string::npos)
      << report;
  EXPECT_NE(line("wte ").find("[5, 4]"), std::string::npos) << report;
  EXPECT_NE(line("wte ").find(" 20"), std::string::npos) << report;
  EXPECT_NE(line("head.b ").find(" 5"), std::string::npos) << report;
  EXPECT_NE(line("total").find(std::to_string(kTrainableCount)), std::string::npos) << report;
  // The frozen parameter is not in the trainable table, but in "not trained" with its reason.
  size_t notTrained = report.find("not trained: 1 tensors");
  ASSERT_NE(notTrained, std::string::npos) << report;
  EXPECT_GT(report.find("\n  scale"), notTrained) << "frozen parameter listed as trainable\n" << report;
  EXPECT_NE(line("scale ").find("[4]"), std::string::npos) << report;
  EXPECT_NE(line("scale ").find("does not reach the loss"), std::string::npos) << report;
  EXPECT_NE(report.find("frozen parameters (read-only weights): 1 (scale)"), std::string::npos)
      << report;
  EXPECT_NE(line("params").find(std::to_string(params) + " bytes"), std::string::npos) << report;
  EXPECT_NE(line("grads").find(std::to_string(grads) + " bytes"), std::string::npos) << report;
  EXPECT_NE(line("optimizer state").find(std::to_string(adamw) + " bytes"), std::string::npos)
      << report;
  EXPECT_NE(line("read-only weights").find(std::to_string(readOnly) + " bytes in 2 tensors"),
            std::string::npos)
      << report;
  for (const plan::Program &prog : p.programs())
    EXPECT_NE(line(prog.name() + " ").find(std::to_string(prog.arena_bytes()) + " bytes"),
              std::string::npos)
        << report;
  EXPECT_NE(line("activations").find(std::to_string(largestArena) + " bytes (largest arena: " +
                                     largestName + ")"),
            std::string::npos)
      << report;
  EXPECT_NE(line("peak total")
                .find(std::to_string(params + grads + adamw + readOnly + largestArena) + " bytes"),
            std::string::npos)
      << report;
}

//===----------------------------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------------------------===//

std::string replaced(std::string text, llvm::StringRef from, llvm::StringRef to) {
  size_t at = text.find(from.str());
  EXPECT_NE(at, std::string::npos) << from.str();
  if (at != std::string::npos)
    text.replace(at, from.size(), to.str());
  return text;
}

TEST_F(TrainPlanTest, ErrorsNameTheProblemAndLeaveNoFiles) {
  struct Case {
    std::string src;
    const char *message;
  } cases[] = {
      {replaced(kTrainModule, "func.func @eval", "func.func @evaluate"),
       "must define the eval program (a func.func with colossal.program = \"eval\""},
      {replaced(kTrainModule, "{colossal.state = \"wte.exp_avg\"}",
                "{colossal.state = \"scale.exp_avg\"}"),
       "state 'scale.exp_avg' belongs to parameter 'scale', which is frozen"},
      {replaced(kTrainModule, "{colossal.state = \"wte.exp_avg\"}",
                "{colossal.state = \"emb.exp_avg\"}"),
       "state 'emb.exp_avg' (argument #6) must be named \"<parameter>.<kind>\""},
      {replaced(kTrainModule, "%gb: tensor<5xf32> {colossal.state = \"head.b.grad\"},\n    %tok",
                "%gb: tensor<6xf32> {colossal.state = \"head.b.grad\"},\n    %tok"),
       "state 'head.b.grad' (argument #5) is 'tensor<5xf32>' here but 'tensor<6xf32>' in "
       "@train_step"},
      {replaced(kTrainModule, "%scale: tensor<4xf32> {colossal.param = \"scale\"},\n    %w: "
                              "tensor<4x5xf32> {colossal.param = \"head.w\"},\n    %b: "
                              "tensor<5xf32> {colossal.param = \"head.b\"},\n    %tok",
                "%scale: tensor<4xf32> {colossal.param = \"scale\", colossal.value = dense<3.0> "
                ": tensor<4xf32>},\n    %w: tensor<4x5xf32> {colossal.param = \"head.w\"},\n    "
                "%b: tensor<5xf32> {colossal.param = \"head.b\"},\n    %tok"),
       "parameter 'scale' (argument #1) has other 'colossal.value' data than in @forward"},
      {replaced(kTrainModule, "{colossal.state = \"wte.grad\"}",
                "{colossal.state = \"wte.grad\", colossal.input = \"g\"}"),
       "must carry exactly one of 'colossal.input', 'colossal.param' and 'colossal.state'"},
      {replaced(kTrainModule, "optimizer = \"adamw\", ", ""), "missing key 'optimizer'"},
      {replaced(kTrainModule, "trainable = [\"wte\", \"head.w\", \"head.b\"]",
                "trainable = [\"wte\", \"head.w\"]"),
       "'trainable' does not list 'head.b', which has a gradient accumulator or an update"},
      {replaced(kTrainModule, "trainable = [\"wte\", \"head.w\", \"head.b\"]",
                "trainable = [\"wte\", \"head.w\", \"head.b\", \"scale\"]"),
       "'trainable' lists \"scale\", which is not a parameter with a gradient accumulator"},
      {replaced(kTrainModule, "optimizer = \"adamw\"", "optimizer = \"lamb\""),
       "optimizer 'lamb' is not sgd, adam or adamw"},
      {replaced(kTrainModule, "lr = 1.0e-3 : f64", "lr = \"fast\""),
       "key 'lr' has a value of the wrong kind (double expected)"},
      {replaced(kTrainModule, "frozen = []", "seq_len = 4 : i64"),
       "key 'seq_len' is 4 but @forward's tokens input says 3"},
      {replaced(kTrainModule, "frozen = []", "grad_accum = 4 : i64"),
       "key 'grad_accum' is 4 but @train_step's tokens input says 2"},
      {replaced(kTrainModule, "labels_input = \"labels\"", "labels_input = \"targets\""),
       "labels_input 'targets' is no input of @train_step"},
      {replaced(kTrainModule, "logits_output = \"logits\"", "logits_output = \"scores\""),
       "logits_output 'scores' is no output of @forward"},
      {R"mlir(
func.func @forward(%x: tensor<4xf32> {colossal.input = "x"}, %s: tensor<4xf32> {colossal.state = "s"})
    -> (tensor<4xf32> {colossal.output = "y"}) {
  %y = colossal.add %x, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
})mlir",
       "argument #1 must carry exactly one of 'colossal.input' and 'colossal.param' "
       "('colossal.state' needs a train-mode module"},
  };
  for (const Case &c : cases) {
    EXPECT_TRUE(failed(emit(c.src))) << c.message;
    EXPECT_NE(diagnostics.find(c.message), std::string::npos) << c.message << "\n" << diagnostics;
    EXPECT_TRUE(files().empty()) << c.message;
  }
  // mode "train" needs a train-mode module.
  colossal::PlanOptions options;
  options.mode = "train";
  std::string text = kTrainModule;
  std::string forward = text.substr(text.find("func.func @forward"));
  forward = forward.substr(0, forward.find("func.func @eval"));
  EXPECT_TRUE(failed(emit(forward, nullptr, options)));
  EXPECT_NE(diagnostics.find("mode 'train' needs a train-mode module"), std::string::npos)
      << diagnostics;
}


//===----------------------------------------------------------------------------------------===//
// Update ops (docs/plan.md "Training instructions"): outputs are the STATE buffers they write
//===----------------------------------------------------------------------------------------===//

// w [2, 2] trainable with AdamW, b [2] trainable with... the same AdamW; B = 2, T = 2, V = 2.
constexpr const char *kUpdateModule = R"mlir(
module attributes {colossal.train = {tokens_input = "tokens", labels_input = "labels",
                                     optimizer = "adamw", lr = 1.0e-2 : f64}} {
func.func @forward(%tok: tensor<2x2xi64> {colossal.input = "tokens"},
    %w: tensor<2x2xf32> {colossal.param = "w", colossal.value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>},
    %b: tensor<2xf32> {colossal.param = "b", colossal.value = dense<[0.5, -0.5]> : tensor<2xf32>})
    -> (tensor<2x2x2xf32> {colossal.output = "logits"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<2x2xi64>) -> tensor<2x2x2xf32>
  %y = colossal.add %e, %b : (tensor<2x2x2xf32>, tensor<2xf32>) -> tensor<2x2x2xf32>
  return %y : tensor<2x2x2xf32>
}
func.func @eval(%w: tensor<2x2xf32> {colossal.param = "w"}, %b: tensor<2xf32> {colossal.param = "b"},
    %tok: tensor<2x2xi64> {colossal.input = "tokens"}, %lab: tensor<2x2xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<2x2xi64>) -> tensor<2x2x2xf32>
  %y = colossal.add %e, %b : (tensor<2x2x2xf32>, tensor<2xf32>) -> tensor<2x2x2xf32>
  %y2 = colossal.reshape %y : tensor<2x2x2xf32> -> tensor<4x2xf32>
  %l2 = colossal.reshape %lab : tensor<2x2xi64> -> tensor<4xi64>
  %loss = colossal.cross_entropy %y2, %l2 {ignore_index = -1 : i64} : (tensor<4x2xf32>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
func.func @train_step(%w: tensor<2x2xf32> {colossal.param = "w"}, %b: tensor<2xf32> {colossal.param = "b"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"}, %gb: tensor<2xf32> {colossal.state = "b.grad"},
    %tok: tensor<2x2xi64> {colossal.input = "tokens"}, %lab: tensor<2x2xi64> {colossal.input = "labels"})
    -> (tensor<f32> {colossal.output = "loss"}) {
  %e = colossal.gather %w, %tok {axis = 0} : (tensor<2x2xf32>, tensor<2x2xi64>) -> tensor<2x2x2xf32>
  %y = colossal.add %e, %b : (tensor<2x2x2xf32>, tensor<2xf32>) -> tensor<2x2x2xf32>
  %y2 = colossal.reshape %y : tensor<2x2x2xf32> -> tensor<4x2xf32>
  %l2 = colossal.reshape %lab : tensor<2x2xi64> -> tensor<4xi64>
  %loss = colossal.cross_entropy %y2, %l2 : (tensor<4x2xf32>, tensor<4xi64>) -> tensor<f32>
  %one = colossal.constant dense<1.0> : tensor<f32>
  %dy2 = colossal.cross_entropy_grad %y2, %l2, %one : (tensor<4x2xf32>, tensor<4xi64>, tensor<f32>) -> tensor<4x2xf32>
  %dy = colossal.reshape %dy2 : tensor<4x2xf32> -> tensor<2x2x2xf32>
  %db = colossal.reduce_sum %dy {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x2x2xf32>) -> tensor<2xf32>
  colossal.accumulate_grad %gb, %db {scale = 0.5 : f64} : tensor<2xf32>, tensor<2xf32>
  %dw = colossal.reduce_sum %dy {axes = array<i64: 0>, keepdims = false} : (tensor<2x2x2xf32>) -> tensor<2x2xf32>
  colossal.accumulate_grad %gw, %dw {scale = 0.5 : f64} : tensor<2x2xf32>, tensor<2x2xf32>
  return %loss : tensor<f32>
}
func.func @optimizer_step(%w: tensor<2x2xf32> {colossal.param = "w"}, %b: tensor<2xf32> {colossal.param = "b"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"}, %gb: tensor<2xf32> {colossal.state = "b.grad"},
    %mw: tensor<2x2xf32> {colossal.state = "w.exp_avg"}, %vw: tensor<2x2xf32> {colossal.state = "w.exp_avg_sq"},
    %mb: tensor<2xf32> {colossal.state = "b.exp_avg"}, %vb: tensor<2xf32> {colossal.state = "b.exp_avg_sq"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
  %n = colossal.global_norm %gw, %gb : tensor<2x2xf32>, tensor<2xf32>
  colossal.adamw_update %w, %gw, %mw, %vw, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, max_grad_norm = 1.0 : f64} : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  colossal.adamw_update %b, %gb, %mb, %vb, %lr, %step, %n {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, max_grad_norm = 1.0 : f64} : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}
}
)mlir";

/// The instructions of `p` running `op`.
std::vector<const plan::Instruction *> instructions(const plan::Program &p, llvm::StringRef op) {
  std::vector<const plan::Instruction *> found;
  for (const plan::Instruction &inst : p.instructions())
    if (inst.op() == op)
      found.push_back(&inst);
  return found;
}

TEST_F(TrainPlanTest, UpdateOpsListTheStatesTheyWriteAsOutputs) {
  std::string report;
  ASSERT_TRUE(succeeded(emit(kUpdateModule, &report))) << diagnostics;
  plan::Plan p = readPlan();
  for (const plan::Program &prog : p.programs())
    colossal::test::expectSoundLayout(prog);

  // train_step: the loss, its gradient, and one accumulate_grad per parameter writing its
  // accumulator in place (output = input 0, a STATE), scale from the op.
  const plan::Program &step = *program(p, "train_step");
  auto ce = instructions(step, "cross_entropy");
  ASSERT_EQ(ce.size(), 1u);
  EXPECT_EQ(step.buffers(ce[0]->inputs(0)).shape(0), 4);
  ASSERT_EQ(instructions(step, "cross_entropy_grad").size(), 1u);
  auto acc = instructions(step, "accumulate_grad");
  ASSERT_EQ(acc.size(), 2u);
  std::vector<std::string> written;
  for (const plan::Instruction *inst : acc) {
    ASSERT_EQ(inst->inputs_size(), 2);
    ASSERT_EQ(inst->outputs_size(), 1);
    EXPECT_EQ(inst->outputs(0), inst->inputs(0));
    const plan::Buffer &target = step.buffers(inst->outputs(0));
    EXPECT_EQ(target.storage(), plan::STATE);
    written.push_back(target.state_name());
    EXPECT_EQ(step.buffers(inst->inputs(1)).storage(), plan::ARENA);
    EXPECT_DOUBLE_EQ(inst->attrs().at("scale").f(), 0.5);
  }
  EXPECT_EQ(written, (std::vector<std::string>{"b.grad", "w.grad"}));
  // Program order is kept: the accumulations come where the module has them.
  EXPECT_EQ(step.instructions(step.instructions_size() - 1).op(), "accumulate_grad");

  // eval: ignore_index travels; train_step's cross_entropy leaves it to the default.
  const plan::Program &eval = *program(p, "eval");
  auto evalCe = instructions(eval, "cross_entropy");
  ASSERT_EQ(evalCe.size(), 1u);
  EXPECT_EQ(evalCe[0]->attrs().at("ignore_index").i(), -1);

  // optimizer_step: global_norm over the grads, then adamw_update writing p, g, m, v.
  const plan::Program &opt = *program(p, "optimizer_step");
  ASSERT_EQ(opt.instructions_size(), 3);
  const plan::Instruction &norm = opt.instructions(0);
  EXPECT_EQ(norm.op(), "global_norm");
  ASSERT_EQ(norm.inputs_size(), 2);
  EXPECT_EQ(opt.buffers(norm.inputs(0)).state_name(), "w.grad");
  EXPECT_EQ(opt.buffers(norm.outputs(0)).storage(), plan::ARENA);
  for (int k = 1; k <= 2; ++k) {
    const plan::Instruction &u = opt.instructions(k);
    EXPECT_EQ(u.op(), "adamw_update");
    ASSERT_EQ(u.inputs_size(), 7);
    ASSERT_EQ(u.outputs_size(), 4);
    std::string param = k == 1 ? "w" : "b";
    std::vector<std::string> names;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(u.outputs(i), u.inputs(i));
      EXPECT_EQ(opt.buffers(u.outputs(i)).storage(), plan::STATE);
      names.push_back(opt.buffers(u.outputs(i)).state_name());
    }
    EXPECT_EQ(names, (std::vector<std::string>{param, param + ".grad", param + ".exp_avg",
                                               param + ".exp_avg_sq"}));
    EXPECT_EQ(u.inputs(6), norm.outputs(0)); // grad_norm, read by both updates
    EXPECT_EQ(opt.buffers(u.inputs(4)).name(), "lr");
    EXPECT_DOUBLE_EQ(u.attrs().at("beta1").f(), 0.9);
    EXPECT_DOUBLE_EQ(u.attrs().at("beta2").f(), 0.999);
    EXPECT_DOUBLE_EQ(u.attrs().at("eps").f(), 1.0e-8);
    EXPECT_DOUBLE_EQ(u.attrs().at("weight_decay").f(), k == 1 ? 0.1 : 0.0);
    EXPECT_DOUBLE_EQ(u.attrs().at("max_grad_norm").f(), 1.0);
  }
  // The output grad_norm is the global norm read by the updates: it stays in its own bytes.
  EXPECT_EQ(opt.outputs(0).buffer(), norm.outputs(0));

  // no_decay: the optimizer decays w but not b.
  std::map<std::string, bool> noDecay;
  for (const plan::StateTensor &st : p.states())
    if (st.role() == plan::StateTensor::PARAM)
      noDecay[st.name()] = st.no_decay();
  EXPECT_EQ(noDecay, (std::map<std::string, bool>{{"w", false}, {"b", true}}));

  // Report: 6 parameters; AdamW state = 2 x 6 x 4 bytes.
  EXPECT_NE(report.find("trainable parameters: 2 tensors, 6 elements"), std::string::npos)
      << report;
  auto lineOf = [&](llvm::StringRef label) {
    size_t at = report.find(("\n  " + label).str());
    return at == std::string::npos ? std::string()
                                   : report.substr(at + 1, report.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(lineOf("optimizer state").find(" 48 bytes"), std::string::npos) << report;
  EXPECT_NE(lineOf("grads").find(" 24 bytes"), std::string::npos) << report;
  EXPECT_NE(lineOf("params").find(" 24 bytes"), std::string::npos) << report;
}

TEST_F(TrainPlanTest, SgdWithAndWithoutMomentumBuffer) {
  std::string text = kUpdateModule;
  // Replace the optimizer step: w with a momentum buffer, b without.
  std::string opt = R"mlir(func.func @optimizer_step(%w: tensor<2x2xf32> {colossal.param = "w"}, %b: tensor<2xf32> {colossal.param = "b"},
    %gw: tensor<2x2xf32> {colossal.state = "w.grad"}, %gb: tensor<2xf32> {colossal.state = "b.grad"},
    %bw: tensor<2x2xf32> {colossal.state = "w.momentum_buffer"},
    %lr: tensor<f32> {colossal.input = "lr"}, %step: tensor<i64> {colossal.input = "step"})
    -> (tensor<f32> {colossal.output = "grad_norm"}) {
  %n = colossal.global_norm %gw, %gb : tensor<2x2xf32>, tensor<2xf32>
  colossal.sgd_update %w, %gw, %bw, %lr, %step, %n {momentum = 0.9 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64, nesterov = true} : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  colossal.sgd_update %b, %gb, %lr, %step, %n {momentum = 0.0 : f64, dampening = 0.0 : f64, weight_decay = 0.0 : f64, max_grad_norm = 0.0 : f64, nesterov = false} : tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<i64>, tensor<f32>
  return %n : tensor<f32>
}
}
)mlir";
  text = text.substr(0, text.find("func.func @optimizer_step")) + opt;
  text = replaced(text, "optimizer = \"adamw\"", "optimizer = \"sgd\"");
  ASSERT_TRUE(succeeded(emit(text))) << diagnostics;
  plan::Plan p = readPlan();
  const plan::Program &prog = *program(p, "optimizer_step");
  colossal::test::expectSoundLayout(prog);
  auto updates = instructions(prog, "sgd_update");
  ASSERT_EQ(updates.size(), 2u);
  ASSERT_EQ(updates[0]->outputs_size(), 3);
  EXPECT_EQ(prog.buffers(updates[0]->outputs(2)).state_name(), "w.momentum_buffer");
  EXPECT_EQ(updates[0]->attrs().at("nesterov").i(), 1);
  ASSERT_EQ(updates[1]->outputs_size(), 2);
  EXPECT_EQ(prog.buffers(updates[1]->outputs(1)).state_name(), "b.grad");
  EXPECT_EQ(p.train().optimizer(), "sgd");
  // Nothing decays: no parameter is marked no_decay.
  for (const plan::StateTensor &st : p.states())
    EXPECT_FALSE(st.no_decay()) << st.name();
}

TEST_F(TrainPlanTest, AnUpdateMayWriteOnlyAPersistentTensor) {
  // In an inference module a parameter is a read-only weight: an update op cannot write it.
  constexpr const char *src = R"mlir(
func.func @forward(%x: tensor<2xf32> {colossal.input = "x"},
                   %w: tensor<2xf32> {colossal.param = "w", colossal.value = dense<1.0> : tensor<2xf32>})
    -> (tensor<2xf32> {colossal.output = "y"}) {
  colossal.accumulate_grad %w, %x {scale = 1.0 : f64} : tensor<2xf32>, tensor<2xf32>
  %y = colossal.exp %x : tensor<2xf32>
  return %y : tensor<2xf32>
}
)mlir";
  EXPECT_TRUE(failed(emit(src)));
  EXPECT_NE(diagnostics.find("operand #0 (%arg1) is written in place, so it must be a trainable "
                             "'colossal.param' or a 'colossal.state' argument of @forward"),
            std::string::npos)
      << diagnostics;
  EXPECT_TRUE(files().empty());
}

//===----------------------------------------------------------------------------------------===//
// The planner: states and update steps
//===----------------------------------------------------------------------------------------===//

namespace memory = colossal::memory;

memory::Step step(std::initializer_list<uint32_t> in, std::initializer_list<uint32_t> out,
                  bool inPlace = false) {
  memory::Step s;
  s.inputs.assign(in);
  s.outputs.assign(out);
  s.inPlaceSafe = inPlace;
  return s;
}

TEST(MemoryPlannerStates, StatesStayOutOfTheArenaAndUpdatesKeepReadersAlive) {
  // v0 state p, v1 state g, v2 input lr; v3 = exp(g) [in-place safe]; v4 = f(v3);
  // update(p, g, v3, lr) writes p, g; v5 = neg(v4) [in-place safe]; output v5.
  std::vector<memory::Value> values(6, memory::Value{256, 1});
  values[0].isState = values[1].isState = true;
  values[2].isInput = true;
  values[2].bytes = 4;
  std::vector<memory::Step> steps = {step({1}, {3}, true), step({3}, {4}),
                                     step({0, 1, 3, 2}, {0, 1}), step({4}, {5}, true)};
  memory::MemoryPlan plan = memory::planMemory(values, steps, {5});
  EXPECT_FALSE(plan.isArena(plan.storageOf[0]));
  EXPECT_FALSE(plan.isArena(plan.storageOf[1]));
  EXPECT_FALSE(plan.inPlace[0]); // exp never runs in place on a state
  EXPECT_TRUE(plan.inPlace[3]);  // neg may run in place on an arena value
  const memory::Storage &v3 = plan.storages[plan.storageOf[3]];
  EXPECT_EQ(v3.start, 1u);
  EXPECT_EQ(v3.end, 3u); // read by the update at step 2 (time 3)
  const memory::Storage &v4 = plan.storages[plan.storageOf[4]];
  EXPECT_NE(v3.offset, v4.offset); // v3 and v4 are live together
  EXPECT_EQ(plan.storages[plan.storageOf[2]].end, 3u); // lr too
  // Arena: lr (64) + v3 (256) + v4 (256) at the update.
  EXPECT_EQ(plan.arenaBytes, 64u + 256u + 256u);
}

TEST(MemoryPlannerStates, AnInPlaceResultNeverTakesAStateOrWeight) {
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<memory::Value> values(2, memory::Value{128, 1});
    (kind ? values[0].isWeight : values[0].isState) = true;
    memory::MemoryPlan plan = memory::planMemory(values, {step({0}, {1}, true)}, {1});
    EXPECT_FALSE(plan.inPlace[0]) << kind;
    EXPECT_TRUE(plan.isArena(plan.storageOf[1])) << kind;
    EXPECT_EQ(plan.arenaBytes, 128u) << kind;
  }
}

} // namespace

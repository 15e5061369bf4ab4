//===- TrainerTest.cpp - Data order, training loop, checkpoints and sampling ----------------===//
//
// The hand-built training plan (TrainPlans.h) trained by the runtime against the float64
// reference; the data order against DESIGN.md's formula; resume bit-exactness; interrupted and
// corrupt checkpoints; greedy and temperature sampling.
//
//===----------------------------------------------------------------------------------------===//
#include "TrainPlans.h"

#include "colossal/runtime/Checkpoint.h"
#include "colossal/runtime/NonFinite.h"
#include "colossal/runtime/Sampler.h"
#include "colossal/runtime/Safetensors.h"
#include "colossal/runtime/TokenData.h"
#include "colossal/runtime/Trainer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <fstream>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

class TrainerTest : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-trainer", dir)); }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) const {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  void writeBytes(const std::string &p, const std::string &bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), bytes.size());
  }
  std::string readBytes(const std::string &p) {
    auto buf = llvm::MemoryBuffer::getFile(p, /*IsText=*/false, /*RequiresNullTerminator=*/false);
    return buf ? (*buf)->getBuffer().str() : std::string();
  }
  /// `n` pseudo-random token ids below `vocab` as a uint8 token file.
  std::vector<uint8_t> writeTokens(const std::string &p, size_t n, int vocab, uint32_t seed = 11) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> data(n);
    // A skewed distribution, so that a bigram model has something to learn.
    for (size_t i = 0; i < n; ++i) data[i] = i && rng() % 3 ? (data[i - 1] * 5 + 3) % vocab : rng() % vocab;
    writeBytes(p, std::string(data.begin(), data.end()));
    return data;
  }
  std::unique_ptr<LoadedPlan> load(const TrainPlanConfig &cfg, std::vector<float> *W = nullptr,
                                   std::vector<float> *U = nullptr) {
    auto loaded = loadPlan(writeTrainPlan(dir, cfg, W, U), KernelRegistry::cpu());
    EXPECT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
    return loaded ? std::move(*loaded) : nullptr;
  }
  std::vector<float> stateValues(const StateStore &store, const std::string &name) {
    const StateEntry *e = store.find(name);
    EXPECT_NE(e, nullptr) << name;
    if (!e) return {};
    return std::vector<float>(e->tensor.as<float>(), e->tensor.as<float>() + e->tensor.numel());
  }
  /// The metrics file as parsed objects.
  std::vector<llvm::json::Object> readMetrics(const std::string &p) {
    std::vector<llvm::json::Object> out;
    llvm::SmallVector<llvm::StringRef, 0> lines;
    std::string text = readBytes(p);
    llvm::StringRef(text).split(lines, '\n', -1, false);
    for (llvm::StringRef line : lines) {
      auto v = llvm::json::parse(line);
      EXPECT_TRUE(static_cast<bool>(v)) << line.str();
      if (v && v->getAsObject()) out.push_back(*v->getAsObject());
    }
    return out;
  }

  llvm::SmallString<128> dir;
};

// ---------------------------------------------------------------- data order

TEST(DataOrder, RowStartIsDesignFormula) {
  for (int64_t N : {7, 100, 1000003})
    for (int64_t T : {1, 3, 5})
      for (int64_t B : {1, 4, 8})
        for (int64_t s : {0, 1, 2, 17, 123456})
          for (int64_t r = 0; r < B; ++r)
            ASSERT_EQ(tokenRowStart(s, r, B, T, N), ((s * B + r) * T) % (N - T - 1))
                << "N " << N << " T " << T << " B " << B << " s " << s << " r " << r;
  // No overflow where (s·B + r)·T exceeds int64: (2^62·3 + 0)·5 mod 1000 by hand: 2^62 mod 1000 =
  // 904 (2^62 = 4611686018427387904), ·3 = 2712 -> 712, ·5 = 3560 -> 560.
  EXPECT_EQ(tokenRowStart(int64_t(1) << 62, 0, 3, 5, 1006), 560);
}

TEST_F(TrainerTest, FillRowsFollowsDataOrderAndMicrobatches) {
  const int64_t B = 4, T = 5, V = 16;
  std::vector<uint8_t> data = writeTokens(path("d.bin"), 37, V);
  auto td = TokenData::open(path("d.bin"), DType::U8, V, T);
  ASSERT_TRUE(static_cast<bool>(td)) << llvm::toString(td.takeError());
  EXPECT_EQ((*td)->numTokens(), 37);
  for (int64_t s : {0, 1, 5, 9}) {
    std::vector<int64_t> wantTok, wantLab;
    referenceBatch(data, s, B, T, wantTok, wantLab);
    // Two microbatches of two rows, int32 tokens.
    for (int64_t k = 0; k < 2; ++k) {
      std::vector<int32_t> tok(2 * T);
      std::vector<int64_t> lab(2 * T);
      (*td)->fillRows(s, B, 2 * k, 2, DType::I32, tok.data(), lab.data());
      for (int64_t i = 0; i < 2 * T; ++i) {
        ASSERT_EQ(tok[i], wantTok[2 * k * T + i]) << "step " << s << " microbatch " << k << " i " << i;
        ASSERT_EQ(lab[i], wantLab[2 * k * T + i]);
      }
    }
    std::vector<int64_t> tok(B * T), lab(B * T);
    (*td)->fillRows(s, B, 0, B, DType::I64, tok.data(), lab.data());
    EXPECT_EQ(tok, wantTok);
    EXPECT_EQ(lab, wantLab);
  }
}

TEST_F(TrainerTest, Uint16TokensAreLittleEndian) {
  // ids 0x0102, 0x0304, ... < 4096.
  std::string bytes;
  std::vector<int64_t> ids;
  for (int i = 0; i < 20; ++i) {
    int id = (i * 263 + 7) % 4096;
    ids.push_back(id);
    bytes += char(id & 0xff);
    bytes += char(id >> 8);
  }
  writeBytes(path("d16.bin"), bytes);
  auto td = TokenData::open(path("d16.bin"), DType::U16, 4096, 4);
  ASSERT_TRUE(static_cast<bool>(td)) << llvm::toString(td.takeError());
  ASSERT_EQ((*td)->numTokens(), 20);
  for (int i = 0; i < 20; ++i) EXPECT_EQ((*td)->token(i), ids[i]);
  std::vector<int64_t> tok(4), lab(4);
  (*td)->fillRows(3, 2, 1, 1, DType::I64, tok.data(), lab.data());
  int64_t start = ((3 * 2 + 1) * 4) % (20 - 4 - 1);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(tok[t], ids[start + t]);
    EXPECT_EQ(lab[t], ids[start + t + 1]);
  }
}

TEST_F(TrainerTest, TokenFileErrors) {
  // An id outside the vocabulary: the file, the byte offset and the value.
  std::string bytes(50, '\x03');
  bytes[41] = 16;
  writeBytes(path("bad.bin"), bytes);
  EXPECT_EQ(errorMessage(TokenData::open(path("bad.bin"), DType::U8, 16, 5).takeError()),
            path("bad.bin") + ": token id 16 at byte offset 41 (token 41) is outside the vocabulary of 16 ids");
  // uint16: offset is 2·index.
  std::string b16(40, '\0');
  b16[30] = char(0x34);
  b16[31] = char(0x12);  // id 0x1234 = 4660 at token 15
  writeBytes(path("bad16.bin"), b16);
  EXPECT_EQ(errorMessage(TokenData::open(path("bad16.bin"), DType::U16, 4096, 5).takeError()),
            path("bad16.bin") + ": token id 4660 at byte offset 30 (token 15) is outside the vocabulary of 4096 ids");
  // Odd byte count for uint16.
  writeBytes(path("odd.bin"), std::string(41, '\0'));
  EXPECT_NE(errorMessage(TokenData::open(path("odd.bin"), DType::U16, 4096, 5).takeError())
                .find("odd.bin: 41 bytes is not a whole number of uint16 tokens"),
            std::string::npos);
  // Shorter than T + 2 tokens; exactly T + 2 is enough.
  writeBytes(path("short.bin"), std::string(6, '\1'));
  EXPECT_EQ(errorMessage(TokenData::open(path("short.bin"), DType::U8, 16, 5).takeError()),
            path("short.bin") + ": holds 6 tokens, fewer than the 7 one sequence needs (T = 5 inputs, the labels "
                                "one further, and at least two row starts)");
  writeBytes(path("ok.bin"), std::string(7, '\1'));
  EXPECT_TRUE(static_cast<bool>(TokenData::open(path("ok.bin"), DType::U8, 16, 5)));
  EXPECT_NE(errorMessage(TokenData::open(path("absent.bin"), DType::U8, 16, 5).takeError())
                .find("absent.bin: cannot read token file"),
            std::string::npos);
}

// ---------------------------------------------------------------- LR schedule

TEST(LrSchedule, MatchesDocsFormula) {
  plan::TrainConfig tc;
  tc.set_lr(1e-3);
  tc.set_lr_schedule("constant");
  TrainPlanConfig cfg;
  cfg.lr = 1e-3;
  for (int64_t s : {0, 5, 1000}) EXPECT_EQ(scheduledLearningRate(tc, s), referenceLr(cfg, s));
  tc.set_lr_schedule("cosine");
  tc.set_warmup_steps(10);
  tc.set_total_steps(50);
  tc.set_min_lr(1e-4);
  cfg.schedule = "cosine";
  cfg.warmupSteps = 10;
  cfg.totalSteps = 50;
  cfg.minLr = 1e-4;
  for (int64_t s = 0; s < 70; ++s) EXPECT_DOUBLE_EQ(scheduledLearningRate(tc, s), referenceLr(cfg, s)) << s;
  // Landmarks: first warm-up step, peak, halfway down, floor.
  EXPECT_DOUBLE_EQ(scheduledLearningRate(tc, 0), 1e-4);
  EXPECT_DOUBLE_EQ(scheduledLearningRate(tc, 10), 1e-3);
  EXPECT_DOUBLE_EQ(scheduledLearningRate(tc, 30), 1e-4 + 0.5 * 9e-4);
  EXPECT_DOUBLE_EQ(scheduledLearningRate(tc, 60), 1e-4);
}

// ---------------------------------------------------------------- training vs the reference

struct TrainCase {
  const char *name;
  TrainPlanConfig cfg;
};

class TrainAgainstReference : public TrainerTest, public ::testing::WithParamInterface<TrainCase> {};

TEST_P(TrainAgainstReference, LossesGradNormsAndParameters) {
  const TrainPlanConfig cfg = GetParam().cfg;
  std::vector<float> W0, U0;
  auto loaded = load(cfg, &W0, &U0);
  ASSERT_TRUE(loaded);
  std::vector<uint8_t> data = writeTokens(path("data.bin"), 97, int(cfg.V));
  auto td = TokenData::open(path("data.bin"), DType::U8, cfg.V, cfg.T);
  ASSERT_TRUE(static_cast<bool>(td));
  auto device = createCpuDevice();
  auto trainer = Trainer::create(*loaded, KernelRegistry::cpu(), *device);
  ASSERT_TRUE(static_cast<bool>(trainer)) << llvm::toString(trainer.takeError());
  TrainReference ref(cfg, W0, U0);
  const int steps = 15;
  double firstLoss = 0, lastLoss = 0;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> tok, lab;
    referenceBatch(data, s, cfg.B, cfg.T, tok, lab);
    double refNorm = 0;
    double refLoss = ref.step(tok, lab, referenceLr(cfg, s), s + 1, refNorm);
    auto r = (*trainer)->step(**td, s);
    ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
    EXPECT_NEAR(r->loss, refLoss, 1e-5 * std::abs(refLoss)) << "step " << s;
    EXPECT_NEAR(r->gradNorm, refNorm, 1e-5 * refNorm + 1e-7) << "step " << s;
    EXPECT_EQ(r->lr, referenceLr(cfg, s)) << "step " << s;
    if (s == 0) firstLoss = r->loss;
    lastLoss = r->loss;
  }
  EXPECT_LT(lastLoss, firstLoss) << "training does not reduce the loss";
  std::vector<float> W = stateValues((*trainer)->states(), "W"), U = stateValues((*trainer)->states(), "U");
  for (size_t i = 0; i < W.size(); ++i) ASSERT_NEAR(W[i], ref.W()[i], 1e-4 * (1 + std::abs(ref.W()[i]))) << "W " << i;
  for (size_t i = 0; i < U.size(); ++i) ASSERT_NEAR(U[i], ref.U()[i], 1e-4 * (1 + std::abs(ref.U()[i]))) << "U " << i;
  // The updates zeroed the accumulators.
  for (float g : stateValues((*trainer)->states(), "W.grad")) ASSERT_EQ(g, 0.f);
  // Evaluation: the mean loss of eval batches 0..2 with the trained parameters.
  auto ev = (*trainer)->evaluate(**td, 3);
  ASSERT_TRUE(static_cast<bool>(ev)) << llvm::toString(ev.takeError());
  double want = 0;
  for (int s = 0; s < 3; ++s) {
    std::vector<int64_t> tok, lab;
    referenceBatch(data, s, cfg.B, cfg.T, tok, lab);
    want += ref.loss(tok, lab);
  }
  EXPECT_NEAR(*ev, want / 3, 1e-5 * want / 3);
}

TrainPlanConfig makeCfg(std::function<void(TrainPlanConfig &)> f) {
  TrainPlanConfig c;
  f(c);
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, TrainAgainstReference,
    ::testing::Values(TrainCase{"adamw", makeCfg([](TrainPlanConfig &) {})},
                      TrainCase{"adamw_accum2_cosine_clip_i32", makeCfg([](TrainPlanConfig &c) {
                                  c.A = 2;
                                  c.schedule = "cosine";
                                  c.warmupSteps = 3;
                                  c.totalSteps = 12;
                                  c.minLr = 0.005;
                                  c.maxGradNorm = 0.5;
                                  c.tokens = DType::I32;
                                })},
                      TrainCase{"adam_wd", makeCfg([](TrainPlanConfig &c) {
                                  c.optimizer = "adam";
                                  c.weightDecay = 0.05;
                                })},
                      TrainCase{"sgd_nesterov_accum4", makeCfg([](TrainPlanConfig &c) {
                                  c.optimizer = "sgd";
                                  c.lr = 0.5;
                                  c.momentum = 0.9;
                                  c.nesterov = true;
                                  c.weightDecay = 0.01;
                                  c.A = 4;
                                })},
                      TrainCase{"sgd_plain", makeCfg([](TrainPlanConfig &c) {
                                  c.optimizer = "sgd";
                                  c.lr = 1.0;
                                  c.weightDecay = 0;
                                })}),
    [](const ::testing::TestParamInfo<TrainCase> &info) { return std::string(info.param.name); });

// ---------------------------------------------------------------- runTraining: metrics, resume

class RunTrainingTest : public TrainerTest {
protected:
  void SetUp() override {
    TrainerTest::SetUp();
    cfg.A = 2;
    cfg.schedule = "cosine";
    cfg.warmupSteps = 2;
    cfg.totalSteps = 10;
    loaded = load(cfg);
    ASSERT_TRUE(loaded);
    data = writeTokens(path("data.bin"), 120, int(cfg.V));
    writeTokens(path("eval.bin"), 60, int(cfg.V), 99);
  }
  TrainOptions options(const std::string &metrics, int64_t steps) {
    TrainOptions o;
    o.dataPath = path("data.bin");
    o.tokenDType = DType::U8;
    o.steps = steps;
    o.metricsPath = path(metrics);
    o.seed = 5;
    return o;
  }
  llvm::Error run(const TrainOptions &o, std::string *log = nullptr) {
    std::string text;
    llvm::raw_string_ostream os(text);
    auto device = createCpuDevice();
    llvm::Error e = runTraining(*loaded, KernelRegistry::cpu(), *device, o, os);
    if (log) *log = os.str();
    return e;
  }
  /// Final parameters and optimizer state of the newest checkpoint in `saveDir`.
  std::map<std::string, std::string> checkpointTensors(const std::string &saveDir) {
    std::map<std::string, std::string> out;
    auto step = checkpointStepDir(saveDir);
    EXPECT_TRUE(static_cast<bool>(step)) << llvm::toString(step.takeError());
    if (!step) return out;
    for (const char *file : {"model.safetensors", "optimizer.safetensors"}) {
      auto st = SafetensorsFile::open(*step + "/" + file);
      EXPECT_TRUE(static_cast<bool>(st));
      if (!st) continue;
      for (const SafetensorsTensor &t : (*st)->tensors())
        out[t.name] = std::string(static_cast<const char *>(t.data), t.size_bytes);
    }
    return out;
  }

  TrainPlanConfig cfg;
  std::unique_ptr<LoadedPlan> loaded;
  std::vector<uint8_t> data;
};

TEST_F(RunTrainingTest, MetricsLinesAndEvaluation) {
  TrainOptions o = options("m.jsonl", 6);
  o.evalDataPath = path("eval.bin");
  o.evalEvery = 3;
  o.evalSteps = 2;
  ASSERT_NO_ERR(run(o));
  std::vector<llvm::json::Object> lines = readMetrics(o.metricsPath);
  ASSERT_EQ(lines.size(), 6u);
  for (int s = 0; s < 6; ++s) {
    const llvm::json::Object &m = lines[s];
    EXPECT_EQ(m.getInteger("step"), s);
    EXPECT_TRUE(m.getNumber("loss") && m.getNumber("lr") && m.getNumber("grad_norm") && m.getNumber("tokens_per_s"));
    EXPECT_EQ(*m.getNumber("lr"), referenceLr(cfg, s));
    EXPECT_GT(*m.getNumber("tokens_per_s"), 0);
    bool evalStep = (s + 1) % 3 == 0;
    EXPECT_EQ(m.getNumber("eval_loss").has_value(), evalStep) << "step " << s;
    EXPECT_EQ(m.getBoolean("skipped"), false);
    EXPECT_EQ(m.getInteger("skipped_total"), 0);
    // state_bytes: the runtime's count of the store's bytes by role.
    const llvm::json::Object *sb = m.getObject("state_bytes");
    ASSERT_TRUE(sb) << "step " << s;
    EXPECT_GT(*sb->getInteger("params"), 0);
    EXPECT_EQ(sb->getInteger("grads"), sb->getInteger("params"));
    // memory: the planned arena, its measured high-water mark (within it) and the peak RSS.
    const llvm::json::Object *mem = m.getObject("memory");
    ASSERT_TRUE(mem) << "step " << s;
    EXPECT_GT(*mem->getInteger("arena_bytes"), 0);
    EXPECT_GT(*mem->getInteger("arena_high_water_bytes"), 0);
    EXPECT_LE(*mem->getInteger("arena_high_water_bytes"), *mem->getInteger("arena_bytes"));
    EXPECT_GT(*mem->getInteger("peak_rss_bytes"), *mem->getInteger("arena_bytes"));
    EXPECT_FALSE(mem->getInteger("offloaded_bytes")) << "no offload in this plan";
    EXPECT_EQ(m.size(), evalStep ? 10u : 9u);
  }
  // Key order is DESIGN.md's.
  std::string text = readBytes(o.metricsPath);
  EXPECT_EQ(text.rfind("{\"step\":0,\"loss\":", 0), 0u) << text;
  EXPECT_NE(text.find(",\"lr\":"), std::string::npos);
  // A second fresh run replaces the file.
  o.steps = 2;
  o.evalDataPath.clear();
  o.evalEvery = 0;
  ASSERT_NO_ERR(run(o));
  EXPECT_EQ(readMetrics(o.metricsPath).size(), 2u);
}

TEST_F(RunTrainingTest, ResumeIsBitExact) {
  // Reference: 10 steps in one run.
  TrainOptions full = options("full.jsonl", 10);
  full.saveDir = path("full");
  ASSERT_NO_ERR(run(full));
  // 4 steps, then resume to 10 (the first run also wrote lines up to step 6 that the resumed run
  // replaces, as after a crash between checkpoints).
  TrainOptions first = options("split.jsonl", 7);
  first.saveDir = path("split");
  first.saveEvery = 4;
  ASSERT_NO_ERR(run(first));
  // Point latest at step 4 (the checkpoint before the crash).
  writeBytes(path("split/latest"), "step-00000004\n");
  TrainOptions second = options("split.jsonl", 10);
  second.saveDir = path("split");
  second.resumeDir = path("split");
  ASSERT_NO_ERR(run(second));

  std::vector<llvm::json::Object> a = readMetrics(full.metricsPath), b = readMetrics(second.metricsPath);
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 10u);
  for (int s = 0; s < 10; ++s) {
    EXPECT_EQ(b[s].getInteger("step"), s);
    for (const char *key : {"loss", "lr", "grad_norm"})
      EXPECT_EQ(*a[s].getNumber(key), *b[s].getNumber(key)) << key << " at step " << s;
  }
  auto ta = checkpointTensors(path("full")), tb = checkpointTensors(path("split"));
  ASSERT_EQ(ta.size(), 6u);  // W, U and their two moments
  for (auto &[name, bytes] : ta) EXPECT_TRUE(tb.count(name) && tb[name] == bytes) << name << " differs";
  // The manifest records where to continue.
  auto m = llvm::json::parse(readBytes(path("split/step-00000010/manifest.json")));
  ASSERT_TRUE(static_cast<bool>(m));
  EXPECT_EQ(m->getAsObject()->getInteger("step"), 10);
  EXPECT_EQ(m->getAsObject()->getInteger("data_position"), 10 * cfg.B);
  EXPECT_EQ(m->getAsObject()->getString("spec_hash"), "0000000000005eed");
}

TEST_F(RunTrainingTest, CheckpointsKeepNewestTwoAndSurviveAnInterruptedSave) {
  TrainOptions o = options("m.jsonl", 9);
  o.saveDir = path("ck");
  o.saveEvery = 3;
  ASSERT_NO_ERR(run(o));
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(path("ck"), ec), end; it != end && !ec; it.increment(ec))
    names.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, std::vector<std::string>({"latest", "step-00000006", "step-00000009"}));
  EXPECT_EQ(readBytes(path("ck/latest")), "step-00000009\n");

  // A save of step 12 killed halfway: its folder is still .tmp with a cut file, latest unchanged.
  ASSERT_FALSE(llvm::sys::fs::create_directory(path("ck/step-00000012.tmp")));
  std::string model = readBytes(path("ck/step-00000009/model.safetensors"));
  writeBytes(path("ck/step-00000012.tmp/model.safetensors"), model.substr(0, model.size() / 2));
  auto device = createCpuDevice();
  auto store = StateStore::create(*loaded, *device);
  ASSERT_TRUE(static_cast<bool>(store));
  auto info = loadCheckpoint(path("ck"), **store);
  ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->step, 9);
  EXPECT_EQ(info->seed, 5u);
  // Training resumes from it and the next save removes the leftover.
  TrainOptions more = options("m.jsonl", 12);
  more.saveDir = path("ck");
  more.resumeDir = path("ck");
  ASSERT_NO_ERR(run(more));
  EXPECT_FALSE(llvm::sys::fs::exists(path("ck/step-00000012.tmp")));
  EXPECT_TRUE(llvm::sys::fs::exists(path("ck/step-00000012/manifest.json")));
  EXPECT_EQ(readMetrics(more.metricsPath).size(), 12u);
}

TEST_F(RunTrainingTest, CorruptCheckpointsAreNamed) {
  TrainOptions o = options("m.jsonl", 2);
  o.saveDir = path("ck");
  ASSERT_NO_ERR(run(o));
  const std::string step = path("ck/step-00000002");
  auto device = createCpuDevice();
  auto store = StateStore::create(*loaded, *device);
  ASSERT_TRUE(static_cast<bool>(store));
  std::vector<float> W0 = stateValues(**store, "W");
  auto loadErr = [&](const std::string &d) {
    auto info = loadCheckpoint(d, **store);
    return info ? std::string() : llvm::toString(info.takeError());
  };
  ASSERT_EQ(loadErr(path("ck")), "");
  ASSERT_EQ(loadErr(step), "");  // a step folder directly
  ASSERT_NO_ERR((*store)->reset());

  std::string model = readBytes(step + "/model.safetensors"), opt = readBytes(step + "/optimizer.safetensors"),
              manifest = readBytes(step + "/manifest.json");
  // Truncated file.
  writeBytes(step + "/model.safetensors", model.substr(0, model.size() - 10));
  EXPECT_NE(loadErr(path("ck")).find(step + "/model.safetensors: " + std::to_string(model.size() - 10) +
                                     " bytes, the manifest records " + std::to_string(model.size()) +
                                     " (truncated or corrupt checkpoint file)"),
            std::string::npos)
      << loadErr(path("ck"));
  writeBytes(step + "/model.safetensors", model);
  // A flipped bit in the optimizer state.
  std::string flipped = opt;
  flipped[flipped.size() - 3] ^= 0x10;
  writeBytes(step + "/optimizer.safetensors", flipped);
  EXPECT_NE(loadErr(path("ck")).find(step + "/optimizer.safetensors: FNV-1a hash"), std::string::npos);
  EXPECT_NE(loadErr(path("ck")).find("(corrupt checkpoint file)"), std::string::npos);
  writeBytes(step + "/optimizer.safetensors", opt);
  // A cut manifest.
  writeBytes(step + "/manifest.json", manifest.substr(0, manifest.size() / 2));
  EXPECT_NE(loadErr(path("ck")).find(step + "/manifest.json: malformed JSON"), std::string::npos);
  writeBytes(step + "/manifest.json", manifest);
  // latest naming a missing folder; a folder that is no checkpoint.
  writeBytes(path("ck/latest"), "step-00000099\n");
  EXPECT_EQ(loadErr(path("ck")), path("ck/latest") + ": names 'step-00000099', which holds no manifest.json");
  writeBytes(path("ck/latest"), "step-00000002\n");
  EXPECT_NE(loadErr(path("data.bin")).find("no such checkpoint folder"), std::string::npos);
  // None of the failed loads changed the store.
  EXPECT_EQ(stateValues(**store, "W"), W0);

  // A plan whose tensors differ (D = 7): the error names the tensor.
  llvm::SmallString<128> other;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-trainer-other", other));
  TrainPlanConfig c2 = cfg;
  c2.D = 7;
  auto otherPlan = loadPlan(writeTrainPlan(other, c2), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(otherPlan)) << llvm::toString(otherPlan.takeError());
  auto otherStore = StateStore::create(**otherPlan, *device);
  ASSERT_TRUE(static_cast<bool>(otherStore));
  auto bad = loadCheckpoint(path("ck"), **otherStore);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("model.safetensors: tensor 'W' is f32 [16, 6], the plan"),
            std::string::npos);
  // An SGD plan has no moments: the checkpoint's optimizer tensors do not belong to it.
  TrainPlanConfig c3 = cfg;
  c3.optimizer = "sgd";
  auto sgdPlan = loadPlan(writeTrainPlan(other, c3), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(sgdPlan)) << llvm::toString(sgdPlan.takeError());
  auto sgdStore = StateStore::create(**sgdPlan, *device);
  ASSERT_TRUE(static_cast<bool>(sgdStore));
  auto bad2 = loadCheckpoint(path("ck"), **sgdStore);
  ASSERT_FALSE(static_cast<bool>(bad2));
  std::string msg2 = llvm::toString(bad2.takeError());
  EXPECT_NE(msg2.find("optimizer.safetensors: tensor 'W.exp_avg' is not an OPTIMIZER state"),
            std::string::npos) << msg2;
  llvm::sys::fs::remove_directories(other);
}

TEST_F(RunTrainingTest, CheckpointManifestRecordsTheMesh) {
  auto device = createCpuDevice();
  auto store = StateStore::create(*loaded, *device);
  ASSERT_TRUE(static_cast<bool>(store));
  CheckpointInfo info{3, 3 * cfg.B, 5, 0x1234, {{"dp", 2}, {"tp", 4}}};
  auto saved = saveCheckpoint(path("ckm"), **store, info);
  ASSERT_TRUE(static_cast<bool>(saved)) << llvm::toString(saved.takeError());
  const std::string manifestPath = *saved + "/manifest.json";
  std::string manifest = readBytes(manifestPath);
  auto v = llvm::json::parse(manifest);
  ASSERT_TRUE(static_cast<bool>(v)) << manifest;
  const llvm::json::Object *mesh = v->getAsObject()->getObject("mesh");
  ASSERT_TRUE(mesh) << manifest;
  EXPECT_EQ(mesh->size(), 2u);
  EXPECT_EQ(mesh->getInteger("dp"), 2);
  EXPECT_EQ(mesh->getInteger("tp"), 4);
  auto back = loadCheckpoint(path("ckm"), **store);
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->mesh, info.mesh);
  // A size that is not a positive integer is an error naming the manifest and the axis.
  size_t at = manifest.find("\"tp\": 4");
  ASSERT_NE(at, std::string::npos) << manifest;
  writeBytes(manifestPath, manifest.substr(0, at) + "\"tp\": 0" + manifest.substr(at + 7));
  auto bad = loadCheckpoint(path("ckm"), **store);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            manifestPath + ": \"mesh\" axis 'tp' has no positive integer size");
  // A one-rank training run records an empty mesh.
  TrainOptions o = options("m.jsonl", 1);
  o.saveDir = path("ck1");
  ASSERT_NO_ERR(run(o));
  auto one = llvm::json::parse(readBytes(path("ck1/step-00000001/manifest.json")));
  ASSERT_TRUE(static_cast<bool>(one));
  ASSERT_TRUE(one->getAsObject()->getObject("mesh"));
  EXPECT_TRUE(one->getAsObject()->getObject("mesh")->empty());
}

TEST_F(RunTrainingTest, OptionErrors) {
  TrainOptions o = options("m.jsonl", 2);
  o.evalDataPath = path("eval.bin");
  EXPECT_EQ(errorMessage(run(o)), "--eval-data needs --eval-every K (K >= 1)");
  o.evalEvery = -1;
  EXPECT_EQ(errorMessage(run(o)), "--eval-every K needs K >= 1 (evaluate after every K steps)");
  o.evalEvery = 1;
  o.evalSteps = 0;
  EXPECT_EQ(errorMessage(run(o)), "--eval-steps M needs M >= 1");
  o = options("m.jsonl", 2);
  o.dataPath = path("missing.bin");
  EXPECT_NE(errorMessage(run(o)).find("missing.bin: cannot read token file"), std::string::npos);
  o = options("m.jsonl", 2);
  o.resumeDir = path("nothing");
  EXPECT_NE(errorMessage(run(o)).find("nothing: no such checkpoint folder"), std::string::npos);
}

// ---------------------------------------------------------------- non-finite steps and checkpoints

/// Sets COLOSSAL_TEST_NONFINITE (Trainer's test hook) for the lifetime of the guard.
struct NonFiniteHook {
  explicit NonFiniteHook(const char *value) { setenv("COLOSSAL_TEST_NONFINITE", value, 1); }
  ~NonFiniteHook() { unsetenv("COLOSSAL_TEST_NONFINITE"); }
};

/// The message of `err` when it is a NonFiniteError (what every rank agrees on), else a failure.
std::string nonFiniteMessage(llvm::Error err) {
  std::string msg;
  llvm::Error rest = llvm::handleErrors(std::move(err), [&](const NonFiniteError &e) { msg = e.text(); });
  EXPECT_FALSE(static_cast<bool>(rest)) << "not a NonFiniteError: " << llvm::toString(std::move(rest));
  EXPECT_FALSE(msg.empty()) << "no error";
  return msg;
}

/// The folder names in `d`, sorted.
std::vector<std::string> folderNames(const std::string &d) {
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(d, ec), end; it != end && !ec; it.increment(ec))
    names.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(RunTrainingTest, NonFiniteGradientStopsNamingTheStepAndKeepsFiniteCheckpoints) {
  // Reference: 3 clean steps.
  TrainOptions clean = options("clean.jsonl", 3);
  clean.saveDir = path("clean");
  ASSERT_NO_ERR(run(clean));
  NonFiniteHook hook("grad:3");  // step 3's W.grad[0] becomes NaN after train_step
  TrainOptions o = options("m.jsonl", 6);
  o.saveDir = path("ck");
  o.saveEvery = 1;
  std::string log;
  EXPECT_EQ(nonFiniteMessage(run(o, &log)),
            "step 3: the gradient norm is not finite (nan); the first non-finite tensor is the gradient of 'W' "
            "(element 0: nan); its update was not applied; training stopped (the newest checkpoint is " +
                path("ck/step-00000003") + "); --on-nonfinite skip skips such steps");
  EXPECT_EQ(log, "");
  // One line per step that ran, the last one marked.
  std::vector<llvm::json::Object> lines = readMetrics(o.metricsPath);
  ASSERT_EQ(lines.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(lines[s].getBoolean("skipped"), s == 3) << s;
    EXPECT_EQ(lines[s].getInteger("skipped_total"), s == 3 ? 1 : 0) << s;
    EXPECT_TRUE(lines[s].getNumber("loss")) << s;
    EXPECT_EQ(lines[s].getNumber("grad_norm").has_value(), s != 3) << s;  // null at step 3
  }
  // No checkpoint of step 4; the kept ones are the newest finite ones, step 3 = the clean run's.
  EXPECT_EQ(folderNames(path("ck")), std::vector<std::string>({"latest", "step-00000002", "step-00000003"}));
  EXPECT_EQ(readBytes(path("ck/latest")), "step-00000003\n");
  auto got = checkpointTensors(path("ck")), want = checkpointTensors(path("clean"));
  ASSERT_EQ(got.size(), 6u);
  for (auto &[name, bytes] : want) EXPECT_TRUE(got.count(name) && got[name] == bytes) << name;
}

/// The plan's initial W and U.
void initialParams(const LoadedPlan &plan, std::vector<float> &W, std::vector<float> &U) {
  auto device = createCpuDevice();
  auto store = StateStore::create(plan, *device);
  ASSERT_TRUE(static_cast<bool>(store));
  for (auto [name, out] : {std::pair<const char *, std::vector<float> *>{"W", &W}, {"U", &U}}) {
    const StateEntry *e = (*store)->find(name);
    ASSERT_TRUE(e);
    out->assign(e->tensor.as<float>(), e->tensor.as<float>() + e->tensor.numel());
  }
}

TEST_F(RunTrainingTest, SkipLeavesParametersOptimizerStateAndStepCountUntouched) {
  std::vector<float> W0, U0;
  initialParams(*loaded, W0, U0);
  TrainReference ref(cfg, W0, U0);
  std::string log;
  {
    NonFiniteHook hook("grad:3");
    TrainOptions o = options("m.jsonl", 7);
    o.onNonFinite = NonFinitePolicy::Skip;
    o.saveDir = path("ck");
    ASSERT_NO_ERR(run(o, &log));
  }
  EXPECT_EQ(log, "warning: step 3: the gradient norm is not finite (nan); the first non-finite tensor is the gradient "
                 "of 'W' (element 0: nan); the step was skipped (1 skipped so far)\n"
                 "note: 1 of 7 steps were skipped (non-finite loss or gradients)\n");
  // The float64 reference skips step 3's update: its step count t does not advance either.
  std::vector<llvm::json::Object> lines = readMetrics(path("m.jsonl"));
  ASSERT_EQ(lines.size(), 7u);
  int64_t t = 0;
  for (int s = 0; s < 7; ++s) {
    std::vector<int64_t> tok, lab;
    referenceBatch(data, s, cfg.B, cfg.T, tok, lab);
    double norm = 0, loss = s == 3 ? ref.loss(tok, lab) : ref.step(tok, lab, referenceLr(cfg, s), ++t, norm);
    EXPECT_NEAR(*lines[s].getNumber("loss"), loss, 1e-5 * loss) << "step " << s;
    EXPECT_EQ(lines[s].getBoolean("skipped"), s == 3);
    EXPECT_EQ(lines[s].getInteger("skipped_total"), s >= 3 ? 1 : 0);
    if (s != 3) EXPECT_NEAR(*lines[s].getNumber("grad_norm"), norm, 1e-5 * norm) << "step " << s;
  }
  auto tensors = checkpointTensors(path("ck"));
  const float *W = reinterpret_cast<const float *>(tensors["W"].data());
  ASSERT_EQ(tensors["W"].size(), ref.W().size() * 4);
  for (size_t i = 0; i < ref.W().size(); ++i) ASSERT_NEAR(W[i], ref.W()[i], 1e-4 * (1 + std::abs(ref.W()[i]))) << i;
  auto m = llvm::json::parse(readBytes(path("ck/step-00000007/manifest.json")));
  ASSERT_TRUE(static_cast<bool>(m));
  EXPECT_EQ(m->getAsObject()->getInteger("skipped_total"), 1);

  // Resumed after the skip, the run continues the optimizer's step count: bit for bit the same.
  {
    NonFiniteHook hook("grad:3");
    TrainOptions first = options("r.jsonl", 5);
    first.onNonFinite = NonFinitePolicy::Skip;
    first.saveDir = path("ck2");
    ASSERT_NO_ERR(run(first));
  }
  TrainOptions second = options("r.jsonl", 7);
  second.saveDir = path("ck2");
  second.resumeDir = path("ck2");
  ASSERT_NO_ERR(run(second));
  std::vector<llvm::json::Object> resumed = readMetrics(path("r.jsonl"));
  ASSERT_EQ(resumed.size(), 7u);
  EXPECT_EQ(resumed[6].getInteger("skipped_total"), 1);
  auto again = checkpointTensors(path("ck2"));
  for (auto &[name, bytes] : tensors) EXPECT_TRUE(again.count(name) && again[name] == bytes) << name;
}

TEST_F(RunTrainingTest, NonFiniteLossSkipsTheOptimizerStep) {
  std::vector<float> W0, U0;
  initialParams(*loaded, W0, U0);
  NonFiniteHook hook("loss:1");
  auto td = TokenData::open(path("data.bin"), DType::U8, cfg.V, cfg.T);
  ASSERT_TRUE(static_cast<bool>(td));
  auto device = createCpuDevice();
  auto trainer = Trainer::create(*loaded, KernelRegistry::cpu(), *device);
  ASSERT_TRUE(static_cast<bool>(trainer)) << llvm::toString(trainer.takeError());
  StateStore &st = (*trainer)->states();
  auto r0 = (*trainer)->step(**td, 0);
  ASSERT_TRUE(static_cast<bool>(r0)) << llvm::toString(r0.takeError());
  EXPECT_FALSE(r0->skipped());
  std::map<std::string, std::vector<float>> before;
  for (const char *name : {"W", "U", "W.exp_avg", "W.exp_avg_sq", "U.exp_avg", "U.exp_avg_sq"})
    before[name] = stateValues(st, name);
  auto r1 = (*trainer)->step(**td, 1);
  ASSERT_TRUE(static_cast<bool>(r1)) << llvm::toString(r1.takeError());
  EXPECT_EQ(r1->nonFinite, NonFiniteCause::Loss);
  EXPECT_TRUE(std::isnan(r1->loss));
  EXPECT_TRUE(std::isnan(r1->gradNorm));  // optimizer_step did not run
  EXPECT_EQ(r1->firstNonFinite, "");
  EXPECT_FALSE(r1->stateNonFinite);
  EXPECT_EQ(r1->skippedTotal, 1);
  for (auto &[name, values] : before) EXPECT_EQ(stateValues(st, name), values) << name << " changed";
  for (const char *g : {"W.grad", "U.grad"})
    for (float v : stateValues(st, g)) ASSERT_EQ(v, 0.f) << g << " not zeroed";
  // Step 2 is the optimizer's second update (t = 2), as in the reference without step 1.
  auto r2 = (*trainer)->step(**td, 2);
  ASSERT_TRUE(static_cast<bool>(r2)) << llvm::toString(r2.takeError());
  TrainReference ref(cfg, W0, U0);
  for (auto [s, t] : {std::pair<int, int>{0, 1}, {2, 2}}) {
    std::vector<int64_t> tok, lab;
    referenceBatch(data, s, cfg.B, cfg.T, tok, lab);
    double norm = 0, loss = ref.step(tok, lab, referenceLr(cfg, s), t, norm);
    EXPECT_NEAR((s == 0 ? r0 : r2)->loss, loss, 1e-5 * loss) << s;
  }
  std::vector<float> W = stateValues(st, "W");
  for (size_t i = 0; i < W.size(); ++i) ASSERT_NEAR(W[i], ref.W()[i], 1e-4 * (1 + std::abs(ref.W()[i]))) << i;
}

TEST_F(RunTrainingTest, DivergingSgdStopsBeforeANonFiniteCheckpoint) {
  // SGD at a huge rate (issue 11's `sgd, lr: 1000` on the GPT example): the loss explodes within a
  // few steps. Whatever step turns non-finite first, the run must stop there, naming it, with one
  // metrics line per step and only finite checkpoints, the newest of them kept.
  TrainPlanConfig c = cfg;
  c.optimizer = "sgd";
  c.lr = 1e6;
  c.schedule = "constant";
  c.weightDecay = 0;
  llvm::SmallString<128> other;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-trainer-sgd", other));
  auto sgd = loadPlan(writeTrainPlan(other, c), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(sgd)) << llvm::toString(sgd.takeError());
  loaded = std::move(*sgd);
  for (NonFinitePolicy policy : {NonFinitePolicy::Stop, NonFinitePolicy::Skip}) {
    SCOPED_TRACE(policy == NonFinitePolicy::Stop ? "stop" : "skip");
    const std::string ck = path(policy == NonFinitePolicy::Stop ? "ck_stop" : "ck_skip");
    TrainOptions o = options("m.jsonl", 30);
    o.saveDir = ck;
    o.saveEvery = 1;
    o.onNonFinite = policy;
    std::string log;
    llvm::Error e = run(o, &log);
    std::vector<llvm::json::Object> lines = readMetrics(o.metricsPath);
    ASSERT_FALSE(lines.empty());
    const int64_t last = static_cast<int64_t>(lines.size()) - 1;
    int64_t skipped = 0;
    for (int64_t s = 0; s <= last; ++s) {
      const bool sk = lines[s].getBoolean("skipped") == true;
      skipped += sk;
      EXPECT_EQ(lines[s].getInteger("skipped_total"), skipped) << s;
      // A step that was applied had a finite loss and gradient norm.
      if (!sk) EXPECT_TRUE(lines[s].getNumber("loss") && lines[s].getNumber("grad_norm")) << s;
    }
    std::string msg;
    if (policy == NonFinitePolicy::Stop) {
      // The step that stopped the run is named; it is the last line, the only one skipped.
      ASSERT_TRUE(static_cast<bool>(e)) << "the run did not stop";
      msg = nonFiniteMessage(std::move(e));
      EXPECT_EQ(msg.rfind("step " + std::to_string(last) + ": ", 0), 0u) << msg;
      if (msg.find("so no checkpoint was written") == std::string::npos) EXPECT_EQ(skipped, 1) << msg;
      EXPECT_LT(last, 29) << "lr 1e6 did not diverge";
    } else if (e) {
      // Skipping ends only when a parameter itself is no longer finite.
      msg = nonFiniteMessage(std::move(e));
      EXPECT_NE(msg.find("skipping steps cannot recover"), std::string::npos) << msg;
    } else {
      EXPECT_EQ(last, 29);
      EXPECT_GT(skipped, 0) << "lr 1e6 never gave a non-finite step";
      EXPECT_NE(log.find("note: " + std::to_string(skipped) + " of 30 steps were skipped"), std::string::npos) << log;
    }
    // Every checkpoint left loads (the loader refuses non-finite tensors) and latest is the newest.
    auto device = createCpuDevice();
    auto store = StateStore::create(*loaded, *device);
    ASSERT_TRUE(static_cast<bool>(store));
    std::vector<std::string> names = folderNames(ck);  // "latest", then the step folders
    ASSERT_GE(names.size(), 2u) << msg;
    for (size_t i = 1; i < names.size(); ++i) {
      auto info = loadCheckpoint(ck + "/" + names[i], **store);
      EXPECT_TRUE(static_cast<bool>(info)) << names[i] << ": " << (info ? "" : llvm::toString(info.takeError()));
    }
    EXPECT_EQ(readBytes(ck + "/latest"), names.back() + "\n");
    if (!msg.empty()) EXPECT_NE(msg.find("the newest checkpoint is " + ck + "/" + names.back()), std::string::npos) << msg;
  }
  llvm::sys::fs::remove_directories(other);
}

/// Overwrites element `element` of tensor `name` (f32) in `file` of checkpoint step folder `step`
/// with NaN and updates the manifest's size and hash, as a checkpoint written from a diverged
/// state by an older runtime would be.
void poisonCheckpoint(const std::string &step, const std::string &file, const std::string &name, int64_t element) {
  const std::string p = step + "/" + file;
  auto buf = llvm::MemoryBuffer::getFile(p, false, false);
  ASSERT_TRUE(static_cast<bool>(buf));
  std::string bytes = (*buf)->getBuffer().str();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto header = llvm::json::parse(llvm::StringRef(bytes).substr(8, n));
  ASSERT_TRUE(static_cast<bool>(header));
  const llvm::json::Array *offsets = header->getAsObject()->getObject(name)->getArray("data_offsets");
  const int64_t at = 8 + static_cast<int64_t>(n) + *(*offsets)[0].getAsInteger() + element * 4;
  const float nan = NAN;
  std::memcpy(&bytes[at], &nan, 4);
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  auto hash = fnv1a64File(p);
  ASSERT_TRUE(static_cast<bool>(hash));
  auto manifestBuf = llvm::MemoryBuffer::getFile(step + "/manifest.json");
  ASSERT_TRUE(static_cast<bool>(manifestBuf));
  auto manifest = llvm::json::parse((*manifestBuf)->getBuffer());
  ASSERT_TRUE(static_cast<bool>(manifest));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(*hash));
  (*manifest->getAsObject()->getObject("files")->getObject(file))["fnv1a64"] = std::string(hex);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", *manifest);
  std::ofstream(step + "/manifest.json", std::ios::trunc) << os.str();
}

TEST_F(RunTrainingTest, NonFiniteCheckpointIsRefusedUnlessAllowed) {
  TrainOptions o = options("m.jsonl", 1);
  o.saveDir = path("ck");
  ASSERT_NO_ERR(run(o));
  const std::string step = path("ck/step-00000001");
  poisonCheckpoint(step, "model.safetensors", "U", 5);
  auto device = createCpuDevice();
  auto store = StateStore::create(*loaded, *device);
  ASSERT_TRUE(static_cast<bool>(store));
  std::vector<float> U0 = stateValues(**store, "U");
  EXPECT_EQ(nonFiniteMessage(loadCheckpoint(path("ck"), **store).takeError()),
            step + "/model.safetensors: tensor 'U' is not finite (element 5: nan): the checkpoint was saved from a "
                   "diverged state; pass --allow-nonfinite-checkpoint to load it anyway");
  EXPECT_EQ(stateValues(**store, "U"), U0) << "a refused load changed the store";
  // Asked for, it loads as it is.
  auto info = loadCheckpoint(path("ck"), **store, /*allowNonFinite=*/true);
  ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
  EXPECT_TRUE(std::isnan(stateValues(**store, "U")[5]));
  // Such a state is never saved: an error naming the tensor, and no folder written.
  EXPECT_EQ(nonFiniteMessage(saveCheckpoint(path("ck2"), **store, CheckpointInfo{1, cfg.B, 0, 0}).takeError()),
            "parameter 'U' (element 5: nan) is not finite, so no checkpoint was written to " + path("ck2"));
  EXPECT_FALSE(llvm::sys::fs::exists(path("ck2/step-00000001")));
  // Sampling from it is an error, not bytes from NaN logits.
  SampleOptions so;
  so.prompt = std::string("\x01", 1);
  so.tokens = 3;
  std::string out;
  llvm::raw_string_ostream os(out);
  EXPECT_EQ(errorMessage(sampleText(*loaded, KernelRegistry::cpu(), *device, **store, so, os)),
            loaded->path + ": program 'forward': the logits of generated token 0 (context position 0) are not finite "
                           "(id 5: nan); the weights hold non-finite values or overflow (a diverged checkpoint?), "
                           "nothing is sampled");
  EXPECT_EQ(os.str(), "") << "nothing printed, not even the prompt";
  // Training resumed from it (when allowed) stops at once, naming the parameter; skipping cannot help.
  for (NonFinitePolicy policy : {NonFinitePolicy::Stop, NonFinitePolicy::Skip}) {
    TrainOptions r = options("r.jsonl", 3);
    r.resumeDir = path("ck");
    r.allowNonFiniteCheckpoint = true;
    r.onNonFinite = policy;
    EXPECT_EQ(nonFiniteMessage(run(r)),
              "step 1: the loss is not finite (nan); the first non-finite tensor is parameter 'U' (element 5: nan); "
              "its update was not applied" +
                  std::string(policy == NonFinitePolicy::Skip
                                  ? ", and skipping steps cannot recover (a parameter or optimizer state is itself "
                                    "not finite)"
                                  : "") +
                  "; training stopped (the newest checkpoint is " + step + ")");
  }
}

TEST(MetricsLine, ShortestNumbersAndNullForNonFinite) {
  StepResult r;
  r.loss = double(2.5f);
  r.lr = 0.05;
  r.gradNorm = 1e-7;
  double eval = 1.25;
  EXPECT_EQ(metricsLine(3, r, 1024.5, nullptr),
            "{\"step\":3,\"loss\":2.5,\"lr\":0.05,\"grad_norm\":1e-07,\"tokens_per_s\":1024.5,"
            "\"skipped\":false,\"skipped_total\":0}");
  r.loss = NAN;
  r.gradNorm = INFINITY;
  r.nonFinite = NonFiniteCause::Loss;
  r.skippedTotal = 2;
  EXPECT_EQ(metricsLine(0, r, 7, &eval), "{\"step\":0,\"loss\":null,\"lr\":0.05,\"grad_norm\":null,\"tokens_per_s\":7,"
                                         "\"eval_loss\":1.25,\"skipped\":true,\"skipped_total\":2}");
  // comm_s and comm_elements appear only for a plan with a mesh (commSeconds >= 0), then the
  // state bytes (when the store holds any), last.
  r.commSeconds = 0.125;
  r.commElements = {4, 2, 3};
  r.stateBytes.params = 16;
  r.stateBytes.grads = 8;
  r.stateBytes.optimizer = 32;
  EXPECT_EQ(metricsLine(0, r, 7, &eval), "{\"step\":0,\"loss\":null,\"lr\":0.05,\"grad_norm\":null,"
                                         "\"tokens_per_s\":7,\"eval_loss\":1.25,\"skipped\":true,"
                                         "\"skipped_total\":2,\"comm_s\":0.125,\"comm_elements\":{\"all_reduce\":4,"
                                         "\"reduce_scatter\":2,\"all_gather\":3},\"state_bytes\":{\"params\":16,"
                                         "\"grads\":8,\"optimizer\":32}}");
  // memory (when the trainer measured an arena): offload figures only with a tier.
  r.memory.arenaBytes = 4096;
  r.memory.arenaHighWater = 1024;
  r.memory.peakRss = 1 << 20;
  EXPECT_NE(metricsLine(0, r, 7, &eval).find(",\"memory\":{\"arena_bytes\":4096,\"arena_high_water_bytes\":1024,"
                                              "\"peak_rss_bytes\":1048576}}"),
            std::string::npos);
  r.memory.offloadedBytes = 8192;
  r.memory.tierPrefetchedBytes = 4096;
  r.memory.majorFaults = 0;
  r.memory.tierPrefetchSeconds = 0.5;
  r.memory.tierEvictSeconds = 0.25;
  EXPECT_NE(metricsLine(0, r, 7, &eval).find(",\"memory\":{\"arena_bytes\":4096,\"offloaded_bytes\":8192,"
                                              "\"prefetched_bytes\":4096,\"prefetch_s\":0.5,\"evict_s\":0.25,"
                                              "\"major_faults\":0,"),
            std::string::npos);
  r.memory = {};
  r.stateBytes = {};
  // A loss-scaled step: loss_scale before skipped; an overflow counts as skipped.
  r.commSeconds = -1;
  r.nonFinite = NonFiniteCause::None;
  r.loss = 2.5;
  r.lossScale = 32768;
  r.overflow = true;
  EXPECT_EQ(metricsLine(0, r, 7, nullptr), "{\"step\":0,\"loss\":2.5,\"lr\":0.05,\"grad_norm\":null,"
                                          "\"tokens_per_s\":7,\"loss_scale\":32768,\"skipped\":true,"
                                          "\"skipped_total\":2}");
  r.lossScale = 0;
  r.overflow = false;
  r.loss = NAN;
  r.nonFinite = NonFiniteCause::Loss;
  r.commSeconds = -1;
  // Round trip: the written text parses back to the same double.
  r.loss = 2.9286656379699707;
  auto v = llvm::json::parse(metricsLine(0, r, 1, nullptr));
  ASSERT_TRUE(static_cast<bool>(v));
  EXPECT_EQ(*v->getAsObject()->getNumber("loss"), 2.9286656379699707);
}

// ---------------------------------------------------------------- sampling

TEST(PickToken, GreedyAndTemperature) {
  std::mt19937_64 rng(1);
  std::vector<float> l = {0.5f, 2.f, 2.f, -1.f};
  EXPECT_EQ(pickToken(l, 0, rng), 1);  // ties: lowest id
  // Frequencies of 40000 draws at temperature 0.7 match softmax(l / 0.7) within 4 sigma.
  std::vector<int> counts(4, 0);
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[pickToken(l, 0.7, rng)];
  double z = 0;
  for (float x : l) z += std::exp(x / 0.7);
  for (int i = 0; i < 4; ++i) {
    double p = std::exp(l[i] / 0.7) / z, sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(counts[i], n * p, 4 * sigma + 1) << i;
  }
}

TEST_F(TrainerTest, SampleGreedyFollowsTheModel) {
  TrainPlanConfig cfg;
  cfg.T = 3;  // the prompt plus 6 tokens slides the window
  std::vector<float> W, U;
  auto loaded = load(cfg, &W, &U);
  ASSERT_TRUE(loaded);
  auto device = createCpuDevice();
  auto store = StateStore::create(*loaded, *device);
  ASSERT_TRUE(static_cast<bool>(store));
  SampleOptions o;
  o.prompt = std::string("\x01\x07\x02", 3);
  o.tokens = 6;
  std::string out;
  llvm::raw_string_ostream os(out);
  ASSERT_NO_ERR(sampleText(*loaded, KernelRegistry::cpu(), *device, **store, o, os));
  // The bigram model's next token depends on the last token only: argmax_v W[last]·U[:, v].
  std::string want = o.prompt;
  int64_t last = 2;
  for (int i = 0; i < 6; ++i) {
    int64_t best = 0;
    double bestScore = -INFINITY;
    for (int64_t v = 0; v < cfg.V; ++v) {
      double s = 0;
      for (int64_t d = 0; d < cfg.D; ++d) s += double(W[last * cfg.D + d]) * U[d * cfg.V + v];
      if (s > bestScore) bestScore = s, best = v;
    }
    want += char(best);
    last = best;
  }
  EXPECT_EQ(os.str(), want);

  // Temperature sampling: reproducible with a seed.
  o.temperature = 1.5;
  o.seed = 42;
  std::string a, b;
  llvm::raw_string_ostream osa(a), osb(b);
  ASSERT_NO_ERR(sampleText(*loaded, KernelRegistry::cpu(), *device, **store, o, osa));
  ASSERT_NO_ERR(sampleText(*loaded, KernelRegistry::cpu(), *device, **store, o, osb));
  EXPECT_EQ(osa.str(), osb.str());
  EXPECT_EQ(osa.str().size(), 9u);

  // Errors.
  std::string sink;
  llvm::raw_string_ostream ss(sink);
  o.prompt = "A";  // 65 >= 16
  EXPECT_EQ(errorMessage(sampleText(*loaded, KernelRegistry::cpu(), *device, **store, o, ss)),
            "--prompt: byte 65 at offset 0 is outside the vocabulary of 16 ids");
  o.prompt = "";
  EXPECT_EQ(errorMessage(sampleText(*loaded, KernelRegistry::cpu(), *device, **store, o, ss)),
            "--prompt must not be empty (the first token comes from it)");
}

}  // namespace

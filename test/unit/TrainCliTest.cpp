//===- TrainCliTest.cpp - colossal-run train / sample / --checkpoint / --dump-states --------===//
//
// The hand-built training plan (TrainPlans.h) through the command line, against the float64
// reference: per-step losses of `train`, the gradients `train_step` accumulates (read back with
// --dump-states), greedy `sample` from a checkpoint, and the CLI's errors.
//
//===----------------------------------------------------------------------------------------===//
#include "TrainPlans.h"

#include "colossal/runtime/Npy.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Safetensors.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

#ifdef COLOSSAL_RUN_PATH

class TrainCliTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-traincli", dir));
    planPath = writeTrainPlan(dir, cfg, &W0, &U0);
    std::mt19937 rng(5);
    data.resize(90);
    for (size_t i = 0; i < data.size(); ++i) data[i] = i && rng() % 4 ? (data[i - 1] * 3 + 1) % cfg.V : rng() % cfg.V;
    std::ofstream(path("data.bin"), std::ios::binary).write(reinterpret_cast<const char *>(data.data()), data.size());
  }
  void TearDown() override {
    if (!dir.empty()) llvm::sys::fs::remove_directories(dir);
  }
  std::string path(llvm::StringRef name) const {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  /// Runs colossal-run with `args`; returns the exit status, stdout in `out`, stderr in `err`.
  int run(const std::string &args, std::string &out, std::string *err = nullptr) {
    std::string cmd = std::string(COLOSSAL_RUN_PATH) + " " + args + " 2>" + path("stderr.txt");
    FILE *pipe = popen(cmd.c_str(), "r");
    if (!pipe) return -1;
    char buf[4096];
    out.clear();
    while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
    int status = pclose(pipe);
    auto e = llvm::MemoryBuffer::getFile(path("stderr.txt"));
    if (err) *err = e ? (*e)->getBuffer().str() : "";
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string trainArgs(int steps) {
    return planPath + " train --data " + path("data.bin") + " --token-dtype uint8 --steps " + std::to_string(steps) +
           " --metrics " + path("m.jsonl") + " --threads 1";
  }

  llvm::SmallString<128> dir;
  TrainPlanConfig cfg;
  std::string planPath;
  std::vector<float> W0, U0;
  std::vector<uint8_t> data;
};

TEST_F(TrainCliTest, TrainMatchesReferenceAndSamples) {
  std::string out, err;
  ASSERT_EQ(run(trainArgs(8) + " --save " + path("ck") + " --save-every 4", out, &err), 0) << err;
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "") << "no progress bar when stderr is not a terminal";
  auto text = llvm::MemoryBuffer::getFile(path("m.jsonl"));
  ASSERT_TRUE(static_cast<bool>(text));
  llvm::SmallVector<llvm::StringRef, 0> lines;
  (*text)->getBuffer().split(lines, '\n', -1, false);
  ASSERT_EQ(lines.size(), 8u);
  TrainReference ref(cfg, W0, U0);
  for (int s = 0; s < 8; ++s) {
    std::vector<int64_t> tok, lab;
    referenceBatch(data, s, cfg.B, cfg.T, tok, lab);
    double norm = 0, loss = ref.step(tok, lab, cfg.lr, s + 1, norm);
    auto v = llvm::json::parse(lines[s]);
    ASSERT_TRUE(static_cast<bool>(v)) << lines[s].str();
    const llvm::json::Object &m = *v->getAsObject();
    EXPECT_EQ(m.getInteger("step"), s);
    EXPECT_NEAR(*m.getNumber("loss"), loss, 1e-5 * loss) << "step " << s;
    EXPECT_NEAR(*m.getNumber("grad_norm"), norm, 1e-5 * norm) << "step " << s;
  }

  // The checkpoint holds the trained parameters; greedy sampling follows them.
  auto model = SafetensorsFile::open(path("ck/step-00000008/model.safetensors"));
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  const float *W = static_cast<const float *>((*model)->find("W")->data);
  const float *U = static_cast<const float *>((*model)->find("U")->data);
  for (int64_t i = 0; i < cfg.V * cfg.D; ++i) ASSERT_NEAR(W[i], ref.W()[i], 1e-4) << i;
  std::string want = "\x03\x05";
  int64_t last = 5;
  for (int n = 0; n < 7; ++n) {  // 2 + 7 > T = 5: the window slides
    int64_t best = 0;
    double bestScore = -INFINITY;
    for (int64_t v = 0; v < cfg.V; ++v) {
      double sc = 0;
      for (int64_t d = 0; d < cfg.D; ++d) sc += double(W[last * cfg.D + d]) * U[d * cfg.V + v];
      if (sc > bestScore) bestScore = sc, best = v;
    }
    want += char(best);
    last = best;
  }
  ASSERT_EQ(run(planPath + " sample --checkpoint " + path("ck") + " --prompt \"$(printf '\\003\\005')\" --tokens 7", out, &err), 0)
      << err;
  EXPECT_EQ(out, want + "\n");
}

TEST_F(TrainCliTest, DumpStatesAfterTrainStep) {
  std::vector<int64_t> tok, lab;
  referenceBatch(data, 0, cfg.B, cfg.T, tok, lab);
  ASSERT_NO_ERR(writeNpy(path("tok.npy"), DType::I64, {cfg.B, cfg.T}, tok.data()));
  ASSERT_NO_ERR(writeNpy(path("lab.npy"), DType::I64, {cfg.B, cfg.T}, lab.data()));
  std::string out, err;
  ASSERT_EQ(run(planPath + " --program train_step --input input_ids=" + path("tok.npy") + " --input labels=" +
                    path("lab.npy") + " --output-dir " + path("o") + " --dump-states " + path("states"),
                out, &err),
            0)
      << err;
  TrainReference ref(cfg, W0, U0);
  std::vector<double> dW, dU;
  double loss = ref.lossAndGrad(tok.data(), lab.data(), cfg.B, dW, dU);
  auto l = readNpy(path("o/loss.npy"));
  ASSERT_TRUE(static_cast<bool>(l));
  EXPECT_NEAR(*static_cast<const float *>(l->data.data()), loss, 1e-5 * loss);
  auto g = readNpy(path("states/W.grad.npy"));
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->shape, std::vector<int64_t>({cfg.V, cfg.D}));
  for (size_t i = 0; i < dW.size(); ++i) ASSERT_NEAR(static_cast<const float *>(g->data.data())[i], dW[i], 1e-6) << i;
  auto w = readNpy(path("states/W.npy"));
  ASSERT_TRUE(static_cast<bool>(w));
  EXPECT_EQ(0, std::memcmp(w->data.data(), W0.data(), W0.size() * 4)) << "train_step does not change W";
}

/// --steps 0 trains nothing and says so (it used to exit without a word).
TEST_F(TrainCliTest, ZeroStepsIsADryRunThatSaysSo) {
  std::string out, err;
  EXPECT_EQ(run(trainArgs(0), out, &err), 0) << err;
  EXPECT_NE((out + err).find("note: --steps 0: no step ran"), std::string::npos) << out << err;
}

/// --profile: one table for the steps, every op's calls a whole number of steps; on a plain run
/// the warm-up runs are left out.
TEST_F(TrainCliTest, ProfileCountsEveryInstructionOfTheStepsOrRuns) {
  auto rows = [](const std::string &err, llvm::StringRef title) {
    std::vector<std::pair<std::string, long>> calls;  // op, calls ("all" last)
    size_t at = err.find(title.str());
    if (at == std::string::npos) return calls;
    std::istringstream in(err.substr(err.find('\n', at) + 1));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line) && line.rfind("  ", 0) == 0) {
      std::istringstream fields(line);
      std::string op;
      long n = 0;
      fields >> op >> n;
      calls.emplace_back(op, n);
    }
    return calls;
  };
  std::string out, err;
  ASSERT_EQ(run(trainArgs(2) + " --profile", out, &err), 0) << err;
  auto train = rows(err, "profile: rank 0, every program this run's steps ran");
  ASSERT_GE(train.size(), 3u) << err;
  EXPECT_EQ(train.back().first, "all") << err;
  long sum = 0;
  for (size_t i = 0; i + 1 < train.size(); ++i) {
    EXPECT_EQ(train[i].second % 2, 0) << train[i].first << " in\n" << err;
    sum += train[i].second;
  }
  EXPECT_EQ(sum, train.back().second) << err;

  ASSERT_EQ(run(planPath + " --zero-inputs --warmup 2 --repeat 3 --profile --threads 1", out, &err), 0) << err;
  auto plain = rows(err, "profile: rank 0, program ");
  ASSERT_GE(plain.size(), 2u) << err;
  for (const auto &[op, n] : plain) EXPECT_EQ(n % 3, 0) << op << ": the 2 warm-up runs are not counted\n" << err;
  // A run that fails ends with its error alone: no table before it.
  EXPECT_EQ(run(planPath + " train --data " + path("none.bin") + " --steps 2 --metrics " + path("m.jsonl") +
                    " --profile",
                out, &err),
            1);
  EXPECT_EQ(err, "error: " + path("none.bin") + ": cannot read token file: No such file or directory\n");
  EXPECT_EQ(run(planPath + " --zero-inputs --profile --output-dir " + path("data.bin"), out, &err), 1);
  EXPECT_EQ(err, "error: " + path("data.bin") + ": --output-dir exists and is not a directory\n");
  EXPECT_EQ(run(planPath + " sample --prompt x --tokens 1 --profile", out, &err), 1);
  EXPECT_EQ(err, "error: --profile is not an option of 'sample' (it belongs to running a program, 'train')\n");
}

TEST_F(TrainCliTest, Errors) {
  std::string out, err;
  EXPECT_EQ(run(planPath + " train --steps 2 --metrics " + path("m.jsonl"), out, &err), 1);
  EXPECT_EQ(err, "error: train needs --data TOKENS.bin\n");
  EXPECT_EQ(run(trainArgs(2) + " --token-dtype int8", out, &err), 1);
  EXPECT_EQ(err, "error: --token-dtype must be uint8 or uint16, not 'int8'\n");
  EXPECT_EQ(run(planPath + " --data " + path("data.bin"), out, &err), 1);
  EXPECT_EQ(err, "error: --data is not an option of running a program (it belongs to 'train')\n");
  // Without --checkpoint, sample runs the plan's initial weights; 'x' (120) is outside V = 16.
  EXPECT_EQ(run(planPath + " sample --prompt x --tokens 2", out, &err), 1);
  EXPECT_EQ(err, "error: --prompt: byte 120 at offset 0 is outside the vocabulary of 16 ids\n");
  EXPECT_EQ(run(planPath + " fly", out, &err), 1);
  EXPECT_EQ(err, "error: unknown subcommand 'fly' (expected train, sample, export, tokenize, generate or serve)\n");
  // A token outside the vocabulary (V = 16).
  std::ofstream(path("bad.bin"), std::ios::binary) << std::string(20, '\x01') << '\x20' << std::string(20, '\x01');
  EXPECT_EQ(run(planPath + " train --data " + path("bad.bin") + " --steps 1 --metrics " + path("m.jsonl"), out, &err),
            1);
  EXPECT_EQ(err, "error: " + path("bad.bin") + ": token id 32 at byte offset 20 (token 20) is outside the vocabulary "
                                                "of 16 ids\n");
  // Resume from a folder with no checkpoint.
  EXPECT_EQ(run(trainArgs(2) + " --resume " + path("none"), out, &err), 1);
  EXPECT_EQ(err, "error: " + path("none") + ": no such checkpoint folder\n");
}

TEST_F(TrainCliTest, NonFiniteStepsStopOrSkip) {
  std::string out, err;
  EXPECT_EQ(run(trainArgs(2) + " --on-nonfinite ignore", out, &err), 1);
  EXPECT_EQ(err, "error: --on-nonfinite must be stop or skip, not 'ignore'\n");
  EXPECT_EQ(run(planPath + " sample --checkpoint " + path("ck") + " --prompt a --tokens 1 --on-nonfinite skip", out,
                &err),
            1);
  EXPECT_EQ(err, "error: --on-nonfinite is not an option of 'sample' (it belongs to 'train')\n");
  EXPECT_EQ(run(trainArgs(2) + " --allow-nonfinite-checkpoint", out, &err), 1);
  EXPECT_EQ(err, "error: --allow-nonfinite-checkpoint needs the checkpoint it applies to (--checkpoint DIR, or "
                 "--resume DIR in train)\n");
  // A NaN gradient at step 1 (Trainer's test hook): one error line naming the step, exit 1, the
  // metrics line of step 1 written, no checkpoint of step 2.
  setenv("COLOSSAL_TEST_NONFINITE", "grad:1", 1);
  int status = run(trainArgs(4) + " --save " + path("ck") + " --save-every 1", out, &err);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(err, "error: step 1: the gradient norm is not finite (nan); the first non-finite tensor is the gradient "
                 "of 'W' (element 0: nan); its update was not applied; training stopped (the newest checkpoint is " +
                     path("ck/step-00000001") + "); --on-nonfinite skip skips such steps\n");
  auto lines = [&] {
    auto text = llvm::MemoryBuffer::getFile(path("m.jsonl"));
    llvm::SmallVector<llvm::StringRef, 0> l;
    if (text) (*text)->getBuffer().split(l, '\n', -1, false);
    std::vector<std::string> out(l.begin(), l.end());
    return out;
  };
  std::vector<std::string> stopped = lines();
  ASSERT_EQ(stopped.size(), 2u);
  EXPECT_NE(stopped[0].find("\"skipped\":false,\"skipped_total\":0"), std::string::npos) << stopped[0];
  EXPECT_NE(stopped[1].find("\"grad_norm\":null,"), std::string::npos) << stopped[1];
  EXPECT_NE(stopped[1].find("\"skipped\":true,\"skipped_total\":1"), std::string::npos) << stopped[1];
  EXPECT_FALSE(llvm::sys::fs::exists(path("ck/step-00000002")));
  // --on-nonfinite skip: the run goes on (exit 0); a warning for the step and a note at the end.
  status = run(trainArgs(4) + " --on-nonfinite skip", out, &err);
  unsetenv("COLOSSAL_TEST_NONFINITE");
  EXPECT_EQ(status, 0) << err;
  EXPECT_EQ(err, "warning: step 1: the gradient norm is not finite (nan); the first non-finite tensor is the gradient "
                 "of 'W' (element 0: nan); the step was skipped (1 skipped so far)\n"
                 "note: 1 of 4 steps were skipped (non-finite loss or gradients)\n");
  std::vector<std::string> skipped = lines();
  ASSERT_EQ(skipped.size(), 4u);
  for (int s = 0; s < 4; ++s)
    EXPECT_NE(skipped[s].find(s == 1 ? "\"skipped\":true,\"skipped_total\":1"
                                     : s == 0 ? "\"skipped\":false,\"skipped_total\":0"
                                              : "\"skipped\":false,\"skipped_total\":1"),
              std::string::npos)
        << skipped[s];
}

/// The FNV-1a 64 of a file, or 0 when unreadable (to see that a refused run left it alone).
uint64_t fileHash(const std::string &p) {
  auto h = fnv1a64File(p);
  if (!h) {
    llvm::consumeError(h.takeError());
    return 0;
  }
  return *h;
}

TEST_F(TrainCliTest, MetricsNeverOverwritesInputsOrCheckpoints) {
  std::string out, err;
  std::ofstream(path("eval.bin"), std::ios::binary).write(reinterpret_cast<const char *>(data.data()), data.size());
  const std::string base = planPath + " train --data " + path("data.bin") + " --steps 2 --threads 1 --metrics ";
  struct Case {
    std::string metrics, extra, what;
  };
  std::vector<Case> cases = {
      {path("data.bin"), "", "is the --data file"},
      {planPath, "", "is the plan"},
      {path("train.safetensors"), "", "is the plan's weights file"},
      {path("eval.bin"), " --eval-data " + path("eval.bin") + " --eval-every 1", "is the --eval-data file"},
      // Another spelling of the same file.
      {path("sub/../data.bin"), "", "is the --data file"},
  };
  ASSERT_FALSE(llvm::sys::fs::create_directories(path("sub")));
  for (const Case &c : cases) {
    uint64_t before = fileHash(c.metrics);
    ASSERT_NE(before, 0u) << c.metrics;
    EXPECT_EQ(run(base + c.metrics + c.extra, out, &err), 1) << c.metrics;
    EXPECT_NE(err.find("error: --metrics " + c.metrics + " " + c.what), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(fileHash(c.metrics), before) << c.metrics << " was changed";
  }
  // Inside the --save or --resume folder.
  ASSERT_EQ(run(trainArgs(2) + " --save " + path("ck"), out, &err), 0) << err;
  EXPECT_EQ(run(base + path("ck/m.jsonl") + " --save " + path("ck"), out, &err), 1);
  EXPECT_EQ(err, "error: --metrics " + path("ck/m.jsonl") + " lies in the --save folder " + path("ck") +
                     "; choose a path outside the checkpoint folder\n");
  std::string manifest = path("ck/step-00000002/manifest.json");
  uint64_t before = fileHash(manifest);
  EXPECT_EQ(run(planPath + " train --data " + path("data.bin") + " --steps 4 --threads 1 --metrics " + manifest +
                    " --resume " + path("ck"),
                out, &err),
            1);
  EXPECT_NE(err.find("lies in the --resume folder " + path("ck")), std::string::npos) << err;
  EXPECT_EQ(fileHash(manifest), before);
}

TEST_F(TrainCliTest, UnusableSaveFolderAndResumeAreFoundAtStartup) {
  std::string out, err;
  // A regular file, a path under a file, a folder nobody can write: refused before step 0.
  EXPECT_EQ(run(trainArgs(2) + " --save " + path("data.bin"), out, &err), 1);
  EXPECT_EQ(err, "error: --save " + path("data.bin") + ": exists and is not a directory\n");
  EXPECT_FALSE(llvm::sys::fs::exists(path("m.jsonl"))) << "no step ran";
  EXPECT_EQ(run(trainArgs(2) + " --save " + path("data.bin/ck"), out, &err), 1);
  EXPECT_EQ(err.rfind("error: --save " + path("data.bin/ck") + ": cannot create the folder: ", 0), 0u) << err;
  EXPECT_EQ(run(trainArgs(2) + " --save /proc/colossal-ck", out, &err), 1);
  EXPECT_EQ(err.rfind("error: --save /proc/colossal-ck: ", 0), 0u) << err;
  EXPECT_FALSE(llvm::sys::fs::exists(path("m.jsonl")));
  // A fresh folder is created at startup, and the probe file leaves nothing behind.
  ASSERT_EQ(run(trainArgs(0) + " --save " + path("new/ck"), out, &err), 0) << err;
  EXPECT_TRUE(llvm::sys::fs::is_directory(path("new/ck")));
  std::error_code ec;
  EXPECT_EQ(llvm::sys::fs::directory_iterator(path("new/ck"), ec), llvm::sys::fs::directory_iterator());

  // --resume of a regular file.
  EXPECT_EQ(run(trainArgs(2) + " --resume " + path("data.bin"), out, &err), 1);
  EXPECT_EQ(err, "error: --resume " + path("data.bin") +
                     ": not a directory (expected a checkpoint folder DIR or DIR/step-N)\n");
  // --steps at or below the checkpoint's step: nothing to do is an error, and no metrics file.
  ASSERT_EQ(run(trainArgs(4) + " --save " + path("ck"), out, &err), 0) << err;
  for (int n : {2, 4}) {
    EXPECT_EQ(run(planPath + " train --data " + path("data.bin") + " --steps " + std::to_string(n) +
                      " --threads 1 --metrics " + path("m2.jsonl") + " --resume " + path("ck"),
                  out, &err),
              1);
    EXPECT_EQ(err, "error: checkpoint is at step 4; --steps " + std::to_string(n) +
                       " is the total step count, so nothing to do (pass --steps > 4)\n");
    EXPECT_FALSE(llvm::sys::fs::exists(path("m2.jsonl")));
  }
  // --steps 4 with a resumed metrics file keeps it as it was.
  uint64_t metrics = fileHash(path("m.jsonl"));
  EXPECT_EQ(run(trainArgs(4) + " --resume " + path("ck"), out, &err), 1);
  EXPECT_EQ(fileHash(path("m.jsonl")), metrics);
}

TEST_F(TrainCliTest, ProgressBarLineEndsBeforeErrorsAndAtTheEnd) {
  if (!llvm::sys::fs::can_execute("/usr/bin/script")) GTEST_SKIP() << "needs script(1) for a terminal";
  // stderr on a terminal (script's pty): the bar is drawn with "\r"; the run's end closes the line.
  auto onTerminal = [&](const std::string &args, std::string &text) {
    std::string cmd = "/usr/bin/script -qec '" + std::string(COLOSSAL_RUN_PATH) + " " + args + "' /dev/null";
    FILE *pipe = popen(cmd.c_str(), "r");
    ASSERT_TRUE(pipe);
    char buf[4096];
    text.clear();
    while (size_t n = fread(buf, 1, sizeof buf, pipe)) text.append(buf, n);
    pclose(pipe);
  };
  std::string text;
  onTerminal(trainArgs(3), text);
  ASSERT_NE(text.find("\rstep 3/3  loss "), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.size() - 2), "\r\n") << "the bar's line ends";
  // A save that fails after step 2 ('latest' is taken by a non-empty folder): the error starts
  // on its own line, after the bar of step 1.
  ASSERT_FALSE(llvm::sys::fs::create_directories(path("ck/latest/x")));
  onTerminal(trainArgs(3) + " --save " + path("ck") + " --save-every 2", text);
  size_t e = text.find("error: ");
  ASSERT_NE(e, std::string::npos) << text;
  ASSERT_GE(e, 2u);
  EXPECT_NE(text.find("\rstep 1/3  loss "), std::string::npos) << text;
  EXPECT_EQ(text.substr(e - 2, 2), "\r\n") << text;
  EXPECT_NE(text.find("latest", e), std::string::npos) << text;
}

#endif

}  // namespace

//===- ColossalRunTest.cpp - The colossal-run command line ----------------------------------===//
#include "TestPlans.h"

#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Npy.h"

#include "llvm/Support/FileSystem.h"

#include <cstdio>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

#ifdef COLOSSAL_RUN_PATH

class ColossalRunTest : public MlpPlanTest {
protected:
  /// Runs colossal-run with `args`; returns the exit status and the combined stdout/stderr.
  int run(const std::string &args, std::string &output) {
    std::string cmd = std::string(COLOSSAL_RUN_PATH) + " " + args + " 2>&1";
    FILE *pipe = popen(cmd.c_str(), "r");
    if (!pipe) return -1;
    char buf[4096];
    output.clear();
    while (size_t n = fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
    int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void SetUp() override {
    MlpPlanTest::SetUp();
    planPath = writePlan();
    ASSERT_NO_ERR(writeNpy(path("x.npy"), DType::F32, {4, 8}, x.data()));
  }
  std::string planPath;
};

TEST_F(ColossalRunTest, WritesOutputs) {
  std::string out;
  ASSERT_EQ(run(planPath + " --input x=" + path("x.npy") + " --output-dir " + path("out/nested") + " --threads 1", out), 0)
      << out;
  std::vector<float> logits, probs;
  reference(x, logits, probs);
  auto l = readNpy(path("out/nested/logits.npy"));
  auto p = readNpy(path("out/nested/probs.npy"));
  ASSERT_TRUE(static_cast<bool>(l) && static_cast<bool>(p));
  EXPECT_EQ(l->shape, std::vector<int64_t>({4, 3}));
  expectClose(static_cast<const float *>(l->data.data()), logits.data(), 12);
  expectClose(static_cast<const float *>(p->data.data()), probs.data(), 12);
}

TEST_F(ColossalRunTest, RepeatPrintsTimings) {
  std::string out;
  ASSERT_EQ(run(planPath + " --input x=" + path("x.npy") + " --repeat 5 --warmup 2", out), 0) << out;
  EXPECT_NE(out.find("forward: median "), std::string::npos) << out;
  EXPECT_NE(out.find(" over 5 runs"), std::string::npos) << out;
}

TEST_F(ColossalRunTest, Errors) {
  std::string out;
  EXPECT_EQ(run(planPath + " --output-dir " + path("o"), out), 1);
  EXPECT_EQ(out, "error: missing input 'x' (f32 [4, 8]); pass --input x=FILE.npy (or --zero-inputs)\n");
  EXPECT_FALSE(llvm::sys::fs::exists(path("o")));

  // An output folder that is a file: refused before the run.
  EXPECT_EQ(run(planPath + " --input x=" + path("x.npy") + " --output-dir " + path("x.npy"), out), 1);
  EXPECT_EQ(out, "error: " + path("x.npy") + ": --output-dir exists and is not a directory\n");
  EXPECT_EQ(run(planPath + " --input x=" + path("x.npy") + " --output-dir " + path("x.npy") + "/sub", out), 1);
  EXPECT_EQ(out, "error: " + path("x.npy") + "/sub: cannot create output directory: " + path("x.npy") +
                     " is not a directory\n");
  EXPECT_EQ(run(planPath + " --input x=" + path("x.npy") + " --output-dir ''", out), 1);
  EXPECT_EQ(out, "error: --output-dir: the folder name is empty\n");

  EXPECT_EQ(run(planPath + " --input y=" + path("x.npy"), out), 1);
  EXPECT_EQ(out, "error: unknown input 'y' (the plan's inputs: x)\n");

  ASSERT_NO_ERR(writeNpy(path("bad.npy"), DType::F32, {8, 4}, x.data()));
  EXPECT_EQ(run(planPath + " --input x=" + path("bad.npy"), out), 1);
  EXPECT_EQ(out, "error: input 'x' (" + path("bad.npy") + "): expected shape [4, 8], got [8, 4]\n");

  std::vector<int64_t> ints(32);
  ASSERT_NO_ERR(writeNpy(path("int.npy"), DType::I64, {4, 8}, ints.data()));
  EXPECT_EQ(run(planPath + " --input x=" + path("int.npy"), out), 1);
  EXPECT_EQ(out, "error: input 'x' (" + path("int.npy") + "): expected dtype f32, got i64\n");

  EXPECT_EQ(run(planPath + " --input x=" + path("absent.npy"), out), 1);
  EXPECT_EQ(out.rfind("error: " + path("absent.npy") + ": cannot read", 0), 0u) << out;

  EXPECT_EQ(run(path("absent.cplan") + " --input x=" + path("x.npy"), out), 1);
  EXPECT_EQ(out.rfind("error: " + path("absent.cplan") + ": cannot read plan", 0), 0u) << out;

  model.set_version(colossal::runtime::kPlanVersion + 1);
  std::string broken = writePlan("broken.cplan");
  EXPECT_EQ(run(broken + " --input x=" + path("x.npy"), out), 1);
  EXPECT_EQ(out.rfind("error: " + broken + ": plan version " + std::to_string(colossal::runtime::kPlanVersion + 1), 0), 0u) << out;

  EXPECT_EQ(run(planPath + " --input x", out), 1);
  EXPECT_NE(out.find("error: --input expects NAME=FILE.npy"), std::string::npos) << out;

  EXPECT_EQ(run(planPath + " --input x=" + path("x.npy") + " --threads 65536", out), 1);
  EXPECT_EQ(out, "error: --threads 65536 is above the limit of 1024\n");

  { std::error_code ec; llvm::raw_fd_ostream os(path("empty.cplan"), ec); }
  EXPECT_EQ(run(path("empty.cplan") + " --input x=" + path("x.npy"), out), 1);
  EXPECT_EQ(out, "error: " + path("empty.cplan") + ": the plan file is empty (an interrupted copy?)\n");
}

#endif

}  // namespace

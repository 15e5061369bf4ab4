//===- TrainInputsTest.cpp - train.inputs: npy rows, --shuffle, RNG draws, dumps, errors -------===//
//
// The expected draws and permutations are those of the definitions in docs/training.md "Data for
// models that are not token models", computed independently by test/e2e/data_inputs_e2e.py's
// Python implementation (mix, fnv1a64, permutation) and pasted here.
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include "colossal/runtime/Npy.h"
#include "colossal/runtime/TrainInputs.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

class TrainInputsTest : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-train-inputs", dir)); }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }
  std::string path(llvm::StringRef name) const {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  /// A [rows, 2] float32 array whose row r is (r, r + 0.5).
  std::string writeRows(llvm::StringRef name, int64_t rows) {
    std::vector<float> v;
    for (int64_t r = 0; r < rows; ++r) v.insert(v.end(), {float(r), float(r) + 0.5f});
    std::string p = path(name);
    EXPECT_FALSE(static_cast<bool>(writeNpy(p, DType::F32, {rows, 2}, v.data())));
    return p;
  }
  plan::DataInput *add(plan::TrainConfig &tc, const std::string &name, plan::DataInput::Kind kind) {
    plan::DataInput *d = tc.add_data_inputs();
    d->set_name(name);
    d->set_kind(kind);
    return d;
  }
  /// Input `name` of the dump of `step`.
  NpyArray dumped(const std::string &name, int64_t step) {
    char folder[32];
    std::snprintf(folder, sizeof folder, "step-%08lld", static_cast<long long>(step));
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, "dump", folder, name + ".npy");
    llvm::Expected<NpyArray> a = readNpy(p);
    EXPECT_TRUE(static_cast<bool>(a)) << (a ? "" : llvm::toString(a.takeError()));
    return a ? std::move(*a) : NpyArray();
  }
  llvm::SmallString<128> dir;
};

BindingInfo binding(const std::string &name, DType dtype, Shape shape) { return {name, {dtype, shape, nullptr}}; }

TEST_F(TrainInputsTest, NpyRowsInOrderWrapAround) {
  plan::TrainConfig tc;
  tc.set_global_batch(3);
  add(tc, "x", plan::DataInput::NPY)->set_path(writeRows("x.npy", 5));
  auto in = TrainInputs::open(tc, {binding("x", DType::F32, {3, 2})}, 0, false);
  ASSERT_TRUE(static_cast<bool>(in)) << llvm::toString(in.takeError());
  for (int64_t s = 0; s < 2; ++s) {
    (*in)->prepare(s);
    ASSERT_NO_ERR((*in)->dump(path("dump"), s));
  }
  // Row r of step s is row (s·B + r) mod N: step 1 reads rows 3, 4, 0.
  NpyArray a = dumped("x", 1);
  ASSERT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
  const float *v = static_cast<const float *>(a.data.data());
  EXPECT_EQ(v[0], 3.0f);
  EXPECT_EQ(v[2], 4.0f);
  EXPECT_EQ(v[4], 0.0f);
  EXPECT_EQ(v[5], 0.5f);
}

TEST_F(TrainInputsTest, ShuffleIsTheDocumentedPerEpochPermutation) {
  plan::TrainConfig tc;
  tc.set_global_batch(3);
  add(tc, "x", plan::DataInput::NPY)->set_path(writeRows("x.npy", 7));
  auto in = TrainInputs::open(tc, {binding("x", DType::F32, {3, 2})}, 7, true);
  ASSERT_TRUE(static_cast<bool>(in)) << llvm::toString(in.takeError());
  // permutation(seed 7, epoch 0 / 1, N 7) of the Python reference.
  const int64_t epoch0[] = {2, 3, 0, 5, 1, 6, 4}, epoch1[] = {0, 5, 2, 6, 3, 4, 1};
  for (int64_t g = 0; g < 7; ++g) EXPECT_EQ((*in)->arrayRow(g), epoch0[g]) << g;
  for (int64_t g = 0; g < 7; ++g) EXPECT_EQ((*in)->arrayRow(7 + g), epoch1[g]) << g;
  EXPECT_EQ((*in)->arrayRow(3), epoch0[3]);  // back to an earlier epoch: recomputed alike
}

TEST_F(TrainInputsTest, DrawsAreTheDocumentedGenerators) {
  plan::TrainConfig tc;
  tc.set_global_batch(4);
  plan::DataInput *n = add(tc, "noise", plan::DataInput::NORMAL);
  n->set_mean(0.5);
  n->set_std(2.0);
  plan::DataInput *t = add(tc, "t", plan::DataInput::UNIFORM_INT);
  t->set_low(-5);
  t->set_high(1000);
  auto in = TrainInputs::open(tc, {binding("noise", DType::F32, {2, 1}), binding("t", DType::I64, {2})}, 3, false);
  ASSERT_TRUE(static_cast<bool>(in)) << llvm::toString(in.takeError());
  (*in)->prepare(2);
  ASSERT_NO_ERR((*in)->dump(path("dump"), 2));
  // Element j of step 2, seed 3, from the Python reference (Box–Muller in double, then float32).
  NpyArray noise = dumped("noise", 2), ts = dumped("t", 2);
  ASSERT_EQ(noise.shape, (std::vector<int64_t>{4, 1}));
  const float wantNoise[] = {1.441020131111145f, 3.394287586212158f, 1.0820354223251343f, 4.93288516998291f};
  const int64_t wantT[] = {720, 455, 465, 723};
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(static_cast<const float *>(noise.data.data())[j], wantNoise[j]) << j;
    EXPECT_EQ(static_cast<const int64_t *>(ts.data.data())[j], wantT[j]) << j;
  }
}

TEST_F(TrainInputsTest, NormalDrawsHaveTheirMoments) {
  plan::TrainConfig tc;
  tc.set_global_batch(4096);
  plan::DataInput *n = add(tc, "noise", plan::DataInput::NORMAL);
  n->set_mean(1.0);
  n->set_std(3.0);
  auto in = TrainInputs::open(tc, {binding("noise", DType::F64, {4096, 8})}, 11, false);
  ASSERT_TRUE(static_cast<bool>(in)) << llvm::toString(in.takeError());
  (*in)->prepare(0);
  ASSERT_NO_ERR((*in)->dump(path("dump"), 0));
  NpyArray a = dumped("noise", 0);
  const double *v = static_cast<const double *>(a.data.data());
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < a.numel(); ++i) sum += v[i], sq += v[i] * v[i];
  const double mean = sum / a.numel(), sd = std::sqrt(sq / a.numel() - mean * mean);
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(sd, 3.0, 0.05);
}

TEST_F(TrainInputsTest, ErrorsNameTheInputAndFile) {
  plan::TrainConfig tc;
  tc.set_global_batch(2);
  add(tc, "x", plan::DataInput::NPY)->set_path(writeRows("x.npy", 5));
  EXPECT_EQ(errorMessage(TrainInputs::open(tc, {binding("x", DType::F32, {2, 3})}, 0, false).takeError()),
            "train.inputs.x: " + path("x.npy") +
                " does not fit the model's input 'x': expected float32 [N, 3], got float32 [5, 2]");
  EXPECT_EQ(errorMessage(TrainInputs::open(tc, {binding("x", DType::I64, {2, 2})}, 0, false).takeError()),
            "train.inputs.x: " + path("x.npy") +
                " does not fit the model's input 'x': expected int64 [N, 2], got float32 [5, 2]");
  EXPECT_EQ(errorMessage(TrainInputs::open(tc, {binding("y", DType::F32, {2, 2})}, 0, false).takeError()),
            "train.inputs.x: the program has no input 'x'");
  add(tc, "y", plan::DataInput::NPY)->set_path(writeRows("y.npy", 4));
  EXPECT_EQ(errorMessage(TrainInputs::open(tc, {binding("x", DType::F32, {2, 2}), binding("y", DType::F32, {2, 2})},
                                           0, false)
                             .takeError()),
            "train.inputs.y: " + path("y.npy") + " has 4 rows but " + path("x.npy") +
                " has 5; every npy input is read at the same row index");
  plan::TrainConfig draws;
  draws.set_global_batch(2);
  add(draws, "n", plan::DataInput::NORMAL)->set_std(1);
  EXPECT_EQ(errorMessage(TrainInputs::open(draws, {binding("n", DType::I64, {2})}, 0, false).takeError()),
            "train.inputs.n: normal draws need a float32 or float64 input; 'n' is int64");
  plan::TrainConfig missing;
  missing.set_global_batch(2);
  add(missing, "x", plan::DataInput::NPY)->set_path(path("absent.npy"));
  EXPECT_NE(errorMessage(TrainInputs::open(missing, {binding("x", DType::F32, {2, 2})}, 0, false).takeError())
                .find("train.inputs.x: " + path("absent.npy")),
            std::string::npos);
}

}  // namespace

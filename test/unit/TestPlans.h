//===- TestPlans.h - A small hand-built MLP plan for plan/executor/CLI tests ----*- C++ -*-===//
//
//   x [4, 8] -> matmul fc1.weight [8, 16] -> add fc1.bias [16] (in place) -> relu -> h [4, 16]
//     -> matmul fc2.weight [16, 3] -> logits [4, 3] -> softmax(axis 1) -> probs [4, 3]
// Outputs "logits" and "probs"; weights in model.safetensors next to model.cplan.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_TEST_UNIT_TESTPLANS_H
#define COLOSSAL_TEST_UNIT_TESTPLANS_H

#include "TestUtil.h"

#include "llvm/ADT/SmallString.h"

#include <string>
#include <vector>

namespace colossal::runtime::testing {

class MlpPlanTest : public ::testing::Test {
protected:
  void SetUp() override;
  void TearDown() override;

  /// Writes `weights` to model.safetensors and updates model.weights_size/hash to match.
  void writeWeights();
  /// Serializes `plan` to `name` in the test folder; returns the path.
  std::string writePlan(const std::string &name = "model.cplan");
  std::string path(const std::string &name) const;
  /// Reference logits and probs for input `x` (naive loops).
  void reference(const std::vector<float> &x, std::vector<float> &logits, std::vector<float> &probs) const;

  llvm::SmallString<128> dir;
  plan::Plan model;
  std::vector<float> x, w1, b1, w2;
};

}  // namespace colossal::runtime::testing

#endif

//===- SpecTest.cpp - the spec's train: section and its generated pipeline ---===//
//
// The expected values are PyTorch 1.13's constructor defaults (torch.optim.AdamW: betas
// (0.9, 0.999), eps 1e-8, weight_decay 1e-2; Adam and SGD: weight_decay 0) and docs/training.md's
// pipeline text.
//===----------------------------------------------------------------------===//
#include "colossal/Spec/Spec.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

/// Writes `text` to a temporary .yaml file and parses it; the file is removed afterwards.
llvm::Expected<colossal::Spec> parse(const std::string &text) {
  llvm::SmallString<128> path;
  if (auto ec = llvm::sys::fs::createTemporaryFile("spec", "yaml", path))
    return llvm::errorCodeToError(ec);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    os << text;
  }
  auto spec = colossal::parseSpecFile(path);
  llvm::sys::fs::remove(path);
  return spec;
}

colossal::Spec parseOk(const std::string &text) {
  auto spec = parse(text);
  if (!spec) {
    ADD_FAILURE() << llvm::toString(spec.takeError());
    return {};
  }
  return std::move(*spec);
}

const char *kHead = "mode: train\ninputs: {tokens: [8, 64]}\ntrain:\n  loss: {logits: logits}\n";

TEST(SpecTrain, AdamWDefaultsArePyTorchs) {
  colossal::Spec s = parseOk(std::string(kHead) + "  optimizer: {lr: 3.0e-4}\n");
  ASSERT_TRUE(s.train.has_value());
  const colossal::TrainSpec &t = *s.train;
  EXPECT_EQ(t.lossKind, "cross_entropy");
  EXPECT_EQ(t.logits, "logits");
  EXPECT_EQ(t.labels, "labels");
  EXPECT_EQ(t.ignoreIndex, -100);
  EXPECT_EQ(t.optimizer, "adamw");
  EXPECT_EQ(t.lr, 3.0e-4);
  EXPECT_EQ(t.beta1, 0.9);
  EXPECT_EQ(t.beta2, 0.999);
  EXPECT_EQ(t.eps, 1e-8);
  EXPECT_EQ(t.weightDecay, 0.01);
  EXPECT_EQ(t.schedule, "constant");
  EXPECT_EQ(t.gradClip, 0.0);
  EXPECT_EQ(t.gradAccum, 1);
  EXPECT_TRUE(t.frozen.empty());
  EXPECT_TRUE(t.noDecay.empty());
}

TEST(SpecTrain, AdamAndSgdDefaultToNoDecay) {
  EXPECT_EQ(parseOk(std::string(kHead) + "  optimizer: {kind: adam, lr: 1}\n").train->weightDecay,
            0.0);
  colossal::Spec sgd = parseOk(std::string(kHead) + "  optimizer: {kind: sgd, lr: 0.1}\n");
  EXPECT_EQ(sgd.train->weightDecay, 0.0);
  EXPECT_EQ(sgd.train->momentum, 0.0);
  EXPECT_FALSE(sgd.train->nesterov);
}

TEST(SpecTrain, EveryValueIsRead) {
  colossal::Spec s = parseOk(
      "mode: train\ninputs: {tokens: [8, 64]}\ntrain:\n"
      "  loss: {kind: output, output: loss, labels: targets, logits: logits, ignore_index: 3}\n"
      "  optimizer: {kind: sgd, lr: 0.5, momentum: 0.9, dampening: 0, nesterov: true, "
      "weight_decay: 0.001}\n"
      "  lr_schedule: {kind: cosine, warmup_steps: 100, total_steps: 5000, min_lr: 1.0e-4}\n"
      "  grad_clip: 1.5\n  grad_accum: 4\n  frozen: [wte, '/blocks.0/.*']\n  no_decay: ['.*bias']\n");
  const colossal::TrainSpec &t = *s.train;
  EXPECT_EQ(t.lossKind, "output");
  EXPECT_EQ(t.output, "loss");
  EXPECT_EQ(t.labels, "targets");
  EXPECT_EQ(t.ignoreIndex, 3);
  EXPECT_EQ(t.optimizer, "sgd");
  EXPECT_EQ(t.momentum, 0.9);
  EXPECT_TRUE(t.nesterov);
  EXPECT_EQ(t.weightDecay, 0.001);
  EXPECT_EQ(t.schedule, "cosine");
  EXPECT_EQ(t.warmupSteps, 100);
  EXPECT_EQ(t.totalSteps, 5000);
  EXPECT_EQ(t.minLr, 1e-4);
  EXPECT_EQ(t.gradClip, 1.5);
  EXPECT_EQ(t.gradAccum, 4);
  ASSERT_EQ(t.frozen.size(), 2u);
  EXPECT_EQ(t.frozen[1], "/blocks.0/.*");
  ASSERT_EQ(t.noDecay.size(), 1u);
  EXPECT_EQ(t.noDecay[0], ".*bias");
}

TEST(SpecTrain, InferenceHasNoTrainSection) {
  colossal::Spec s = parseOk("mode: inference\n");
  EXPECT_FALSE(s.train.has_value());
}

/// The compiled mesh: rank-layout order pp, dp, tp (whatever order the spec writes), roles.
TEST(SpecTrain, MeshAxesInRankLayoutOrderWithRoles) {
  colossal::Spec s = parseOk("mode: inference\nmesh: {tp: 2, dp: 3}\n");
  std::vector<colossal::Spec::MeshAxis> axes = s.meshAxes();
  ASSERT_EQ(axes.size(), 2u);
  EXPECT_EQ(axes[0].name, "dp");
  EXPECT_EQ(axes[0].size, 3);
  EXPECT_EQ(axes[0].role, "data");
  EXPECT_EQ(axes[1].name, "tp");
  EXPECT_EQ(axes[1].role, "tensor");
}

TEST(SpecTrain, ErrorsNameLineAndColumn) {
  auto s = parse(std::string(kHead) + "  optimizer: {lr: 0.1, weight_decay: -1}\n");
  ASSERT_FALSE(bool(s));
  std::string msg = llvm::toString(s.takeError());
  EXPECT_NE(msg.find(".yaml:5:38: expected a number >= 0"), std::string::npos) << msg;
}

} // namespace

//===- PipelineTest.cpp - the pipeline a spec builds (buildColossalPipeline) ------------===//
//
// The passes and their options, read back from the built pass manager's textual form, and that
// form parses back to the same pipeline (what --dump-pass-pipeline prints can be edited and passed
// to --pass-pipeline). A regex with ';', '=' and braces reaches its pass whole.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/Pipeline/Pipeline.h"
#include "passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace {

std::string textOf(mlir::OpPassManager &pm) {
  std::string s;
  llvm::raw_string_ostream os(s);
  pm.printAsTextualPipeline(os);
  return s;
}

std::string build(const colossal::Spec &spec) {
  static bool registered = [] {
    mlir::registerTransformsPasses();
    colossal::registerColossalPasses();
    return true;
  }();
  (void)registered;
  mlir::OpPassManager pm(mlir::ModuleOp::getOperationName());
  colossal::buildColossalPipeline(pm, spec);
  std::string text = textOf(pm);
  // The printed form parses back to the same pipeline.
  auto parsed = mlir::parsePassPipeline(text, llvm::errs());
  EXPECT_TRUE(mlir::succeeded(parsed)) << text;
  if (mlir::succeeded(parsed))
    EXPECT_EQ(textOf(*parsed), text);
  return text;
}

colossal::Spec trainSpec() {
  colossal::Spec s;
  s.mode = "train";
  s.train.emplace();
  s.train->logits = "logits";
  s.train->lr = 0.25;
  return s;
}

TEST(Pipeline, InferenceIsTheFusions) {
  colossal::Spec s;
  std::string p = build(s);
  EXPECT_NE(p.find("colossal-fuse-norms,colossal-fuse-activations,colossal-fuse-attention,"
                   "colossal-fuse-conv-epilogue"),
            std::string::npos)
      << p;
  for (const char *absent : {"colossal-define-mesh", "colossal-split-batch", "colossal-append-loss"})
    EXPECT_EQ(p.find(absent), std::string::npos) << absent << " in " << p;
}

TEST(Pipeline, TrainCarriesTheSpecValues) {
  colossal::Spec s = trainSpec();
  s.train->gradAccum = 2;
  s.train->frozen = {"wte", "h{1,2}"};
  s.train->noDecay = {".*bias"};
  s.train->schedule = "cosine";
  s.train->warmupSteps = 10;
  s.train->totalSteps = 100;
  std::string p = build(s);
  EXPECT_NE(p.find("colossal-split-batch{accum-key=train.grad_accum grad-accum=2 into=microbatch}"), std::string::npos) << p;
  EXPECT_NE(p.find("colossal-autodiff{frozen={wte,h{1,2}} grad-accum=2 loss-scale-backoff-factor=0.5 "
                   "loss-scale-growth-factor=2 loss-scale-growth-interval=2000 loss-scale-initial=0 "
                   "loss-scale-min=1}"), std::string::npos) << p;
  EXPECT_NE(p.find("lr=0.25 "), std::string::npos) << p;
  EXPECT_NE(p.find("lr-schedule=cosine"), std::string::npos) << p;
  EXPECT_NE(p.find("no-decay={.*bias}"), std::string::npos) << p;
  EXPECT_NE(p.find("total-steps=100 warmup-steps=10"), std::string::npos) << p;
  EXPECT_EQ(p.find("colossal-data-parallel"), std::string::npos) << p;
  // Batch norm stays trainable and a conv with an activation has no VJP: no conv fusion.
  EXPECT_EQ(p.find("colossal-fuse-conv-epilogue"), std::string::npos) << p;
}

/// Real options print the shortest text that reads back exactly: a dumped pipeline runs with the
/// numbers it was built with (llvm::cl's 6 digits would print lr=1.234568e-04).
TEST(Pipeline, RealOptionsPrintExactly) {
  colossal::Spec s = trainSpec();
  s.train->lr = 1.2345678e-4;
  s.train->weightDecay = 0.1;
  s.train->beta2 = 0.999999;
  std::string p = build(s);
  EXPECT_NE(p.find("lr=0.00012345678 "), std::string::npos) << p;
  EXPECT_NE(p.find("weight-decay=0.1}"), std::string::npos) << p;
  EXPECT_NE(p.find("beta2=0.999999 "), std::string::npos) << p;
  colossal::Real third = 1.0 / 3.0;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << third;
  EXPECT_EQ(std::strtod(text.c_str(), nullptr), 1.0 / 3.0) << text;
}

/// dp x tp: the mesh first (rank-layout order, roles), the batch split, the partitioner with a
/// hint whose regex holds ';', '=' and braces, then the gradient sum in buckets of zero.bucket_mb.
TEST(Pipeline, DataAndTensorParallel) {
  colossal::Spec s = trainSpec();
  s.mesh = {{"tp", 2}, {"dp", 2}};
  s.bucketMb = 0.5;
  s.tensor.hints = {{"a;b=c{1,2}", "-,tp"}};
  std::string p = build(s);
  EXPECT_EQ(p.find("builtin.module(colossal-define-mesh{axes={dp=2:data,tp=2:tensor}},"), 0u) << p;
  EXPECT_NE(p.find("colossal-split-batch{accum-key=train.grad_accum grad-accum=1 into=microbatch}"), std::string::npos) << p;
  EXPECT_NE(p.find("colossal-autodiff{ grad-accum=2 loss-scale-backoff-factor=0.5"), std::string::npos) << p;
  EXPECT_NE(p.find("hints={a;b=c{1,2}=-/tp}"), std::string::npos) << p;
  EXPECT_NE(p.find("colossal-data-parallel,func.func(colossal-bucket-gradients{bucket-cap-mb=0.5})"),
            std::string::npos)
      << p;
}

} // namespace

//===- Pipeline.cpp - the pass pipeline a spec asks for, with typed options ---===//
#include "colossal/Pipeline/Pipeline.h"

#include "passes/Passes.h"
#include "dialects/Colossal/Programs.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

namespace colossal {

namespace {

void addCanonicalizeCse(mlir::OpPassManager &fn) {
  fn.addPass(mlir::createCanonicalizerPass());
  fn.addPass(mlir::createCSEPass());
}

/// func.func(canonicalize, cse): after a rewrite of the module.
void addCleanup(mlir::OpPassManager &pm) { addCanonicalizeCse(pm.nest<mlir::func::FuncOp>()); }

/// func.func(canonicalize, fusions, canonicalize, cse): shape arithmetic folded first, so the
/// fusions see constants. Inference also folds batch norm and activations into convs (the
/// weights are constants there, and nothing differentiates the fused conv).
void addFusion(mlir::OpPassManager &pm, bool inference) {
  mlir::OpPassManager &fn = pm.nest<mlir::func::FuncOp>();
  fn.addPass(mlir::createCanonicalizerPass());
  fn.addPass(createFuseNorms());
  fn.addPass(createFuseActivations());
  fn.addPass(createFuseAttention());
  if (inference)
    fn.addPass(createFuseConvEpilogue());
  addCanonicalizeCse(fn);
}

/// func.func(colossal-auto-mixed-precision) for `precision.compute: bf16`; nothing for fp32.
void addMixedPrecision(mlir::OpPassManager &pm, const Spec &spec) {
  if (spec.precision == "fp32")
    return;
  AutoMixedPrecisionOptions amp;
  amp.compute = spec.precision;
  pm.nest<mlir::func::FuncOp>().addPass(createAutoMixedPrecision(amp));
}

/// Microbatches per dp rank per optimizer step: train.grad_accum, or the pipeline's microbatches.
int64_t microbatchesPerStep(const Spec &spec) {
  if (spec.pipeline)
    return spec.pipeline->microbatches;
  return spec.train ? spec.train->gradAccum : 1;
}

void addTraining(mlir::OpPassManager &pm, const Spec &spec) {
  const TrainSpec &t = *spec.train;
  AppendLossOptions loss;
  loss.kind = t.lossKind;
  loss.logits = t.logits;
  loss.labels = t.labels;
  loss.output = t.output;
  loss.ignoreIndex = t.ignoreIndex;
  for (const TrainSpec::Input &in : t.inputs)
    loss.dataInputs.push_back(in.name);
  pm.addPass(createAppendLoss(loss));

  // Mixed precision between the loss and autodiff: the backward pass then reads the bf16 copies
  // the contractions made (saved activations in bf16) while parameters, gradient accumulators
  // and the optimizer stay f32 (docs/training.md "Mixed precision").
  addMixedPrecision(pm, spec);

  // Pipeline parallelism: the forward ops get their stages before autodiff, whose VJPs inherit
  // them (docs/parallelism.md "Pipeline parallelism").
  if (spec.pipeline) {
    AssignPipelineStagesOptions stages;
    stages.stages = spec.pipelineParallel() * spec.pipeline->virtualStages;
    stages.virtualStages = spec.pipeline->virtualStages;
    stages.microbatches = spec.pipeline->microbatches;
    stages.schedule = spec.pipeline->schedule;
    stages.cuts.assign(spec.pipeline->cuts.begin(), spec.pipeline->cuts.end());
    pm.addPass(createAssignPipelineStages(stages));
  }

  // Every rank's accumulators take 1/(dp·grad_accum) of each microbatch gradient, so the sum over
  // the data axes is the global mean (docs/parallelism.md "Data parallelism"); pipeline
  // microbatches play grad_accum's role.
  AutodiffOptions autodiff;
  autodiff.gradAccum = microbatchesPerStep(spec) * spec.dataParallel();
  autodiff.frozen.assign(t.frozen.begin(), t.frozen.end());
  if (spec.lossScale) {
    autodiff.lossScaleInitial = spec.lossScale->initial;
    autodiff.lossScaleGrowthFactor = spec.lossScale->growthFactor;
    autodiff.lossScaleBackoffFactor = spec.lossScale->backoffFactor;
    autodiff.lossScaleGrowthInterval = spec.lossScale->growthInterval;
    autodiff.lossScaleMin = spec.lossScale->min;
  }
  pm.addPass(createAutodiff(autodiff));

  OptimizerOptions opt;
  opt.kind = t.optimizer;
  opt.lr = t.lr;
  opt.beta1 = t.beta1;
  opt.beta2 = t.beta2;
  opt.eps = t.eps;
  opt.momentum = t.momentum;
  opt.dampening = t.dampening;
  opt.nesterov = t.nesterov;
  opt.weightDecay = t.weightDecay;
  opt.noDecay.assign(t.noDecay.begin(), t.noDecay.end());
  opt.maxGradNorm = t.gradClip;
  opt.lrSchedule = t.schedule;
  opt.warmupSteps = t.warmupSteps;
  opt.totalSteps = t.totalSteps;
  opt.minLr = t.minLr;
  pm.addPass(createOptimizer(opt));
  addCleanup(pm);
}

/// Pipeline parallelism's stage programs, cut from the finished step (after tensor parallelism
/// and data parallelism's gradient sums, before buckets, so each stage buckets its own).
void addStageSplit(mlir::OpPassManager &pm, const Spec &spec) {
  if (!spec.pipeline)
    return;
  pm.addPass(createSplitPipelineStages());
  addCleanup(pm);
}

/// parallel.tensor as colossal-spmd-partition's options.
SpmdPartitionOptions tensorPartitionOptions(const Spec &spec) {
  SpmdPartitionOptions partition;
  partition.style = spec.tensor.style;
  partition.sequenceParallel = spec.tensor.sequenceParallel;
  for (const auto &[pattern, dims] : spec.tensor.hints) {
    std::string d = dims;
    std::replace(d.begin(), d.end(), ',', '/');
    partition.hints.push_back(pattern + "=" + d);
  }
  return partition;
}

} // namespace

void buildColossalPipeline(mlir::OpPassManager &pm, const Spec &spec) {
  // The mesh first: every distribution pass finds its axes on it by role.
  std::vector<Spec::MeshAxis> axes = spec.meshAxes();
  if (!axes.empty()) {
    DefineMeshOptions mesh;
    for (const Spec::MeshAxis &a : axes)
      mesh.axes.push_back(a.name + "=" + std::to_string(a.size) + ":" + a.role);
    pm.addPass(createDefineMesh(mesh));
  }
  addFusion(pm, !spec.train);
  // Mode generate: the serving programs over the paged KV cache, from the fused forward.
  if (spec.generate) {
    const Spec::Generate &g = *spec.generate;
    GenerateOptions gen;
    gen.maxSeqLen = g.maxSeqLen;
    gen.blockSize = g.blockSize;
    gen.kvBlocks = g.kvBlocks;
    gen.maxBatchSeqs = g.maxBatchSeqs;
    gen.maxBatchTokens = g.maxBatchTokens;
    gen.budgetBytes = spec.memory.budgetBytes.value_or(0);
    pm.addPass(createGenerate(gen));
    addCleanup(pm);
    // Tensor parallelism over the step programs, as over @forward in inference: the paged ops
    // split their heads, so each rank keeps its heads' share of the KV cache.
    if (spec.tensorParallel() > 1) {
      pm.addPass(createSpmdPartition(tensorPartitionOptions(spec)));
      addCleanup(pm);
    }
    return;
  }
  // Data parallelism and grad_accum: the program of one row block of the batch, before the loss
  // so that @train_step is built on it.
  const int64_t dp = spec.dataParallel();
  const int64_t accum = microbatchesPerStep(spec);
  if (dp * accum > 1) {
    SplitBatchOptions split;
    split.gradAccum = accum;
    if (spec.pipeline)
      split.accumKey = "parallel.pipeline.microbatches";
    if (!spec.train)
      split.into = programRoleName(ProgramRole::Forward).str();
    pm.addPass(createSplitBatch(split));
  }
  if (spec.train) {
    addTraining(pm, spec);
  } else {
    addMixedPrecision(pm, spec);
    // Inference under pipeline parallelism: @forward (one microbatch) cut into stages.
    if (spec.pipeline) {
      AssignPipelineStagesOptions stages;
      stages.stages = spec.pipelineParallel() * spec.pipeline->virtualStages;
      stages.virtualStages = spec.pipeline->virtualStages;
      stages.microbatches = spec.pipeline->microbatches;
      stages.schedule = "gpipe";
      stages.cuts.assign(spec.pipeline->cuts.begin(), spec.pipeline->cuts.end());
      pm.addPass(createAssignPipelineStages(stages));
    }
  }
  // Tensor parallelism after everything else, so autodiff and the optimizer see the whole
  // single-device program (docs/parallelism.md "Tensor parallelism").
  if (spec.tensorParallel() > 1) {
    pm.addPass(createSpmdPartition(tensorPartitionOptions(spec)));
    addCleanup(pm);
  }
  // Data parallelism's gradient sum (or ZeRO's partitioned states) and its buckets, after the
  // partitioner (tensor-parallel gradients are local shards by then).
  if (spec.train && dp > 1) {
    if (spec.zeroStage > 0) {
      ZeroOptions zero;
      zero.stage = spec.zeroStage;
      pm.addPass(createZero(zero));
    } else {
      pm.addPass(createDataParallel());
    }
    addStageSplit(pm, spec);
    BucketGradientsOptions buckets;
    buckets.bucketCapMb = spec.bucketMb;
    pm.nest<mlir::func::FuncOp>().addPass(createBucketGradients(buckets));
  }
  if (!(spec.train && dp > 1))
    addStageSplit(pm, spec);
  // Offload reads gradients one per instruction (one chunk resident at a time).
  if (spec.train && spec.memory.offload != "none")
    pm.nest<mlir::func::FuncOp>().addPass(createChainGlobalNorm());
  // Activation recompute last: it clones forward ops into the backward part, which CSE would
  // merge back, so nothing runs after it (docs/training.md "Activation recompute").
  if (spec.train && spec.memory.recompute != "none") {
    RecomputeOptions recompute;
    recompute.mode = spec.memory.recompute;
    recompute.budgetBytes = spec.memory.activationTarget;
    pm.nest<mlir::func::FuncOp>().addPass(createRecompute(recompute));
  }
  // Epilogues into the GEMMs, on the finished per-rank programs (docs/kernels.md "Linear
  // epilogue"); no CSE after it, which would undo recompute's clones.
  pm.nest<mlir::func::FuncOp>().addPass(createFuseMatmulEpilogue());
}

} // namespace colossal

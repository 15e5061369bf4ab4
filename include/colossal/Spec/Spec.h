//===- Spec.h - the parallelization spec file -----------------------*- C++ -*-===//
#ifndef COLOSSAL_SPEC_SPEC_H
#define COLOSSAL_SPEC_SPEC_H

#include "llvm/Support/Error.h"
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colossal {

/// The `train:` section (docs/training.md "Spec"), defaults filled in. Present iff mode is train.
struct TrainSpec {
  // loss
  std::string lossKind = "cross_entropy"; // cross_entropy | output
  std::string logits;                     // cross_entropy: the logits output [..., C]
  std::string labels = "labels";          // the int64 labels input (created for cross_entropy)
  std::string output;                     // output: the model's scalar loss output
  int64_t ignoreIndex = -100;
  // optimizer (PyTorch's defaults)
  std::string optimizer = "adamw"; // sgd | adam | adamw
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weightDecay = 0.01; // adamw's default; adam and sgd: 0
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  // lr_schedule
  std::string schedule = "constant"; // constant | cosine
  int64_t warmupSteps = 0, totalSteps = 0;
  double minLr = 0;
  double gradClip = 0; // 0: off
  int64_t gradAccum = 1;
  std::vector<std::string> frozen, noDecay; // POSIX extended regexes (whole-name match)
  /// `train.inputs` (docs/training.md "Data for models that are not token models"): where each
  /// input of train_step comes from, sorted by name. Empty: a token model fed from `--data`.
  struct Input {
    std::string name;
    std::string kind; // npy | normal | uniform_int
    std::string path; // npy: absolute, or relative to the spec's folder as written
    double mean = 0, std = 1;  // normal
    int64_t low = 0, high = 0; // uniform_int: [low, high)
  };
  std::vector<Input> inputs;
};

/// The parsed spec (DESIGN.md "Spec file"). Only what the compiler implements is represented;
/// every other key the format defines is rejected by the parser as "not supported yet".
struct Spec {
  std::string mode = "inference";
  std::vector<std::pair<std::string, std::vector<int64_t>>> inputs; // global shapes
  std::vector<std::pair<std::string, std::string>> values;          // NAME -> .npy path
  std::string passes;                                               // replaces the pipeline
  std::optional<TrainSpec> train;                                   // set iff mode == "train"
  /// `generate:` (docs/serving.md "Spec"), defaults filled in; set iff mode == "generate".
  struct Generate {
    int64_t maxSeqLen = 512, blockSize = 16, maxBatchSeqs = 16, maxBatchTokens = 512;
    int64_t kvBlocks = 0; // 0: auto
    /// The positions the model is imported at (ImportOptions::tokenRows): max_seq_len rounded
    /// up to a multiple of the largest step (max_batch_tokens rounded up to a power of two),
    /// and at least twice that step.
    int64_t importTokens() const {
      int64_t top = 1;
      while (top < maxBatchTokens)
        top *= 2;
      return std::max(2 * top, (maxSeqLen + top - 1) / top * top);
    }
  };
  std::optional<Generate> generate;
  /// `precision.compute`: fp32 or bf16 (colossal-auto-mixed-precision; docs/training.md "Mixed
  /// precision").
  std::string precision = "fp32";
  /// `zero.bucket_mb`: the largest gradient bucket in MiB (plain data parallelism too; 0: one
  /// collective per gradient). colossal-opt's --bucket-cap-mb overrides it.
  double bucketMb = 25;
  /// `zero.stage` (docs/parallelism.md "ZeRO"): 0 off; 1 optimizer state, 2 + gradients, 3 +
  /// parameters partitioned over the data axes. Training only.
  int64_t zeroStage = 0;
  /// Dynamic loss scaling (`precision.loss_scale`, fp16; torch.cuda.amp.GradScaler's semantics and
  /// defaults; docs/training.md "Loss scaling"). Set exactly when the compute precision is fp16.
  struct LossScale {
    double initial = 65536, growthFactor = 2.0, backoffFactor = 0.5, min = 1.0;
    int64_t growthInterval = 2000;
  };
  std::optional<LossScale> lossScale;
  /// `memory:` (docs/training.md "Memory budget"). `budgetBytes`: budget_mb in bytes, per rank,
  /// for states + read-only weights + the largest arena. `recompute`: none | full | selective |
  /// auto (train only; auto needs a budget). `activationTarget` is not a spec key: colossal-opt
  /// sets it while fitting the budget (the colossal-recompute pass's `budget-bytes`).
  struct Memory {
    std::optional<uint64_t> budgetBytes;
    std::string recompute = "none";
    std::string offload = "none"; // none | optimizer | params | auto (train only; auto needs a budget)
    std::string offloadDir;       // absolute or relative to the spec's folder; "" = beside the plan
    uint64_t activationTarget = 0;
  } memory;
  /// `mesh:` axes and sizes as written (meshAxes() orders them). Only `dp` and `tp` may exceed 1.
  std::vector<std::pair<std::string, int64_t>> mesh;
  /// `parallel.tensor` (docs/parallelism.md "Tensor parallelism"): style 1d | 2d | 2.5d | 3d,
  /// Megatron sequence parallelism, the 2.5d depth, and per-parameter hints (regex -> per-dim
  /// axes, "tp,-").
  struct Tensor {
    std::string style = "1d";
    bool sequenceParallel = false;
    int64_t depth = 0;
    std::vector<std::pair<std::string, std::string>> hints;
  } tensor;

  /// `parallel.pipeline` (docs/parallelism.md "Pipeline parallelism"), set when mesh `pp` > 1:
  /// the schedule (gpipe | 1f1b), microbatches m per dp rank per step (they play grad_accum's
  /// role), chunks per rank, and the cut points (regexes matched against ONNX node names; a
  /// cut after the last op of the matching node) or none for the cost model's split.
  struct Pipeline {
    std::string schedule = "1f1b";
    int64_t microbatches = 1;
    int64_t virtualStages = 1;
    std::vector<std::string> cuts;
    /// `schedule_file`: a schedule written by hand (the --dump-schedule format) that replaces
    /// the generated one; absolute, or resolved against the spec's folder. Empty: generated.
    std::string scheduleFile;
  };
  std::optional<Pipeline> pipeline;

  /// One axis of the compiled mesh: its name, size and role (`colossal.mesh` roles: data,
  /// tensor, pipeline, grid_row, grid_col, grid_depth).
  struct MeshAxis {
    std::string name;
    int64_t size = 1;
    std::string role;
  };
  /// The mesh the plan runs on, in rank-layout order (Megatron's: `pp` slowest, then `dp`, then
  /// `tp` fastest, so tp groups are consecutive ranks and stay inside a node): the spec's axes,
  /// with a `tp` > 1 of a grid style replaced by its grid axes `tp_depth`, `tp_row`, `tp_col`
  /// (2d: q x q, 2.5d: d x q x q, 3d: q x q x q). The one place where axis names get roles.
  std::vector<MeshAxis> meshAxes() const;
  /// The tensor-parallel degree (mesh axis `tp`, 1 when absent).
  int64_t tensorParallel() const {
    for (auto &[axis, size] : mesh)
      if (axis == "tp")
        return size;
    return 1;
  }

  /// The pipeline-parallel degree P (mesh axis `pp`, 1 when absent).
  int64_t pipelineParallel() const {
    for (auto &[axis, size] : mesh)
      if (axis == "pp")
        return size;
    return 1;
  }

  /// The data-parallel degree D (mesh axis `dp`, 1 when absent). Train mode compiles @train_step
  /// and @eval at B/(D·grad_accum) rows: the autodiff's `grad-accum` is D·grad_accum, so the
  /// accumulators hold (1/(D·grad_accum))·Σ of the rank's microbatch gradients and the all_reduce
  /// over `dp` in optimizer_step makes them the global mean (docs/parallelism.md).
  int64_t dataParallel() const {
    for (auto &[axis, size] : mesh)
      if (axis == "dp")
        return size;
    return 1;
  }
};

/// Parses `path` with LLVM's YAML I/O. Unknown keys and bad values are errors that carry
/// `path:line:col`; known-but-unimplemented keys or values are "not supported yet" errors.
/// Relative `values` paths are resolved against the spec's folder.
llvm::Expected<Spec> parseSpecFile(llvm::StringRef path);

/// The pass pipeline a spec generates: colossal::buildColossalPipeline (colossal/Pipeline/Pipeline.h).

} // namespace colossal

#endif

//===- Trainer.h - The training loop of `colossal-run M.cplan train` ------------*- C++ -*-===//
//
// Runs a training plan (docs/training.md): programs `train_step` (loss and gradient accumulation of
// one microbatch), `optimizer_step` (global norm and one update per parameter) and `eval` share
// one arena of the largest program's size and one StateStore. One optimizer step s:
//   for each microbatch k of grad_accum A: rows [k·B/A, (k+1)·B/A) of step s of the data order
//     (TokenData) -> train_step (loss_k; gradients accumulated with scale 1/A)
//   optimizer_step(lr = schedule(s), step = s + 1) -> grad_norm (gradients zeroed by the updates)
//   reported loss = mean of the loss_k.
// Data parallelism (mesh dp = D, docs/parallelism.md): the plan's grad_accum counts the
// microbatches of all ranks (D·A of B/(D·A) rows); dp rank i runs microbatches i·A .. i·A+A−1,
// i.e. rows [i·B/D, (i+1)·B/D) (DESIGN.md); optimizer_step all-reduces the accumulators over `dp`
// itself, and the reported loss is the mean over every rank's microbatches (an all_reduce).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TRAINER_H
#define COLOSSAL_RUNTIME_TRAINER_H

#include "colossal/runtime/Executor.h"
#include "colossal/runtime/StateStore.h"
#include "colossal/runtime/TokenData.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>

namespace colossal::runtime {

class Communicator;

/// The learning rate of step `step` (from 0), docs/training.md "LR schedules": `constant`: lr;
/// `cosine`: lr·(s+1)/warmup during the warm-up, then min_lr + ½(lr − min_lr)(1 + cos(π·p)) with
/// p = min(1, (s − warmup) / max(1, total − warmup)). Computed in double.
double scheduledLearningRate(const plan::TrainConfig &train, int64_t step);

/// What one optimizer step reports.
struct StepResult {
  double loss = 0;      // mean of the microbatch losses
  double lr = 0;        // the scheduled rate passed to optimizer_step
  double gradNorm = 0;  // optimizer_step's grad_norm (before clipping)
  double seconds = 0;   // wall time of the step (data, train_step runs, optimizer_step)
  double commSeconds = -1;  // of `seconds`, wall time inside collectives on this rank
                            // (commSecondsTotal()); < 0 when the plan has no mesh
};

class Trainer {
public:
  /// Prepares a `mode: train` plan (validated by loadPlan, which checks the TrainConfig and the
  /// program bindings): the StateStore with initial values, one arena of maxArenaBytes() and
  /// executors for train_step, optimizer_step and eval. Errors: not a training plan; allocation.
  /// `comm`: the job's communicators; required when the plan's mesh has more than one rank
  /// (error otherwise), unused for one rank.
  static llvm::Expected<std::unique_ptr<Trainer>> create(const LoadedPlan &plan, const KernelRegistry &registry,
                                                         Device &device, CommContext *comm = nullptr);
  ~Trainer();

  StateStore &states() { return *states_; }
  const plan::TrainConfig &config() const { return plan_->plan.train(); }

  /// Optimizer step `step` on `data` (header comment). Errors: a kernel's data-dependent error
  /// (names the program and instruction).
  llvm::Expected<StepResult> step(const TokenData &data, int64_t step);

  /// The mean loss of `eval` over the batches of steps 0..evalSteps−1 of `data` (each B rows in
  /// A microbatches: the mean of all evalSteps·A microbatch losses). Changes no state.
  llvm::Expected<double> evaluate(const TokenData &data, int64_t evalSteps);

private:
  Trainer() = default;
  /// Fills the tokens/labels inputs of `ex` with `rows` rows of step `step` from `firstRow` and
  /// runs it; returns its `loss`.
  llvm::Expected<double> runLoss(Executor &ex, const TokenData &data, int64_t step, int64_t firstRow);
  const LoadedPlan *plan_ = nullptr;
  Device *device_ = nullptr;
  void *arena_ = nullptr;
  std::unique_ptr<StateStore> states_;
  std::unique_ptr<Executor> trainStep_, optimizerStep_, eval_;
  DType tokensDType_ = DType::I64;
  std::vector<char> tokens_;
  std::vector<int64_t> labels_;
  /// Data parallelism: the `dp` group (null for one rank), its size and this rank's index in it.
  Communicator *dp_ = nullptr;
  int64_t dpSize_ = 1, dpRank_ = 0;
  /// Sum over the dp group of `local` (itself for one rank).
  llvm::Expected<double> sumOverRanks(double local);
};

/// `colossal-run M.cplan train` (docs/training.md "Runtime").
struct TrainOptions {
  std::string dataPath;          // --data
  DType tokenDType = DType::U8;  // --token-dtype
  int64_t steps = 0;             // --steps: total optimizer steps (a resumed run continues to it)
  std::string metricsPath;       // --metrics: JSON lines, one per step
  std::string saveDir;           // --save: checkpoints every saveEvery steps and after the last
  int64_t saveEvery = 0;         // --save-every (0: only after the last step)
  std::string resumeDir;         // --resume
  std::string evalDataPath;      // --eval-data
  int64_t evalEvery = 0;         // --eval-every
  int64_t evalSteps = 1;         // --eval-steps
  uint64_t seed = 0;             // --seed (recorded in checkpoints)
  bool progressBar = false;      // draw a progress bar on `log` (a terminal)
  CommContext *comm = nullptr;   // several ranks: only rank 0 writes metrics and checkpoints
};

/// The whole `train` subcommand: opens the data (and eval data) against the plan's vocabulary and
/// sequence length, creates the Trainer, resumes from a checkpoint when asked (continuing at its
/// step; its metrics lines of later steps are dropped), runs steps until `steps`, appending one
/// metrics line per step (flushed; a fresh run truncates the file), evaluates after steps with
/// (s + 1) % evalEvery == 0 and saves checkpoints. Warnings (a checkpoint from another spec) and
/// the progress bar go to `log`. Every error names its file, tensor or program.
llvm::Error runTraining(const LoadedPlan &plan, const KernelRegistry &registry, Device &device,
                        const TrainOptions &options, llvm::raw_ostream &log);

/// One metrics line (DESIGN.md): {"step", "loss", "lr", "grad_norm", "tokens_per_s"[, "eval_loss"]}
/// without the newline; a non-finite number is written as null (JSON has no NaN).
std::string metricsLine(int64_t step, const StepResult &result, double tokensPerS, const double *evalLoss);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_TRAINER_H

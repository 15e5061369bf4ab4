//===- Trainer.h - The training loop of `colossal-run M.cplan train` ------------*- C++ -*-===//
//
// Runs a training plan (docs/training.md): programs `train_step` (loss and gradient accumulation of
// one microbatch), `optimizer_step` (global norm and one update per parameter) and `eval` share
// one arena of the largest program's size and one StateStore. One optimizer step s:
//   for each microbatch k of grad_accum A: rows [k·B/A, (k+1)·B/A) of step s of the data order
//     (TokenData, or the global batch TrainInputs prepares from the spec's train.inputs) ->
//     train_step (loss_k; gradients accumulated with scale 1/A)
//   optimizer_step(lr = schedule(s), step = s + 1) -> grad_norm (gradients zeroed by the updates)
//   reported loss = mean of the loss_k.
// Data parallelism (mesh dp = D, docs/parallelism.md): the plan's grad_accum counts the
// microbatches of all ranks (D·A of B/(D·A) rows); dp rank i runs microbatches i·A .. i·A+A−1,
// i.e. rows [i·B/D, (i+1)·B/D) (DESIGN.md); optimizer_step all-reduces the accumulators over `dp`
// itself, and the reported loss is the mean over every rank's microbatches (an all_reduce).
//
// Non-finite steps (docs/training.md "Non-finite values"): a loss or grad_norm that is NaN or
// infinite on any rank (the ranks agree by an all-reduce over the world) leaves the parameters,
// the optimizer state and its step count as they were: a non-finite loss skips optimizer_step, a
// non-finite grad_norm makes its updates skip themselves (runtime/kernels/cpu/optim.cpp); then the
// gradients are zeroed. runTraining stops there (--on-nonfinite stop) or goes on (skip).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TRAINER_H
#define COLOSSAL_RUNTIME_TRAINER_H

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/NonFinite.h"
#include "colossal/runtime/StateStore.h"
#include "colossal/runtime/TokenData.h"
#include "colossal/runtime/TrainInputs.h"

#include "llvm/ADT/STLFunctionalExtras.h"
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

/// What made a step non-finite (its update not applied).
enum class NonFiniteCause : uint8_t {
  None,
  Loss,      // the loss (optimizer_step did not run)
  GradNorm,  // the global gradient norm (optimizer_step's updates skipped themselves). Under
             // fp16 (a later issue) this cause goes to the loss scaler (back off), not to the
             // --on-nonfinite policy.
};

/// What one optimizer step reports.
struct StepResult {
  double loss = 0;      // mean of the microbatch losses
  double lr = 0;        // the scheduled rate passed to optimizer_step
  double gradNorm = 0;  // optimizer_step's grad_norm (before clipping); NaN when it did not run
  double seconds = 0;   // wall time of the step (data, train_step runs, optimizer_step)
  /// Elements through collectives this step on this rank, by kind (commElementsTotal()); with
  /// commSeconds >= 0 only.
  CommElements commElements;
  /// This rank's persistent tensors kept between steps, by role, counted by the state store
  /// (the parameters, gradient accumulators and optimizer state each rank holds: with ZeRO its
  /// chunks).
  struct StateBytes {
    int64_t params = 0, grads = 0, optimizer = 0;
  } stateBytes;
  /// Memory measured on this rank (docs/training.md "Memory budget"): the arena's planned size,
  /// its high-water mark (the end of the highest 64-byte line any program ever wrote, found by a
  /// canary pattern written at start; -1 off the CPU) and the process's peak resident set
  /// (getrusage ru_maxrss), bytes.
  /// With offload also the tier's size, the bytes its schedule prefetched this step and the
  /// step's major page faults (reads the step had to wait for: the prefetch came too late or the
  /// kernel had dropped the pages; -1 when unknown).
  struct Memory {
    int64_t arenaBytes = 0, arenaHighWater = -1, peakRss = -1;
    int64_t offloadedBytes = -1, tierPrefetchedBytes = 0, majorFaults = -1;
    /// Offload: this step's seconds of prefetching (the I/O thread) and of evicting (the
    /// step's own thread).
    double tierPrefetchSeconds = 0, tierEvictSeconds = 0;
    /// The process's resident set when the trainer started, before states and arena: the
    /// executable, its libraries, the loaded plan (what no budget counts), bytes.
    int64_t baselineRss = -1;
    /// Pipeline parallelism: per pipeline rank (its stages together), the most bytes of saved
    /// activations (forward values a microbatch's backward reads, kept from its forward or
    /// received for it) held at once this step, counted by the runner. Empty without a pipeline.
    std::vector<int64_t> pipelineSavedPeak;
  } memory;
  double commSeconds = -1;  // of `seconds`, wall time inside collectives on this rank
                            // (commSecondsTotal()); < 0 when the plan has no mesh
  /// Non-finite step: the update was not applied (parameters, optimizer state and the optimizer's
  /// step count unchanged; gradients zeroed). Every rank reports the same.
  NonFiniteCause nonFinite = NonFiniteCause::None;
  bool skipped() const { return nonFinite != NonFiniteCause::None; }
  /// When skipped: the non-finite value, "nan", "inf" or "-inf", with " on rank R" when the lowest
  /// rank where it is not finite is not rank 0 (whose values the metrics line reports).
  std::string nonFiniteValue;
  /// When skipped: the first non-finite state before the gradients were zeroed (parameters, then
  /// optimizer state, then gradients; describeNonFinite), "" when every state is finite.
  std::string firstNonFinite;
  /// When skipped: a PARAM or OPTIMIZER state is not finite, so skipping cannot recover.
  bool stateNonFinite = false;
  int64_t skippedTotal = 0;  // skipped steps of the run so far (this one included)
  /// Dynamic loss scaling: the scale this step's backward pass used (0: not scaling), and whether
  /// a non-finite gradient on some rank made every rank skip the update (GradScaler's found_inf;
  /// not a NonFiniteCause: the run goes on with the scale backed off).
  double lossScale = 0;
  bool overflow = false;
  /// The back-off took the scale below precision.loss_scale.min: runTraining writes this step's
  /// metrics line, then stops with an error naming the step.
  bool lossScaleUnderflow = false;
};

class PipelineRunner;
class PipelineTrace;

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
  /// train_step's input bindings (their dtypes and [B / grad_accum, ...] shapes).
  llvm::ArrayRef<BindingInfo> trainStepInputs() const { return trainStep_->inputs(); }
  /// Pipeline parallelism: makes every rank's store hold the current value of every state (each
  /// stage updates only its own); before eval, checkpoints and anything else that reads all of
  /// them. A no-op without a pipeline.
  llvm::Error syncStates();
  const plan::TrainConfig &config() const { return plan_->plan.train(); }

  /// Optimizer step `step` on `data` (header comment): `optimizer_step` gets `step` = the updates
  /// applied so far + 1 (skipped steps do not count). A non-finite step is not an error here: the
  /// result says so (StepResult::nonFinite). Errors: a kernel's data-dependent error (names the
  /// program and instruction); the collectives'.
  llvm::Expected<StepResult> step(const TokenData &data, int64_t step);
  /// The same for a plan fed by train.inputs (TrainConfig.data_inputs): prepares step `step`'s
  /// global batch of `inputs` and feeds each microbatch its rows.
  llvm::Expected<StepResult> step(TrainInputs &inputs, int64_t step);

  /// Sets the counters a resumed run continues from: `updates` applied, `skipped` skipped.
  void setCounts(int64_t updates, int64_t skipped) {
    updates_ = updates;
    skipped_ = skipped;
  }
  /// Dynamic loss scaling's state (the next step's scale, clean steps towards its growth); the
  /// scale is 0 when the plan does not scale. setLossScale() for a resumed run.
  double lossScale() const { return lossScale_; }
  int64_t lossScaleGrowthTracker() const { return growthTracker_; }
  void setLossScale(double scale, int64_t tracker) {
    lossScale_ = scale;
    growthTracker_ = tracker;
  }
  int64_t skippedTotal() const { return skipped_; }
  /// --trace: from the next step on, records this rank's actions (a pipeline plan's), or each
  /// microbatch's train_step, and each optimizer step into `trace` (null: stops).
  void setTrace(PipelineTrace *trace);

  /// The mean loss of `eval` over the batches of steps 0..evalSteps−1 of `data` (each B rows in
  /// A microbatches: the mean of all evalSteps·A microbatch losses). Changes no state.
  llvm::Expected<double> evaluate(const TokenData &data, int64_t evalSteps);

private:
  Trainer() = default;
  /// Sets `rows` rows of the step's global batch from `firstRow` as the program's inputs.
  using Feed = llvm::function_ref<llvm::Error(Executor &ex, int64_t firstRow, int64_t rows)>;
  /// Fills the tokens/labels inputs of `ex` with `rows` rows of step `step` from `firstRow`.
  llvm::Error feedTokens(Executor &ex, const TokenData &data, int64_t step, int64_t firstRow, int64_t rows);
  /// Feeds `ex` the B / grad_accum rows from `firstRow` and runs it; returns its `loss`.
  llvm::Expected<double> runLoss(Executor &ex, Feed feed, int64_t firstRow);
  /// One optimizer step (step()) whose microbatches `feed` fills; a pipeline reads `tokens`
  /// itself (null for train.inputs: not supported with a pipeline yet).
  llvm::Expected<StepResult> runStep(Feed feed, int64_t step, const TokenData *tokens);
  const LoadedPlan *plan_ = nullptr;
  Device *device_ = nullptr;
  void *arena_ = nullptr;
  uint64_t arenaBytes_ = 0;
  uint64_t tierPrefetched_ = 0; // Tier::prefetchedBytes() at the end of the last step
  double tierPrefetchSeconds_ = 0, tierEvictSeconds_ = 0; // likewise
  int64_t baselineRss_ = -1;
  int64_t majorFaults_ = 0;     // ru_majflt at the end of the last step
  /// StepResult::memory.arenaHighWater: scans down from the arena's end for the first line that
  /// no longer holds the canary.
  int64_t arenaHighWater() const;
  std::unique_ptr<StateStore> states_;
  std::unique_ptr<Executor> trainStep_, optimizerStep_, eval_;
  /// Pipeline parallelism (Plan.pipeline): this rank's stage programs and schedule.
  std::unique_ptr<PipelineRunner> pipeline_;
  PipelineTrace *trace_ = nullptr;
  DType tokensDType_ = DType::I64;
  std::vector<char> tokens_;
  std::vector<int64_t> labels_;
  /// Data parallelism: the `dp` group (null for one rank), its size and this rank's index in it.
  Communicator *dp_ = nullptr;
  int64_t dpSize_ = 1, dpRank_ = 0;
  /// The job's communicators (null for one rank): the non-finite agreement spans the world.
  CommContext *comm_ = nullptr;
  /// Updates applied and steps skipped so far (the optimizer's step count is updates_ + 1).
  int64_t updates_ = 0, skipped_ = 0;
  /// Test hook (COLOSSAL_TEST_NONFINITE="loss|grad|grad-inf:STEP[,STEP...][:RANK]"): makes this
  /// rank's loss, or its first gradient accumulator's element 0, NaN (grad-inf: +inf) at the steps
  /// `hookSteps_` (all ranks when hookRank_ < 0).
  std::string hookKind_;
  std::vector<int64_t> hookSteps_;
  int64_t hookRank_ = -1;
  /// The store's bytes by role (StepResult::stateBytes), counted once: the store never resizes.
  StepResult::StateBytes stateBytes_;
  /// Dynamic loss scaling (TrainConfig.loss_scale_*): the scale and the clean-step count.
  double lossScale_ = 0;
  int64_t growthTracker_ = 0;
  /// Multiplies every gradient accumulator by `factor` in place; true when some element is not
  /// finite (torch's _amp_foreach_non_finite_check_and_unscale_).
  bool unscaleGradients(double factor);
  /// Pipeline parallelism: every stage's peak of saved activation bytes into `r.memory`.
  llvm::Error gatherPipelineMemory(StepResult &r);
  /// Sum over the dp group of `local` (itself for one rank).
  llvm::Expected<double> sumOverRanks(double local);
  /// The test hook, when it is due at `step` on this rank: `lossSum` or a gradient made NaN.
  void applyTestHook(int64_t step, double &lossSum);
  /// A non-finite step (`value` of the loss or norm): names the first non-finite state, zeroes the
  /// gradients, counts the skip.
  llvm::Error skipStep(StepResult &r, NonFiniteCause cause, const NonFiniteValue &value);
};

/// `--on-nonfinite`: what a non-finite step does to the run.
enum class NonFinitePolicy : uint8_t {
  Stop,  // an error naming the step (the default)
  Skip,  // go on with the next step (the skipped one is counted in the metrics)
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
  uint64_t seed = 0;             // --seed (recorded in checkpoints; seeds train.inputs' RNG and --shuffle)
  bool shuffle = false;          // --shuffle: train.inputs' npy rows in a per-epoch permutation
  std::string dumpInputsDir;     // --dump-inputs: each step's train.inputs batch as .npy
  bool progressBar = false;      // draw a progress bar on `log` (a terminal)
  NonFinitePolicy onNonFinite = NonFinitePolicy::Stop;  // --on-nonfinite
  bool allowNonFiniteCheckpoint = false;                // --allow-nonfinite-checkpoint (--resume)
  CommContext *comm = nullptr;   // several ranks: only rank 0 writes metrics and checkpoints
  std::string tracePath;         // --trace: the run's Chrome trace, all ranks, written by rank 0
};

/// The whole `train` subcommand: opens the data (and eval data) against the plan's vocabulary and
/// sequence length, creates the Trainer, resumes from a checkpoint when asked (continuing at its
/// step; its metrics lines of later steps are dropped), runs steps until `steps`, appending one
/// metrics line per step (flushed; a fresh run truncates the file), evaluates after steps with
/// (s + 1) % evalEvery == 0 and saves checkpoints. Warnings (a checkpoint from another spec) and
/// the progress bar go to `log`. Every error names its file, tensor or program.
/// A non-finite step (StepResult::nonFinite) still writes its metrics line; then, under
/// NonFinitePolicy::Stop, or when a parameter or optimizer state is itself not finite (skipping
/// cannot recover), the run ends with a NonFiniteError naming the step, what was not finite, the
/// first non-finite state and the newest checkpoint; under Skip a warning goes to `log`. A save
/// never writes non-finite values (saveCheckpoint refuses them: a NonFiniteError naming the step).
llvm::Error runTraining(const LoadedPlan &plan, const KernelRegistry &registry, Device &device,
                        const TrainOptions &options, llvm::raw_ostream &log);

/// One metrics line (DESIGN.md): {"step", "loss", "lr", "grad_norm", "tokens_per_s"[, "eval_loss"],
/// "skipped" (bool), "skipped_total"[, "comm_s", "comm_elements": {"all_reduce", "reduce_scatter",
/// "all_gather"}], "state_bytes": {"params", "grads", "optimizer"}} without the newline; a
/// non-finite number is written as null (JSON has no NaN).
std::string metricsLine(int64_t step, const StepResult &result, double tokensPerS, const double *evalLoss);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_TRAINER_H

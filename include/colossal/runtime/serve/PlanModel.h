//===- PlanModel.h - a generate plan as the scheduler's model ---------------------*- C++ -*-===//
//
// The engine side of serving (docs/serving.md "Engine"): a plan compiled with `mode: generate`
// (colossal-generate) runs one step of the scheduler's ragged batch. It holds the KV cache (the
// plan's KV_CACHE states, zeroed at creation), one executor per generate program (the programs
// differ only in their token count N: 1, 2, 4, ... ≥ max_batch_tokens) sharing one arena, and
// the host staging of the step's inputs. A step of T tokens runs the smallest program with
// N ≥ T: rows [T, N) are padding (token 0 at position 0, slot −1, outside every sequence), and
// the sequence slots past the batch's are empty (no rows, context 0, no blocks), so a row's
// result is the same whichever program runs it (the kernels are row-wise and batch-invariant).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_PLANMODEL_H
#define COLOSSAL_RUNTIME_SERVE_PLANMODEL_H

#include "colossal/runtime/Executor.h"
#include "colossal/runtime/serve/Scheduler.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace colossal::runtime {
class StateStore;
class CommContext;
class Communicator;
}  // namespace colossal::runtime

namespace colossal::runtime::serve {

class PlanModel : public StepModel {
public:
  /// Prepares `plan` (mode generate; it must outlive the model) on `device`. `comm`: the job's
  /// communicators for a plan with collectives (null on one rank). Errors: not a generate plan,
  /// the executors' and the state store's errors.
  static llvm::Expected<std::unique_ptr<PlanModel>> create(const LoadedPlan &plan, const KernelRegistry &registry,
                                                           Device &device, CommContext *comm = nullptr);
  ~PlanModel() override;

  /// The scheduler configuration the plan was compiled for (GenerateConfig).
  const SchedulerConfig &config() const override { return config_; }
  const plan::GenerateConfig &generate() const { return plan_->plan.generate(); }

  /// Runs `batch` (Scheduler.h ModelStep) and writes logits [batch.logitsIndices.size(), vocab].
  /// Errors (naming the numbers): more tokens than the largest program, more sequences than
  /// max_batch_seqs, a block table of another width, a logits buffer of the wrong size, a token
  /// id outside the vocabulary; the kernels' (a slot or block outside the cache).
  llvm::Error step(const StepBatch &batch, llvm::MutableArrayRef<float> logits) override;

  /// Zeroes the KV cache (a fresh engine's state).
  void resetCache();
  /// The token counts of the plan's programs, ascending.
  std::vector<int64_t> programTokens() const;

private:
  PlanModel() = default;
  struct Program {
    int64_t tokens = 0;
    std::unique_ptr<Executor> exec;
  };
  const LoadedPlan *plan_ = nullptr;
  Device *device_ = nullptr;
  SchedulerConfig config_;
  std::unique_ptr<StateStore> states_;
  void *arena_ = nullptr;
  std::vector<Program> programs_;
  DType tokenDtype_ = DType::I32;
  // Host staging, sized for the largest program.
  std::vector<int64_t> tokens64_;
  std::vector<int32_t> tokens32_, positions_, slots_, tables_, contextLens_, queryStart_;
};

/// Tensor parallelism (docs/serving.md "Tensor parallelism"): every rank of a `mesh: {tp: P}`
/// generate plan runs every step on its share of the heads (and of the KV cache), and the logits
/// come out whole on each. Rank 0 schedules and samples: this model sends each step's batch to
/// the other ranks (broadcasts over `world`) and then runs it on `local`; the other ranks run
/// followSteps(). Destroying it (or finish()) tells them that no step follows.
class LeaderStepModel : public StepModel {
public:
  LeaderStepModel(StepModel &local, Communicator &world) : local_(local), world_(world) {}
  ~LeaderStepModel() override;
  const SchedulerConfig &config() const override { return local_.config(); }
  /// Sends `batch` to ranks 1..P−1, then runs it on this rank. Errors: the broadcasts', the
  /// local step's (the followers hit the same one: their inputs are the same).
  llvm::Error step(const StepBatch &batch, llvm::MutableArrayRef<float> logits) override;
  /// Tells the followers to return; later calls do nothing.
  llvm::Error finish();

private:
  StepModel &local_;
  Communicator &world_;
  bool finished_ = false;
  std::vector<int32_t> body_;
};

/// Ranks 1..P−1 of a tensor-parallel generate plan: runs the batches rank 0's LeaderStepModel
/// sends, on `local` (logits discarded), until its finish(). While it waits for the next step
/// it sets no deadline (a server idles between requests); a step's collectives keep the job's
/// (`comm`'s timeout). A step error is rank 0's too and is not fatal here. Errors: the
/// broadcasts'.
llvm::Error followSteps(StepModel &local, CommContext &comm);

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_PLANMODEL_H

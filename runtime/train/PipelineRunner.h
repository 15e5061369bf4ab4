//===- PipelineRunner.h - runs one rank's share of a pipeline schedule ---------*- C++ -*-===//
//
// docs/parallelism.md "Pipeline parallelism". Each rank of the pipeline axis runs its stage's
// programs (Plan.pipeline; STAGE_FORWARD / STAGE_BACKWARD / STAGE_OPTIMIZER) in the order of its
// action list. Values named `pp.<k>` move between programs: to another stage by a message
// (non-blocking send, blocking receive; messages between two ranks are matched by microbatch
// and direction and arrive in the order sent), or within the stage by a copy kept from the
// forward until the backward of the same microbatch (the saved activations, counted for the
// metrics). The loss is the last stage's; every rank learns it.
//===------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TRAIN_PIPELINERUNNER_H
#define COLOSSAL_RUNTIME_TRAIN_PIPELINERUNNER_H

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/StateStore.h"
#include "colossal/runtime/TokenData.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colossal::runtime {

class PipelineRunner {
public:
  /// Prepares this rank's stage (its coordinate on the plan's pipeline axis): the executors of
  /// its three programs (with `options`' states, arena and communicators) and the message lists.
  static llvm::Expected<std::unique_ptr<PipelineRunner>>
  create(const LoadedPlan &plan, const KernelRegistry &registry, Device &device, CommContext &comm,
         const ExecutorOptions &options, int64_t dpRank, int64_t dpSize);

  /// Runs this rank's actions for optimizer step `step` on `data` and returns the sum of the
  /// microbatch losses over the pipeline (every rank of it gets the same). Under data
  /// parallelism (D ranks, this one d) microbatch k takes the R = B/(m·D) rows from
  /// d·B/D + k·R of the step's batch, as one rank with grad_accum m·D takes microbatch d·m + k.
  /// Errors name the stage, the action and the program.
  llvm::Expected<double> runMicrobatches(const TokenData &data, int64_t step, DType tokensDType);

  /// Runs the stage's optimizer program with `lr` and `stepNumber`; returns grad_norm (the
  /// norm over all stages).
  llvm::Expected<double> runOptimizer(float lr, int64_t stepNumber);

  /// Broadcasts every state from the stage that updates it, so that each rank's store holds the
  /// current values of all of them (for eval, checkpoints and --dump-states).
  llvm::Error syncStates(StateStore &states);

  /// One action as it ran on this rank (for --trace): its index in the rank's list, kind,
  /// microbatch and stage, and wall times in seconds since the runner was created; for sends
  /// and receives the bytes moved. `savedBytes` is the live saved-activation count after it.
  struct Event {
    uint32_t index;
    plan::Pipeline::Action::Kind kind;
    uint32_t microbatch, stage;
    double start, end;
    int64_t bytes = 0;
    int64_t savedBytes = 0;
  };
  /// The events of the last runMicrobatches() (recorded only after recordEvents(true)).
  const std::vector<Event> &events() const { return events_; }
  void recordEvents(bool on) { record_ = on; }
  /// The clock the events' times count from (the runner's creation).
  std::chrono::steady_clock::time_point epoch() const { return epoch_; }
  /// The stages this rank's sends of one direction reach (the next stage; a tied parameter's
  /// gradient also its owner), ascending.
  std::vector<uint32_t> sendPeers(bool forward) const {
    std::vector<uint32_t> out;
    for (const Message &m : send_[forward ? 0 : 1])
      if (std::find(out.begin(), out.end(), m.peer) == out.end()) out.push_back(m.peer);
    std::sort(out.begin(), out.end());
    return out;
  }

  uint32_t stage() const { return stage_; }
  /// The pipeline axis's communicator (group rank = stage).
  Communicator &group() { return *pp_; }
  /// The most bytes of saved activations (values the backward of a microbatch reads, kept
  /// from its forward or received for it) held at once during the last step.
  int64_t peakSavedBytes() const { return peakSaved_; }

private:
  PipelineRunner() = default;
  /// A value this stage receives or sends: its name, peer stage, element count and dtype.
  struct Message {
    std::string name;
    uint32_t peer;
    int64_t count;
    DType dtype;
  };
  /// A value kept for a microbatch: its bytes and whether the backward still needs it.
  struct Kept {
    std::vector<char> bytes;
    bool forBackward = false;
    bool counted = false;  // a saved activation (forward value) in saved_
  };
  llvm::Error runProgram(Executor &ex, bool forward, uint32_t mb, const TokenData &data, int64_t step,
                         DType tokensDType, double &lossSum);
  llvm::Error receive(bool forward, uint32_t mb);
  llvm::Error send(bool forward, uint32_t mb);

  const LoadedPlan *plan_ = nullptr;
  Device *device_ = nullptr;
  Communicator *pp_ = nullptr;
  uint32_t stage_ = 0, stages_ = 0, microbatches_ = 0;
  int64_t dpRank_ = 0, dpSize_ = 1;
  std::unique_ptr<Executor> forward_, backward_, optimizer_;
  /// Per direction (0 forward, 1 backward): what this stage receives before, and sends after,
  /// its compute action, in message order.
  std::vector<Message> recv_[2], send_[2];
  /// Names the backward reads (kept from the forward or received for it).
  std::map<std::string, bool> backwardReads_;
  /// (name, microbatch) -> kept value; outgoing copies until the step's sends complete.
  std::map<std::pair<std::string, uint32_t>, Kept> kept_;
  std::map<std::pair<std::string, uint32_t>, std::vector<char>> outbox_;
  std::vector<std::vector<char>> inFlightSends_;
  int64_t saved_ = 0, peakSaved_ = 0;
  bool record_ = false;
  std::vector<Event> events_;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  std::vector<char> tokens_;
  std::vector<int64_t> labels_;
  /// State name -> the stage that updates it (else the first that reads it); the parameters
  /// read on several stages (tied), sent from their owner after each update.
  std::map<std::string, uint32_t> owner_;
  std::vector<std::string> tied_;
  const StateStore *states_ = nullptr;
};

} // namespace colossal::runtime

#endif

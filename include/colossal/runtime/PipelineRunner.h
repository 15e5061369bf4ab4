//===- PipelineRunner.h - runs one rank's share of a pipeline schedule ---------*- C++ -*-===//
//
// docs/parallelism.md "Pipeline parallelism". Each rank of the pipeline axis runs its stage's
// programs (Plan.pipeline; STAGE_FORWARD / STAGE_BACKWARD / STAGE_BACKWARD_WEIGHT, the zero-bubble
// schedules' W / STAGE_OPTIMIZER) in the order of its
// action list. Values named `pp.<k>` move between programs: to another stage by a message
// (non-blocking send, blocking receive; messages between two ranks are matched by microbatch
// and direction and arrive in the order sent), or within the stage by a copy kept from the
// forward until the backward of the same microbatch (the saved activations, counted for the
// metrics). The loss is the last stage's; every rank learns it.
//===------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_PIPELINERUNNER_H
#define COLOSSAL_RUNTIME_PIPELINERUNNER_H

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/StateStore.h"
#include "colossal/runtime/TokenData.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
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

  /// Inference (a forward-only pipeline): sets each model input of a stage program for
  /// microbatch `mb` (returns false for a name it does not know), and receives each model output
  /// a stage program computed for `mb` (on the rank that runs that stage).
  using Feed = std::function<llvm::Expected<bool>(Executor &ex, const BindingInfo &input, uint32_t mb)>;
  using Collect = std::function<llvm::Error(const BindingInfo &output, uint32_t mb)>;
  /// Runs this rank's actions of a forward-only pipeline with `feed` and `collect`.
  llvm::Error runForward(const Feed &feed, const Collect &collect);

  /// Runs the stage's optimizer program with `lr` and `stepNumber`; returns grad_norm (the
  /// norm over all stages).
  llvm::Expected<double> runOptimizer(float lr, int64_t stepNumber);

  /// Broadcasts every state from the stage that updates it, so that each rank's store holds the
  /// current values of all of them (for eval, checkpoints and --dump-states).
  llvm::Error syncStates(StateStore &states);

  /// One action as it ran on this rank (for --trace): its index in the rank's list, kind,
  /// microbatch and stage, and wall times in seconds since the runner was created; for sends
  /// and receives the bytes moved (for a compute action, what it sent without a send action of its
  /// own: zbv's turn). `savedBytes` is the live saved-activation count after it.
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
  /// The stages whose receives take the sends of `stage` (one of this rank's) in one direction
  /// (the next stage; a tied parameter's gradient also its owner's), ascending.
  std::vector<uint32_t> sendPeers(uint32_t stage, bool forward) const {
    std::vector<uint32_t> out;
    auto it = local_.find(stage);
    if (it != local_.end())
      for (const Message &m : it->second.send[forward ? 0 : 1]) out.push_back(m.tagStage);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  /// This rank's coordinate on the pipeline axis; it runs stages rank, rank + P, ... (P ranks;
  /// zbv: rank and 2P − 1 − rank).
  uint32_t rank() const { return rank_; }
  /// The pipeline axis's communicator (group rank = pipeline coordinate).
  Communicator &group() { return *pp_; }
  /// The most bytes of saved activations (forward values a backward of this rank reads, kept
  /// from its forward or received for it) held at once during the last step.
  int64_t peakSavedBytes() const { return peakSaved_; }

private:
  PipelineRunner() = default;
  /// A value received or sent: its name, the peer rank, element count and dtype, and the stage
  /// whose receive action takes it (with the microbatch and direction, the message's tag).
  struct Message {
    std::string name;
    uint32_t peer;
    int64_t count;
    DType dtype;
    uint32_t tagStage;
  };
  /// A stage program's phase: forward, backward (B with a split backward), W.
  enum Phase { kForward = 0, kBackward = 1, kWeight = 2 };
  /// One of this rank's stages: its programs by phase (W only with a split backward) and the
  /// messages around its actions, per direction (0 forward, 1 backward), in message order.
  struct Stage {
    std::unique_ptr<Executor> programs[3];
    std::vector<Message> recv[2], send[2];
  };
  /// A value kept for a microbatch until the last of this rank's programs that read it ran.
  struct Kept {
    std::vector<char> bytes;
    int readers = 0;
    bool counted = false;  // a saved activation (a forward value a backward reads), in saved_
  };
  /// The bytes a list of messages moves.
  static int64_t bytesOf(const std::vector<Message> &list) {
    int64_t n = 0;
    for (const Message &m : list) n += m.count * static_cast<int64_t>(dtypeSize(m.dtype));
    return n;
  }
  int tagOf(uint32_t mb, uint32_t stage, bool forward) const {
    return static_cast<int>((mb * stages_ + stage) * 2 + (forward ? 0 : 1));
  }
  void keep(const std::string &name, uint32_t mb, std::vector<char> bytes);
  llvm::Error runProgram(uint32_t stage, Phase phase, uint32_t mb, const Feed &feed, const Collect *collect,
                         double &lossSum);
  /// Runs this rank's action list; `collect` (inference) receives the model outputs.
  llvm::Error runActions(const Feed &feed, const Collect *collect, double &lossSum);
  llvm::Error receive(uint32_t stage, bool forward, uint32_t mb);
  llvm::Error send(uint32_t stage, bool forward, uint32_t mb);

  const LoadedPlan *plan_ = nullptr;
  Device *device_ = nullptr;
  Communicator *pp_ = nullptr;
  uint32_t rank_ = 0, ranks_ = 1, stages_ = 0, microbatches_ = 0;
  int64_t dpRank_ = 0, dpSize_ = 1;
  std::map<uint32_t, Stage> local_;
  std::unique_ptr<Executor> optimizer_;
  /// Per transferred name: how many of this rank's programs read it, and whether it is a
  /// saved activation here (produced by a forward, read by one of this rank's backwards).
  std::map<std::string, int> localReaders_;
  std::map<std::string, bool> savedHere_;
  /// (send/recv action kind, stage) this rank's schedule lists; the other messages of a stage
  /// move at its compute actions.
  std::set<std::pair<int, uint32_t>> explicit_;
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
  /// State name -> the pipeline rank that updates it (else the first that reads it); the
  /// parameters read on several ranks (tied), sent from their owner after each update.
  std::map<std::string, uint32_t> owner_;
  std::vector<std::string> tied_;
  const StateStore *states_ = nullptr;
};

} // namespace colossal::runtime

#endif

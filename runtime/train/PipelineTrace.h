//===- PipelineTrace.h - `colossal-run ... train --trace FILE.json`: the job's timeline --*- C++ -*-===//
//
// docs/parallelism.md "Traces". Every rank keeps the timed pieces of its steps in memory (for a
// pipeline plan the runner's actions, PipelineRunner::events(); otherwise each microbatch's
// train_step; and each optimizer step) on its own steady clock. When the run ends, every rank sends
// them to rank 0 over the world communicator (point to point, once), and rank 0 writes one Chrome
// trace event file (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)
// that Perfetto and chrome://tracing load:
//   - one process per rank (pid = world rank, named "rank R (stage s)" or, when a rank runs several
//     stages, "rank R (stages s, s + P)"), one thread (tid 0);
//   - a complete event (ph "X") per action, train_step or optimizer_step, with args step, stage,
//     microbatch and chunk (null for optimizer_step) and bytes for sends and receives;
//   - flow events from each send to its receive (ph "s" where the send starts, ph "f" with bp "e"
//     inside the receive, after the send began; one id per pair): sendF of microbatch k on stage s
//     to recvF of k on each stage its values reach (s + 1), sendB to recvB likewise (s − 1; a tied
//     parameter's gradient also reaches its owner), within one pipeline group (the ranks that
//     share every other mesh coordinate);
//   - a counter (ph "C", "saved activation bytes") per pipeline rank: the live saved-activation
//     bytes after each action that changed them.
// Clocks: ranks on rank 0's machine share its steady clock (CLOCK_MONOTONIC is system-wide) and
// need no alignment. For a rank on another machine start() measures its offset against rank 0's
// clock by Cristian's method (16 round trips, the one with the shortest round trip kept; the
// error is at most half of it), and rank 0 moves that rank's times onto its own clock. ts 0 is
// the moment tracing started on rank 0 (after a barrier). Times are microseconds with three
// decimals; "otherData" records the offsets and round trips.
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TRAIN_PIPELINETRACE_H
#define COLOSSAL_RUNTIME_TRAIN_PIPELINETRACE_H

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Plan.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colossal::runtime {

class PipelineRunner;

/// One timed piece of one rank's run.
struct TraceEvent {
  enum class Kind : uint8_t {
    Forward,       // a pipeline action: STAGE_FORWARD of `stage` on `microbatch`
    Backward,      // STAGE_BACKWARD (with a split backward: B, the input gradients)
    Weight,        // STAGE_BACKWARD_WEIGHT (W, the weight gradients)
    SendForward,   // sendF: the forward's values to the next stage
    RecvForward,   // recvF
    SendBackward,  // sendB: the input gradients to the previous stage
    RecvBackward,  // recvB
    TrainStep,     // a plan without a pipeline: train_step on microbatch `microbatch`
    OptimizerStep, // optimizer_step (a pipeline's: the stage's optimizer program)
  };
  Kind kind = Kind::Forward;
  int64_t step = 0;
  int64_t microbatch = -1;  // -1: none (OptimizerStep)
  int64_t stage = 0;        // pipeline stage (0 without a pipeline; OptimizerStep: the rank's
                            // pipeline coordinate)
  double start = 0, end = 0;  // seconds on this process's steady clock (since its epoch)
  int64_t bytes = 0;          // sends and receives: the bytes moved; a compute action: what it sent
                              // without a send action (zbv's turn; "sent_bytes" in the trace)
  int64_t savedBytes = -1;    // live saved-activation bytes after it; -1: not counted
};

/// What the writer knows of one rank.
struct RankTrace {
  int64_t rank = 0;
  std::string label;        // "rank 1 (stage 1)", "rank 3 (stage 1, dp 1)"
  int64_t stage = 0;        // coordinate on the pipeline axis (0 without one); it runs stages
                            // stage, stage + P, ... (the events say which)
  int64_t group = 0;        // which pipeline group (Mesh::groupId over the pipeline axis)
  double clockOffset = 0;   // seconds: this rank's clock minus rank 0's
  /// Per direction (0 sendF, 1 sendB) and sending stage: the stages whose receives take them.
  std::map<int64_t, std::vector<uint32_t>> sendPeers[2];
  std::vector<TraceEvent> events;
};

/// Writes the Chrome trace of `ranks` (file comment) to `os`: each rank's times are moved by its
/// clockOffset and counted from `origin` (seconds on rank 0's clock). `pipelineRanks`: ranks on
/// the pipeline axis (an action's chunk is its stage / pipelineRanks: the model chunk of that rank
/// it runs, 0 with one stage per rank). `otherData` is written as the top-level "otherData".
void writeChromeTrace(llvm::raw_ostream &os, const std::vector<RankTrace> &ranks, int64_t pipelineRanks,
                      double origin, const llvm::json::Object &otherData);

/// "F3", "sendB0", "train_step", "optimizer_step": an event's name in the trace, as
/// --dump-schedule prints actions: with `chunked` (a rank runs several stages) the stage follows,
/// "F3.2".
std::string traceEventName(const TraceEvent &e, bool chunked);

class PipelineTrace {
public:
  /// Starts tracing a run of `plan` on `comm`'s ranks: collective over the world (every rank calls
  /// it at the same point), measures the clock offsets. Errors: the communicators'.
  /// `comm` null: one rank, nothing to measure.
  static llvm::Expected<std::unique_ptr<PipelineTrace>> start(const LoadedPlan &plan, CommContext *comm);

  /// Seconds on this process's steady clock.
  static double now();
  void add(const TraceEvent &e) { local_.events.push_back(e); }
  /// Appends the events of `runner`'s last runMicrobatches() as those of step `step`.
  void addPipelineStep(const PipelineRunner &runner, int64_t step);

  /// Collective: every rank's events to rank 0, which writes the trace to `os` (the other ranks
  /// leave `os` alone). Errors: the communicators'.
  llvm::Error finish(llvm::raw_ostream &os);

private:
  PipelineTrace() = default;
  const LoadedPlan *plan_ = nullptr;
  CommContext *comm_ = nullptr;
  RankTrace local_;
  double origin_ = 0;                 // rank 0: its clock when tracing started
  std::vector<double> offsets_, rtts_;  // rank 0: per rank, seconds
  std::vector<char> sameHost_;          // rank 0: per rank, whether it runs on rank 0's machine
};

} // namespace colossal::runtime

#endif

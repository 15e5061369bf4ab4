//===- PipelineSchedule.h - pipeline schedules as data: generate, simulate, print --*- C++ -*-===//
//
// docs/parallelism.md "Pipeline parallelism". A schedule is plan::Pipeline's per-rank action
// lists. generateSchedule() writes GPipe's (all forwards, then all backwards; Huang et al. 2019)
// 1F1B's (PipeDream-Flush, Narayanan et al. 2021: P − r − 1 warm-up forwards on rank r, then
// one forward and one backward alternately, then the remaining backwards) or interleaved 1F1B's
// (the same paper, V stages per rank: stage s on rank s mod P), ZB-H1's and ZB-V's (Qi et al.
// 2024, "Zero Bubble Pipeline Parallelism": the backward split into B, the input gradients, and W,
// the weight gradients, deferred to fill the bubbles; ZB-V places two chunks per rank in a V,
// stage s < P on rank s and stage s >= P on rank 2P - 1 - s), with the sends and receives around
// each compute action. simulateSchedule() runs any schedule in logical time (forward 1, backward
// 2; with the backward split B 1 and W 1; messages free) and rejects what cannot run: a receive
// without its send, a backward before its forward, a W before its B, an action twice or missing,
// a deadlock (naming the rank and the action it waits on). Shared by colossal-opt and the runtime
// (no MLIR).
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_PIPELINESCHEDULE_H
#define COLOSSAL_RUNTIME_PIPELINESCHEDULE_H

#include "plan.pb.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace colossal::runtime {

/// Fills `p.ranks` for `p.schedule` ("gpipe" | "1f1b" | "interleaved" | "zb-h1" | "zbv") over
/// `p.stages` stages and `p.microbatches`. zb-h1 and zbv are list schedules in unit time (B
/// first, then F within an in-flight limit, then the oldest W) whose idle time per rank is the
/// lower bound P − 1 units where the limit allows; with a split backward the other schedules run
/// each W right after its B. Errors: an unknown schedule, stages < 1, microbatches < 1, a
/// virtual_stages or placement the schedule does not use, zb-h1/zbv without a split backward.
llvm::Error generateSchedule(plan::Pipeline &p);

/// The pipeline rank that runs `stage`: stage mod P, or with Pipeline.v_shape (zbv) stage for
/// stage < P and 2P − 1 − stage after (P = stages / virtual_stages).
uint32_t rankOfStage(const plan::Pipeline &p, uint32_t stage);

/// Fills `p.ranks` from `text` in formatSchedule()'s form: each line "rank R ...: A A ..." lists
/// rank R's actions (F3, B3, W3, sendF3, recvF3, sendB3, recvB3; with several stages per rank the
/// stage after a dot, F3.2); every other line (the header, the figures, blank, `#` comments) is
/// ignored. Errors (naming `what`, the line and the token): an unknown action, a rank out of
/// range or listed twice, a rank without a line.
llvm::Error parseSchedule(llvm::StringRef text, llvm::StringRef what, plan::Pipeline &p);

/// What the simulator measured.
struct ScheduleStats {
  double makespan = 0;                  // logical time units
  double bubble = 0;                    // idle / (ranks · makespan)
  double spanBubble = 0;                // idle inside each rank's own span / Σ spans (its first to last compute)
  std::vector<uint32_t> peakInFlight;   // per stage: most microbatches forwarded, not yet backwarded (split: W-ed)
  std::vector<double> busy;             // per rank: compute time units
  /// Per rank: the most saved activation bytes live at once (Σ over its stages of in-flight ×
  /// Pipeline.saved_bytes; with a split backward B releases all but saved_weight_bytes, which W
  /// releases); zeros when the plan gives no saved_bytes.
  std::vector<uint64_t> peakSavedBytes;
  /// Per stage: the most of its saved activation bytes live at once (in-flight × saved_bytes
  /// without a split backward).
  std::vector<uint64_t> stagePeakSavedBytes;
  /// Per action, as run: rank, index in the rank's list, start and end times.
  struct Event {
    uint32_t rank, index;
    double start, end;
  };
  std::vector<Event> events;
};

/// Simulates `p`'s schedule (see the file comment). Errors name the rank, the action and why.
llvm::Expected<ScheduleStats> simulateSchedule(const plan::Pipeline &p);

/// "F3" / "B0" / "sendF3" ...: an action as --dump-schedule prints it.
std::string actionName(const plan::Pipeline::Action &a);

/// The schedule as text: one line per rank ("rank 0 (stage 0): F0 sendF0 F1 ..."), then the
/// simulator's bubble and peak in-flight microbatches.
std::string formatSchedule(const plan::Pipeline &p, const ScheduleStats &stats);

} // namespace colossal::runtime

#endif

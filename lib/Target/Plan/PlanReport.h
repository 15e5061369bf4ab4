//===- PlanReport.h - the human-readable memory plan summary ------------------*- C++ -*-===//
#ifndef COLOSSAL_LIB_TARGET_PLAN_PLANREPORT_H
#define COLOSSAL_LIB_TARGET_PLAN_PLANREPORT_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace colossal {

/// One arena storage (a buffer plus the aliases and in-place results sharing its bytes).
struct ReportBuffer {
  std::string name;                   // the value that owns the bytes
  llvm::SmallVector<int64_t, 4> shape;
  std::string dtype;                  // "f32", ...
  uint64_t bytes = 0;
  uint64_t offset = 0;
  uint32_t start = 0, end = 0;        // planner times: 0 = inputs, k + 1 = instruction k
  size_t shared = 0;                  // other buffers on the same bytes
};

/// One program of the plan.
struct ProgramSummary {
  std::string name;
  uint64_t arenaBytes = 0;            // its arena peak (activations and temporaries)
  size_t numInstructions = 0, numBuffers = 0, numInPlace = 0, numAliases = 0;
  uint32_t endTime = 0;               // time at which outputs are read
  std::vector<ReportBuffer> buffers;  // every arena storage, any order
};

/// A trainable parameter.
struct ReportParam {
  std::string name;
  llvm::SmallVector<int64_t, 4> shape; // global
  uint64_t count = 0;                  // elements (global)
  std::string split;                   // "" (replicated) or how it is split: "[-, tp/3]"
  llvm::SmallVector<int64_t, 4> localShape; // each rank's shard (= shape when replicated)
  bool buffer = false; // a buffer the steps write (BatchNorm's running statistics), not trained
};

/// A parameter or weight-like constant that does not train, and why ("frozen by train.frozen",
/// "does not reach the loss", the importer's "constant: integer, feeds Reshape's shape").
struct ReportNotTrained {
  std::string name;
  llvm::SmallVector<int64_t, 4> shape;
  std::string why;
};

/// Activation recompute in @train_step (the colossal-recompute pass's `colossal.recompute`).
struct ReportRecompute {
  std::string mode;                    // full | selective | auto
  uint64_t units = 0, ops = 0;         // units recomputed, ops cloned into the backward part
  uint64_t flops = 0, forwardFlops = 0; // per microbatch: the clones', the forward part's
};

/// Offload (docs/training.md "Offload"): the slower tier's share of the states.
struct ReportOffload {
  std::string mode;                    // optimizer | params; "" without offload
  std::string dir;
  size_t chunks = 0;
  uint64_t offloadedBytes = 0, residentPeakBytes = 0;
  uint64_t readPerStep = 0, writtenPerStep = 0; // bytes per optimizer step
};

struct PlanSummary {
  std::string planPath, weightsFile;
  uint64_t weightBytes = 0;           // the weights file's tensors
  size_t numWeights = 0;
  std::vector<ProgramSummary> programs; // plan order; an inference plan has one
  // Train plans (Plan.states): bytes per role, and the read-only weights the runtime keeps
  // besides the states (frozen parameters and constants; a trainable parameter's initial value
  // is copied into its state).
  bool train = false;
  std::vector<ReportParam> params;
  std::vector<std::string> frozen;    // parameters that stay read-only weights
  std::vector<ReportNotTrained> notTrained; // frozen parameters, then the importer's constants
  uint64_t paramBytes = 0, gradBytes = 0, optimizerBytes = 0;
  uint64_t readOnlyWeightBytes = 0;
  size_t numReadOnlyWeights = 0;
  ReportRecompute recompute;          // mode "" without recompute
  ReportOffload offload;
  /// Train plans: resident states + read-only weights + largest arena + resident chunks.
  uint64_t peakBytes = 0;
  uint64_t budgetBytes = 0;           // memory.budget_mb (0: none)
  uint64_t minimumBudgetBytes = 0;    // the smallest budget recompute can meet (0: not computed)
};

/// "1.50 MiB", "12.0 KiB", "512 B".
std::string formatBytes(uint64_t bytes);

/// Inference plans: the totals and the 10 largest arena storages as aligned columns; live ranges
/// are in instruction indices ("in" = before the first instruction, "out" = read as an output).
/// Train plans: the trainable parameters (name, shape, element count) and their total; what does
/// not train (name, shape, why); each
/// program's instructions and arena peak; bytes of parameters, gradients, optimizer state,
/// read-only weights, activations (the largest arena: programs share one arena, docs/training.md)
/// and the peak total = states + read-only weights + largest arena; then the largest program's
/// 10 largest arena storages.
void printPlanReport(const PlanSummary &summary, llvm::raw_ostream &os);

} // namespace colossal

#endif

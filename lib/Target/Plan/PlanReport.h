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

struct PlanSummary {
  std::string planPath, weightsFile;
  uint64_t arenaBytes = 0, weightBytes = 0;
  size_t numWeights = 0, numInstructions = 0, numBuffers = 0, numInPlace = 0, numAliases = 0;
  uint32_t endTime = 0;               // time at which outputs are read
  std::vector<ReportBuffer> buffers;  // every arena storage, any order
};

/// "1.50 MiB", "12.0 KiB", "512 B".
std::string formatBytes(uint64_t bytes);

/// Prints the totals and the 10 largest arena storages as aligned columns; live ranges are in
/// instruction indices ("in" = before the first instruction, "out" = read as an output).
void printPlanReport(const PlanSummary &summary, llvm::raw_ostream &os);

} // namespace colossal

#endif

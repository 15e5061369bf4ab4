//===- Offload.h - which persistent tensors live in the slower tier, and when they move -*- C++ -*-===//
//
// docs/training.md "Offload". With `memory.offload` the persistent tensors of a training plan
// (optimizer: OPTIMIZER states; params: every state) live in a slower tier (on the CPU a file the
// runtime maps), grouped into chunks. Each program gets a static schedule of PREFETCH and EVICT
// actions from its order of uses: a chunk is resident from `prefetchDistance` instructions before
// a use until after the last use of its run of uses; two uses at most `gap` instructions apart
// share one residency. The largest `gap` whose peak fits the budget is chosen, so the chunks
// evicted are those whose next use is furthest away (Belady's rule, applied to a static program).
// Everything is MLIR-free: it works on the collected programs.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_LIB_TARGET_PLAN_OFFLOAD_H
#define COLOSSAL_LIB_TARGET_PLAN_OFFLOAD_H

#include "PlanCollector.h"

#include <cstdint>
#include <string>
#include <vector>

namespace colossal {

/// Instructions between a chunk's PREFETCH and its first use.
constexpr uint32_t kPrefetchDistance = 4;
/// Chunks group consecutive offloaded states of one role up to this many bytes.
constexpr uint64_t kChunkBytes = 1 << 20;
/// Chunk ranges in the tier's file start at multiples of this (the runtime maps pages).
constexpr uint64_t kTierPage = 4096;

struct OffloadSchedule {
  std::vector<plan::Offload::Chunk> chunks;
  /// Per program of the module (collectModule's order): the actions, in execution order.
  std::vector<std::vector<plan::Program::TierAction>> actions;
  /// Per program: the most chunk bytes resident at once; the bytes read (prefetched) and
  /// written back (chunks an instruction wrote) per run.
  std::vector<uint64_t> residentPeak, bytesRead, bytesWritten;
  uint64_t offloadedBytes = 0;     // the tier's size (this rank's chunks)
  uint64_t residentStateBytes = 0; // states that stay in fast memory
  uint32_t gap = 0;                // the residency gap chosen
};

/// Whether state `st` is offloaded under `mode` ("optimizer" | "params").
bool isOffloaded(const plan::StateTensor &st, llvm::StringRef mode);

/// The chunks of `module`'s offloaded states and each program's schedule for residency gap `gap`.
OffloadSchedule planOffload(const CollectedModule &module, llvm::StringRef mode, uint32_t gap);

/// Every distinct gap between two uses of one chunk in one program, ascending, 0 first: the
/// residency gaps worth trying.
std::vector<uint32_t> candidateGaps(const CollectedModule &module, llvm::StringRef mode);

/// The schedule with the largest residency gap whose peak (`fixedBytes` — weights, the arena —
/// + resident states + the most chunk bytes resident at once) is within `budget`; gap 0 (the
/// least resident) when none is, or when `budget` is 0.
OffloadSchedule chooseOffload(const CollectedModule &module, llvm::StringRef mode, uint64_t fixedBytes,
                              uint64_t budget);

} // namespace colossal

#endif

//===- MemoryPlanner.h - static arena planning for a straight-line program ----*- C++ -*-===//
//
// The planner works on an abstract program, not on MLIR, so it can be tested on its own: values
// (byte size, where they live, which value they alias) and steps (one kernel launch each, in
// execution order). It decides which values share storage (zero-copy aliases, in-place updates)
// and gives every arena storage an offset so that no two storages live at the same time overlap.
//
// Time: program inputs are written at time 0 (before the first step), step k runs at time k + 1,
// program outputs are read at time numSteps + 1. A storage is live over the closed interval
// [first definition, last use]; two storages may share bytes only if their intervals are disjoint.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_LIB_TARGET_PLAN_MEMORYPLANNER_H
#define COLOSSAL_LIB_TARGET_PLAN_MEMORYPLANNER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace colossal::memory {

/// Arena offsets (and the arena size) are multiples of this many bytes.
constexpr uint64_t kArenaAlignment = 64;

/// One tensor of the program.
struct Value {
  uint64_t bytes = 0;
  int dtype = 0;          // compared for in-place updates only
  bool isWeight = false;  // read-only, lives in the weights file, never in the arena
  /// A persistent tensor (STATE: trainable parameter, gradient, optimizer state): lives outside
  /// the arena for the whole program; update steps write it in place (their outputs are the
  /// same values as some of their inputs), nothing else may take its bytes.
  bool isState = false;
  bool isInput = false;   // a program input: defined at time 0
  /// Another value (defined earlier) whose storage this one reuses as-is (a reshape): same bytes,
  /// same offset or weight. -1 when the value owns its storage.
  int32_t aliasOf = -1;
};

/// One kernel launch.
struct Step {
  llvm::SmallVector<uint32_t, 4> inputs;
  llvm::SmallVector<uint32_t, 2> outputs;
  /// The kernel reads each input element before writing the output element at the same index
  /// (docs/plan.md "in-place safe"), so its single output may take its first input's bytes.
  bool inPlaceSafe = false;
};

/// A range of bytes shared by one or more values.
struct Storage {
  uint32_t root = 0;         // the value that owns it (first defined)
  uint64_t bytes = 0;        // the root's byte size (all members have this size)
  bool isWeight = false;
  bool isState = false;
  bool hasInput = false;     // holds a program input
  bool hasOutput = false;    // holds a program output
  uint32_t start = 0;        // time of definition
  uint32_t end = 0;          // time of last use (inclusive)
  uint64_t offset = 0;       // arena offset (arena storages only)
  bool merged = false;       // absorbed into another storage by an in-place update
};

struct MemoryPlan {
  std::vector<Storage> storages;   // indexed by storage id; skip those with `merged`
  std::vector<uint32_t> storageOf; // value -> storage id
  std::vector<bool> inPlace;       // step -> its output took its first input's storage
  uint64_t arenaBytes = 0;         // peak, a multiple of kArenaAlignment
  uint32_t endTime = 0;            // numSteps + 1: when outputs are read

  /// Live arena storages only (not merged, not weights, not states).
  bool isArena(uint32_t s) const {
    return !storages[s].merged && !storages[s].isWeight && !storages[s].isState;
  }
};

/// Plans `values` for `steps`; `outputs` are the program's results (value ids, possibly repeated:
/// the caller has inserted copies where a binding needs its own bytes).
///
/// Guarantees: every arena storage gets a kArenaAlignment-aligned offset with
/// offset + bytes <= arenaBytes; storages whose live intervals intersect get disjoint byte ranges;
/// an alias shares its root's storage; an in-place step's output shares its first input's storage
/// only when that storage is an arena storage holding no program input or output, its last use is
/// that step, and byte size and dtype are equal (never a weight or a state). Steps keep their
/// order: an arena value lives from its definition to its last reader, whichever step that is
/// (update steps that write states included). Preconditions (checked by the caller): every step
/// input is defined before the step, aliases point to earlier values of the same size, and a step
/// output that is already defined (an update's written state) is a state.
MemoryPlan planMemory(llvm::ArrayRef<Value> values, llvm::ArrayRef<Step> steps,
                      llvm::ArrayRef<uint32_t> outputs);

/// Storages as offset intervals over time, for assignOffsets().
struct Interval {
  uint64_t bytes = 0;
  uint32_t start = 0, end = 0; // inclusive
  uint64_t offset = 0;         // result
};

/// Gives each interval an aligned offset; intervals that overlap in time get disjoint bytes.
/// Runs two greedy heuristics and keeps the smaller arena:
///  - online best-fit: walk time forward, free storages after their last use (coalescing freed
///    ranges), place each new storage (largest first) in the smallest free range that fits, else
///    at the top of the arena;
///  - offline greedy-by-size (Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural
///    Net Inference"): largest first, each in the smallest gap between time-overlapping, already
///    placed storages.
/// Returns the arena size (a multiple of kArenaAlignment).
uint64_t assignOffsets(llvm::MutableArrayRef<Interval> intervals);

/// The first pair of intervals that overlap both in time and in bytes, or one that ends past
/// `arenaBytes` (as (i, i)) or is misaligned (as (i, i)); nullopt when the layout is valid.
std::optional<std::pair<size_t, size_t>> findConflict(llvm::ArrayRef<Interval> intervals,
                                                      uint64_t arenaBytes);

} // namespace colossal::memory

#endif

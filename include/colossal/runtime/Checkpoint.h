//===- Checkpoint.h - Training checkpoints: save, find, load --------------------*- C++ -*-===//
//
// Layout (docs/training.md "Runtime"): DIR/step-NNNNNNNN/ (N = optimizer steps done, 8 digits) holds
//   model.safetensors      every PARAM state, by state name
//   optimizer.safetensors  every OPTIMIZER state, by state name (GRAD states are zero between
//                          optimizer steps and are not saved)
//   manifest.json          {"format": "colossal-checkpoint", "version": 1, "step", "data_position",
//                          "seed", "spec_hash" (16 hex digits), "mesh": {axis: size} ({} for
//                          one rank), "files": {name: {"bytes",
//                          "fnv1a64"}}, "tensors": {name: {"file", "role", "dtype", "shape"}}}
// and DIR/latest holds one line naming the newest complete step folder.
//
// A save is atomic: everything is written into DIR/step-N.tmp/, fsynced, the folder renamed to
// DIR/step-N/, then DIR/latest is replaced by a rename; only then are older step folders (beyond
// the newest `keep`) and leftovers of interrupted saves removed. A save killed at any point
// leaves the previous checkpoint loadable through DIR/latest.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_CHECKPOINT_H
#define COLOSSAL_RUNTIME_CHECKPOINT_H

#include "colossal/runtime/StateStore.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace colossal::runtime {

/// What a checkpoint records besides the tensors.
struct CheckpointInfo {
  int64_t step = 0;          // optimizer steps done: training continues at step `step`
  int64_t dataPosition = 0;  // the next row index of the data order (step · global batch)
  uint64_t seed = 0;         // --seed of the run that wrote it
  uint64_t specHash = 0;     // TrainConfig.spec_hash of the plan that wrote it
  /// The mesh the writer ran under (Plan.mesh: axis name, size), empty for one rank. Informational:
  /// tensors are saved with global shapes, so any mesh can resume a checkpoint. The manifest keeps
  /// it as a JSON object (keys sorted), so the axes' rank-layout order is not recorded.
  std::vector<std::pair<std::string, int64_t>> mesh;
};

/// Writes `store`'s PARAM and OPTIMIZER states and `info` as DIR/step-NNNNNNNN (N = info.step),
/// atomically (header comment), points DIR/latest at it and keeps the newest `keep` (>= 1) step
/// folders. Creates DIR when missing. Returns the step folder's path. Errors name the path that
/// failed (create, write, fsync, rename).
llvm::Expected<std::string> saveCheckpoint(llvm::StringRef dir, const StateStore &store, const CheckpointInfo &info,
                                           unsigned keep = 2);

/// The step folder `dir` designates: `dir` itself when it holds manifest.json, else the folder named
/// by the one line of `dir/latest` (relative to `dir`). Errors name `dir` or `dir/latest`.
llvm::Expected<std::string> checkpointStepDir(llvm::StringRef dir);

/// Loads the checkpoint `dir` designates (checkpointStepDir) into `store`: reads and checks the
/// manifest (format, version, step, data position), checks each file's size and FNV-1a 64 against
/// the manifest (a truncated or corrupt file is an error naming it), opens the safetensors files,
/// requires exactly the store's PARAM states in model.safetensors and its OPTIMIZER states in
/// optimizer.safetensors with the plan's dtypes and shapes (an error names the tensor), copies
/// them in and zeroes the GRAD states. Everything is checked before the first copy: on error the
/// store is unchanged.
llvm::Expected<CheckpointInfo> loadCheckpoint(llvm::StringRef dir, StateStore &store);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_CHECKPOINT_H

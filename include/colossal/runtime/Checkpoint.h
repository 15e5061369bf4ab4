//===- Checkpoint.h - Training checkpoints: save, find, load --------------------*- C++ -*-===//
//
// Layout (docs/training.md "Runtime"): DIR/step-NNNNNNNN/ (N = optimizer steps done, 8 digits) holds
//   model.safetensors      every PARAM state, by state name
//   optimizer.safetensors  every OPTIMIZER state, by state name (GRAD states are zero between
//                          optimizer steps and are not saved)
//   manifest.json          {"format": "colossal-checkpoint", "version": 1, "step", "data_position",
//                          "seed", "spec_hash" (16 hex digits), "mesh": {axis: size} ({} for
//                          one rank), "skipped_total" (non-finite steps skipped before `step`),
//                          "files": {name: {"bytes", "fnv1a64"}},
//                          "tensors": {name: {"file", "role", "dtype", "shape"}}}
// and DIR/latest holds one line naming the newest complete step folder.
//
// A save is atomic: everything is written into DIR/step-N.tmp/, fsynced, the folder renamed to
// DIR/step-N/, then DIR/latest is replaced by a rename; only then are older step folders (beyond
// the newest `keep`) and leftovers of interrupted saves removed. A save killed at any point
// leaves the previous checkpoint loadable through DIR/latest.
//
// Sharded states (docs/parallelism.md "Sharded tensors") are saved whole: every rank takes part in
// the save (the shards are all-gathered over the world) and rank 0 writes the global tensors, so
// the files and the manifest are those of a one-rank run (plus the mesh). A load slices each
// global tensor for the store's rank, so a checkpoint resumes under any mesh whose shardings
// divide its shapes.
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

class CommContext;

/// What a checkpoint records besides the tensors.
struct CheckpointInfo {
  int64_t step = 0;          // steps done (skipped ones included): training continues at step `step`
  int64_t dataPosition = 0;  // the next row index of the data order (step · global batch)
  uint64_t seed = 0;         // --seed of the run that wrote it
  uint64_t specHash = 0;     // TrainConfig.spec_hash of the plan that wrote it
  /// The mesh the writer ran under (Plan.mesh: axis name, size), empty for one rank. Informational:
  /// tensors are saved with global shapes, so any mesh can resume a checkpoint. The manifest keeps
  /// it as a JSON object (keys sorted), so the axes' rank-layout order is not recorded.
  std::vector<std::pair<std::string, int64_t>> mesh;
  /// Steps of the `step` done that were skipped as non-finite (their update not applied): the
  /// optimizer's step count is step − skippedTotal. Absent in older manifests: 0.
  int64_t skippedTotal = 0;
  /// Dynamic loss scaling (docs/training.md "Loss scaling"): the scale the next step uses and the
  /// clean steps counted towards its growth. lossScale 0: the run did not scale (absent keys).
  double lossScale = 0;
  int64_t lossScaleGrowthTracker = 0;
};

/// Writes `store`'s PARAM and OPTIMIZER states and `info` as DIR/step-NNNNNNNN (N = info.step),
/// atomically (header comment), points DIR/latest at it and keeps the newest `keep` (>= 1) step
/// folders. Creates DIR when missing. Returns the step folder's path. Errors name the path that
/// failed (create, write, fsync, rename). A PARAM or OPTIMIZER state holding NaN or ±inf is
/// refused before anything is written (a NonFiniteError naming the tensor; with `comm`, every
/// rank gets it alike): a checkpoint is never written from a non-finite state, so the step folder
/// a save keeps is always finite and the pruning never removes the newest finite checkpoint.
/// With `comm` (the job's context; needed when the store holds shards), EVERY rank must call it:
/// the sharded states are gathered (gatherState), then rank 0 alone writes; the others return
/// the same path without touching the file system.
llvm::Expected<std::string> saveCheckpoint(llvm::StringRef dir, const StateStore &store, const CheckpointInfo &info,
                                           unsigned keep = 2, CommContext *comm = nullptr);

/// State `e`'s whole tensor (its global shape, row-major) in host memory: a copy of its bytes, or,
/// for a sharded state (StateEntry::layout), every rank's shard all-gathered over `comm`'s world
/// and assembled (assembleShards). A collective when sharded: every rank calls it for the same
/// states in the same order. Errors: a sharded state without a communicator of the mesh's size;
/// the collective's errors.
llvm::Expected<AlignedBuffer> gatherState(const StateStore &store, const StateEntry &e, CommContext *comm);

/// The step folder `dir` designates: `dir` itself when it holds manifest.json, else the folder named
/// by the one line of `dir/latest` (relative to `dir`). Errors name `dir` or `dir/latest`.
llvm::Expected<std::string> checkpointStepDir(llvm::StringRef dir);

/// Loads the checkpoint `dir` designates (checkpointStepDir) into `store`: reads and checks the
/// manifest (format, version, step, data position), checks each file's size and FNV-1a 64 against
/// the manifest (a truncated or corrupt file is an error naming it), opens the safetensors files,
/// requires exactly the store's PARAM states in model.safetensors and its OPTIMIZER states in
/// optimizer.safetensors with the plan's dtypes and GLOBAL shapes (an error names the tensor),
/// copies them in (a sharded state: this rank's shard of the tensor) and zeroes the GRAD states.
/// A tensor holding NaN or ±inf is an error (a NonFiniteError naming the file, the tensor and the
/// first such element) unless `allowNonFinite` (colossal-run --allow-nonfinite-checkpoint).
/// Everything is checked before the first copy: on error the store is unchanged.
llvm::Expected<CheckpointInfo> loadCheckpoint(llvm::StringRef dir, StateStore &store, bool allowNonFinite = false);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_CHECKPOINT_H

//===- Executor.h - Runs one program of a loaded plan ---------------------------*- C++ -*-===//
//
// Allocates the program's arena once (64-byte aligned, on the Device), binds WEIGHT buffers to the
// memory-mapped weights, resolves each instruction to its kernel and tensor views, and then runs
// the instruction list in order as often as asked, with no allocation inside the loop.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_EXECUTOR_H
#define COLOSSAL_RUNTIME_EXECUTOR_H

#include "colossal/runtime/Device.h"
#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Tier.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace colossal::runtime {

class StateStore;

/// How an executor gets memory beyond the defaults (its own arena, no persistent state).
struct ExecutorOptions {
  /// Binds the program's STATE buffers to these tensors (docs/training.md). Required when the
  /// program has STATE buffers; must outlive the executor.
  const StateStore *states = nullptr;
  /// Runs in this arena instead of allocating one: `arenaBytes` >= the program's arena_bytes,
  /// aligned to kArenaAlignment, owned by the caller. Programs of one plan may share one arena of
  /// maxArenaBytes() because they never run at the same time; outputs are then valid only until
  /// another program sharing the arena runs, and inputs must be set right before each run().
  void *arena = nullptr;
  size_t arenaBytes = 0;
  /// The job's communicators (Communicator.h), for collective instructions (docs/parallelism.md);
  /// must outlive the executor. Without one, collectives fail when run.
  CommContext *comm = nullptr;
};

/// The largest arena_bytes of `plan`'s programs: the size of an arena all of them can share.
uint64_t maxArenaBytes(const plan::Plan &plan);

/// A program input or output: its name and the buffer it is bound to.
struct BindingInfo {
  std::string name;
  TensorRef tensor;
};

class Executor {
public:
  /// Prepares program `programName` of `plan` (which must outlive the executor) on `device`; an
  /// empty name is the plan's forward program (Program.role FORWARD).
  /// Errors: no such program, program for another device, no kernel (should not happen after
  /// loadPlan), allocation failure.
  static llvm::Expected<std::unique_ptr<Executor>>
  create(const LoadedPlan &plan, const KernelRegistry &registry, Device &device,
         llvm::StringRef programName = "");
  /// As above, with STATE buffers bound to `options.states` and/or an external arena. Extra
  /// errors: the program has STATE buffers but no store is given (or the store lacks one, or
  /// holds it with another dtype or element count); the external arena is smaller than the
  /// program's arena_bytes or misaligned.
  static llvm::Expected<std::unique_ptr<Executor>>
  create(const LoadedPlan &plan, const KernelRegistry &registry, Device &device,
         llvm::StringRef programName, const ExecutorOptions &options);
  ~Executor();

  llvm::ArrayRef<BindingInfo> inputs() const { return inputs_; }
  llvm::ArrayRef<BindingInfo> outputs() const { return outputs_; }

  /// Copies `data` into input `name`'s buffer. Errors: unknown name (lists the known ones), dtype
  /// or shape different from the plan's (names input, expected and got).
  llvm::Error setInput(llvm::StringRef name, DType dtype, llvm::ArrayRef<int64_t> shape,
                       const void *data);

  /// Runs every instruction in order. Errors carry the instruction index, op and loc.
  llvm::Error run();

  /// Output `name` as a view into the arena (valid until the next run()); error if unknown.
  llvm::Expected<TensorRef> output(llvm::StringRef name) const;

private:
  Executor() = default;
  struct Step;
  const plan::Program *program_ = nullptr;
  Device *device_ = nullptr;
  void *arena_ = nullptr;
  bool ownsArena_ = true;
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  std::vector<TensorRef> buffers_;
  std::vector<Step> steps_;
  /// Offload: tier actions (Program.tier_actions) as (tier range, prefetch?) by the instruction
  /// they run before; index steps_.size() = after the last. Empty without offload.
  struct TierMove {
    uint64_t offset, bytes;
    bool prefetch;
  };
  std::vector<std::vector<TierMove>> tierMoves_;
  Tier *tier_ = nullptr;
  void runTierMoves(size_t before);
  std::vector<BindingInfo> inputs_, outputs_;
};

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_EXECUTOR_H

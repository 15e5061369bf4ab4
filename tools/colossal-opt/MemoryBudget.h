//===- MemoryBudget.h - fitting a training plan into memory.budget_mb ---------*- C++ -*-===//
//
// docs/training.md "Memory budget". The compiler predicts each rank's bytes exactly (the memory
// plan is static: colossal::predictMemory), so a budget is checked before anything runs. With
// `recompute: auto` the colossal-recompute pass chooses what to recompute for an activation
// target; the driver compiles, measures the planned peak and lowers the target by the excess
// until the plan fits (the pass estimates live bytes, the planner packs them).
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_TOOLS_COLOSSAL_OPT_MEMORYBUDGET_H
#define COLOSSAL_TOOLS_COLOSSAL_OPT_MEMORYBUDGET_H

#include "colossal/Spec/Spec.h"
#include "colossal/Target/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace colossal {

struct MemoryFit {
  /// The module to lower when it is not the one already compiled (auto's choice), else null.
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// The smallest per-rank peak the compiler can plan for this spec (recompute: auto with the
  /// tightest target, or the spec's own plan when that is smaller), bytes.
  uint64_t minimumBytes = 0;
  /// The offload mode the plan needs (memory.offload, auto resolved): none, optimizer or params.
  std::string offloadMode = "none";
};

/// Checks `compiled` (the spec's pipeline already run) against `spec.memory`: for `offload: auto`
/// the least offload that fits (none, optimizer, params), for `recompute: auto` the least
/// recompute. `options` are the plan options (offload dir) predictions are made with. `compile(variant)` runs
/// the pipeline of `variant` on a fresh copy of the imported module (null on failure, its errors
/// reported). A budget below the minimum, or a none/full/selective plan above the budget, is an
/// error naming `specPath`, the bytes needed by kind and the minimum; returns failure then.
mlir::FailureOr<MemoryFit>
fitMemoryBudget(mlir::ModuleOp compiled, const Spec &spec, const PlanOptions &options,
                llvm::function_ref<mlir::OwningOpRef<mlir::ModuleOp>(const Spec &)> compile,
                llvm::StringRef specPath);

} // namespace colossal

#endif

//===- MemoryBudget.cpp - fitting a training plan into memory.budget_mb --------------===//
#include "MemoryBudget.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>

namespace colossal {

namespace {

std::string mib(uint64_t bytes) {
  return llvm::formatv("{0:f2} MiB ({1} bytes)", double(bytes) / 1048576.0, bytes).str();
}

std::string breakdown(const MemoryPrediction &p) {
  std::string s = "states " + mib(p.stateBytes) + " + read-only weights " + mib(p.weightBytes) +
                  " + activations " + mib(p.arenaBytes);
  if (p.offloadedBytes)
    s += " + offloaded states resident at once " + mib(p.residentChunkBytes) + " of " +
         mib(p.offloadedBytes);
  return s;
}

PlanOptions withOffload(const PlanOptions &base, llvm::StringRef mode, uint64_t budget) {
  PlanOptions o = base;
  o.offloadMode = mode.str();
  o.memoryBudgetBytes = budget;
  return o;
}

} // namespace

mlir::FailureOr<MemoryFit>
fitMemoryBudget(mlir::ModuleOp compiled, const Spec &spec, const PlanOptions &options,
                llvm::function_ref<mlir::OwningOpRef<mlir::ModuleOp>(const Spec &)> compile,
                llvm::StringRef specPath) {
  const std::string where = specPath.empty() ? std::string("the spec") : specPath.str();
  const uint64_t budget = spec.memory.budgetBytes.value_or(0);
  MemoryFit fit;
  if (!spec.train) {
    // Inference: nothing to recompute or offload; the plan fits or it does not.
    mlir::FailureOr<MemoryPrediction> have = predictMemory(compiled, options);
    if (failed(have))
      return mlir::failure();
    if (budget && have->peakBytes() > budget) {
      llvm::errs() << "error: " << where << ": memory.budget_mb: the plan needs "
                   << mib(have->peakBytes()) << " per rank (weights " << mib(have->weightBytes)
                   << " + activations " << mib(have->arenaBytes) << "), more than the budget "
                   << mib(budget) << "\n";
      return mlir::failure();
    }
    fit.minimumBytes = have->peakBytes();
    return fit;
  }

  // The offload modes to try, least moved first (auto: all three).
  std::vector<std::string> modes;
  if (spec.memory.offload == "auto")
    modes = {"none", "optimizer", "params"};
  else
    modes = {spec.memory.offload};

  // The smallest plans: recompute chosen for an activation target of 0 and full recompute (on
  // some graphs full's blocks beat auto's greedy choice), each under the offload modes tried
  // (page padding can make offload cost more than none on small or sharded states), and the
  // spec's own plan.
  Spec tightest = spec;
  tightest.memory.recompute = "auto";
  tightest.memory.activationTarget = 0;
  Spec full = spec;
  full.memory.recompute = "full";
  mlir::OwningOpRef<mlir::ModuleOp> floors[2] = {compile(tightest), compile(full)};
  if (!floors[0] || !floors[1])
    return mlir::failure();
  const char *floorLabels[2] = {"recompute: auto at its tightest", "recompute: full"};
  std::optional<MemoryPrediction> least;
  std::string leastMode, leastLabel;
  for (const std::string &mode : modes)
    for (int k = 0; k < 3; ++k) {
      mlir::ModuleOp m = k < 2 ? *floors[k] : compiled;
      mlir::FailureOr<MemoryPrediction> p = predictMemory(m, withOffload(options, mode, 0));
      if (failed(p))
        return mlir::failure();
      if (!least || p->peakBytes() < least->peakBytes()) {
        least = *p;
        leastMode = mode;
        leastLabel = k < 2 ? floorLabels[k] : "recompute: " + spec.memory.recompute;
      }
    }
  fit.minimumBytes = least->peakBytes();
  fit.offloadMode = modes.front();
  if (!budget) {
    fit.offloadMode = modes.back();
    return fit;
  }
  if (budget < fit.minimumBytes) {
    llvm::errs() << "error: " << where << ": memory.budget_mb: " << mib(budget)
                 << " per rank is below the smallest plan the compiler can build, "
                 << mib(fit.minimumBytes) << " (" << breakdown(*least) << ", with " << leastLabel
                 << (leastMode == "none" ? "" : " and offload: " + leastMode)
                 << "); raise memory.budget_mb to at least "
                 << llvm::formatv("{0:f2}", std::ceil(double(fit.minimumBytes) / 10485.76) / 100.0)
                 << (modes.back() == "params" ? "" : " or offload more (memory.offload: params)") << "\n";
    return mlir::failure();
  }

  for (const std::string &mode : modes) {
    const PlanOptions o = withOffload(options, mode, budget);
    if (spec.memory.recompute != "auto") {
      mlir::FailureOr<MemoryPrediction> p = predictMemory(compiled, o);
      if (failed(p))
        return mlir::failure();
      if (p->peakBytes() <= budget) {
        fit.offloadMode = mode;
        return fit;
      }
      continue;
    }
    // recompute auto: the least recompute that fits; states and weights do not depend on it.
    // The floor: the smaller of the two smallest plans under this mode.
    std::optional<MemoryPrediction> floor;
    int floorIndex = -1;
    for (int k = 0; k < 2; ++k) {
      mlir::FailureOr<MemoryPrediction> p = predictMemory(*floors[k], o);
      if (failed(p))
        return mlir::failure();
      if (p->peakBytes() <= budget && (!floor || p->peakBytes() < floor->peakBytes())) {
        floor = *p;
        floorIndex = k;
      }
    }
    if (!floor)
      continue;
    const uint64_t fixed = floor->stateBytes + floor->weightBytes + floor->residentChunkBytes;
    uint64_t target = budget > fixed ? budget - fixed : 0;
    for (int attempt = 0; attempt < 16 && target > 0; ++attempt) {
      Spec variant = spec;
      variant.memory.activationTarget = target;
      mlir::OwningOpRef<mlir::ModuleOp> m = compile(variant);
      if (!m)
        return mlir::failure();
      mlir::FailureOr<MemoryPrediction> p = predictMemory(*m, o);
      if (failed(p))
        return mlir::failure();
      if (p->peakBytes() <= budget) {
        fit.module = std::move(m);
        fit.offloadMode = mode;
        return fit;
      }
      const uint64_t excess = p->peakBytes() - budget;
      target = excess >= target ? 0 : target - excess;
    }
    fit.module = std::move(floors[floorIndex]);
    fit.offloadMode = mode;
    return fit;
  }
  // Only a plan without recompute (recompute: none/full/selective) lands here.
  mlir::FailureOr<MemoryPrediction> have = predictMemory(compiled, withOffload(options, modes.back(), budget));
  if (failed(have))
    return mlir::failure();
  llvm::errs() << "error: " << where << ": memory.budget_mb: the plan needs " << mib(have->peakBytes())
               << " per rank (" << breakdown(*have) << ", recompute: " << spec.memory.recompute
               << "), more than the budget " << mib(budget)
               << "; memory.recompute: auto fits it (the smallest plan needs " << mib(fit.minimumBytes)
               << ")\n";
  return mlir::failure();
}

} // namespace colossal

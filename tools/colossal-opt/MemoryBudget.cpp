//===- MemoryBudget.cpp - fitting a training plan into memory.budget_mb --------------===//
#include "MemoryBudget.h"

#include "colossal/Target/Plan.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace colossal {

namespace {

std::string mib(uint64_t bytes) {
  return llvm::formatv("{0:f2} MiB ({1} bytes)", double(bytes) / 1048576.0, bytes).str();
}

std::string breakdown(const MemoryPrediction &p) {
  return "states " + mib(p.stateBytes) + " + read-only weights " + mib(p.weightBytes) +
         " + activations " + mib(p.arenaBytes);
}

} // namespace

mlir::FailureOr<MemoryFit>
fitMemoryBudget(mlir::ModuleOp compiled, const Spec &spec,
                llvm::function_ref<mlir::OwningOpRef<mlir::ModuleOp>(const Spec &)> compile,
                llvm::StringRef specPath) {
  mlir::FailureOr<MemoryPrediction> have = predictMemory(compiled);
  if (failed(have))
    return mlir::failure();

  const std::string where = specPath.empty() ? std::string("the spec") : specPath.str();
  if (!spec.train) {
    // Inference: nothing to recompute; the plan fits or it does not.
    if (spec.memory.budgetBytes && have->peakBytes() > *spec.memory.budgetBytes) {
      llvm::errs() << "error: " << where << ": memory.budget_mb: the plan needs "
                   << mib(have->peakBytes()) << " per rank (weights " << mib(have->weightBytes)
                   << " + activations " << mib(have->arenaBytes) << "), more than the budget "
                   << mib(*spec.memory.budgetBytes) << "\n";
      return mlir::failure();
    }
    return MemoryFit{nullptr, have->peakBytes()};
  }

  // The smallest plan: recompute chosen for an activation target of 0.
  Spec tightest = spec;
  tightest.memory.recompute = "auto";
  tightest.memory.activationTarget = 0;
  mlir::OwningOpRef<mlir::ModuleOp> smallest = compile(tightest);
  if (!smallest)
    return mlir::failure();
  mlir::FailureOr<MemoryPrediction> least = predictMemory(*smallest);
  if (failed(least))
    return mlir::failure();
  MemoryFit fit;
  fit.minimumBytes = std::min(least->peakBytes(), have->peakBytes());
  if (!spec.memory.budgetBytes)
    return fit;

  const uint64_t budget = *spec.memory.budgetBytes;
  if (budget < fit.minimumBytes) {
    llvm::errs() << "error: " << where << ": memory.budget_mb: " << mib(budget)
                 << " per rank is below the smallest plan the compiler can build, "
                 << mib(fit.minimumBytes) << " (" << breakdown(*least)
                 << ", with recompute: auto at its tightest); raise memory.budget_mb to at least "
                 << llvm::formatv("{0:f2}", std::ceil(double(fit.minimumBytes) / 10485.76) / 100.0)
                 << " (offload is not supported yet)\n";
    return mlir::failure();
  }
  if (spec.memory.recompute != "auto") {
    if (have->peakBytes() <= budget)
      return fit;
    llvm::errs() << "error: " << where << ": memory.budget_mb: the plan needs "
                 << mib(have->peakBytes()) << " per rank (" << breakdown(*have)
                 << ", recompute: " << spec.memory.recompute << "), more than the budget "
                 << mib(budget) << "; memory.recompute: auto fits it (the smallest plan needs "
                 << mib(fit.minimumBytes) << ")\n";
    return mlir::failure();
  }

  // auto: the least recompute that fits. States and weights do not depend on recompute.
  const uint64_t fixed = least->stateBytes + least->weightBytes;
  uint64_t target = budget - fixed;
  for (int attempt = 0; attempt < 16; ++attempt) {
    Spec variant = spec;
    variant.memory.activationTarget = target;
    mlir::OwningOpRef<mlir::ModuleOp> m = compile(variant);
    if (!m)
      return mlir::failure();
    mlir::FailureOr<MemoryPrediction> p = predictMemory(*m);
    if (failed(p))
      return mlir::failure();
    if (p->peakBytes() <= budget) {
      fit.module = std::move(m);
      return fit;
    }
    const uint64_t excess = p->peakBytes() - budget;
    if (excess >= target)
      break;
    target -= excess;
  }
  if (least->peakBytes() <= budget) {
    fit.module = std::move(smallest);
    return fit;
  }
  // The spec's own plan was the smaller one (recompute cost more bytes than it saved).
  fit.module = compile([&] {
    Spec none = spec;
    none.memory.recompute = "none";
    return none;
  }());
  if (!fit.module)
    return mlir::failure();
  return fit;
}

} // namespace colossal

//===- Programs.h - the programs of a module, found by role -------*- C++ -*-===//
//
// ColossalDialect.h ProgramRole: every pass and the plan emitter find a module's programs here.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_PROGRAMS_H
#define COLOSSAL_DIALECTS_COLOSSAL_PROGRAMS_H

#include "dialects/Colossal/ColossalDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace colossal {

/// The function of `module` whose `colossal.program` is `role`; else the function that states no
/// role and has the role's symbol, programSymbol(role) (IR written by hand, as in lit tests);
/// else null.
mlir::func::FuncOp lookupProgram(mlir::ModuleOp module, ProgramRole role);

/// `f`'s role: its `colossal.program`, or (when it states none) the role whose symbol it has;
/// nullopt for any other function.
std::optional<ProgramRole> programRole(mlir::func::FuncOp f);

/// Sets `f`'s `colossal.program` to `role`.
void setProgramRole(mlir::func::FuncOp f, ProgramRole role);

/// A unit attribute on the matmuls and gemms of a serving step (colossal-generate): each row of
/// the result must not depend on the other rows, whatever their number (the plan instruction's
/// `batch_invariant`, a GEMM with one summation order; docs/serving.md "Batch invariance").
inline constexpr llvm::StringLiteral kBatchInvariantAttr = "colossal.batch_invariant";

} // namespace colossal

#endif

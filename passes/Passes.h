//===- Passes.h - colossal passes -----------------------------------*- C++ -*-===//
#ifndef COLOSSAL_PASSES_PASSES_H
#define COLOSSAL_PASSES_PASSES_H

#include "dialects/Colossal/ColossalOps.h"
#include "passes/Pipeline/PassOptionTypes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace colossal {
#define GEN_PASS_DECL
#include "passes/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"
} // namespace colossal

#endif

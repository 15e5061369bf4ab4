//===- ColossalDialect.h - the colossal dialect -------------------*- C++ -*-===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_COLOSSALDIALECT_H
#define COLOSSAL_DIALECTS_COLOSSAL_COLOSSALDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/Colossal/ColossalDialect.h.inc"

namespace colossal {
/// Argument/result attribute names on the model's `func.func @forward`.
inline constexpr llvm::StringLiteral kParamAttr = "colossal.param";   // StringAttr: parameter name
inline constexpr llvm::StringLiteral kValueAttr = "colossal.value";   // ElementsAttr: its data
inline constexpr llvm::StringLiteral kInputAttr = "colossal.input";   // StringAttr: input name
inline constexpr llvm::StringLiteral kOutputAttr = "colossal.output"; // StringAttr: output name
} // namespace colossal

#endif

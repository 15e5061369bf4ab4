//===- Match.h - helpers shared by the fusion patterns -------------*- C++ -*-===//
//
// Small predicates the fusion patterns are written in: scalar constants compared with a
// tolerance, commutative operand orders, trailing reduction axes. They only look at the IR; none
// of them rewrites anything.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_PASSES_FUSION_MATCH_H
#define COLOSSAL_PASSES_FUSION_MATCH_H

#include "dialects/Colossal/ColossalOps.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace colossal::match {

/// The value of `v` when it is a float constant whose elements are all equal (a splat, of any
/// shape, or a one-element tensor); nullopt otherwise.
std::optional<double> splatFloat(mlir::Value v);

/// Whether `v` is a splat float constant within the tolerance of `expected`: relative 1e-6, or
/// the relative precision of its element type when coarser (f16, bf16 constants of a
/// half-precision export are the closest representable values).
bool isConstantNear(mlir::Value v, double expected);

/// Whether `v` is a splat float constant exactly equal to `expected`.
bool isConstantExactly(mlir::Value v, double expected);

/// Whether `fill` is a splat float constant that masks a softmax input: -inf, or at most half the
/// lowest finite value of its type (torch uses finfo(dtype).min), so exp(fill + s - max) is 0.
bool isMaskingFill(mlir::Value fill);

/// The most negative finite value of float type `t`.
double lowestFinite(mlir::Type t);

/// For a binary op with operands (a, b), calls `fn(a, b)` and then `fn(b, a)`; true when either
/// call returns true.
bool eitherOrder(mlir::Operation *binary, llvm::function_ref<bool(mlir::Value, mlir::Value)> fn);

/// When `axes` are exactly the trailing dims [rank - n, rank) of a rank-`rank` tensor, returns
/// their first axis.
std::optional<int64_t> trailingAxis(llvm::ArrayRef<int64_t> axes, int64_t rank);

/// When `v` is `other · c` or `other / c` for a splat float constant c and has other's type,
/// returns `other` and sets `factor` to the multiplier (c, or 1/c for the division); else null.
mlir::Value peelScalarFactor(mlir::Value v, double &factor);

} // namespace colossal::match

#endif

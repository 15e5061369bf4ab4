//===- Autodiff.h - reverse-mode differentiation over the colossal dialect ----*- C++ -*-===//
//
// The driver behind `colossal-autodiff` (docs/training.md): walks a function body backwards from a
// scalar loss and asks each op's VJPOpInterface for its operands' cotangents.
//
//===-----------------------------------------------------------------------------------===//
#ifndef COLOSSAL_PASSES_AUTODIFF_AUTODIFF_H
#define COLOSSAL_PASSES_AUTODIFF_AUTODIFF_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

namespace colossal {

/// Builds ∂loss/∂w for each `w` in `wrt` (block arguments of `func`, or any values defined in its
/// body), inserting the backward ops just before `func`'s terminator. `loss` is a value in `func`
/// (any float tensor); `seed` is ∂L/∂loss (loss's type, usually a constant 1).
///
/// Returns one value per `wrt` entry with that entry's type; an entry that does not reach the loss
/// gets a zero constant. Cotangents of a value with several uses are summed (colossal.add). Only ops
/// on a path from some `wrt` entry to `loss` are differentiated, and only operands on such a path
/// are asked for. Fails (after a diagnostic naming the op, whose location is its ONNX node) when
/// such an op does not implement VJPOpInterface or its buildVJP fails.
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
buildGradients(mlir::func::FuncOp func, mlir::Value loss, mlir::Value seed,
               llvm::ArrayRef<mlir::Value> wrt);

} // namespace colossal

#endif

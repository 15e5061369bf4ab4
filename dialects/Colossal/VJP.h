//===- VJP.h - helpers for writing vector-Jacobian products --------------*- C++ -*-===//
//
// Shared by every op's buildVJP (ColossalInterfaces.td) and by the autodiff pass.
//
//===--------------------------------------------------------------------------------===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_VJP_H
#define COLOSSAL_DIALECTS_COLOSSAL_VJP_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"

#include <optional>

namespace colossal {

/// Sums `grad` (shape G) down to `target`'s shape T, where T broadcasts to G under NumPy rules:
/// reduce_sum over G's leading extra dims and over dims where T has 1 and G does not, then a
/// reshape to T. Returns `grad` itself when the shapes are already equal. Both must be static.
mlir::Value reduceToShape(mlir::OpBuilder &b, mlir::Location loc, mlir::Value grad,
                          mlir::RankedTensorType target);

/// A constant tensor of `type` filled with `value` (float or integer element types).
mlir::Value splatConstant(mlir::OpBuilder &b, mlir::Location loc, mlir::RankedTensorType type,
                          double value);

/// A rank-0 constant `value` of `elementType`, for broadcasting against any tensor.
mlir::Value scalarConstant(mlir::OpBuilder &b, mlir::Location loc, mlir::Type elementType,
                           double value);

/// `dy · f'(x)` as one `colossal.unary_grad` (docs/plan.md "Training instructions" lists the
/// `fn`s); `alpha` for `leaky_relu` and `elu`. x and dy: the same float tensor type.
mlir::Value unaryGrad(mlir::OpBuilder &b, mlir::Location loc, llvm::StringRef fn, mlir::Value x,
                      mlir::Value dy, std::optional<double> alpha = std::nullopt);

} // namespace colossal

#endif

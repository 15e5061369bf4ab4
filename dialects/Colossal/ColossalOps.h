//===- ColossalOps.h - ops of the colossal dialect ----------------*- C++ -*-===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_COLOSSALOPS_H
#define COLOSSAL_DIALECTS_COLOSSAL_COLOSSALOPS_H

#include "dialects/Colossal/ColossalAttrs.h"
#include "dialects/Colossal/ColossalDialect.h"
#include "dialects/Colossal/ShardingRule.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Colossal/ColossalInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Colossal/ColossalOps.h.inc"

namespace colossal {
/// The `colossal.mesh` of `op`'s module (`op` may be the module), or null when it has none.
MeshOp lookupMesh(mlir::Operation *op);
/// The number of ranks in the group over `axes` of the mesh of `op`'s module: nullopt when the
/// module has no mesh, -1 when an axis is not on it.
std::optional<int64_t> meshGroupSize(mlir::Operation *op, mlir::ArrayAttr axes);
/// isCompatibleReturnTypes of the ops that colossal-auto-mixed-precision lowers (matmul, gemm,
/// attention, conv): the inferred type, or the same shape in f32 when the operands are bf16 or f16
/// (computed in f32).
bool lowPrecisionResultsCompatible(mlir::TypeRange inferred, mlir::TypeRange actual);
/// An update op writes `v` in place, so `v` must be an entry-block argument of the enclosing
/// function marked colossal.param or colossal.state (a persistent tensor of the plan), or a
/// colossal.shard_view of one; otherwise an error on `op` naming operand `what`.
mlir::LogicalResult verifyStateOperand(mlir::Operation *op, mlir::Value v, llvm::StringRef what);
} // namespace colossal

#endif

//===- CostModel.h - sizes and FLOPs of colossal ops for the passes' cost models -*- C++ -*-===//
//
// One estimate shared by activation recompute (passes/Memory/Recompute.cpp) and the pipeline
// stage split (passes/Stages): bytes of a value, FLOPs of an op from its shapes.
//===-------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_PASSES_MEMORY_COSTMODEL_H
#define COLOSSAL_PASSES_MEMORY_COSTMODEL_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"

#include <cstdint>

namespace colossal {

/// Elements of a statically shaped ranked tensor type; 0 for anything else.
uint64_t numElements(mlir::Type type);
/// Bytes of a statically shaped ranked tensor type (sub-byte elements count one byte); 0 for
/// anything else.
uint64_t numBytes(mlir::Type type);
/// The forward FLOPs of one op: 2·M·N·K for a contraction (matmul, gemm), 4·B·H·Sq·Sk·D for
/// attention (halved when causal), 2·out·(Cin/groups·kernel) for a convolution, one per output
/// element for anything else.
uint64_t opFlops(mlir::Operation *op);

} // namespace colossal

#endif

//===- PlanCollector.h - @forward as an abstract program for the plan ---------*- C++ -*-===//
//
// The first stage of emitPlan(): one walk over `func.func @forward` that checks everything the
// plan cannot express (unknown ops, dynamic shapes, unsupported element types, unnamed arguments
// or results) and turns the function into tensors, pending instructions (via OpTable.h) and
// weights. Nothing is written and no memory is planned here.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_LIB_TARGET_PLAN_PLANCOLLECTOR_H
#define COLOSSAL_LIB_TARGET_PLAN_PLANCOLLECTOR_H

#include "plan.pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace colossal {

/// A static shape with a plan element type.
struct TensorType {
  plan::DType dtype = plan::DTYPE_INVALID;
  llvm::SmallVector<int64_t, 4> shape;
  uint64_t bytes = 0;
};

/// One buffer of the program: an argument, a constant, an op result or an output copy.
struct Tensor {
  std::string name;
  TensorType type;
  bool isWeight = false;
  bool isInput = false;
  int32_t aliasOf = -1;   // a reshape: the tensor whose bytes it reuses
  std::string weightName; // WEIGHT: safetensors key
};

/// One instruction, with buffer ids (indices into CollectedProgram::tensors).
struct PendingInstruction {
  std::string kernel;
  llvm::SmallVector<uint32_t, 4> inputs, outputs;
  std::vector<std::pair<std::string, plan::Attr>> attrs;
  std::string loc;
  bool inPlaceSafe = false;
};

/// One tensor of the weights file; `data` points into an attribute or into `materialized`.
struct Weight {
  std::string name;
  TensorType type;
  llvm::ArrayRef<char> data;
};

struct CollectedProgram {
  std::vector<Tensor> tensors;                               // buffer id = index
  std::vector<PendingInstruction> instructions;              // in execution order
  std::vector<Weight> weights;                               // parameters, then used constants
  std::vector<std::pair<std::string, uint32_t>> inputs;      // name -> tensor, argument order
  std::vector<std::pair<std::string, uint32_t>> outputs;     // name -> tensor, result order
  std::deque<std::vector<char>> materialized;                // bytes of splats and i1 weights
};

/// Fills `out` from `forward`. Output bindings that would share bytes with an input, a weight or
/// another output get a `copy` instruction and their own tensor. Errors are emitted on the
/// offending op (or on `forward` for arguments and results) and return failure.
mlir::LogicalResult collectProgram(mlir::func::FuncOp forward, CollectedProgram &out);

} // namespace colossal

#endif

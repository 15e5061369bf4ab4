//===- OpTable.h - how each colossal op becomes a plan instruction ------------*- C++ -*-===//
//
// The lowering of the colossal dialect to the plan's instruction set (docs/plan.md) as data: one
// row per op, naming the kernel, whether the kernel is in-place safe, and which inherent
// attributes travel to the instruction (under the same name). Operands and results map one to one,
// in order (absent optional operands are simply not there).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_LIB_TARGET_PLAN_OPTABLE_H
#define COLOSSAL_LIB_TARGET_PLAN_OPTABLE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace colossal {

struct OpLowering {
  enum class Kind {
    Kernel,   // one instruction running `kernel`
    Constant, // no instruction: a WEIGHT buffer holding the op's value
    Alias,    // no instruction: the result shares the operand's bytes (reshape)
    ChunkView, // no instruction: the result is this rank's dim-0 chunk of a STATE operand over
               // the op's `axes` (Buffer.state_chunk_axes), which an Update may write
    Update,   // one instruction with side effects and no results: it writes its leading operands
              // (persistent STATE tensors) in place, and lists them as its outputs
  };
  llvm::StringLiteral op;     // full op name, "colossal.add"
  Kind kind;
  llvm::StringLiteral kernel; // plan op name (Kind::Kernel)
  /// The kernel reads each input element before writing the output element at the same index, so
  /// the memory planner may give the output its first input's bytes.
  bool inPlaceSafe;
  /// Inherent attributes copied to the instruction: BoolAttr/IntegerAttr -> i, FloatAttr -> f,
  /// StringAttr -> s, DenseI64ArrayAttr -> ints, DenseF32/F64ArrayAttr -> floats.
  llvm::ArrayRef<llvm::StringLiteral> attrs;
  /// Use `copy` instead of `kernel` when the operand and result types are equal (Cast to the same
  /// element type).
  bool copyWhenSameType = false;
  /// Kind::Update: how many trailing operands are only read; the operands before them are
  /// written in place (the instruction's outputs, same buffer ids as those inputs).
  unsigned readOnlyTail = 0;
};

/// The row for `opName`, or nullptr when the plan cannot express the op.
const OpLowering *lookupOpLowering(llvm::StringRef opName);

/// Every row, for documentation and tests.
llvm::ArrayRef<OpLowering> opLowerings();

} // namespace colossal

#endif

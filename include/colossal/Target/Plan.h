//===- Plan.h - lowering to the runtime plan ------------------------*- C++ -*-===//
#ifndef COLOSSAL_TARGET_PLAN_H
#define COLOSSAL_TARGET_PLAN_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace colossal {

struct PlanOptions {
  std::string producer = "colossal-opt";
  std::string mode = "inference";
  // The ONNX model compiled, for `export --onnx`: recorded in Plan.train.source_model /
  // source_model_hash for every plan (an inference plan's TrainConfig holds only these two).
  std::string sourceModel;        // absolute path
  uint64_t sourceModelHash = 0;   // FNV-1a 64 of its bytes (runtime::fnv1a64File)
};

/// Lowers the module's `func.func @forward` (colossal dialect, static shapes) to a plan: plans
/// memory (liveness-based arena with reuse, in-place updates and zero-copy reshapes), writes the
/// weights as `<plan stem>.safetensors` beside `planPath` and the plan (runtime/plan/plan.proto)
/// to `planPath`. Both are written to temporary names and renamed, so a failure leaves nothing
/// half-written; a module without parameters or used constants gets no weights file (the plan's
/// `weights_file` is empty). Output is deterministic. When `report` is non-null, prints peak arena
/// bytes, weight bytes, the instruction count and the 10 largest arena buffers.
/// Errors (unknown op, dynamic shape, unsupported element type, unnamed argument or result, I/O)
/// are emitted as MLIR diagnostics on the offending op, or on @forward / the module.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, llvm::StringRef planPath,
                             const PlanOptions &options, llvm::raw_ostream *report);

} // namespace colossal

#endif

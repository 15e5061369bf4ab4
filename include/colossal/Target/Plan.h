//===- Plan.h - lowering to the runtime plan ------------------------*- C++ -*-===//
#ifndef COLOSSAL_TARGET_PLAN_H
#define COLOSSAL_TARGET_PLAN_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace colossal {

struct PlanOptions {
  std::string producer = "colossal-opt";
  std::string mode = "inference"; // "train" requires a train-mode module (and "inference" takes one)
  // The ONNX model compiled, for `export --onnx`: recorded in Plan.train.source_model /
  // source_model_hash for every plan (an inference plan's TrainConfig holds only these two).
  std::string sourceModel;        // absolute path
  uint64_t sourceModelHash = 0;   // FNV-1a 64 of its bytes (runtime::fnv1a64File)
  uint64_t specHash = 0;          // train plans: FNV-1a 64 of the spec file's bytes
  /// The spec's `train.inputs` (TrainConfig.data_inputs): one source for each name the module's
  /// `colossal.train` lists in `data_inputs`.
  struct DataInput {
    std::string name, kind, path; // kind: npy | normal | uniform_int; npy: absolute path
    double mean = 0, std = 1;
    int64_t low = 0, high = 0;
  };
  std::vector<DataInput> dataInputs;
  /// How `report` is written: "text" (the tables) or "json" (printPlanReportJson, one object).
  std::string reportFormat = "text";
  /// `memory.budget_mb` in bytes (0: none) and the smallest budget the compiler can meet with
  /// recompute (0: not computed), for the report's `memory` section.
  uint64_t memoryBudgetBytes = 0;
  uint64_t minimumBudgetBytes = 0;
  /// `memory.offload` as decided (none | optimizer | params; auto is resolved by the driver) and
  /// `memory.offload_dir` (empty: `<plan stem>.offload` beside the plan). Train plans only.
  std::string offloadMode = "none";
  std::string offloadDir;
  /// `--dump-schedule`: print the pipeline schedule (actions per stage) and the simulator's
  /// figures on stdout.
  bool dumpSchedule = false;
  /// `parallel.pipeline.schedule_file`: the hand-written schedule that replaces the generated
  /// one (checked by the simulator like any other). Empty: generated.
  std::string scheduleFile;
};

/// What one rank of a plan of `module` keeps in memory, as emitPlan's report counts it: the
/// persistent states (parameters, gradients, optimizer state; this rank's shards), read-only
/// weights (train: frozen parameters and constants; inference: every weight this rank reads) and
/// the largest program arena (programs run one at a time in one arena).
/// With offload, `stateBytes` counts the states that stay in fast memory, `offloadedBytes` those
/// in the slower tier and `residentChunkBytes` the most of them resident at once (the schedule
/// with the largest residency gap that fits `memoryBudgetBytes`).
struct MemoryPrediction {
  uint64_t stateBytes = 0, weightBytes = 0, arenaBytes = 0;
  uint64_t offloadedBytes = 0, residentChunkBytes = 0;
  uint64_t peakBytes() const { return stateBytes + weightBytes + arenaBytes + residentChunkBytes; }
};

/// Plans every program's memory as emitPlan() does (with `options`' offload and budget), writing
/// nothing. Errors as emitPlan's.
mlir::FailureOr<MemoryPrediction> predictMemory(mlir::ModuleOp module, const PlanOptions &options);

/// Lowers the module to a plan: `func.func @forward` becomes program "forward"; a train-mode module
/// (one with the `colossal.train` attribute) also lowers `@eval`, `@train_step` and
/// `@optimizer_step` (docs/training.md "Plan"), gets Plan.states (trainable parameters, gradient
/// accumulators, optimizer state; STATE buffers in every program), Plan.train (the TrainConfig,
/// from `colossal.train` and `options`) and mode "train". Plans each program's memory
/// (liveness-based arena with reuse, in-place updates and zero-copy reshapes; update ops keep
/// their order and write STATE buffers only), writes the weights as `<plan stem>.safetensors`
/// beside `planPath` (each parameter and distinct constant once, however many programs use it) and
/// the plan (runtime/plan/plan.proto) to `planPath`. Both are written to temporary names and
/// renamed, so a failure leaves nothing half-written; a module without parameters or used
/// constants gets no weights file (the plan's `weights_file` is empty). Output is deterministic.
/// When `report` is non-null, prints the memory report (PlanReport.h): for inference peak arena
/// bytes, weight bytes, the instruction count and the 10 largest arena buffers; for training also
/// the trainable parameters and the bytes of params, grads, optimizer state, activations and peak.
/// Errors (unknown op, dynamic shape, unsupported element type, unnamed argument or result, a
/// missing train function, an update op writing a non-state, an inconsistent `colossal.train`,
/// I/O) are emitted as MLIR diagnostics on the offending op, or on the function / the module.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, llvm::StringRef planPath,
                             const PlanOptions &options, llvm::raw_ostream *report);

} // namespace colossal

#endif

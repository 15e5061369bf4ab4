//===- ColossalDialect.h - the colossal dialect -------------------*- C++ -*-===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_COLOSSALDIALECT_H
#define COLOSSAL_DIALECTS_COLOSSAL_COLOSSALDIALECT_H

#include "mlir/IR/Dialect.h"

#include <optional>

#include "dialects/Colossal/ColossalDialect.h.inc"

namespace colossal {
/// What a mesh axis does (`colossal.mesh` roles; plan.proto MeshAxis.Role). The one place that
/// maps role names to meanings: passes and the plan emitter ask the mesh for axes by role.
enum class AxisRole { Data, Tensor, Pipeline, GridRow, GridCol, GridDepth };
/// "data", "tensor", "pipeline", "grid_row", "grid_col", "grid_depth".
llvm::StringRef axisRoleName(AxisRole role);
/// The role named `name`, or nullopt.
std::optional<AxisRole> parseAxisRole(llvm::StringRef name);

/// Argument/result attribute names on the model's `func.func @forward`.
inline constexpr llvm::StringLiteral kParamAttr = "colossal.param";   // StringAttr: parameter name
inline constexpr llvm::StringLiteral kValueAttr = "colossal.value";   // ElementsAttr: its data
inline constexpr llvm::StringLiteral kInputAttr = "colossal.input";   // StringAttr: input name
inline constexpr llvm::StringLiteral kOutputAttr = "colossal.output"; // StringAttr: output name
// Training (docs/training.md): a persistent tensor other than a parameter ("<p>.grad",
// "<p>.exp_avg", ...), the ONNX tensor a parameter came from, and the module's TrainConfig.
inline constexpr llvm::StringLiteral kStateAttr = "colossal.state";   // StringAttr: state name
inline constexpr llvm::StringLiteral kSourceAttr = "colossal.source"; // StringAttr: ONNX name
inline constexpr llvm::StringLiteral kTrainAttr = "colossal.train";   // DictionaryAttr (module)
/// Shardings (docs/parallelism.md "IR after colossal-spmd-partition"): on a function argument,
/// the `#colossal.sharding` of the global tensor whose local shard the argument is; on an op (the
/// partitioner's `stage=propagate` output), its result's sharding, or an ArrayAttr of one per
/// result. Checked by the dialect against the mesh and the value's type.
inline constexpr llvm::StringLiteral kShardingAttr = "colossal.sharding";
/// The module's ONNX opset (IntegerAttr) and file name (StringAttr, kSourceAttr).
inline constexpr llvm::StringLiteral kOpsetAttr = "colossal.opset";
/// The programs of a module (docs/plan.md "Programs") and what each is for: the function attribute
/// `colossal.program = "<role>"` (checked by the dialect: a known role, one function per role, each
/// argument at most one of param/state/input) and plan.proto's Program.role. Passes and the plan
/// emitter find programs by role (Programs.h lookupProgram), never by symbol name.
///   forward         the model: inputs -> outputs, at the global batch
///   microbatch      train mode, dp x grad_accum > 1: the program of one row block of
///                   B / (dp x grad_accum) rows (colossal-split-batch), which colossal-append-loss
///                   turns into eval and train_step (and then erases)
///   eval            the loss of one row block, without gradients
///   train_step      one row block's loss and its gradients, accumulated into <p>.grad
///   optimizer_step  the update of every parameter from the accumulated gradients
/// Stage roles (pipeline parallelism, colossal-split-pipeline-stages): one stage's forward,
/// backward and optimizer programs, the stage in the function's `colossal.stage`; under the
/// zero-bubble schedules the backward computes the input gradients (B) and stage_backward_weight
/// the weight gradients (W).
///   generate        mode generate (colossal-generate): one step of a ragged batch of `colossal.tokens`
///                   token rows over the paged KV cache; one program per token count
enum class ProgramRole {
  Forward,
  Microbatch,
  Eval,
  TrainStep,
  OptimizerStep,
  StageForward,
  StageBackward,
  StageOptimizer,
  StageBackwardWeight,
  Generate
};
/// "forward", "microbatch", "eval", "train_step", "optimizer_step", "stage_forward",
/// "stage_backward", "stage_optimizer", "stage_backward_weight", "generate".
llvm::StringRef programRoleName(ProgramRole role);
/// The role named `name`, or nullopt.
std::optional<ProgramRole> parseProgramRole(llvm::StringRef name);
/// The symbol a pass gives the function it creates for `role` ("forward_microbatch" for
/// microbatch, the role's name otherwise).
llvm::StringRef programSymbol(ProgramRole role);
inline constexpr llvm::StringLiteral kProgramAttr = "colossal.program"; // StringAttr: the role
/// Pipeline parallelism: an op's or a stage program's stage (IntegerAttr i64), and the module's
/// record of the split and schedule (DictionaryAttr; Passes.td "AssignPipelineStages").
inline constexpr llvm::StringLiteral kStageAttr = "colossal.stage";
inline constexpr llvm::StringLiteral kPipelineAttr = "colossal.pipeline";
/// Mode generate: a generate program's token rows (IntegerAttr i64), and the module's record of
/// the serving configuration and the KV cache (DictionaryAttr; Passes.td "Generate").
inline constexpr llvm::StringLiteral kTokensAttr = "colossal.tokens";
inline constexpr llvm::StringLiteral kGenerateAttr = "colossal.generate";
/// Train mode (module): the model's weight-like tensors (initializers, float Constant nodes) that
/// the importer kept as constants, and why: ArrayAttr of {name: StringAttr, type: TypeAttr,
/// why: StringAttr}, in model order. Read by `--report` and by autodiff's "no trainable
/// parameter" error (docs/training.md "Which initializers train").
inline constexpr llvm::StringLiteral kConstantWeightsAttr = "colossal.constant_weights";
} // namespace colossal

#endif

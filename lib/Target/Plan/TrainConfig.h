//===- TrainConfig.h - Plan.train from the module's `colossal.train` -----------*- C++ -*-===//
#ifndef COLOSSAL_LIB_TARGET_PLAN_TRAINCONFIG_H
#define COLOSSAL_LIB_TARGET_PLAN_TRAINCONFIG_H

#include "PlanCollector.h"

#include "colossal/Target/Plan.h"

#include "plan.pb.h"

#include "mlir/IR/BuiltinOps.h"

namespace colossal {

/// Fills the TrainConfig (runtime/plan/plan.proto) of a train-mode module.
///
/// `colossal.train` (docs/training.md "Module attribute") is a dictionary whose keys are
/// TrainConfig field names: strings as StringAttr, integers as IntegerAttr, reals as FloatAttr (or
/// IntegerAttr); keys that are no TrainConfig field are ignored (they are for the passes).
/// `tokens_input`, `labels_input`, `optimizer` and `lr` are required. The shape fields are
/// derived from the programs when absent, and checked against them when present:
/// `global_batch` and `seq_len` from @forward's `tokens_input` [B, T], `grad_accum` from
/// B / (@train_step's rows), `vocab_size` from the last dim of @forward's `logits_output`.
/// `lr_schedule` defaults to "constant". `source_model`, `source_model_hash` and `spec_hash` come
/// from `options`. Errors (missing or mistyped key, a name no program binds, a shape mismatch)
/// are emitted on the module and return failure.
mlir::LogicalResult collectTrainConfig(mlir::ModuleOp module, const CollectedModule &collected,
                                       const PlanOptions &options, plan::TrainConfig &config);

} // namespace colossal

#endif

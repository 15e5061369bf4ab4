//===- PlanCollector.h - the module's functions as abstract programs ----------*- C++ -*-===//
//
// The first stage of emitPlan(): one walk over each function the plan holds (`@forward`; in a
// train-mode module also `@eval`, `@train_step`, `@optimizer_step`, docs/training.md) that checks
// everything the plan cannot express (unknown ops, dynamic shapes, unsupported element types,
// unnamed arguments or results, update ops writing anything but a persistent tensor) and turns
// each function into tensors, pending instructions (via OpTable.h), and the module into one set of
// weights (each parameter and each distinct constant stored once) and persistent states. Nothing
// is written and no memory is planned here.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_LIB_TARGET_PLAN_PLANCOLLECTOR_H
#define COLOSSAL_LIB_TARGET_PLAN_PLANCOLLECTOR_H

#include "plan.pb.h"

#include "dialects/Colossal/Programs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <deque>
#include <optional>
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
  bool isState = false;   // a persistent tensor of Plan.states (STATE storage)
  bool isInput = false;
  int32_t aliasOf = -1;   // a reshape: the tensor whose bytes it reuses
  std::string weightName; // WEIGHT: safetensors key
  std::string stateName;  // STATE: Plan.states name
  std::optional<plan::Sharding> sharding; // WEIGHT split over the mesh (its view's too): Buffer.sharding
  std::vector<std::string> chunkAxes;     // STATE: this rank's dim-0 chunk over these axes (shard_view)
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

/// One function lowered to a program.
struct CollectedProgram {
  std::string name;                                          // "forward", "train_step", ...
  ProgramRole role;
  int64_t stage = -1;                                        // stage roles: the pipeline stage
  mlir::func::FuncOp func;
  std::vector<Tensor> tensors;                               // buffer id = index
  std::vector<PendingInstruction> instructions;              // in execution order
  std::vector<std::pair<std::string, uint32_t>> inputs;      // name -> tensor, argument order
  std::vector<std::pair<std::string, uint32_t>> outputs;     // name -> tensor, result order
};

/// A trainable parameter (train mode): its STATE tensor is `state`, its initial value the weight
/// of the same name.
struct TrainableParam {
  std::string name;
  TensorType type;
  uint64_t count = 0; // elements
  bool buffer = false; // written by update_buffer only (BatchNorm's running statistics), not trained
};

/// The whole module: its programs and what they share.
struct CollectedModule {
  bool train = false;                         // the module carries `colossal.train`
  std::vector<CollectedProgram> programs;     // in plan order (forward first)
  std::vector<Weight> weights;                // parameters (first use order), then constants
  std::vector<plan::StateTensor> states;      // train mode: Plan.states, first use order
  std::vector<TrainableParam> trainable;      // train mode: the PARAM states, in `states` order
  std::vector<std::string> frozen;            // train mode: parameters that stay WEIGHTs
  std::deque<std::vector<char>> materialized; // bytes of splats and i1 weights
};

/// The programs a plan holds, in order: forward for an inference module; forward, eval,
/// train_step, optimizer_step for a train-mode one (docs/training.md "Plan").
llvm::ArrayRef<ProgramRole> programRoles(bool train);

/// Fills `out` from `module`. A module is in train mode when it carries the `colossal.train`
/// attribute; then a program of every role of programRoles(true) must exist, and:
///  - a `colossal.param` argument is a trainable parameter (STATE buffer, StateTensor role PARAM
///    with init_weight = its weights key and source = its `colossal.source`) when some function
///    holds its gradient accumulator `"<p>.grad"` or an update op writes it; otherwise it is
///    frozen and stays a WEIGHT;
///  - a `colossal.state = "NAME"` argument is a STATE buffer of StateTensor NAME (role GRAD for
///    `"<p>.grad"`, OPTIMIZER for the others; `param` = p, which must be a trainable parameter);
///  - an update op (OpTable.h Kind::Update) lists the STATE buffers it writes as its outputs;
///  - a `colossal.sharding` argument (docs/parallelism.md "IR after colossal-spmd-partition") has
///    a local type and a global `colossal.value`: the weights file gets the global tensor, the
///    WEIGHT buffer or StateTensor the sharding (global dim = local dim x the group size of its
///    axes on the module's `colossal.mesh_axes` / `colossal.mesh_shape`); a GRAD or OPTIMIZER
///    state without its own takes its parameter's when it has the parameter's local shape.
/// Parameters and states with one name must have one type in every function; a parameter's
/// `colossal.value` may appear on one or several of its arguments, but must be the same on all.
/// Output bindings that would share bytes with an input, a weight, a state or another output get
/// a `copy` instruction and their own tensor. Errors are emitted on the offending op (or on the
/// function for arguments and results, or on the module) and return failure.
mlir::LogicalResult collectModule(mlir::ModuleOp module, CollectedModule &out);

} // namespace colossal

#endif

//===- OnnxExport.h - Write trained parameters back into the source ONNX model --*- C++ -*-===//
//
// `colossal-run M.cplan export --onnx OUT.onnx [--checkpoint DIR]` (docs/training.md): copies the
// ONNX model the plan was compiled from (TrainConfig.source_model, checked against
// source_model_hash), replaces the initializer behind each PARAM state (StateTensor.source) by the
// given values, makes every weight inline and writes OUT.onnx atomically. The exported model runs
// in any ONNX runtime with the trained weights.
//
// Kept independent of the training loop's state store: values come through a callback, so the
// plan's initial weights, a checkpoint's model.safetensors or live training state all fit.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_ONNXEXPORT_H
#define COLOSSAL_RUNTIME_ONNXEXPORT_H

#include "colossal/runtime/DType.h"
#include "colossal/runtime/Plan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>

namespace colossal::runtime {

/// A parameter value to export: `sizeBytes` little-endian bytes of `dtype` with shape `shape`,
/// borrowed (must stay valid until exportOnnx returns).
struct ParamValue {
  DType dtype = DType::Invalid;
  llvm::ArrayRef<int64_t> shape;
  const void *data = nullptr;
  size_t sizeBytes = 0;
};

/// Gives the current value of the PARAM state named `param` (StateTensor.name), or an error naming
/// where it looked (e.g. "DIR/model.safetensors: no tensor 'w'").
using ParamLookup = llvm::function_ref<llvm::Expected<ParamValue>(llvm::StringRef param)>;

/// The largest model protobuf can serialize and parse (2 GiB - 1 bytes: its sizes are int32).
constexpr uint64_t kMaxOnnxModelBytes = 0x7fffffffULL;

/// Exports `plan` with the parameter values from `lookup` as a self-contained ONNX model at
/// `outPath`.
///
/// Steps: reads `plan.train().source_model` (the absolute path recorded at compilation) and checks
/// its FNV-1a 64 against `source_model_hash`; parses it (onnx::ModelProto); for each PARAM state
/// (in Plan.states order) takes `lookup(name)` and
///   - `source` names a main-graph initializer: replaces its data by the value (raw_data);
///   - `source` is the output of a main-graph `Constant` node with a `value` tensor (paddle2onnx
///     keeps weights that way; docs/training.md "Which initializers train"): replaces that
///     tensor's data, the node stays a Constant;
///   - `source` is the output of an `Identity` whose input is either of those (torch's
///     exporter ties equal weights that way): adds a new initializer named `source` (the original's
///     data type and dims, the value as raw_data) and removes that Identity node, so the two tied
///     copies become independent initializers (DESIGN.md parameter rule);
/// then rewrites every tensor still stored as external data (initializers, sparse initializers and
/// tensor attributes, in subgraphs too; locations relative to the model's folder, never outside it)
/// as inline raw_data, and writes the serialized model to `outPath` through a temporary file and a
/// rename (support/AtomicFile.h): `outPath` is either untouched or complete.
///
/// Value checks: dtype == the state's dtype == the initializer's ONNX data type (float32 ->
/// FLOAT, float16 -> FLOAT16, bfloat16 -> BFLOAT16, float64 -> DOUBLE), shape == the state's shape
/// == the initializer's dims, sizeBytes == numel * dtype size.
///
/// Errors (one llvm::Error; messages name the plan, model, state or tensor concerned): the plan
/// records no source model; the model is missing or unreadable; its hash differs ("the model
/// changed since compilation"); it does not parse; `outPath` is the source model or one of its
/// external data files, the plan, the plan's weights file, or an existing directory; a PARAM state without a `source`, or whose source is neither an
/// initializer or Constant nor an Identity of one, or whose new initializer name is already taken; `lookup`
/// fails (a checkpoint tensor missing) or gives a mismatched dtype/shape/size; unreadable or
/// out-of-range external data; an exported model over kMaxOnnxModelBytes (protobuf's limit);
/// I/O failures writing `outPath`.
///
/// `inference` (`export --inference`): the model for inference: every main-graph
/// BatchNormalization with training_mode = 1 (torch's TrainingMode.TRAINING export) gets
/// training_mode = 0 and keeps only its output Y, so it normalises with the (exported) running
/// statistics, as torch's eval mode; an error names a node whose dropped outputs the graph reads.
llvm::Error exportOnnx(const LoadedPlan &plan, ParamLookup lookup, llvm::StringRef outPath, bool inference = false);

/// The checkpoint step folder `dir` designates: `dir` itself when it holds manifest.json, else the
/// folder named by the one line of `dir/latest` (relative to `dir`). Errors name the path.
llvm::Expected<std::string> resolveCheckpointDir(llvm::StringRef dir);

/// `colossal-run M.cplan export`: exportOnnx() with the values of the plan's initial weights
/// (each PARAM's `init_weight` in the plan's weights file) when `checkpointDir` is empty, else
/// those of the checkpoint, loaded through loadCheckpoint() (Checkpoint.h: manifest sizes and
/// FNV-1a hashes, tensor names, dtypes and shapes verified, with its error messages). Refuses an
/// `outPath` that is a file of the checkpoint (its step folder's files or DIR/latest); exportOnnx()
/// also refuses the plan, its weights file and an existing directory. A checkpoint tensor holding
/// NaN or ±inf is refused unless `allowNonFinite` (loadCheckpoint). `inference` as exportOnnx's.
llvm::Error exportOnnxCommand(const LoadedPlan &plan, llvm::StringRef checkpointDir,
                              llvm::StringRef outPath, bool allowNonFinite = false, bool inference = false);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_ONNXEXPORT_H

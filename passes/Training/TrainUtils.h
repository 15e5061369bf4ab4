//===- TrainUtils.h - shared helpers of the training passes -------*- C++ -*-===//
//
// Argument lookup by marker attribute, the `colossal.train` module dictionary, and the regexes of
// `frozen` / `no_decay` (docs/training.md "Spec").
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_PASSES_TRAINING_TRAINUTILS_H
#define COLOSSAL_PASSES_TRAINING_TRAINUTILS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Regex.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace colossal::training {

/// The value of string attribute `attr` on argument `i` of `fn`, or "" when absent.
llvm::StringRef argMarker(mlir::func::FuncOp fn, unsigned i, llvm::StringRef attr);

/// The index of the argument of `fn` whose string attribute `attr` equals `name`.
std::optional<unsigned> findArg(mlir::func::FuncOp fn, llvm::StringRef attr, llvm::StringRef name);

/// The index of the result of `fn` whose `colossal.output` equals `name`.
std::optional<unsigned> findOutput(mlir::func::FuncOp fn, llvm::StringRef name);

/// Merges `entries` into the module's `colossal.train` dictionary (later entries win).
void updateTrainConfig(mlir::ModuleOp module, llvm::ArrayRef<mlir::NamedAttribute> entries);

/// The module's `colossal.train` dictionary (empty when absent).
mlir::DictionaryAttr trainConfig(mlir::ModuleOp module);

/// Erases the ops of `fn`'s body that are trivially dead (no uses, no side effects), last first,
/// so whole chains feeding nothing go.
void eraseDeadOps(mlir::func::FuncOp fn);

/// The regexes of a `frozen` / `no-decay` option, each matched against whole names: a parameter
/// matches when the regex matches its name or the ONNX node name (a NameLoc in the location) of
/// any op that consumes it in `@forward` (torch renames transposed weights to `onnx::MatMul_N`,
/// but the consuming node keeps its module path, e.g. `/blocks.0/attn/qkv/MatMul`).
class ParamPatterns {
public:
  /// Compiles `patterns` (POSIX extended); on a bad one emits an error on `module` naming it and
  /// `option` and returns failure.
  static mlir::FailureOr<ParamPatterns> compile(mlir::ModuleOp module, llvm::StringRef option,
                                                llvm::ArrayRef<std::string> patterns);

  /// Whether parameter `name` matches some regex; records which regexes matched.
  bool matches(mlir::func::FuncOp forward, llvm::StringRef name);

  /// Emits an error on `module` for the first regex that matched no parameter.
  mlir::LogicalResult checkAllUsed(mlir::ModuleOp module) const;

private:
  std::string option;
  std::vector<std::string> sources;
  std::vector<std::shared_ptr<llvm::Regex>> regexes;
  std::vector<bool> used;
};

} // namespace colossal::training

#endif

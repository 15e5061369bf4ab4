//===- ONNX.h - ONNX model importer ---------------------------------*- C++ -*-===//
#ifndef COLOSSAL_IMPORT_ONNX_H
#define COLOSSAL_IMPORT_ONNX_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"
#include <string>
#include <vector>

namespace colossal {

struct ImportOptions {
  /// Global shapes for graph inputs; they bind the inputs' dynamic (symbolic) dims.
  llvm::StringMap<std::vector<int64_t>> inputShapes;
  /// Inputs bound to constant values at compile time (NAME -> .npy file).
  llvm::StringMap<std::string> inputValues;
  /// Train mode (docs/training.md): every `Identity` of a float parameter initializer becomes a
  /// parameter of its own, named after the Identity's output, and every parameter argument
  /// carries `colossal.source` (the initializer's or the Identity output's name). Off: an
  /// Identity of an initializer resolves to the initializer's own parameter (inference).
  bool trainParams = false;
  /// Mode generate (colossal-generate): every integer input of rank 2 that inputShapes and
  /// inputValues leave unbound (token ids, position ids) is imported as [1, tokenRows], one
  /// sequence of tokenRows positions; a dim the model fixes keeps its size. 0: off.
  int64_t tokenRows = 0;
  /// When set, importONNX sets *failedAtNode when its error names a node (a node whose shapes
  /// fail), as opposed to a file-, input- or initializer-level error.
  bool *failedAtNode = nullptr;
};

/// Imports an ONNX model (opsets 7..21, default domain) into a module holding `func.func @forward`
/// in the colossal dialect. Initializers become parameters (arguments marked `colossal.param`
/// with their data in `colossal.value`); float initializers with a single element, and integer or
/// bool ones, become constants. Shape arithmetic is folded while importing.
///
/// Errors are printed to stderr as `error: MODEL.onnx: node 'NAME' (OpType, opset N): reason`
/// (or `error: MODEL.onnx: reason` for file-level problems); the result is then null.
mlir::OwningOpRef<mlir::ModuleOp> importONNX(llvm::StringRef path, const ImportOptions &options,
                                             mlir::MLIRContext &context);

} // namespace colossal

#endif

//===- ExternalData.h - Reading an ONNX tensor's external data, confined to its model --*- C++ -*-===//
//
// ONNX stores large tensors outside the model file (onnx.proto TensorProto.external_data, "External
// Data" in the ONNX IR spec): key/value entries `location` (a path relative to the model's folder),
// `offset` and `length` (bytes, decimal). The importer (lib/Import/ONNX) and `colossal-run export
// --onnx` (runtime/checkpoint/OnnxExport.cpp) both read it through here, so that one rule decides
// which files a model may make us read:
//
//   the location is relative, and its real path (symlinks and `..` resolved) lies inside the real
//   path of the model's folder, or inside the folder of the model file's own real path.
//
// The second folder admits the Hugging Face hub cache, where `snapshots/REV/model.onnx` and
// `model.onnx_data` are both symlinks into one `blobs/` folder; onnxruntime (1.24 and later)
// accepts the same two folders. A symlink, or a path through a symlinked folder, that leaves both
// is refused, as is anything that is not a regular file.
//
// No onnx_proto dependency: callers pass the entries as (key, value) pairs.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_EXTERNALDATA_H
#define COLOSSAL_RUNTIME_EXTERNALDATA_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace colossal::runtime {

/// Where one tensor's bytes lie: `length` bytes (absent: to the end of the file) from `offset`.
struct ExternalDataRef {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

/// Reads the entries `location`, `offset` and `length` (other keys, such as `checksum`, are
/// ignored). Errors, each naming the key and its text: no location; an offset or length that is
/// negative ("is negative"), not a decimal integer ("is not a number"), or above 2^63-1 ("is too
/// large").
llvm::Expected<ExternalDataRef>
parseExternalDataRef(llvm::ArrayRef<std::pair<llvm::StringRef, llvm::StringRef>> entries);

/// The bytes `ref` names for a tensor of the model at `modelPath` (exactly `ref.length` bytes when
/// given). Errors: an absolute location; a location whose real path lies outside the model's
/// folders (the rule above; the message gives both real paths); a file that cannot be opened or is
/// not a regular file; a range past the end of the file. Messages do not name the model or tensor:
/// callers prefix them.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> readExternalData(llvm::StringRef modelPath,
                                                                     const ExternalDataRef &ref);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_EXTERNALDATA_H

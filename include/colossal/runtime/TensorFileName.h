//===- TensorFileName.h - Tensor names as file names, without collisions ---------*- C++ -*-===//
//
// colossal-run writes a tensor NAME (a program output, a state under --dump-states) to a file of
// its own; ONNX names may hold any bytes ('/' and ':' are common: `dense/BiasAdd:0`). The mapping
// (docs/cli.md "Output files"):
//
//   - bytes in [A-Za-z0-9_-] and '.' stay; every other byte, '%' itself and a leading '.' become
//     %XX (two uppercase hex digits), as in URL percent-encoding: `a/b` → `a%2Fb`, `a:b` → `a%3Ab`,
//     `a_b` → `a_b`, `.hidden` → `%2Ehidden`; the empty name → `%`. No result starts with '.', so
//     none is hidden, `.` or `..`; decoding %XX gives the name back.
//   - a result that would be longer than 255 bytes (NAME_MAX) with its suffix keeps the first
//     bytes of the escaped name (never splitting an escape), then `~` and the first 16 hex digits
//     of the SHA-256 of the name, then the suffix. `~` is escaped everywhere else, so a shortened
//     name never equals an unshortened one.
//
// The mapping is injective up to a 64-bit hash prefix among shortened names; tensorFileNames
// checks a whole set and reports the (astronomically unlikely) clash instead of overwriting.
// test/e2e/e2e_util.py (tensor_file_name) and test/e2e/npy.js (tensorFileName) implement the same
// mapping for the test scripts.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TENSORFILENAME_H
#define COLOSSAL_RUNTIME_TENSORFILENAME_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace colossal::runtime {

/// The longest file name the mapping produces (POSIX NAME_MAX on Linux and macOS).
inline constexpr size_t kMaxFileNameBytes = 255;

/// The file name (no folder) of tensor `name` with `suffix` (e.g. ".npy", at most 64 bytes of
/// [A-Za-z0-9._-]) appended, by the mapping above.
std::string tensorFileName(llvm::StringRef name, llvm::StringRef suffix);

/// tensorFileName of each of `names`, in order. Error when two names give one file (only shortened
/// names whose hashes agree can): "WHAT 'A' and 'B' both map to FILE".
llvm::Expected<std::vector<std::string>> tensorFileNames(llvm::ArrayRef<std::string> names,
                                                         llvm::StringRef suffix,
                                                         llvm::StringRef what);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_TENSORFILENAME_H

//===- Spec.h - the parallelization spec file -----------------------*- C++ -*-===//
#ifndef COLOSSAL_SPEC_SPEC_H
#define COLOSSAL_SPEC_SPEC_H

#include "llvm/Support/Error.h"
#include <string>
#include <utility>
#include <vector>

namespace colossal {

/// The parsed spec (DESIGN.md "Spec file"). Only what the compiler implements is represented;
/// every other key the format defines is rejected by the parser as "not supported yet".
struct Spec {
  std::string mode = "inference";
  std::vector<std::pair<std::string, std::vector<int64_t>>> inputs; // global shapes
  std::vector<std::pair<std::string, std::string>> values;          // NAME -> .npy path
  std::string passes;                                               // replaces the pipeline
};

/// Parses `path` with LLVM's YAML I/O. Unknown keys and bad values are errors that carry
/// `path:line:col`; known-but-unimplemented keys or values are "not supported yet" errors.
/// Relative `values` paths are resolved against the spec's folder.
llvm::Expected<Spec> parseSpecFile(llvm::StringRef path);

/// The textual pass pipeline the spec generates (what --dump-pass-pipeline prints).
std::string defaultPipeline(const Spec &spec);

} // namespace colossal

#endif

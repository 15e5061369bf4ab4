//===- Generate.h - colossal-run MODEL.cplan generate ---------------------------*- C++ -*-===//
//
// Offline generation with a `mode: generate` plan (docs/serving.md "colossal-run generate"):
// one prompt streamed as text, or a file of requests run together through the continuous-batching
// scheduler. Its options live in Generate.cpp (category "generate options"); --prompt,
// --temperature, --seed and --tokenizer are main.cpp's, shared with `sample`.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_TOOLS_COLOSSAL_RUN_GENERATE_H
#define COLOSSAL_TOOLS_COLOSSAL_RUN_GENERATE_H

#include "colossal/runtime/Device.h"
#include "colossal/runtime/Plan.h"

#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace colossal::runtime {
class CommContext;
}

namespace colossal::tools {

/// The options main.cpp shares with `sample`.
struct SharedGenerateOptions {
  std::optional<std::string> prompt;  // --prompt, when given
  double temperature = 0;             // --temperature (0: greedy)
  uint64_t seed = 0;                  // --seed
  std::string tokenizer;              // --tokenizer (shared with sample and tokenize)
};

llvm::cl::OptionCategory &generateCategory();
/// The options only `generate` takes (checkModeOptions refuses them elsewhere).
std::vector<llvm::cl::Option *> generateOnlyOptions();

/// `serve` (Serve.cpp): its options, and the server over the plan until SIGINT / SIGTERM.
llvm::cl::OptionCategory &serveCategory();
std::vector<llvm::cl::Option *> serveOnlyOptions();
int serveMain(const runtime::LoadedPlan &plan, runtime::Device &device, runtime::CommContext &comm,
              const std::string &tokenizerPath);

/// Runs `generate`; returns the process exit status (errors printed as "error: ...").
int generateMain(const runtime::LoadedPlan &plan, runtime::Device &device, runtime::CommContext &comm,
                 const SharedGenerateOptions &shared);

}  // namespace colossal::tools

#endif

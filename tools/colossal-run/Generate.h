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
#include "colossal/runtime/serve/Scheduler.h"

#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace colossal::runtime {
class CommContext;
namespace serve {
class StepModel;
struct SchedulerConfig;
}
}  // namespace colossal::runtime

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

/// The scheduler flags `generate` and `serve` share: --max-batch-tokens, --max-batch-seqs,
/// --kv-blocks (each at most the plan's) and --no-prefix-caching.
std::vector<llvm::cl::Option *> schedulerOptions();
/// The plan's scheduler configuration with those flags applied. Errors: a flag outside [1, the
/// plan's value], naming both.
llvm::Expected<runtime::serve::SchedulerConfig> schedulerConfig(runtime::serve::SchedulerConfig config);
/// --speculative and its options (Speculative.cpp), taken by `generate` and `serve`.
llvm::cl::OptionCategory &speculativeCategory();
std::vector<llvm::cl::Option *> speculativeOptions();

/// What --speculative sets up for a target plan: the drafter, and for `draft` the draft plan and
/// the PlanModel that runs it. Empty (no drafter) without --speculative.
struct SpeculativeSetup {
  std::unique_ptr<runtime::LoadedPlan> draftPlan;
  std::unique_ptr<runtime::serve::StepModel> draftModel;
  std::unique_ptr<runtime::serve::Drafter> drafter;
  runtime::serve::SpeculativeConfig config;  // what the scheduler takes
  std::string description;                   // "ngram (K 4, n 1..4)", for the summary line
};
/// Errors (each naming the flag, or the files and numbers): an option of --speculative without
/// it, an unknown method, K missing or < 1, K + 1 above the target's largest program, --draft-plan
/// missing or given to ngram, a draft plan that does not load, is not a generate plan, or whose
/// vocabulary or max_seq_len does not fit the target's.
llvm::Expected<SpeculativeSetup> setupSpeculative(const runtime::LoadedPlan &target,
                                                  const runtime::serve::SchedulerConfig &targetConfig,
                                                  int64_t targetLargestProgram, runtime::Device &device,
                                                  runtime::CommContext &comm);
/// "speculative ngram (K 4, n 1..4): 412 of 560 drafts accepted (73.6%), 2.31 tokens per
/// verification (240 verifications)".
std::string speculativeSummary(const SpeculativeSetup &setup, const runtime::serve::SpeculativeStats &stats);

/// `serve` (Serve.cpp): its options, and the server over the plan until SIGINT / SIGTERM.
llvm::cl::OptionCategory &serveCategory();
std::vector<llvm::cl::Option *> serveOnlyOptions();
int serveMain(const runtime::LoadedPlan &plan, runtime::Device &device, runtime::CommContext &comm,
              const std::string &tokenizerPath);

/// Runs `generate`; returns the process exit status (errors printed as "error: ...").
int generateMain(const runtime::LoadedPlan &plan, runtime::Device &device, runtime::CommContext &comm,
                 const SharedGenerateOptions &shared);

/// Ranks 1..P−1 of a tensor-parallel generate plan (`generate` and `serve`): runs rank 0's steps
/// on `model` until it stops (PlanModel.h followSteps); an error is printed with the rank.
int followMain(runtime::serve::StepModel &model, runtime::CommContext &comm);

}  // namespace colossal::tools

#endif

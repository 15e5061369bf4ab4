//===- Speculative.cpp - colossal-run's --speculative for generate and serve ----------------===//
//
// Generate.h. The drafters and the acceptance rule are runtime/serve/Speculative.cpp; this file
// turns the flags into one of them, loading and checking a draft plan for `--speculative draft`.
//
//===----------------------------------------------------------------------------------------===//
#include "Generate.h"

#include "colossal/runtime/Mesh.h"
#include "colossal/runtime/serve/PlanModel.h"
#include "colossal/runtime/serve/Speculative.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace colossal::tools {
namespace {

namespace cl = llvm::cl;
using namespace colossal::runtime;
using namespace colossal::runtime::serve;

cl::OptionCategory &category() {
  static cl::OptionCategory c("speculative decoding options (generate and serve)");
  return c;
}

cl::opt<std::string> method("speculative",
                            cl::desc("Speculative decoding: ngram (prompt lookup) or draft (a draft model's plan)"),
                            cl::value_desc("ngram|draft"), cl::cat(category()));
cl::opt<int> numTokens("num-speculative-tokens", cl::desc("Draft tokens K proposed per verification (K >= 1)"),
                       cl::init(-1), cl::cat(category()));
cl::opt<int> ngramMax("ngram-max", cl::desc("--speculative ngram: the longest suffix looked up (default 4)"),
                      cl::init(4), cl::cat(category()));
cl::opt<int> ngramMin("ngram-min", cl::desc("--speculative ngram: the shortest suffix looked up (default 1)"),
                      cl::init(1), cl::cat(category()));
cl::opt<std::string> draftPlan("draft-plan",
                               cl::desc("--speculative draft: the draft model, a generate plan of the same vocabulary"),
                               cl::value_desc("D.cplan"), cl::cat(category()));

llvm::Error error(const llvm::Twine &msg) { return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str()); }

}  // namespace

llvm::cl::OptionCategory &speculativeCategory() { return category(); }

std::vector<llvm::cl::Option *> speculativeOptions() { return {&method, &numTokens, &ngramMax, &ngramMin, &draftPlan}; }

llvm::Expected<SpeculativeSetup> setupSpeculative(const LoadedPlan &target, const SchedulerConfig &targetConfig,
                                                  int64_t targetLargestProgram, Device &device, CommContext &comm) {
  SpeculativeSetup setup;
  if (method.empty()) {
    for (cl::Option *o : {static_cast<cl::Option *>(&numTokens), static_cast<cl::Option *>(&ngramMax),
                          static_cast<cl::Option *>(&ngramMin), static_cast<cl::Option *>(&draftPlan)})
      if (o->getNumOccurrences())
        return error("--" + o->ArgStr + " is an option of speculative decoding: give --speculative ngram|draft");
    return setup;
  }
  if (method != "ngram" && method != "draft")
    return error("--speculative '" + method + "': the methods are ngram and draft");
  if (numTokens.getNumOccurrences() == 0)
    return error("--speculative " + method + " needs --num-speculative-tokens K (K >= 1)");
  if (numTokens < 1) return error("--num-speculative-tokens must be >= 1, not " + llvm::Twine(int(numTokens)));
  if (numTokens + 1 > targetLargestProgram)
    return error("--num-speculative-tokens " + llvm::Twine(int(numTokens)) + ": a verification runs K + 1 = " +
                 llvm::Twine(numTokens + 1) + " tokens, but the largest program of " + target.path + " takes " +
                 llvm::Twine(targetLargestProgram));
  setup.config.numSpeculativeTokens = numTokens;
  if (method == "ngram") {
    if (draftPlan.getNumOccurrences()) return error("--draft-plan is for --speculative draft, not ngram");
    auto d = NgramDrafter::create(ngramMin, ngramMax);
    if (!d) return d.takeError();
    setup.drafter = std::move(*d);
    setup.description = "ngram (K " + std::to_string(numTokens) + ", n " + std::to_string(ngramMin) + ".." +
                        std::to_string(ngramMax) + ")";
  } else {
    if (ngramMax.getNumOccurrences() || ngramMin.getNumOccurrences())
      return error("--ngram-min and --ngram-max are for --speculative ngram, not draft");
    if (draftPlan.empty()) return error("--speculative draft needs --draft-plan D.cplan (a generate plan)");
    auto plan = loadPlan(draftPlan, KernelRegistry::cpu());
    if (!plan) return plan.takeError();
    // The draft model runs on rank 0 alone (under tensor parallelism too): a plan of one rank.
    auto draftMesh = Mesh::fromPlan((*plan)->plan, draftPlan);
    if (!draftMesh) return draftMesh.takeError();
    if (draftMesh->size() > 1)
      return error("--draft-plan " + draftPlan + " is compiled for " + llvm::Twine(draftMesh->size()) +
                   " ranks; the draft model runs on rank 0 alone: compile it without mesh:");
    setup.draftPlan = std::move(*plan);
    auto model = PlanModel::create(*setup.draftPlan, KernelRegistry::cpu(), device, &comm);
    if (!model) return model.takeError();
    const SchedulerConfig &dc = (*model)->config();
    if (dc.vocabSize != targetConfig.vocabSize)
      return error("--draft-plan " + draftPlan + " has a vocabulary of " + llvm::Twine(dc.vocabSize) + " tokens, " +
                   target.path + " one of " + llvm::Twine(targetConfig.vocabSize) +
                   ": the draft model must share the target's vocabulary");
    if (dc.maxSeqLen < targetConfig.maxSeqLen)
      return error("--draft-plan " + draftPlan + " has max_seq_len " + llvm::Twine(dc.maxSeqLen) + ", below " +
                   target.path + "'s " + llvm::Twine(targetConfig.maxSeqLen) + ": compile the draft with at least it");
    auto d = DraftModelDrafter::create(**model, targetConfig);
    if (!d) return d.takeError();
    setup.draftModel = std::move(*model);
    setup.drafter = std::move(*d);
    setup.description = "draft (K " + std::to_string(numTokens) + ", " + draftPlan + ")";
  }
  setup.config.drafter = setup.drafter.get();
  return setup;
}

std::string speculativeSummary(const SpeculativeSetup &setup, const SpeculativeStats &stats) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "speculative " << setup.description << ": " << stats.acceptedTokens << " of " << stats.draftTokens
     << " drafts accepted (" << llvm::format("%.1f", 100.0 * stats.acceptanceRate()) << "%), "
     << llvm::format("%.2f", stats.verifications ? double(stats.emittedTokens) / double(stats.verifications) : 0.0)
     << " tokens per verification (" << stats.verifications << " verifications)";
  return out;
}

}  // namespace colossal::tools

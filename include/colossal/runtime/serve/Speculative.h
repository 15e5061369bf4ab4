//===- Speculative.h - Speculative decoding: drafters and the acceptance rule -----*- C++ -*-===//
//
// Speculative decoding (docs/serving.md "Speculative decoding"): a cheap drafter proposes up to K
// next tokens of a sequence; the target model runs the sequence's last accepted token and the K
// drafts as one chunk (K + 1 rows, logits at every row) and keeps the longest prefix of drafts
// its own sampler would have produced, then one token of its own. The output is the target's:
//
//  - greedy (temperature 0): a draft is accepted while it equals the target's argmax at its row;
//    the first mismatch is replaced by the argmax; after K accepted drafts the last row gives one
//    more. Token for token the output of non-speculative greedy decoding.
//  - sampling: Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"
//    (ICML'23), Algorithm 1 (also Chen et al. 2023, "Accelerating Large Language Model Decoding
//    with Speculative Sampling"): draft x_i drawn from q_i is accepted with probability
//    min(1, p_i(x_i) / q_i(x_i)); on the first rejection the token is drawn from
//    norm(max(0, p_i − q_i)) and the rest is dropped; after K acceptances the last row's p_{K+1}
//    gives one more. Every emitted token is then distributed exactly as p, the target's sampling
//    distribution (samplingDistribution: penalty, temperature, top-k, top-p, min-p). Deterministic
//    drafters (n-gram lookup) have q one-hot at the draft.
//
// Random numbers stay per request: the Philox counter is the index of the token being decided
// (Sampling.h), with a stream per use — 0 for sampleToken (the bonus token and non-speculative
// steps), kAcceptStream for the acceptance test, kResidualStream for the draw after a rejection,
// kDraftStream for a draft model's own draws — so one seed gives the same output whatever the
// batch.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_SPECULATIVE_H
#define COLOSSAL_RUNTIME_SERVE_SPECULATIVE_H

#include "colossal/runtime/serve/BlockManager.h"
#include "colossal/runtime/serve/Sampling.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace colossal::runtime::serve {

class StepModel;
struct SchedulerConfig;

/// Philox streams of speculative decoding (stream 0 is sampleToken's).
constexpr uint32_t kAcceptStream = 1, kResidualStream = 2, kDraftStream = 3;

/// One sequence's request for drafts, and the drafter's answer.
struct DraftRequest {
  SeqId seq = -1;
  /// Prompt then output; the last token is the one the target computes next (its keys and
  /// values are not in the cache yet). Drafts continue it.
  llvm::ArrayRef<TokenId> tokens;
  int32_t maxDrafts = 0;                  // >= 1
  const SamplingParams *sampling = nullptr;
  uint64_t firstIndex = 0;                // output index of the first draft (the Philox counter)

  // The drafter's answer.
  std::vector<TokenId> drafts;            // [k], k <= maxDrafts (0: nothing to propose)
  /// [k, vocab] row-major: q_i, the distribution draft i was drawn from; empty when the drafts
  /// are deterministic (q_i one-hot at drafts[i]).
  std::vector<double> probs;
};

/// Proposes draft tokens. Called from the scheduler's thread only.
class Drafter {
public:
  virtual ~Drafter();
  /// "ngram" or "draft" (for logs and messages).
  virtual const char *method() const = 0;
  /// Fills every request's drafts (and probs). A drafter that keeps per-sequence state (a draft
  /// model's KV cache) brings it in line with `tokens` first: whatever it computed past their
  /// common prefix (rejected drafts) is rolled back. Errors: the draft model's.
  virtual llvm::Error propose(llvm::MutableArrayRef<DraftRequest> requests) = 0;
  /// `seq` finished or was preempted: drop its state (its draft KV blocks).
  virtual void release(SeqId seq);
};

/// What the scheduler speculates with (Scheduler::create).
struct SpeculativeConfig {
  int32_t numSpeculativeTokens = 0;  // K >= 1 with a drafter
  Drafter *drafter = nullptr;        // null: no speculative decoding; owned by the caller
};

/// Counters since creation (for logs and /metrics).
struct SpeculativeStats {
  int64_t draftTokens = 0;     // drafts proposed and verified
  int64_t acceptedTokens = 0;  // drafts the acceptance rule kept
  int64_t verifications = 0;   // target chunks that verified >= 1 draft
  int64_t emittedTokens = 0;   // tokens those chunks produced (accepted drafts + the target's own)
  /// accepted / proposed drafts (0 before any).
  double acceptanceRate() const { return draftTokens ? double(acceptedTokens) / double(draftTokens) : 0.0; }
};

/// Prompt lookup (n-gram) drafting, vLLM's `ngram` method (Saxena 2023, "Prompt Lookup
/// Decoding"): for n from `maxN` down to `minN`, if the last n tokens of `tokens` occur earlier in
/// it, the tokens that followed their first occurrence (at most `k`, fewer where `tokens` ends)
/// are the drafts; none when no n matches. Preconditions: 1 <= minN <= maxN, k >= 0.
std::vector<TokenId> ngramDrafts(llvm::ArrayRef<TokenId> tokens, int32_t minN, int32_t maxN, int32_t k);

/// The n-gram drafter: stateless, deterministic (q one-hot).
class NgramDrafter : public Drafter {
public:
  /// Errors: minN < 1 or maxN < minN (as --ngram-min / --ngram-max).
  static llvm::Expected<std::unique_ptr<NgramDrafter>> create(int32_t minN, int32_t maxN);
  const char *method() const override { return "ngram"; }
  llvm::Error propose(llvm::MutableArrayRef<DraftRequest> requests) override;

private:
  NgramDrafter(int32_t minN, int32_t maxN) : minN_(minN), maxN_(maxN) {}
  int32_t minN_, maxN_;
};

/// Drafting with a second model of the same vocabulary, run as its own StepModel over its own
/// paged KV cache (its own BlockManager, no prefix cache): each propose call first brings every
/// sequence's draft cache up to `tokens` (prefilling what it lacks, in chunks within the draft's
/// max_batch_tokens and max_batch_seqs; rolling back rejected drafts), then runs up to k
/// autoregressive steps of one token per sequence, batched. Drafts follow the request's sampling
/// parameters on the draft's logits: greedy takes the argmax, sampling draws from q =
/// samplingDistribution(draft logits) with stream kDraftStream. A sequence the draft pool cannot
/// hold gets the drafts it has so far (possibly none) and its draft blocks are released (it is
/// recomputed on its next turn).
class DraftModelDrafter : public Drafter {
public:
  /// `draft` outlives the drafter. Errors: the draft's vocabulary differs from the target's, its
  /// max_seq_len is below the target's (numbers named), BlockManager::create's.
  static llvm::Expected<std::unique_ptr<DraftModelDrafter>> create(StepModel &draft, const SchedulerConfig &target);
  ~DraftModelDrafter() override;
  const char *method() const override { return "draft"; }
  llvm::Error propose(llvm::MutableArrayRef<DraftRequest> requests) override;
  void release(SeqId seq) override;
  /// The draft's KV blocks (tests: all free once every sequence is released).
  const BlockManager &blockManager() const { return *blocks_; }
  /// Draft model steps run so far.
  int64_t numSteps() const { return steps_; }

private:
  struct Work;
  DraftModelDrafter(StepModel &draft, std::unique_ptr<BlockManager> blocks);
  /// Brings `r.seq`'s draft cache in line with r.tokens; false when the pool cannot hold it.
  llvm::Expected<bool> sync(const DraftRequest &r, int64_t &computed);
  /// One draft step over the active work items; advances them.
  llvm::Error runStep(std::vector<Work> &work);

  StepModel &model_;
  std::unique_ptr<BlockManager> blocks_;
  SamplingWorkspace workspace_;
  std::vector<float> logits_;
  int64_t steps_ = 0;
};

/// The acceptance rule (header comment) for one verified chunk. `logits` [k + 1, vocab]: the
/// target's rows for the last accepted token and the k drafts; `draftProbs` [k, vocab] or empty
/// (one-hot drafts); `history` the sequence's tokens before the chunk's new ones (prompt and
/// output, for the repetition penalty); `firstIndex` the output index of the first new token.
/// Returns the tokens to emit, in order: the accepted drafts, then the target's own (1 to k + 1
/// tokens); `accepted` gets the number of drafts kept. Preconditions: params valid, drafts in
/// the vocabulary, q_i(drafts[i]) > 0.
std::vector<TokenId> verifyDrafts(llvm::ArrayRef<float> logits, llvm::ArrayRef<TokenId> drafts,
                                  llvm::ArrayRef<double> draftProbs, const SamplingParams &params,
                                  llvm::ArrayRef<TokenId> history, uint64_t firstIndex, SamplingWorkspace &workspace,
                                  int32_t &accepted);

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_SPECULATIVE_H

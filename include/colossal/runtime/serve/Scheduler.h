//===- Scheduler.h - Continuous batching over a paged KV cache --------------------*- C++ -*-===//
//
// The engine's scheduler (docs/serving.md "Scheduler"): requests come in at any time; every step
// it builds one ragged batch of (sequence, query chunk [start, end)) under max_batch_tokens and
// max_batch_seqs, hands it to the model (a callback: the scheduler never runs a kernel), samples
// one token per sequence whose chunk reaches the end of what it holds, and appends it. Continuous
// batching as in Orca (Yu et al. 2022, OSDI'22: iteration-level scheduling) over a paged KV cache
// (Kwon et al. 2023, SOSP'23), with chunked prefill (Agrawal et al. 2024, "Sarathi-Serve",
// OSDI'24: decodes first, the rest of the token budget to prompt chunks).
//
// Each step, in order:
//  1. decodes: running sequences whose last token was sampled, oldest admission first, one token
//     each; its slot comes from BlockManager::append. When the pool is out of blocks the most
//     recently admitted running sequence is preempted by recompute (its blocks released, put at
//     the front of the waiting queue with the tokens it generated, which it recomputes as prompt
//     when admitted again) until the append fits or the sequence preempted itself;
//  2. running sequences still prefilling (a prompt longer than the budget left), oldest first, a
//     chunk each of what the budget leaves;
//  3. admissions, first come first served, while a sequence slot and budget are left and no
//     sequence was preempted this step: BlockManager::allocate of the whole prompt (prefix-cache
//     hits skip the cached prefix); the first request that does not fit stops admission.
// Then the model runs; every chunk's tokens are marked computed (registering full blocks in the
// prefix cache); a sequence whose chunk ends at its last token gets a token from sampleToken; one
// that sampled a stop token or its max_tokens-th token finishes and frees its blocks.
//
// Speculative decoding (Speculative.h, SpeculativeConfig): in step 1 the drafter proposes up to K
// tokens for each sequence about to decode, and its decode chunk becomes the last token plus the
// drafts, with logits at every row. After the model ran, verifyDrafts keeps the accepted drafts and
// the target's own token (stop tokens and max_tokens end the run early); the block manager is
// truncated to the verified tokens, so rejected drafts' slots are written over later and blocks
// that held only rejected drafts are freed; only verified tokens are marked computed, so no block
// holding an unverified token enters the prefix cache. A decode is scheduled with all its drafts
// or waits for the next step, so a request's drafts, and its tokens, do not depend on the batch.
//
// Because the kernels are batch-invariant and sampleToken is a pure function of one logits row, a
// request's tokens do not depend on the token budget, the other requests or preemption.
//
// Not thread-safe: one thread owns the scheduler (and its BlockManager).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_SCHEDULER_H
#define COLOSSAL_RUNTIME_SERVE_SCHEDULER_H

#include "colossal/runtime/serve/BlockManager.h"
#include "colossal/runtime/serve/Sampling.h"
#include "colossal/runtime/serve/Speculative.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace colossal::runtime::serve {

struct SchedulerConfig {
  int64_t maxSeqLen = 512;        // >= 1: prompt + max_tokens of one request (generate.max_seq_len)
  int32_t blockSize = 16;         // generate.block_size
  int32_t numBlocks = 0;          // generate.kv_blocks; must hold one sequence of maxSeqLen tokens
  bool prefixCaching = true;
  int32_t maxBatchSeqs = 16;      // >= 1: sequences in one step (generate.max_batch_seqs)
  int64_t maxBatchTokens = 512;   // >= 0: query tokens in one step (generate.max_batch_tokens); 0: no limit
  int32_t vocabSize = 0;          // >= 1: the width of a logits row
};

/// One request: what an OpenAI completion carries once its prompt is token ids.
struct Request {
  std::string id;                    // unique among the requests not yet taken by takeFinished
  std::vector<TokenId> prompt;       // >= 1 token, ids in [0, vocabSize)
  int64_t maxTokens = 16;            // >= 1; prompt + maxTokens <= maxSeqLen
  std::vector<TokenId> stopTokenIds; // generation stops after any of these (it is kept in the output)
  SamplingParams sampling;           // validateSamplingParams; seed per request
  /// Parallel sampling (n > 1): the sequence of a request added before this one with the same
  /// prompt and not yet admitted. This request is then not prefilled: when its parent's prompt
  /// has been computed and the parent samples its first token, it takes the parent's blocks
  /// (BlockManager::fork: shared, copy-on-write for the partial last block) and samples its own
  /// first token from the same logits row. Its tokens are those it would get alone. −1: none.
  SeqId forkOf = -1;
};

/// A request refused by addRequest, typed so that the server can answer 400 with `param`.
class InvalidRequestError : public llvm::ErrorInfo<InvalidRequestError> {
public:
  static char ID;
  InvalidRequestError(std::string requestId, std::string param, std::string message)
      : requestId_(std::move(requestId)), param_(std::move(param)), message_(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override { os << message_; }
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }
  const std::string &requestId() const { return requestId_; }
  /// The OpenAI field at fault: "prompt", "max_tokens", "id", or a sampling parameter's name.
  const std::string &param() const { return param_; }
  const std::string &text() const { return message_; }

private:
  std::string requestId_, param_, message_;
};

/// One sequence's part of a step: query positions [start, end) of its tokens.
struct ScheduledChunk {
  SeqId seq = -1;
  int64_t start = 0, end = 0;
  bool decode = false;    // a decode step (the token sampled last step), else a prompt chunk
  bool sampled = false;   // end is the sequence's length: the step gives it next tokens
  int32_t numDrafts = 0;  // speculative: the chunk's last numDrafts rows are drafts (logits at every row)
  int32_t acceptedDrafts = 0;  // after the step: the drafts kept
  /// After the step: the tokens appended (one when not speculative; accepted drafts then the
  /// target's own token, cut after a stop token or max_tokens), and their logprobs when the
  /// request asks for them.
  std::vector<TokenId> tokens;
  std::vector<SampledToken> logprobs;
};

/// What the model runs in one step: a ragged batch, sequence i's rows [queryStartLoc[i],
/// queryStartLoc[i + 1]) in the order of `chunks`, no padding. The names and layouts are the
/// inputs of the kv_append / kv_copy_blocks / paged_attention kernels (docs/serving.md "KV-cache
/// kernels").
struct StepBatch {
  std::vector<ScheduledChunk> chunks;   // [S]
  std::vector<TokenId> tokenIds;        // [T] the tokens whose keys and values the step computes
  std::vector<int32_t> positions;       // [T] each token's position in its sequence (RoPE, position ids)
  std::vector<int32_t> slotMapping;     // [T] kv_append's slot of each token
  std::vector<int32_t> queryStartLoc;   // [S + 1]
  std::vector<int32_t> contextLens;     // [S] chunk end: the positions the cache holds after kv_append
  std::vector<int32_t> blockTables;     // [S, maxBlocksPerSeq] row-major, −1 past a sequence's blocks
  int32_t maxBlocksPerSeq = 0;          // ⌈maxSeqLen / blockSize⌉, fixed for every step
  std::vector<BlockCopy> blockCopies;   // copy-on-write: apply (kv_copy_blocks) before kv_append
  /// [L] the rows of `tokenIds` whose next-token logits the step needs (each sampled chunk's
  /// last row; every row of a chunk with drafts), in the order of the sampled chunks.
  std::vector<int32_t> logitsIndices;
  int64_t numTokens() const { return static_cast<int64_t>(tokenIds.size()); }
};

/// The model: runs `batch` and writes `logits` [batch.logitsIndices.size(), vocabSize] (f32,
/// row-major), row j for token row logitsIndices[j]. An error it returns comes back from
/// Scheduler::step, and the step counts as not run (nothing marked computed or sampled; the same
/// work is scheduled again).
using ModelStep = llvm::function_ref<llvm::Error(const StepBatch &batch, llvm::MutableArrayRef<float> logits)>;

/// The model side of the engine: one step of a ragged batch (Scheduler.h ModelStep semantics).
/// Called from the engine thread only.
class StepModel {
public:
  virtual ~StepModel();
  /// vocab, max_seq_len, block size, blocks, budgets: what the Scheduler is created with.
  virtual const SchedulerConfig &config() const = 0;
  /// Runs `batch`; writes `logits` [batch.logitsIndices.size(), config().vocabSize] f32, row j
  /// for token row batch.logitsIndices[j]. An error fails the requests that were in the batch
  /// (the engine goes on serving the others and new ones).
  virtual llvm::Error step(const StepBatch &batch, llvm::MutableArrayRef<float> logits) = 0;
};

enum class FinishReason { Stop, Length, Abort };  // OpenAI finish_reason: stop, length; abort: abort()

struct RequestOutput {
  std::string id;
  SeqId seq = -1;
  std::vector<TokenId> prompt, tokens;  // tokens: generated, a stop token included
  std::vector<SampledToken> logprobs;   // per generated token when sampling.logprobs >= 0
  FinishReason finish = FinishReason::Length;
  /// Prompt tokens found in the prefix cache at first admission (full blocks only):
  /// usage.prompt_tokens_details.cached_tokens.
  int64_t cachedPromptTokens = 0;
  int64_t preemptions = 0;              // times this request was preempted and recomputed
  int64_t arrivalStep = 0, firstTokenStep = -1, finishStep = -1;  // step indices (TTFT, latency)
};

/// What one step did (for tests, logs and /metrics).
struct StepRecord {
  int64_t step = -1;                 // index from 0
  /// The batch's chunks, then one chunk of no rows ([P, P), sampled) per fork (Request::forkOf)
  /// that took its first token from its parent's row this step.
  std::vector<ScheduledChunk> chunks;
  int64_t scheduledTokens = 0, decodeTokens = 0, prefillTokens = 0;
  std::vector<SeqId> preempted, finished;  // this step
  int64_t preemptionsTotal = 0;      // since creation
  int64_t waiting = 0, running = 0;  // after the step
  int32_t freeBlocks = 0;            // after the step
};

class Scheduler {
public:
  /// Errors: maxSeqLen, maxBatchSeqs or vocabSize < 1, maxBatchTokens < 0, and
  /// BlockManager::create's (a pool that cannot hold one sequence of maxSeqLen tokens); with a
  /// drafter, K < 1 and K + 1 above maxBatchTokens (a verification chunk must fit one step).
  static llvm::Expected<std::unique_ptr<Scheduler>> create(const SchedulerConfig &config,
                                                           const SpeculativeConfig &speculative = {});

  /// Queues `request` (it waits behind every request queued before it) and returns the sequence
  /// id its chunks and output carry. Errors (InvalidRequestError, naming the request id and the
  /// numbers): an empty prompt, a prompt token outside [0, vocabSize), maxTokens < 1, prompt +
  /// maxTokens above maxSeqLen, invalid sampling parameters, an id already in use.
  llvm::Expected<SeqId> addRequest(Request request);

  /// Ends a request now, waiting or running: its blocks are freed, its output (FinishReason::Abort,
  /// the tokens so far) goes to takeFinished. Errors: no unfinished request `id`.
  llvm::Error abort(llvm::StringRef id);

  /// Schedules one step, runs `model` on it and samples. Does nothing (an empty record, no call)
  /// when no request is unfinished. Errors: the model's, and the BlockManager's misuse errors
  /// (a bug).
  llvm::Error step(ModelStep model);

  /// Whether any request waits or runs.
  bool hasUnfinished() const { return !waiting_.empty() || !running_.empty(); }
  /// The requests finished since the last call, in the order they finished; their ids become free.
  std::vector<RequestOutput> takeFinished();

  const StepRecord &lastStep() const { return record_; }
  const StepBatch &lastBatch() const { return batch_; }
  int64_t numSteps() const { return steps_; }
  int64_t numPreemptions() const { return preemptions_; }
  const SpeculativeStats &speculativeStats() const { return specStats_; }
  const SpeculativeConfig &speculativeConfig() const { return spec_; }
  int64_t numWaiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t numRunning() const { return static_cast<int64_t>(running_.size()); }
  const BlockManager &blockManager() const { return *blocks_; }
  const SchedulerConfig &config() const { return config_; }

private:
  struct Sequence {
    RequestOutput out;        // id, prompt, generated tokens so far
    Request request;          // maxTokens, stops, sampling (prompt moved into out.prompt)
    std::vector<TokenId> all; // prompt then generated: what a recompute prefills
    int64_t computed = 0;     // leading tokens whose keys and values are in the cache
    bool admittedOnce = false;
    int64_t scheduledStep = -1;  // the last step with a chunk of it
    std::vector<TokenId> drafts;  // this step's drafts (speculative), after `all`
    std::vector<double> draftProbs;  // [drafts, vocab] or empty (one-hot)
  };

  Scheduler(const SchedulerConfig &config, const SpeculativeConfig &speculative, std::unique_ptr<BlockManager> blocks);
  llvm::Error invalid(const Request &r, const char *param, const llvm::Twine &msg) const;
  llvm::Error validate(const Request &r) const;
  /// Steps 1-3 of the header comment: fills batch_ (chunks) and record_.preempted.
  llvm::Error schedule();
  llvm::Error scheduleDecodes(int64_t &budget);
  /// Speculative: drafts for the decodes step 1 is about to schedule (in running order, within
  /// the budget and max_batch_seqs).
  llvm::Error proposeDrafts(int64_t budget);
  void schedulePrefills(int64_t &budget);
  llvm::Error admit(int64_t &budget);
  void addChunk(Sequence &s, int64_t start, int64_t end, bool decode);
  /// Fills batch_'s token rows, slots, block tables and logits indices from its chunks.
  void buildBatch();
  /// Marks computed, samples, finishes: after the model ran.
  llvm::Error complete();
  /// Verifies a chunk's drafts against its logits rows and emits the accepted run.
  llvm::Error completeSpeculative(ScheduledChunk &c, llvm::ArrayRef<float> rows);
  /// Appends `token` (from logits `row`) to c's sequence; finishes it at a stop token or its
  /// max_tokens-th token (then `s` is gone). Returns whether it finished.
  llvm::Expected<bool> emit(Sequence &s, ScheduledChunk &c, TokenId token, llvm::ArrayRef<float> row);
  void preempt(SeqId seq);
  llvm::Error finish(SeqId seq, FinishReason reason);
  void removeRunning(SeqId seq);

  SchedulerConfig config_;
  SpeculativeConfig spec_;
  SpeculativeStats specStats_;
  std::vector<DraftRequest> draftRequests_;
  /// The first running decode proposeDrafts had no room for this step (it and the newer ones wait).
  std::optional<SeqId> draftStop_;
  std::unique_ptr<BlockManager> blocks_;
  std::unordered_map<SeqId, Sequence> seqs_;          // unfinished
  std::unordered_map<SeqId, std::vector<SeqId>> forks_;  // parent -> children waiting for its prefill
  std::vector<ScheduledChunk> forkedChunks_;             // this step's forks' first tokens (StepRecord)
  std::unordered_map<std::string, SeqId> liveIds_;    // unfinished or not yet taken
  std::deque<SeqId> waiting_;                          // front: the next to admit
  std::vector<SeqId> running_;                         // admission order, oldest first
  std::vector<RequestOutput> finished_;
  SeqId nextSeq_ = 0;
  int64_t steps_ = 0, preemptions_ = 0;
  StepBatch batch_;
  StepRecord record_;
  std::vector<float> logits_;
  SamplingWorkspace workspace_;
};

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_SCHEDULER_H

//===- Speculative.cpp - n-gram and draft-model drafting, the acceptance rule ---------------===//
#include "colossal/runtime/serve/Speculative.h"

#include "colossal/runtime/serve/Scheduler.h"

#include <algorithm>
#include <limits>

namespace colossal::runtime::serve {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

/// Inverse CDF over ids in increasing order: the id where u · Σw falls (u in [0, 1)); the last
/// id of positive weight if rounding leaves u past the total, -1 when every weight is 0.
TokenId drawFrom(llvm::ArrayRef<double> weights, double u) {
  double total = 0;
  TokenId last = -1;
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i] > 0) {
      total += weights[i];
      last = static_cast<TokenId>(i);
    }
  if (last < 0) return -1;
  double x = u * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    if (x < weights[i]) return static_cast<TokenId>(i);
    x -= weights[i];
  }
  return last;
}
}  // namespace

Drafter::~Drafter() = default;
void Drafter::release(SeqId) {}

//===----------------------------------------------------------------------------------------===//
// n-gram drafting
//===----------------------------------------------------------------------------------------===//

std::vector<TokenId> ngramDrafts(llvm::ArrayRef<TokenId> tokens, int32_t minN, int32_t maxN, int32_t k) {
  const int64_t L = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(maxN, L - 1); n >= minN; --n) {
    llvm::ArrayRef<TokenId> suffix = tokens.take_back(n);
    // Occurrences that start before the suffix itself, the first one wins.
    for (int64_t i = 0; i + n < L; ++i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n, to = std::min<int64_t>(from + k, L);
      return std::vector<TokenId>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

llvm::Expected<std::unique_ptr<NgramDrafter>> NgramDrafter::create(int32_t minN, int32_t maxN) {
  if (minN < 1) return error("--ngram-min must be >= 1, not " + llvm::Twine(minN));
  if (maxN < minN)
    return error("--ngram-max " + llvm::Twine(maxN) + " is below --ngram-min " + llvm::Twine(minN));
  return std::unique_ptr<NgramDrafter>(new NgramDrafter(minN, maxN));
}

llvm::Error NgramDrafter::propose(llvm::MutableArrayRef<DraftRequest> requests) {
  for (DraftRequest &r : requests) {
    r.drafts = ngramDrafts(r.tokens, minN_, maxN_, r.maxDrafts);
    r.probs.clear();
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------------------------===//
// Draft-model drafting
//===----------------------------------------------------------------------------------------===//

/// One sequence being drafted in a propose call.
struct DraftModelDrafter::Work {
  DraftRequest *request;
  std::vector<TokenId> tokens;  // request tokens, then the drafts so far
  int64_t computed = 0;         // leading tokens whose draft keys and values are in the cache
  int64_t chunkEnd = 0;         // this step's chunk: [computed, chunkEnd)
  bool active = true;
};

llvm::Expected<std::unique_ptr<DraftModelDrafter>> DraftModelDrafter::create(StepModel &draft,
                                                                             const SchedulerConfig &target) {
  const SchedulerConfig &c = draft.config();
  if (c.vocabSize != target.vocabSize)
    return error("the draft model's vocabulary has " + llvm::Twine(c.vocabSize) + " tokens, the target's " +
                 llvm::Twine(target.vocabSize));
  if (c.maxSeqLen < target.maxSeqLen)
    return error("the draft model's max_seq_len " + llvm::Twine(c.maxSeqLen) + " is below the target's " +
                 llvm::Twine(target.maxSeqLen));
  // No prefix cache: a draft block may hold tokens the target rejects.
  auto blocks = BlockManager::create({c.numBlocks, c.blockSize, /*prefixCaching=*/false, c.maxSeqLen});
  if (!blocks) return blocks.takeError();
  return std::unique_ptr<DraftModelDrafter>(new DraftModelDrafter(draft, std::move(*blocks)));
}

DraftModelDrafter::DraftModelDrafter(StepModel &draft, std::unique_ptr<BlockManager> blocks)
    : model_(draft), blocks_(std::move(blocks)) {}

DraftModelDrafter::~DraftModelDrafter() = default;

void DraftModelDrafter::release(SeqId seq) {
  if (blocks_->contains(seq)) llvm::cantFail(blocks_->release(seq));
}

llvm::Expected<bool> DraftModelDrafter::sync(const DraftRequest &r, int64_t &computed) {
  const int64_t L = static_cast<int64_t>(r.tokens.size());
  llvm::ArrayRef<TokenId> held = blocks_->tokens(r.seq);
  // The last token is recomputed even when held: its row gives the first draft's logits.
  int64_t common = 0;
  const int64_t most = std::min<int64_t>(static_cast<int64_t>(held.size()), L - 1);
  while (common < most && held[common] == r.tokens[common]) ++common;
  if (common == 0) {
    release(r.seq);
    auto a = blocks_->allocate(r.seq, r.tokens);
    if (!a) return a.takeError();
    computed = 0;
    return a->status == KvStatus::Ok;
  }
  if (llvm::Error e = blocks_->truncate(r.seq, common)) return std::move(e);
  auto a = blocks_->append(r.seq, r.tokens.drop_front(common));
  if (!a) return a.takeError();
  if (a->status != KvStatus::Ok) {
    release(r.seq);
    return false;
  }
  computed = common;
  return true;
}

llvm::Error DraftModelDrafter::runStep(std::vector<Work> &work) {
  const SchedulerConfig &c = model_.config();
  StepBatch b;
  b.maxBlocksPerSeq = static_cast<int32_t>(blocks_->blocksFor(c.maxSeqLen));
  b.queryStartLoc.assign(1, 0);
  int64_t budget = c.maxBatchTokens == 0 ? std::numeric_limits<int64_t>::max() : c.maxBatchTokens;
  std::vector<Work *> stepped;
  for (Work &w : work) {
    if (!w.active) continue;
    if (budget == 0 || static_cast<int32_t>(stepped.size()) == c.maxBatchSeqs) break;
    const int64_t len = static_cast<int64_t>(w.tokens.size());
    w.chunkEnd = w.computed + std::min(len - w.computed, budget);
    budget -= w.chunkEnd - w.computed;
    ScheduledChunk chunk;
    chunk.seq = w.request->seq;
    chunk.start = w.computed;
    chunk.end = w.chunkEnd;
    chunk.sampled = w.chunkEnd == len;
    for (int64_t p = w.computed; p < w.chunkEnd; ++p) {
      b.tokenIds.push_back(w.tokens[p]);
      b.positions.push_back(static_cast<int32_t>(p));
    }
    blocks_->slotMapping(chunk.seq, w.computed, w.chunkEnd, b.slotMapping);
    llvm::ArrayRef<BlockId> table = blocks_->blockTable(chunk.seq);
    b.blockTables.resize(b.blockTables.size() + b.maxBlocksPerSeq, -1);
    std::copy(table.begin(), table.end(), b.blockTables.end() - b.maxBlocksPerSeq);
    b.contextLens.push_back(static_cast<int32_t>(w.chunkEnd));
    b.queryStartLoc.push_back(static_cast<int32_t>(b.tokenIds.size()));
    if (chunk.sampled) b.logitsIndices.push_back(static_cast<int32_t>(b.tokenIds.size()) - 1);
    b.chunks.push_back(chunk);
    stepped.push_back(&w);
  }
  const int32_t V = c.vocabSize;
  logits_.resize(b.logitsIndices.size() * V);
  if (llvm::Error e = model_.step(b, logits_)) return e;
  ++steps_;
  size_t row = 0;
  for (size_t i = 0; i < stepped.size(); ++i) {
    Work &w = *stepped[i];
    w.computed = w.chunkEnd;
    if (!b.chunks[i].sampled) continue;
    DraftRequest &r = *w.request;
    llvm::ArrayRef<float> logits(logits_.data() + row++ * V, V);
    const SamplingParams &params = *r.sampling;
    const uint64_t index = r.firstIndex + r.drafts.size();
    TokenId d;
    if (params.temperature == 0) {
      d = sampleToken(logits, params, w.tokens, index, workspace_).id;
    } else {
      std::vector<double> q = samplingDistribution(logits, params, w.tokens, workspace_);
      d = drawFrom(q, philoxUniform(params.seed, index, kDraftStream));
      if (d < 0) d = sampleToken(logits, params, w.tokens, index, workspace_).id;  // q all zero: cannot happen
      r.probs.insert(r.probs.end(), q.begin(), q.end());
    }
    r.drafts.push_back(d);
    w.tokens.push_back(d);
    if (static_cast<int32_t>(r.drafts.size()) == r.maxDrafts) {
      w.active = false;  // the last draft is never fed to the draft model
      continue;
    }
    auto a = blocks_->append(r.seq, llvm::ArrayRef<TokenId>(d));
    if (!a) return a.takeError();
    if (a->status != KvStatus::Ok) {  // the draft pool is full: keep what it drafted
      w.active = false;
      release(r.seq);
    }
  }
  return llvm::Error::success();
}

llvm::Error DraftModelDrafter::propose(llvm::MutableArrayRef<DraftRequest> requests) {
  std::vector<Work> work;
  work.reserve(requests.size());
  for (DraftRequest &r : requests) {
    r.drafts.clear();
    r.probs.clear();
    if (r.maxDrafts < 1 || r.tokens.empty()) continue;
    int64_t computed = 0;
    auto ok = sync(r, computed);
    if (!ok) return ok.takeError();
    if (!*ok) continue;
    Work w;
    w.request = &r;
    w.tokens.assign(r.tokens.begin(), r.tokens.end());
    w.computed = computed;
    work.push_back(std::move(w));
  }
  while (llvm::any_of(work, [](const Work &w) { return w.active; }))
    if (llvm::Error e = runStep(work)) {
      for (const Work &w : work) release(w.request->seq);  // the draft cache's state is unknown
      return e;
    }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------------------------===//

std::vector<TokenId> verifyDrafts(llvm::ArrayRef<float> logits, llvm::ArrayRef<TokenId> drafts,
                                  llvm::ArrayRef<double> draftProbs, const SamplingParams &params,
                                  llvm::ArrayRef<TokenId> history, uint64_t firstIndex, SamplingWorkspace &ws,
                                  int32_t &accepted) {
  const size_t k = drafts.size(), V = logits.size() / (k + 1);
  std::vector<TokenId> seen(history.begin(), history.end());  // the penalty sees accepted drafts
  std::vector<TokenId> out;
  accepted = 0;
  for (size_t i = 0; i < k; ++i) {
    llvm::ArrayRef<float> row = logits.slice(i * V, V);
    const uint64_t index = firstIndex + i;
    const TokenId d = drafts[i];
    if (params.temperature == 0) {
      const TokenId target = sampleToken(row, params, seen, index, ws).id;
      if (target != d) {
        out.push_back(target);
        return out;
      }
    } else {
      std::vector<double> p = samplingDistribution(row, params, seen, ws);
      const double qd = draftProbs.empty() ? 1.0 : draftProbs[i * V + d];
      // Accept with probability min(1, p/q): u < p/q, written without the division.
      if (!(philoxUniform(params.seed, index, kAcceptStream) * qd < p[d])) {
        for (size_t j = 0; j < V; ++j) {
          const double q = draftProbs.empty() ? (static_cast<TokenId>(j) == d ? 1.0 : 0.0) : draftProbs[i * V + j];
          p[j] = std::max(0.0, p[j] - q);
        }
        TokenId t = drawFrom(p, philoxUniform(params.seed, index, kResidualStream));
        // p <= q everywhere only when p == q, where rejection has probability 0; rounding aside.
        if (t < 0) t = sampleToken(row, params, seen, index, ws).id;
        out.push_back(t);
        return out;
      }
    }
    out.push_back(d);
    seen.push_back(d);
    ++accepted;
  }
  out.push_back(sampleToken(logits.slice(k * V, V), params, seen, firstIndex + k, ws).id);
  return out;
}

}  // namespace colossal::runtime::serve

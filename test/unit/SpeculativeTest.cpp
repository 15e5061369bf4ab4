//===- SpeculativeTest.cpp - Speculative decoding: same greedy tokens, same distribution ----===//
//
// Checked, each against an independent reference:
//  - ngramDrafts on hand-made sequences (longest n first, first occurrence, clipped at the end);
//  - greedy speculative decoding through the scheduler over the toy two-layer decoder (the real
//    paged kernels, so a rejected draft whose keys and values were not written over would change
//    later logits) gives every request the tokens non-speculative decoding gives it alone, with
//    an oracle drafter that is right except at scripted positions, the n-gram drafter, a draft
//    model (the toy decoder with perturbed logits) and a perfect draft model; at several token
//    budgets and on a pool small enough to preempt; every target and draft block is free after;
//  - rollback: rejected drafts leave their blocks (freed) and the prefix cache (a later prompt
//    that repeats them finds only the verified blocks); stop tokens and max_tokens inside an
//    accepted run end it there;
//  - sampling: Pearson's chi-square of 20,000 seeded requests' first tokens (pairs of tokens)
//    against the exact target distribution, for a draft model whose distribution differs from
//    the target's and for the n-gram drafter (one-hot q), at temperature 1 and with temperature
//    0.8 and top-k 4; a deliberately wrong q fails the same test; and seeded requests give the
//    same tokens alone and batched.
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"
#include "ToyDecoder.h"

#include "colossal/runtime/serve/Scheduler.h"
#include "colossal/runtime/serve/Speculative.h"

#include <cmath>
#include <cstdio>
#include <map>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
using namespace colossal::runtime::serve;

namespace {

//===----------------------------------------------------------------------------------------===//
// n-gram lookup
//===----------------------------------------------------------------------------------------===//

TEST(Speculative, NgramDraftsTakeTheLongestSuffixAndItsFirstOccurrence) {
  // Suffix [7, 8] (n = 2) first occurs at 1: drafts are what followed it.
  EXPECT_EQ(ngramDrafts({5, 7, 8, 9, 10, 7, 8, 4, 7, 8}, 1, 3, 3), (std::vector<TokenId>{9, 10, 7}));
  // n = 3 wins over n = 1: [1, 2, 3] matched at 4 (followed by 6), while [3] first occurs at 2.
  EXPECT_EQ(ngramDrafts({9, 9, 3, 5, 1, 2, 3, 6, 1, 2, 3}, 1, 3, 2), (std::vector<TokenId>{6, 1}));
  // Clipped where the sequence ends (the match may run into the suffix itself).
  EXPECT_EQ(ngramDrafts({4, 4, 4}, 1, 2, 5), (std::vector<TokenId>{4}));
  // No occurrence of any n in [minN, maxN]: nothing.
  EXPECT_TRUE(ngramDrafts({1, 2, 3, 4}, 1, 3, 4).empty());
  EXPECT_TRUE(ngramDrafts({1, 2, 9, 1, 2}, 3, 3, 4).empty());
  EXPECT_EQ(ngramDrafts({1, 2, 9, 1, 2}, 2, 3, 4), (std::vector<TokenId>{9, 1, 2}));
  EXPECT_TRUE(ngramDrafts({7}, 1, 4, 4).empty());
  EXPECT_FALSE(static_cast<bool>(NgramDrafter::create(0, 3)));
  auto bad = NgramDrafter::create(3, 2);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()), "--ngram-max 2 is below --ngram-min 3");
}

//===----------------------------------------------------------------------------------------===//
// Greedy: identical tokens
//===----------------------------------------------------------------------------------------===//

constexpr int32_t kVocab = 64, kBlockSize = 16;
constexpr int64_t kMaxSeqLen = 256;
constexpr int32_t kLargePool = 16 * kMaxSeqLen / kBlockSize, kSmallPool = kMaxSeqLen / kBlockSize;

SchedulerConfig config(int32_t numBlocks, int64_t maxBatchTokens, int32_t blockSize = kBlockSize) {
  SchedulerConfig c;
  c.maxSeqLen = kMaxSeqLen;
  c.blockSize = blockSize;
  c.numBlocks = numBlocks;
  c.maxBatchSeqs = 16;
  c.maxBatchTokens = maxBatchTokens;
  c.vocabSize = kVocab;
  return c;
}

/// The toy decoder as a StepModel; `noise` > 0 adds a fixed function of (position, row token,
/// vocabulary id) to its logits: a draft model that agrees with the target only sometimes.
class ToyModel : public StepModel {
public:
  explicit ToyModel(const SchedulerConfig &c, float noise = 0) : config_(c), decoder_(c), noise_(noise) {}
  const SchedulerConfig &config() const override { return config_; }
  llvm::Error step(const StepBatch &b, llvm::MutableArrayRef<float> logits) override {
    if (llvm::Error e = decoder_(b, logits)) return e;
    for (size_t j = 0; noise_ > 0 && j < b.logitsIndices.size(); ++j) {
      const int32_t r = b.logitsIndices[j];
      for (int32_t v = 0; v < config_.vocabSize; ++v)
        logits[j * config_.vocabSize + v] += noise_ * std::sin(1.7f * v + 7.3f * b.positions[r] + 0.3f * b.tokenIds[r]);
    }
    return llvm::Error::success();
  }

private:
  SchedulerConfig config_;
  ToyDecoder decoder_;
  float noise_;
};

/// Knows each request's greedy output (by prompt) and proposes its next tokens, wrong (+1) at the
/// positions where (prompt length + output index) % 3 == 1.
class OracleDrafter : public Drafter {
public:
  explicit OracleDrafter(std::map<std::vector<TokenId>, std::vector<TokenId>> outputs) : outputs_(std::move(outputs)) {}
  const char *method() const override { return "oracle"; }
  llvm::Error propose(llvm::MutableArrayRef<DraftRequest> requests) override {
    for (DraftRequest &r : requests) {
      r.drafts.clear();
      for (const auto &[prompt, out] : outputs_) {
        const size_t P = prompt.size();
        if (r.tokens.size() < P || !std::equal(prompt.begin(), prompt.end(), r.tokens.begin())) continue;
        const size_t g = r.tokens.size() - P;
        if (g > out.size() || !std::equal(out.begin(), out.begin() + g, r.tokens.begin() + P)) continue;
        for (size_t i = g; i < out.size() && static_cast<int32_t>(r.drafts.size()) < r.maxDrafts; ++i)
          r.drafts.push_back((P + i) % 3 == 1 ? (out[i] + 1) % kVocab : out[i]);
        break;
      }
    }
    return llvm::Error::success();
  }

private:
  std::map<std::vector<TokenId>, std::vector<TokenId>> outputs_;
};

struct Arrival {
  int64_t step;
  Request request;
};

/// 12 greedy requests: prompts of 1 to 120 tokens (some repeating a pattern, which the n-gram
/// drafter finds), max_tokens 1 to 60, arriving over 20 steps.
std::vector<Arrival> greedyWorkload() {
  const int lens[12] = {1, 120, 17, 64, 9, 33, 2, 90, 48, 5, 70, 16};
  const int maxTokens[12] = {20, 30, 1, 48, 60, 40, 9, 25, 33, 2, 44, 50};
  std::mt19937 rng(11);
  std::vector<Arrival> out;
  int64_t step = 0;
  for (int i = 0; i < 12; ++i) {
    Request r;
    r.id = "req-" + std::to_string(i);
    for (int t = 0; t < lens[i]; ++t)
      r.prompt.push_back(i % 2 ? static_cast<TokenId>(rng() % kVocab) : static_cast<TokenId>((t * 5) % 11));
    r.maxTokens = maxTokens[i];
    r.sampling.temperature = 0;
    out.push_back({step, std::move(r)});
    step += rng() % 3;
  }
  return out;
}

struct RunResult {
  std::map<std::string, RequestOutput> outputs;
  SpeculativeStats stats;
  int64_t steps = 0, preemptions = 0;
};

void expectAllFree(const BlockManager &bm) {
  EXPECT_EQ(bm.numFreeBlocks(), bm.numBlocks());
  for (BlockId b = 0; b < bm.numBlocks(); ++b) EXPECT_EQ(bm.refCount(b), 0) << "block " << b;
}

/// Runs `arrivals` on a fresh scheduler (with `spec` when it has a drafter) over `model`.
RunResult run(const SchedulerConfig &c, const std::vector<Arrival> &arrivals, StepModel &model,
              const SpeculativeConfig &spec = {}) {
  RunResult result;
  auto made = Scheduler::create(c, spec);
  EXPECT_TRUE(static_cast<bool>(made)) << (made ? "" : llvm::toString(made.takeError()));
  if (!made) return result;
  Scheduler &s = **made;
  size_t next = 0;
  while (next < arrivals.size() || s.hasUnfinished()) {
    for (; next < arrivals.size() && arrivals[next].step <= s.numSteps(); ++next) {
      auto id = s.addRequest(arrivals[next].request);
      EXPECT_TRUE(static_cast<bool>(id)) << (id ? "" : llvm::toString(id.takeError()));
    }
    if (llvm::Error e = s.step([&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return model.step(b, l); })) {
      ADD_FAILURE() << llvm::toString(std::move(e));
      return result;
    }
    const StepRecord &rec = s.lastStep();
    if (c.maxBatchTokens > 0) EXPECT_LE(rec.scheduledTokens, c.maxBatchTokens);
    for (const ScheduledChunk &ch : rec.chunks) {
      EXPECT_LE(ch.numDrafts, spec.numSpeculativeTokens);
      EXPECT_LE(ch.acceptedDrafts, ch.numDrafts);
      if (ch.sampled && ch.numDrafts > 0) EXPECT_EQ(ch.end - ch.start, 1 + ch.numDrafts);
    }
    for (RequestOutput &o : s.takeFinished()) result.outputs[o.id] = std::move(o);
    if (s.numSteps() > 100000) {
      ADD_FAILURE() << "no end after 100000 steps";
      return result;
    }
  }
  expectAllFree(s.blockManager());
  result.stats = s.speculativeStats();
  result.steps = s.numSteps();
  result.preemptions = s.numPreemptions();
  return result;
}

std::map<std::string, RequestOutput> solo(const std::vector<Arrival> &arrivals) {
  std::map<std::string, RequestOutput> out;
  for (const Arrival &a : arrivals) {
    ToyModel model(config(kLargePool, 0));
    RunResult r = run(config(kLargePool, 0), {{0, a.request}}, model);
    out[a.request.id] = r.outputs[a.request.id];
  }
  return out;
}

void expectSameAsSolo(const std::map<std::string, RequestOutput> &solo, const RunResult &r) {
  ASSERT_EQ(r.outputs.size(), solo.size());
  for (const auto &[id, want] : solo) {
    const RequestOutput &got = r.outputs.at(id);
    EXPECT_EQ(got.tokens, want.tokens) << id;
    EXPECT_EQ(got.finish, want.finish) << id;
  }
}

void print(const char *what, const SchedulerConfig &c, const RunResult &r, int64_t baselineSteps) {
  std::printf("[ speculative ] %-14s kv_blocks %3d, max_batch_tokens %2lld: %4lld of %4lld drafts accepted (%5.1f%%), "
              "%.2f tokens per verification, %lld steps (%lld without), %lld preemptions\n",
              what, c.numBlocks, static_cast<long long>(c.maxBatchTokens), static_cast<long long>(r.stats.acceptedTokens),
              static_cast<long long>(r.stats.draftTokens), 100.0 * r.stats.acceptanceRate(),
              r.stats.verifications ? double(r.stats.emittedTokens) / r.stats.verifications : 0.0,
              static_cast<long long>(r.steps), static_cast<long long>(baselineSteps),
              static_cast<long long>(r.preemptions));
}

TEST(Speculative, GreedyGivesTheNonSpeculativeTokensWithEveryDrafter) {
  std::vector<Arrival> arrivals = greedyWorkload();
  // A third of the requests stop at their fifth token's first occurrence.
  for (auto &[id, o] : solo(arrivals)) {
    const int i = std::stoi(id.substr(4));
    if (i % 3 == 0 && o.tokens.size() >= 6) arrivals[i].request.stopTokenIds = {o.tokens[4]};
  }
  const auto alone = solo(arrivals);
  std::map<std::vector<TokenId>, std::vector<TokenId>> outputs;
  int stops = 0;
  for (const Arrival &a : arrivals) {
    outputs[a.request.prompt] = alone.at(a.request.id).tokens;
    stops += alone.at(a.request.id).finish == FinishReason::Stop;
  }
  EXPECT_GT(stops, 0);  // a stop token inside an accepted run is exercised
  for (const SchedulerConfig &c : {config(kLargePool, 0), config(kLargePool, 16), config(kSmallPool, 0),
                                   config(4 * kMaxSeqLen / 4, 32, /*blockSize=*/4)}) {
    SCOPED_TRACE("kv_blocks " + std::to_string(c.numBlocks) + ", block_size " + std::to_string(c.blockSize) +
                 ", max_batch_tokens " + std::to_string(c.maxBatchTokens));
    ToyModel plain(c);
    const RunResult base = run(c, arrivals, plain);
    expectSameAsSolo(alone, base);

    OracleDrafter oracle(outputs);
    ToyModel target1(c);
    const RunResult o = run(c, arrivals, target1, {3, &oracle});
    expectSameAsSolo(alone, o);
    EXPECT_GT(o.stats.acceptedTokens, 0);
    EXPECT_LT(o.stats.acceptedTokens, o.stats.draftTokens);  // rejections happened
    EXPECT_LT(o.steps, base.steps);
    print("oracle K 3", c, o, base.steps);

    auto ngram = NgramDrafter::create(1, 3);
    ASSERT_TRUE(static_cast<bool>(ngram));
    ToyModel target2(c);
    const RunResult n = run(c, arrivals, target2, {4, ngram->get()});
    expectSameAsSolo(alone, n);
    EXPECT_GT(n.stats.draftTokens, 0);
    print("ngram K 4", c, n, base.steps);

    for (float noise : {0.0f, 2.0f}) {
      SCOPED_TRACE("draft noise " + std::to_string(noise));
      // The draft runs with a pool and budget of its own (smaller than the target's at times).
      SchedulerConfig dc = c;
      dc.maxBatchTokens = 24;
      dc.maxBatchSeqs = 5;
      ToyModel draft(dc, noise), target(c);
      auto drafter = DraftModelDrafter::create(draft, c);
      ASSERT_TRUE(static_cast<bool>(drafter)) << llvm::toString(drafter.takeError());
      const RunResult d = run(c, arrivals, target, {noise == 0 ? 5 : 3, drafter->get()});
      expectSameAsSolo(alone, d);
      expectAllFree((*drafter)->blockManager());
      if (noise == 0) EXPECT_EQ(d.stats.acceptedTokens, d.stats.draftTokens);  // the draft is the target
      else EXPECT_LT(d.stats.acceptedTokens, d.stats.draftTokens);
      EXPECT_GT(d.stats.acceptedTokens, 0);
      print(noise == 0 ? "same model K 5" : "draft K 3", c, d, base.steps);
    }
  }
}

//===----------------------------------------------------------------------------------------===//
// Rollback, the prefix cache, stops inside a run
//===----------------------------------------------------------------------------------------===//

/// Greedy token after position p is script[p + 1] (a scripted model: logits one-hot).
class ScriptedModel : public StepModel {
public:
  ScriptedModel(const SchedulerConfig &c, std::vector<TokenId> script) : config_(c), script_(std::move(script)) {}
  const SchedulerConfig &config() const override { return config_; }
  llvm::Error step(const StepBatch &b, llvm::MutableArrayRef<float> logits) override {
    std::fill(logits.begin(), logits.end(), 0.0f);
    for (size_t j = 0; j < b.logitsIndices.size(); ++j) {
      const size_t p = static_cast<size_t>(b.positions[b.logitsIndices[j]]) + 1;
      logits[j * config_.vocabSize + (p < script_.size() ? script_[p] : 0)] = 10.0f;
    }
    batches.push_back(b);
    return llvm::Error::success();
  }
  std::vector<StepBatch> batches;

private:
  SchedulerConfig config_;
  std::vector<TokenId> script_;
};

/// Always proposes `drafts` (cut to maxDrafts).
class FixedDrafter : public Drafter {
public:
  explicit FixedDrafter(std::vector<TokenId> drafts) : drafts_(std::move(drafts)) {}
  const char *method() const override { return "fixed"; }
  llvm::Error propose(llvm::MutableArrayRef<DraftRequest> requests) override {
    for (DraftRequest &r : requests)
      r.drafts.assign(drafts_.begin(), drafts_.begin() + std::min<size_t>(drafts_.size(), r.maxDrafts));
    return llvm::Error::success();
  }
  std::vector<TokenId> drafts_;
};

TEST(Speculative, RejectedDraftsFreeTheirBlocksAndNeverEnterThePrefixCache) {
  SchedulerConfig c = config(64, 0, /*blockSize=*/4);
  // Prompt: positions 0..5; the model continues with 20, 21, 22, ...
  std::vector<TokenId> script = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 40; ++i) script.push_back(static_cast<TokenId>(20 + i));
  ScriptedModel model(c, script);
  FixedDrafter drafter({50, 51, 52, 53, 54});  // always wrong
  auto made = Scheduler::create(c, {5, &drafter});
  ASSERT_TRUE(static_cast<bool>(made));
  Scheduler &s = **made;
  Request r;
  r.id = "a";
  r.prompt = {1, 2, 3, 4, 5, 6};
  r.maxTokens = 10;
  r.sampling.temperature = 0;
  ASSERT_TRUE(static_cast<bool>(s.addRequest(r)));
  auto step = [&] { return s.step([&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return model.step(b, l); }); };
  ASSERT_FALSE(static_cast<bool>(step()));  // prefill: samples 20 (position 6)
  const int32_t freeAfterPrefill = s.blockManager().numFreeBlocks();  // 2 blocks held
  EXPECT_EQ(freeAfterPrefill, 62);
  ASSERT_FALSE(static_cast<bool>(step()));  // verify [20, 50..54] at positions 6..11: 3 blocks more
  const StepBatch b = model.batches.back();
  EXPECT_EQ(b.tokenIds, (std::vector<TokenId>{20, 50, 51, 52, 53, 54}));
  EXPECT_EQ(b.logitsIndices, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.positions.front(), 6);
  const ScheduledChunk &ch = s.lastStep().chunks.at(0);
  EXPECT_EQ(ch.numDrafts, 5);
  EXPECT_EQ(ch.acceptedDrafts, 0);
  EXPECT_EQ(ch.tokens, (std::vector<TokenId>{21}));  // the target's own token
  // Verified: positions 0..6 (7 tokens, 2 blocks); the block for positions 8..11 is free again.
  EXPECT_EQ(s.blockManager().numFreeBlocks(), 62);
  // Only the verified full block [0, 4) is cached; [4, 8) held drafts at 7 and is not full of
  // verified tokens.
  int cached = 0;
  for (BlockId blk = 0; blk < 64; ++blk) cached += s.blockManager().isCached(blk);
  EXPECT_EQ(cached, 1);
  // The next verification overwrites the rejected drafts' slots: same slots for positions 7, 8.
  ASSERT_FALSE(static_cast<bool>(step()));
  EXPECT_EQ(model.batches.back().tokenIds.front(), 21);
  EXPECT_EQ(model.batches.back().positions.front(), 7);
  EXPECT_EQ(model.batches.back().slotMapping.front(), b.slotMapping[1]);
  while (s.hasUnfinished()) ASSERT_FALSE(static_cast<bool>(step()));
  auto out = s.takeFinished();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tokens, (std::vector<TokenId>{20, 21, 22, 23, 24, 25, 26, 27, 28, 29}));
  EXPECT_EQ(s.speculativeStats().acceptedTokens, 0);
  // One token each; the last decode (max_tokens − 1 − generated = 0) proposes nothing.
  EXPECT_EQ(s.speculativeStats().verifications, 8);
  // A prompt repeating the verified tokens then a rejected draft: only verified full blocks hit
  // (positions 0..7 = 1..6, 20, 21 are all verified now: 2 blocks), never a block of drafts.
  Request again = r;
  again.id = "b";
  again.prompt = {1, 2, 3, 4, 5, 6, 20, 50, 51, 52};
  again.maxTokens = 1;
  ASSERT_TRUE(static_cast<bool>(s.addRequest(again)));
  while (s.hasUnfinished()) ASSERT_FALSE(static_cast<bool>(step()));
  out = s.takeFinished();
  EXPECT_EQ(out.at(0).cachedPromptTokens, 4);
  expectAllFree(s.blockManager());
}

TEST(Speculative, AStopTokenOrMaxTokensInsideAnAcceptedRunEndsItThere) {
  SchedulerConfig c = config(64, 0, 4);
  std::vector<TokenId> script = {1, 2, 3, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39};
  for (int64_t maxTokens : {3, 10}) {
    ScriptedModel model(c, script);
    FixedDrafter drafter({});
    auto made = Scheduler::create(c, {4, &drafter});
    ASSERT_TRUE(static_cast<bool>(made));
    Scheduler &s = **made;
    Request r;
    r.id = "a";
    r.prompt = {1, 2, 3};
    r.maxTokens = maxTokens;
    r.sampling.temperature = 0;
    r.stopTokenIds = {34};
    ASSERT_TRUE(static_cast<bool>(s.addRequest(r)));
    auto step = [&] { return s.step([&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return model.step(b, l); }); };
    ASSERT_FALSE(static_cast<bool>(step()));  // prefill: 30
    drafter.drafts_ = {31, 32, 33, 34};       // all right: the run would be 31 32 33 34 35
    while (s.hasUnfinished()) ASSERT_FALSE(static_cast<bool>(step()));
    auto out = s.takeFinished();
    ASSERT_EQ(out.size(), 1u);
    if (maxTokens == 3) {
      // Two drafts at most (max_tokens − 1 − generated), then the target's token.
      EXPECT_EQ(out[0].tokens, (std::vector<TokenId>{30, 31, 32}));
      EXPECT_EQ(out[0].finish, FinishReason::Length);
      EXPECT_EQ(s.speculativeStats().draftTokens, 1);  // the drafter proposed [31] (cut to 1)
    } else {
      EXPECT_EQ(out[0].tokens, (std::vector<TokenId>{30, 31, 32, 33, 34}));
      EXPECT_EQ(out[0].finish, FinishReason::Stop);
      EXPECT_EQ(s.speculativeStats().acceptedTokens, 4);
    }
    expectAllFree(s.blockManager());
  }
}

TEST(Speculative, ConfigurationErrors) {
  FixedDrafter drafter({});
  auto zero = Scheduler::create(config(kLargePool, 0), {0, &drafter});
  ASSERT_FALSE(static_cast<bool>(zero));
  EXPECT_EQ(llvm::toString(zero.takeError()), "--num-speculative-tokens must be >= 1, not 0");
  auto wide = Scheduler::create(config(kLargePool, 8), {8, &drafter});
  ASSERT_FALSE(static_cast<bool>(wide));
  EXPECT_EQ(llvm::toString(wide.takeError()),
            "--num-speculative-tokens 8: a verification runs K + 1 = 9 tokens, above max_batch_tokens 8");
  SchedulerConfig other = config(kLargePool, 0);
  other.vocabSize = 65;
  ToyModel draft(other);
  auto d = DraftModelDrafter::create(draft, config(kLargePool, 0));
  ASSERT_FALSE(static_cast<bool>(d));
  EXPECT_EQ(llvm::toString(d.takeError()), "the draft model's vocabulary has 65 tokens, the target's 64");
}

//===----------------------------------------------------------------------------------------===//
// Sampling: the target's distribution
//===----------------------------------------------------------------------------------------===//

constexpr int32_t kSmallVocab = 6;

/// Logits are table[previous token][id] (previous: the row's token), independent of anything
/// else: p(next | prefix) = softmax(table[last token]).
class BigramModel : public StepModel {
public:
  BigramModel(const SchedulerConfig &c, uint32_t seed) : config_(c) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.5f, 1.5f);
    for (float &x : table_) x = u(rng);
  }
  const SchedulerConfig &config() const override { return config_; }
  llvm::Error step(const StepBatch &b, llvm::MutableArrayRef<float> logits) override {
    for (size_t j = 0; j < b.logitsIndices.size(); ++j) {
      const TokenId prev = b.tokenIds[b.logitsIndices[j]];
      std::copy(table_ + prev * kSmallVocab, table_ + (prev + 1) * kSmallVocab, logits.begin() + j * kSmallVocab);
    }
    return llvm::Error::success();
  }
  /// The exact next-token distribution after `prev` (the reference, written from the definition:
  /// temperature, then top-k, then softmax).
  std::vector<double> next(TokenId prev, double temperature, int32_t topK) const {
    std::vector<double> l(table_ + prev * kSmallVocab, table_ + (prev + 1) * kSmallVocab);
    std::vector<double> sorted = l;
    std::sort(sorted.rbegin(), sorted.rend());
    const double kth = topK > 0 ? sorted[topK - 1] : -INFINITY;
    std::vector<double> p(kSmallVocab, 0.0);
    double z = 0;
    for (int v = 0; v < kSmallVocab; ++v)
      if (l[v] >= kth) z += p[v] = std::exp(l[v] / temperature);
    for (double &x : p) x /= z;
    return p;
  }

private:
  SchedulerConfig config_;
  float table_[kSmallVocab * kSmallVocab];
};

SchedulerConfig smallConfig() {
  SchedulerConfig c;
  c.maxSeqLen = 16;
  c.blockSize = 4;
  c.numBlocks = 64 * 4;
  c.maxBatchSeqs = 64;
  c.maxBatchTokens = 0;
  c.vocabSize = kSmallVocab;
  return c;
}

/// Pearson's chi-square of `counts` against `n · p` over the cells with p > 0; `df` gets their
/// number − 1. A count in a cell of p = 0 makes it infinite.
double chiSquare(const std::vector<int64_t> &counts, const std::vector<double> &p, int64_t n, int &df) {
  double chi = 0;
  df = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i]) return INFINITY;
      continue;
    }
    ++df;
    const double e = n * p[i];
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

/// The 0.001 critical value of chi-square with `df` degrees of freedom, by the Wilson–Hilferty
/// approximation (66.7 for df 35, where the table value is 66.6; 20.7 for 5, table 20.5).
double critical(int df) {
  const double z = 3.0902, a = 2.0 / (9.0 * df);  // z: the standard normal's 0.999 quantile
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct SampledRun {
  std::vector<std::vector<TokenId>> outputs;
  SpeculativeStats stats;
};

constexpr int kOutputTokens = 4;

/// `n` requests with seeds 0..n−1 (prompt `prompt`, kOutputTokens tokens each) through a
/// scheduler with `drafter` (K 2), 64 at a time: the first token comes from the prefill, then
/// verifications of 2 drafts (or 1, near max_tokens).
SampledRun sampleMany(BigramModel &target, Drafter *drafter, const std::vector<TokenId> &prompt, int n,
                      double temperature, int32_t topK) {
  SampledRun out;
  auto made = Scheduler::create(target.config(), {2, drafter});
  EXPECT_TRUE(static_cast<bool>(made));
  if (!made) return out;
  Scheduler &s = **made;
  out.outputs.resize(n);
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = prompt;
    r.maxTokens = kOutputTokens;
    r.sampling.temperature = temperature;
    r.sampling.topK = topK;
    r.sampling.seed = static_cast<uint64_t>(i);
    EXPECT_TRUE(static_cast<bool>(s.addRequest(r)));
  }
  while (s.hasUnfinished()) {
    if (llvm::Error e = s.step([&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return target.step(b, l); })) {
      ADD_FAILURE() << llvm::toString(std::move(e));
      return out;
    }
    for (RequestOutput &o : s.takeFinished()) out.outputs[std::stoi(o.id)] = o.tokens;
  }
  expectAllFree(s.blockManager());
  out.stats = s.speculativeStats();
  return out;
}

/// Chi-square of every pair of consecutive tokens (t_i, t_i+1) against its exact joint
/// distribution m_i(a) · p(b | a), m_1 = p(· | last prompt token), m_i+1(b) = Σ_a m_i(a) p(b | a).
void expectTargetDistribution(const BigramModel &target, const SampledRun &run, TokenId last, double temperature,
                              int32_t topK, const std::string &what) {
  const int64_t n = static_cast<int64_t>(run.outputs.size());
  std::vector<double> m = target.next(last, temperature, topK);
  for (int i = 0; i + 1 < kOutputTokens; ++i) {
    std::vector<double> joint(kSmallVocab * kSmallVocab), nextM(kSmallVocab, 0.0);
    for (int a = 0; a < kSmallVocab; ++a) {
      const std::vector<double> pa = target.next(a, temperature, topK);
      for (int b = 0; b < kSmallVocab; ++b) {
        joint[a * kSmallVocab + b] = m[a] * pa[b];
        nextM[b] += m[a] * pa[b];
      }
    }
    std::vector<int64_t> counts(joint.size());
    for (const std::vector<TokenId> &o : run.outputs) {
      ASSERT_EQ(o.size(), static_cast<size_t>(kOutputTokens));
      ++counts[o[i] * kSmallVocab + o[i + 1]];
    }
    int df;
    const double x = chiSquare(counts, joint, n, df);
    std::printf("[ speculative ] %-26s (t%d, t%d) over %d samples: chi2 %6.2f, df %2d, critical (0.001) %.1f\n",
                what.c_str(), i + 1, i + 2, static_cast<int>(n), x, df, critical(df));
    EXPECT_LT(x, critical(df)) << what << ", tokens " << i + 1 << " and " << i + 2;
    m = nextM;
  }
  std::printf("[ speculative ] %-26s %lld of %lld drafts accepted\n", what.c_str(),
              static_cast<long long>(run.stats.acceptedTokens), static_cast<long long>(run.stats.draftTokens));
}

TEST(Speculative, SamplingKeepsTheTargetDistribution) {
  constexpr int kSamples = 20000;
  const SchedulerConfig c = smallConfig();
  BigramModel target(c, 1), draft(c, 2);  // different tables: q differs from p
  for (auto [temperature, topK] : {std::pair<double, int32_t>{1.0, 0}, {0.8, 4}}) {
    const std::string cfg = "T " + std::to_string(temperature).substr(0, 3) + " top-k " + std::to_string(topK);
    auto drafter = DraftModelDrafter::create(draft, c);
    ASSERT_TRUE(static_cast<bool>(drafter));
    const std::vector<TokenId> prompt = {0, 1};
    SampledRun d = sampleMany(target, drafter->get(), prompt, kSamples, temperature, topK);
    expectTargetDistribution(target, d, 1, temperature, topK, "draft model, " + cfg);
    EXPECT_GT(d.stats.acceptedTokens, 0);
    EXPECT_LT(d.stats.acceptedTokens, d.stats.draftTokens);
    expectAllFree((*drafter)->blockManager());

    auto ngram = NgramDrafter::create(1, 2);
    ASSERT_TRUE(static_cast<bool>(ngram));
    const std::vector<TokenId> repeating = {0, 1, 0, 1, 0};  // the n-gram drafter proposes [1, 0]
    SampledRun g = sampleMany(target, ngram->get(), repeating, kSamples, temperature, topK);
    expectTargetDistribution(target, g, 0, temperature, topK, "ngram, " + cfg);
    EXPECT_GT(g.stats.acceptedTokens, 0);
  }
}

TEST(Speculative, AWrongDraftDistributionFailsTheSameTest) {
  // The power of the check above: drafts drawn from q but verified as if drawn from p are
  // accepted always, so the tokens follow q, and chi-square sees it.
  const SchedulerConfig c = smallConfig();
  BigramModel target(c, 1), draft(c, 2);
  SamplingParams params;
  SamplingWorkspace ws;
  std::vector<float> targetRows(2 * kSmallVocab), draftRow(kSmallVocab);
  StepBatch b;
  b.tokenIds = {1, 0};
  b.positions = {0, 1};
  b.logitsIndices = {0, 1};
  ASSERT_FALSE(static_cast<bool>(target.step(b, targetRows)));
  b.logitsIndices = {0};
  ASSERT_FALSE(static_cast<bool>(draft.step(b, draftRow)));
  const std::vector<double> q = samplingDistribution(draftRow, params, {}, ws);
  const std::vector<double> p = samplingDistribution(llvm::ArrayRef<float>(targetRows).take_front(kSmallVocab), params, {}, ws);
  std::vector<int64_t> honest(kSmallVocab), wrong(kSmallVocab);
  constexpr int kSamples = 20000;
  for (int i = 0; i < kSamples; ++i) {
    params.seed = static_cast<uint64_t>(i);
    double u = philoxUniform(params.seed, 0, kDraftStream);
    TokenId d = 0;
    while (d < kSmallVocab - 1 && u >= q[d]) u -= q[d++];
    // The target's rows at the draft: row 1 is only read when the draft is accepted.
    int32_t accepted;
    ++honest[verifyDrafts(targetRows, {d}, q, params, {1}, 0, ws, accepted)[0]];
    ++wrong[verifyDrafts(targetRows, {d}, p, params, {1}, 0, ws, accepted)[0]];
  }
  int df;
  const double xh = chiSquare(honest, p, kSamples, df), xw = chiSquare(wrong, p, kSamples, df);
  std::printf("[ speculative ] one step, %d samples: chi2 %.2f with the draft's q, %.2f with q taken to be p "
              "(df %d, critical %.1f)\n", kSamples, xh, xw, df, critical(df));
  EXPECT_LT(xh, critical(df));
  EXPECT_GT(xw, critical(df));
}

TEST(Speculative, SeededRequestsGiveTheSameTokensAloneAndBatched) {
  const SchedulerConfig c = config(kLargePool, 0);
  std::vector<Request> requests;
  std::mt19937 rng(3);
  for (int i = 0; i < 12; ++i) {
    Request r;
    r.id = "s" + std::to_string(i);
    for (int t = 0; t < 5 + 7 * i; ++t) r.prompt.push_back(static_cast<TokenId>(rng() % kVocab));
    r.maxTokens = 20 + i;
    r.sampling.temperature = 0.7 + 0.05 * i;
    r.sampling.topP = i % 2 ? 0.9 : 1.0;
    r.sampling.seed = 100 + i;
    requests.push_back(r);
  }
  std::vector<Arrival> arrivals;
  for (size_t i = 0; i < requests.size(); ++i) arrivals.push_back({static_cast<int64_t>(i / 3), requests[i]});
  for (float noise : {0.3f, 1.0f}) {
    ToyModel draft(c, noise), target(c);
    auto drafter = DraftModelDrafter::create(draft, c);
    ASSERT_TRUE(static_cast<bool>(drafter));
    const RunResult together = run(c, arrivals, target, {3, drafter->get()});
    for (const Request &r : requests) {
      ToyModel draftAlone(c, noise), targetAlone(c);
      auto d = DraftModelDrafter::create(draftAlone, c);
      ASSERT_TRUE(static_cast<bool>(d));
      const RunResult alone = run(c, {{0, r}}, targetAlone, {3, d->get()});
      EXPECT_EQ(together.outputs.at(r.id).tokens, alone.outputs.at(r.id).tokens) << r.id;
    }
    EXPECT_GT(together.stats.acceptedTokens, 0);
  }
  // Token budgets that leave no room for every decode's drafts: a decode without room waits for
  // a step with room instead of running without its drafts (which changed sampled tokens).
  for (int64_t budget : {int64_t(4), int64_t(9)}) {
    const SchedulerConfig small = config(kLargePool, budget);
    auto together = NgramDrafter::create(1, 3);
    ASSERT_TRUE(static_cast<bool>(together));
    ToyModel target(small);
    const RunResult all = run(small, arrivals, target, {3, together->get()});
    for (const Request &r : requests) {
      auto alone = NgramDrafter::create(1, 3);
      ASSERT_TRUE(static_cast<bool>(alone));
      ToyModel targetAlone(small);
      const RunResult one = run(small, {{0, r}}, targetAlone, {3, alone->get()});
      EXPECT_EQ(all.outputs.at(r.id).tokens, one.outputs.at(r.id).tokens) << r.id << " at budget " << budget;
    }
  }
}

}  // namespace

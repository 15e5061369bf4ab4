//===- SchedulerTest.cpp - Continuous batching: same tokens whatever the batch -------------===//
//
// The scheduler drives a toy two-layer decoder through the real kv_append, kv_copy_blocks and
// paged_attention kernels: each token's first-layer key, value and query come from its id and
// position, the second layer's from the first layer's output (so they depend on the whole prefix,
// as a real decoder's do), and the logits from the second layer's output. Checked: 16 requests
// arriving staggered (prompts of 1–300 tokens, different max_tokens, greedy and seeded sampling,
// stop tokens) give each the tokens it gives alone, at token budgets 16, 64 and unlimited, on a
// pool large enough and on pools so small (block sizes 16 and 4) that sequences are preempted and
// recomputed, and so do long outputs preempted dozens of times; every step respects the budgets,
// puts decodes first and admits in arrival order; all blocks are free once the requests drain
// (aborts included); a repeated prompt reports its full-block cached prefix and the same tokens;
// bad requests and configurations are refused with their numbers.
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"
#include "ToyDecoder.h"

#include "colossal/runtime/serve/Scheduler.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
using namespace colossal::runtime::serve;

namespace {

constexpr int32_t kVocab = 64, kBlockSize = 16;
constexpr int64_t kMaxSeqLen = 384;

SchedulerConfig config(int32_t numBlocks, int64_t maxBatchTokens, bool prefixCaching = true,
                       int32_t blockSize = kBlockSize) {
  SchedulerConfig c;
  c.maxSeqLen = kMaxSeqLen;
  c.blockSize = blockSize;
  c.numBlocks = numBlocks;
  c.prefixCaching = prefixCaching;
  c.maxBatchSeqs = 16;
  c.maxBatchTokens = maxBatchTokens;
  c.vocabSize = kVocab;
  return c;
}
constexpr int32_t kLargePool = 16 * kMaxSeqLen / kBlockSize;  // kv_blocks: auto for 16 sequences
constexpr int32_t kSmallPool = kMaxSeqLen / kBlockSize;  // one max_seq_len sequence: forces preemption

struct Arrival {
  int64_t step;
  Request request;
};

/// 16 requests: prompts of 1 to 300 tokens, max_tokens 1 to 48, arriving at steps 0 to 30;
/// greedy, and seeded sampling with top-k, top-p, min-p and a repetition penalty; some stop tokens.
/// `longOutputs`: prompts of 1 to 64 tokens, max_tokens 80 to 185 instead (decodes outgrow the pool).
std::vector<Arrival> workload(bool longOutputs = false) {
  const int lens[16] = {1, 300, 17, 64, 129, 5, 250, 33, 16, 200, 2, 90, 48, 275, 160, 8};
  const int maxTokens[16] = {12, 30, 1, 48, 20, 40, 9, 25, 33, 16, 44, 7, 38, 22, 28, 48};
  std::mt19937 rng(7);
  std::vector<Arrival> out;
  int64_t step = 0;
  for (int i = 0; i < 16; ++i) {
    Request r;
    r.id = "req-" + std::to_string(i);
    const int len = longOutputs ? lens[i] % 64 + 1 : lens[i];
    for (int t = 0; t < len; ++t) r.prompt.push_back(static_cast<TokenId>(rng() % kVocab));
    r.maxTokens = longOutputs ? 80 + 7 * i : maxTokens[i];
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8 + 0.05 * i;
      r.sampling.topK = i % 4 == 1 ? 20 : 0;
      r.sampling.topP = i % 4 == 3 ? 0.9 : 1.0;
      r.sampling.minP = i == 5 ? 0.05 : 0.0;
      r.sampling.repetitionPenalty = i == 7 ? 1.3 : 1.0;
      r.sampling.seed = 1000 + i;
    } else {
      r.sampling.temperature = 0;
    }
    if (i % 3 == 0) r.stopTokenIds = {3, 17, 42};
    out.push_back({step, std::move(r)});
    step += rng() % 4;
  }
  return out;
}

struct RunResult {
  std::map<std::string, RequestOutput> outputs;
  int64_t steps = 0, preemptions = 0, maxStepTokens = 0;
};

void expectAllFree(const Scheduler &s) {
  const BlockManager &bm = s.blockManager();
  EXPECT_EQ(bm.numFreeBlocks(), bm.numBlocks());
  for (BlockId b = 0; b < bm.numBlocks(); ++b) EXPECT_EQ(bm.refCount(b), 0) << "block " << b;
  EXPECT_EQ(s.numWaiting(), 0);
  EXPECT_EQ(s.numRunning(), 0);
}

/// Checks one step's record: within the budgets, decodes before prompt chunks, one chunk per
/// sequence.
void checkStep(const SchedulerConfig &c, const StepRecord &rec) {
  EXPECT_LE(static_cast<int64_t>(rec.chunks.size()), c.maxBatchSeqs);
  if (c.maxBatchTokens > 0) EXPECT_LE(rec.scheduledTokens, c.maxBatchTokens);
  bool prompt = false;
  std::set<SeqId> seen;
  for (const ScheduledChunk &ch : rec.chunks) {
    EXPECT_FALSE(ch.decode && prompt) << "step " << rec.step << ": a decode after a prompt chunk";
    prompt |= !ch.decode;
    EXPECT_TRUE(seen.insert(ch.seq).second);
    EXPECT_TRUE(ch.start < ch.end || (ch.start == ch.end && ch.sampled)) << "an empty chunk is a fork's first token";
    if (ch.decode) EXPECT_EQ(ch.end - ch.start, 1);
  }
}

/// Runs `arrivals` (each added before the step of its index) until every request finished.
RunResult run(const SchedulerConfig &c, const std::vector<Arrival> &arrivals) {
  RunResult result;
  auto made = Scheduler::create(c);
  EXPECT_TRUE(static_cast<bool>(made)) << (made ? "" : llvm::toString(made.takeError()));
  if (!made) return result;
  Scheduler &s = **made;
  ToyDecoder model(c);
  size_t next = 0;
  std::map<SeqId, int64_t> firstScheduled;  // admission order
  while (next < arrivals.size() || s.hasUnfinished()) {
    for (; next < arrivals.size() && arrivals[next].step <= s.numSteps(); ++next) {
      auto id = s.addRequest(arrivals[next].request);
      EXPECT_TRUE(static_cast<bool>(id)) << (id ? "" : llvm::toString(id.takeError()));
    }
    llvm::Error e = s.step([&](const StepBatch &b, llvm::MutableArrayRef<float> logits) { return model(b, logits); });
    if (e) {
      ADD_FAILURE() << llvm::toString(std::move(e));
      return result;
    }
    checkStep(c, s.lastStep());
    for (const ScheduledChunk &ch : s.lastStep().chunks) firstScheduled.emplace(ch.seq, s.lastStep().step);
    result.maxStepTokens = std::max(result.maxStepTokens, s.lastStep().scheduledTokens);
    for (RequestOutput &o : s.takeFinished()) result.outputs[o.id] = std::move(o);
    if (s.numSteps() > 100000) {
      ADD_FAILURE() << "no end after 100000 steps";
      return result;
    }
  }
  // First come, first served: sequence ids follow arrival; none is first scheduled before an
  // earlier one.
  int64_t last = -1;
  for (auto [seq, step] : firstScheduled) {
    EXPECT_GE(step, last) << "sequence " << seq << " overtook an earlier request";
    last = step;
  }
  expectAllFree(s);
  result.steps = s.numSteps();
  result.preemptions = s.numPreemptions();
  return result;
}

/// Each request's output alone on a fresh scheduler, prefilled whole.
std::map<std::string, RequestOutput> solo(const std::vector<Arrival> &arrivals) {
  std::map<std::string, RequestOutput> out;
  for (const Arrival &a : arrivals) {
    RunResult r = run(config(kLargePool, 0), {{0, a.request}});
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

TEST(Scheduler, StaggeredRequestsGiveTheirSoloTokensAtEveryTokenBudget) {
  const std::vector<Arrival> arrivals = workload();
  const auto alone = solo(arrivals);
  int stops = 0, lengths = 0;
  for (const auto &[id, o] : alone) (o.finish == FinishReason::Stop ? stops : lengths)++;
  EXPECT_GT(stops, 0);  // the stop-token path is exercised
  EXPECT_GT(lengths, 0);
  for (int64_t budget : {16, 64, 0}) {
    SCOPED_TRACE("max_batch_tokens " + std::to_string(budget));
    RunResult r = run(config(kLargePool, budget), arrivals);
    expectSameAsSolo(alone, r);
    EXPECT_EQ(r.preemptions, 0);
    if (budget > 0) EXPECT_EQ(r.maxStepTokens, budget);  // a prompt was split across steps
    std::printf("[ scheduler ] max_batch_tokens %3lld, kv_blocks %d: %lld steps, %lld preemptions, "
                "at most %lld tokens a step (%d stopped, %d at max_tokens)\n",
                static_cast<long long>(budget), kLargePool, static_cast<long long>(r.steps),
                static_cast<long long>(r.preemptions), static_cast<long long>(r.maxStepTokens), stops, lengths);
  }
}

TEST(Scheduler, PreemptionByRecomputeKeepsTheTokens) {
  const std::vector<Arrival> arrivals = workload();
  const auto alone = solo(arrivals);
  // Pools of one max_seq_len sequence: 24 blocks of 16 tokens, 96 of 4.
  for (int32_t blockSize : {kBlockSize, 4}) {
    for (bool prefixCaching : {true, false}) {
      for (int64_t budget : {16, 64, 0}) {
        SCOPED_TRACE("max_batch_tokens " + std::to_string(budget) + ", block size " + std::to_string(blockSize) +
                     (prefixCaching ? "" : ", no prefix cache"));
        const int32_t blocks = static_cast<int32_t>(kMaxSeqLen / blockSize);
        RunResult r = run(config(blocks, budget, prefixCaching, blockSize), arrivals);
        expectSameAsSolo(alone, r);
        EXPECT_GT(r.preemptions, 0);
        int64_t perRequest = 0;
        for (const auto &[id, o] : r.outputs) perRequest += o.preemptions;
        EXPECT_EQ(perRequest, r.preemptions);
        std::printf("[ scheduler ] max_batch_tokens %3lld, kv_blocks %d of %d%s: %lld steps, %lld preemptions\n",
                    static_cast<long long>(budget), blocks, blockSize, prefixCaching ? "" : " (no prefix cache)",
                    static_cast<long long>(r.steps), static_cast<long long>(r.preemptions));
      }
    }
  }
}

TEST(Scheduler, LongOutputsPreemptedManyTimesKeepTheirTokens) {
  const std::vector<Arrival> arrivals = workload(/*longOutputs=*/true);
  const auto alone = solo(arrivals);
  for (int64_t budget : {16, 64, 0}) {
    SCOPED_TRACE("max_batch_tokens " + std::to_string(budget));
    RunResult r = run(config(kSmallPool, budget), arrivals);
    expectSameAsSolo(alone, r);
    EXPECT_GE(r.preemptions, 10);
    std::printf("[ scheduler ] long outputs, max_batch_tokens %3lld, kv_blocks %d: %lld steps, %lld preemptions\n",
                static_cast<long long>(budget), kSmallPool, static_cast<long long>(r.steps),
                static_cast<long long>(r.preemptions));
  }
}

TEST(Scheduler, ChunkedPrefillSplitsAPromptAndDecodesComeFirst) {
  auto made = Scheduler::create(config(kLargePool, 64));
  ASSERT_TRUE(static_cast<bool>(made));
  Scheduler &s = **made;
  ToyDecoder model(s.config());
  auto runModel = [&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return model(b, l); };
  Request a{"a", std::vector<TokenId>(10, 5), 4, {}, {}};
  a.sampling.temperature = 0;
  Request b{"b", std::vector<TokenId>(300, 9), 2, {}, {}};
  b.sampling.temperature = 0;
  ASSERT_TRUE(static_cast<bool>(s.addRequest(a)));
  ASSERT_TRUE(static_cast<bool>(s.addRequest(b)));
  ASSERT_NO_ERR(s.step(runModel));
  const StepRecord r0 = s.lastStep();
  ASSERT_EQ(r0.chunks.size(), 2u);
  EXPECT_EQ(std::make_pair(r0.chunks[0].start, r0.chunks[0].end), std::make_pair(int64_t(0), int64_t(10)));
  EXPECT_TRUE(r0.chunks[0].sampled);
  EXPECT_EQ(std::make_pair(r0.chunks[1].start, r0.chunks[1].end), std::make_pair(int64_t(0), int64_t(54)));
  EXPECT_FALSE(r0.chunks[1].sampled);
  EXPECT_EQ(s.lastBatch().logitsIndices, std::vector<int32_t>{9});
  ASSERT_NO_ERR(s.step(runModel));
  const StepRecord r1 = s.lastStep();
  ASSERT_EQ(r1.chunks.size(), 2u);
  EXPECT_TRUE(r1.chunks[0].decode);
  EXPECT_EQ(r1.chunks[0].seq, 0);
  EXPECT_EQ(std::make_pair(r1.chunks[0].start, r1.chunks[0].end), std::make_pair(int64_t(10), int64_t(11)));
  EXPECT_EQ(std::make_pair(r1.chunks[1].start, r1.chunks[1].end), std::make_pair(int64_t(54), int64_t(117)));
  EXPECT_EQ(r1.decodeTokens, 1);
  EXPECT_EQ(r1.prefillTokens, 63);
  // The batch the model saw: rows in chunk order, positions and slots through the block table.
  const StepBatch &batch = s.lastBatch();
  EXPECT_EQ(batch.queryStartLoc, (std::vector<int32_t>{0, 1, 64}));
  EXPECT_EQ(batch.contextLens, (std::vector<int32_t>{11, 117}));
  EXPECT_EQ(batch.positions[0], 10);
  EXPECT_EQ(batch.positions[1], 54);
  EXPECT_EQ(batch.maxBlocksPerSeq, kMaxSeqLen / kBlockSize);
  const int32_t block = batch.blockTables[0 * batch.maxBlocksPerSeq + 0];
  EXPECT_EQ(batch.slotMapping[0], block * kBlockSize + 10);
  EXPECT_EQ(batch.blockTables[1], -1);  // a has one block
  while (s.hasUnfinished()) ASSERT_NO_ERR(s.step(runModel));
  std::vector<RequestOutput> done = s.takeFinished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].id, "a");
  EXPECT_EQ(done[0].tokens.size(), 4u);
  EXPECT_EQ(done[0].finish, FinishReason::Length);
  EXPECT_EQ(done[1].id, "b");
  EXPECT_EQ(done[1].firstTokenStep, 4);  // 54 + 63 + 63 + 63 + 57 prompt tokens over steps 0-4
  expectAllFree(s);
  // An empty scheduler's step runs nothing.
  ASSERT_NO_ERR(s.step([](const StepBatch &, llvm::MutableArrayRef<float>) -> llvm::Error {
    ADD_FAILURE() << "the model ran with nothing to do";
    return llvm::Error::success();
  }));
  EXPECT_TRUE(s.lastStep().chunks.empty());
}

TEST(Scheduler, NoBlocksLeakAfterAbortsAndDrains) {
  const std::vector<Arrival> arrivals = workload();
  auto made = Scheduler::create(config(kSmallPool, 64));
  ASSERT_TRUE(static_cast<bool>(made));
  Scheduler &s = **made;
  ToyDecoder model(s.config());
  std::map<SeqId, std::string> ids;
  for (const Arrival &a : arrivals) {
    auto seq = s.addRequest(a.request);
    ASSERT_TRUE(static_cast<bool>(seq));
    ids[*seq] = a.request.id;
  }
  auto runModel = [&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return model(b, l); };
  for (int i = 0; i < 6; ++i) ASSERT_NO_ERR(s.step(runModel));
  ASSERT_GT(s.numWaiting(), 0);
  // A sequence that ran in the last step and did not finish holds blocks.
  std::string running;
  for (const ScheduledChunk &c : s.lastStep().chunks)
    if (!llvm::is_contained(s.lastStep().finished, c.seq)) running = ids[c.seq];
  ASSERT_FALSE(running.empty());
  const int32_t freeBefore = s.blockManager().numFreeBlocks();
  ASSERT_NO_ERR(s.abort(running));
  EXPECT_GT(s.blockManager().numFreeBlocks(), freeBefore);
  ASSERT_NO_ERR(s.abort("req-15"));  // last in the queue: still waiting
  EXPECT_NE(errorMessage(s.abort(running)).find("no unfinished request '" + running + "'"), std::string::npos);
  EXPECT_NE(errorMessage(s.abort("nope")).find("'nope'"), std::string::npos);
  while (s.hasUnfinished()) ASSERT_NO_ERR(s.step(runModel));
  std::vector<RequestOutput> done = s.takeFinished();
  EXPECT_EQ(done.size(), 16u);
  int aborted = 0;
  for (const RequestOutput &o : done) aborted += o.finish == FinishReason::Abort;
  EXPECT_EQ(aborted, 2);
  expectAllFree(s);
  // Ids are free again once taken.
  EXPECT_TRUE(static_cast<bool>(s.addRequest(arrivals[15].request)));
}

/// Parallel sampling: a request of `n` choices, seeds 500 + c, temperature 0.9, 100-token prompt.
std::vector<Request> choices(int n, int64_t maxTokens) {
  std::mt19937 rng(11);
  std::vector<Request> out;
  std::vector<TokenId> prompt;
  for (int t = 0; t < 100; ++t) prompt.push_back(static_cast<TokenId>(rng() % kVocab));
  for (int c = 0; c < n; ++c) {
    Request r;
    r.id = "choice-" + std::to_string(c);
    r.prompt = prompt;
    r.maxTokens = maxTokens + 3 * c;  // the forks outlive the parent
    r.sampling.temperature = 0.9;
    r.sampling.seed = 500 + c;
    out.push_back(std::move(r));
  }
  return out;
}

TEST(Scheduler, ForkedChoicesShareThePromptBlocksAndGiveTheirSoloTokens) {
  const std::vector<Request> rs = choices(4, 20);
  // Each choice alone (no prefix caching: nothing shared).
  std::map<std::string, RequestOutput> want;
  for (const Request &r : rs) want[r.id] = run(config(kLargePool, 0, /*prefixCaching=*/false), {{0, r}}).outputs[r.id];
  for (int64_t budget : {int64_t(0), int64_t(16)}) {
    SchedulerConfig c = config(kLargePool, budget, /*prefixCaching=*/false);
    auto made = Scheduler::create(c);
    ASSERT_TRUE(static_cast<bool>(made));
    Scheduler &s = **made;
    ToyDecoder model(c);
    auto runModel = [&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return model(b, l); };
    SeqId parent = -1;
    for (Request r : rs) {
      r.forkOf = parent;
      auto seq = s.addRequest(std::move(r));
      ASSERT_TRUE(static_cast<bool>(seq)) << llvm::toString(seq.takeError());
      if (parent < 0) parent = *seq;
    }
    EXPECT_EQ(s.numWaiting(), 1);  // the forks wait for their parent, not in the queue
    int64_t prefill = 0;
    bool sawShared = false;
    while (s.hasUnfinished()) {
      ASSERT_NO_ERR(s.step(runModel));
      checkStep(c, s.lastStep());
      prefill += s.lastStep().prefillTokens;
      // The step that sampled the parent's first token forked the others: the 7 blocks of the
      // 100-token prompt are shared four ways, not copied.
      if (!sawShared && s.numRunning() == 4) {
        sawShared = true;
        EXPECT_EQ(s.blockManager().numFreeBlocks(), c.numBlocks - 7);
        for (BlockId b : s.blockManager().blockTable(parent)) EXPECT_EQ(s.blockManager().refCount(b), 4);
      }
    }
    EXPECT_TRUE(sawShared);
    EXPECT_EQ(prefill, 100) << "the prompt is computed once";
    for (RequestOutput &o : s.takeFinished()) {
      EXPECT_EQ(o.tokens, want.at(o.id).tokens) << o.id << " at budget " << budget;
      EXPECT_EQ(o.finish, want.at(o.id).finish) << o.id;
    }
    expectAllFree(s);
  }
}

TEST(Scheduler, ForksOfAnAbortedParentPrefillOnTheirOwn) {
  const std::vector<Request> rs = choices(3, 10);
  std::map<std::string, RequestOutput> want;
  for (const Request &r : rs) want[r.id] = run(config(kLargePool, 0), {{0, r}}).outputs[r.id];
  auto made = Scheduler::create(config(kLargePool, 0));
  ASSERT_TRUE(static_cast<bool>(made));
  Scheduler &s = **made;
  ToyDecoder model(s.config());
  SeqId parent = -1;
  for (Request r : rs) {
    r.forkOf = parent;
    auto seq = s.addRequest(std::move(r));
    ASSERT_TRUE(static_cast<bool>(seq));
    if (parent < 0) parent = *seq;
  }
  Request late = rs[0];
  late.id = "late";
  late.forkOf = parent + 5;
  EXPECT_NE(errorMessage(s.addRequest(late).takeError()).find("not a request still waiting"), std::string::npos);
  ASSERT_NO_ERR(s.abort("choice-0"));
  EXPECT_EQ(s.numWaiting(), 2);
  while (s.hasUnfinished())
    ASSERT_NO_ERR(s.step([&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return model(b, l); }));
  for (RequestOutput &o : s.takeFinished()) {
    if (o.id == "choice-0") {
      EXPECT_EQ(o.finish, FinishReason::Abort);
      continue;
    }
    EXPECT_EQ(o.tokens, want.at(o.id).tokens) << o.id;
  }
  expectAllFree(s);
}

TEST(Scheduler, RepeatedPromptReportsItsCachedFullBlocks) {
  const std::vector<Arrival> arrivals = workload();
  for (int32_t len : {100, 32, 1}) {
    SCOPED_TRACE("prompt of " + std::to_string(len));
    Request first = arrivals[1].request;  // seeded sampling
    first.prompt.resize(len);
    first.maxTokens = 20;
    Request again = first;
    again.id = "again";
    const RequestOutput alone = run(config(kLargePool, 0), {{0, first}}).outputs[first.id];
    for (bool prefixCaching : {true, false}) {
      RunResult r = run(config(kLargePool, 16, prefixCaching), {{0, first}, {40, again}});
      const RequestOutput &a = r.outputs[first.id], &b = r.outputs["again"];
      EXPECT_EQ(a.cachedPromptTokens, 0);
      // Full blocks only, never the block of the last prompt token: 16 · ⌊(len − 1) / 16⌋.
      EXPECT_EQ(b.cachedPromptTokens, prefixCaching ? kBlockSize * ((len - 1) / kBlockSize) : 0);
      EXPECT_EQ(a.tokens, alone.tokens);
      EXPECT_EQ(b.tokens, alone.tokens);
      EXPECT_GE(b.arrivalStep, a.finishStep);  // the first had finished: a cache hit, not sharing
    }
  }
  // A shared system prompt: the second request finds the 64 tokens of it that fill blocks.
  Request sys1 = arrivals[3].request, sys2 = arrivals[3].request;
  sys1.prompt.resize(70);
  sys2.prompt.resize(64);
  sys2.id = "other";
  for (TokenId t : {1, 2, 3, 4, 5}) sys2.prompt.push_back(t);
  const RequestOutput alone = run(config(kLargePool, 0), {{0, sys2}}).outputs["other"];
  RunResult r = run(config(kLargePool, 0), {{0, sys1}, {60, sys2}});
  EXPECT_EQ(r.outputs["other"].cachedPromptTokens, 64);
  EXPECT_EQ(r.outputs["other"].tokens, alone.tokens);
}

/// The InvalidRequestError of addRequest(r), or a failure.
std::pair<std::string, std::string> refusal(Scheduler &s, Request r) {
  auto id = s.addRequest(std::move(r));
  if (id) {
    ADD_FAILURE() << "accepted";
    return {};
  }
  std::pair<std::string, std::string> out;
  llvm::handleAllErrors(id.takeError(), [&](const InvalidRequestError &e) {
    out = {e.param(), e.text()};
    EXPECT_FALSE(e.requestId().empty());
  });
  return out;
}

TEST(Scheduler, BadRequestsAndConfigurationsAreRefusedWithTheirNumbers) {
  auto made = Scheduler::create(config(kLargePool, 64));
  ASSERT_TRUE(static_cast<bool>(made));
  Scheduler &s = **made;
  Request ok{"ok", {1, 2, 3}, 4, {}, {}};
  ASSERT_TRUE(static_cast<bool>(s.addRequest(ok)));

  Request r = ok;
  r.id = "empty";
  r.prompt.clear();
  EXPECT_EQ(refusal(s, r), std::make_pair(std::string("prompt"), std::string("request 'empty': the prompt is empty")));
  r = ok;
  r.id = "long";
  r.prompt.assign(300, 1);
  r.maxTokens = 100;
  EXPECT_EQ(refusal(s, r), std::make_pair(std::string("max_tokens"),
                                          std::string("request 'long': prompt of 300 tokens + max_tokens 100 = 400 "
                                                      "is above max_seq_len 384")));
  r.prompt.assign(384, 1);
  r.maxTokens = 1;
  EXPECT_EQ(refusal(s, r).second, "request 'long': prompt of 384 tokens + max_tokens 1 = 385 is above max_seq_len 384");
  r = ok;
  r.id = "zero";
  r.maxTokens = 0;
  EXPECT_EQ(refusal(s, r).second, "request 'zero': max_tokens must be >= 1, not 0");
  r = ok;
  r.id = "vocab";
  r.prompt = {1, 64};
  EXPECT_EQ(refusal(s, r), std::make_pair(std::string("prompt"),
                                          std::string("request 'vocab': prompt token 1 is 64, outside the "
                                                      "vocabulary [0, 64)")));
  r = ok;
  r.id = "temp";
  r.sampling.temperature = -1;
  EXPECT_EQ(refusal(s, r), std::make_pair(std::string("temperature"),
                                          std::string("request 'temp': temperature must be finite and >= 0, not -1")));
  r = ok;
  r.sampling.topP = 1.5;
  EXPECT_EQ(refusal(s, r), std::make_pair(std::string("id"), std::string("request 'ok': the id is already in use")));
  EXPECT_EQ(s.numWaiting(), 1);  // only "ok" was queued

  SchedulerConfig c = config(10, 64);
  EXPECT_EQ(errorMessage(Scheduler::create(c).takeError()),
            "max_seq_len 384 needs 24 blocks of 16 tokens, but kv_blocks is 10 (160 tokens)");
  c = config(kLargePool, 64);
  c.maxBatchSeqs = 0;
  EXPECT_EQ(errorMessage(Scheduler::create(c).takeError()), "max_batch_seqs must be >= 1, not 0");
  c = config(kLargePool, -1);
  EXPECT_EQ(errorMessage(Scheduler::create(c).takeError()), "max_batch_tokens must be >= 0 (0: no limit), not -1");
  c = config(kLargePool, 64);
  c.vocabSize = 0;
  EXPECT_EQ(errorMessage(Scheduler::create(c).takeError()), "the vocabulary size must be >= 1, not 0");
}

TEST(Scheduler, AModelErrorLeavesTheStepToBeRunAgain) {
  auto made = Scheduler::create(config(kLargePool, 64));
  ASSERT_TRUE(static_cast<bool>(made));
  Scheduler &s = **made;
  ToyDecoder model(s.config());
  auto runModel = [&](const StepBatch &b, llvm::MutableArrayRef<float> l) { return model(b, l); };
  Request a = workload()[4].request;
  const RequestOutput alone = run(config(kLargePool, 0), {{0, a}}).outputs[a.id];
  ASSERT_TRUE(static_cast<bool>(s.addRequest(a)));
  int calls = 0;
  while (s.hasUnfinished()) {
    // Every third step fails once.
    llvm::Error e = s.step([&](const StepBatch &b, llvm::MutableArrayRef<float> l) -> llvm::Error {
      if (++calls % 3 == 0) return llvm::createStringError(llvm::inconvertibleErrorCode(), "device lost");
      return runModel(b, l);
    });
    if (e) EXPECT_EQ(llvm::toString(std::move(e)), "device lost");
  }
  std::vector<RequestOutput> done = s.takeFinished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tokens, alone.tokens);
  expectAllFree(s);
}

}  // namespace

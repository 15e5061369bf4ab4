//===- BlockManagerTest.cpp - Paged KV cache bookkeeping: counts, COW, prefix cache, waste ---===//
//
// Reference counts through fork and release, copy-on-write of a shared partial block, prefix-cache
// hits for full blocks only (chained: a block matches only after the same prefix), LRU eviction
// order, out-of-blocks as a value with nothing changed, no leaks after random workloads, and a
// continuous-batching simulation of 1000 requests that measures KV waste against a contiguous
// max_seq_len reservation.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/serve/BlockManager.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <numeric>
#include <random>

using namespace colossal::runtime::serve;

namespace {

#define ASSERT_OK(expr)                                                                          \
  do {                                                                                           \
    llvm::Error err_ = (expr);                                                                   \
    ASSERT_FALSE(static_cast<bool>(err_)) << llvm::toString(std::move(err_));                    \
  } while (0)

std::unique_ptr<BlockManager> make(int32_t blocks, int32_t blockSize, bool prefixCaching = true) {
  auto bm = BlockManager::create({blocks, blockSize, prefixCaching});
  EXPECT_TRUE(static_cast<bool>(bm));
  return bm ? std::move(*bm) : nullptr;
}

std::vector<TokenId> iota(int n, TokenId first = 100) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

AllocateResult allocateOk(BlockManager &bm, SeqId seq, llvm::ArrayRef<TokenId> prompt) {
  auto r = bm.allocate(seq, prompt);
  EXPECT_TRUE(static_cast<bool>(r)) << (r ? "" : llvm::toString(r.takeError()));
  if (!r) return {};
  EXPECT_EQ(r->status, KvStatus::Ok);
  return *r;
}

AppendResult appendOk(BlockManager &bm, SeqId seq, llvm::ArrayRef<TokenId> tokens) {
  auto r = bm.append(seq, tokens);
  EXPECT_TRUE(static_cast<bool>(r)) << (r ? "" : llvm::toString(r.takeError()));
  if (!r) return {};
  EXPECT_EQ(r->status, KvStatus::Ok);
  return *r;
}

std::string message(llvm::Error e) { return e ? llvm::toString(std::move(e)) : ""; }

void expectAllFree(const BlockManager &bm) {
  EXPECT_EQ(bm.numFreeBlocks(), bm.numBlocks());
  for (BlockId b = 0; b < bm.numBlocks(); ++b) EXPECT_EQ(bm.refCount(b), 0) << "block " << b;
}

TEST(BlockManager, ReferenceCountsThroughForkAndRelease) {
  auto bm = make(8, 16);
  allocateOk(*bm, 1, iota(40));
  llvm::ArrayRef<BlockId> table = bm->blockTable(1);
  ASSERT_EQ(table.size(), 3u);  // ⌈40 / 16⌉
  for (BlockId b : table) EXPECT_EQ(bm->refCount(b), 1);
  EXPECT_EQ(bm->numFreeBlocks(), 5);

  ASSERT_OK(bm->fork(1, 2));
  ASSERT_OK(bm->fork(2, 3));
  EXPECT_EQ(bm->blockTable(3), bm->blockTable(1));
  EXPECT_EQ(bm->tokens(3), bm->tokens(1));
  for (BlockId b : bm->blockTable(1)) EXPECT_EQ(bm->refCount(b), 3);
  EXPECT_EQ(bm->numFreeBlocks(), 5);  // fork takes no block

  ASSERT_OK(bm->release(1));
  for (BlockId b : bm->blockTable(2)) EXPECT_EQ(bm->refCount(b), 2);
  ASSERT_OK(bm->release(3));
  ASSERT_OK(bm->release(2));
  expectAllFree(*bm);
}

TEST(BlockManager, SlotMappingFollowsTheBlockTable) {
  auto bm = make(8, 4);
  allocateOk(*bm, 7, iota(3));
  allocateOk(*bm, 8, iota(6));
  appendOk(*bm, 7, {1, 2, 3});  // 6 tokens: a second block, taken after seq 8's two
  std::vector<int32_t> slots;
  bm->slotMapping(7, 0, 6, slots);
  llvm::ArrayRef<BlockId> t = bm->blockTable(7);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(slots, (std::vector<int32_t>{t[0] * 4, t[0] * 4 + 1, t[0] * 4 + 2, t[0] * 4 + 3, t[1] * 4, t[1] * 4 + 1}));
  EXPECT_NE(t[1], t[0] + 1);  // not contiguous: blocks 1, 2 went to seq 8
}

TEST(BlockManager, TruncateReleasesTheBlocksOfDroppedTokensOnly) {
  auto bm = make(8, 4);
  allocateOk(*bm, 0, iota(6));  // blocks 0, 1
  ASSERT_EQ(message(bm->markComputed(0, 6)), "");
  appendOk(*bm, 0, iota(7, 200));  // 13 tokens: blocks 0..3
  EXPECT_EQ(bm->numFreeBlocks(), 4);
  ASSERT_EQ(message(bm->truncate(0, 9)), "");  // blocks 0..2 stay
  EXPECT_EQ(bm->length(0), 9);
  EXPECT_EQ(bm->blockTable(0).size(), 3u);
  EXPECT_EQ(bm->numFreeBlocks(), 5);
  EXPECT_EQ(bm->refCount(3), 0);
  EXPECT_EQ(bm->tokens(0).back(), 202);
  // Refused: below the computed count (a registered block would change), past the length.
  EXPECT_EQ(message(bm->truncate(0, 5)), "truncate: sequence 0 to 5 tokens, outside [6 computed, 9 held]");
  EXPECT_EQ(message(bm->truncate(0, 10)), "truncate: sequence 0 to 10 tokens, outside [6 computed, 9 held]");
  EXPECT_EQ(message(bm->truncate(7, 1)), "truncate: no live sequence 7");
  ASSERT_EQ(message(bm->truncate(0, 6)), "");  // back to the computed tokens: blocks 0, 1
  EXPECT_EQ(bm->numFreeBlocks(), 6);
  ASSERT_EQ(message(bm->release(0)), "");
  expectAllFree(*bm);
}

TEST(BlockManager, CopyOnWriteOfASharedPartialBlock) {
  auto bm = make(8, 16);
  allocateOk(*bm, 1, iota(20));  // blocks: one full, one with 4 tokens
  ASSERT_OK(bm->markComputed(1, 20));
  ASSERT_OK(bm->fork(1, 2));
  const std::vector<BlockId> before = bm->blockTable(1).vec();

  AppendResult r = appendOk(*bm, 2, {7});
  ASSERT_TRUE(r.copy.has_value());
  EXPECT_EQ(r.copy->src, before[1]);
  EXPECT_NE(r.copy->dst, before[1]);
  EXPECT_EQ(bm->blockTable(2)[0], before[0]);  // the full block stays shared
  EXPECT_EQ(bm->blockTable(2)[1], r.copy->dst);
  EXPECT_EQ(bm->refCount(before[0]), 2);
  EXPECT_EQ(bm->refCount(before[1]), 1);
  EXPECT_EQ(bm->refCount(r.copy->dst), 1);

  // The parent is now the only reader of its last block: it appends in place.
  AppendResult p = appendOk(*bm, 1, {8});
  EXPECT_FALSE(p.copy.has_value());
  EXPECT_EQ(bm->blockTable(1).vec(), before);
  EXPECT_EQ(bm->tokens(1).back(), 8);
  EXPECT_EQ(bm->tokens(2).back(), 7);
  EXPECT_EQ(bm->length(1), 21);

  ASSERT_OK(bm->release(1));
  ASSERT_OK(bm->release(2));
  expectAllFree(*bm);
}

TEST(BlockManager, NoCopyWhenTheSharedLastBlockIsFull) {
  auto bm = make(8, 16);
  allocateOk(*bm, 1, iota(32));
  ASSERT_OK(bm->fork(1, 2));
  AppendResult r = appendOk(*bm, 2, {1, 2, 3});
  EXPECT_FALSE(r.copy.has_value());
  ASSERT_EQ(bm->blockTable(2).size(), 3u);
  EXPECT_EQ(bm->blockTable(2).take_front(2), bm->blockTable(1));
  EXPECT_EQ(bm->refCount(bm->blockTable(2)[2]), 1);
  // Several tokens in one call: only the first can land in a shared block, so one copy at most.
  ASSERT_OK(bm->fork(2, 3));
  AppendResult m = appendOk(*bm, 3, iota(30));  // 35 → 65 tokens: a copy, then two new blocks
  ASSERT_TRUE(m.copy.has_value());
  EXPECT_EQ(bm->blockTable(3).size(), 5u);
  for (SeqId s : {1, 2, 3}) ASSERT_OK(bm->release(s));
  expectAllFree(*bm);
}

TEST(BlockManager, OutOfBlocksChangesNothing) {
  auto bm = make(4, 8);
  allocateOk(*bm, 1, iota(20));  // 3 blocks
  auto big = bm->allocate(2, iota(9));
  ASSERT_TRUE(static_cast<bool>(big));
  EXPECT_EQ(big->status, KvStatus::OutOfBlocks);
  EXPECT_FALSE(bm->contains(2));
  EXPECT_EQ(bm->numFreeBlocks(), 1);

  EXPECT_TRUE(bm->canAppend(1, 12));  // 32 tokens fit in 4 blocks
  EXPECT_FALSE(bm->canAppend(1, 13));
  auto r = bm->append(1, iota(13));
  ASSERT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(r->status, KvStatus::OutOfBlocks);
  EXPECT_EQ(bm->length(1), 20);
  EXPECT_EQ(bm->blockTable(1).size(), 3u);

  // Copy-on-write needs a block too.
  appendOk(*bm, 1, iota(4));  // 24 tokens, 3 blocks full
  ASSERT_OK(bm->fork(1, 3));
  appendOk(*bm, 3, {1});  // takes the last free block (a new one: no copy, the last was full)
  auto cow = bm->append(1, iota(1));  // parent: its last block is full too, needs a new one
  ASSERT_TRUE(static_cast<bool>(cow));
  EXPECT_EQ(cow->status, KvStatus::OutOfBlocks);
  ASSERT_OK(bm->release(3));
  appendOk(*bm, 1, {1});
  ASSERT_OK(bm->release(1));
  expectAllFree(*bm);
}

TEST(BlockManager, PrefixHitsForFullBlocksOnly) {
  auto bm = make(32, 16);
  const std::vector<TokenId> a = iota(40);
  EXPECT_EQ(allocateOk(*bm, 1, a).cachedTokens, 0);
  // Nothing is cached before its keys and values are computed.
  EXPECT_EQ(allocateOk(*bm, 2, a).cachedTokens, 0);
  ASSERT_OK(bm->release(2));
  ASSERT_OK(bm->markComputed(1, 40));
  EXPECT_TRUE(bm->isCached(bm->blockTable(1)[0]));
  EXPECT_TRUE(bm->isCached(bm->blockTable(1)[1]));
  EXPECT_FALSE(bm->isCached(bm->blockTable(1)[2]));  // 8 tokens: not full, never cached
  EXPECT_EQ(bm->numCachedBlocks(), 2);

  // The same prompt: both full blocks, shared; the partial block is the sequence's own.
  AllocateResult same = allocateOk(*bm, 3, a);
  EXPECT_EQ(same.cachedTokens, 32);
  EXPECT_EQ(bm->computedTokens(3), 32);
  EXPECT_EQ(bm->blockTable(3).take_front(2), bm->blockTable(1).take_front(2));
  EXPECT_NE(bm->blockTable(3)[2], bm->blockTable(1)[2]);
  EXPECT_EQ(bm->refCount(bm->blockTable(1)[0]), 2);

  // Exactly two blocks: the second holds the last prompt token, whose logits are needed.
  EXPECT_EQ(allocateOk(*bm, 4, llvm::ArrayRef<TokenId>(a).take_front(32)).cachedTokens, 16);
  EXPECT_EQ(allocateOk(*bm, 5, llvm::ArrayRef<TokenId>(a).take_front(33)).cachedTokens, 32);
  EXPECT_EQ(allocateOk(*bm, 6, llvm::ArrayRef<TokenId>(a).take_front(31)).cachedTokens, 16);
  EXPECT_EQ(allocateOk(*bm, 7, llvm::ArrayRef<TokenId>(a).take_front(16)).cachedTokens, 0);

  // A change in the second block keeps the first; a change in the first loses both, even though
  // the second block's own tokens match (the hash is chained).
  std::vector<TokenId> b = a, c = a;
  b[20] = 1;
  c[3] = 1;
  EXPECT_EQ(allocateOk(*bm, 8, b).cachedTokens, 16);
  EXPECT_EQ(allocateOk(*bm, 9, c).cachedTokens, 0);

  const PrefixCacheStats &st = bm->prefixCacheStats();
  EXPECT_EQ(st.hitTokens, 32 + 16 + 32 + 16 + 16);
  EXPECT_EQ(st.queriedTokens, 40 * 5 + 32 + 33 + 31 + 16);
  for (SeqId s = 1; s <= 9; ++s)
    if (bm->contains(s)) ASSERT_OK(bm->release(s));
  EXPECT_EQ(bm->numFreeBlocks(), bm->numBlocks());

  // Released cached blocks still hit.
  EXPECT_EQ(allocateOk(*bm, 10, a).cachedTokens, 32);
  ASSERT_OK(bm->release(10));

  // Generated tokens are cached too once computed: a follow-up prompt that extends prompt and
  // output reuses them.
  allocateOk(*bm, 11, iota(10, 500));
  appendOk(*bm, 11, iota(30, 900));
  ASSERT_OK(bm->markComputed(11, 40));
  std::vector<TokenId> followUp = bm->tokens(11).vec();
  followUp.push_back(5);
  EXPECT_EQ(allocateOk(*bm, 12, followUp).cachedTokens, 32);
  for (SeqId s : {11, 12}) ASSERT_OK(bm->release(s));
  EXPECT_EQ(bm->numFreeBlocks(), bm->numBlocks());
}

TEST(BlockManager, PrefixCachingOff) {
  auto bm = make(8, 4, /*prefixCaching=*/false);
  allocateOk(*bm, 1, iota(12));
  ASSERT_OK(bm->markComputed(1, 12));
  EXPECT_EQ(bm->numCachedBlocks(), 0);
  EXPECT_EQ(allocateOk(*bm, 2, iota(12)).cachedTokens, 0);
  for (SeqId s : {1, 2}) ASSERT_OK(bm->release(s));
  EXPECT_EQ(bm->numEvictableBlocks(), 0);
  expectAllFree(*bm);
}

TEST(BlockManager, EvictsLeastRecentlyReleasedCachedBlocksFirst) {
  auto bm = make(9, 4);
  // Three sequences of two full blocks and one token each: two cached blocks apiece.
  std::vector<std::vector<BlockId>> tables;
  for (SeqId s = 0; s < 3; ++s) {
    allocateOk(*bm, s, iota(9, 100 * (s + 1)));
    ASSERT_OK(bm->markComputed(s, 9));
    tables.push_back(bm->blockTable(s).vec());
  }
  EXPECT_EQ(bm->numFreeBlocks(), 0);
  for (SeqId s = 0; s < 3; ++s) ASSERT_OK(bm->release(s));
  // Released in order 0, 1, 2, each from its tail: the tail block of a chain goes first.
  const auto &x = tables[0], &y = tables[1], &z = tables[2];
  EXPECT_EQ(bm->evictionOrder(), (std::vector<BlockId>{x[1], x[0], y[1], y[0], z[1], z[0]}));
  EXPECT_EQ(bm->numFreeBlocks(), 9);

  // Three blocks come from the never-cached free blocks first: no eviction.
  allocateOk(*bm, 10, iota(12, 7000));
  EXPECT_EQ(bm->prefixCacheStats().evictions, 0);
  // Sequence 1's prefix again: its blocks leave the LRU list; the new third block evicts x[1].
  EXPECT_EQ(allocateOk(*bm, 11, iota(9, 200)).cachedTokens, 8);
  EXPECT_EQ(bm->prefixCacheStats().evictions, 1);
  EXPECT_FALSE(bm->isCached(x[1]));
  EXPECT_EQ(bm->blockTable(11).back(), x[1]);
  EXPECT_EQ(bm->evictionOrder(), (std::vector<BlockId>{x[0], z[1], z[0]}));
  // Released again, they become the most recent.
  ASSERT_OK(bm->release(11));
  EXPECT_EQ(bm->evictionOrder(), (std::vector<BlockId>{x[0], z[1], z[0], y[1], y[0]}));
  // Sequence 0's first block alone still hits; its second was evicted.
  EXPECT_EQ(allocateOk(*bm, 12, iota(9, 100)).cachedTokens, 4);
  for (SeqId s : {10, 12}) ASSERT_OK(bm->release(s));
  EXPECT_EQ(bm->numFreeBlocks(), 9);
}

TEST(BlockManager, Errors) {
  EXPECT_EQ(message(BlockManager::create({0, 16}).takeError()), "kv_blocks must be >= 1, not 0");
  EXPECT_EQ(message(BlockManager::create({4, 0}).takeError()), "block_size must be >= 1, not 0");
  EXPECT_EQ(message(BlockManager::create({100, 16, true, 4096}).takeError()),
            "max_seq_len 4096 needs 256 blocks of 16 tokens, but kv_blocks is 100 (1600 tokens)");
  EXPECT_EQ(message(BlockManager::create({100, 16, true, -1}).takeError()), "max_seq_len must be >= 0 (0: no limit), not -1");
  {
    auto capped = BlockManager::create({256, 16, true, 4096});
    ASSERT_TRUE(static_cast<bool>(capped));
    EXPECT_EQ(message((*capped)->allocate(1, iota(4097)).takeError()),
              "allocate: sequence 1 has 4097 tokens, above max_seq_len 4096");
    allocateOk(**capped, 2, iota(4000));
    EXPECT_EQ(message((*capped)->append(2, iota(97)).takeError()),
              "append: sequence 2 would have 4097 tokens, above max_seq_len 4096");
    appendOk(**capped, 2, iota(96));
  }
  auto bm = make(4, 4);
  EXPECT_EQ(message(bm->allocate(1, {}).takeError()), "allocate: sequence 1 has an empty prompt");
  allocateOk(*bm, 1, iota(3));
  EXPECT_EQ(message(bm->allocate(1, iota(3)).takeError()), "allocate: sequence 1 is already live");
  EXPECT_EQ(message(bm->append(9, iota(1)).takeError()), "append: no live sequence 9");
  EXPECT_EQ(message(bm->fork(9, 10)), "fork: no live sequence 9");
  EXPECT_EQ(message(bm->fork(1, 1)), "fork: sequence 1 is already live");
  EXPECT_EQ(message(bm->markComputed(1, 4)), "markComputed: sequence 1 has 3 tokens, not 4");
  EXPECT_EQ(message(bm->release(9)), "release: no live sequence 9");
  EXPECT_FALSE(bm->canAppend(9, 1));
  EXPECT_TRUE(bm->blockTable(9).empty());
}

TEST(BlockManager, NoLeaksAfterARandomWorkload) {
  std::mt19937 rng(5);
  auto bm = make(64, 8);
  std::vector<SeqId> live;
  SeqId next = 0;
  std::uniform_int_distribution<int> op(0, 9), token(0, 5);  // few distinct ids: prefix hits happen
  for (int step = 0; step < 5000; ++step) {
    const int o = op(rng);
    if (o < 3 || live.empty()) {
      std::vector<TokenId> prompt(1 + rng() % 40);
      for (TokenId &t : prompt) t = token(rng) / 5;  // mostly 0: long shared prefixes
      auto r = bm->allocate(next, prompt);
      ASSERT_TRUE(static_cast<bool>(r));
      if (r->status == KvStatus::Ok) {
        ASSERT_OK(bm->markComputed(next, static_cast<int64_t>(prompt.size())));
        live.push_back(next);
      }
      ++next;
    } else if (o < 5) {
      ASSERT_OK(bm->fork(live[rng() % live.size()], next));
      live.push_back(next++);
    } else if (o < 8) {
      const SeqId s = live[rng() % live.size()];
      auto r = bm->append(s, std::vector<TokenId>(1 + rng() % 3, token(rng)));
      ASSERT_TRUE(static_cast<bool>(r));
      if (r->status == KvStatus::Ok) ASSERT_OK(bm->markComputed(s, bm->length(s)));
    } else {
      const size_t i = rng() % live.size();
      ASSERT_OK(bm->release(live[i]));
      live.erase(live.begin() + i);
    }
    // Every referenced block's count is the number of tables holding it.
    if (step % 250 == 0) {
      std::vector<int32_t> refs(bm->numBlocks(), 0);
      for (SeqId s : live)
        for (BlockId b : bm->blockTable(s)) ++refs[b];
      for (BlockId b = 0; b < bm->numBlocks(); ++b) ASSERT_EQ(bm->refCount(b), refs[b]) << "block " << b;
      int32_t referenced = 0;
      for (int32_t r : refs) referenced += r > 0;
      ASSERT_EQ(bm->numFreeBlocks(), bm->numBlocks() - referenced);
    }
  }
  EXPECT_GT(bm->prefixCacheStats().hitTokens, 0);
  for (SeqId s : live) ASSERT_OK(bm->release(s));
  expectAllFree(*bm);
}

// Continuous batching over 1000 requests (prompts uniform in [1, 300] tokens, outputs in
// [1, 128], seeded), each step: admit waiting requests (FIFO, up to kMaxSeqs, leaving a 1%
// watermark of free blocks), prefill the admitted, append one token to every running sequence —
// preempting the latest admitted (recompute: released, requeued first) when the pool runs out —
// and release the finished. After each step, KV waste = 1 − live tokens / (blocks in use ×
// block size); averaged over the steps. The contiguous baseline reserves max_seq_len slots for
// every running sequence (a static KV cache), and, for reference, prompt + max_tokens slots
// (contiguous with the output length known in advance).
struct WasteResult {
  double paged, contiguous, contiguousExact;
  double meanRunning;  // sequences per step
  int64_t steps, preemptions;
};

WasteResult simulateWaste(int32_t blockSize) {
  constexpr int kRequests = 1000, kMaxSeqs = 64;
  constexpr int64_t kMaxSeqLen = 512;
  const int32_t numBlocks = static_cast<int32_t>(16 * ((kMaxSeqLen + blockSize - 1) / blockSize));  // 8192 slots
  auto bm = make(numBlocks, blockSize);
  std::mt19937_64 rng(20261202);
  std::uniform_int_distribution<int> promptLen(1, 300), outputLen(1, 128), token(3, 259);
  struct Request {
    std::vector<TokenId> tokens;  // prompt, then generated
    int64_t promptLen, maxTokens;
  };
  std::vector<Request> reqs(kRequests);
  for (Request &r : reqs) {
    r.promptLen = promptLen(rng);
    r.maxTokens = outputLen(rng);
    r.tokens.resize(r.promptLen);
    for (TokenId &t : r.tokens) t = token(rng);
  }
  std::deque<SeqId> waiting(kRequests);
  std::iota(waiting.begin(), waiting.end(), 0);
  std::vector<SeqId> running;  // in admission order
  WasteResult out{0, 0, 0, 0, 0, 0};
  int done = 0;
  while (done < kRequests) {
    while (!waiting.empty() && static_cast<int>(running.size()) < kMaxSeqs) {
      Request &r = reqs[waiting.front()];
      const int64_t need = bm->blocksFor(static_cast<int64_t>(r.tokens.size()));
      if (bm->numFreeBlocks() - need < numBlocks / 100) break;
      auto a = bm->allocate(waiting.front(), r.tokens);
      EXPECT_TRUE(a && a->status == KvStatus::Ok);
      EXPECT_FALSE(static_cast<bool>(bm->markComputed(waiting.front(), static_cast<int64_t>(r.tokens.size()))));
      running.push_back(waiting.front());
      waiting.pop_front();
    }
    EXPECT_FALSE(running.empty()) << "a request that cannot run alone";
    if (running.empty()) break;
    for (size_t i = 0; i < running.size(); ++i) {
      const SeqId s = running[i];
      Request &r = reqs[s];
      const TokenId next = token(rng);
      for (;;) {
        auto a = bm->append(s, {next});
        EXPECT_TRUE(static_cast<bool>(a));
        if (a->status == KvStatus::Ok) break;
        // Preempt the latest admitted (not this one unless it is the latest: then it waits).
        const SeqId victim = running.back();
        EXPECT_FALSE(static_cast<bool>(bm->release(victim)));
        running.pop_back();
        waiting.push_front(victim);
        ++out.preemptions;
        if (victim == s) break;
      }
      if (i >= running.size() || running[i] != s) break;  // s itself was preempted (the last)
      r.tokens.push_back(next);
    }
    // KV of every token but the newest is written; count the newest too (its slot is taken).
    int64_t live = 0, reservedExact = 0;
    for (SeqId s : running) {
      live += bm->length(s);
      reservedExact += reqs[s].promptLen + reqs[s].maxTokens;
    }
    const int64_t used = bm->numBlocks() - bm->numFreeBlocks();
    out.paged += 1.0 - static_cast<double>(live) / (static_cast<double>(used) * blockSize);
    out.contiguous += 1.0 - static_cast<double>(live) / (static_cast<double>(running.size()) * kMaxSeqLen);
    out.contiguousExact += 1.0 - static_cast<double>(live) / static_cast<double>(reservedExact);
    out.meanRunning += static_cast<double>(running.size());
    ++out.steps;
    for (size_t i = 0; i < running.size();) {
      const SeqId s = running[i];
      if (static_cast<int64_t>(reqs[s].tokens.size()) - reqs[s].promptLen >= reqs[s].maxTokens) {
        EXPECT_FALSE(static_cast<bool>(bm->release(s)));
        running.erase(running.begin() + i);
        ++done;
      } else {
        EXPECT_FALSE(static_cast<bool>(bm->markComputed(s, bm->length(s))));
        ++i;
      }
    }
  }
  EXPECT_EQ(bm->numFreeBlocks(), bm->numBlocks()) << "blocks leaked";
  out.paged /= out.steps;
  out.contiguous /= out.steps;
  out.contiguousExact /= out.steps;
  out.meanRunning /= out.steps;
  return out;
}

TEST(BlockManager, KvWasteOver1000Requests) {
  for (int32_t bs : {8, 16, 32}) {
    const WasteResult w = simulateWaste(bs);
    std::printf("KV waste, block_size %2d: paged %.2f%%, contiguous max_seq_len=512 %.2f%%, contiguous "
                "prompt+max_tokens %.2f%% (%lld steps, %lld preemptions, %.1f sequences per step)\n",
                bs, 100 * w.paged, 100 * w.contiguous, 100 * w.contiguousExact, static_cast<long long>(w.steps),
                static_cast<long long>(w.preemptions), w.meanRunning);
    if (bs == 16) {
      EXPECT_LT(w.paged, 0.05);
      EXPECT_GT(w.contiguous, w.paged);
    }
  }
}

}  // namespace

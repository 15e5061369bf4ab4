//===- PagedKvCacheTest.cpp - The block manager driving the KV-cache kernels -----------------===//
//
// The pieces of a paged KV cache working together as an engine would drive them: the block
// manager's slot mappings feed kv_append, its copy-on-write copies feed kv_copy_blocks, its block
// tables feed paged_attention. A toy "model" gives each token's key, value and query as a function
// of the prefix that ends with it (as a real decoder's are), so reusing a cached prefix is only
// right if the cache holds exactly what recomputing it would write. Checked: forked sequences
// decoding apart (copy-on-write) against a dense reference, and a prompt that hits the prefix
// cache giving the same bits as the same prompt computed whole on an empty cache.
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include "colossal/runtime/serve/BlockManager.h"

#include <cmath>
#include <cstring>
#include <map>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
using colossal::runtime::serve::AllocateResult;
using colossal::runtime::serve::BlockManager;
using colossal::runtime::serve::KvStatus;
using colossal::runtime::serve::SeqId;
using colossal::runtime::serve::TokenId;

namespace {

constexpr int64_t kHq = 4, kHkv = 2, kD = 16, kBS = 4, kBlocks = 24;

/// The toy model: key, value and query of the token ending `prefix`, from a generator seeded by
/// the whole prefix.
struct TokenRows {
  float k[kHkv * kD], v[kHkv * kD], q[kHq * kD];
};
TokenRows tokenRows(llvm::ArrayRef<TokenId> prefix) {
  uint64_t seed = 1469598103934665603ULL;
  for (TokenId t : prefix) seed = (seed ^ static_cast<uint32_t>(t)) * 1099511628211ULL;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  TokenRows r;
  for (float &x : r.k) x = u(rng);
  for (float &x : r.v) x = u(rng);
  for (float &x : r.q) x = u(rng);
  return r;
}

/// One layer's cache, and the step an engine runs: write the new tokens' keys and values, then
/// attend; returns each sequence's output rows [new tokens, Hq, D].
struct Engine {
  BlockManager &bm;
  HostTensor kc{DType::F32, {kBlocks, kHkv, kBS, kD}}, vc{DType::F32, {kBlocks, kHkv, kBS, kD}};

  void copyBlocks(const serve::BlockCopy &copy) {
    HostTensor c(DType::I32, {1, 2});
    c.data<int32_t>()[0] = copy.src;
    c.data<int32_t>()[1] = copy.dst;
    ASSERT_NO_ERR(runKernel("kv_copy_blocks", {&c}, {&kc, &vc}));
  }

  /// `work`: (sequence, first position to compute); the sequence's tokens end the chunk.
  std::map<SeqId, std::vector<float>> step(const std::vector<std::pair<SeqId, int64_t>> &work) {
    int64_t T = 0, MB = 1;
    for (auto [s, begin] : work) {
      T += bm.length(s) - begin;
      MB = std::max<int64_t>(MB, bm.blockTable(s).size());
    }
    HostTensor k(DType::F32, {T, kHkv, kD}), v(DType::F32, {T, kHkv, kD}), q(DType::F32, {T, kHq, kD});
    HostTensor y(DType::F32, {T, kHq, kD}), slots(DType::I32, {T});
    HostTensor tables(DType::I32, {static_cast<int64_t>(work.size()), MB}),
        ctx(DType::I32, {static_cast<int64_t>(work.size())}), qsl(DType::I32, {static_cast<int64_t>(work.size()) + 1});
    std::vector<int32_t> slotList;
    int64_t row = 0;
    qsl.data<int32_t>()[0] = 0;
    for (size_t i = 0; i < work.size(); ++i) {
      const auto [s, begin] = work[i];
      llvm::ArrayRef<TokenId> tokens = bm.tokens(s);
      bm.slotMapping(s, begin, bm.length(s), slotList);
      for (int64_t p = begin; p < bm.length(s); ++p, ++row) {
        const TokenRows r = tokenRows(tokens.take_front(p + 1));
        std::memcpy(k.data<float>() + row * kHkv * kD, r.k, sizeof r.k);
        std::memcpy(v.data<float>() + row * kHkv * kD, r.v, sizeof r.v);
        std::memcpy(q.data<float>() + row * kHq * kD, r.q, sizeof r.q);
      }
      llvm::ArrayRef<serve::BlockId> table = bm.blockTable(s);
      for (int64_t b = 0; b < MB; ++b)
        tables.data<int32_t>()[i * MB + b] = b < static_cast<int64_t>(table.size()) ? table[b] : -1;
      ctx.data<int32_t>()[i] = static_cast<int32_t>(bm.length(s));
      qsl.data<int32_t>()[i + 1] = static_cast<int32_t>(row);
    }
    std::copy(slotList.begin(), slotList.end(), slots.data<int32_t>());
    std::map<SeqId, std::vector<float>> out;
    llvm::Error e = runKernel("kv_append", {&kc, &vc, &k, &v, &slots}, {&kc, &vc});
    if (!e) e = runKernel("paged_attention", {&q, &kc, &vc, &tables, &ctx, &qsl}, {&y});
    EXPECT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
    row = 0;
    for (auto [s, begin] : work) {
      const int64_t n = bm.length(s) - begin;
      out[s].assign(y.data<float>() + row * kHq * kD, y.data<float>() + (row + n) * kHq * kD);
      row += n;
      EXPECT_FALSE(static_cast<bool>(bm.markComputed(s, bm.length(s))));
    }
    return out;
  }
};

/// The dense reference of the token at position p of `tokens` (double accumulation): [Hq, D].
std::vector<float> reference(llvm::ArrayRef<TokenId> tokens, int64_t p) {
  std::vector<TokenRows> rows;
  for (int64_t j = 0; j <= p; ++j) rows.push_back(tokenRows(tokens.take_front(j + 1)));
  std::vector<float> y(kHq * kD);
  const double scale = 1.0 / std::sqrt(double(kD));
  for (int64_t h = 0; h < kHq; ++h) {
    const int64_t hk = h / (kHq / kHkv);
    std::vector<double> w(p + 1);
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j <= p; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < kD; ++d) dot += double(rows[p].q[h * kD + d]) * rows[j].k[hk * kD + d];
      m = std::max(m, w[j] = dot * scale);
    }
    for (double &x : w) l += (x = std::exp(x - m));
    for (int64_t d = 0; d < kD; ++d) {
      double acc = 0;
      for (int64_t j = 0; j <= p; ++j) acc += w[j] * rows[j].v[hk * kD + d];
      y[h * kD + d] = static_cast<float>(acc / l);
    }
  }
  return y;
}

std::vector<TokenId> ids(std::initializer_list<TokenId> l) { return l; }

AllocateResult allocate(BlockManager &bm, SeqId seq, llvm::ArrayRef<TokenId> prompt) {
  auto r = bm.allocate(seq, prompt);
  EXPECT_TRUE(static_cast<bool>(r)) << (r ? "" : llvm::toString(r.takeError()));
  if (!r) return {KvStatus::OutOfBlocks, 0};
  EXPECT_EQ(r->status, KvStatus::Ok);
  return *r;
}

void append(BlockManager &bm, Engine &engine, SeqId seq, TokenId token, int *copies = nullptr) {
  auto r = bm.append(seq, {token});
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->status, KvStatus::Ok);
  if (r->copy) {
    engine.copyBlocks(*r->copy);
    if (copies) ++*copies;
  }
}

TEST(PagedKvCache, ForkedSequencesDecodeApartThroughCopyOnWrite) {
  auto made = BlockManager::create({kBlocks, kBS});
  ASSERT_TRUE(static_cast<bool>(made));
  BlockManager &bm = **made;
  Engine engine{bm};
  const std::vector<TokenId> prompt = {5, 9, 2, 7, 7, 1, 3, 8, 4, 6};  // 2 full blocks + 2 tokens
  allocate(bm, 1, prompt);
  auto prefill = engine.step({{1, 0}});
  for (int64_t p = 0; p < 10; ++p) {
    std::vector<float> want = reference(prompt, p);
    expectClose(prefill[1].data() + p * kHq * kD, want.data(), kHq * kD);
  }
  ASSERT_FALSE(static_cast<bool>(bm.fork(1, 2)));
  ASSERT_FALSE(static_cast<bool>(bm.fork(1, 3)));
  // Three choices decode 6 tokens each, apart from the first: copy-on-write of the shared block.
  int copies = 0;
  for (int t = 0; t < 6; ++t) {
    for (SeqId s : {1, 2, 3}) append(bm, engine, s, static_cast<TokenId>(20 + 10 * s + t), &copies);
    auto out = engine.step({{1, bm.length(1) - 1}, {2, bm.length(2) - 1}, {3, bm.length(3) - 1}});
    for (SeqId s : {1, 2, 3}) {
      SCOPED_TRACE("sequence " + std::to_string(s) + " token " + std::to_string(t));
      std::vector<float> want = reference(bm.tokens(s), bm.length(s) - 1);
      expectClose(out[s].data(), want.data(), kHq * kD);
    }
  }
  EXPECT_EQ(copies, 2);  // the first two of three readers of the partial block copy it
  EXPECT_EQ(bm.blockTable(2).take_front(2), bm.blockTable(1).take_front(2));  // full blocks stay shared
  for (SeqId s : {1, 2, 3}) ASSERT_FALSE(static_cast<bool>(bm.release(s)));
  EXPECT_EQ(bm.numFreeBlocks(), bm.numBlocks());
}

TEST(PagedKvCache, PrefixCacheHitGivesTheSameBits) {
  const std::vector<TokenId> system = {11, 12, 13, 14, 15, 16, 17, 18, 19};  // 2 full blocks + 1
  std::vector<TokenId> a = system, b = system;
  for (TokenId t : ids({40, 41, 42})) a.push_back(t);
  for (TokenId t : ids({50, 51, 52, 53, 54, 55})) b.push_back(t);

  // b computed whole, alone, on an empty cache.
  std::vector<float> cold;
  {
    auto made = BlockManager::create({kBlocks, kBS});
    BlockManager &bm = **made;
    Engine engine{bm};
    EXPECT_EQ(allocate(bm, 7, b).cachedTokens, 0);
    cold = engine.step({{7, 0}})[7];
  }
  // a first, then b: b finds the two full system blocks and computes only its own tokens, in a
  // batch beside a's decode.
  auto made = BlockManager::create({kBlocks, kBS});
  BlockManager &bm = **made;
  Engine engine{bm};
  allocate(bm, 1, a);
  engine.step({{1, 0}});
  const AllocateResult hit = allocate(bm, 2, b);
  EXPECT_EQ(hit.cachedTokens, 8);
  append(bm, engine, 1, 60);
  auto warm = engine.step({{1, bm.length(1) - 1}, {2, hit.cachedTokens}});
  ASSERT_EQ(warm[2].size() + 8 * kHq * kD, cold.size());
  EXPECT_EQ(std::memcmp(warm[2].data(), cold.data() + 8 * kHq * kD, warm[2].size() * sizeof(float)), 0)
      << "the rows after a prefix-cache hit differ from a cold prefill";
  std::vector<float> want = reference(bm.tokens(1), bm.length(1) - 1);
  expectClose(warm[1].data(), want.data(), kHq * kD);
  for (SeqId s : {1, 2}) ASSERT_FALSE(static_cast<bool>(bm.release(s)));
  EXPECT_EQ(bm.numFreeBlocks(), bm.numBlocks());
}

}  // namespace

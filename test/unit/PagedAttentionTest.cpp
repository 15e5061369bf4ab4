//===- PagedAttentionTest.cpp - kv_append, kv_copy_blocks, paged_attention -------------------===//
//
// paged_attention against a naive reference (plain loops over a dense copy of each sequence's
// keys and values, double accumulation) within 1e-5, and bit-identity of its rows: alone or in a
// batch of others, in any batch order, with the blocks anywhere in the pool, at another block
// size or thread count, and whether a prompt is computed whole, in chunks of 16 or 64, or one
// token at a time (paged_attention.cpp "Batch invariance").
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <omp.h>
#include <optional>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

HostTensor i32(std::vector<int32_t> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  HostTensor t(DType::I32, shape);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

struct Heads {
  int64_t Hq, Hkv, D, Dv;
};

/// One sequence's dense keys and values [len, Hkv, D|Dv] and its queries [len, Hq, D] at every
/// position (a query chunk takes the rows it needs).
struct Sequence {
  int64_t len;
  HostTensor k, v, q;
};

Sequence randomSequence(int64_t len, const Heads &h, std::mt19937 &rng) {
  return {len, randomF32({len, h.Hkv, h.D}, rng, -2, 2), randomF32({len, h.Hkv, h.Dv}, rng),
          randomF32({len, h.Hq, h.D}, rng, -2, 2)};
}

/// A paged cache holding sequences in scattered blocks (a shuffled pool), written by kv_append.
struct PagedCache {
  int64_t BS, NB, MB;
  HostTensor kc, vc;
  std::vector<std::vector<int32_t>> tables;  // per sequence, MB entries (unused ones: -7)

  PagedCache(llvm::ArrayRef<const Sequence *> seqs, const Heads &h, int64_t blockSize, uint32_t seed,
             int64_t spareBlocks = 3)
      : BS(blockSize) {
    int64_t blocks = spareBlocks;
    MB = 1;
    for (const Sequence *s : seqs) {
      blocks += (s->len + BS - 1) / BS;
      MB = std::max(MB, (s->len + BS - 1) / BS);
    }
    NB = blocks;
    std::mt19937 rng(seed);
    // Garbage everywhere, NaN included: slots past a sequence's length must never be read.
    kc = randomF32({NB, h.Hkv, BS, h.D}, rng, -100, 100);
    vc = randomF32({NB, h.Hkv, BS, h.Dv}, rng, -100, 100);
    for (int64_t i = 0; i < kc.numel(); i += 5) kc.data<float>()[i] = NAN;
    for (int64_t i = 0; i < vc.numel(); i += 3) vc.data<float>()[i] = NAN;
    std::vector<int32_t> pool(NB);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    size_t next = 0;
    for (const Sequence *s : seqs) {
      std::vector<int32_t> table(MB, -7);
      for (int64_t b = 0; b < (s->len + BS - 1) / BS; ++b) table[b] = pool[next++];
      tables.push_back(table);
      // Append the whole sequence in one kv_append, slot by slot through its table.
      std::vector<int32_t> slots(s->len);
      for (int64_t p = 0; p < s->len; ++p) slots[p] = table[p / BS] * static_cast<int32_t>(BS) + p % BS;
      HostTensor k = copyOf(s->k), v = copyOf(s->v);
      HostTensor sm = i32(slots);
      llvm::Error e = runKernel("kv_append", {&kc, &vc, &k, &v, &sm}, {&kc, &vc});
      EXPECT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
    }
  }

  static HostTensor copyOf(const HostTensor &t) {
    HostTensor c(t.dtype, t.shape);
    std::memcpy(c.buf.data(), t.buf.data(), t.buf.size());
    return c;
  }
};

/// One sequence's part of a batch: the queries at positions [ctx − qLen, ctx) of `seq`.
struct Chunk {
  int index;  // into the cache's sequences
  const Sequence *seq;
  int64_t ctx, qLen;
};

/// paged_attention over `chunks` (in that order); returns y [Σ qLen, Hq, Dv].
HostTensor runPaged(const PagedCache &cache, llvm::ArrayRef<Chunk> chunks, const Heads &h,
                    std::optional<double> scale = std::nullopt) {
  int64_t T = 0;
  std::vector<int32_t> tables, ctx, qsl = {0};
  for (const Chunk &c : chunks) {
    T += c.qLen;
    tables.insert(tables.end(), cache.tables[c.index].begin(), cache.tables[c.index].end());
    ctx.push_back(static_cast<int32_t>(c.ctx));
    qsl.push_back(static_cast<int32_t>(T));
  }
  HostTensor q(DType::F32, {T, h.Hq, h.D}), y(DType::F32, {T, h.Hq, h.Dv});
  int64_t row = 0;
  for (const Chunk &c : chunks)
    for (int64_t p = c.ctx - c.qLen; p < c.ctx; ++p, ++row)
      std::memcpy(q.data<float>() + row * h.Hq * h.D, c.seq->q.data<float>() + p * h.Hq * h.D, h.Hq * h.D * 4);
  HostTensor bt = i32(tables, {static_cast<int64_t>(chunks.size()), cache.MB}), cl = i32(ctx), ql = i32(qsl);
  HostTensor kc = PagedCache::copyOf(cache.kc), vc = PagedCache::copyOf(cache.vc);
  Attrs attrs;
  if (scale) attrs.f("scale", *scale);
  llvm::Error e = runKernel("paged_attention", {&q, &kc, &vc, &bt, &cl, &ql}, {&y}, attrs);
  EXPECT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  return y;
}

/// The naive reference of one chunk: y [qLen, Hq, Dv], from the dense keys and values.
std::vector<float> reference(const Chunk &c, const Heads &h, double scale) {
  std::vector<float> y(c.qLen * h.Hq * h.Dv);
  const Sequence &s = *c.seq;
  for (int64_t r = 0; r < c.qLen; ++r) {
    const int64_t p = c.ctx - c.qLen + r;
    for (int64_t hq = 0; hq < h.Hq; ++hq) {
      const int64_t hk = hq / (h.Hq / h.Hkv);
      std::vector<double> w(p + 1);
      double m = -INFINITY;
      for (int64_t j = 0; j <= p; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < h.D; ++d)
          dot += double(s.q.data<float>()[(p * h.Hq + hq) * h.D + d]) * s.k.data<float>()[(j * h.Hkv + hk) * h.D + d];
        w[j] = dot * scale;
        m = std::max(m, w[j]);
      }
      double l = 0;
      for (double &x : w) l += (x = std::exp(x - m));
      for (int64_t d = 0; d < h.Dv; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= p; ++j) acc += w[j] * s.v.data<float>()[(j * h.Hkv + hk) * h.Dv + d];
        y[(r * h.Hq + hq) * h.Dv + d] = static_cast<float>(acc / l);
      }
    }
  }
  return y;
}

void expectBitEqual(const float *a, const float *b, int64_t n, const std::string &what) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0 && ++bad <= 3)
      ADD_FAILURE() << what << ": element " << i << " " << a[i] << " vs " << b[i];
  EXPECT_EQ(bad, 0) << what;
}

struct RefCase {
  Heads h;
  int64_t blockSize;
  std::vector<std::pair<int64_t, int64_t>> ctxQ;  // (context length, query length) per sequence
  std::optional<double> scale;
};

TEST(PagedAttention, MatchesNaiveReference) {
  const std::vector<RefCase> cases = {
      {{8, 2, 64, 64}, 16, {{1, 1}, {17, 1}, {100, 1}, {300, 1}}, {}},               // decode, GQA 4
      {{8, 2, 64, 64}, 16, {{37, 37}, {90, 1}, {200, 64}, {16, 16}, {5, 0}}, {}},    // prefill + decode
      {{4, 1, 40, 24}, 8, {{33, 7}, {8, 8}, {61, 1}}, 0.3},                          // MQA, odd dims
      {{6, 6, 16, 16}, 4, {{50, 50}, {3, 2}}, {}},                                   // MHA, small blocks
      {{2, 2, 128, 128}, 32, {{129, 65}, {1, 1}}, {}},
      {{12, 2, 32, 32}, 16, {{1, 1}, {40, 1}, {70, 1}, {20, 3}}, {}},                // decode, GQA 6: runs of 4 + 2
      {{6, 2, 48, 40}, 8, {{33, 1}, {5, 1}}, {}},                                    // decode, GQA 3
  };
  std::mt19937 rng(11);
  for (const RefCase &rc : cases) {
    std::vector<Sequence> seqs;
    for (auto [ctx, q] : rc.ctxQ) seqs.push_back(randomSequence(ctx, rc.h, rng));
    std::vector<const Sequence *> ptrs;
    for (const Sequence &s : seqs) ptrs.push_back(&s);
    PagedCache cache(ptrs, rc.h, rc.blockSize, 3);
    std::vector<Chunk> chunks;
    for (size_t i = 0; i < seqs.size(); ++i)
      chunks.push_back({static_cast<int>(i), &seqs[i], rc.ctxQ[i].first, rc.ctxQ[i].second});
    HostTensor y = runPaged(cache, chunks, rc.h, rc.scale);
    const double scale = rc.scale.value_or(1.0 / std::sqrt(double(rc.h.D)));
    int64_t row = 0;
    for (const Chunk &c : chunks) {
      SCOPED_TRACE("Hq " + std::to_string(rc.h.Hq) + " Hkv " + std::to_string(rc.h.Hkv) + " D " +
                   std::to_string(rc.h.D) + " ctx " + std::to_string(c.ctx) + " q " + std::to_string(c.qLen));
      std::vector<float> want = reference(c, rc.h, scale);
      expectClose(y.data<float>() + row * rc.h.Hq * rc.h.Dv, want.data(), static_cast<int64_t>(want.size()), 1e-5f,
                  1e-5f);
      row += c.qLen;
    }
  }
}

const Heads kHeads = {8, 2, 64, 64};

TEST(PagedAttention, BatchInvariant) {
  std::mt19937 rng(23);
  std::vector<Sequence> seqs;
  const std::vector<std::pair<int64_t, int64_t>> ctxQ = {{230, 64}, {1, 1}, {77, 1}, {150, 16}, {300, 1}, {45, 45}};
  for (auto [ctx, q] : ctxQ) seqs.push_back(randomSequence(ctx, kHeads, rng));
  std::vector<const Sequence *> ptrs;
  for (const Sequence &s : seqs) ptrs.push_back(&s);
  PagedCache cache(ptrs, kHeads, 16, 5);
  std::vector<Chunk> all;
  for (size_t i = 0; i < seqs.size(); ++i)
    all.push_back({static_cast<int>(i), &seqs[i], ctxQ[i].first, ctxQ[i].second});
  const int64_t rowFloats = kHeads.Hq * kHeads.Dv;

  // Alone, each sequence is a batch of one.
  std::vector<HostTensor> alone;
  for (const Chunk &c : all) alone.push_back(runPaged(cache, {c}, kHeads));

  // In the batch, in order and reversed, and rotated with one sequence left out.
  std::vector<std::vector<Chunk>> batches = {all, {all.rbegin(), all.rend()}};
  batches.push_back({all.begin() + 2, all.end()});
  batches.back().push_back(all[0]);
  for (const auto &batch : batches) {
    HostTensor y = runPaged(cache, batch, kHeads);
    int64_t row = 0;
    for (const Chunk &c : batch) {
      expectBitEqual(y.data<float>() + row * rowFloats, alone[c.index].data<float>(), c.qLen * rowFloats,
                     "sequence " + std::to_string(c.index) + " in a batch of " + std::to_string(batch.size()));
      row += c.qLen;
    }
  }

  // Other blocks, another block size, one thread.
  for (int64_t bs : {16, 32, 5}) {
    PagedCache other(ptrs, kHeads, bs, 99, 11);
    HostTensor y = runPaged(other, all, kHeads);
    int64_t row = 0;
    for (const Chunk &c : all) {
      expectBitEqual(y.data<float>() + row * rowFloats, alone[c.index].data<float>(), c.qLen * rowFloats,
                     "block size " + std::to_string(bs) + ", other blocks");
      row += c.qLen;
    }
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  HostTensor serial = runPaged(cache, all, kHeads);
  omp_set_num_threads(threads);
  int64_t row = 0;
  for (const Chunk &c : all) {
    expectBitEqual(serial.data<float>() + row * rowFloats, alone[c.index].data<float>(), c.qLen * rowFloats,
                   "one thread");
    row += c.qLen;
  }
}

TEST(PagedAttention, ChunkInvariant) {
  std::mt19937 rng(31);
  const int64_t len = 200;
  Sequence s = randomSequence(len, kHeads, rng);
  Sequence other = randomSequence(90, kHeads, rng);
  PagedCache cache({&s, &other}, kHeads, 16, 7);
  const int64_t rowFloats = kHeads.Hq * kHeads.Dv;
  HostTensor whole = runPaged(cache, {{0, &s, len, len}}, kHeads);
  for (int64_t chunk : {1, 16, 64, 50}) {
    std::vector<float> y;
    for (int64_t done = 0; done < len; done += chunk) {
      const int64_t q = std::min(chunk, len - done);
      // Each chunk runs beside a decode of another sequence, as in a mixed batch.
      HostTensor part = runPaged(cache, {{1, &other, 40 + done % 50, 1}, {0, &s, done + q, q}}, kHeads);
      y.insert(y.end(), part.data<float>() + rowFloats, part.data<float>() + (1 + q) * rowFloats);
    }
    expectBitEqual(y.data(), whole.data<float>(), len * rowFloats, "chunks of " + std::to_string(chunk));
  }
}

// A decode step attends the query heads of a KV group together (runs of up to 4 heads); each head's
// row must keep the bits it has when a prefill computes it row by row.
TEST(PagedAttention, DecodeOfAHeadGroupEqualsThePrefillRows) {
  std::mt19937 rng(37);
  for (const Heads h : {Heads{12, 2, 32, 32}, Heads{6, 2, 48, 40}, Heads{8, 8, 64, 64}, Heads{4, 1, 64, 64}}) {
    SCOPED_TRACE("Hq " + std::to_string(h.Hq) + " Hkv " + std::to_string(h.Hkv));
    const int64_t len = 45, rowFloats = h.Hq * h.Dv;
    Sequence s = randomSequence(len, h, rng);
    PagedCache cache({&s}, h, 16, 3);
    HostTensor whole = runPaged(cache, {{0, &s, len, len}}, h);
    for (int64_t p = 0; p < len; ++p) {
      HostTensor one = runPaged(cache, {{0, &s, p + 1, 1}}, h);
      expectBitEqual(one.data<float>(), whole.data<float>() + p * rowFloats, rowFloats,
                     "decode at position " + std::to_string(p));
    }
  }
}

TEST(KvAppend, WritesSlotsAndNothingElse) {
  std::mt19937 rng(3);
  const int64_t NB = 5, Hkv = 2, BS = 4, D = 3, Dv = 5, T = 7;
  HostTensor kc = randomF32({NB, Hkv, BS, D}, rng), vc = randomF32({NB, Hkv, BS, Dv}, rng);
  HostTensor kc0 = PagedCache::copyOf(kc), vc0 = PagedCache::copyOf(vc);
  HostTensor k = randomF32({T, Hkv, D}, rng), v = randomF32({T, Hkv, Dv}, rng);
  const std::vector<int32_t> slots = {13, 0, -1, 19, 4, 7, 12};
  HostTensor sm = i32(slots);
  ASSERT_NO_ERR(runKernel("kv_append", {&kc, &vc, &k, &v, &sm}, {&kc, &vc}));
  std::vector<float> wantK(kc0.data<float>(), kc0.data<float>() + kc0.numel()),
      wantV(vc0.data<float>(), vc0.data<float>() + vc0.numel());
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const int64_t b = slots[t] / BS, o = slots[t] % BS;
    for (int64_t h = 0; h < Hkv; ++h) {
      for (int64_t d = 0; d < D; ++d) wantK[((b * Hkv + h) * BS + o) * D + d] = k.data<float>()[(t * Hkv + h) * D + d];
      for (int64_t d = 0; d < Dv; ++d)
        wantV[((b * Hkv + h) * BS + o) * Dv + d] = v.data<float>()[(t * Hkv + h) * Dv + d];
    }
  }
  expectBitEqual(kc.data<float>(), wantK.data(), kc.numel(), "k_cache");
  expectBitEqual(vc.data<float>(), wantV.data(), vc.numel(), "v_cache");

  HostTensor bad = i32({13, 0, -1, 20, 4, 7, 12});
  EXPECT_EQ(errorMessage(runKernel("kv_append", {&kc, &vc, &k, &v, &bad}, {&kc, &vc})),
            "slot_mapping[3] = 20 is outside [-1, 20)");
  HostTensor k2 = randomF32({T, Hkv + 1, D}, rng);
  EXPECT_NE(errorMessage(verifyKernel("kv_append", {&kc, &vc, &k2, &v, &sm}, {&kc, &vc})).find("must be [T, kv heads, head dim]"),
            std::string::npos);
}

TEST(KvCopyBlocks, CopiesWholeBlocksInOrder) {
  std::mt19937 rng(4);
  const int64_t NB = 4, Hkv = 2, BS = 3, D = 4;
  HostTensor kc = randomF32({NB, Hkv, BS, D}, rng), vc = randomF32({NB, Hkv, BS, D}, rng);
  HostTensor kc0 = PagedCache::copyOf(kc), vc0 = PagedCache::copyOf(vc);
  HostTensor copies = i32({2, 0, 0, 3}, {2, 2});  // block 0 = 2, then block 3 = (new) block 0
  ASSERT_NO_ERR(runKernel("kv_copy_blocks", {&copies}, {&kc, &vc}));
  const int64_t n = Hkv * BS * D;
  for (auto [t, t0] : {std::pair{&kc, &kc0}, std::pair{&vc, &vc0}}) {
    expectBitEqual(t->data<float>() + 0 * n, t0->data<float>() + 2 * n, n, "block 0");
    expectBitEqual(t->data<float>() + 3 * n, t0->data<float>() + 2 * n, n, "block 3");
    expectBitEqual(t->data<float>() + 1 * n, t0->data<float>() + 1 * n, 2 * n, "blocks 1, 2");
  }
  HostTensor bad = i32({1, 4}, {1, 2});
  EXPECT_EQ(errorMessage(runKernel("kv_copy_blocks", {&bad}, {&kc, &vc})),
            "block_copies[0][1] = 4 is outside [0, 4)");
}

TEST(PagedAttention, Errors) {
  HostTensor q(DType::F32, {3, 4, 8}), y(DType::F32, {3, 4, 8});
  HostTensor kc(DType::F32, {4, 2, 4, 8}), vc(DType::F32, {4, 2, 4, 8});
  auto run = [&](std::vector<int32_t> tables, std::vector<int32_t> ctx, std::vector<int32_t> qsl) {
    HostTensor bt = i32(tables, {2, 2}), cl = i32(ctx), ql = i32(qsl);
    llvm::Error e = runKernel("paged_attention", {&q, &kc, &vc, &bt, &cl, &ql}, {&y});
    return e ? llvm::toString(std::move(e)) : std::string();
  };
  EXPECT_EQ(run({0, 1, 2, 3}, {5, 1}, {0, 2, 3}), "");
  EXPECT_EQ(run({0, 1, 2, 3}, {5, 1}, {1, 2, 3}), "query_start_loc[0] = 1, must be 0");
  EXPECT_EQ(run({0, 1, 2, 3}, {5, 1}, {0, 2, 4}), "query_start_loc[2] = 4 exceeds the number of query rows 3");
  // Rows past query_start_loc[S] are padding (a program's token count above the batch's): zero.
  std::fill(y.data<float>(), y.data<float>() + y.numel(), 7.0f);
  EXPECT_EQ(run({0, 1, 2, 3}, {5, 1}, {0, 1, 1}), "");
  for (int64_t i = 4 * 8; i < 3 * 4 * 8; ++i) ASSERT_EQ(y.data<float>()[i], 0.0f) << "padding element " << i;
  EXPECT_NE(y.data<float>()[0], 7.0f);
  EXPECT_EQ(run({0, 1, 2, 3}, {5, 1}, {0, 4, 3}), "sequence 1: query_start_loc decreases (4 then 3)");
  EXPECT_EQ(run({0, 1, 2, 3}, {1, 1}, {0, 2, 3}), "sequence 0: 2 queries but context length 1");
  EXPECT_EQ(run({0, 1, 2, 3}, {9, 1}, {0, 2, 3}),
            "sequence 0: context length 9 exceeds the block table's 2 blocks of 4");
  EXPECT_EQ(run({0, 4, 2, 3}, {5, 1}, {0, 2, 3}), "sequence 0: block_tables[0][1] = 4 is outside [0, 4)");
  EXPECT_EQ(run({0, 1, 2, -1}, {5, 4}, {0, 2, 3}), "");  // entries past ⌈ctx / BS⌉ are not read

  HostTensor bt = i32({0, 1, 2, 3}, {2, 2}), cl = i32({5, 1}), ql = i32({0, 2, 3});
  HostTensor q3(DType::F32, {3, 3, 8}), y3(DType::F32, {3, 3, 8});
  EXPECT_EQ(errorMessage(verifyKernel("paged_attention", {&q3, &kc, &vc, &bt, &cl, &ql}, {&y3})),
            "query heads 3 not a multiple of kv heads 2");
  HostTensor qsl2 = i32({0, 3});
  EXPECT_NE(errorMessage(verifyKernel("paged_attention", {&q, &kc, &vc, &bt, &cl, &qsl2}, {&y}))
                .find("query_start_loc must be [3]"),
            std::string::npos);
  HostTensor vc2(DType::F32, {4, 2, 2, 8});
  EXPECT_NE(errorMessage(verifyKernel("paged_attention", {&q, &kc, &vc2, &bt, &cl, &ql}, {&y})).find("differ in"),
            std::string::npos);
}

}  // namespace

//===- ToyDecoder.cpp - The serving tests' toy decoder ---------------------------------------===//
#include "ToyDecoder.h"

#include <cmath>

namespace colossal::runtime::testing {

using namespace colossal::runtime::serve;

namespace {

constexpr int64_t kHq = 2, kHkv = 1, kD = 16, kWidth = kHq * kD, kKv = kHkv * kD;

/// Row-major [rows, cols] weights, fixed by a seed.
std::vector<float> weights(int64_t rows, int64_t cols, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> w(rows * cols);
  for (float &x : w) x = u(rng);
  return w;
}

/// y[r] = Σ_c w[r, c] x[c], one row at a time in a fixed order: the same bits for a row wherever
/// it sits in the batch.
void matvec(const std::vector<float> &w, const float *x, float *y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += w[r * cols + c] * x[c];
    y[r] = acc;
  }
}

}  // namespace

ToyDecoder::ToyDecoder(const SchedulerConfig &c) : vocab_(c.vocabSize) {
  for (auto &layer : layers_) {
    const uint32_t seed = static_cast<uint32_t>(&layer - layers_) * 10 + 1;
    layer.wq = weights(kWidth, kWidth, seed, 0.6f);
    layer.wk = weights(kKv, kWidth, seed + 1, 0.6f);
    layer.wv = weights(kKv, kWidth, seed + 2, 1.0f);
    layer.kc = HostTensor(DType::F32, {c.numBlocks, kHkv, c.blockSize, kD});
    layer.vc = HostTensor(DType::F32, {c.numBlocks, kHkv, c.blockSize, kD});
  }
  embedding_ = weights(vocab_, kWidth, 100, 1.0f);
  out_ = weights(vocab_, kWidth, 200, 1.5f);
}

llvm::Error ToyDecoder::operator()(const StepBatch &b, llvm::MutableArrayRef<float> logits) {
  const int64_t T = b.numTokens(), S = static_cast<int64_t>(b.chunks.size());
  HostTensor x(DType::F32, {T, kWidth}), slots(DType::I32, {T});
  HostTensor tables(DType::I32, {S, b.maxBlocksPerSeq}), ctx(DType::I32, {S}), qsl(DType::I32, {S + 1});
  std::copy(b.slotMapping.begin(), b.slotMapping.end(), slots.data<int32_t>());
  std::copy(b.blockTables.begin(), b.blockTables.end(), tables.data<int32_t>());
  std::copy(b.contextLens.begin(), b.contextLens.end(), ctx.data<int32_t>());
  std::copy(b.queryStartLoc.begin(), b.queryStartLoc.end(), qsl.data<int32_t>());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t w = 0; w < kWidth; ++w)
      x.data<float>()[t * kWidth + w] =
          embedding_[b.tokenIds[t] * kWidth + w] + std::sin(0.37f * b.positions[t] + 0.11f * w);
  HostTensor copies(DType::I32, {static_cast<int64_t>(b.blockCopies.size()), 2});
  for (size_t i = 0; i < b.blockCopies.size(); ++i) {
    copies.data<int32_t>()[2 * i] = b.blockCopies[i].src;
    copies.data<int32_t>()[2 * i + 1] = b.blockCopies[i].dst;
  }
  for (Layer &l : layers_) {
    if (!b.blockCopies.empty())
      if (llvm::Error e = runKernel("kv_copy_blocks", {&copies}, {&l.kc, &l.vc})) return e;
    HostTensor q(DType::F32, {T, kHq, kD}), k(DType::F32, {T, kHkv, kD}), v(DType::F32, {T, kHkv, kD});
    HostTensor y(DType::F32, {T, kHq, kD});
    for (int64_t t = 0; t < T; ++t) {
      const float *xt = x.data<float>() + t * kWidth;
      matvec(l.wq, xt, q.data<float>() + t * kWidth, kWidth, kWidth);
      matvec(l.wk, xt, k.data<float>() + t * kKv, kKv, kWidth);
      matvec(l.wv, xt, v.data<float>() + t * kKv, kKv, kWidth);
    }
    if (llvm::Error e = runKernel("kv_append", {&l.kc, &l.vc, &k, &v, &slots}, {&l.kc, &l.vc})) return e;
    if (llvm::Error e = runKernel("paged_attention", {&q, &l.kc, &l.vc, &tables, &ctx, &qsl}, {&y})) return e;
    for (int64_t i = 0; i < T * kWidth; ++i) x.data<float>()[i] += y.data<float>()[i];
  }
  for (size_t j = 0; j < b.logitsIndices.size(); ++j)
    matvec(out_, x.data<float>() + b.logitsIndices[j] * kWidth, logits.data() + j * vocab_, vocab_, kWidth);
  return llvm::Error::success();
}

}  // namespace colossal::runtime::testing

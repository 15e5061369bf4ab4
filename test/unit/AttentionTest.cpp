//===- AttentionTest.cpp - fused attention vs a naive softmax(QKᵀ)V reference ---------------===//
#include "TestUtil.h"

#include <cmath>
#include <limits>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

enum class MaskKind { None, Additive, Bool };

struct Case {
  int64_t B, Hq, Hkv, Tq, Tk, D, Dv;
  bool causal;
  MaskKind mask;
  std::vector<int64_t> maskShape;  // broadcastable to [B, Hq, Tq, Tk]
};

std::string describe(const Case &c) {
  return "B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" + std::to_string(c.Hkv) + " Tq" +
         std::to_string(c.Tq) + " Tk" + std::to_string(c.Tk) + " D" + std::to_string(c.D) + " Dv" +
         std::to_string(c.Dv) + (c.causal ? " causal" : "") + " mask " + shapeToString(c.maskShape);
}

void checkAttention(const Case &c) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(71);
  HostTensor q = randomF32({c.B, c.Hq, c.Tq, c.D}, rng, -2, 2), k = randomF32({c.B, c.Hkv, c.Tk, c.D}, rng, -2, 2),
             v = randomF32({c.B, c.Hkv, c.Tk, c.Dv}, rng), y(DType::F32, {c.B, c.Hq, c.Tq, c.Dv});
  HostTensor mask;
  if (c.mask == MaskKind::Additive) {
    mask = randomF32(c.maskShape, rng, -3, 1);
    for (int64_t i = 0; i < mask.numel(); i += 7) mask.data<float>()[i] = -std::numeric_limits<float>::infinity();
  } else if (c.mask == MaskKind::Bool) {
    mask = randomBool(c.maskShape, rng, 0.7);
  }
  const double scale = 0.3;
  std::vector<HostTensor *> ins = {&q, &k, &v};
  if (c.mask != MaskKind::None) ins.push_back(&mask);
  ASSERT_NO_ERR(runKernel("attention", ins, {&y}, Attrs().f("scale", scale).i("causal", c.causal)));

  std::vector<float> want(y.numel());
  std::vector<double> s(c.Tk);
  const int64_t group = c.Hq / c.Hkv;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Tq; ++i) {
        const float *qp = q.data<float>() + ((b * c.Hq + h) * c.Tq + i) * c.D;
        double m = -INFINITY;
        for (int64_t j = 0; j < c.Tk; ++j) {
          const float *kp = k.data<float>() + ((b * c.Hkv + h / group) * c.Tk + j) * c.D;
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += double(qp[d]) * kp[d];
          s[j] = dot * scale;
          if (c.causal && j > i + c.Tk - c.Tq) s[j] = -INFINITY;
          if (c.mask != MaskKind::None) {
            int64_t mi = broadcastIndex({b, h, i, j}, c.maskShape);
            if (c.mask == MaskKind::Additive) s[j] += mask.data<float>()[mi];
            else if (!mask.data<uint8_t>()[mi]) s[j] = -INFINITY;
          }
          m = std::max(m, s[j]);
        }
        float *out = want.data() + ((b * c.Hq + h) * c.Tq + i) * c.Dv;
        if (m == -INFINITY) {  // fully masked row: zeros
          for (int64_t d = 0; d < c.Dv; ++d) out[d] = 0;
          continue;
        }
        double l = 0;
        for (int64_t j = 0; j < c.Tk; ++j) l += (s[j] = std::exp(s[j] - m));
        for (int64_t d = 0; d < c.Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < c.Tk; ++j)
            acc += s[j] * v.data<float>()[((b * c.Hkv + h / group) * c.Tk + j) * c.Dv + d];
          out[d] = static_cast<float>(acc / l);
        }
      }
  expectClose(y.data<float>(), want.data(), y.numel(), 2e-5f, 1e-4f);
}

TEST(Attention, Plain) { checkAttention({1, 2, 2, 5, 5, 8, 8, false, MaskKind::None, {}}); }
TEST(Attention, MultipleBlocksOddSizes) { checkAttention({2, 3, 3, 70, 131, 13, 7, false, MaskKind::None, {}}); }
TEST(Attention, CausalGqa) { checkAttention({2, 4, 2, 70, 70, 16, 16, true, MaskKind::None, {}}); }
TEST(Attention, CausalMqaQueriesFewerThanKeys) { checkAttention({1, 4, 1, 3, 130, 32, 24, true, MaskKind::None, {}}); }
// Five query blocks: two work items per head, each transposing the keys it sees once; and a head
// whose Kᵀ (D 128 × 1152 keys) exceeds the cached copy, transposed block by block.
TEST(Attention, ManyQueryBlocksAndLongHeads) {
  checkAttention({1, 2, 1, 300, 300, 8, 24, true, MaskKind::None, {}});
  checkAttention({1, 1, 1, 70, 1100, 128, 16, false, MaskKind::None, {}});
}
// Tiles on the causal diagonal compute only the key lanes their row groups see (attention.cpp
// groupWidth): the GPT shape (D 64, 4 query blocks), and a key offset that is not a multiple of 4
// rows with Dv 80 (a full 64-lane chunk and a masked tail).
TEST(Attention, CausalDiagonalTilesSkipHiddenKeys) {
  checkAttention({1, 2, 2, 256, 256, 64, 64, true, MaskKind::None, {}});
  checkAttention({1, 2, 1, 61, 190, 64, 80, true, MaskKind::None, {}});
}
TEST(Attention, CausalDecodeOneQuery) { checkAttention({2, 8, 2, 1, 77, 64, 64, true, MaskKind::None, {}}); }
TEST(Attention, CausalQueriesMoreThanKeysGivesZeroRows) {
  checkAttention({1, 2, 2, 130, 67, 8, 8, true, MaskKind::None, {}});
}
TEST(Attention, AdditiveMaskBroadcastOverHeads) {
  checkAttention({2, 4, 2, 33, 65, 16, 16, false, MaskKind::Additive, {2, 1, 33, 65}});
}
TEST(Attention, AdditiveMaskKeyVectorWithCausal) {
  checkAttention({1, 2, 1, 40, 100, 8, 8, true, MaskKind::Additive, {100}});
}
TEST(Attention, BoolMask) { checkAttention({2, 2, 2, 20, 90, 16, 12, false, MaskKind::Bool, {1, 1, 20, 90}}); }
TEST(Attention, BoolMaskPerHeadCausal) {
  checkAttention({1, 3, 3, 66, 66, 8, 8, true, MaskKind::Bool, {1, 3, 66, 66}});
}

TEST(Attention, ShapeErrors) {
  HostTensor q(DType::F32, {1, 3, 4, 8}), k(DType::F32, {1, 2, 4, 8}), v(DType::F32, {1, 2, 4, 8}),
      y(DType::F32, {1, 3, 4, 8});
  EXPECT_NE(errorMessage(verifyKernel("attention", {&q, &k, &v}, {&y})).find("multiple"), std::string::npos);
  HostTensor k2(DType::F32, {1, 3, 4, 8}), v2(DType::F32, {1, 3, 4, 8}), m(DType::F32, {5, 4});
  EXPECT_NE(errorMessage(verifyKernel("attention", {&q, &k2, &v2, &m}, {&y})).find("mask shape"), std::string::npos);
}

}  // namespace

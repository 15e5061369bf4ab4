//===- Bf16KernelsTest.cpp - the kernels colossal-auto-mixed-precision emits -----------------===//
//
// Each bf16 kernel against the f32 op computed (in double) on the same bf16-rounded inputs, within
// torch.testing.assert_close's bf16 defaults (rtol 1.6e-2, atol 1e-5) for bf16 results; an f32
// result of bf16 operands is the f32 product of those exact values, so it must be much closer
// (1e-5). The casts round to nearest even. The contractions run on both of their paths
// (kernels/cpu/GemmBf16.h): widened to the f32 GEMM, and oneDNN's bf16 matmul primitive where the
// CPU has AVX512-BF16 (skipped where it has not).
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include "colossal/runtime/DType.h"
#include "kernels/cpu/Gemm.h"
#include "kernels/cpu/GemmBf16.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

constexpr float kBf16Rtol = 1.6e-2f, kBf16Atol = 1e-5f;

HostTensor toBf16(const HostTensor &x) {
  HostTensor y(DType::BF16, x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) y.data<uint16_t>()[i] = floatToBfloat16(x.data<float>()[i]);
  return y;
}
std::vector<float> widen(const HostTensor &x) {
  std::vector<float> v(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) v[i] = bfloat16ToFloat(x.data<uint16_t>()[i]);
  return v;
}

/// Naive y[M,N] = alpha·op(a)·op(b) (+ c[N] when given) in double.
std::vector<float> reference(const std::vector<float> &a, const std::vector<float> &b, int64_t M, int64_t N,
                             int64_t K, bool ta, bool tb, double alpha, const float *c = nullptr) {
  std::vector<float> y(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
      y[i * N + j] = float(alpha * s + (c ? c[j] : 0.0));
    }
  return y;
}

TEST(Bf16, CastRoundsToNearestEven) {
  // f32 bit patterns and their bf16: exact, ties to even (down from an even, up from an odd
  // neighbour), just above a tie, the largest float overflowing to inf, inf, NaN, a subnormal.
  const uint32_t in[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0xc0200000u,
                         0x7f7fffffu, 0x7f800000u, 0x7fc00000u, 0x000116c2u};
  const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x7f80, 0x7f80, 0x7fc0, 0x0001};
  const int n = 9;
  HostTensor x(DType::F32, {n}), h(DType::BF16, {n}), y(DType::F32, {n});
  std::memcpy(x.data<float>(), in, sizeof in);
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&h}));
  for (int k = 0; k < n; ++k) EXPECT_EQ(h.data<uint16_t>()[k], want[k]) << k;
  ASSERT_NO_ERR(runKernel("cast", {&h}, {&y}));
  for (int k = 0; k < n; ++k) {
    uint32_t bits;
    std::memcpy(&bits, &y.data<float>()[k], 4);
    EXPECT_EQ(bits, uint32_t(want[k]) << 16) << k;  // widening is exact
  }
}

void checkMatmul(const std::vector<int64_t> &as, const std::vector<int64_t> &bs, DType out) {
  SCOPED_TRACE(shapeToString(as) + " x " + shapeToString(bs) + " -> " + dtypeName(out).str());
  std::mt19937 rng(7);
  HostTensor a = toBf16(randomF32(as, rng)), b = toBf16(randomF32(bs, rng));
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  int64_t batch = numElements(llvm::ArrayRef<int64_t>(as).drop_back(2));
  std::vector<int64_t> ys(as.begin(), as.end() - 1);
  ys.push_back(N);
  HostTensor y(out, ys);
  ASSERT_NO_ERR(runKernel("matmul", {&a, &b}, {&y}));
  std::vector<float> wa = widen(a), wb = widen(b), want(batch * M * N);
  bool sharedB = bs.size() == 2;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<float> ai(wa.begin() + i * M * K, wa.begin() + (i + 1) * M * K);
    std::vector<float> bi = sharedB ? wb : std::vector<float>(wb.begin() + i * K * N, wb.begin() + (i + 1) * K * N);
    std::vector<float> yi = reference(ai, bi, M, N, K, false, false, 1.0);
    std::copy(yi.begin(), yi.end(), want.begin() + i * M * N);
  }
  if (out == DType::F32) {
    expectClose(y.data<float>(), want.data(), y.numel(), 1e-5f, 1e-5f);
  } else {
    std::vector<float> got = widen(y);
    expectClose(got.data(), want.data(), y.numel(), kBf16Atol, kBf16Rtol);
    // The result is the f32 sum rounded once: within half a bf16 ulp (2^-9 relative).
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_LE(std::fabs(got[i] - want[i]), std::ldexp(std::fabs(want[i]), -8) + 1e-6f) << i;
  }
}

/// The matmul and gemm tests below, once per bf16 GEMM path (COLOSSAL_BF16_GEMM, read when a
/// kernel is bound).
class Bf16Gemm : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    setenv("COLOSSAL_BF16_GEMM", GetParam(), 1);
    if (std::strcmp(GetParam(), "onednn") == 0 && !cpu::oneDnnBf16Available())
      GTEST_SKIP() << "no oneDNN bf16 matmul here: " << cpu::bf16GemmChoice();
    ASSERT_NE(std::string(cpu::bf16GemmChoice()).find(GetParam()), std::string::npos) << cpu::bf16GemmChoice();
  }
  void TearDown() override { unsetenv("COLOSSAL_BF16_GEMM"); }
};
INSTANTIATE_TEST_SUITE_P(Paths, Bf16Gemm, ::testing::Values("widen", "onednn"),
                         [](const ::testing::TestParamInfo<const char *> &i) { return std::string(i.param); });

TEST_P(Bf16Gemm, MatmulF32AndBf16Results) {
  for (DType out : {DType::F32, DType::BF16}) {
    checkMatmul({6, 10}, {10, 7}, out);
    checkMatmul({2, 33, 64}, {64, 129}, out);  // linear layer: batch folds into M
    checkMatmul({3, 17, 20}, {3, 20, 9}, out); // batched, small: parallel over the batch
    checkMatmul({2, 96, 200}, {2, 200, 130}, out); // batched, one product per matrix
    checkMatmul({1, 512, 384}, {384, 300}, out);   // several blocks of every dim
  }
}

TEST_P(Bf16Gemm, GemmTransposesAndAddend) {
  std::mt19937 rng(9);
  struct Case { int64_t M, N, K; };
  for (Case s : {Case{12, 20, 36}, Case{150, 70, 257}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int result = 0; result < 3; ++result) {  // f32 + c, f32 without c, bf16
          const DType out = result == 2 ? DType::BF16 : DType::F32;
          const bool addend = result == 0;
          SCOPED_TRACE(std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) +
                       " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " " + dtypeName(out).str() +
                       (addend ? " + c" : ""));
          const int64_t M = s.M, N = s.N, K = s.K;
          HostTensor a = toBf16(randomF32(ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K}, rng));
          HostTensor b = toBf16(randomF32(tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, rng));
          HostTensor c = randomF32({N}, rng), y(out, {M, N});
          std::vector<HostTensor *> ins = {&a, &b};
          if (addend) ins.push_back(&c);
          Attrs attrs = Attrs().i("trans_a", ta).i("trans_b", tb).f("alpha", 0.5).f("beta", 1.0);
          ASSERT_NO_ERR(runKernel("gemm", ins, {&y}, attrs));
          std::vector<float> want =
              reference(widen(a), widen(b), M, N, K, ta, tb, 0.5, addend ? c.data<float>() : nullptr);
          if (out == DType::F32) {
            expectClose(y.data<float>(), want.data(), y.numel(), 1e-5f, 1e-5f);
          } else {
            std::vector<float> got = widen(y);
            expectClose(got.data(), want.data(), y.numel(), kBf16Atol, kBf16Rtol);
          }
        }
}

/// attention and attention_grad with bf16 q, k, v against the f32 kernels on the widened inputs
/// (the fp32 op on the same bf16-rounded inputs): y (f32) equal, dq, dk, dv (bf16) within the
/// bf16 tolerance of the f32 gradients.
TEST(Bf16, AttentionAndItsGrad) {
  std::mt19937 rng(11);
  const std::vector<int64_t> qs = {2, 4, 70, 16}, kvs = {2, 2, 70, 16};  // GQA, several key blocks
  HostTensor q = toBf16(randomF32(qs, rng)), k = toBf16(randomF32(kvs, rng)), v = toBf16(randomF32(kvs, rng));
  auto widened = [](const HostTensor &h) {
    HostTensor f(DType::F32, h.shape);
    std::vector<float> w = widen(h);
    std::copy(w.begin(), w.end(), f.data<float>());
    return f;
  };
  HostTensor qf = widened(q), kf = widened(k), vf = widened(v);
  Attrs attrs = Attrs().f("scale", 0.25).i("causal", 1);
  HostTensor y(DType::F32, qs), yRef(DType::F32, qs);
  ASSERT_NO_ERR(runKernel("attention", {&q, &k, &v}, {&y}, attrs));
  ASSERT_NO_ERR(runKernel("attention", {&qf, &kf, &vf}, {&yRef}, attrs));
  expectClose(y.data<float>(), yRef.data<float>(), y.numel(), 0.0f, 0.0f);

  HostTensor dy = randomF32(qs, rng);
  HostTensor dq(DType::BF16, qs), dk(DType::BF16, kvs), dv(DType::BF16, kvs);
  HostTensor dqf(DType::F32, qs), dkf(DType::F32, kvs), dvf(DType::F32, kvs);
  ASSERT_NO_ERR(runKernel("attention_grad", {&q, &k, &v, &y, &dy}, {&dq, &dk, &dv}, attrs));
  ASSERT_NO_ERR(runKernel("attention_grad", {&qf, &kf, &vf, &yRef, &dy}, {&dqf, &dkf, &dvf}, attrs));
  for (auto [got, want] : {std::pair{&dq, &dqf}, std::pair{&dk, &dkf}, std::pair{&dv, &dvf}}) {
    std::vector<float> g = widen(*got);
    expectClose(g.data(), want->data<float>(), got->numel(), kBf16Atol, kBf16Rtol);
    for (int64_t i = 0; i < got->numel(); ++i)  // rounded once, to nearest even
      EXPECT_EQ(got->data<uint16_t>()[i], floatToBfloat16(want->data<float>()[i])) << i;
  }
}

TEST(Bf16, AnUnknownBf16GemmPathIsAnError) {
  if (std::string(cpu::gemmBackendName()) != "onednn") GTEST_SKIP() << "built without oneDNN: bf16 always widens";
  HostTensor a(DType::BF16, {2, 3}), b(DType::BF16, {3, 4}), y(DType::F32, {2, 4});
  setenv("COLOSSAL_BF16_GEMM", "bogus", 1);
  const std::string msg = errorMessage(runKernel("matmul", {&a, &b}, {&y}));
  unsetenv("COLOSSAL_BF16_GEMM");
  EXPECT_NE(msg.find("COLOSSAL_BF16_GEMM=bogus: must be onednn or widen"), std::string::npos) << msg;
}

TEST(Bf16, DTypeErrors) {
  HostTensor a(DType::BF16, {2, 3}), b(DType::F32, {3, 4}), y(DType::F32, {2, 4}), yb(DType::BF16, {2, 4});
  EXPECT_NE(errorMessage(verifyKernel("matmul", {&a, &b}, {&y})).find("operands must have one dtype"),
            std::string::npos);
  HostTensor af(DType::F32, {2, 3});
  EXPECT_NE(errorMessage(verifyKernel("matmul", {&af, &b}, {&yb})).find("a bf16 result needs bf16 operands"),
            std::string::npos);
  HostTensor bb(DType::BF16, {3, 4}), c(DType::F32, {4});
  Attrs plain = Attrs().i("trans_a", 0).i("trans_b", 0).f("alpha", 1).f("beta", 1);
  EXPECT_NE(errorMessage(verifyKernel("gemm", {&a, &bb, &c}, {&yb}, plain))
                .find("a bf16 result takes no c"),
            std::string::npos);
}

}  // namespace

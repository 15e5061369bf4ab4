//===- MatmulTest.cpp - matmul and gemm vs naive references ---------------------------------===//
#include "TestUtil.h"

#include <omp.h>

#include <cstring>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

void checkMatmul(const std::vector<int64_t> &as, const std::vector<int64_t> &bs) {
  SCOPED_TRACE(shapeToString(as) + " x " + shapeToString(bs));
  std::mt19937 rng(51);
  HostTensor a = randomF32(as, rng), b = randomF32(bs, rng);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  std::vector<int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  size_t r = std::max(ab.size(), bb.size());
  std::vector<int64_t> batch(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - ab.size() ? 1 : ab[i - (r - ab.size())];
    int64_t db = i < r - bb.size() ? 1 : bb[i - (r - bb.size())];
    batch[i] = da == 1 ? db : da;
  }
  std::vector<int64_t> ys = batch;
  ys.push_back(M);
  ys.push_back(N);
  HostTensor y(DType::F32, ys);
  ASSERT_NO_ERR(runKernel("matmul", {&a, &b}, {&y}));
  std::vector<float> want(y.numel());
  int64_t nb = numElements(batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    auto idx = unravel(bi, batch);
    const float *pa = a.data<float>() + broadcastIndex(idx, ab) * M * K;
    const float *pb = b.data<float>() + broadcastIndex(idx, bb) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(pa[i * K + k]) * pb[k * N + j];
        want[(bi * M + i) * N + j] = static_cast<float>(s);
      }
  }
  expectClose(y.data<float>(), want.data(), y.numel(), 1e-4f, 1e-4f);
}

TEST(Matmul, Shapes) {
  checkMatmul({5, 7}, {7, 3});
  checkMatmul({2, 3, 5, 7}, {7, 4});        // linear layer: batch folds into M
  checkMatmul({2, 1, 5, 7}, {3, 7, 4});     // broadcast batch on both sides
  checkMatmul({4, 5, 7}, {4, 7, 6});        // batched, small matrices in parallel
  checkMatmul({5, 7}, {3, 7, 2});           // a broadcast over b's batch
  checkMatmul({130, 257}, {257, 65});       // odd sizes
  checkMatmul({2, 200, 64}, {2, 64, 300});  // batched, threaded GEMMs
  checkMatmul({1, 1}, {1, 1});
}

TEST(Matmul, ShapeErrors) {
  HostTensor a(DType::F32, {2, 3}), b(DType::F32, {4, 5}), y(DType::F32, {2, 5});
  EXPECT_NE(errorMessage(verifyKernel("matmul", {&a, &b}, {&y})).find("inner dimensions"), std::string::npos);
  HostTensor a3(DType::F32, {2, 2, 3}), b3(DType::F32, {3, 3, 5}), y3(DType::F32, {3, 2, 5});
  EXPECT_NE(errorMessage(verifyKernel("matmul", {&a3, &b3}, {&y3})).find("do not broadcast"), std::string::npos);
}

void checkGemm(bool ta, bool tb, float alpha, float beta, std::vector<int64_t> cShape, bool withC, int64_t M = 13,
               int64_t N = 17, int64_t K = 29) {
  SCOPED_TRACE("ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " c " + shapeToString(cShape) + " M " +
               std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
  std::mt19937 rng(61);
  HostTensor a = randomF32(ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K}, rng);
  HostTensor b = randomF32(tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, rng);
  HostTensor c = randomF32(cShape, rng), y(DType::F32, {M, N});
  std::vector<HostTensor *> ins = {&a, &b};
  if (withC) ins.push_back(&c);
  ASSERT_NO_ERR(runKernel("gemm", ins, {&y}, Attrs().i("trans_a", ta).i("trans_b", tb).f("alpha", alpha).f("beta", beta)));
  std::vector<float> want(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? a.data<float>()[k * M + i] : a.data<float>()[i * K + k]) *
             (tb ? b.data<float>()[j * K + k] : b.data<float>()[k * N + j]);
      double cv = withC ? c.data<float>()[broadcastIndex({i, j}, cShape)] : 0.0;
      want[i * N + j] = static_cast<float>(alpha * s + beta * cv);
    }
  expectClose(y.data<float>(), want.data(), M * N, 1e-4f, 1e-4f);
}

TEST(Gemm, TransposesAlphaBetaBias) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) checkGemm(ta, tb, 1.0f, 1.0f, {17}, true);
  checkGemm(false, true, 0.5f, 2.0f, {13, 17}, true);
  checkGemm(false, false, 1.5f, 0.0f, {13, 1}, true);
  checkGemm(true, false, 1.0f, 1.0f, {}, true);
  checkGemm(false, false, 1.0f, 1.0f, {}, false);
}

// a·bᵀ with M and K >= 1024 runs untransposed on a copy of b (matmul.cpp transposesB): tiles of
// the copy that are partial in both dims, alpha and a broadcast addend.
TEST(Gemm, LongTransposedProductsRunOnATransposedCopy) {
  checkGemm(false, true, 0.5f, 2.0f, {37}, true, 1030, 37, 1100);
  checkGemm(false, true, 1.0f, 0.0f, {}, false, 1024, 70, 1024);
}

/// A serving step's GEMM (batch_invariant): row r of A·op(B) is bit-equal whether it is computed
/// alone, among 3, 7, 13 or 70 rows (each tiling, partial tiles and column blocks), on 1 or 2
/// threads; and within 1e-4 of a float64 reference. Without the attribute oneDNN's sgemm gives
/// M = 1 another summation order (not asserted: a library's choice).
void checkRowInvariant(const std::string &op, bool transB) {
  SCOPED_TRACE(op + (transB ? " trans_b" : ""));
  std::mt19937 rng(71);
  const int64_t K = 301, N = 150, M = 70;
  HostTensor a = randomF32({M, K}, rng);
  HostTensor b = randomF32(transB ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, rng);
  Attrs attrs = Attrs().i("batch_invariant", 1);
  if (op == "gemm") attrs.i("trans_b", transB).f("beta", 0.0f);
  auto product = [&](int64_t first, int64_t rows, int threads) {
    HostTensor x(DType::F32, {rows, K}), y(DType::F32, {rows, N});
    std::copy(a.data<float>() + first * K, a.data<float>() + (first + rows) * K, x.data<float>());
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    if (llvm::Error e = runKernel(op, {&x, &b}, {&y}, attrs)) ADD_FAILURE() << llvm::toString(std::move(e));
    omp_set_num_threads(saved);
    return y;
  };
  const HostTensor all1 = product(0, M, 1), all2 = product(0, M, 2);
  std::vector<float> want(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(a.data<float>()[i * K + k]) * (transB ? b.data<float>()[j * K + k] : b.data<float>()[k * N + j]);
      want[i * N + j] = static_cast<float>(s);
    }
  expectClose(all1.data<float>(), want.data(), M * N, 1e-4f, 1e-4f);
  EXPECT_EQ(std::memcmp(all1.data<float>(), all2.data<float>(), M * N * sizeof(float)), 0) << "1 vs 2 threads";
  for (int64_t r : {int64_t(0), int64_t(5), int64_t(66), int64_t(69)}) {
    const HostTensor alone = product(r, 1, 2);
    EXPECT_EQ(std::memcmp(alone.data<float>(), all1.data<float>() + r * N, N * sizeof(float)), 0) << "row " << r << " alone";
    for (int64_t rows : {int64_t(3), int64_t(7), int64_t(13)})  // each tiling: <= 4, <= 8, packed
      if (r + rows <= M) {
        const HostTensor some = product(r, rows, 1);
        EXPECT_EQ(std::memcmp(some.data<float>(), all1.data<float>() + r * N, rows * N * sizeof(float)), 0)
            << "rows " << r << ".." << r + rows - 1;
      }
  }
}

/// A batch-invariant matmul by a plan weight multiplies by the weight's panels (Gemm.h PanelB,
/// built at prepare): bit-equal to the plain product for every row count (each tiling: one row,
/// <= 2, <= 4, <= 8, > 8) and thread count, with K not a multiple of 4 and N not of 16 (the
/// panels' zero padding must not reach the result), and equal to a float64 reference.
TEST(Matmul, BatchInvariantPanelsOfAWeightAreBitEqualToThePlainProduct) {
  std::mt19937 rng(72);
  const int64_t K = 301, N = 150;
  HostTensor b = randomF32({K, N}, rng);
  for (int64_t M : {1, 2, 3, 5, 8, 13, 70})
    for (int threads : {1, 2}) {
      SCOPED_TRACE("M " + std::to_string(M) + ", threads " + std::to_string(threads));
      HostTensor a = randomF32({M, K}, rng);
      HostTensor plain(DType::F32, {M, N}), panels(DType::F32, {M, N});
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      const Attrs attrs = Attrs().i("batch_invariant", 1);
      ASSERT_NO_ERR(runKernel("matmul", {&a, &b}, {&plain}, attrs));
      ASSERT_NO_ERR(runKernel("matmul", {&a, &b}, {&panels}, attrs, /*constantInputs=*/0b10));
      omp_set_num_threads(saved);
      EXPECT_EQ(std::memcmp(plain.data<float>(), panels.data<float>(), M * N * sizeof(float)), 0);
      std::vector<float> want(M * N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += double(a.data<float>()[i * K + k]) * b.data<float>()[k * N + j];
          want[i * N + j] = static_cast<float>(s);
        }
      expectClose(panels.data<float>(), want.data(), M * N, 1e-4f, 1e-4f);
    }
}

TEST(Matmul, BatchInvariantRowsAreBitEqualWhateverTheRowsBesideThem) {
  checkRowInvariant("matmul", false);
  checkRowInvariant("gemm", false);
  checkRowInvariant("gemm", true);
}

/// linear (colossal-fuse-matmul-epilogue's op) is bit-equal to the unfused kernels it replaces,
/// matmul → add(bias) → [relu | gelu | gelu_tanh] → [add(residual)], for every activation, with
/// and without a residual, a batch folded into M and N not a multiple of 16; and the product is
/// a float64 reference's within 1e-4.
TEST(Linear, BitEqualToTheUnfusedKernels) {
  std::mt19937 rng(73);
  const int64_t B = 3, M = 37, K = 70, N = 45;
  HostTensor x = randomF32({B, M, K}, rng), w = randomF32({K, N}, rng), bias = randomF32({N}, rng),
             res = randomF32({B, M, N}, rng);
  for (const char *act : {"none", "relu", "gelu", "gelu_tanh"})
    for (bool residual : {false, true}) {
      SCOPED_TRACE(std::string(act) + (residual ? " + residual" : ""));
      HostTensor t(DType::F32, {B, M, N}), u(DType::F32, {B, M, N}), v(DType::F32, {B, M, N}),
          want(DType::F32, {B, M, N}), got(DType::F32, {B, M, N});
      ASSERT_NO_ERR(runKernel("matmul", {&x, &w}, {&t}));
      ASSERT_NO_ERR(runKernel("add", {&t, &bias}, {&u}));
      HostTensor *last = &u;
      if (std::string(act) == "relu") {
        ASSERT_NO_ERR(runKernel("relu", {&u}, {&v}));
        last = &v;
      } else if (std::string(act) != "none") {
        ASSERT_NO_ERR(runKernel("gelu", {&u}, {&v}, Attrs().s("approximate", std::string(act) == "gelu" ? "none" : "tanh")));
        last = &v;
      }
      if (residual) ASSERT_NO_ERR(runKernel("add", {last, &res}, {&want}));
      else std::memcpy(want.data<float>(), last->data<float>(), want.numel() * sizeof(float));
      std::vector<HostTensor *> in = {&x, &w, &bias};
      if (residual) in.push_back(&res);
      ASSERT_NO_ERR(runKernel("linear", in, {&got}, Attrs().s("activation", act)));
      EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), got.numel() * sizeof(float)), 0);
      if (std::string(act) == "none" && !residual) {
        std::vector<float> ref(B * M * N);
        for (int64_t i = 0; i < B * M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = bias.data<float>()[j];
            for (int64_t k = 0; k < K; ++k) s += double(x.data<float>()[i * K + k]) * w.data<float>()[k * N + j];
            ref[i * N + j] = static_cast<float>(s);
          }
        expectClose(got.data<float>(), ref.data(), ref.size(), 1e-4f, 1e-4f);
      }
    }
}

TEST(Linear, BadOperandsAreOneClearError) {
  HostTensor x(DType::F32, {4, 6}), w(DType::F32, {6, 5}), bias(DType::F32, {5}), y(DType::F32, {4, 5});
  HostTensor shortBias(DType::F32, {4}), res(DType::F32, {4, 4});
  EXPECT_NE(errorMessage(verifyKernel("linear", {&x, &w, &shortBias}, {&y})).find("do not agree"), std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("linear", {&x, &w, &bias, &res}, {&y})).find("residual"), std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("linear", {&x, &w, &bias}, {&y}, Attrs().s("activation", "tanh")))
                .find("activation must be"),
            std::string::npos);
  ASSERT_NO_ERR(verifyKernel("linear", {&x, &w, &bias}, {&y}));
}

}  // namespace

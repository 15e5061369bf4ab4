// oneDNN's sgemm (what colossal-run's matmul, linear and gemm kernels call) on the GEMMs of the
// bench/gpt_forward and bench/train_gpt model (d_model 384, MLP 1536, vocab 256): the forward
// products x·W for M = 256 (batch 1) and 2048 (batch 8), and training's input gradients dY·Wᵀ
// and weight gradients Xᵀ·dY for M = 2048. Median of 15 calls after 3, OMP threads as set.
#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

double medianMs(char ta, char tb, int M, int N, int K) {
  std::vector<float> A(size_t(M) * K, 0.5f), B(size_t(K) * N, 0.25f), C(size_t(M) * N);
  const int lda = ta == 'N' ? K : M, ldb = tb == 'N' ? N : K;
  auto call = [&] { dnnl_sgemm(ta, tb, M, N, K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), N); };
  for (int i = 0; i < 3; ++i) call();
  std::vector<double> t;
  for (int r = 0; r < 15; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    call();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[7];
}

}  // namespace

int main() {
  const int layer[][2] = {{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}};  // W [K_in, N_out] per layer
  std::printf("| GEMM | M | K_in | N_out | ms | GFLOP/s |\n|---|---:|---:|---:|---:|---:|\n");
  auto row = [](const char *what, int M, int K, int N, double ms) {
    std::printf("| %s | %d | %d | %d | %.3f | %.0f |\n", what, M, K, N, ms, 2.0 * M * N * K / ms / 1e6);
  };
  double sums[4] = {0, 0, 0, 0};
  for (int M : {256, 2048})
    for (const auto &w : layer) {
      const double ms = medianMs('N', 'N', M, w[1], w[0]);
      row("x·W", M, w[0], w[1], ms);
      sums[M == 256 ? 0 : 1] += ms;
    }
  for (const auto &w : layer) {
    const double dx = medianMs('N', 'T', 2048, w[0], w[1]), dw = medianMs('T', 'N', w[0], w[1], 2048);
    row("dY·Wᵀ", 2048, w[0], w[1], dx);
    row("Xᵀ·dY", 2048, w[0], w[1], dw);
    sums[2] += dx;
    sums[3] += dw;
  }
  std::printf("per layer, ms: forward M=256 %.2f, forward M=2048 %.2f, dY·Wᵀ %.2f, Xᵀ·dY %.2f\n", sums[0], sums[1],
              sums[2], sums[3]);
}

// The serving steps' batch-invariant GEMM (kernels/cpu/GemmRowInvariant.cpp) against the GEMM the
// runtime uses otherwise (Gemm.h sgemm: oneDNN's dnnl_sgemm), on Llama-style projection shapes at
// the row counts of decode (M = 1, 8) and prefill (64, 512); median of the runs after a warm-up,
// in the same process, alternating the two. docs/serving.md "Batch invariance" reports it.
//
//   ninja -C build colossal-gemm-row-invariant-bench
//   OMP_NUM_THREADS=1 build/runtime/colossal-gemm-row-invariant-bench
#include "kernels/cpu/Gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <vector>

using namespace colossal::runtime::cpu;

namespace {
double medianSeconds(const std::function<void()> &fn, int runs) {
  fn();
  std::vector<double> s;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}
}  // namespace

int main() {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::printf("%-22s %12s %14s %8s %11s %8s\n", "M x K x N", "onednn GF/s", "invariant GF/s", "ratio", "panel GF/s",
              "ratio");
  for (int64_t K : {256, 1024})
    for (int64_t N : {688, 2752})
      for (int64_t M : {1, 8, 64, 512}) {
        std::vector<float> A(M * K), B(K * N), C(M * N);
        for (float &x : A) x = u(rng);
        for (float &x : B) x = u(rng);
        const double flop = 2.0 * M * N * K;
        const int runs = static_cast<int>(std::clamp(3e9 / flop, 5.0, 2000.0));
        const double base = medianSeconds([&] { sgemm(false, false, M, N, K, 1, A.data(), K, B.data(), N, 0, C.data(), N); }, runs);
        const double inv = medianSeconds(
            [&] { sgemmRowInvariant(false, false, M, N, K, 1, A.data(), K, B.data(), N, 0, C.data(), N); }, runs);
        const PanelB panels(B.data(), K, N, N);
        const double pan =
            medianSeconds([&] { sgemmRowInvariantPanels(M, 1, A.data(), K, panels, 0, C.data(), N); }, runs);
        char shape[32];
        std::snprintf(shape, sizeof shape, "%ld x %ld x %ld", long(M), long(K), long(N));
        std::printf("%-22s %12.1f %14.1f %8.2f %11.1f %8.2f\n", shape, flop / base / 1e9, flop / inv / 1e9, base / inv,
                    flop / pan / 1e9, base / pan);
      }
  // Decode of a ~100M-parameter model: one row against 60 matrices of 768 x 2064 (380 MB, more
  // than the caches hold), so both stream B from memory: GB/s of B read.
  {
    const int64_t K = 768, N = 2064, L = 60;
    std::vector<std::vector<float>> Bs(L, std::vector<float>(K * N));
    for (auto &b : Bs)
      for (float &x : b) x = u(rng);
    std::vector<float> a(K), c(N);
    for (float &x : a) x = u(rng);
    std::vector<std::unique_ptr<PanelB>> panels;
    for (const auto &b : Bs) panels.push_back(std::make_unique<PanelB>(b.data(), K, N, N));
    auto pass = [&](int kind) {  // 0: oneDNN, 1: invariant, 2: invariant from panels
      for (int64_t l = 0; l < L; ++l)
        if (kind == 2)
          sgemmRowInvariantPanels(1, 1, a.data(), K, *panels[l], 0, c.data(), N);
        else
          (kind ? sgemmRowInvariant : sgemm)(false, false, 1, N, K, 1, a.data(), K, Bs[l].data(), N, 0, c.data(), N);
    };
    const double bytes = double(L * K * N) * sizeof(float);
    const double base = medianSeconds([&] { pass(0); }, 7), inv = medianSeconds([&] { pass(1); }, 7),
                 pan = medianSeconds([&] { pass(2); }, 7);
    std::printf("%-22s %9.1f GB/s %11.1f GB/s %8.2f %6.1f GB/s %8.2f\n", "1 x 768 x 2064, x60", bytes / base / 1e9,
                bytes / inv / 1e9, base / inv, bytes / pan / 1e9, base / pan);
  }
  return 0;
}

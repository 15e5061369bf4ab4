// GEMM backend comparison for docs/kernels.md: OpenBLAS cblas_sgemm vs oneDNN dnnl_sgemm on the
// shapes of a GPT-style block (row-major, C = A[M,K] * B[K,N]), 1 and 2 threads, median of N runs.
//
// Run it with the environment the runtime sees in CI (OPENBLAS_CORETYPE=Haswell, which limits
// OpenBLAS to AVX2); oneDNN chooses its ISA itself.
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {
double medianMs(const std::function<void()> &fn, int runs) {
  fn();  // warm-up: JIT (oneDNN), buffer allocation (OpenBLAS)
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
}  // namespace

int main() {
  struct Shape { long m, k, n; };
  const Shape shapes[] = {{256, 384, 1152}, {256, 384, 384}, {2048, 384, 1536}, {2048, 1536, 384}, {64, 384, 50304 / 8}};
  std::printf("%-20s %3s %14s %14s\n", "M x K x N", "thr", "openblas GF/s", "onednn GF/s");
  for (const Shape &s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 13) * 0.01f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 7) * 0.02f;
    const double flops = 2.0 * s.m * s.k * s.n;
    const int runs = flops > 1e9 ? 15 : 50;
    for (int t : {1, 2}) {
      openblas_set_num_threads(t);
      omp_set_num_threads(t);
      double ob = medianMs([&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.f, a.data(), s.k,
                    b.data(), s.n, 0.f, c.data(), s.n);
      }, runs);
      double dn = medianMs([&] {
        dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.f, a.data(), s.k, b.data(), s.n, 0.f, c.data(), s.n);
      }, runs);
      std::printf("%5ld x %4ld x %5ld %3d %14.1f %14.1f\n", s.m, s.k, s.n, t, flops / ob / 1e6,
                  flops / dn / 1e6);
    }
  }
  return 0;
}

// The CPU's f32 FMA throughput, the ceiling of every GEMM-bound program here (bench/roofline).
// Each thread runs 12 independent chains of vector FMAs (enough to cover the FMA latency on every
// x86 core this project runs on) for ~0.1 s; GFLOP/s = 2 · lanes · FMAs / seconds. Widths: 16 lanes
// (AVX-512) when the compiler targets it, and 8 (AVX2); threads 1 and N (argv[1], default 2).
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

/// The vector ISAs measured: a vector type, its lane count, broadcast, FMA and lane sum.
struct Avx2 {
  using V = __m256;
  static constexpr int lanes = 8;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(V v) {
    float t[8], s = 0;
    _mm256_storeu_ps(t, v);
    for (float x : t) s += x;
    return s;
  }
};
#if defined(__AVX512F__)
struct Avx512 {
  using V = __m512;
  static constexpr int lanes = 16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
};
#endif

template <typename Isa> float chains(long iters) {
  typename Isa::V a[12];
  const typename Isa::V b = Isa::set1(1.0000001f), c = Isa::set1(1e-7f);
  for (int i = 0; i < 12; ++i) a[i] = Isa::set1(float(i));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = Isa::fma(a[i], b, c);
  }
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += Isa::sum(a[i]);
  return sink;
}

template <typename Isa> double gflops(int threads) {
  const long iters = 20000000L;
  std::vector<float> sinks(threads);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { sinks[t] = chains<Isa>(iters); });
  for (auto &t : pool) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sinks[0] == 12345.f) std::puts("");  // keep the chains
  return 2.0 * Isa::lanes * 12 * iters * threads / s / 1e9;
}

}  // namespace

int main(int argc, char **argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2;
  // Best of 5: a noisy host only ever lowers a measurement.
  auto best = [](auto f) { double b = 0; for (int r = 0; r < 5; ++r) b = std::max(b, f()); return b; };
#if defined(__AVX512F__)
  std::printf("f32 FMA peak, AVX-512 (16 lanes): 1 thread %.1f GFLOP/s, %d threads %.1f GFLOP/s\n",
              best([] { return gflops<Avx512>(1); }), n, best([&] { return gflops<Avx512>(n); }));
#endif
  std::printf("f32 FMA peak, AVX2 (8 lanes): 1 thread %.1f GFLOP/s, %d threads %.1f GFLOP/s\n",
              best([] { return gflops<Avx2>(1); }), n, best([&] { return gflops<Avx2>(n); }));
}

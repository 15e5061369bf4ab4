// bf16 GEMM against the f32 GEMM the runtime uses, for docs/kernels.md "bf16 GEMM" and
// docs/benchmarks.md: the runtime's matmul kernel (through the kernel registry) with f32 operands
// (oneDNN's dnnl_sgemm), with bf16 operands and an f32 result (what colossal-auto-mixed-precision
// emits in forward: widened to f32, then the same sgemm), with a bf16 result (the VJPs' products),
// and oneDNN 2.6's bf16 matmul primitive (src/weights bf16, dst f32; its AVX512-BF16 brgemm
// kernels, weights in the layout it picks, reordered outside the timing) as the alternative.
// Row-major C[M,N] = A[M,K]·B[K,N] on the nanoGPT character model's shapes (B·T = 2048 rows).
// Median of N runs after a warm-up; GFLOP/s count 2·M·N·K.
//
//   colossal-bf16-gemm-bench [runs]     (default 15)
// Threads: 1 and 2 (omp_set_num_threads; oneDNN follows the OpenMP setting).
#include "colossal/runtime/DType.h"
#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/Tensor.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

using namespace colossal::runtime;

namespace {

double medianMs(const std::function<void()> &fn, int runs) {
  fn();  // warm-up: oneDNN JIT, page faults
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "bf16-gemm-bench: %s failed\n", what);
    std::exit(1);
  }
}

/// The registry's matmul for (operand dtype, result dtype), timed on [M,K]·[K,N].
double runtimeMatmulMs(DType in, DType out, int64_t M, int64_t K, int64_t N, int threads, int runs) {
  const KernelDesc *desc = KernelRegistry::cpu().find("matmul", out, DeviceKind::CPU);
  check(desc != nullptr, "matmul kernel lookup");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto make = [&](DType d, Shape s) {
    AlignedBuffer b(numElements(s) * dtypeSize(d));
    for (int64_t i = 0; i < numElements(s); ++i) {
      float v = dist(rng);
      if (d == DType::F32) static_cast<float *>(b.data())[i] = v;
      else static_cast<uint16_t *>(b.data())[i] = floatToBfloat16(v);
    }
    return b;
  };
  AlignedBuffer a = make(in, {M, K}), b = make(in, {K, N}), y(M * N * dtypeSize(out));
  KernelCall call;
  call.inputs.push_back(TensorRef{in, {M, K}, a.data()});
  call.inputs.push_back(TensorRef{in, {K, N}, b.data()});
  call.outputs.push_back(TensorRef{out, {M, N}, y.data()});
  call.threads = threads;
  check(!desc->verify(call), "matmul verify");
  AlignedBuffer ws;
  if (desc->workspace) {
    ws = AlignedBuffer(desc->workspace(call, threads));
    call.workspace = ws.data();
    call.workspaceBytes = ws.size();
  }
  return medianMs([&] { check(!desc->run(call), "matmul run"); }, runs);
}

/// oneDNN's bf16 matmul primitive (bf16 · bf16 -> f32), weights pre-reordered.
double onednnBf16Ms(int64_t M, int64_t K, int64_t N, int runs, const char **impl) {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  check(dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success, "dnnl_engine_create");
  check(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) == dnnl_success, "dnnl_stream_create");
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  dnnl_memory_desc_t amd, bmd, cmd;
  dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_bf16, dnnl_ab);
  dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_bf16, dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_f32, dnnl_ab);
  dnnl_matmul_desc_t md;
  check(dnnl_matmul_desc_init(&md, &amd, &bmd, nullptr, &cmd) == dnnl_success, "dnnl_matmul_desc_init");
  dnnl_primitive_desc_t pd;
  check(dnnl_primitive_desc_create(&pd, &md, nullptr, eng, nullptr) == dnnl_success, "matmul primitive desc");
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl);
  const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  dnnl_primitive_t prim;
  check(dnnl_primitive_create(&prim, pd) == dnnl_success, "matmul primitive");
  AlignedBuffer a(M * K * 2), w(dnnl_memory_desc_get_size(wmd)), c(M * N * 4);
  std::fill_n(static_cast<uint16_t *>(a.data()), M * K, floatToBfloat16(0.5f));
  std::fill_n(static_cast<uint16_t *>(w.data()), w.size() / 2, floatToBfloat16(0.25f));
  dnnl_memory_t am, wm, cm;
  dnnl_memory_create(&am, &amd, eng, a.data());
  dnnl_memory_create(&wm, wmd, eng, w.data());
  dnnl_memory_create(&cm, &cmd, eng, c.data());
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cm}};
  double ms = medianMs([&] {
    check(dnnl_primitive_execute(prim, stream, 3, args) == dnnl_success, "matmul execute");
    dnnl_stream_wait(stream);
  }, runs);
  for (dnnl_memory_t m : {am, wm, cm}) dnnl_memory_destroy(m);
  dnnl_primitive_destroy(prim);
  dnnl_primitive_desc_destroy(pd);
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(eng);
  return ms;
}

}  // namespace

int main(int argc, char **argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 15;
  struct Shape { int64_t m, k, n; };
  // nanoGPT char (B 8, T 256, d 384): qkv, attention output, MLP up, MLP down, LM head.
  const Shape shapes[] = {{2048, 384, 1152}, {2048, 384, 384}, {2048, 384, 1536}, {2048, 1536, 384}, {2048, 384, 256}};
  std::printf("%-18s %3s %11s %11s %11s %11s %9s %9s\n", "M x K x N", "thr", "f32 GF/s", "bf16>f32", "bf16>bf16",
              "onednn-bf16", "ratio", "onednn/f32");
  const char *impl = "";
  for (const Shape &s : shapes) {
    const double flops = 2.0 * s.m * s.k * s.n;
    for (int t : {1, 2}) {
      omp_set_num_threads(t);
      double f32 = runtimeMatmulMs(DType::F32, DType::F32, s.m, s.k, s.n, t, runs);
      double bf = runtimeMatmulMs(DType::BF16, DType::F32, s.m, s.k, s.n, t, runs);
      double bb = runtimeMatmulMs(DType::BF16, DType::BF16, s.m, s.k, s.n, t, runs);
      double dn = onednnBf16Ms(s.m, s.k, s.n, runs, &impl);
      std::printf("%5lld x %4lld x %4lld %3d %11.1f %11.1f %11.1f %11.1f %9.2f %9.2f\n", (long long)s.m,
                  (long long)s.k, (long long)s.n, t, flops / f32 / 1e6, flops / bf / 1e6, flops / bb / 1e6,
                  flops / dn / 1e6, f32 / bf, f32 / dn);
    }
  }
  std::printf("ratio = f32 time / runtime bf16 (f32 result) time; onednn/f32 = f32 time / oneDNN bf16 "
              "primitive time (%s)\n", impl);
  return 0;
}

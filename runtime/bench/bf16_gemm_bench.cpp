// bf16 GEMM against the f32 GEMM the runtime uses, for docs/kernels.md "bf16 GEMM" and
// docs/benchmarks.md: the runtime's matmul kernel (through the kernel registry) with f32 operands
// (oneDNN's dnnl_sgemm), with bf16 operands and an f32 result (what colossal-auto-mixed-precision
// emits in forward), with a bf16 result (the VJPs' products) — both on the path the runtime
// chose for this CPU (kernels/cpu/GemmBf16.h: oneDNN's bf16 matmul primitive on plain row-major
// operands, or widening to the f32 sgemm; printed at the end) —, and oneDNN 2.6's bf16 matmul
// primitive with its weights pre-reordered into the layout it picks, outside the timing (the
// best it can do with a constant B).
// Row-major C[M,N] = A[M,K]·B[K,N] on the nanoGPT character model's shapes (B·T = 2048 rows).
// Median of N runs after a warm-up, the variants interleaved run by run (a machine whose load
// drifts slows all of them alike); GFLOP/s count 2·M·N·K.
//
//   colossal-bf16-gemm-bench [runs]     (default 15)
// Threads: 1 and 2 (omp_set_num_threads; oneDNN follows the OpenMP setting).
#include "colossal/runtime/DType.h"
#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/Tensor.h"
#include "kernels/cpu/GemmBf16.h"

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

/// Median milliseconds of each of `fns`, timed interleaved (run i of every variant, then run
/// i + 1), so that a load that drifts during the measurement affects all variants alike.
std::vector<double> interleavedMedianMs(const std::vector<std::function<void()>> &fns, int runs) {
  for (const auto &fn : fns) fn();  // warm-up: oneDNN JIT, page faults
  std::vector<std::vector<double>> ms(fns.size());
  for (int i = 0; i < runs; ++i)
    for (size_t f = 0; f < fns.size(); ++f) {
      auto t0 = std::chrono::steady_clock::now();
      fns[f]();
      ms[f].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  std::vector<double> med;
  for (auto &v : ms) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

void check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "bf16-gemm-bench: %s failed\n", what);
    std::exit(1);
  }
}

/// The registry's matmul for (operand dtype, result dtype) on [M,K]·[K,N], ready to run.
class RuntimeMatmul {
public:
  RuntimeMatmul(DType in, DType out, int64_t M, int64_t K, int64_t N, int threads)
      : a_(make(in, {M, K})), b_(make(in, {K, N})), y_(M * N * dtypeSize(out)) {
    desc_ = KernelRegistry::cpu().find("matmul", out, DeviceKind::CPU);
    check(desc_ != nullptr, "matmul kernel lookup");
    call_.inputs.push_back(TensorRef{in, {M, K}, a_.data()});
    call_.inputs.push_back(TensorRef{in, {K, N}, b_.data()});
    call_.outputs.push_back(TensorRef{out, {M, N}, y_.data()});
    call_.threads = threads;
    check(!desc_->verify(call_), "matmul verify");
    if (desc_->prepare) check(!desc_->prepare(call_), "matmul prepare");  // as the executor binds it
    if (desc_->workspace) {
      ws_ = AlignedBuffer(desc_->workspace(call_, threads));
      call_.workspace = ws_.data();
      call_.workspaceBytes = ws_.size();
    }
  }
  void run() { check(!desc_->run(call_), "matmul run"); }

private:
  static AlignedBuffer make(DType d, Shape s) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    AlignedBuffer b(numElements(s) * dtypeSize(d));
    for (int64_t i = 0; i < numElements(s); ++i) {
      float v = dist(rng);
      if (d == DType::F32) static_cast<float *>(b.data())[i] = v;
      else static_cast<uint16_t *>(b.data())[i] = floatToBfloat16(v);
    }
    return b;
  }
  AlignedBuffer a_, b_, y_, ws_;
  const KernelDesc *desc_ = nullptr;
  KernelCall call_;
};

/// oneDNN's bf16 matmul primitive (bf16 · bf16 -> f32), weights pre-reordered, ready to run.
class OneDnnBf16Matmul {
public:
  OneDnnBf16Matmul(int64_t M, int64_t K, int64_t N) {
    check(dnnl_engine_create(&eng_, dnnl_cpu, 0) == dnnl_success, "dnnl_engine_create");
    check(dnnl_stream_create(&stream_, eng_, dnnl_stream_default_flags) == dnnl_success, "dnnl_stream_create");
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_bf16, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_bf16, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t md;
    check(dnnl_matmul_desc_init(&md, &amd, &bmd, nullptr, &cmd) == dnnl_success, "dnnl_matmul_desc_init");
    check(dnnl_primitive_desc_create(&pd_, &md, nullptr, eng_, nullptr) == dnnl_success, "matmul primitive desc");
    dnnl_primitive_desc_query(pd_, dnnl_query_impl_info_str, 0, &impl);
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd_, dnnl_query_weights_md, 0);
    check(dnnl_primitive_create(&prim_, pd_) == dnnl_success, "matmul primitive");
    a_ = AlignedBuffer(M * K * 2);
    w_ = AlignedBuffer(dnnl_memory_desc_get_size(wmd));
    c_ = AlignedBuffer(M * N * 4);
    std::fill_n(static_cast<uint16_t *>(a_.data()), M * K, floatToBfloat16(0.5f));
    std::fill_n(static_cast<uint16_t *>(w_.data()), w_.size() / 2, floatToBfloat16(0.25f));
    dnnl_memory_create(&mem_[0], &amd, eng_, a_.data());
    dnnl_memory_create(&mem_[1], wmd, eng_, w_.data());
    dnnl_memory_create(&mem_[2], &cmd, eng_, c_.data());
  }
  ~OneDnnBf16Matmul() {
    for (dnnl_memory_t m : mem_) dnnl_memory_destroy(m);
    dnnl_primitive_destroy(prim_);
    dnnl_primitive_desc_destroy(pd_);
    dnnl_stream_destroy(stream_);
    dnnl_engine_destroy(eng_);
  }
  void run() {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem_[0]}, {DNNL_ARG_WEIGHTS, mem_[1]}, {DNNL_ARG_DST, mem_[2]}};
    check(dnnl_primitive_execute(prim_, stream_, 3, args) == dnnl_success, "matmul execute");
    dnnl_stream_wait(stream_);
  }
  const char *impl = "";

private:
  dnnl_engine_t eng_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
  dnnl_primitive_desc_t pd_ = nullptr;
  dnnl_primitive_t prim_ = nullptr;
  dnnl_memory_t mem_[3] = {nullptr, nullptr, nullptr};
  AlignedBuffer a_, w_, c_;
};

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
      RuntimeMatmul f32(DType::F32, DType::F32, s.m, s.k, s.n, t), bf(DType::BF16, DType::F32, s.m, s.k, s.n, t),
          bb(DType::BF16, DType::BF16, s.m, s.k, s.n, t);
      OneDnnBf16Matmul dnnl(s.m, s.k, s.n);
      impl = dnnl.impl;
      std::vector<double> ms = interleavedMedianMs(
          {[&] { f32.run(); }, [&] { bf.run(); }, [&] { bb.run(); }, [&] { dnnl.run(); }}, runs);
      const double f32ms = ms[0], bfms = ms[1], bbms = ms[2], dnms = ms[3];
      std::printf("%5lld x %4lld x %4lld %3d %11.1f %11.1f %11.1f %11.1f %9.2f %9.2f\n", (long long)s.m,
                  (long long)s.k, (long long)s.n, t, flops / f32ms / 1e6, flops / bfms / 1e6, flops / bbms / 1e6,
                  flops / dnms / 1e6, f32ms / bfms, f32ms / dnms);
    }
  }
  std::printf("ratio = f32 time / runtime bf16 (f32 result) time; onednn/f32 = f32 time / oneDNN bf16 "
              "primitive time (%s, weights pre-reordered)\nruntime bf16 GEMM path: %s\n", impl,
              colossal::runtime::cpu::bf16GemmChoice());
  return 0;
}

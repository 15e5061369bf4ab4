// Times the fused attention kernel and its backward (attention_grad) through the kernel registry
// on a GPT-style shape: median wall-clock and process-CPU milliseconds of N runs (CPU time is the
// steadier figure on a shared machine with one thread), and the backward/forward ratio.
//
//   colossal-attention-bench [B H T D [causal [runs]]]     (defaults: 8 6 256 64 1 20)
//
// `paged` times paged_attention (serving, paged_attention.cpp) against the dense attention kernel
// doing the same work: S sequences, each q_len queries at the end of a context of ctx tokens
// (q_len 1: decode; q_len = ctx: a whole prefill), the dense kernel on [S, Hq, q_len, D] queries
// and contiguous [S, Hkv, ctx, D] keys and values, causal; paged on blocks of 16 in shuffled order.
//
//   colossal-attention-bench paged [S ctx q_len Hq Hkv D [runs]]   (defaults: 8 512 1 8 2 64 20)
// Threads: OMP_NUM_THREADS.
#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/Tensor.h"

#include "plan.pb.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ctime>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace colossal::runtime;

namespace {

double cpuMs() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/// Median (wall, CPU) milliseconds of `runs` calls after one warm-up call.
std::pair<double, double> medianMs(const std::function<void()> &fn, int runs) {
  fn();  // warm-up (oneDNN JIT, page faults)
  std::vector<double> wall, cpu;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpuMs();
    fn();
    cpu.push_back(cpuMs() - c0);
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

struct Buf {
  Shape shape;
  AlignedBuffer mem;
  Buf(Shape s, std::mt19937 &rng) : shape(std::move(s)), mem(numElements(shape) * sizeof(float)) {
    std::uniform_real_distribution<float> dist(-1, 1);
    float *p = static_cast<float *>(mem.data());
    for (int64_t i = 0; i < numElements(shape); ++i) p[i] = dist(rng);
  }
  TensorRef ref() { return TensorRef{DType::F32, shape, mem.data()}; }
};

/// Verifies and runs `op` once; returns the call for timing.
void runOnce(const KernelDesc &desc, KernelCall &call, AlignedBuffer &ws) {
  if (llvm::Error e = desc.verify(call)) {
    std::fprintf(stderr, "%s: %s\n", desc.op.c_str(), llvm::toString(std::move(e)).c_str());
    std::exit(1);
  }
  if (desc.workspace && !ws.data()) {
    ws = AlignedBuffer(desc.workspace(call, call.threads));
    call.workspace = ws.data();
    call.workspaceBytes = ws.size();
  }
  if (llvm::Error e = desc.run(call)) {
    std::fprintf(stderr, "%s: %s\n", desc.op.c_str(), llvm::toString(std::move(e)).c_str());
    std::exit(1);
  }
}

int benchPaged(int argc, char **argv) {
  auto arg = [&](int i, int64_t fallback) { return argc > i ? std::atoll(argv[i]) : fallback; };
  const int64_t S = arg(2, 8), ctx = arg(3, 512), qLen = arg(4, 1), Hq = arg(5, 8), Hkv = arg(6, 2), D = arg(7, 64);
  const int runs = static_cast<int>(arg(8, 20));
  constexpr int64_t BS = 16;
  const int64_t MB = (ctx + BS - 1) / BS, NB = S * MB;
  std::mt19937 rng(1);
  Buf q({S * qLen, Hq, D}, rng), kc({NB, Hkv, BS, D}, rng), vc({NB, Hkv, BS, D}, rng), y({S * qLen, Hq, D}, rng);
  Buf qd({S, Hq, qLen, D}, rng), kd({S, Hkv, ctx, D}, rng), vd({S, Hkv, ctx, D}, rng), yd({S, Hq, qLen, D}, rng);
  std::vector<int32_t> blocks(NB);
  for (int64_t i = 0; i < NB; ++i) blocks[i] = static_cast<int32_t>(i);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> ctxLens(S, static_cast<int32_t>(ctx)), qsl(S + 1);
  for (int64_t s = 0; s <= S; ++s) qsl[s] = static_cast<int32_t>(s * qLen);
  auto i32 = [](std::vector<int32_t> &v, Shape shape) { return TensorRef{DType::I32, std::move(shape), v.data()}; };

  colossal::plan::Instruction inst;
  (*inst.mutable_attrs())["causal"].set_i(1);
  const KernelRegistry &reg = KernelRegistry::cpu();
  KernelCall p, d;
  p.threads = d.threads = omp_get_max_threads();
  d.instruction = &inst;
  p.inputs = {q.ref(), kc.ref(), vc.ref(), i32(blocks, {S, MB}), i32(ctxLens, {S}), i32(qsl, {S + 1})};
  p.outputs = {y.ref()};
  d.inputs = {qd.ref(), kd.ref(), vd.ref()};
  d.outputs = {yd.ref()};
  AlignedBuffer wp, wd;
  const auto [pagedWall, pagedCpu] =
      medianMs([&] { runOnce(*reg.find("paged_attention", DType::F32, DeviceKind::CPU), p, wp); }, runs);
  const auto [denseWall, denseCpu] =
      medianMs([&] { runOnce(*reg.find("attention", DType::F32, DeviceKind::CPU), d, wd); }, runs);
  std::printf("S%lld ctx%lld q_len%lld Hq%lld Hkv%lld D%lld, %d threads: paged_attention %.3f ms (cpu %.3f), "
              "attention %.3f ms (cpu %.3f); paged/dense %.2f wall, %.2f cpu\n",
              static_cast<long long>(S), static_cast<long long>(ctx), static_cast<long long>(qLen),
              static_cast<long long>(Hq), static_cast<long long>(Hkv), static_cast<long long>(D),
              omp_get_max_threads(), pagedWall, pagedCpu, denseWall, denseCpu, pagedWall / denseWall,
              pagedCpu / denseCpu);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc > 1 && std::string(argv[1]) == "paged") return benchPaged(argc, argv);
  const int64_t B = argc > 1 ? std::atoll(argv[1]) : 8, H = argc > 2 ? std::atoll(argv[2]) : 6,
                T = argc > 3 ? std::atoll(argv[3]) : 256, D = argc > 4 ? std::atoll(argv[4]) : 64;
  const int causal = argc > 5 ? std::atoi(argv[5]) : 1, runs = argc > 6 ? std::atoi(argv[6]) : 20;
  std::mt19937 rng(1);
  Buf q({B, H, T, D}, rng), k({B, H, T, D}, rng), v({B, H, T, D}, rng), y({B, H, T, D}, rng),
      dy({B, H, T, D}, rng), dq({B, H, T, D}, rng), dk({B, H, T, D}, rng), dv({B, H, T, D}, rng);
  colossal::plan::Instruction inst;
  (*inst.mutable_attrs())["causal"].set_i(causal);
  const KernelRegistry &reg = KernelRegistry::cpu();
  const KernelDesc *fwd = reg.find("attention", DType::F32, DeviceKind::CPU);
  const KernelDesc *bwd = reg.find("attention_grad", DType::F32, DeviceKind::CPU);

  KernelCall f, g;
  f.instruction = g.instruction = &inst;
  f.threads = g.threads = omp_get_max_threads();
  f.inputs = {q.ref(), k.ref(), v.ref()};
  f.outputs = {y.ref()};
  g.inputs = {q.ref(), k.ref(), v.ref(), y.ref(), dy.ref()};
  g.outputs = {dq.ref(), dk.ref(), dv.ref()};
  AlignedBuffer wf, wg;
  const auto [fwdWall, fwdCpu] = medianMs([&] { runOnce(*fwd, f, wf); }, runs);
  const auto [bwdWall, bwdCpu] = medianMs([&] { runOnce(*bwd, g, wg); }, runs);
  std::printf("B%lld H%lld T%lld D%lld causal %d, %d threads: attention %.2f ms (cpu %.2f), attention_grad "
              "%.2f ms (cpu %.2f); backward/forward %.2f wall, %.2f cpu\n",
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(T),
              static_cast<long long>(D), causal, omp_get_max_threads(), fwdWall, fwdCpu, bwdWall, bwdCpu,
              bwdWall / fwdWall, bwdCpu / fwdCpu);
  return 0;
}

// Times the fused attention kernel and its backward (attention_grad) through the kernel registry
// on a GPT-style shape: median wall-clock and process-CPU milliseconds of N runs (CPU time is the
// steadier figure on a shared machine with one thread), and the backward/forward ratio.
//
//   colossal-attention-bench [B H T D [causal [runs]]]     (defaults: 8 6 256 64 1 20)
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

}  // namespace

int main(int argc, char **argv) {
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

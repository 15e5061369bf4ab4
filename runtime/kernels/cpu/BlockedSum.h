//===- BlockedSum.h - Thread-count-independent parallel sums --------------------*- C++ -*-===//
//
// A parallel sum whose result does not depend on the number of threads: the work is cut into a
// fixed number of blocks (a function of the problem size only), each block's partial is computed
// by one thread in a fixed order, and the partials are added serially in block order. Used where
// the training loop needs bit-for-bit reproducible reductions (global_norm, cross_entropy).
// Internal to runtime/kernels/cpu.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_BLOCKEDSUM_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_BLOCKEDSUM_H

#include "CpuCommon.h"

#include <cstdint>

namespace colossal::runtime::cpu {

/// Σ_{b < blocks} partial(b), with partial(b) evaluated in parallel (one block per call, `grain`
/// blocks at least per thread) into `scratch` (`blocks` doubles, e.g. the kernel's workspace) and
/// added in block order.
/// `start` is added to first (a running sum continued: summing blocks 0..a then a+1.. in two calls
/// gives the one call's result bit for bit).
template <typename F>
double blockedSum(int64_t blocks, int64_t grain, double *scratch, double start, F &&partial) {
  parallelFor(blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) scratch[k] = partial(k);
  });
  double total = start;
  for (int64_t k = 0; k < blocks; ++k) total += scratch[k];
  return total;
}
template <typename F>
double blockedSum(int64_t blocks, int64_t grain, double *scratch, F &&partial) {
  return blockedSum(blocks, grain, scratch, 0.0, partial);
}

/// Σ x[i]² over n floats, accumulated in double in 8 interleaved lanes (vectorizable; a fixed
/// order for a given n, so the result is reproducible).
inline double sumSquares(const float *x, int64_t n) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      double v = x[i + j];
      lane[j] += v * v;
    }
  for (int j = 0; i + j < n; ++j) {
    double v = x[i + j];
    lane[j] += v * v;
  }
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

}  // namespace colossal::runtime::cpu

#endif

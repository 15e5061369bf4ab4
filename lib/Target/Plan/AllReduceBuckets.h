//===- AllReduceBuckets.h - Fuses in-place all_reduces into buckets --------*- C++ -*-===//
//
// Gradient bucketing (docs/parallelism.md "Data parallelism", docs/plan.md "Collective
// instructions"): runs of consecutive in-place `all_reduce` instructions with the same axes,
// reduction and dtype become `all_reduce` instructions with several inputs and outputs, each at most
// a cap of bytes, so the runtime makes one collective call per bucket. MLIR-free (plan messages only).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_LIB_TARGET_PLAN_ALLREDUCEBUCKETS_H
#define COLOSSAL_LIB_TARGET_PLAN_ALLREDUCEBUCKETS_H

#include <cstdint>

namespace colossal::plan {
class Program;
}

namespace colossal {

/// Fuses, in `program`, each run of consecutive `all_reduce` instructions that are in place (one
/// input, one output, the same buffer id), share the `axes` and `reduction` attributes and the
/// buffer dtype, and whose buffers do not overlap (distinct ids; ARENA byte ranges disjoint; STATE
/// names distinct), into buckets: greedily in instruction order, a bucket takes the next
/// instruction while its summed input bytes stay <= `capBytes` (a buffer larger than the cap alone
/// forms a bucket of one). A bucket of N >= 2 becomes one `all_reduce` with inputs (b1..bN) and
/// outputs (b1..bN) (the same ids, in order), the shared attributes, and loc "bucket of N (B
/// bytes): " + the first instruction's loc + " ... " + the last's. Buckets of one are left unchanged, so
/// `capBytes == 0` changes nothing. Order of all other instructions is kept. Returns the number of
/// instructions removed. Each element is reduced by the same collective as before, so results are
/// unchanged as long as the collective's per-element summation order does not depend on the
/// element's offset in the message (see docs/parallelism.md "Gradient buckets").
int bucketAllReduces(plan::Program &program, uint64_t capBytes);

} // namespace colossal

#endif

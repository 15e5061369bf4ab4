//===- OpProfile.h - Where a program's time goes, per kind of op -----------*- C++ -*-===//
//
// `colossal-run ... --profile` (docs/cli.md): while enabled, Executor::run times every instruction
// (wall clock, the kernel's call; CPU kernels are synchronous) and adds it to its op's row here.
// The table printed at the end gives, per op kind ("linear", "attention", ...), the calls, the total
// milliseconds, the share of all instructions' time, the mean microseconds per call and, for the
// GEMM-like ops (matmul, linear, gemm, attention, attention_grad), the GFLOP/s their shapes imply
// (2·M·N·K; attention 4·B·Hq·Tq·Tk·D and its backward 10·B·Hq·Tq·Tk·D, halved when causal — the
// forward as CostModel counts it).
//
//===----------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_OPPROFILE_H
#define COLOSSAL_RUNTIME_OPPROFILE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace colossal::runtime {

struct KernelCall;

class OpProfile {
public:
  /// The process's profile once enable() ran, else null (the executor then times nothing).
  static OpProfile *active();
  /// Turns profiling on for the rest of the process; idempotent.
  static void enable();

  /// One instruction of op `op` took `seconds`; `flops` is 0 for ops whose work is not counted.
  void add(llvm::StringRef op, double seconds, double flops);
  /// Forgets everything added so far (after warm-up runs).
  void reset();
  /// The FLOPs of one call of a GEMM-like kernel from its operand shapes; 0 for other ops.
  static double flopsOf(llvm::StringRef op, const KernelCall &call);
  /// The table, rows by total time (largest first), under the line `title`; nothing was timed:
  /// one line saying so.
  void print(llvm::raw_ostream &os, llvm::StringRef title) const;

private:
  struct Row {
    int64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::string, Row> rows_;
};

}  // namespace colossal::runtime

#endif

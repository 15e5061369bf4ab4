//===- GemmBf16.h - bf16 GEMM through oneDNN's matmul primitive -------------------*- C++ -*-===//
//
// The contractions colossal-auto-mixed-precision emits (matmul/gemm with bf16 operands and an f32
// or bf16 result) run either by widening their operands to f32 and calling sgemm (Widen.h; exact
// products, f32 sums) or, where the CPU's AVX512-BF16 dot products (`vdpbf16ps`) outrun its f32
// FMAs, through oneDNN's bf16 matmul primitive (its brgemm kernels: bf16 products, exact in f32,
// summed in f32 two at a time — the same math in another summation order). Which one is chosen by
// the CPU, once per process (docs/kernels.md "bf16 GEMM"): oneDNN on AMD Zen 4 and later (a zmm
// `vdpbf16ps` issues at the zmm FMA rate and does twice the work) and on CPUs with AMX-BF16; the
// widening path elsewhere, notably on Intel cores with AVX512-BF16 and no AMX, where `vdpbf16ps`
// runs at about half the f32 FMA rate. `COLOSSAL_BF16_GEMM=onednn|widen` overrides the choice
// (tests run both). Internal to runtime/kernels/cpu; the primitive only with oneDNN
// (COLOSSAL_GEMM_BACKEND=onednn), otherwise every bf16 contraction widens.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_GEMMBF16_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_GEMMBF16_H

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace colossal::runtime::cpu {

/// Whether this CPU (and build) can run oneDNN's bf16 primitive natively (AVX512-BF16 or AMX).
bool oneDnnBf16Available();

/// Whether bf16 contractions go through oneDNN's primitive (see above): COLOSSAL_BF16_GEMM when
/// set (read on each call, so a test can switch it before binding a kernel), else the CPU's
/// choice. Errors: COLOSSAL_BF16_GEMM is neither onednn nor widen, or is onednn where
/// oneDNNBf16Available() is false.
llvm::Expected<bool> useOneDnnBf16Gemm();

/// What useOneDnnBf16Gemm() chose and why ("onednn (AMD Zen 4+ AVX512-BF16)", "widen (...)"),
/// for tests and benchmark reports.
const char *bf16GemmChoice();

class OneDnnBf16Gemm;

/// One row-major product C[M,N] = alpha · op(A) · op(B) (+ C when `accumulate`), A and B bf16
/// (op = transpose when transA/transB; lda, ldb, ldc row strides in elements), C f32 or, with
/// `bf16Result`, bf16 (rounded to nearest even once, from the f32 sums). Built once per
/// instruction (oneDNN JIT-compiles its kernels here). Errors: oneDNN has no implementation.
llvm::Expected<std::shared_ptr<OneDnnBf16Gemm>> createOneDnnBf16Gemm(bool transA, bool transB, int64_t M, int64_t N,
                                                                     int64_t K, int64_t lda, int64_t ldb,
                                                                     int64_t ldc, float alpha, bool accumulate,
                                                                     bool bf16Result);
/// Scratch bytes runOneDnnBf16Gemm needs (oneDNN's scratchpad: its packed copies of A and B).
size_t oneDnnBf16GemmWorkspace(const OneDnnBf16Gemm &g);
/// Runs the product on A, B (bf16 bits) into C (f32 or bf16 as created), on the OpenMP threads
/// (one thread inside a parallel region). `workspace`: oneDnnBf16GemmWorkspace() bytes, 64-byte
/// aligned. Thread-safe (calls on one object are serialized).
llvm::Error runOneDnnBf16Gemm(OneDnnBf16Gemm &g, const uint16_t *A, const uint16_t *B, void *C, void *workspace);

}  // namespace colossal::runtime::cpu

#endif

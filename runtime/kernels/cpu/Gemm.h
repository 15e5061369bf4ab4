//===- Gemm.h - Single-precision GEMM backend of the CPU kernels ----------------*- C++ -*-===//
//
// One entry point over the BLAS chosen at configure time (COLOSSAL_GEMM_BACKEND: oneDNN's
// dnnl_sgemm by default, OpenBLAS's cblas_sgemm as the alternative; docs/kernels.md has the
// measurements behind the choice). Threads: the OpenMP setting (both libraries follow it);
// called inside an OpenMP parallel region it runs on the calling thread only.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_GEMM_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_GEMM_H

#include <cstdint>

namespace colossal::runtime::cpu {

/// Row-major C[M,N] = alpha · op(A) · op(B) + beta · C, op(A) [M,K], op(B) [K,N]; lda/ldb/ldc are
/// row strides in elements. beta == 0 ignores C's previous contents (NaNs included).
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
           int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/// sgemm whose every element has one summation order whatever M, N, the tile it falls in and
/// the thread count (GemmRowInvariant.cpp): a row of C depends only on its row of A and on B,
/// bit for bit. For the serving steps, whose batch composition must not reach a request's
/// logits. transA falls back to sgemm (not invariant).
void sgemmRowInvariant(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/// A constant B [K, N] repacked for sgemmRowInvariant: rows of blocks of 4 rows × 16 columns,
/// block (i, j) the 64 floats of rows [4i, 4i + 4) × columns [16j, 16j + 16), row by row, at
/// floats (i · ⌈N/16⌉ + j) · 64; zero past K and N. 4·⌈K/4⌉·16·⌈N/16⌉ floats, 64-byte aligned;
/// from 2 MiB up in transparent huge pages where the kernel grants them (madvise), which saves a
/// TLB miss per 4 KiB of a stream that reads the whole matrix every step.
struct PanelB {
  PanelB(const float *B, int64_t K, int64_t N, int64_t ldb);
  ~PanelB();
  PanelB(const PanelB &) = delete;
  PanelB &operator=(const PanelB &) = delete;
  const float *data() const { return data_; }
  int64_t K, N, blocks;  // blocks = ⌈N/16⌉ per row of blocks

private:
  float *data_ = nullptr;
};

/// sgemmRowInvariant(false, false, M, B.N, B.K, alpha, A, lda, B as given to PanelB, ...), from
/// the panels: bit-equal to it, faster where B streams from memory (GemmRowInvariant.cpp).
void sgemmRowInvariantPanels(int64_t M, float alpha, const float *A, int64_t lda, const PanelB &B, float beta,
                             float *C, int64_t ldc);

/// Name of the backend compiled in ("onednn" or "openblas").
const char *gemmBackendName();

}  // namespace colossal::runtime::cpu

#endif

//===- Gemm.cpp - sgemm over oneDNN or OpenBLAS ---------------------------------------------===//
#include "Gemm.h"

#include <cstring>

#if defined(COLOSSAL_GEMM_ONEDNN)
#include <dnnl.h>
#elif defined(COLOSSAL_GEMM_OPENBLAS)
#include <cblas.h>
#else
#error "define COLOSSAL_GEMM_ONEDNN or COLOSSAL_GEMM_OPENBLAS"
#endif

namespace colossal::runtime::cpu {

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
           int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // BLAS leaves C alone for K == 0 only when beta == 1; make it explicit.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
    return;
  }
#if defined(COLOSSAL_GEMM_ONEDNN)
  dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
#endif
}

const char *gemmBackendName() {
#if defined(COLOSSAL_GEMM_ONEDNN)
  return "onednn";
#else
  return "openblas";
#endif
}

}  // namespace colossal::runtime::cpu

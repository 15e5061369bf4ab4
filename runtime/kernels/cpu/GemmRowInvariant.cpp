//===- GemmRowInvariant.cpp - a GEMM whose rows do not depend on M or the threads ----------===//
//
// Gemm.h sgemmRowInvariant. BLAS libraries pick their kernels and their split of K by the
// shape and the thread count (oneDNN's M = 1 path is a GEMV with another summation order than
// its blocked GEMM), so a row of C changes in the last bits with the number of rows beside it:
// the serving steps' batch composition would reach the logits (vLLM #5543, #7845). Here every
// element has one summation order whatever the tiling:
//
//  - op(B) = B [K, N]: C[m, n] = fma chain over k = 0, 1, ..., K − 1 from 0 (vectorized over n,
//    which leaves each element's chain alone);
//  - op(B) = Bᵀ (B stored [N, K]): 16 partial sums, lane l the fma chain over k ≡ l (mod 16)
//    below 16·⌊K/16⌋, reduced in a fixed order, then the remaining k in order.
//
// Then C = alpha · sum + beta · C. Column blocks are spread over the threads, each computed in
// one tile of all rows (M ≤ 8: 1–2 rows × 128, 3–4 × 64, 5–8 × 48 columns; one row of B [K, N]
// streams B's rows into sums in memory instead) or in tiles of 6 rows × 64 columns of a packed
// copy of the block; K is never split, and no tiling changes an element's arithmetic. Compiled with -ffp-contract=off (CMakeLists):
// the only fused operations are the explicit fmas, so the scalar edge code computes what the
// vector code does.
//
//===----------------------------------------------------------------------------------------===//
#include "Gemm.h"

#include <algorithm>
#include <cmath>
#include <omp.h>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace colossal::runtime::cpu {
namespace {

/// M > 8: tiles of kTileRows rows × kPackedCols columns of a packed copy of B's block.
constexpr int kTileRows = 6;
constexpr int64_t kPackedCols = 64;

/// y = alpha · s + beta · y (beta == 0: y's old value is not read).
inline float epilogue(float s, float alpha, float beta, float y) { return beta == 0 ? alpha * s : alpha * s + beta * y; }

#if defined(__AVX512F__)

/// R rows × up to 16·V columns of C from B [K, N] (row stride ldb): each element the fma chain
/// over k in order.
template <int R, int V>
void tileNN(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, int64_t cols,
            float alpha, float beta) {
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v) {
    const int64_t left = std::clamp<int64_t>(cols - 16 * v, 0, 16);
    mask[v] = static_cast<__mmask16>((1u << left) - 1u);
  }
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  const int whole = static_cast<int>(cols / 16);  // vectors of 16 columns inside the tile
  auto step = [&](int64_t k, auto full) {
    __m512 b[V];
    for (int v = 0; v < V; ++v)
      b[v] = full || v < whole ? _mm512_loadu_ps(B + k * ldb + 16 * v)
                               : _mm512_maskz_loadu_ps(mask[v], B + k * ldb + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * lda + k]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  };
  // Whole vectors load without masks (masked loads are slow in this loop on AMD Zen).
  if (cols == 16 * V)
    for (int64_t k = 0; k < K; ++k) step(k, std::true_type());
  else
    for (int64_t k = 0; k < K; ++k) step(k, std::false_type());
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      if (!mask[v]) continue;
      float *y = C + r * ldc + 16 * v;
      __m512 out = _mm512_mul_ps(va, acc[r][v]);
      if (beta != 0) out = _mm512_add_ps(out, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask[v], y)));
      _mm512_mask_storeu_ps(y, mask[v], out);
    }
}

/// The 16-lane dot product of the header comment, for R rows of A against one row of Bᵀ.
template <int R>
void dotsNT(int64_t K, const float *A, int64_t lda, const float *b, float *out) {
  const int64_t K16 = K / 16 * 16;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K16; k += 16) {
    const __m512 vb = _mm512_loadu_ps(b + k);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(A + r * lda + k), vb, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[r]);
    // Fixed pairwise order: (0+8, 1+9, ...), then halves again, down to one.
    for (int w = 8; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) lanes[l] = lanes[l] + lanes[l + w];
    float s = lanes[0];
    for (int64_t k = K16; k < K; ++k) s = std::fma(A[r * lda + k], b[k], s);
    out[r] = s;
  }
}

#else  // the same arithmetic without AVX-512

template <int R, int V>
void tileNN(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, int64_t cols,
            float alpha, float beta) {
  float acc[R][16 * V] = {};
  for (int64_t k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r) {
      const float a = A[r * lda + k];
      for (int64_t j = 0; j < cols; ++j) acc[r][j] = std::fma(a, B[k * ldb + j], acc[r][j]);
    }
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; j < cols; ++j) C[r * ldc + j] = epilogue(acc[r][j], alpha, beta, C[r * ldc + j]);
}

template <int R>
void dotsNT(int64_t K, const float *A, int64_t lda, const float *b, float *out) {
  const int64_t K16 = K / 16 * 16;
  for (int r = 0; r < R; ++r) {
    float lanes[16] = {};
    for (int64_t k = 0; k < K16; k += 16)
      for (int l = 0; l < 16; ++l) lanes[l] = std::fma(A[r * lda + k + l], b[k + l], lanes[l]);
    for (int w = 8; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) lanes[l] = lanes[l] + lanes[l + w];
    float s = lanes[0];
    for (int64_t k = K16; k < K; ++k) s = std::fma(A[r * lda + k], b[k], s);
    out[r] = s;
  }
}

#endif

/// Rows [m, m + R) × columns [n, n + cols ≤ 16·V) of C.
template <int R, int V>
void tile(bool transB, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
          int64_t cols, float alpha, float beta) {
  if (!transB) return tileNN<R, V>(K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  for (int64_t j = 0; j < cols; ++j) {
    float s[R];
    dotsNT<R>(K, A, lda, B + j * ldb, s);
    for (int r = 0; r < R; ++r) C[r * ldc + j] = epilogue(s[r], alpha, beta, C[r * ldc + j]);
  }
}

/// Rows [0, rows ≤ R) of a tile, dispatched to the template of that many rows.
template <int R, int V>
void tileRows(int64_t rows, bool transB, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
              int64_t ldc, int64_t cols, float alpha, float beta) {
  if constexpr (R > 1)
    if (rows < R) return tileRows<R - 1, V>(rows, transB, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  tile<R, V>(transB, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
}

/// One row of C from B [K, N] (M = 1, a decode step of one sequence) over columns [0, cols): B
/// streamed row by row, contiguous, into sums held in memory: the same fma chain per element as
/// tileNN (from 0, k in order), so the row equals the one a tile computes.
void rowNN(int64_t K, const float *a, const float *B, int64_t ldb, float *c, int64_t cols, float alpha, float beta,
           std::vector<float> &sums) {
  sums.assign(static_cast<size_t>(cols), 0.0f);
  float *acc = sums.data();
  int64_t k = 0;
#if defined(__AVX512F__)
  // Four rows of B per pass over the sums: the chain of each element still takes k in order.
  for (; k + 4 <= K; k += 4) {
    const float *b0 = B + k * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
    const __m512 x0 = _mm512_set1_ps(a[k]), x1 = _mm512_set1_ps(a[k + 1]), x2 = _mm512_set1_ps(a[k + 2]),
                 x3 = _mm512_set1_ps(a[k + 3]);
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16) {
      __m512 s = _mm512_loadu_ps(acc + j);
      s = _mm512_fmadd_ps(x0, _mm512_loadu_ps(b0 + j), s);
      s = _mm512_fmadd_ps(x1, _mm512_loadu_ps(b1 + j), s);
      s = _mm512_fmadd_ps(x2, _mm512_loadu_ps(b2 + j), s);
      s = _mm512_fmadd_ps(x3, _mm512_loadu_ps(b3 + j), s);
      _mm512_storeu_ps(acc + j, s);
    }
    for (; j < cols; ++j)
      acc[j] = std::fma(a[k + 3], b3[j], std::fma(a[k + 2], b2[j], std::fma(a[k + 1], b1[j], std::fma(a[k], b0[j], acc[j]))));
  }
#endif
  for (; k < K; ++k) {
    const float *b = B + k * ldb;
    int64_t j = 0;
#if defined(__AVX512F__)
    const __m512 x = _mm512_set1_ps(a[k]);
    for (; j + 16 <= cols; j += 16)
      _mm512_storeu_ps(acc + j, _mm512_fmadd_ps(x, _mm512_loadu_ps(b + j), _mm512_loadu_ps(acc + j)));
#endif
    for (; j < cols; ++j) acc[j] = std::fma(a[k], b[j], acc[j]);
  }
  for (int64_t j = 0; j < cols; ++j) c[j] = epilogue(acc[j], alpha, beta, c[j]);
}

/// The columns of one block: one tile of all M rows for M ≤ 8 (B read once, in place; wide for
/// few rows, so that each broadcast of A feeds enough FMAs), else kTileRows × 64 tiles.
int64_t blockWidth(int64_t M, bool transB) {
  if (M == 1 && !transB) return 8192;  // rowNN: at most 32 KiB of sums, in L1
  return M <= 2 ? 128 : M <= 4 ? 64 : M <= 8 ? 48 : kPackedCols;
}

/// One block of `cols` ≤ blockWidth(M) columns of C, every row. For M > 8 from a packed copy of
/// the block (K × 64 contiguous): B's strided rows are read once, then from cache for every row tile.
void columnBlock(bool transB, int64_t M, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                 int64_t ldc, int64_t cols, float alpha, float beta, std::vector<float> &packed) {
  if (M == 1 && !transB) return rowNN(K, A, B, ldb, C, cols, alpha, beta, packed);
  if (M <= 2) return tileRows<2, 8>(M, transB, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  if (M <= 4) return tileRows<4, 4>(M, transB, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  if (M <= 8) return tileRows<8, 3>(M, transB, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  const float *b = B;
  int64_t bStride = ldb;
  if (!transB) {
    packed.resize(static_cast<size_t>(K * kPackedCols));
    for (int64_t k = 0; k < K; ++k) std::copy(B + k * ldb, B + k * ldb + cols, packed.data() + k * kPackedCols);
    b = packed.data();
    bStride = kPackedCols;
  }
  for (int64_t m = 0; m < M; m += kTileRows)
    tileRows<kTileRows, kPackedCols / 16>(std::min<int64_t>(kTileRows, M - m), transB, K, A + m * lda, lda, b, bStride,
                                          C + m * ldc, ldc, cols, alpha, beta);
}

}  // namespace

void sgemmRowInvariant(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (transA) return sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (M == 0 || N == 0) return;
  int64_t width = blockWidth(M, transB);
  if (M == 1 && !transB) {
    // Blocks of equal width (a multiple of 16), one per thread when they fit: one thread streams B
    // whole, front to back.
    const int64_t parts = std::max<int64_t>(omp_get_max_threads(), (N + width - 1) / width);
    width = ((N + parts - 1) / parts + 15) / 16 * 16;
  }
  const int64_t blocks = (N + width - 1) / width;
  // Threads over column blocks only when there is work for them (2 MFLOP); the result is the same.
  const bool parallel = blocks > 1 && 2.0 * double(M) * double(N) * double(K) > 2e6;
#pragma omp parallel if (parallel)
  {
    // Per thread, kept across calls: a decode step runs ~100 of these, each would allocate.
    thread_local std::vector<float> packed;
#pragma omp for schedule(static)
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t n = j * width, cols = std::min(width, N - n);
      columnBlock(transB, M, K, A, lda, transB ? B + n * ldb : B + n, ldb, C + n, ldc, cols, alpha, beta, packed);
    }
  }
}

}  // namespace colossal::runtime::cpu

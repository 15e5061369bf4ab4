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
// A constant B (a plan weight) can be repacked once into panels (PanelB, Gemm.h): blocks of 4
// rows × 16 columns, each 64 floats contiguous, a row of blocks after the other. A decode step
// (M = 1) then reads B as one sequential stream, and the strips of the small-M tiles read
// 256-byte runs instead of 64-byte ones; the arithmetic is the same fma chain, so a panel product
// is bit-equal to the plain one. Why: one core streams ~24 GB/s from memory in one sequential
// stream but ~11–18 GB/s when it reads 4 rows side by side or a strip of 48 columns down B (the
// hardware prefetcher loses track; docs/serving.md "Batch invariance" has the numbers), and a
// decode step is a pass over every weight. Where B is not constant, the plain path prefetches
// the rows it will read next into L2 instead, which recovers part of it.
//
//===----------------------------------------------------------------------------------------===//
#include "Gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <omp.h>
#include <sys/mman.h>
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

/// Row k of a strip of B in a plain row-major B [K, N] (row stride ldb); vector v of the row is
/// 16 floats at row(k) + 16·v.
struct PlainRows {
  const float *b;
  int64_t ldb;
  static constexpr bool kPadded = false;  // vectors past N are not there: masked loads
  static constexpr int64_t kVectorStep = 16;
  const float *row(int64_t k) const { return b + k * ldb; }
  PlainRows columns(int64_t n) const { return {b + n, ldb}; }
};

/// Row k of a strip of a PanelB: vector v of the row is 16 floats at row(k) + 64·v.
struct PanelRows {
  const float *p;
  int64_t blockStride;  // floats per row of 4 × 16 blocks
  static constexpr bool kPadded = true;  // zero columns up to a multiple of 16: whole loads
  static constexpr int64_t kVectorStep = 64;
  const float *row(int64_t k) const { return p + (k >> 2) * blockStride + (k & 3) * 16; }
  PanelRows columns(int64_t n) const { return {p + n / 16 * 64, blockStride}; }  // n % 16 == 0
};

/// Rows of B ahead of the one being read that a kernel prefetches into L2 (rowNN from a plain B,
/// every tile), so that about 16 KiB of B are in flight. Prefetches change no arithmetic.
inline int64_t prefetchRows(int64_t cols, int64_t multiple) {
  const int64_t rows = (16384 / 4 + cols - 1) / std::max<int64_t>(cols, 1);
  return (rows + multiple - 1) / multiple * multiple;
}

/// y = alpha · s + beta · y (beta == 0: y's old value is not read).
inline float epilogue(float s, float alpha, float beta, float y) { return beta == 0 ? alpha * s : alpha * s + beta * y; }

#if defined(__AVX512F__)

/// R rows × up to 16·V columns of C from the strip `rows` of B: each element the fma chain over
/// k in order.
template <int R, int V, typename Rows>
void tileNN(int64_t K, const float *A, int64_t lda, const Rows &rows, float *C, int64_t ldc, int64_t cols,
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
  const int present = static_cast<int>((cols + 15) / 16);
  const int64_t ahead = prefetchRows(cols, 1);
  auto step = [&](int64_t k, auto full) {
    const float *bk = rows.row(k);
    if (k + ahead < K)  // a panel's 4 rows of a block cover its 4 lines of each vector
      for (int v = 0; v < present; ++v)
        _mm_prefetch(reinterpret_cast<const char *>(rows.row(k + ahead) + Rows::kVectorStep * v), _MM_HINT_T1);
    __m512 b[V];
    for (int v = 0; v < V; ++v)
      b[v] = full || v < whole ? _mm512_loadu_ps(bk + Rows::kVectorStep * v)
                               : _mm512_maskz_loadu_ps(mask[v], bk + Rows::kVectorStep * v);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * lda + k]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  };
  // Whole vectors load without masks (masked loads are slow in this loop on AMD Zen); a panel's
  // padding makes every present vector whole (the ones past the tile are never stored).
  if (cols == 16 * V || (Rows::kPadded && present == V))
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

template <int R, int V, typename Rows>
void tileNN(int64_t K, const float *A, int64_t lda, const Rows &rows, float *C, int64_t ldc, int64_t cols,
            float alpha, float beta) {
  float acc[R][16 * V] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float *bk = rows.row(k);
    for (int r = 0; r < R; ++r) {
      const float a = A[r * lda + k];
      for (int64_t j = 0; j < cols; ++j) acc[r][j] = std::fma(a, bk[j / 16 * Rows::kVectorStep + j % 16], acc[r][j]);
    }
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

/// Rows [0, rows ≤ R) × columns [0, cols ≤ 16·V) of C from the strip `b` of B [K, N],
/// dispatched to the template of that many rows.
template <int R, int V, typename Rows>
void tileRowsNN(int64_t rows, int64_t K, const float *A, int64_t lda, const Rows &b, float *C, int64_t ldc, int64_t cols,
                float alpha, float beta) {
  if constexpr (R > 1)
    if (rows < R) return tileRowsNN<R - 1, V>(rows, K, A, lda, b, C, ldc, cols, alpha, beta);
  tileNN<R, V>(K, A, lda, b, C, ldc, cols, alpha, beta);
}

/// The same from B stored [N, K] (op(B) = Bᵀ): one 16-lane dot product per element.
template <int R>
void tileRowsNT(int64_t rows, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                int64_t cols, float alpha, float beta) {
  if constexpr (R > 1)
    if (rows < R) return tileRowsNT<R - 1>(rows, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  for (int64_t j = 0; j < cols; ++j) {
    float s[R];
    dotsNT<R>(K, A, lda, B + j * ldb, s);
    for (int r = 0; r < R; ++r) C[r * ldc + j] = epilogue(s[r], alpha, beta, C[r * ldc + j]);
  }
}

/// One row of C from B [K, N] (M = 1, a decode step of one sequence) over columns [0, cols): the
/// rows of B read front to back into sums held in memory, four rows per pass: the same fma chain
/// per element as tileNN (from 0, k in order), so the row equals the one a tile computes. From a
/// plain B the same columns `ahead` rows further down are prefetched as they are read; a panel
/// is one sequential stream, which the hardware prefetcher follows alone.
template <typename Rows>
void rowNN(int64_t K, const float *a, const Rows &b, float *c, int64_t cols, float alpha, float beta,
           std::vector<float> &sums) {
  constexpr int64_t step = Rows::kVectorStep;
  const int64_t vectors = Rows::kPadded ? (cols + 15) / 16 : cols / 16;  // whole-vector loads
  sums.assign(static_cast<size_t>(Rows::kPadded ? vectors * 16 : cols), 0.0f);
  float *acc = sums.data();
  auto at = [&](const float *row, int64_t j) { return row + j / 16 * step + j % 16; };
  int64_t k = 0;
#if defined(__AVX512F__)
  const int64_t ahead = Rows::kPadded ? 0 : prefetchRows(cols, 4);
  for (; k + 4 <= K; k += 4) {
    const float *b0 = b.row(k), *b1 = b.row(k + 1), *b2 = b.row(k + 2), *b3 = b.row(k + 3);
    const __m512 x0 = _mm512_set1_ps(a[k]), x1 = _mm512_set1_ps(a[k + 1]), x2 = _mm512_set1_ps(a[k + 2]),
                 x3 = _mm512_set1_ps(a[k + 3]);
    const bool prefetch = !Rows::kPadded && k + ahead + 4 <= K;
    const float *f0 = prefetch ? b.row(k + ahead) : nullptr;
    const int64_t ldb = prefetch ? b.row(k + ahead + 1) - f0 : 0;
    for (int64_t v = 0; v < vectors; ++v) {
      if (prefetch) {
        const char *f = reinterpret_cast<const char *>(f0 + 16 * v);
        _mm_prefetch(f, _MM_HINT_T1);
        _mm_prefetch(f + 4 * ldb, _MM_HINT_T1);
        _mm_prefetch(f + 8 * ldb, _MM_HINT_T1);
        _mm_prefetch(f + 12 * ldb, _MM_HINT_T1);
      }
      const int64_t o = v * step;
      __m512 s = _mm512_loadu_ps(acc + 16 * v);
      s = _mm512_fmadd_ps(x0, _mm512_loadu_ps(b0 + o), s);
      s = _mm512_fmadd_ps(x1, _mm512_loadu_ps(b1 + o), s);
      s = _mm512_fmadd_ps(x2, _mm512_loadu_ps(b2 + o), s);
      s = _mm512_fmadd_ps(x3, _mm512_loadu_ps(b3 + o), s);
      _mm512_storeu_ps(acc + 16 * v, s);
    }
    for (int64_t j = 16 * vectors; j < cols; ++j)
      acc[j] = std::fma(a[k + 3], *at(b3, j),
                        std::fma(a[k + 2], *at(b2, j), std::fma(a[k + 1], *at(b1, j), std::fma(a[k], *at(b0, j), acc[j]))));
  }
#endif
  for (; k < K; ++k) {
    const float *bk = b.row(k);
    int64_t j = 0;
#if defined(__AVX512F__)
    const __m512 x = _mm512_set1_ps(a[k]);
    for (int64_t v = 0; v < vectors; ++v, j += 16)
      _mm512_storeu_ps(acc + j, _mm512_fmadd_ps(x, _mm512_loadu_ps(bk + v * step), _mm512_loadu_ps(acc + j)));
#endif
    for (; j < cols; ++j) acc[j] = std::fma(a[k], *at(bk, j), acc[j]);
  }
  for (int64_t j = 0; j < cols; ++j) c[j] = epilogue(acc[j], alpha, beta, c[j]);
}

/// The columns of one block: one tile of all M rows for M ≤ 8 (B read once, in place; wide for
/// few rows, so that each broadcast of A feeds enough FMAs), else kTileRows × 64 tiles. Every
/// width is a multiple of 16 (a panel's blocks start at multiples of 16 columns).
int64_t blockWidth(int64_t M, bool transB) {
  if (M == 1 && !transB) return 8192;  // rowNN: at most 32 KiB of sums, in L1
  return M <= 2 ? 128 : M <= 4 ? 64 : M <= 8 ? 48 : kPackedCols;
}

/// One block of `cols` ≤ blockWidth(M) columns of C from the strip `b` of B [K, N], every row.
/// For M > 8 from a plain B, from a packed copy of the block (K × 64 contiguous): B's strided
/// rows are read once, then from cache for every row tile; a panel is read in place.
template <typename Rows>
void columnBlockNN(int64_t M, int64_t K, const float *A, int64_t lda, const Rows &b, float *C, int64_t ldc,
                   int64_t cols, float alpha, float beta, std::vector<float> &scratch) {
  if (M == 1) return rowNN(K, A, b, C, cols, alpha, beta, scratch);
  if (M <= 2) return tileRowsNN<2, 8>(M, K, A, lda, b, C, ldc, cols, alpha, beta);
  if (M <= 4) return tileRowsNN<4, 4>(M, K, A, lda, b, C, ldc, cols, alpha, beta);
  if (M <= 8) return tileRowsNN<8, 3>(M, K, A, lda, b, C, ldc, cols, alpha, beta);
  auto tiles = [&](const auto &rows) {
    for (int64_t m = 0; m < M; m += kTileRows)
      tileRowsNN<kTileRows, kPackedCols / 16>(std::min<int64_t>(kTileRows, M - m), K, A + m * lda, lda, rows,
                                              C + m * ldc, ldc, cols, alpha, beta);
  };
  if constexpr (Rows::kPadded) {
    tiles(b);
  } else {
    scratch.resize(static_cast<size_t>(K * kPackedCols));
    for (int64_t k = 0; k < K; ++k) std::copy(b.row(k), b.row(k) + cols, scratch.data() + k * kPackedCols);
    tiles(PlainRows{scratch.data(), kPackedCols});
  }
}

void columnBlockNT(int64_t M, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                   int64_t cols, float alpha, float beta) {
  if (M <= 2) return tileRowsNT<2>(M, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  if (M <= 4) return tileRowsNT<4>(M, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  if (M <= 8) return tileRowsNT<8>(M, K, A, lda, B, ldb, C, ldc, cols, alpha, beta);
  for (int64_t m = 0; m < M; m += kTileRows)
    tileRowsNT<kTileRows>(std::min<int64_t>(kTileRows, M - m), K, A + m * lda, lda, B, ldb, C + m * ldc, ldc, cols,
                          alpha, beta);
}

/// Column blocks of C spread over the threads; block(n, cols, scratch) computes columns
/// [n, n + cols) of every row.
template <typename Block>
void forColumnBlocks(int64_t M, int64_t N, int64_t K, bool transB, Block &&block) {
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
  auto run = [&](int64_t j) {
    // Per thread, kept across calls: a decode step runs ~100 of these, each would allocate.
    thread_local std::vector<float> scratch;
    const int64_t n = j * width;
    block(n, std::min(width, N - n), scratch);
  };
  if (!parallel || omp_get_max_threads() <= 1 || omp_in_parallel()) {  // no OpenMP region (CpuCommon.h parallelItems)
    for (int64_t j = 0; j < blocks; ++j) run(j);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < blocks; ++j) run(j);
}

}  // namespace

void sgemmRowInvariant(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (transA) return sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (M == 0 || N == 0) return;
  const PlainRows plain{B, ldb};
  forColumnBlocks(M, N, K, transB, [&](int64_t n, int64_t cols, std::vector<float> &scratch) {
    if (transB)
      columnBlockNT(M, K, A, lda, B + n * ldb, ldb, C + n, ldc, cols, alpha, beta);
    else
      columnBlockNN(M, K, A, lda, plain.columns(n), C + n, ldc, cols, alpha, beta, scratch);
  });
}

PanelB::PanelB(const float *B, int64_t K, int64_t N, int64_t ldb) : K(K), N(N), blocks((N + 15) / 16) {
  const size_t bytes = static_cast<size_t>((K + 3) / 4) * static_cast<size_t>(blocks) * 64 * sizeof(float);
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  const size_t rounded = std::max<size_t>((bytes + align - 1) / align * align, align);
  data_ = static_cast<float *>(std::aligned_alloc(align, rounded));
  if (!data_) throw std::bad_alloc();
  if (align == kHuge) madvise(data_, rounded, MADV_HUGEPAGE);  // before the first touch; advice only
  float *p = data_;
  std::memset(p, 0, rounded);  // the padding stays 0
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) p[((k >> 2) * blocks + (n >> 4)) * 64 + (k & 3) * 16 + (n & 15)] = B[k * ldb + n];
}

PanelB::~PanelB() { std::free(data_); }

void sgemmRowInvariantPanels(int64_t M, float alpha, const float *A, int64_t lda, const PanelB &B, float beta,
                             float *C, int64_t ldc) {
  if (M == 0 || B.N == 0) return;
  const PanelRows panel{B.data(), B.blocks * 64};
  forColumnBlocks(M, B.N, B.K, false, [&](int64_t n, int64_t cols, std::vector<float> &scratch) {
    columnBlockNN(M, B.K, A, lda, panel.columns(n), C + n, ldc, cols, alpha, beta, scratch);
  });
}

}  // namespace colossal::runtime::cpu

//===- matmul.cpp - matmul and gemm CPU kernels (f32, bf16) ---------------------------------===//
//
// matmul: a [..., M, K] · b [..., K, N] -> y [..., M, N], batch dims broadcast (NumPy matmul /
//         ONNX MatMul with both operands rank >= 2). When b has no batch (a linear layer) and a's
//         batch is not broadcast, the batch folds into M: one GEMM of [B·M, K]·[K, N]. Otherwise one
//         GEMM per batch matrix: sequential with threaded GEMMs for large matrices, or parallel over
//         the batch with single-threaded GEMMs when matrices are small (attention-sized).
// gemm:   ONNX Gemm: y [M, N] = alpha · op(a) · op(b) + beta · c, op = transpose when trans_a /
//         trans_b, c unidirectionally broadcast to [M, N].
// linear: f32 x [..., M, K] · w [K, N] with its epilogue (colossal-fuse-matmul-epilogue):
//         y = act(x·w + bias) [+ residual], act none / relu / gelu / gelu_tanh. One GEMM of
//         [B·M, K]·[K, N] into y, then one pass over y in row blocks that adds the bias, applies
//         the activation and adds the residual, each rounded as the unfused kernels round it
//         (Activations.h), so the result is theirs to the bit. Instead of the three or four passes
//         (and buffers) of the unfused ops, the epilogue reads y once while the GEMM's last
//         writes to it may still be in cache.
//
// bf16 (colossal-auto-mixed-precision): operands bf16, result f32 (the forward contractions) or
// bf16 (their VJPs). Products are exact and sums f32 either way; a bf16 result is the f32 result
// rounded to nearest even once. Where the CPU's AVX512-BF16 dot products outrun its f32 FMAs
// (GemmBf16.h) the product is oneDNN's bf16 matmul primitive, built at prepare; elsewhere, and for
// batched products of small matrices, each bf16 operand is widened to f32 in the workspace (exact:
// a bf16 is an f32 with the low 16 bits zero) and the f32 GEMM runs on the copies
// (docs/kernels.md "bf16 GEMM").
//
//===----------------------------------------------------------------------------------------===//
#include "Activations.h"
#include "CpuCommon.h"
#include "Gemm.h"
#include "Widen.h"
#if defined(COLOSSAL_GEMM_ONEDNN)
#include "GemmBf16.h"
#endif

#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace colossal::runtime::cpu {
namespace {

/// Operand and result dtypes: f32 · f32 -> f32, bf16 · bf16 -> f32 or bf16.
llvm::Error verifyContractionDTypes(const KernelCall &c, unsigned factors) {
  DType in = c.inputs[0].dtype, out = c.outputs[0].dtype;
  if (in != DType::F32 && !isHalfFloat(in))
    return kernelError("operands must be f32, bf16 or f16, got " + dtypeName(in));
  for (unsigned i = 1; i < factors; ++i)
    if (c.inputs[i].dtype != in)
      return kernelError("operands must have one dtype, got " + dtypeName(in) + " and " +
                         dtypeName(c.inputs[i].dtype));
  if (isHalfFloat(out) && in != out)
    return kernelError("a " + dtypeName(out) + " result needs " + dtypeName(out) + " operands, got " + dtypeName(in));
  return llvm::Error::success();
}

/// f32 views of a contraction's two factors and its result (Widen.h); finish() rounds a bf16
/// result.
struct F32Views {
  const float *in[2] = {nullptr, nullptr};
  float *out = nullptr;

  static size_t bytes(const KernelCall &c) {
    return f32CopyBytes(c.inputs[0]) + f32CopyBytes(c.inputs[1]) + f32CopyBytes(c.outputs[0]);
  }
  F32Views() = default;
  explicit F32Views(const KernelCall &c) {
    char *ws = static_cast<char *>(c.workspace);
    in[0] = widenedInput(c.inputs[0], ws);
    in[1] = widenedInput(c.inputs[1], ws);
    out = f32Result(c.outputs[0], ws);
  }
  void finish(const KernelCall &c) const { roundResult(c.outputs[0], out); }
};

#if defined(COLOSSAL_GEMM_ONEDNN)
/// A bf16 · bf16 contraction's oneDNN product into c.state, when GemmBf16.h chooses oneDNN:
/// op(A) [M,K] · op(B) [K,N] with row strides lda, ldb and N.
llvm::Error prepareBf16Product(KernelCall &c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                               int64_t ldb, float alpha, bool accumulate) {
  if (c.inputs[0].dtype != DType::BF16 || M == 0 || N == 0 || K == 0) return llvm::Error::success();
  llvm::Expected<bool> onednn = useOneDnnBf16Gemm();
  if (!onednn) return onednn.takeError();
  if (!*onednn) return llvm::Error::success();
  auto g = createOneDnnBf16Gemm(ta, tb, M, N, K, lda, ldb, N, alpha, accumulate, c.outputs[0].dtype == DType::BF16);
  if (!g) return g.takeError();
  c.state = std::move(*g);
  return llvm::Error::success();
}

/// prepare's oneDNN product of a bf16 contraction (one matrix of it), when it built one.
OneDnnBf16Gemm *bf16Product(const KernelCall &c) {
  return c.inputs[0].dtype == DType::BF16 ? static_cast<OneDnnBf16Gemm *>(c.state.get()) : nullptr;
}
#endif

size_t contractionWorkspace(const KernelCall &c, int) {
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (OneDnnBf16Gemm *g = bf16Product(c)) return oneDnnBf16GemmWorkspace(*g);
#endif
  return F32Views::bytes(c);
}

/// Whether a matmul multiplies its batch of matrices one by one in parallel, with single-threaded
/// GEMMs (small matrices), rather than sequentially with threaded GEMMs.
bool parallelOverBatch(int64_t M, int64_t N, int64_t K, int64_t nBatch) {
  return 2.0 * M * N * K < 4e6 && nBatch > 1;
}

/// Whether a matmul's batch folds into M (b has no batch and a's is not broadcast): one GEMM of
/// [B·M, K]·[K, N].
bool batchFoldsIntoM(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  const int64_t nBatch = numElements(llvm::ArrayRef<int64_t>(Y.shape).drop_back(2));
  return numElements(llvm::ArrayRef<int64_t>(B.shape).drop_back(2)) == 1 &&
         numElements(llvm::ArrayRef<int64_t>(A.shape).drop_back(2)) == nBatch;
}

llvm::Error verifyMatmul(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  if (llvm::Error e = verifyContractionDTypes(c, 2)) return e;
  if (A.rank() < 2 || B.rank() < 2)
    return kernelError("operands must have rank >= 2, got " + shapeToString(A.shape) + " and " +
                       shapeToString(B.shape));
  int64_t M = A.shape[A.rank() - 2], K = A.shape[A.rank() - 1];
  int64_t K2 = B.shape[B.rank() - 2], N = B.shape[B.rank() - 1];
  if (K != K2)
    return kernelError("inner dimensions differ: " + shapeToString(A.shape) + " · " + shapeToString(B.shape));
  Shape batch;
  if (!broadcastShapes(llvm::ArrayRef<int64_t>(A.shape).drop_back(2),
                       llvm::ArrayRef<int64_t>(B.shape).drop_back(2), batch))
    return kernelError("batch dimensions of " + shapeToString(A.shape) + " and " +
                       shapeToString(B.shape) + " do not broadcast");
  batch.push_back(M);
  batch.push_back(N);
  if (batch != Y.shape)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(batch));
  if (Y.rank() > kMaxRank) return kernelError("rank exceeds 8");
  return llvm::Error::success();
}

/// The panels of a constant B, shared by every instruction that multiplies by the same weight (a
/// generate plan's step programs each hold the same layers): keyed by the weight's address and
/// shape, alive while an instruction holds them.
std::shared_ptr<const PanelB> sharedPanels(const float *B, int64_t K, int64_t N) {
  static std::mutex mutex;
  static std::map<std::tuple<const float *, int64_t, int64_t>, std::weak_ptr<const PanelB>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = cache.begin(); it != cache.end();) it = it->second.expired() ? cache.erase(it) : std::next(it);
  std::weak_ptr<const PanelB> &slot = cache[{B, K, N}];
  if (std::shared_ptr<const PanelB> p = slot.lock()) return p;
  auto p = std::make_shared<const PanelB>(B, K, N, N);
  slot = p;
  return p;
}

/// A batch-invariant matmul by a weight (a serving step's projection: f32, b a plan weight with no
/// batch, a's batch folded into M) multiplies by the weight's panels (Gemm.h PanelB), built once.
llvm::Error prepareMatmul(KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1];
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (A.dtype == DType::BF16) {
    const TensorRef &Y = c.outputs[0];
    const int64_t M = Y.shape[Y.rank() - 2], N = Y.shape[Y.rank() - 1], K = A.shape[A.rank() - 1];
    const int64_t nBatch = numElements(llvm::ArrayRef<int64_t>(Y.shape).drop_back(2));
    if (batchFoldsIntoM(c)) return prepareBf16Product(c, false, false, nBatch * M, N, K, K, N, 1.0f, false);
    if (!parallelOverBatch(M, N, K, nBatch)) return prepareBf16Product(c, false, false, M, N, K, K, N, 1.0f, false);
    return llvm::Error::success();
  }
#endif
  if (!c.attrInt("batch_invariant", 0) || !c.isConstantInput(1) || A.dtype != DType::F32 ||
      c.outputs[0].dtype != DType::F32 || numElements(llvm::ArrayRef<int64_t>(B.shape).drop_back(2)) != 1)
    return llvm::Error::success();
  const int64_t K = B.shape[B.rank() - 2], N = B.shape[B.rank() - 1];
  c.state = std::const_pointer_cast<PanelB>(sharedPanels(B.as<const float>(), K, N));
  return llvm::Error::success();
}

llvm::Error runMatmul(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  const int rank = static_cast<int>(Y.rank());
  const int64_t M = Y.shape[rank - 2], N = Y.shape[rank - 1], K = A.shape[A.rank() - 1];
  llvm::ArrayRef<int64_t> outBatch = llvm::ArrayRef<int64_t>(Y.shape).drop_back(2);
  llvm::ArrayRef<int64_t> aBatch = llvm::ArrayRef<int64_t>(A.shape).drop_back(2);
  llvm::ArrayRef<int64_t> bBatch = llvm::ArrayRef<int64_t>(B.shape).drop_back(2);
  const int64_t nBatch = numElements(outBatch);
  if (nBatch == 0 || M == 0 || N == 0) return llvm::Error::success();
  // Matrix strides of a and b per output batch dim (0 where broadcast).
  llvm::ArrayRef<int64_t> shapes[2] = {aBatch, bBatch};
  BroadcastLayout l = makeBroadcastLayout(outBatch, shapes);
  const int64_t aMat = M * K, bMat = K * N, yMat = M * N;
  auto offsets = [&](int64_t i, int64_t &ao, int64_t &bo) {
    ao = bo = 0;
    for (int d = l.rank - 1; d >= 0; --d) {
      int64_t k = i % l.dims[d];
      i /= l.dims[d];
      ao += k * l.strides[0][d];
      bo += k * l.strides[1][d];
    }
  };
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (OneDnnBf16Gemm *g = bf16Product(c)) {  // prepareMatmul's oneDNN product: one, or one per matrix
    const uint16_t *a = A.as<const uint16_t>(), *b = B.as<const uint16_t>();
    char *y = static_cast<char *>(Y.data);
    const size_t ySize = dtypeSize(Y.dtype);
    if (batchFoldsIntoM(c)) return runOneDnnBf16Gemm(*g, a, b, y, c.workspace);
    for (int64_t i = 0; i < nBatch; ++i) {
      int64_t ao, bo;
      offsets(i, ao, bo);
      if (llvm::Error e = runOneDnnBf16Gemm(*g, a + ao * aMat, b + bo * bMat, y + i * yMat * ySize, c.workspace))
        return e;
    }
    return llvm::Error::success();
  }
#endif
  const F32Views v(c);
  const float *a = v.in[0], *b = v.in[1];
  float *y = v.out;
  // A serving step's matmuls (colossal-generate marks them): rows independent of the batch.
  const auto sgemm = c.attrInt("batch_invariant", 0) ? sgemmRowInvariant : cpu::sgemm;

  if (batchFoldsIntoM(c)) {
    if (c.state)  // prepareMatmul's panels of b
      sgemmRowInvariantPanels(nBatch * M, 1.0f, a, K, *static_cast<const PanelB *>(c.state.get()), 0.0f, y, N);
    else
      sgemm(false, false, nBatch * M, N, K, 1.0f, a, K, b, N, 0.0f, y, N);
    v.finish(c);
    return llvm::Error::success();
  }
  if (parallelOverBatch(M, N, K, nBatch)) {
    parallelFor(nBatch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        int64_t ao, bo;
        offsets(i, ao, bo);
        sgemm(false, false, M, N, K, 1.0f, a + ao * aMat, K, b + bo * bMat, N, 0.0f, y + i * yMat, N);
      }
    });
  } else {
    for (int64_t i = 0; i < nBatch; ++i) {
      int64_t ao, bo;
      offsets(i, ao, bo);
      sgemm(false, false, M, N, K, 1.0f, a + ao * aMat, K, b + bo * bMat, N, 0.0f, y + i * yMat, N);
    }
  }
  v.finish(c);
  return llvm::Error::success();
}

llvm::Error verifyGemm(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  if (llvm::Error e = verifyContractionDTypes(c, 2)) return e;
  if (c.inputs.size() == 3 && c.inputs[2].dtype != DType::F32)
    return kernelError("c must be f32, got " + dtypeName(c.inputs[2].dtype));
  if (c.inputs.size() == 3 && Y.dtype != DType::F32)
    return kernelError("a bf16 result takes no c");
  if (A.rank() != 2 || B.rank() != 2 || Y.rank() != 2)
    return kernelError("a, b and y must have rank 2");
  bool ta = c.attrInt("trans_a", 0), tb = c.attrInt("trans_b", 0);
  int64_t M = ta ? A.shape[1] : A.shape[0], K = ta ? A.shape[0] : A.shape[1];
  int64_t K2 = tb ? B.shape[1] : B.shape[0], N = tb ? B.shape[0] : B.shape[1];
  if (K != K2)
    return kernelError("inner dimensions differ: op(a) of " + shapeToString(A.shape) + " and op(b) of " +
                       shapeToString(B.shape));
  if (Y.shape[0] != M || Y.shape[1] != N)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected [" + llvm::Twine(M) + ", " +
                       llvm::Twine(N) + "]");
  if (c.inputs.size() == 3) return verifyStretchesTo(c.inputs[2], Y.shape);
  return llvm::Error::success();
}

#if defined(COLOSSAL_GEMM_ONEDNN)
/// A bf16 gemm's oneDNN product (GemmBf16.h), alpha as its output scale and c, when given, added
/// by its sum post-op into y prefilled with beta·c.
llvm::Error prepareGemm(KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  const bool ta = c.attrInt("trans_a", 0), tb = c.attrInt("trans_b", 0);
  const float alpha = static_cast<float>(c.attrFloat("alpha", 1.0));
  const float beta = static_cast<float>(c.attrFloat("beta", 1.0));
  const bool addend = c.inputs.size() == 3 && beta != 0.0f;
  return prepareBf16Product(c, ta, tb, Y.shape[0], Y.shape[1], ta ? A.shape[0] : A.shape[1], A.shape[1], B.shape[1],
                            alpha, addend);
}
#endif

/// Whether gemm copies a transposed b to [K, N] and runs the product untransposed: for a·bᵀ with
/// many rows and a long reduction — the input gradient dY·Wᵀ of a linear layer whose output is
/// wide (training's backward: dY [B·T, N_out] · W [K_in, N_out]ᵀ, K = N_out) — oneDNN's sgemm runs
/// the untransposed form 10–16% faster on AVX-512 (e.g. [2048, 1536]·[1536, 384]: 192 vs 162
/// GFLOP/s on an AMD EPYC Zen 4, 2 threads), and the copy of b (K·N floats, once per call) costs
/// 2–3% of the product. Short reductions keep sgemm's transposed form (no faster untransposed).
bool transposesB(const KernelCall &c, int64_t M, int64_t K) {
  return c.attrInt("trans_b", 0) && !c.attrInt("trans_a", 0) && !c.attrInt("batch_invariant", 0) &&
         c.inputs[0].dtype == DType::F32 && c.inputs[1].dtype == DType::F32 && c.outputs[0].dtype == DType::F32 &&
         M >= 1024 && K >= 1024;
}

/// Where gemm's transposed copy of b starts in its workspace: after the f32 views, 64-aligned.
size_t transposedBOffset(const KernelCall &c) { return (contractionWorkspace(c, c.threads) + 63) / 64 * 64; }

size_t gemmWorkspace(const KernelCall &c, int) {
  const TensorRef &A = c.inputs[0], &Y = c.outputs[0];
  const int64_t M = Y.shape[0], N = Y.shape[1], K = c.attrInt("trans_a", 0) ? A.shape[0] : A.shape[1];
  return transposedBOffset(c) + (transposesB(c, M, K) ? static_cast<size_t>(K * N) * sizeof(float) : 0);
}

#if defined(__AVX2__)
/// t[i·ldt + j] = x[j·ldx + i] for an 8 × 8 block, through registers.
inline void transpose8x8(const float *x, int64_t ldx, float *t, int64_t ldt) {
  __m256 r[8], u[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(x + j * ldx);
  for (int j = 0; j < 8; j += 2) {
    u[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
    u[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    r[j] = _mm256_shuffle_ps(u[j], u[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[j + 1] = _mm256_shuffle_ps(u[j], u[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[j + 2] = _mm256_shuffle_ps(u[j + 1], u[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[j + 3] = _mm256_shuffle_ps(u[j + 1], u[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(t + i * ldt, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(t + (i + 4) * ldt, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

/// bt[k·N + n] = b[n·K + k]: b [N, K] row-major to [K, N], in 32 × 32 tiles on the threads (each
/// tile as 8 × 8 register transposes with AVX2, element by element at the edges).
void transposeMatrix(const float *b, int64_t N, int64_t K, float *bt) {
  constexpr int64_t kTile = 32;
  const int64_t nTiles = (N + kTile - 1) / kTile, kTiles = (K + kTile - 1) / kTile;
  parallelFor(nTiles * kTiles, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t / kTiles * kTile, k0 = t % kTiles * kTile;
      const int64_t n1 = std::min(N, n0 + kTile), k1 = std::min(K, k0 + kTile);
#if defined(__AVX2__)
      if (n1 - n0 == kTile && k1 - k0 == kTile) {
        for (int64_t n = n0; n < n1; n += 8)
          for (int64_t k = k0; k < k1; k += 8) transpose8x8(b + n * K + k, K, bt + k * N + n, N);
        continue;
      }
#endif
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t k = k0; k < k1; ++k) bt[k * N + n] = b[n * K + k];
    }
  });
}

llvm::Error runGemm(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  bool ta = c.attrInt("trans_a", 0), tb = c.attrInt("trans_b", 0);
  float alpha = static_cast<float>(c.attrFloat("alpha", 1.0));
  float beta = static_cast<float>(c.attrFloat("beta", 1.0));
  int64_t M = Y.shape[0], N = Y.shape[1], K = ta ? A.shape[0] : A.shape[1];
#if defined(COLOSSAL_GEMM_ONEDNN)
  OneDnnBf16Gemm *product = bf16Product(c);
  F32Views v = product ? F32Views() : F32Views(c);
  float *y = product ? Y.as<float>() : v.out;  // an f32 result whenever there is an addend
#else
  const F32Views v(c);
  float *y = v.out;
#endif
  float gemmBeta = 0.0f;
  if (c.inputs.size() == 3 && beta != 0.0f) {
    const TensorRef &C = c.inputs[2];
    llvm::ArrayRef<int64_t> shapes[1] = {C.shape};
    BroadcastLayout l = makeBroadcastLayout(Y.shape, shapes);
    const float *cv = C.as<const float>();
    forEachBroadcastRow(l, [&](int64_t yo, const int64_t *offs, int64_t n, const int64_t *st) {
      for (int64_t i = 0; i < n; ++i) y[yo + i] = beta * cv[offs[0] + i * st[0]];
    });
    gemmBeta = 1.0f;
  }
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (product) return runOneDnnBf16Gemm(*product, A.as<const uint16_t>(), B.as<const uint16_t>(), Y.data, c.workspace);
#endif
  if (transposesB(c, M, K)) {
    float *bt = reinterpret_cast<float *>(static_cast<char *>(c.workspace) + transposedBOffset(c));
    transposeMatrix(v.in[1], N, K, bt);
    cpu::sgemm(false, false, M, N, K, alpha, v.in[0], A.shape[1], bt, N, gemmBeta, y, N);
    v.finish(c);
    return llvm::Error::success();
  }
  const auto sgemm = c.attrInt("batch_invariant", 0) ? sgemmRowInvariant : cpu::sgemm;
  sgemm(ta, tb, M, N, K, alpha, v.in[0], A.shape[1], v.in[1], B.shape[1], gemmBeta, y, N);
  v.finish(c);
  return llvm::Error::success();
}

llvm::Error verifyLinear(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &W = c.inputs[1], &Bias = c.inputs[2], &Y = c.outputs[0];
  for (const TensorRef *t : {&X, &W, &Bias})
    if (llvm::Error e = verifyDType(*t, DType::F32, "x, w and bias")) return e;
  if (X.rank() < 2 || W.rank() != 2 || Bias.rank() != 1)
    return kernelError("expects x [..., M, K], w [K, N] and bias [N], got " + shapeToString(X.shape) + ", " +
                       shapeToString(W.shape) + ", " + shapeToString(Bias.shape));
  if (X.shape.back() != W.shape[0] || Bias.shape[0] != W.shape[1])
    return kernelError("x " + shapeToString(X.shape) + " · w " + shapeToString(W.shape) + " + bias " +
                       shapeToString(Bias.shape) + " do not agree");
  Shape want = X.shape;
  want.back() = W.shape[1];
  if (Y.shape != want)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  if (c.inputs.size() == 4) {
    if (llvm::Error e = verifyDType(c.inputs[3], DType::F32, "residual")) return e;
    if (llvm::Error e = verifySameShape(c.inputs[3], Y, "residual and output")) return e;
  }
  std::string act = c.attrString("activation", "none");
  if (act != "none" && act != "relu" && act != "gelu" && act != "gelu_tanh")
    return kernelError("activation must be none, relu, gelu or gelu_tanh, got \"" + act + "\"");
  return llvm::Error::success();
}

/// y[j] = Act(y[j] + bias[j]) for j < n. Flattened, so that Act::f inlines (Elementwise.h says
/// why), and restrict, so that GCC if-converts and vectorizes the loop (with a possible alias of
/// y and bias it kept it scalar: "control flow in loop").
template <typename Act>
__attribute__((flatten)) void biasActivationRow(float *__restrict y, const float *__restrict bias, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = Act::f(y[j] + bias[j]);
}

/// y[j] += r[j] for j < n: a loop of its own, since in one expression with the activation the
/// compiler could contract the activation's last product and this sum into an FMA, which the
/// unfused kernels never do.
void residualRow(float *__restrict y, const float *__restrict r, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = y[j] + r[j];
}

/// y[i, j] = Act(y[i, j] + bias[j]) [+ r[i, j]] over rows [begin, end) of width n.
template <typename Act>
void linearEpilogue(float *y, const float *bias, const float *r, int64_t n, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    biasActivationRow<Act>(y + i * n, bias, n);
    if (r) residualRow(y + i * n, r + i * n, n);
  }
}

struct Identity {
  static float f(float x) { return x; }
};

template <typename Act>
void runLinearEpilogue(float *y, const float *bias, const float *r, int64_t m, int64_t n) {
  parallelFor(m, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    linearEpilogue<Act>(y, bias, r, n, b, e);
  });
}

llvm::Error runLinear(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &W = c.inputs[1], &Y = c.outputs[0];
  const int64_t K = W.shape[0], N = W.shape[1], M = numElements(llvm::ArrayRef<int64_t>(X.shape).drop_back());
  if (M == 0 || N == 0) return llvm::Error::success();
  float *y = Y.as<float>();
  cpu::sgemm(false, false, M, N, K, 1.0f, X.as<const float>(), K, W.as<const float>(), N, 0.0f, y, N);
  const float *bias = c.inputs[2].as<const float>();
  const float *r = c.inputs.size() == 4 ? c.inputs[3].as<const float>() : nullptr;
  const std::string act = c.attrString("activation", "none");
  if (act == "relu") runLinearEpilogue<Relu>(y, bias, r, M, N);
  else if (act == "gelu") runLinearEpilogue<GeluErf>(y, bias, r, M, N);
  else if (act == "gelu_tanh") runLinearEpilogue<GeluTanh>(y, bias, r, M, N);
  else runLinearEpilogue<Identity>(y, bias, r, M, N);
  return llvm::Error::success();
}

}  // namespace

void registerMatmulKernels(KernelRegistry &r) {
  KernelDesc lin;
  lin.op = "linear";
  lin.dtype = DType::F32;
  lin.minInputs = 3;
  lin.maxInputs = 4;
  lin.attrs = {{"activation", AttrKind::String}};
  lin.verify = verifyLinear;
  lin.run = runLinear;
  r.add(lin);

  // Keyed by the result: f32 (f32 or bf16 operands) and bf16 (bf16 operands).
  for (DType out : {DType::F32, DType::BF16, DType::F16}) {
    KernelDesc mm;
    mm.op = "matmul";
    mm.dtype = out;
    mm.minInputs = mm.maxInputs = 2;
    mm.attrs = {{"batch_invariant", AttrKind::Int}};
    mm.verify = verifyMatmul;
    mm.workspace = contractionWorkspace;
    mm.prepare = prepareMatmul;
    mm.run = runMatmul;
    r.add(mm);
    KernelDesc g;
    g.op = "gemm";
    g.dtype = out;
    g.minInputs = 2;
    g.maxInputs = 3;
    g.attrs = {{"trans_a", AttrKind::Int}, {"trans_b", AttrKind::Int}, {"alpha", AttrKind::Float},
               {"beta", AttrKind::Float}, {"batch_invariant", AttrKind::Int}};
    g.verify = verifyGemm;
    g.workspace = gemmWorkspace;
#if defined(COLOSSAL_GEMM_ONEDNN)
    g.prepare = prepareGemm;
#endif
    g.run = runGemm;
    r.add(g);
  }
}

}  // namespace colossal::runtime::cpu

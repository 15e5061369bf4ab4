//===- cross_entropy.cpp - Softmax cross-entropy loss and its gradient (f32) -----------------===//
//
// The training loss (docs/plan.md "Training instructions"; torch.nn.functional.cross_entropy with
// reduction "mean" and ignore_index, no class weights, no label smoothing):
//
//   cross_entropy       logits [N, C] f32, labels [N] i64          -> loss [] f32
//       loss = (1/count) Σ_{n: label[n] ≠ ignore} (logsumexp(logits[n]) − logits[n, label[n]])
//       count = rows not ignored; 0/0 = NaN when every row is ignored (as PyTorch)
//   cross_entropy_grad  logits [N, C], labels [N] i64, dloss [] f32 -> dlogits [N, C] f32
//       dlogits[n] = (softmax(logits[n]) − onehot(label[n])) · dloss / count; zero rows for ignored
//       labels (all zeros when every row is ignored, as PyTorch's backward)
//
// logsumexp is max-subtracted (m + log Σ exp(x − m)) with the exponentials summed in double, so
// large logits neither overflow nor lose the small terms. A label outside [0, C) that is not
// ignore_index (attr, default -100) is an error naming the row (the executor prefixes the
// instruction). The loss adds per-block partial sums in block order (BlockedSum.h): the same value
// for every thread count. The gradient is in-place safe for `logits` (each row is read in full
// before it is written). Rows are split over OpenMP threads; the inner loops use the vectorizable
// fastExp (FastMath.h).
//
//===----------------------------------------------------------------------------------------===//
#include "BlockedSum.h"
#include "CpuCommon.h"
#include "FastMath.h"

#include <cmath>
#include <limits>

namespace colossal::runtime::cpu {
namespace {

/// Elements per block of rows (loss partials) and per thread, at least (gradient).
constexpr int64_t kBlockElems = 1 << 14;

int64_t rowsPerBlock(int64_t C) { return std::max<int64_t>(1, kBlockElems / std::max<int64_t>(C, 1)); }

llvm::Error verifyCommon(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &L = c.inputs[1];
  if (llvm::Error e = verifyDType(X, DType::F32, "logits")) return e;
  if (llvm::Error e = verifyDType(L, DType::I64, "labels")) return e;
  if (X.rank() != 2) return kernelError("logits must be [N, C], got shape " + shapeToString(X.shape));
  if (X.shape[1] < 1) return kernelError("logits have no classes (shape " + shapeToString(X.shape) + ")");
  if (L.shape != Shape{X.shape[0]})
    return kernelError("labels shape " + shapeToString(L.shape) + ", expected [" + llvm::Twine(X.shape[0]) + "]");
  return llvm::Error::success();
}

/// Counts the rows that are not ignored; a non-ignored label outside [0, C) is an error.
llvm::Expected<int64_t> countLabels(const int64_t *labels, int64_t N, int64_t C, int64_t ignore) {
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    int64_t l = labels[n];
    if (l == ignore) continue;
    if (l < 0 || l >= C)
      return kernelError("label " + llvm::Twine(l) + " at row " + llvm::Twine(n) + " is outside [0, " +
                         llvm::Twine(C) + ") and is not ignore_index " + llvm::Twine(ignore));
    ++count;
  }
  return count;
}

/// Max of a row, and Σ exp(x − max) in double. An all −inf row uses max 0 (sum 0: log gives −inf,
/// and the loss NaN, as PyTorch).
void rowMaxSum(const float *x, int64_t C, float &m, double &s) {
  m = rowMax(x, C, -std::numeric_limits<float>::infinity());
  if (m == -std::numeric_limits<float>::infinity()) m = 0;
  s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < C; ++i) s += static_cast<double>(fastExp(x[i] - m));
}

llvm::Error verifyCrossEntropy(const KernelCall &c) {
  if (llvm::Error e = verifyCommon(c)) return e;
  if (c.outputs[0].dtype != DType::F32 || c.outputs[0].numel() != 1)
    return kernelError("loss must be an f32 scalar, got " + dtypeName(c.outputs[0].dtype) + " " +
                       shapeToString(c.outputs[0].shape));
  return llvm::Error::success();
}

size_t crossEntropyWorkspace(const KernelCall &c, int) {
  const int64_t N = c.inputs[0].shape[0], rpb = rowsPerBlock(c.inputs[0].shape[1]);
  return static_cast<size_t>((N + rpb - 1) / rpb) * sizeof(double);
}

llvm::Error runCrossEntropy(const KernelCall &c) {
  const TensorRef &X = c.inputs[0];
  const int64_t N = X.shape[0], C = X.shape[1], ignore = c.attrInt("ignore_index", -100);
  const float *x = X.as<const float>();
  const int64_t *labels = c.inputs[1].as<const int64_t>();
  llvm::Expected<int64_t> count = countLabels(labels, N, C, ignore);
  if (!count) return count.takeError();
  const int64_t rpb = rowsPerBlock(C), blocks = (N + rpb - 1) / rpb;
  double sum = blockedSum(blocks, 1, static_cast<double *>(c.workspace), [&](int64_t blk) {
    double part = 0;
    for (int64_t n = blk * rpb; n < std::min(N, (blk + 1) * rpb); ++n) {
      if (labels[n] == ignore) continue;
      const float *row = x + n * C;
      float m;
      double s;
      rowMaxSum(row, C, m, s);
      part += (static_cast<double>(m) + std::log(s)) - static_cast<double>(row[labels[n]]);
    }
    return part;
  });
  // 0/0 is NaN when every row is ignored, as torch.nn.functional.cross_entropy.
  *c.outputs[0].as<float>() = static_cast<float>(sum / static_cast<double>(*count));
  return llvm::Error::success();
}

llvm::Error verifyCrossEntropyGrad(const KernelCall &c) {
  if (llvm::Error e = verifyCommon(c)) return e;
  const TensorRef &D = c.inputs[2], &Y = c.outputs[0];
  if (llvm::Error e = verifyDType(D, DType::F32, "dloss")) return e;
  if (D.numel() != 1) return kernelError("dloss must be a scalar, got shape " + shapeToString(D.shape));
  if (llvm::Error e = verifyDType(Y, DType::F32, "dlogits")) return e;
  return verifySameShape(c.inputs[0], Y, "logits and dlogits");
}

llvm::Error runCrossEntropyGrad(const KernelCall &c) {
  const TensorRef &X = c.inputs[0];
  const int64_t N = X.shape[0], C = X.shape[1], ignore = c.attrInt("ignore_index", -100);
  const float *x = X.as<const float>();
  const int64_t *labels = c.inputs[1].as<const int64_t>();
  float *y = c.outputs[0].as<float>();
  llvm::Expected<int64_t> count = countLabels(labels, N, C, ignore);
  if (!count) return count.takeError();
  // dloss / count; unused when count is 0 (every row is then ignored and zeroed).
  const double scale = *count ? static_cast<double>(*c.inputs[2].as<const float>()) / static_cast<double>(*count) : 0;
  parallelFor(N, rowsPerBlock(C), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float *row = x + n * C;
      float *out = y + n * C;
      if (labels[n] == ignore) {
        std::fill(out, out + C, 0.0f);
        continue;
      }
      float m;
      double s;
      rowMaxSum(row, C, m, s);
      const float k = static_cast<float>(scale / s);
      for (int64_t i = 0; i < C; ++i) out[i] = fastExp(row[i] - m) * k;
      out[labels[n]] -= static_cast<float>(scale);
    }
  });
  return llvm::Error::success();
}

}  // namespace

void registerCrossEntropyKernels(KernelRegistry &r) {
  KernelDesc d;
  d.op = "cross_entropy";
  d.minInputs = d.maxInputs = 2;
  d.attrs = {{"ignore_index", AttrKind::Int}};
  d.verify = verifyCrossEntropy;
  d.workspace = crossEntropyWorkspace;
  d.run = runCrossEntropy;
  r.add(d);
  d.op = "cross_entropy_grad";
  d.minInputs = d.maxInputs = 3;
  d.verify = verifyCrossEntropyGrad;
  d.workspace = nullptr;
  d.run = runCrossEntropyGrad;
  r.add(d);
}

}  // namespace colossal::runtime::cpu

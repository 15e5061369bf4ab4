//===- loss.cpp - nll_loss CPU kernel (f32) ---------------------------------------------------===//
//
// input [N, C, d...] log-probabilities, target [N, d...] (i64 or i32), optional weight [C]
// (ONNX NegativeLogLikelihoodLoss): loss[n, d] = −input[n, t, d] · weight[t] with t = target[n, d],
// zero (and weight zero) where t == ignore_index. reduction "none" writes loss [N, d...]; "sum"
// the scalar sum; "mean" the sum over the sum of the weights taken (the count of targets that are
// not ignored without weight; 0/0 gives NaN as in the ONNX reference). Sums in double. A target
// outside [0, C) that is not ignored is an error naming the position.
//
//===----------------------------------------------------------------------------------------===//
#include "NN.h"

namespace colossal::runtime::cpu {
namespace {

llvm::Error verifyNll(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &T = c.inputs[1], &Y = c.outputs[0];
  if (llvm::Error e = verifyDType(X, DType::F32, "input")) return e;
  if (llvm::Error e = verifyDType(Y, DType::F32, "output")) return e;
  if (T.dtype != DType::I64 && T.dtype != DType::I32) return kernelError("target must be i64 or i32");
  if (X.rank() < 2) return kernelError("input must be [N, C, d...]");
  Shape ts{X.shape[0]};
  ts.append(X.shape.begin() + 2, X.shape.end());
  if (T.shape != ts) return kernelError("target shape " + shapeToString(T.shape) + ", expected " + shapeToString(ts));
  if (c.inputs.size() > 2) {
    if (llvm::Error e = verifyDType(c.inputs[2], DType::F32, "weight")) return e;
    if (c.inputs[2].shape != Shape{X.shape[1]}) return kernelError("weight must be [C]");
  }
  std::string red = c.attrString("reduction", "mean");
  if (red != "none" && red != "sum" && red != "mean") return kernelError("unknown reduction '" + red + "'");
  if (red == "none" ? Y.shape != ts : Y.numel() != 1)
    return kernelError("output shape " + shapeToString(Y.shape) + " does not fit reduction '" + red + "'");
  return llvm::Error::success();
}

template <typename TI> llvm::Error nll(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &T = c.inputs[1];
  const int64_t N = X.shape[0], C = X.shape[1], D = X.numel() / std::max<int64_t>(1, N * C);
  const float *x = X.as<const float>();
  const TI *t = T.as<const TI>();
  const float *weight = c.inputs.size() > 2 ? c.inputs[2].as<const float>() : nullptr;
  const bool hasIgnore = c.hasAttr("ignore_index");
  const int64_t ignore = c.attrInt("ignore_index", 0);
  const std::string red = c.attrString("reduction", "mean");
  float *y = c.outputs[0].as<float>();
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      int64_t cls = int64_t(t[n * D + d]);
      double loss = 0, w = 0;
      if (!(hasIgnore && cls == ignore)) {
        if (cls < 0 || cls >= C)
          return kernelError("target " + llvm::Twine(cls) + " at position " + llvm::Twine(n * D + d) +
                             " is outside [0, " + llvm::Twine(C) + ")");
        w = weight ? weight[cls] : 1.0;
        loss = -double(x[(n * C + cls) * D + d]) * w;
      }
      if (red == "none") y[n * D + d] = static_cast<float>(loss);
      sum += loss;
      wsum += w;
    }
  if (red == "sum") y[0] = static_cast<float>(sum);
  if (red == "mean") y[0] = static_cast<float>(sum / wsum);
  return llvm::Error::success();
}

llvm::Error runNll(const KernelCall &c) {
  return c.inputs[1].dtype == DType::I64 ? nll<int64_t>(c) : nll<int32_t>(c);
}

}  // namespace

void registerLossKernels(KernelRegistry &r) {
  KernelDesc d;
  d.op = "nll_loss";
  d.minInputs = 2;
  d.maxInputs = 3;
  d.attrs = {{"reduction", AttrKind::String}, {"ignore_index", AttrKind::Int}};
  d.verify = verifyNll;
  d.run = runNll;
  r.add(d);
}

}  // namespace colossal::runtime::cpu

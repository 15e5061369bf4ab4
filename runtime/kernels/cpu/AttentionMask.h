//===- AttentionMask.h - the optional mask of attention and its VJP ----------------*- C++ -*-===//
//
// attention and attention_grad (attention.cpp, attention_grad.cpp) take one optional mask,
// broadcastable to the scores [B, Hq, Tq, Tk]: additive f32, or bool (true = keep). Both check it
// and apply it to a row of scores the same way, here. Internal to runtime/kernels/cpu.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_ATTENTIONMASK_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_ATTENTIONMASK_H

#include "CpuCommon.h"

#include <limits>

namespace colossal::runtime::cpu {

/// The mask's dtype (f32 or bool) and shape (rank <= 4, broadcasting to `scores`), else an error
/// naming both shapes.
inline llvm::Error verifyAttentionMask(const TensorRef &mask, const Shape &scores) {
  if (mask.dtype != DType::F32 && mask.dtype != DType::Bool)
    return kernelError("mask must be f32 (additive) or bool, got " + dtypeName(mask.dtype));
  Shape bc;
  if (mask.rank() > 4 || !broadcastShapes(mask.shape, scores, bc) || bc != scores)
    return kernelError("mask shape " + shapeToString(mask.shape) + " does not broadcast to " +
                       shapeToString(scores));
  return llvm::Error::success();
}

/// A verified mask (or none) with its element strides over [B, Hq, Tq, Tk] (0 on broadcast dims).
class AttentionMask {
public:
  explicit AttentionMask(const TensorRef *mask) : mask_(mask) {
    if (!mask) return;
    int64_t stride = 1;
    for (int64_t i = mask->rank() - 1, dim = 3; i >= 0; --i, --dim) {
      strides_[dim] = mask->shape[i] == 1 ? 0 : stride;
      stride *= mask->shape[i];
    }
  }
  explicit operator bool() const { return mask_ != nullptr; }

  /// Applies the mask to scores s[0, n) of query qi of head h of batch row b, keys k0 .. k0 + n:
  /// adds an additive mask; a bool mask sets the hidden scores to -inf.
  void apply(float *s, int64_t b, int64_t h, int64_t qi, int64_t k0, int64_t n) const {
    if (!mask_) return;
    const int64_t base = b * strides_[0] + h * strides_[1] + qi * strides_[2] + k0 * strides_[3];
    const int64_t sj = strides_[3];
    if (mask_->dtype == DType::Bool) {
      const uint8_t *mp = mask_->as<const uint8_t>() + base;
      for (int64_t j = 0; j < n; ++j) s[j] = mp[j * sj] ? s[j] : -std::numeric_limits<float>::infinity();
    } else {
      const float *mp = mask_->as<const float>() + base;
      for (int64_t j = 0; j < n; ++j) s[j] += mp[j * sj];
    }
  }

private:
  const TensorRef *mask_;
  int64_t strides_[4] = {0, 0, 0, 0};
};

}  // namespace colossal::runtime::cpu

#endif

//===- NN.h - Shared pieces of the neural-network CPU kernels ------------------*- C++ -*-===//
//
// The convolution, pooling, resize, loss and quantization kernel families (conv.cpp, pool.cpp,
// resize.cpp, loss.cpp, quantize.cpp) and the window geometry that conv and pool share. Internal
// to runtime/kernels/cpu.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_NN_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_NN_H

#include "CpuCommon.h"

namespace colossal::runtime::cpu {

/// A sliding window over 1 to 3 spatial dims, widened to 3 (leading dims of size 1) so one loop
/// nest serves Conv1d/2d/3d and every pool: input [N, C, in...], output [N, Cout, out...].
struct Window3 {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, padBegin[3] = {0, 0, 0}, padEnd[3] = {0, 0, 0};
  int64_t inSize() const { return in[0] * in[1] * in[2]; }
  int64_t outSize() const { return out[0] * out[1] * out[2]; }
  int64_t kSize() const { return k[0] * k[1] * k[2]; }
};

/// Reads `strides`, `pads`, `dilations` (and `kernel_shape` when `kernel` is empty) for input X
/// and output Y and checks Y's spatial dims against
/// O = round((D + pb + pe − dil·(K − 1) − 1) / stride) + 1 (round = floor, or ceil with `ceilMode`,
/// dropping a last window that starts past the input and its begin padding).
llvm::Error readWindow(const KernelCall &c, const TensorRef &X, const TensorRef &Y,
                       llvm::ArrayRef<int64_t> kernel, bool ceilMode, Window3 &w);

void registerConvKernels(KernelRegistry &r);
void registerPoolKernels(KernelRegistry &r);
void registerResizeKernels(KernelRegistry &r);
void registerLossKernels(KernelRegistry &r);
void registerQuantizeKernels(KernelRegistry &r);

}  // namespace colossal::runtime::cpu

#endif

//===- nn.cpp - Registration of the neural-network CPU kernel families ---------------------===//
#include "NN.h"

namespace colossal::runtime::cpu {

void registerNNKernels(KernelRegistry &r) {
  registerConvKernels(r);
  registerPoolKernels(r);
  registerResizeKernels(r);
  registerLossKernels(r);
  registerQuantizeKernels(r);
}

}  // namespace colossal::runtime::cpu

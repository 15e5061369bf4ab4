//===- ConvOneDnn.h - 2-D f32 convolution through oneDNN primitives -------------*- C++ -*-===//
//
// The conv kernel (conv.cpp) hands every 1-D/2-D convolution that is not a plain 1×1 GEMM to a
// oneDNN convolution primitive (oneDNN's "brgconv"/"brdgmm_dw" AVX-512 kernels). Activations stay
// in the plan's plain NCHW layout: the primitive computes in the layout it prefers (channels-last
// on this CPU), with one reorder of x before and one of y after it, and weights reordered into its
// layout once, at prepare, when they are plan weights. Bias and the fused activation run inside
// the primitive (bias and post-ops). Internal to runtime/kernels/cpu; only built with oneDNN
// (COLOSSAL_GEMM_BACKEND=onednn), otherwise the kernel keeps its im2col + GEMM path. The same for
// the backward-weights convolution of conv_grad_weight.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_CONVONEDNN_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_CONVONEDNN_H

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace colossal::runtime::cpu {

/// The epilogue a conv applies after its bias (attributes `activation`, `output_scale`,
/// `output_shift`; docs/plan.md): y = act(y) · scale + shift with act one of relu; clip to
/// [alpha, beta]; hard_sigmoid max(0, min(1, alpha·x + beta)); hard_swish x·max(0, min(6, x + 3))/6;
/// sigmoid.
struct ConvActivation {
  enum Kind { None, Relu, Clip, HardSigmoid, HardSwish, Sigmoid } kind = None;
  float alpha = 0, beta = 0;
  float scale = 1, shift = 0;
};

/// One 2-D convolution: x [N, C, H, W] → y [N, M, OH, OW], groups G, weights [M, C/G, KH, KW];
/// or, `transposed`, a transposed convolution (ONNX ConvTranspose) with weights [C, M/G, KH, KW]
/// and pads taken from its output (padBottom/padRight net of output_padding).
struct ConvGeometry2D {
  int64_t N, C, M, G, H, W, OH, OW, KH, KW;
  int64_t strideH, strideW, dilH, dilW, padTop, padLeft, padBottom, padRight;
  bool transposed = false;
};

class OneDnnConv;

/// Builds the primitive (and, when `constantWeights` is non-null, reorders them now). Errors:
/// oneDNN has no implementation for the geometry (the caller falls back to im2col).
llvm::Expected<std::shared_ptr<OneDnnConv>> createOneDnnConv(const ConvGeometry2D &g,
                                                             const ConvActivation &act, bool hasBias,
                                                             const float *constantWeights);
/// Scratch the run needs (reordered x and y, the primitive's scratchpad), in bytes.
size_t oneDnnConvWorkspace(const OneDnnConv &conv);
/// y = act(conv(x, w) + bias); `w` is read (and reordered) only when it was not constant at
/// creation. `workspace` holds oneDnnConvWorkspace() bytes, 64-byte aligned.
llvm::Error runOneDnnConv(OneDnnConv &conv, const float *x, const float *w, const float *bias, float *y,
                          void *workspace);
/// oneDNN's name of the implementation it chose ("brgconv:avx512_core", ...), for tests and docs.
const char *oneDnnConvImpl(const OneDnnConv &conv);

/// The backward-weights primitive of a (non-transposed) 2-D conv: dw = ∂L/∂w given x and the
/// cotangent dy of y, the `conv_grad_weight` instruction. x, dy and dw are in the plan's plain
/// layouts (nchw, nchw, oihw or goihw) and reordered around the primitive inside the workspace.
class OneDnnConvGradWeight;

/// Builds the primitive. Errors: oneDNN has no implementation (the caller falls back to im2col).
llvm::Expected<std::shared_ptr<OneDnnConvGradWeight>> createOneDnnConvGradWeight(const ConvGeometry2D &g);
/// Scratch the run needs (reordered x, dy and dw, the scratchpad), in bytes.
size_t oneDnnConvGradWeightWorkspace(const OneDnnConvGradWeight &conv);
/// dw = Σ over the batch and output positions of dy ⊗ x's receptive fields (overwritten, not
/// accumulated). `workspace` holds oneDnnConvGradWeightWorkspace() bytes, 64-byte aligned.
llvm::Error runOneDnnConvGradWeight(OneDnnConvGradWeight &conv, const float *x, const float *dy, float *dw,
                                    void *workspace);

}  // namespace colossal::runtime::cpu

#endif

//===- conv.cpp - conv, conv_transpose, conv_integer, matmul_integer CPU kernels --------------===//
//
// conv (f32; or bf16 x and w with an f32 bias and result, colossal-auto-mixed-precision: widened
//   to f32 first, Widen.h): x [N, C, D...], w [M, C/g, K...], [bias [M]] -> y [N, M, O...]
//   (ONNX Conv), then the fused `activation` (relu, clip, hard_sigmoid, hard_swish, sigmoid; colossal-fuse-conv-epilogue).
//   A 1×1 kernel with stride 1 and no padding is one GEMM per image and group,
//   y_g [M/g, ΠO] = w_g [M/g, C/g] · x_g, with bias and activation applied per output row. Every
//   other 1-D/2-D conv runs as a oneDNN primitive built once at prepare (ConvOneDnn.h: weights
//   reordered once, bias and activation as post-ops). 3-D convs, and builds without oneDNN, use
//   im2col: per image and group the receptive fields are gathered into cols [C/g·ΠK, ΠO] (zeros in
//   the padding), then one GEMM y_g = w_g · cols.
// conv_transpose (f32): x [N, C, D...], w [C, M/g, K...] -> y [N, M, O...] (ONNX ConvTranspose):
//   1-D/2-D as a oneDNN deconvolution primitive (as conv); otherwise
//   cols [M/g·ΠK, ΠD] = w_gᵀ · x_g by GEMM, then col2im scatters each column entry to output
//   position i·s + k·d − pad_begin (the adjoint of im2col), parallel over output channels.
// conv_grad_weight (f32): x [N, C, D...], dy [N, M, O...] -> dw [M, C/g, K...], the VJP of conv
//   w.r.t. its weight: per image and group cols = im2col(x_g), then dw_g += dy_g · colsᵀ (one GEMM,
//   accumulated over the batch in order); 1-D/2-D convs but 1×1 as oneDNN's backward-weights
//   primitive (ConvOneDnn.h); other depthwise convs (C/g = 1) as one strided dot product per
//   output channel and tap.
// conv_integer (i32 out): ui8/i8 x and w with zero points (ONNX ConvInteger): the same im2col over
//   x − x_zp into an i32 workspace and an exact i32 GEMM.
// matmul_integer (i32 out): ui8/i8 a [..., M, K], b [..., K, N] with per-tensor, per-row (a) or
//   per-column (b) zero points; exact i32 accumulation (ONNX MatMulInteger).
// Scratch (cols, widened weights) lives in the kernel workspace.
//
//===----------------------------------------------------------------------------------------===//
#include "ConvOneDnn.h"
#include "FastMath.h"
#include "Gemm.h"
#include "NN.h"
#include "Widen.h"

#include <cstring>
#include <omp.h>

namespace colossal::runtime::cpu {

llvm::Error readWindow(const KernelCall &c, const TensorRef &X, const TensorRef &Y,
                       llvm::ArrayRef<int64_t> kernel, bool ceilMode, Window3 &w) {
  int64_t n = X.rank() - 2;
  if (n < 1 || n > 3)
    return kernelError("input must be [N, C, D1..Dn] with 1 to 3 spatial dims, got " + shapeToString(X.shape));
  if (Y.rank() != X.rank()) return kernelError("output rank differs from the input's");
  llvm::SmallVector<int64_t, 6> k(kernel.begin(), kernel.end());
  if (k.empty()) k = c.attrInts("kernel_shape");
  auto strides = c.attrInts("strides"), pads = c.attrInts("pads"), dil = c.attrInts("dilations");
  if (int64_t(k.size()) != n || int64_t(strides.size()) != n || int64_t(dil.size()) != n ||
      int64_t(pads.size()) != 2 * n)
    return kernelError("kernel, strides and dilations need " + llvm::Twine(n) + " entries and pads " +
                       llvm::Twine(2 * n));
  int64_t off = 3 - n;
  for (int64_t i = 0; i < n; ++i) {
    if (k[i] < 1 || strides[i] < 1 || dil[i] < 1 || pads[i] < 0 || pads[n + i] < 0)
      return kernelError("kernel sizes, strides and dilations must be positive and pads non-negative");
    w.in[off + i] = X.shape[2 + i];
    w.k[off + i] = k[i];
    w.stride[off + i] = strides[i];
    w.dil[off + i] = dil[i];
    w.padBegin[off + i] = pads[i];
    w.padEnd[off + i] = pads[n + i];
    int64_t span = X.shape[2 + i] + pads[i] + pads[n + i] - dil[i] * (k[i] - 1) - 1;
    int64_t o = span < 0 ? 0 : (ceilMode ? (span + strides[i] - 1) / strides[i] : span / strides[i]) + 1;
    if (ceilMode && o > 0 && (o - 1) * strides[i] >= X.shape[2 + i] + pads[i]) --o;
    if (Y.shape[2 + i] != o)
      return kernelError("output spatial dim " + llvm::Twine(i) + " is " + llvm::Twine(Y.shape[2 + i]) +
                         ", the window gives " + llvm::Twine(o));
    w.out[off + i] = o;
  }
  return llvm::Error::success();
}

namespace {

/// cols[(c·ΠK + k), o] = x[c, o·s − pb + k·d] (zero outside), for `channels` channels of one image.
template <typename T, typename Src>
void im2col(const Src *x, int64_t channels, const Window3 &w, Src zeroPoint, T *cols) {
  const int64_t K = w.kSize(), O = w.outSize(), S = w.inSize();
  parallelFor(channels * K, std::max<int64_t>(1, 4096 / std::max<int64_t>(O, 1)), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t ch = row / K, kk = row % K;
      int64_t k0 = kk / (w.k[1] * w.k[2]), k1 = (kk / w.k[2]) % w.k[1], k2 = kk % w.k[2];
      const Src *xc = x + ch * S;
      T *dst = cols + row * O;
      for (int64_t o0 = 0; o0 < w.out[0]; ++o0) {
        int64_t i0 = o0 * w.stride[0] - w.padBegin[0] + k0 * w.dil[0];
        for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
          int64_t i1 = o1 * w.stride[1] - w.padBegin[1] + k1 * w.dil[1];
          T *d = dst + (o0 * w.out[1] + o1) * w.out[2];
          if (i0 < 0 || i0 >= w.in[0] || i1 < 0 || i1 >= w.in[1]) {
            for (int64_t o2 = 0; o2 < w.out[2]; ++o2) d[o2] = T(0);
            continue;
          }
          const Src *xr = xc + (i0 * w.in[1] + i1) * w.in[2];
          int64_t base = -w.padBegin[2] + k2 * w.dil[2];
          for (int64_t o2 = 0; o2 < w.out[2]; ++o2) {
            int64_t i2 = o2 * w.stride[2] + base;
            d[o2] = (i2 >= 0 && i2 < w.in[2]) ? T(xr[i2]) - T(zeroPoint) : T(0);
          }
        }
      }
    }
  });
}

bool isPointwise(const Window3 &w) {
  for (int i = 0; i < 3; ++i)
    if (w.k[i] != 1 || w.stride[i] != 1 || w.padBegin[i] != 0 || w.padEnd[i] != 0) return false;
  return true;
}

llvm::Error verifyConvCommon(const KernelCall &c, bool integer, Window3 &w) {
  const TensorRef &X = c.inputs[0], &W = c.inputs[1], &Y = c.outputs[0];
  if (integer) {
    for (int i = 0; i < 2; ++i)
      if (c.inputs[i].dtype != DType::U8 && c.inputs[i].dtype != DType::I8)
        return kernelError("conv_integer operands must be u8 or i8");
    if (llvm::Error e = verifyDType(Y, DType::I32, "output")) return e;
    if (c.inputs[2].dtype != X.dtype || c.inputs[3].dtype != W.dtype)
      return kernelError("zero points must have the element types of x and w");
    if (c.inputs[2].numel() != 1) return kernelError("x_zero_point must hold one value");
    if (c.inputs[3].numel() != 1 && c.inputs[3].numel() != W.shape[0])
      return kernelError("w_zero_point must hold 1 or M values");
  } else {
    // f32, or bf16 x and w (colossal-auto-mixed-precision: widened to f32, Widen.h) with an f32
    // bias and result.
    if (X.dtype != DType::F32 && !isHalfFloat(X.dtype))
      return kernelError("x and w must be f32, bf16 or f16, got " + dtypeName(X.dtype));
    if (llvm::Error e = verifyDType(W, X.dtype, "w (x's dtype)")) return e;
    if (c.inputs.size() > 2)
      if (llvm::Error e = verifyDType(c.inputs[2], DType::F32, "bias")) return e;
    if (llvm::Error e = verifyDType(Y, DType::F32, "output")) return e;
  }
  if (W.rank() != X.rank() || X.rank() < 3) return kernelError("x and w must have the same rank >= 3");
  int64_t group = c.attrInt("group", 1), C = X.shape[1], M = W.shape[0];
  if (group < 1 || C % group || M % group || W.shape[1] * group != C)
    return kernelError("weight " + shapeToString(W.shape) + " does not fit " + llvm::Twine(C) +
                       " input channels in " + llvm::Twine(group) + " groups");
  if (Y.shape[0] != X.shape[0] || Y.shape[1] != M) return kernelError("output must be [N, M, ...]");
  if (!integer && c.inputs.size() > 2 && (c.inputs[2].rank() != 1 || c.inputs[2].shape[0] != M))
    return kernelError("bias must be [M]");
  llvm::ArrayRef<int64_t> k = llvm::ArrayRef<int64_t>(W.shape).drop_front(2);
  return readWindow(c, X, Y, k, /*ceilMode=*/false, w);
}

/// The fused activation (attributes `activation`, `activation_alpha`, `activation_beta`).
llvm::Error readActivation(const KernelCall &c, ConvActivation &act) {
  std::string kind = c.attrString("activation", "");
  static const std::pair<const char *, ConvActivation::Kind> kinds[] = {
      {"", ConvActivation::None},           {"relu", ConvActivation::Relu},
      {"clip", ConvActivation::Clip},       {"hard_sigmoid", ConvActivation::HardSigmoid},
      {"hard_swish", ConvActivation::HardSwish}, {"sigmoid", ConvActivation::Sigmoid}};
  for (const auto &[name, k] : kinds)
    if (kind == name) {
      act.kind = k;
      act.alpha = float(c.attrFloat("activation_alpha", 0.0));
      act.beta = float(c.attrFloat("activation_beta", 0.0));
      act.scale = float(c.attrFloat("output_scale", 1.0));
      act.shift = float(c.attrFloat("output_shift", 0.0));
      if (k == ConvActivation::Clip && !(act.alpha <= act.beta))
        return kernelError("clip activation needs activation_alpha <= activation_beta");
      return llvm::Error::success();
    }
  return kernelError("unknown activation '" + kind +
                     "' (relu, clip, hard_sigmoid, hard_swish or sigmoid)");
}

/// act(v) for one value (the activation's formula, ConvOneDnn.h).
inline float activate(float v, const ConvActivation &a) {
  switch (a.kind) {
  case ConvActivation::None: return v;
  case ConvActivation::Relu: return std::max(v, 0.0f);
  case ConvActivation::Clip: return std::min(std::max(v, a.alpha), a.beta);
  case ConvActivation::HardSigmoid: return std::min(std::max(a.alpha * v + a.beta, 0.0f), 1.0f);
  case ConvActivation::HardSwish: return v * std::min(std::max(v + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
  case ConvActivation::Sigmoid: return fastSigmoid(v);
  }
  return v;
}

template <ConvActivation::Kind K> void epilogueRow(float *row, int64_t n, float bias, ConvActivation a) {
  a.kind = K;
  if (a.scale == 1.0f && a.shift == 0.0f) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) row[i] = activate(row[i] + bias, a);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) row[i] = activate(row[i] + bias, a) * a.scale + a.shift;
  }
}

/// row[i] = act(row[i] + bias) · scale + shift, in place: the epilogue of the GEMM paths, one
/// vectorized loop per activation kind.
void biasActivation(float *row, int64_t n, float bias, const ConvActivation &a) {
  switch (a.kind) {
  case ConvActivation::None: return epilogueRow<ConvActivation::None>(row, n, bias, a);
  case ConvActivation::Relu: return epilogueRow<ConvActivation::Relu>(row, n, bias, a);
  case ConvActivation::Clip: return epilogueRow<ConvActivation::Clip>(row, n, bias, a);
  case ConvActivation::HardSigmoid: return epilogueRow<ConvActivation::HardSigmoid>(row, n, bias, a);
  case ConvActivation::HardSwish: return epilogueRow<ConvActivation::HardSwish>(row, n, bias, a);
  case ConvActivation::Sigmoid: return epilogueRow<ConvActivation::Sigmoid>(row, n, bias, a);
  }
}

/// Convs below this many multiply-adds run on the calling thread alone (primitive built and run
/// with one OpenMP thread): their compute (≲ 50 µs on one core) is of the order of waking the
/// other threads, and on a shared machine a parallel region waits for a descheduled thread for
/// milliseconds (small CNNs at batch 1 measured 1.0–1.5 ms serial vs 1.3–11 ms with 2 threads).
constexpr int64_t kSerialMacs = int64_t(1) << 21;

/// Runs the enclosed parallel regions (ours, oneDNN's, the GEMM's) with one thread when `serial`.
class SerialScope {
public:
  explicit SerialScope(bool serial) : prev_(serial ? omp_get_max_threads() : 0) {
    if (serial) omp_set_num_threads(1);
  }
  ~SerialScope() {
    if (prev_) omp_set_num_threads(prev_);
  }

private:
  int prev_;
};

/// What prepare builds once per conv instruction.
struct ConvState {
  Window3 w;
  ConvActivation act;
  bool pointwise = false;
  bool serial = false;  // fewer than kSerialMacs multiply-adds
  std::shared_ptr<OneDnnConv> onednn;  // null: the im2col (or 1×1) GEMM path
  AlignedBuffer weightsF32;  // bf16 plan weights widened once at prepare (else empty)
};

/// The conv's weights as f32: the tensor itself, the copy prepare widened, or a copy widened
/// into the workspace at `ws`.
const float *convWeights(const ConvState &st, const TensorRef &W, char *&ws) {
  if (st.weightsF32.data()) return static_cast<const float *>(st.weightsF32.data());
  return widenedInput(W, ws);
}

/// Workspace bytes for the widened copies of bf16 x and w (0 for f32).
size_t widenedConvBytes(const ConvState *st, const KernelCall &c) {
  return f32CopyBytes(c.inputs[0]) + (st && st->weightsF32.data() ? 0 : f32CopyBytes(c.inputs[1]));
}

llvm::Error verifyConv(const KernelCall &c) {
  Window3 w;
  if (llvm::Error e = verifyConvCommon(c, false, w)) return e;
  ConvActivation act;
  return readActivation(c, act);
}

llvm::Error prepareConv(KernelCall &c) {
  auto st = std::make_shared<ConvState>();
  if (llvm::Error e = verifyConvCommon(c, false, st->w)) return e;
  if (llvm::Error e = readActivation(c, st->act)) return e;
  st->pointwise = isPointwise(st->w);
  st->serial = c.outputs[0].numel() * (c.inputs[1].numel() / c.inputs[1].shape[0]) < kSerialMacs;
  SerialScope scope(st->serial);
  const TensorRef &X = c.inputs[0], &W = c.inputs[1];
  // bf16 plan weights (an inference plan's folded casts) are widened once, here.
  if (isHalfFloat(W.dtype) && c.isConstantInput(1)) {
    st->weightsF32 = AlignedBuffer(W.numel() * sizeof(float));
    if (W.dtype == DType::F16) halfToFloatN(W.as<const uint16_t>(), static_cast<float *>(st->weightsF32.data()), W.numel());
    else bfloat16ToFloatN(W.as<const uint16_t>(), static_cast<float *>(st->weightsF32.data()), W.numel());
  }
#if defined(COLOSSAL_GEMM_ONEDNN)
  // Every 1-D/2-D conv but a plain 1×1 goes to oneDNN (docs/kernels.md "Convolution"); a 1×1
  // stride-1 conv is one GEMM per image in NCHW already, with no reorder to pay.
  const Window3 &w = st->w;
  if (!st->pointwise && w.in[0] == 1 && w.k[0] == 1 && X.numel() > 0) {
    ConvGeometry2D g{X.shape[0], X.shape[1], W.shape[0], c.attrInt("group", 1), w.in[1], w.in[2],
                     w.out[1], w.out[2], w.k[1], w.k[2], w.stride[1], w.stride[2], w.dil[1], w.dil[2],
                     w.padBegin[1], w.padBegin[2], w.padEnd[1], w.padEnd[2]};
    char *none = nullptr;
    const float *constW = c.isConstantInput(1) ? convWeights(*st, W, none) : nullptr;
    auto conv = createOneDnnConv(g, st->act, c.inputs.size() > 2, constW);
    if (conv) st->onednn = std::move(*conv);
    else llvm::consumeError(conv.takeError());  // no oneDNN implementation: im2col below
  }
#endif
  c.state = std::move(st);
  return llvm::Error::success();
}

size_t convWorkspace(const KernelCall &c, int) {
  const auto *st = static_cast<const ConvState *>(c.state.get());
  const size_t widened = widenedConvBytes(st, c);
  if (!st || st->pointwise) return widened;
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (st->onednn) return widened + oneDnnConvWorkspace(*st->onednn);
#endif
  int64_t Cg = c.inputs[0].shape[1] / c.attrInt("group", 1);
  return widened + size_t(Cg * st->w.kSize() * st->w.outSize()) * sizeof(float);
}

llvm::Error runConv(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &W = c.inputs[1], &Y = c.outputs[0];
  const auto &st = *static_cast<const ConvState *>(c.state.get());
  const Window3 &w = st.w;
  char *ws = static_cast<char *>(c.workspace);
  const float *x = widenedInput(X, ws), *wt = convWeights(st, W, ws);
  const float *bias = c.inputs.size() > 2 ? c.inputs[2].as<const float>() : nullptr;
  float *y = Y.as<float>(), *cols = reinterpret_cast<float *>(ws);
  SerialScope scope(st.serial);
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (st.onednn) return runOneDnnConv(*st.onednn, x, wt, bias, y, ws);
#endif
  const int64_t N = X.shape[0], C = X.shape[1], M = W.shape[0], G = c.attrInt("group", 1);
  const int64_t Cg = C / G, Mg = M / G, K = w.kSize(), O = w.outSize(), S = w.inSize();
  const int64_t rows = Cg * K;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const float *xg = x + (n * C + g * Cg) * S;
      const float *src = xg;
      if (!st.pointwise) {
        im2col<float, float>(xg, Cg, w, 0.0f, cols);
        src = cols;
      }
      float *yg = y + (n * M + g * Mg) * O;
      sgemm(false, false, Mg, O, rows, 1.0f, wt + g * Mg * rows, rows, src, O, 0.0f, yg, O);
      if (bias || st.act.kind != ConvActivation::None || st.act.scale != 1.0f || st.act.shift != 0.0f)
        parallelFor(Mg, std::max<int64_t>(1, 16384 / std::max<int64_t>(O, 1)), [&](int64_t b, int64_t e) {
          for (int64_t m = b; m < e; ++m) biasActivation(yg + m * O, O, bias ? bias[g * Mg + m] : 0.0f, st.act);
        });
    }
  return llvm::Error::success();
}

//===------------------------------------------------------------------------------------===//
// conv_transpose
//===------------------------------------------------------------------------------------===//

/// Geometry of a transposed conv: `w` describes the forward conv from y to x, i.e. w.in = y's
/// spatial dims and w.out = x's.
llvm::Error verifyConvTransposeGeom(const KernelCall &c, Window3 &w) {
  const TensorRef &X = c.inputs[0], &W = c.inputs[1], &Y = c.outputs[0];
  for (const TensorRef &t : c.inputs)
    if (llvm::Error e = verifyDType(t, DType::F32, "operand")) return e;
  if (llvm::Error e = verifyDType(Y, DType::F32, "output")) return e;
  int64_t n = X.rank() - 2;
  if (W.rank() != X.rank() || n < 1 || n > 3 || Y.rank() != X.rank())
    return kernelError("x, w and y must be [N, C, D1..Dn] with 1 to 3 spatial dims");
  int64_t group = c.attrInt("group", 1), C = X.shape[1];
  if (group < 1 || C % group || W.shape[0] != C)
    return kernelError("weight " + shapeToString(W.shape) + " does not fit " + llvm::Twine(C) +
                       " input channels in " + llvm::Twine(group) + " groups");
  int64_t M = W.shape[1] * group;
  if (Y.shape[0] != X.shape[0] || Y.shape[1] != M) return kernelError("output must be [N, M, ...]");
  if (c.inputs.size() > 2 && (c.inputs[2].rank() != 1 || c.inputs[2].shape[0] != M))
    return kernelError("bias must be [M]");
  auto strides = c.attrInts("strides"), pads = c.attrInts("pads"), dil = c.attrInts("dilations"),
       outPad = c.attrInts("output_padding");
  if (int64_t(strides.size()) != n || int64_t(dil.size()) != n || int64_t(pads.size()) != 2 * n ||
      int64_t(outPad.size()) != n)
    return kernelError("strides, dilations and output_padding need " + llvm::Twine(n) +
                       " entries and pads " + llvm::Twine(2 * n));
  int64_t off = 3 - n;
  for (int64_t i = 0; i < n; ++i) {
    if (strides[i] < 1 || dil[i] < 1 || pads[i] < 0 || pads[n + i] < 0 || outPad[i] < 0)
      return kernelError("strides and dilations must be positive, pads and output_padding non-negative");
    int64_t o = strides[i] * (X.shape[2 + i] - 1) + outPad[i] + dil[i] * (W.shape[2 + i] - 1) + 1 -
                pads[i] - pads[n + i];
    if (Y.shape[2 + i] != o)
      return kernelError("output spatial dim " + llvm::Twine(i) + " is " + llvm::Twine(Y.shape[2 + i]) +
                         ", expected " + llvm::Twine(o));
    w.in[off + i] = Y.shape[2 + i];
    w.out[off + i] = X.shape[2 + i];
    w.k[off + i] = W.shape[2 + i];
    w.stride[off + i] = strides[i];
    w.dil[off + i] = dil[i];
    w.padBegin[off + i] = pads[i];
    w.padEnd[off + i] = pads[n + i];
  }
  return llvm::Error::success();
}

llvm::Error verifyConvTranspose(const KernelCall &c) {
  Window3 w;
  if (llvm::Error e = verifyConvTransposeGeom(c, w)) return e;
  ConvActivation act;
  return readActivation(c, act);
}

/// What prepare builds once per conv_transpose instruction.
struct ConvTransposeState {
  Window3 w;
  ConvActivation act;
  std::shared_ptr<OneDnnConv> onednn;  // null: GEMM + col2im
};

llvm::Error prepareConvTranspose(KernelCall &c) {
  auto st = std::make_shared<ConvTransposeState>();
  if (llvm::Error e = verifyConvTransposeGeom(c, st->w)) return e;
  if (llvm::Error e = readActivation(c, st->act)) return e;
#if defined(COLOSSAL_GEMM_ONEDNN)
  // 1-D/2-D as a oneDNN deconvolution primitive; its right/bottom padding is the end pad net of
  // output_padding, which oneDNN cannot take when negative (then GEMM + col2im below).
  const Window3 &w = st->w;
  const TensorRef &X = c.inputs[0], &W = c.inputs[1], &Y = c.outputs[0];
  auto outPad = c.attrInts("output_padding");
  const int64_t n = X.rank() - 2, G = c.attrInt("group", 1);
  const int64_t padB = w.padEnd[1] - (n == 2 ? outPad[0] : 0), padR = w.padEnd[2] - outPad[n - 1];
  if (w.in[0] == 1 && w.k[0] == 1 && padB >= 0 && padR >= 0 && X.numel() > 0) {
    ConvGeometry2D g{X.shape[0], X.shape[1], Y.shape[1], G, w.out[1], w.out[2], w.in[1], w.in[2], w.k[1],
                     w.k[2], w.stride[1], w.stride[2], w.dil[1], w.dil[2], w.padBegin[1], w.padBegin[2],
                     padB, padR, /*transposed=*/true};
    // Bias and epilogue run after the primitive, one pass over y: oneDNN 2.6's deconvolution
    // with a bias measured 4x slower than without (16.6 vs 3.9 ms on DBNet's 24 → 24 head at
    // 160×160 → 320×320), with eltwise post-ops 40x.
    auto conv = createOneDnnConv(g, ConvActivation(), /*hasBias=*/false,
                                 c.isConstantInput(1) ? W.as<const float>() : nullptr);
    if (conv) st->onednn = std::move(*conv);
    else llvm::consumeError(conv.takeError());
  }
#endif
  c.state = std::move(st);
  return llvm::Error::success();
}

size_t convTransposeWorkspace(const KernelCall &c, int) {
  const auto *st = static_cast<const ConvTransposeState *>(c.state.get());
  if (!st) return 0;
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (st->onednn) return oneDnnConvWorkspace(*st->onednn);
#endif
  int64_t Mg = c.inputs[1].shape[1];
  return size_t(Mg * st->w.kSize() * st->w.outSize()) * sizeof(float);
}

llvm::Error runConvTranspose(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &W = c.inputs[1], &Y = c.outputs[0];
  const auto &st = *static_cast<const ConvTransposeState *>(c.state.get());
  const Window3 &w = st.w;
  const int64_t N = X.shape[0], C = X.shape[1], G = c.attrInt("group", 1), Cg = C / G;
  const int64_t Mg = W.shape[1], M = Mg * G, K = w.kSize(), D = w.outSize(), O = w.inSize();
  const float *x = X.as<const float>(), *wt = W.as<const float>();
  const float *bias = c.inputs.size() > 2 ? c.inputs[2].as<const float>() : nullptr;
  const bool epilogue = st.act.kind != ConvActivation::None || st.act.scale != 1.0f || st.act.shift != 0.0f;
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (st.onednn) {
    if (llvm::Error e = runOneDnnConv(*st.onednn, x, wt, nullptr, Y.as<float>(), c.workspace)) return e;
    if (epilogue || bias) {
      float *y = Y.as<float>();
      parallelFor(N * M, std::max<int64_t>(1, 16384 / std::max<int64_t>(O, 1)), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) biasActivation(y + r * O, O, bias ? bias[r % M] : 0.0f, st.act);
      });
    }
    return llvm::Error::success();
  }
#endif
  float *y = Y.as<float>(), *cols = static_cast<float *>(c.workspace);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      // cols [Mg·K, D] = w_gᵀ [Mg·K, Cg] · x_g [Cg, D]
      sgemm(true, false, Mg * K, D, Cg, 1.0f, wt + g * Cg * Mg * K, Mg * K, x + (n * C + g * Cg) * D, D,
            0.0f, cols, D);
      float *yg = y + (n * M + g * Mg) * O;
      parallelFor(Mg, 1, [&](int64_t b, int64_t e) {
        for (int64_t m = b; m < e; ++m) {
          float *ym = yg + m * O;
          float bv = bias ? bias[g * Mg + m] : 0.0f;
          for (int64_t o = 0; o < O; ++o) ym[o] = bv;
          for (int64_t kk = 0; kk < K; ++kk) {
            int64_t k0 = kk / (w.k[1] * w.k[2]), k1 = (kk / w.k[2]) % w.k[1], k2 = kk % w.k[2];
            const float *col = cols + (m * K + kk) * D;
            for (int64_t i0 = 0; i0 < w.out[0]; ++i0) {
              int64_t p0 = i0 * w.stride[0] - w.padBegin[0] + k0 * w.dil[0];
              if (p0 < 0 || p0 >= w.in[0]) continue;
              for (int64_t i1 = 0; i1 < w.out[1]; ++i1) {
                int64_t p1 = i1 * w.stride[1] - w.padBegin[1] + k1 * w.dil[1];
                if (p1 < 0 || p1 >= w.in[1]) continue;
                const float *src = col + (i0 * w.out[1] + i1) * w.out[2];
                float *dst = ym + (p0 * w.in[1] + p1) * w.in[2];
                int64_t base = -w.padBegin[2] + k2 * w.dil[2];
                for (int64_t i2 = 0; i2 < w.out[2]; ++i2) {
                  int64_t p2 = i2 * w.stride[2] + base;
                  if (p2 >= 0 && p2 < w.in[2]) dst[p2] += src[i2];
                }
              }
            }
          }
          if (epilogue) biasActivation(ym, O, 0.0f, st.act);
        }
      });
    }
  return llvm::Error::success();
}

//===------------------------------------------------------------------------------------===//
// conv_grad_weight (the VJP of conv w.r.t. w; of conv_transpose with x and dy exchanged)
//===------------------------------------------------------------------------------------===//

/// x [N, C, D...], dy [N, M, O...], dw [M, C/g, K...], all f32, with dy the conv of x by dw's
/// window.
llvm::Error verifyConvGradWeightGeom(const KernelCall &c, Window3 &w) {
  const TensorRef &X = c.inputs[0], &DY = c.inputs[1], &DW = c.outputs[0];
  for (const TensorRef *t : {&X, &DY, &DW})
    if (llvm::Error e = verifyDType(*t, DType::F32, "x, dy and dw")) return e;
  if (X.rank() < 3 || DY.rank() != X.rank() || DW.rank() != X.rank())
    return kernelError("x, dy and dw must have the same rank >= 3");
  int64_t group = c.attrInt("group", 1), C = X.shape[1], M = DW.shape[0];
  if (group < 1 || C % group || M % group || DW.shape[1] * group != C)
    return kernelError("weight " + shapeToString(DW.shape) + " does not fit " + llvm::Twine(C) +
                       " input channels in " + llvm::Twine(group) + " groups");
  if (DY.shape[0] != X.shape[0] || DY.shape[1] != M) return kernelError("dy must be [N, M, ...]");
  return readWindow(c, X, DY, llvm::ArrayRef<int64_t>(DW.shape).drop_front(2), /*ceilMode=*/false, w);
}

llvm::Error verifyConvGradWeight(const KernelCall &c) {
  Window3 w;
  return verifyConvGradWeightGeom(c, w);
}

/// What prepare builds once per conv_grad_weight instruction.
struct ConvGradWeightState {
  Window3 w;
  bool pointwise = false, depthwise = false;  // C/g = 1
  std::shared_ptr<OneDnnConvGradWeight> onednn;  // null: 3-D, 1×1 or no oneDNN: the loops below
};

llvm::Error prepareConvGradWeight(KernelCall &c) {
  auto st = std::make_shared<ConvGradWeightState>();
  if (llvm::Error e = verifyConvGradWeightGeom(c, st->w)) return e;
  const TensorRef &X = c.inputs[0], &DW = c.outputs[0];
  st->pointwise = isPointwise(st->w);
  st->depthwise = DW.shape[1] == 1;
#if defined(COLOSSAL_GEMM_ONEDNN)
  // Every 1-D/2-D case but 1×1 (a plain GEMM per image) goes to oneDNN's backward-weights
  // primitive, as conv's forward goes to its forward primitive (depthwise included: 3-4x faster
  // than depthwiseGradWeight on a 64-channel 32×32 batch of 32).
  const Window3 &w = st->w;
  if (!st->pointwise && w.in[0] == 1 && w.k[0] == 1 && X.numel() > 0) {
    ConvGeometry2D g{X.shape[0], X.shape[1], DW.shape[0], c.attrInt("group", 1), w.in[1], w.in[2],
                     w.out[1], w.out[2], w.k[1], w.k[2], w.stride[1], w.stride[2], w.dil[1], w.dil[2],
                     w.padBegin[1], w.padBegin[2], w.padEnd[1], w.padEnd[2]};
    auto conv = createOneDnnConvGradWeight(g);
    if (conv) st->onednn = std::move(*conv);
    else llvm::consumeError(conv.takeError());  // no oneDNN implementation: im2col below
  }
#endif
  c.state = std::move(st);
  return llvm::Error::success();
}

size_t convGradWeightWorkspace(const KernelCall &c, int) {
  const auto *st = static_cast<const ConvGradWeightState *>(c.state.get());
  if (!st || st->pointwise) return 0;
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (st->onednn) return oneDnnConvGradWeightWorkspace(*st->onednn);
#endif
  if (st->depthwise) return 0;
  int64_t Cg = c.inputs[0].shape[1] / c.attrInt("group", 1);
  return size_t(Cg * st->w.kSize() * st->w.outSize()) * sizeof(float);
}

/// Depthwise convs (C/g = 1) that oneDNN does not take (3-D, builds without it): dw[m, 0, k] = Σ_n Σ_o dy[n, m, o] · x[n, m / (M/g), o·s − pb + k·d],
/// one output channel per task and a strided dot product per tap and output row, summed in double
/// in a fixed order. The GEMM path would run N·g products of 1 × ΠK each, all overhead.
void depthwiseGradWeight(const float *x, const float *dy, float *dw, int64_t N, int64_t C, int64_t M,
                         const Window3 &w) {
  const int64_t Mg = M / C, K = w.kSize(), O = w.outSize(), S = w.inSize();
  parallelFor(M, 1, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      const int64_t ch = m / Mg;
      for (int64_t kk = 0; kk < K; ++kk) {
        const int64_t k0 = kk / (w.k[1] * w.k[2]), k1 = (kk / w.k[2]) % w.k[1], k2 = kk % w.k[2];
        const int64_t base = k2 * w.dil[2] - w.padBegin[2];
        // output positions o2 whose tap i2 = o2·s + base lies in [0, in)
        const int64_t lo2 = base >= 0 ? 0 : (-base + w.stride[2] - 1) / w.stride[2];
        const int64_t hi2 = std::min<int64_t>(w.out[2], base >= w.in[2] ? 0 : (w.in[2] - base + w.stride[2] - 1) / w.stride[2]);
        double acc = 0;
        for (int64_t n = 0; n < N; ++n) {
          const float *xc = x + (n * C + ch) * S, *dyc = dy + (n * M + m) * O;
          for (int64_t o0 = 0; o0 < w.out[0]; ++o0) {
            const int64_t i0 = o0 * w.stride[0] - w.padBegin[0] + k0 * w.dil[0];
            if (i0 < 0 || i0 >= w.in[0]) continue;
            for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
              const int64_t i1 = o1 * w.stride[1] - w.padBegin[1] + k1 * w.dil[1];
              if (i1 < 0 || i1 >= w.in[1]) continue;
              const float *xr = xc + (i0 * w.in[1] + i1) * w.in[2] + base;
              const float *dyr = dyc + (o0 * w.out[1] + o1) * w.out[2];
              float sum = 0;
#pragma omp simd reduction(+ : sum)
              for (int64_t o2 = lo2; o2 < hi2; ++o2) sum += dyr[o2] * xr[o2 * w.stride[2]];
              acc += sum;
            }
          }
        }
        dw[m * K + kk] = static_cast<float>(acc);
      }
    }
  });
}

/// dw_g [M/g, C/g·ΠK] = Σ_n dy_g [M/g, ΠO] · cols_gᵀ with cols_g = im2col(x_g) [C/g·ΠK, ΠO]:
/// one GEMM per image and group, accumulated over the batch in image order (deterministic).
/// 1-D/2-D convs run as oneDNN's primitive instead, other depthwise convs as depthwiseGradWeight.
llvm::Error runConvGradWeight(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &DY = c.inputs[1], &DW = c.outputs[0];
  const auto &st = *static_cast<const ConvGradWeightState *>(c.state.get());
  const Window3 &w = st.w;
  const int64_t N = X.shape[0], C = X.shape[1], M = DW.shape[0], G = c.attrInt("group", 1);
  const int64_t Cg = C / G, Mg = M / G, K = w.kSize(), O = w.outSize(), S = w.inSize(), rows = Cg * K;
  const float *x = X.as<const float>(), *dy = DY.as<const float>();
  float *dw = DW.as<float>(), *cols = static_cast<float *>(c.workspace);
#if defined(COLOSSAL_GEMM_ONEDNN)
  if (st.onednn) return runOneDnnConvGradWeight(*st.onednn, x, dy, dw, c.workspace);
#endif
  if (st.depthwise) {
    depthwiseGradWeight(x, dy, dw, N, C, M, w);
    return llvm::Error::success();
  }
  const bool pointwise = st.pointwise;
  if (N == 0) std::memset(dw, 0, DW.bytes());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const float *xg = x + (n * C + g * Cg) * S, *src = xg;
      if (!pointwise) {
        im2col<float, float>(xg, Cg, w, 0.0f, cols);
        src = cols;
      }
      sgemm(false, true, Mg, rows, O, 1.0f, dy + (n * M + g * Mg) * O, O, src, O, n == 0 ? 0.0f : 1.0f,
            dw + g * Mg * rows, rows);
    }
  return llvm::Error::success();
}

//===------------------------------------------------------------------------------------===//
// conv_integer, matmul_integer
//===------------------------------------------------------------------------------------===//

int32_t loadInt(const TensorRef &t, int64_t i) {
  return t.dtype == DType::U8 ? int32_t(t.as<const uint8_t>()[i]) : int32_t(t.as<const int8_t>()[i]);
}

llvm::Error verifyConvInteger(const KernelCall &c) {
  Window3 w;
  return verifyConvCommon(c, true, w);
}

size_t convIntegerWorkspace(const KernelCall &c, int) {
  Window3 w;
  if (llvm::Error e = verifyConvCommon(c, true, w)) {
    llvm::consumeError(std::move(e));
    return 0;
  }
  int64_t Cg = c.inputs[0].shape[1] / c.attrInt("group", 1);
  return size_t(Cg * w.kSize() * w.outSize() + c.inputs[1].numel()) * sizeof(int32_t);
}

/// y [M, N] = a [M, K] · b [K, N] in i32, parallel over rows, vectorized over N.
void igemm(int64_t M, int64_t N, int64_t K, const int32_t *a, const int32_t *b, int32_t *y) {
  parallelFor(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N * K, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; ++m) {
      int32_t *row = y + m * N;
      for (int64_t j = 0; j < N; ++j) row[j] = 0;
      for (int64_t k = 0; k < K; ++k) {
        int32_t av = a[m * K + k];
        if (av == 0) continue;
        const int32_t *br = b + k * N;
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) row[j] += av * br[j];
      }
    }
  });
}

template <typename Src> void im2colInt(const TensorRef &X, int64_t offset, int64_t channels, const Window3 &w,
                                       int32_t zp, int32_t *cols) {
  im2col<int32_t, Src>(X.as<const Src>() + offset, channels, w, static_cast<Src>(zp), cols);
}

llvm::Error runConvInteger(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &W = c.inputs[1], &Y = c.outputs[0];
  Window3 w;
  if (llvm::Error e = verifyConvCommon(c, true, w)) return e;
  const int64_t N = X.shape[0], C = X.shape[1], M = W.shape[0], G = c.attrInt("group", 1);
  const int64_t Cg = C / G, Mg = M / G, K = w.kSize(), O = w.outSize(), S = w.inSize(), rows = Cg * K;
  int32_t *cols = static_cast<int32_t *>(c.workspace), *wi = cols + rows * O;
  const int32_t xzp = loadInt(c.inputs[2], 0);
  const TensorRef &WZ = c.inputs[3];
  for (int64_t m = 0; m < M; ++m) {
    int32_t zp = loadInt(WZ, WZ.numel() == 1 ? 0 : m);
    for (int64_t r = 0; r < rows; ++r) wi[m * rows + r] = loadInt(W, m * rows + r) - zp;
  }
  int32_t *y = Y.as<int32_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      int64_t offset = (n * C + g * Cg) * S;
      if (X.dtype == DType::U8) im2colInt<uint8_t>(X, offset, Cg, w, xzp, cols);
      else im2colInt<int8_t>(X, offset, Cg, w, xzp, cols);
      igemm(Mg, O, rows, wi + g * Mg * rows, cols, y + (n * M + g * Mg) * O);
    }
  return llvm::Error::success();
}

llvm::Error verifyMatmulInteger(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &AZ = c.inputs[2], &BZ = c.inputs[3], &Y = c.outputs[0];
  for (const TensorRef *t : {&A, &B})
    if (t->dtype != DType::U8 && t->dtype != DType::I8) return kernelError("operands must be u8 or i8");
  if (AZ.dtype != A.dtype || BZ.dtype != B.dtype)
    return kernelError("zero points must have the element types of a and b");
  if (llvm::Error e = verifyDType(Y, DType::I32, "output")) return e;
  if (A.rank() < 2 || B.rank() < 2) return kernelError("operands must have rank >= 2");
  int64_t M = A.shape[A.rank() - 2], K = A.shape.back(), N = B.shape.back();
  if (B.shape[B.rank() - 2] != K) return kernelError("contracting dims differ");
  if (AZ.numel() != 1 && AZ.numel() != M) return kernelError("a_zero_point must hold 1 or M values");
  if (BZ.numel() != 1 && BZ.numel() != N) return kernelError("b_zero_point must hold 1 or N values");
  Shape batch;
  if (!broadcastShapes(llvm::ArrayRef<int64_t>(A.shape).drop_back(2), llvm::ArrayRef<int64_t>(B.shape).drop_back(2), batch))
    return kernelError("batch dims do not broadcast");
  batch.push_back(M);
  batch.push_back(N);
  if (batch != Y.shape) return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(batch));
  return llvm::Error::success();
}

size_t matmulIntegerWorkspace(const KernelCall &c, int) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1];
  if (A.rank() < 2 || B.rank() < 2) return 0;
  int64_t M = A.shape[A.rank() - 2], K = A.shape.back(), N = B.shape.back();
  return size_t(M * K + K * N) * sizeof(int32_t);
}

llvm::Error runMatmulInteger(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &AZ = c.inputs[2], &BZ = c.inputs[3], &Y = c.outputs[0];
  int64_t M = A.shape[A.rank() - 2], K = A.shape.back(), N = B.shape.back();
  llvm::ArrayRef<int64_t> ys = llvm::ArrayRef<int64_t>(Y.shape).drop_back(2);
  Shape aBatch(A.shape.begin(), A.shape.end() - 2), bBatch(B.shape.begin(), B.shape.end() - 2);
  std::vector<int64_t> aStr(ys.size(), 0), bStr(ys.size(), 0);
  // Batch strides (in matrices) of a and b against the broadcast batch shape.
  for (int64_t d = int64_t(ys.size()) - 1, sa = 1, sb = 1; d >= 0; --d) {
    int64_t ia = d - (int64_t(ys.size()) - int64_t(aBatch.size())), ib = d - (int64_t(ys.size()) - int64_t(bBatch.size()));
    if (ia >= 0) { aStr[d] = aBatch[ia] == 1 ? 0 : sa; sa *= aBatch[ia]; }
    if (ib >= 0) { bStr[d] = bBatch[ib] == 1 ? 0 : sb; sb *= bBatch[ib]; }
  }
  int32_t *ai = static_cast<int32_t *>(c.workspace), *bi = ai + M * K;
  int64_t batches = numElements(ys);
  for (int64_t bidx = 0; bidx < batches; ++bidx) {
    int64_t ao = 0, bo = 0;
    for (int64_t d = int64_t(ys.size()) - 1, r = bidx; d >= 0; --d) {
      int64_t i = r % ys[d];
      r /= ys[d];
      ao += i * aStr[d];
      bo += i * bStr[d];
    }
    for (int64_t m = 0; m < M; ++m) {
      int32_t zp = loadInt(AZ, AZ.numel() == 1 ? 0 : m);
      for (int64_t k = 0; k < K; ++k) ai[m * K + k] = loadInt(A, ao * M * K + m * K + k) - zp;
    }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        bi[k * N + n] = loadInt(B, bo * K * N + k * N + n) - loadInt(BZ, BZ.numel() == 1 ? 0 : n);
    igemm(M, N, K, ai, bi, Y.as<int32_t>() + bidx * M * N);
  }
  return llvm::Error::success();
}

}  // namespace

void registerConvKernels(KernelRegistry &r) {
  KernelDesc conv;
  conv.op = "conv";
  conv.minInputs = 2;
  conv.maxInputs = 3;
  conv.attrs = {{"strides", AttrKind::Ints}, {"pads", AttrKind::Ints}, {"dilations", AttrKind::Ints},
                {"group", AttrKind::Int}};
  KernelDesc plain = conv;
  conv.attrs.push_back({"activation", AttrKind::String});
  conv.attrs.push_back({"activation_alpha", AttrKind::Float});
  conv.attrs.push_back({"activation_beta", AttrKind::Float});
  conv.attrs.push_back({"output_scale", AttrKind::Float});
  conv.attrs.push_back({"output_shift", AttrKind::Float});
  conv.verify = verifyConv;
  conv.prepare = prepareConv;
  conv.workspace = convWorkspace;
  conv.run = runConv;
  r.add(conv);

  KernelDesc ct = conv;
  ct.op = "conv_transpose";
  ct.attrs.push_back({"output_padding", AttrKind::Ints});
  ct.verify = verifyConvTranspose;
  ct.prepare = prepareConvTranspose;
  ct.workspace = convTransposeWorkspace;
  ct.run = runConvTranspose;
  r.add(ct);

  KernelDesc gw = plain;
  gw.op = "conv_grad_weight";
  gw.minInputs = gw.maxInputs = 2;
  gw.verify = verifyConvGradWeight;
  gw.prepare = prepareConvGradWeight;
  gw.workspace = convGradWeightWorkspace;
  gw.run = runConvGradWeight;
  r.add(gw);

  KernelDesc ci = plain;
  ci.op = "conv_integer";
  ci.dtype = DType::I32;
  ci.minInputs = ci.maxInputs = 4;
  ci.verify = verifyConvInteger;
  ci.workspace = convIntegerWorkspace;
  ci.run = runConvInteger;
  r.add(ci);

  KernelDesc mi;
  mi.op = "matmul_integer";
  mi.dtype = DType::I32;
  mi.minInputs = mi.maxInputs = 4;
  mi.verify = verifyMatmulInteger;
  mi.workspace = matmulIntegerWorkspace;
  mi.run = runMatmulInteger;
  r.add(mi);
}

}  // namespace colossal::runtime::cpu

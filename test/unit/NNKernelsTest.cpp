//===- NNKernelsTest.cpp - conv, pools, resize, nll_loss, quantization vs naive references ----===//
#include "TestUtil.h"

#include <cmath>
#include <limits>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

/// Spatial geometry for the naive references: n spatial dims, row-major.
struct Geo {
  std::vector<int64_t> k, s, d, pads;  // pads: begins then ends
};

int64_t outSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, bool ceil) {
  int64_t span = in + pb + pe - d * (k - 1) - 1;
  int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
  if (ceil && (o - 1) * s >= in + pb) --o;
  return o;
}

Attrs windowAttrs(const Geo &g) {
  return Attrs().ints("strides", g.s).ints("pads", g.pads).ints("dilations", g.d);
}

//===------------------------------------------------------------------------------------===//
// conv
//===------------------------------------------------------------------------------------===//

/// The fused activation of a conv (attribute `activation`), as the reference applies it.
struct Act {
  std::string kind;  // "" = none
  double alpha = 0, beta = 0;
  double scale = 1, shift = 0;  // output_scale, output_shift (1, 0: absent)
  double apply(double v) const { return activate(v) * scale + shift; }
  double activate(double v) const {
    if (kind == "relu") return std::max(v, 0.0);
    if (kind == "clip") return std::min(std::max(v, alpha), beta);
    if (kind == "hard_sigmoid") return std::min(std::max(alpha * v + beta, 0.0), 1.0);
    if (kind == "hard_swish") return v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    if (kind == "sigmoid") return 1.0 / (1.0 + std::exp(-v));
    return v;
  }
};

/// conv against a naive direct loop in double. `constantWeights` marks w as a plan weight, so
/// kernels that transform weights once (oneDNN's reorder) do it at prepare.
void checkConv(std::vector<int64_t> xs, int64_t M, int64_t group, Geo g, bool bias, Act act = {},
               bool constantWeights = false) {
  SCOPED_TRACE("conv x " + shapeToString(xs) + " M " + std::to_string(M) + " group " + std::to_string(group) +
               " activation '" + act.kind + "'" + (constantWeights ? " constant w" : ""));
  std::mt19937 rng(7);
  int64_t n = xs.size() - 2, C = xs[1];
  std::vector<int64_t> ws{M, C / group};
  ws.insert(ws.end(), g.k.begin(), g.k.end());
  std::vector<int64_t> ys{xs[0], M};
  for (int64_t i = 0; i < n; ++i)
    ys.push_back(outSize(xs[2 + i], g.k[i], g.s[i], g.d[i], g.pads[i], g.pads[n + i], false));
  HostTensor x = randomF32(xs, rng), w = randomF32(ws, rng), b = randomF32({M}, rng), y(DType::F32, ys);
  std::vector<HostTensor *> ins{&x, &w};
  if (bias) ins.push_back(&b);
  Attrs attrs = windowAttrs(g).i("group", group);
  if (!act.kind.empty()) attrs.s("activation", act.kind);
  if (act.kind == "clip" || act.kind == "hard_sigmoid") attrs.f("activation_alpha", act.alpha).f("activation_beta", act.beta);
  if (act.scale != 1 || act.shift != 0) attrs.f("output_scale", act.scale).f("output_shift", act.shift);
  ASSERT_NO_ERR(runKernel("conv", ins, {&y}, attrs, constantWeights ? 2 : 0));
  std::vector<float> want(y.numel());
  int64_t Cg = C / group, Mg = M / group;
  std::vector<int64_t> spatialOut(ys.begin() + 2, ys.end()), kshape(g.k);
  for (int64_t e = 0; e < y.numel(); ++e) {
    auto yi = unravel(e, ys);
    int64_t gi = yi[1] / Mg;
    double acc = bias ? b.data<float>()[yi[1]] : 0.0;
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t kk = 0; kk < numElements(kshape); ++kk) {
        auto ki = unravel(kk, kshape);
        std::vector<int64_t> xi{yi[0], gi * Cg + c};
        bool inside = true;
        for (int64_t i = 0; i < n; ++i) {
          int64_t p = yi[2 + i] * g.s[i] - g.pads[i] + ki[i] * g.d[i];
          inside &= p >= 0 && p < xs[2 + i];
          xi.push_back(p);
        }
        if (!inside) continue;
        std::vector<int64_t> wi{yi[1], c};
        wi.insert(wi.end(), ki.begin(), ki.end());
        int64_t xo = 0, wo = 0;
        for (size_t d = 0; d < xs.size(); ++d) xo = xo * xs[d] + xi[d];
        for (size_t d = 0; d < ws.size(); ++d) wo = wo * ws[d] + wi[d];
        acc += double(x.data<float>()[xo]) * w.data<float>()[wo];
      }
    want[e] = static_cast<float>(act.apply(acc));
  }
  expectClose(y.data<float>(), want.data(), y.numel(), 1e-4f, 1e-4f);
}

TEST(Conv, MatchesNaive) {
  checkConv({2, 3, 9}, 4, 1, {{3}, {2}, {1}, {1, 2}}, true);                    // 1-D, asymmetric pads
  checkConv({1, 4, 7, 6}, 6, 2, {{3, 2}, {1, 2}, {2, 1}, {1, 0, 2, 1}}, true);  // 2-D groups, dilation
  checkConv({1, 2, 5, 5}, 3, 1, {{3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}}, false);
  checkConv({2, 3, 4, 5, 6}, 2, 1, {{2, 3, 2}, {1, 2, 2}, {1, 1, 2}, {1, 0, 1, 0, 1, 1}}, true);  // 3-D
  checkConv({1, 6, 4, 4}, 6, 6, {{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true);  // depthwise
  checkConv({2, 8, 5, 3}, 5, 1, {{1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}}, true);  // pointwise (no im2col)
}

// The shapes MobileNet/PP-OCR style CNNs are made of, through every path of the kernel: the
// depthwise direct loop (strides, dilations, channel multiplier, odd widths), the oneDNN primitive
// (dense k×k, first layers with 3 channels, grouped, strided, dilated, batches) and the 1×1 GEMM.
TEST(Conv, DepthwiseGroupedStridedDilated) {
  checkConv({2, 16, 13, 29}, 16, 16, {{3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, true);   // dw stride 2
  checkConv({1, 24, 12, 40}, 24, 24, {{5, 5}, {2, 1}, {1, 1}, {2, 2, 2, 2}}, true);   // dw 5×5, stride (2, 1)
  checkConv({1, 8, 11, 17}, 8, 8, {{3, 3}, {1, 1}, {2, 3}, {2, 3, 2, 3}}, false);    // dw dilated
  checkConv({1, 4, 9, 9}, 8, 4, {{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true);       // dw multiplier 2
  checkConv({2, 6, 33}, 6, 6, {{5}, {3}, {1}, {2, 1}}, true);                         // 1-D dw
  checkConv({1, 3, 17, 23}, 16, 1, {{3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, false);   // first layer
  checkConv({3, 20, 10, 12}, 12, 1, {{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true);   // dense, batch 3
  checkConv({1, 16, 9, 14}, 32, 4, {{3, 3}, {2, 1}, {2, 2}, {2, 2, 1, 1}}, true);    // grouped, dilated
  checkConv({1, 12, 8, 8}, 12, 1, {{1, 3}, {1, 1}, {1, 1}, {0, 1, 0, 1}}, true);     // 1×3
  checkConv({2, 10, 7, 5}, 6, 2, {{1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}}, true);      // grouped 1×1
  checkConv({1, 10, 7, 9}, 6, 1, {{1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}}, true);      // strided 1×1
}

// Convs above the serial threshold (2^21 multiply-adds) run with every thread: oneDNN dense and
// depthwise, the 1×1 GEMM, with activations.
TEST(Conv, LargeConvsRunThreaded) {
  checkConv({2, 32, 20, 20}, 64, 1, {{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true, {"hard_swish", 0, 0, 1.5, 0.25});
  checkConv({1, 64, 48, 48}, 64, 64, {{5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}}, true, {"relu"}, true);
  checkConv({2, 96, 24, 24}, 96, 1, {{1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}}, true, {"clip", 0.0, 6.0});
}

TEST(Conv, FusedActivationOnEveryPath) {
  const Act acts[] = {{"relu"}, {"clip", 0.0, 6.0}, {"clip", -0.25, 0.5}, {"hard_sigmoid", 0.2, 0.5},
                      {"hard_swish"}, {"sigmoid"}, {"hard_swish", 0, 0, 1.5, -0.25}, {"relu", 0, 0, 0.5, 0.125}};
  for (const Act &a : acts) {
    checkConv({2, 8, 5, 3}, 5, 1, {{1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}}, true, a);          // 1×1 GEMM
    checkConv({1, 6, 9, 10}, 6, 6, {{3, 3}, {2, 1}, {1, 1}, {1, 1, 1, 1}}, true, a);         // depthwise
    checkConv({2, 5, 8, 7}, 7, 1, {{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true, a);          // oneDNN
    checkConv({1, 4, 9, 9}, 4, 1, {{3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, false, a);         // no bias
    checkConv({1, 2, 4, 4, 5}, 3, 1, {{2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0, 1, 1, 1}}, true, a);  // 3-D im2col
  }
}

TEST(Conv, ConstantWeightsTransformedOnce) {
  checkConv({2, 5, 8, 7}, 7, 1, {{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true, {"hard_swish"}, true);
  checkConv({1, 16, 9, 14}, 32, 4, {{3, 3}, {2, 1}, {2, 2}, {2, 2, 1, 1}}, false, {}, true);
  checkConv({1, 6, 9, 10}, 6, 6, {{3, 3}, {2, 1}, {1, 1}, {1, 1, 1, 1}}, true, {"relu"}, true);
}

TEST(Conv, ActivationErrors) {
  HostTensor x(DType::F32, {1, 3, 5, 5}), w(DType::F32, {4, 3, 3, 3}), y(DType::F32, {1, 4, 3, 3});
  Geo g{{3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}};
  EXPECT_NE(errorMessage(verifyKernel("conv", {&x, &w}, {&y}, windowAttrs(g).i("group", 1).s("activation", "gelu")))
                .find("unknown activation 'gelu'"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("conv", {&x, &w}, {&y},
                                      windowAttrs(g).i("group", 1).s("activation", "clip")
                                          .f("activation_alpha", 1).f("activation_beta", 0)))
                .find("activation_alpha <= activation_beta"),
            std::string::npos);
}

TEST(Conv, ShapeErrors) {
  HostTensor x(DType::F32, {1, 3, 5, 5}), w(DType::F32, {4, 2, 3, 3}), y(DType::F32, {1, 4, 3, 3});
  Geo g{{3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}};
  EXPECT_NE(errorMessage(verifyKernel("conv", {&x, &w}, {&y}, windowAttrs(g).i("group", 1))).find("does not fit"),
            std::string::npos);
  HostTensor w3(DType::F32, {4, 3, 3, 3}), bad(DType::F32, {1, 4, 4, 3});
  EXPECT_NE(errorMessage(verifyKernel("conv", {&x, &w3}, {&bad}, windowAttrs(g).i("group", 1))).find("window gives"),
            std::string::npos);
}

void checkConvTranspose(std::vector<int64_t> xs, int64_t Mg, int64_t group, Geo g, std::vector<int64_t> outPad,
                        bool constantWeights = false, Act act = {}) {
  SCOPED_TRACE("conv_transpose x " + shapeToString(xs) + (constantWeights ? " constant w" : "") + " activation '" +
               act.kind + "'");
  std::mt19937 rng(9);
  int64_t n = xs.size() - 2, C = xs[1], Cg = C / group, M = Mg * group;
  std::vector<int64_t> ws{C, Mg};
  ws.insert(ws.end(), g.k.begin(), g.k.end());
  std::vector<int64_t> ys{xs[0], M};
  for (int64_t i = 0; i < n; ++i)
    ys.push_back(g.s[i] * (xs[2 + i] - 1) + outPad[i] + g.d[i] * (g.k[i] - 1) + 1 - g.pads[i] - g.pads[n + i]);
  HostTensor x = randomF32(xs, rng), w = randomF32(ws, rng), b = randomF32({M}, rng), y(DType::F32, ys);
  Attrs attrs = windowAttrs(g).i("group", group).ints("output_padding", outPad);
  if (!act.kind.empty()) attrs.s("activation", act.kind);
  if (act.kind == "clip" || act.kind == "hard_sigmoid") attrs.f("activation_alpha", act.alpha).f("activation_beta", act.beta);
  if (act.scale != 1 || act.shift != 0) attrs.f("output_scale", act.scale).f("output_shift", act.shift);
  ASSERT_NO_ERR(runKernel("conv_transpose", {&x, &w, &b}, {&y}, attrs, constantWeights ? 2 : 0));
  std::vector<double> want(y.numel());
  for (int64_t e = 0; e < y.numel(); ++e) want[e] = b.data<float>()[unravel(e, ys)[1]];
  std::vector<int64_t> kshape(g.k);
  for (int64_t e = 0; e < x.numel(); ++e) {
    auto xi = unravel(e, xs);
    int64_t gi = xi[1] / Cg;
    for (int64_t m = 0; m < Mg; ++m)
      for (int64_t kk = 0; kk < numElements(kshape); ++kk) {
        auto ki = unravel(kk, kshape);
        std::vector<int64_t> yi{xi[0], gi * Mg + m};
        bool inside = true;
        for (int64_t i = 0; i < n; ++i) {
          int64_t p = xi[2 + i] * g.s[i] + ki[i] * g.d[i] - g.pads[i];
          inside &= p >= 0 && p < ys[2 + i];
          yi.push_back(p);
        }
        if (!inside) continue;
        int64_t yo = 0, wo = 0;
        for (size_t d = 0; d < ys.size(); ++d) yo = yo * ys[d] + yi[d];
        std::vector<int64_t> wi{xi[1], m};
        wi.insert(wi.end(), ki.begin(), ki.end());
        for (size_t d = 0; d < ws.size(); ++d) wo = wo * ws[d] + wi[d];
        want[yo] += double(x.data<float>()[e]) * w.data<float>()[wo];
      }
  }
  std::vector<float> wf(want.size());
  for (size_t i = 0; i < want.size(); ++i) wf[i] = float(act.apply(want[i]));
  expectClose(y.data<float>(), wf.data(), y.numel(), 1e-4f, 1e-4f);
}

TEST(ConvTranspose, MatchesNaive) {
  checkConvTranspose({1, 2, 5}, 3, 1, {{3}, {2}, {1}, {0, 0}}, {1});
  checkConvTranspose({2, 4, 3, 4}, 2, 2, {{3, 2}, {3, 2}, {1, 2}, {1, 0, 1, 1}}, {0, 1});
  checkConvTranspose({1, 1, 3, 4, 5}, 2, 1, {{3, 3, 3}, {1, 2, 1}, {1, 1, 2}, {0, 1, 0, 0, 0, 1}}, {0, 0, 0});
  // DBNet's upsampling head (2×2, stride 2) and others through the oneDNN deconvolution primitive;
  // output_padding larger than the end pad keeps the GEMM + col2im path.
  checkConvTranspose({2, 6, 7, 9}, 4, 1, {{2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}}, {0, 0}, true);
  checkConvTranspose({1, 6, 5, 4}, 1, 1, {{2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}}, {0, 0});
  checkConvTranspose({1, 6, 5, 6}, 2, 3, {{3, 3}, {2, 1}, {2, 1}, {1, 1, 2, 0}}, {1, 0}, true);
  checkConvTranspose({1, 4, 6}, 3, 2, {{4}, {3}, {1}, {1, 1}}, {2});
  // The fused epilogue on both paths (oneDNN post-ops; after col2im).
  checkConvTranspose({2, 6, 7, 9}, 4, 1, {{2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}}, {0, 0}, true, {"relu"});
  checkConvTranspose({1, 6, 5, 4}, 1, 1, {{2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}}, {0, 0}, false, {"sigmoid"});
  checkConvTranspose({1, 4, 6}, 3, 2, {{4}, {3}, {1}, {1, 1}}, {2}, false, {"hard_swish", 0, 0, 2.0, 0.5});
  checkConvTranspose({1, 1, 3, 4, 5}, 2, 1, {{3, 3, 3}, {1, 2, 1}, {1, 1, 2}, {0, 1, 0, 0, 0, 1}}, {0, 0, 0}, false,
                     {"clip", 0, 0.25});
}

//===------------------------------------------------------------------------------------===//
// pools
//===------------------------------------------------------------------------------------===//

void checkPool(const std::string &kind, std::vector<int64_t> xs, Geo g, bool ceil, bool includePad) {
  SCOPED_TRACE(kind + " pool x " + shapeToString(xs) + (ceil ? " ceil" : "") + (includePad ? " include_pad" : ""));
  std::mt19937 rng(11);
  int64_t n = xs.size() - 2;
  std::vector<int64_t> ys{xs[0], xs[1]};
  for (int64_t i = 0; i < n; ++i)
    ys.push_back(outSize(xs[2 + i], g.k[i], g.s[i], g.d[i], g.pads[i], g.pads[n + i], ceil));
  HostTensor x = randomF32(xs, rng, -2, 2), y(DType::F32, ys), idx(DType::I64, ys);
  Attrs a = windowAttrs(g).ints("kernel_shape", g.k).i("ceil_mode", ceil);
  if (kind == "indices") {
    ASSERT_NO_ERR(runKernel("max_pool_with_indices", {&x}, {&y, &idx}, a.i("storage_order", 0)));
  } else {
    ASSERT_NO_ERR(runKernel("pool", {&x}, {&y}, a.s("kind", kind).i("count_include_pad", includePad).i("p", 2)));
  }
  std::vector<float> want(y.numel());
  std::vector<int64_t> wantIdx(y.numel());
  for (int64_t e = 0; e < y.numel(); ++e) {
    auto yi = unravel(e, ys);
    double acc = kind == "avg" || kind == "lp" ? 0 : -INFINITY;
    int64_t count = 0, padCount = 0, best = -1;
    for (int64_t kk = 0; kk < numElements(g.k); ++kk) {
      auto ki = unravel(kk, g.k);
      bool inside = true, insidePadded = true;
      int64_t off = yi[0] * xs[1] + yi[1];
      for (int64_t i = 0; i < n; ++i) {
        int64_t p = yi[2 + i] * g.s[i] - g.pads[i] + ki[i] * g.d[i];
        inside &= p >= 0 && p < xs[2 + i];
        insidePadded &= p >= -g.pads[i] && p < xs[2 + i] + g.pads[n + i];
        off = off * xs[2 + i] + p;
      }
      padCount += insidePadded;
      if (!inside) continue;
      double v = x.data<float>()[off];
      ++count;
      if (kind == "avg") acc += v;
      else if (kind == "lp") acc += v * v;
      else if (v > acc) { acc = v; best = off; }
    }
    if (kind == "avg") acc /= includePad ? padCount : count;
    if (kind == "lp") acc = std::sqrt(acc);
    want[e] = static_cast<float>(acc);
    wantIdx[e] = best;
  }
  expectClose(y.data<float>(), want.data(), y.numel(), 1e-5f, 1e-5f);
  if (kind == "indices")
    for (int64_t e = 0; e < y.numel(); ++e) EXPECT_EQ(idx.data<int64_t>()[e], wantIdx[e]) << "at " << e;
}

TEST(Pool, MatchesNaive) {
  for (std::string kind : {"max", "avg", "lp", "indices"}) {
    checkPool(kind, {2, 3, 11}, {{3}, {2}, {1}, {1, 1}}, false, false);
    checkPool(kind, {1, 2, 7, 8}, {{3, 2}, {2, 3}, {1, 1}, {1, 0, 1, 1}}, true, false);
    checkPool(kind, {1, 2, 9, 9}, {{2, 3}, {1, 2}, {2, 2}, {0, 1, 1, 0}}, false, false);
    checkPool(kind, {1, 1, 4, 5, 6}, {{2, 2, 3}, {2, 1, 2}, {1, 1, 1}, {0, 0, 1, 1, 0, 1}}, true, false);
  }
  // Many output rows over two threads (MobileNetV3's 2×2 stride-2 pool), and a dilated padded one.
  checkPool("max", {8, 16, 24, 96}, {{2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}}, false, false);
  checkPool("max", {2, 5, 17, 33}, {{3, 3}, {2, 1}, {2, 1}, {2, 1, 1, 2}}, true, false);
  checkPool("avg", {1, 2, 7, 8}, {{3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, true, true);
  checkPool("avg", {1, 3, 6, 6}, {{3, 3}, {1, 1}, {1, 1}, {2, 2, 2, 2}}, false, true);
}

TEST(Pool, MaxUint8AndColumnMajorIndices) {
  HostTensor x(DType::U8, {1, 1, 2, 3}), y(DType::U8, {1, 1, 1, 2});
  uint8_t vals[] = {1, 200, 3, 250, 5, 6};
  std::memcpy(x.data<uint8_t>(), vals, 6);
  Geo g{{2, 2}, {1, 1}, {1, 1}, {0, 0, 0, 0}};
  ASSERT_NO_ERR(runKernel("pool", {&x}, {&y}, windowAttrs(g).ints("kernel_shape", g.k).s("kind", "max")));
  EXPECT_EQ(y.data<uint8_t>()[0], 250);
  EXPECT_EQ(y.data<uint8_t>()[1], 200);
  HostTensor xf(DType::F32, {1, 1, 2, 3}), yf(DType::F32, {1, 1, 1, 2}), idx(DType::I64, {1, 1, 1, 2});
  for (int i = 0; i < 6; ++i) xf.data<float>()[i] = vals[i];
  ASSERT_NO_ERR(runKernel("max_pool_with_indices", {&xf}, {&yf, &idx},
                          windowAttrs(g).ints("kernel_shape", g.k).i("storage_order", 1)));
  EXPECT_EQ(idx.data<int64_t>()[0], 1);  // (h=1, w=0): w·H + h
  EXPECT_EQ(idx.data<int64_t>()[1], 2);  // (h=0, w=1)
}

TEST(Pool, MaxIsNaNWhereAWindowHoldsANaNAndEqualsTheIndicesKernel) {
  std::mt19937 rng(5);
  HostTensor x = randomF32({2, 3, 9, 10}, rng, -2, 2);
  x.data<float>()[17] = NAN;
  x.data<float>()[200] = -INFINITY;
  Geo g{{3, 2}, {2, 2}, {1, 1}, {1, 0, 1, 1}};
  HostTensor y(DType::F32, {2, 3, 5, 5}), y2(DType::F32, {2, 3, 5, 5}), idx(DType::I64, {2, 3, 5, 5});
  Attrs a = windowAttrs(g).ints("kernel_shape", g.k);
  ASSERT_NO_ERR(runKernel("pool", {&x}, {&y}, a.s("kind", "max")));
  ASSERT_NO_ERR(runKernel("max_pool_with_indices", {&x}, {&y2, &idx}, windowAttrs(g).ints("kernel_shape", g.k)));
  int nans = 0;
  for (int64_t e = 0; e < y.numel(); ++e) {
    const float a1 = y.data<float>()[e], a2 = y2.data<float>()[e];
    nans += std::isnan(a1);
    EXPECT_TRUE((std::isnan(a1) && std::isnan(a2)) || a1 == a2) << e << ": " << a1 << " vs " << a2;
  }
  EXPECT_GT(nans, 0);  // x[17] (plane 0, row 1, col 7) lies in some window
}

TEST(MaxUnpool, PlacesIntoLargerOutput) {
  HostTensor x(DType::F32, {1, 1, 2, 2}), idx(DType::I64, {1, 1, 2, 2}), y(DType::F32, {1, 1, 5, 5});
  int64_t ids[] = {5, 7, 13, 15};
  for (int i = 0; i < 4; ++i) {
    x.data<float>()[i] = float(i + 1);
    idx.data<int64_t>()[i] = ids[i];
  }
  ASSERT_NO_ERR(runKernel("max_unpool", {&x, &idx}, {&y}, Attrs().ints("index_shape", {1, 1, 4, 4})));
  std::vector<float> want(25, 0);
  want[6] = 1, want[8] = 2, want[16] = 3, want[18] = 4;
  expectClose(y.data<float>(), want.data(), 25);
  idx.data<int64_t>()[0] = 16;
  EXPECT_NE(errorMessage(runKernel("max_unpool", {&x, &idx}, {&y}, Attrs().ints("index_shape", {1, 1, 4, 4})))
                .find("outside the unpooled shape"),
            std::string::npos);
}

//===------------------------------------------------------------------------------------===//
// resize
//===------------------------------------------------------------------------------------===//

std::vector<float> resize(const std::vector<float> &in, std::vector<int64_t> xs, std::vector<int64_t> ys,
                          Attrs a) {
  HostTensor x(DType::F32, xs), y(DType::F32, ys);
  std::copy(in.begin(), in.end(), x.data<float>());
  llvm::Error e = runKernel("resize", {&x}, {&y}, a);
  EXPECT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

Attrs resizeAttrs(const std::string &mode, const std::string &ctm, std::vector<double> scales) {
  Attrs a;
  a.s("mode", mode).s("coordinate_transformation_mode", ctm).s("nearest_mode", "round_prefer_floor");
  a.f("cubic_coeff_a", -0.75).i("exclude_outside", 0).f("extrapolation_value", 0);
  auto *f = (*a.inst.mutable_attrs())["scales"].mutable_floats();
  for (double s : scales) f->add_values(s);
  return a;
}

TEST(Resize, NearestAndLinear) {
  // ONNX Resize examples: nearest 2x2 -> 4x6 (asymmetric, floor), linear align_corners.
  Attrs nearest = resizeAttrs("nearest", "asymmetric", {1, 1, 2, 3});
  (*nearest.inst.mutable_attrs())["nearest_mode"].set_s("floor");
  auto y = resize({1, 2, 3, 4}, {1, 1, 2, 2}, {1, 1, 4, 6}, nearest);
  std::vector<float> want{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
  expectClose(y.data(), want.data(), 24);
  y = resize({1, 2, 3, 4}, {1, 1, 2, 2}, {1, 1, 4, 4}, resizeAttrs("linear", "align_corners", {1, 1, 2, 2}));
  std::vector<float> lin{1, 4.f / 3, 5.f / 3, 2, 5.f / 3, 2, 7.f / 3, 8.f / 3, 7.f / 3, 8.f / 3, 3, 10.f / 3, 3, 10.f / 3, 11.f / 3, 4};
  expectClose(y.data(), lin.data(), 16);
  // half_pixel linear downsample by 0.5: each output is the mean of a 2x2 block.
  y = resize({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {4, 4}, {2, 2},
             resizeAttrs("linear", "half_pixel", {0.5, 0.5}));
  std::vector<float> down{3.5f, 5.5f, 11.5f, 13.5f};
  expectClose(y.data(), down.data(), 4);
}

TEST(Resize, CubicKeepsConstantsAndCrops) {
  std::vector<float> ones(16, 2.0f);
  auto y = resize(ones, {1, 1, 4, 4}, {1, 1, 6, 7}, resizeAttrs("cubic", "half_pixel", {1, 1, 1.5, 1.75}));
  std::vector<float> want(42, 2.0f);
  expectClose(y.data(), want.data(), 42, 1e-5f, 1e-5f);
  Attrs crop = resizeAttrs("linear", "tf_crop_and_resize", {1, 1, 0.75, 0.75});
  (*crop.inst.mutable_attrs())["extrapolation_value"].set_f(10);
  auto *roi = (*crop.inst.mutable_attrs())["roi"].mutable_floats();
  for (double v : {0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 1.2, 1.7}) roi->add_values(v);
  y = resize(ones, {1, 1, 4, 4}, {1, 1, 3, 3}, crop);
  // rows: 1.2 + 1.2·o = 1.2, 2.4, 3.6 (the last outside); cols: 1.8 + 1.65·o = 1.8, 3.45, 5.1
  std::vector<float> cw{2, 10, 10, 2, 10, 10, 10, 10, 10};
  expectClose(y.data(), cw.data(), 9);
}

//===------------------------------------------------------------------------------------===//
// nll_loss
//===------------------------------------------------------------------------------------===//

TEST(NllLoss, ReductionsWeightsIgnoreIndex) {
  std::mt19937 rng(13);
  const int64_t N = 3, C = 5, D = 4;
  HostTensor x = randomF32({N, C, D}, rng, -3, 0), t = randomI64({N, D}, rng, 0, C - 1), w = randomF32({C}, rng, 0.5, 2);
  t.data<int64_t>()[2] = 1;  // ignored below
  for (std::string red : {"none", "sum", "mean"})
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(red + (weighted ? " weighted" : ""));
      std::vector<int64_t> ys = red == "none" ? std::vector<int64_t>{N, D} : std::vector<int64_t>{};
      HostTensor y(DType::F32, ys);
      std::vector<HostTensor *> ins{&x, &t};
      if (weighted) ins.push_back(&w);
      ASSERT_NO_ERR(runKernel("nll_loss", ins, {&y}, Attrs().s("reduction", red).i("ignore_index", 1)));
      std::vector<double> loss(N * D);
      double sum = 0, wsum = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) {
          int64_t cls = t.data<int64_t>()[n * D + d];
          if (cls == 1) continue;
          double wt = weighted ? w.data<float>()[cls] : 1.0;
          loss[n * D + d] = -double(x.data<float>()[(n * C + cls) * D + d]) * wt;
          sum += loss[n * D + d];
          wsum += wt;
        }
      std::vector<float> want;
      if (red == "none") want.assign(loss.begin(), loss.end());
      else want.push_back(static_cast<float>(red == "sum" ? sum : sum / wsum));
      expectClose(y.data<float>(), want.data(), y.numel(), 1e-5f, 1e-5f);
    }
  t.data<int64_t>()[0] = C;
  HostTensor y(DType::F32, {});
  EXPECT_NE(errorMessage(runKernel("nll_loss", {&x, &t}, {&y}, Attrs().s("reduction", "sum"))).find("outside [0, 5)"),
            std::string::npos);
}

//===------------------------------------------------------------------------------------===//
// quantization and integer contractions
//===------------------------------------------------------------------------------------===//

TEST(Quantize, PerTensorAndPerAxis) {
  HostTensor x(DType::F32, {2, 3}), s(DType::F32, {3}), zp(DType::U8, {3}), y(DType::U8, {2, 3});
  float xv[] = {0, 2.5f, -10, 1000, 3.5f, 7};
  std::copy(xv, xv + 6, x.data<float>());
  float sv[] = {1, 1, 2};
  std::copy(sv, sv + 3, s.data<float>());
  uint8_t zv[] = {0, 10, 128};
  std::copy(zv, zv + 3, zp.data<uint8_t>());
  ASSERT_NO_ERR(runKernel("quantize_linear", {&x, &s, &zp}, {&y}, Attrs().i("axis", 1)));
  // round half to even: 2.5 -> 2, 3.5 -> 4, 7/2 = 3.5 -> 4; saturate 1000 -> 255
  uint8_t want[] = {0, 12, 123, 255, 14, 132};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<uint8_t>()[i], want[i]) << i;
  HostTensor back(DType::F32, {2, 3});
  ASSERT_NO_ERR(runKernel("dequantize_linear", {&y, &s, &zp}, {&back}, Attrs().i("axis", 1)));
  float deq[] = {0, 2, -10, 255, 4, 8};
  expectClose(back.data<float>(), deq, 6);
  HostTensor s1(DType::F32, {}), z1(DType::I8, {}), yi(DType::I8, {2, 3});
  s1.data<float>()[0] = 2;
  z1.data<int8_t>()[0] = -1;
  ASSERT_NO_ERR(runKernel("quantize_linear", {&x, &s1, &z1}, {&yi}, Attrs().i("axis", 0)));
  int8_t wanti[] = {-1, 0, -6, 127, 1, 3};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(yi.data<int8_t>()[i], wanti[i]) << i;
}

TEST(Quantize, Dynamic) {
  HostTensor x(DType::F32, {6}), y(DType::U8, {6}), s(DType::F32, {}), zp(DType::U8, {});
  float xv[] = {0, 2, -3, -2.5f, 1.34f, 0.5f};
  std::copy(xv, xv + 6, x.data<float>());
  ASSERT_NO_ERR(runKernel("dynamic_quantize_linear", {&x}, {&y, &s, &zp}));
  EXPECT_FLOAT_EQ(s.data<float>()[0], 5.0f / 255);
  EXPECT_EQ(zp.data<uint8_t>()[0], 153);
  uint8_t want[] = {153, 255, 0, 26, 221, 179};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<uint8_t>()[i], want[i]) << i;
}

TEST(MatmulInteger, ZeroPointsAndBroadcast) {
  std::mt19937 rng(17);
  const int64_t B = 2, M = 3, K = 5, N = 4;
  HostTensor a(DType::U8, {B, M, K}), b(DType::I8, {K, N}), az(DType::U8, {M}), bz(DType::I8, {N}), y(DType::I32, {B, M, N});
  for (int64_t i = 0; i < a.numel(); ++i) a.data<uint8_t>()[i] = uint8_t(rng() % 256);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<int8_t>()[i] = int8_t(int(rng() % 256) - 128);
  for (int64_t i = 0; i < M; ++i) az.data<uint8_t>()[i] = uint8_t(rng() % 256);
  for (int64_t i = 0; i < N; ++i) bz.data<int8_t>()[i] = int8_t(int(rng() % 256) - 128);
  ASSERT_NO_ERR(runKernel("matmul_integer", {&a, &b, &az, &bz}, {&y}));
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        int32_t acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += (int32_t(a.data<uint8_t>()[(bi * M + m) * K + k]) - az.data<uint8_t>()[m]) *
                 (int32_t(b.data<int8_t>()[k * N + n]) - bz.data<int8_t>()[n]);
        EXPECT_EQ(y.data<int32_t>()[(bi * M + m) * N + n], acc);
      }
}

TEST(ConvInteger, ZeroPointPadding) {
  // ONNX's ConvInteger example: padding counts as the zero point (contributes nothing).
  HostTensor x(DType::U8, {1, 1, 3, 3}), w(DType::U8, {1, 1, 2, 2}), xz(DType::U8, {}), wz(DType::U8, {}),
      y(DType::I32, {1, 1, 4, 4});
  for (int i = 0; i < 9; ++i) x.data<uint8_t>()[i] = uint8_t(i + 2);
  for (int i = 0; i < 4; ++i) w.data<uint8_t>()[i] = 1;
  xz.data<uint8_t>()[0] = 1;
  Geo g{{2, 2}, {1, 1}, {1, 1}, {1, 1, 1, 1}};
  ASSERT_NO_ERR(runKernel("conv_integer", {&x, &w, &xz, &wz}, {&y}, windowAttrs(g).i("group", 1)));
  int32_t want[] = {1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y.data<int32_t>()[i], want[i]) << i;
}

}  // namespace

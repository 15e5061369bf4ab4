//===- MiscKernelsTest.cpp - det, reverse_sequence, grid_sample, roi_align ------------------===//
//
// Each kernel against a naive reference written here: the determinant by cofactor expansion,
// sequence reversal by index arithmetic, grid sampling and roi align by direct evaluation of the
// ONNX formulas at single points.
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cmath>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

double cofactorDet(const std::vector<double> &a, int64_t m) {
  if (m == 1) return a[0];
  double det = 0;
  for (int64_t col = 0; col < m; ++col) {
    std::vector<double> minor;
    for (int64_t r = 1; r < m; ++r)
      for (int64_t c = 0; c < m; ++c)
        if (c != col) minor.push_back(a[r * m + c]);
    det += (col % 2 ? -1 : 1) * a[col] * cofactorDet(minor, m - 1);
  }
  return det;
}

TEST(MiscKernels, DetMatchesCofactorExpansion) {
  std::mt19937 rng(5);
  for (int64_t m : {1, 2, 3, 4, 5}) {
    SCOPED_TRACE("m = " + std::to_string(m));
    HostTensor x = randomF32({3, 2, m, m}, rng, -2, 2), y(DType::F32, {3, 2});
    ASSERT_NO_ERR(runKernel("det", {&x}, {&y}));
    std::vector<float> want(6);
    for (int64_t b = 0; b < 6; ++b) {
      std::vector<double> a(x.data<float>() + b * m * m, x.data<float>() + (b + 1) * m * m);
      want[b] = static_cast<float>(cofactorDet(a, m));
    }
    expectClose(y.data<float>(), want.data(), 6, 1e-4f, 1e-4f);
  }
}

TEST(MiscKernels, DetSingularAndF64) {
  HostTensor x(DType::F64, {2, 3, 3}), y(DType::F64, {2});
  const double v[18] = {1, 2, 3, 2, 4, 6, 0, 1, 5,    // rows 0 and 1 dependent: 0
                        0, 2, 0, 3, 0, 0, 0, 0, 4};   // needs a pivot swap: -24
  std::copy(v, v + 18, x.data<double>());
  ASSERT_NO_ERR(runKernel("det", {&x}, {&y}));
  EXPECT_EQ(y.data<double>()[0], 0.0);
  EXPECT_NEAR(y.data<double>()[1], -24.0, 1e-12);
  HostTensor bad(DType::F32, {2, 3}), out(DType::F32, {});
  EXPECT_NE(errorMessage(verifyKernel("det", {&bad}, {&out})).find("[..., M, M]"), std::string::npos);
}

TEST(MiscKernels, ReverseSequence) {
  for (int64_t batchAxis : {0, 1})
    for (DType lensType : {DType::I64, DType::I32}) {
      SCOPED_TRACE("batch_axis " + std::to_string(batchAxis));
      const int64_t T = 5, B = 3, F = 2;
      std::vector<int64_t> shape = batchAxis ? std::vector<int64_t>{T, B, F} : std::vector<int64_t>{B, T, F};
      HostTensor x(DType::I64, shape), y(DType::I64, shape), lens(lensType, {B});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<int64_t>()[i] = i * 10 + 1;
      const int64_t L[3] = {5, 0, 3};
      for (int64_t b = 0; b < B; ++b) {
        if (lensType == DType::I64) lens.data<int64_t>()[b] = L[b];
        else lens.data<int32_t>()[b] = static_cast<int32_t>(L[b]);
      }
      ASSERT_NO_ERR(runKernel("reverse_sequence", {&x, &lens}, {&y},
                              Attrs().i("batch_axis", batchAxis).i("time_axis", 1 - batchAxis)));
      auto flat = [&](int64_t t, int64_t b, int64_t f) {
        return (batchAxis ? (t * B + b) : (b * T + t)) * F + f;
      };
      for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t f = 0; f < F; ++f) {
            int64_t src = t < L[b] ? L[b] - 1 - t : t;
            EXPECT_EQ(y.data<int64_t>()[flat(t, b, f)], x.data<int64_t>()[flat(src, b, f)]);
          }
    }
  HostTensor x(DType::F32, {4, 2}), y(DType::F32, {4, 2}), lens(DType::I64, {2});
  lens.data<int64_t>()[0] = 1;
  lens.data<int64_t>()[1] = 9;
  EXPECT_NE(errorMessage(runKernel("reverse_sequence", {&x, &lens}, {&y},
                                   Attrs().i("batch_axis", 1).i("time_axis", 0)))
                .find("sequence_lens[1] = 9"),
            std::string::npos);
}

/// Reference bilinear sample with zero padding at pixel coordinates (px, py).
double bilinearZeros(const float *img, int64_t H, int64_t W, double px, double py) {
  auto at = [&](int64_t r, int64_t c) { return r >= 0 && r < H && c >= 0 && c < W ? double(img[r * W + c]) : 0.0; };
  int64_t x0 = int64_t(std::floor(px)), y0 = int64_t(std::floor(py));
  double fx = px - x0, fy = py - y0;
  return at(y0, x0) * (1 - fx) * (1 - fy) + at(y0, x0 + 1) * fx * (1 - fy) +
         at(y0 + 1, x0) * (1 - fx) * fy + at(y0 + 1, x0 + 1) * fx * fy;
}

TEST(MiscKernels, GridSampleBilinearZeros) {
  std::mt19937 rng(9);
  const int64_t N = 2, C = 3, H = 5, W = 4, Ho = 3, Wo = 6;
  HostTensor x = randomF32({N, C, H, W}, rng), g = randomF32({N, Ho, Wo, 2}, rng, -1.3f, 1.3f);
  for (int align : {0, 1}) {
    SCOPED_TRACE("align_corners " + std::to_string(align));
    HostTensor y(DType::F32, {N, C, Ho, Wo});
    ASSERT_NO_ERR(runKernel("grid_sample", {&x, &g}, {&y},
                            Attrs().s("mode", "bilinear").s("padding_mode", "zeros").i("align_corners", align)));
    std::vector<float> want(y.numel());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < Ho * Wo; ++i) {
          const float *gp = g.data<float>() + (n * Ho * Wo + i) * 2;
          double px = align ? (gp[0] + 1) / 2.0 * (W - 1) : ((gp[0] + 1) * W - 1) / 2.0;
          double py = align ? (gp[1] + 1) / 2.0 * (H - 1) : ((gp[1] + 1) * H - 1) / 2.0;
          want[(n * C + c) * Ho * Wo + i] =
              static_cast<float>(bilinearZeros(x.data<float>() + (n * C + c) * H * W, H, W, px, py));
        }
    expectClose(y.data<float>(), want.data(), y.numel(), 1e-5f, 1e-5f);
  }
}

TEST(MiscKernels, GridSampleIdentityGridAndPadding) {
  // With align_corners, the grid of pixel centres reproduces the image in every mode.
  const int64_t H = 3, W = 4;
  HostTensor x(DType::F32, {1, 1, H, W}), g(DType::F32, {1, H, W, 2});
  for (int64_t i = 0; i < H * W; ++i) x.data<float>()[i] = float(i * i % 7) - 2.5f;
  for (int64_t r = 0; r < H; ++r)
    for (int64_t c = 0; c < W; ++c) {
      g.data<float>()[(r * W + c) * 2] = -1 + 2.0f * c / (W - 1);
      g.data<float>()[(r * W + c) * 2 + 1] = -1 + 2.0f * r / (H - 1);
    }
  for (const char *mode : {"bilinear", "nearest", "bicubic"}) {
    SCOPED_TRACE(mode);
    HostTensor y(DType::F32, {1, 1, H, W});
    ASSERT_NO_ERR(runKernel("grid_sample", {&x, &g}, {&y},
                            Attrs().s("mode", mode).s("padding_mode", "border").i("align_corners", 1)));
    expectClose(y.data<float>(), x.data<float>(), H * W, 1e-5f, 1e-5f);
  }
  // Far outside the image: border repeats the corner pixel, zeros gives 0, reflection mirrors
  // x = 1 + 2/(W-1) (one pixel past the right edge) back onto column W-2.
  HostTensor far(DType::F32, {1, 1, 1, 2}), y(DType::F32, {1, 1, 1, 1});
  far.data<float>()[0] = 5.0f;
  far.data<float>()[1] = -1.0f;
  ASSERT_NO_ERR(runKernel("grid_sample", {&x, &far}, {&y},
                          Attrs().s("mode", "bilinear").s("padding_mode", "border").i("align_corners", 1)));
  EXPECT_FLOAT_EQ(y.data<float>()[0], x.data<float>()[W - 1]);
  ASSERT_NO_ERR(runKernel("grid_sample", {&x, &far}, {&y},
                          Attrs().s("mode", "bilinear").s("padding_mode", "zeros").i("align_corners", 1)));
  EXPECT_FLOAT_EQ(y.data<float>()[0], 0.0f);
  far.data<float>()[0] = 1.0f + 2.0f / (W - 1);
  ASSERT_NO_ERR(runKernel("grid_sample", {&x, &far}, {&y},
                          Attrs().s("mode", "nearest").s("padding_mode", "reflection").i("align_corners", 1)));
  EXPECT_FLOAT_EQ(y.data<float>()[0], x.data<float>()[W - 2]);
}

/// Reference roi_align bin value: the mean of ratio² bilinear samples (ONNX RoiAlign, avg).
double roiBin(const float *img, int64_t H, int64_t W, double x1, double y1, double bw, double bh,
              int64_t ph, int64_t pw, int64_t ratio) {
  double sum = 0;
  for (int64_t iy = 0; iy < ratio; ++iy)
    for (int64_t ix = 0; ix < ratio; ++ix) {
      double y = y1 + ph * bh + (iy + 0.5) * bh / ratio, x = x1 + pw * bw + (ix + 0.5) * bw / ratio;
      if (y < -1 || y > H || x < -1 || x > W) continue;
      y = std::min(std::max(y, 0.0), double(H - 1));
      x = std::min(std::max(x, 0.0), double(W - 1));
      int64_t y0 = int64_t(y), x0 = int64_t(x), yb = std::min(y0 + 1, H - 1), xb = std::min(x0 + 1, W - 1);
      double fy = y - y0, fx = x - x0;
      sum += img[y0 * W + x0] * (1 - fy) * (1 - fx) + img[y0 * W + xb] * (1 - fy) * fx +
             img[yb * W + x0] * fy * (1 - fx) + img[yb * W + xb] * fy * fx;
    }
  return sum / double(ratio * ratio);
}

TEST(MiscKernels, RoiAlignAvg) {
  std::mt19937 rng(3);
  const int64_t N = 2, C = 2, H = 8, W = 7, R = 3, OH = 3, OW = 2, ratio = 2;
  HostTensor x = randomF32({N, C, H, W}, rng), rois(DType::F32, {R, 4}), idx(DType::I64, {R});
  const float boxes[R][4] = {{0, 0, 6, 7}, {1.5f, 2.25f, 5.5f, 6}, {2, 1, 3, 2}};
  for (int64_t r = 0; r < R; ++r) {
    std::copy(boxes[r], boxes[r] + 4, rois.data<float>() + r * 4);
    idx.data<int64_t>()[r] = r % N;
  }
  for (int half : {0, 1}) {
    SCOPED_TRACE("half_pixel " + std::to_string(half));
    const double scale = 0.9;
    HostTensor y(DType::F32, {R, C, OH, OW});
    ASSERT_NO_ERR(runKernel("roi_align", {&x, &rois, &idx}, {&y},
                            Attrs().s("mode", "avg").i("output_height", OH).i("output_width", OW)
                                .i("sampling_ratio", ratio).f("spatial_scale", scale).i("half_pixel", half)));
    std::vector<float> want(y.numel());
    for (int64_t r = 0; r < R; ++r) {
      double off = half ? 0.5 : 0.0;
      double x1 = boxes[r][0] * scale - off, y1 = boxes[r][1] * scale - off;
      double rw = boxes[r][2] * scale - off - x1, rh = boxes[r][3] * scale - off - y1;
      if (!half) { rw = std::max(rw, 1.0); rh = std::max(rh, 1.0); }
      for (int64_t c = 0; c < C; ++c)
        for (int64_t ph = 0; ph < OH; ++ph)
          for (int64_t pw = 0; pw < OW; ++pw)
            want[((r * C + c) * OH + ph) * OW + pw] = static_cast<float>(
                roiBin(x.data<float>() + ((r % N) * C + c) * H * W, H, W, x1, y1, rw / OW, rh / OH, ph, pw, ratio));
    }
    expectClose(y.data<float>(), want.data(), y.numel(), 1e-5f, 1e-4f);
  }
  idx.data<int64_t>()[1] = 7;
  HostTensor y(DType::F32, {R, C, OH, OW});
  EXPECT_NE(errorMessage(runKernel("roi_align", {&x, &rois, &idx}, {&y},
                                   Attrs().i("output_height", OH).i("output_width", OW)))
                .find("batch_indices[1] = 7"),
            std::string::npos);
}

TEST(MiscKernels, RoiAlignMaxOnPixelCentres) {
  // half_pixel roi covering the image with one sample per bin: samples land on pixel centres, so
  // both modes return the (positive) image itself.
  const int64_t H = 4, W = 5;
  HostTensor x(DType::F32, {1, 1, H, W}), rois(DType::F32, {1, 4}), idx(DType::I32, {1});
  for (int64_t i = 0; i < H * W; ++i) x.data<float>()[i] = 1.0f + float(i % 6);
  const float box[4] = {0, 0, float(W), float(H)};
  std::copy(box, box + 4, rois.data<float>());
  idx.data<int32_t>()[0] = 0;
  for (const char *mode : {"avg", "max"}) {
    SCOPED_TRACE(mode);
    HostTensor y(DType::F32, {1, 1, H, W});
    ASSERT_NO_ERR(runKernel("roi_align", {&x, &rois, &idx}, {&y},
                            Attrs().s("mode", mode).i("output_height", H).i("output_width", W)
                                .i("sampling_ratio", 1).i("half_pixel", 1)));
    expectClose(y.data<float>(), x.data<float>(), H * W, 1e-6f, 1e-6f);
  }
}

}  // namespace

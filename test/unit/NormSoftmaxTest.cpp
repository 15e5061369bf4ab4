//===- NormSoftmaxTest.cpp - layer_norm, rms_norm, softmax, log_softmax ---------------------===//
#include "TestUtil.h"

#include <cmath>
#include <limits>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

void checkNorm(bool rms, const std::vector<int64_t> &shape, int64_t axis, bool withBias) {
  SCOPED_TRACE(std::string(rms ? "rms_norm " : "layer_norm ") + shapeToString(shape) + " axis " + std::to_string(axis));
  std::mt19937 rng(31);
  HostTensor x = randomF32(shape, rng, -3, 5);
  std::vector<int64_t> tail(shape.begin() + axis, shape.end());
  HostTensor scale = randomF32(tail, rng, 0.5f, 1.5f), bias = randomF32(tail, rng);
  HostTensor y(DType::F32, shape);
  const double eps = 1e-5;
  std::vector<HostTensor *> ins = {&x, &scale};
  if (withBias) ins.push_back(&bias);
  ASSERT_NO_ERR(runKernel(rms ? "rms_norm" : "layer_norm", ins, {&y}, Attrs().i("axis", axis).f("epsilon", eps)));
  int64_t N = numElements(tail), rows = x.numel() / N;
  std::vector<float> want(x.numel());
  for (int64_t r = 0; r < rows; ++r) {
    const float *px = x.data<float>() + r * N;
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < N; ++i) { mean += px[i]; sq += double(px[i]) * px[i]; }
    mean /= N;
    double var = 0;
    for (int64_t i = 0; i < N; ++i) var += (px[i] - mean) * (px[i] - mean);
    var /= N;
    for (int64_t i = 0; i < N; ++i) {
      double v = rms ? px[i] / std::sqrt(sq / N + eps) * scale.data<float>()[i]
                     : (px[i] - mean) / std::sqrt(var + eps) * scale.data<float>()[i] + (withBias ? bias.data<float>()[i] : 0);
      want[r * N + i] = static_cast<float>(v);
    }
  }
  expectClose(y.data<float>(), want.data(), x.numel(), 1e-4f, 1e-4f);
}

TEST(Norm, LayerNorm) {
  checkNorm(false, {3, 4, 5}, 1, true);
  checkNorm(false, {6, 7, 33}, 2, true);
  checkNorm(false, {6, 7, 33}, 2, false);
  checkNorm(false, {128, 384}, 1, true);
  checkNorm(false, {5}, 0, true);
}

TEST(Norm, RmsNorm) {
  checkNorm(true, {3, 4, 5}, 1, false);
  checkNorm(true, {6, 7, 33}, 2, false);
  checkNorm(true, {128, 384}, 1, false);
}

TEST(Norm, ScaleShapeChecked) {
  HostTensor x(DType::F32, {4, 8}), s(DType::F32, {4}), y(DType::F32, {4, 8});
  EXPECT_NE(errorMessage(verifyKernel("layer_norm", {&x, &s}, {&y}, Attrs().i("axis", 1))).find("scale has shape"),
            std::string::npos);
}

void checkSoftmax(bool log, const std::vector<int64_t> &shape, int64_t axis, bool withInf = false) {
  SCOPED_TRACE(std::string(log ? "log_softmax " : "softmax ") + shapeToString(shape) + " axis " + std::to_string(axis));
  std::mt19937 rng(41);
  HostTensor x = randomF32(shape, rng, -10, 10), y(DType::F32, shape);
  if (withInf)
    for (int64_t i = 0; i < x.numel(); i += 3) x.data<float>()[i] = -std::numeric_limits<float>::infinity();
  ASSERT_NO_ERR(runKernel(log ? "log_softmax" : "softmax", {&x}, {&y}, Attrs().i("axis", axis)));
  int64_t outer = 1, A = shape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<float> want(x.numel());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t a) { return (o * A + a) * inner + j; };
      double m = -INFINITY, s = 0;
      for (int64_t a = 0; a < A; ++a) m = std::max(m, double(x.data<float>()[at(a)]));
      for (int64_t a = 0; a < A; ++a) s += std::exp(x.data<float>()[at(a)] - m);
      for (int64_t a = 0; a < A; ++a) {
        double v = x.data<float>()[at(a)] - m;
        want[at(a)] = static_cast<float>(log ? v - std::log(s) : std::exp(v) / s);
      }
    }
  expectClose(y.data<float>(), want.data(), x.numel(), 1e-5f, 1e-5f);
}

TEST(Softmax, AllAxes) {
  for (bool log : {false, true}) {
    for (int64_t axis : {0, 1, 2}) checkSoftmax(log, {3, 5, 7}, axis);
    checkSoftmax(log, {16, 1000}, 1);
    checkSoftmax(log, {2, 100, 130}, 1);
    checkSoftmax(log, {4, 33}, 1, /*withInf=*/true);
  }
}

TEST(Softmax, InPlace) {
  std::mt19937 rng(4);
  HostTensor x = randomF32({8, 77}, rng), y(DType::F32, {8, 77});
  ASSERT_NO_ERR(runKernel("softmax", {&x}, {&y}, Attrs().i("axis", 1)));
  ASSERT_NO_ERR(runKernel("softmax", {&x}, {&x}, Attrs().i("axis", 1)));
  expectClose(x.data<float>(), y.data<float>(), x.numel(), 0, 0);
}

}  // namespace

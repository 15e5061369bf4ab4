//===- ReduceTest.cpp - reduce_sum/mean/max vs a naive reference ----------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <limits>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

void checkReduce(const std::string &op, const std::vector<int64_t> &shape, const std::vector<int64_t> &axes,
                 bool keep) {
  SCOPED_TRACE(op + " " + shapeToString(shape) + " axes " + shapeToString(axes) + " keep " + std::to_string(keep));
  std::mt19937 rng(21);
  HostTensor x = randomF32(shape, rng);
  std::vector<int64_t> outShape, keptShape;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool red = std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    if (!red) outShape.push_back(shape[d]);
    else if (keep) outShape.push_back(1);
    keptShape.push_back(red ? 1 : shape[d]);
  }
  HostTensor y(DType::F32, outShape);
  ASSERT_NO_ERR(runKernel(op, {&x}, {&y}, Attrs().ints("axes", axes).i("keepdims", keep)));
  // Reference in double, indexed through the keepdims shape (same element order).
  int64_t outN = numElements(keptShape);
  std::vector<double> acc(outN, op == "reduce_max" ? -std::numeric_limits<double>::infinity() : 0.0);
  int64_t count = x.numel() / std::max<int64_t>(outN, 1);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t o = broadcastIndex(unravel(i, shape), keptShape);
    double v = x.data<float>()[i];
    acc[o] = op == "reduce_max" ? std::max(acc[o], v) : acc[o] + v;
  }
  std::vector<float> want(outN);
  for (int64_t o = 0; o < outN; ++o) want[o] = static_cast<float>(op == "reduce_mean" ? acc[o] / count : acc[o]);
  expectClose(y.data<float>(), want.data(), outN, 1e-4f, 1e-5f);
}

TEST(Reduce, AgainstReference) {
  for (const char *op : {"reduce_sum", "reduce_mean", "reduce_max"})
    for (bool keep : {false, true}) {
      for (std::vector<int64_t> axes : {std::vector<int64_t>{0}, {1}, {2}, {0, 2}, {0, 1, 2}, {1, 2}, {0, 1}})
        checkReduce(op, {3, 4, 5}, axes, keep);
      checkReduce(op, {64, 1000}, {1}, keep);
      checkReduce(op, {1000, 70}, {0}, keep);
      checkReduce(op, {2, 3, 4, 5, 6}, {1, 3}, keep);
      checkReduce(op, {7, 1, 9}, {1}, keep);
    }
}

TEST(Reduce, InvalidAxes) {
  HostTensor x(DType::F32, {3, 4}), y(DType::F32, {3});
  EXPECT_NE(errorMessage(verifyKernel("reduce_sum", {&x}, {&y}, Attrs().ints("axes", {2}).i("keepdims", 0)))
                .find("out of range"), std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("reduce_sum", {&x}, {&y}, Attrs().ints("axes", {1}).i("keepdims", 1)))
                .find("expected [3, 1]"), std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("reduce_sum", {&x}, {&y}, Attrs().ints("axes", {}))).find("non-empty"),
            std::string::npos);
}

}  // namespace

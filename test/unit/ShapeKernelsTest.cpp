//===- ShapeKernelsTest.cpp - transpose gather slice concat split expand trilu --------------===//
#include "TestUtil.h"

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

/// A tensor of `dtype` whose element i holds i (mod 2 for bool), for exact comparisons.
HostTensor iota(DType dtype, const std::vector<int64_t> &shape) {
  HostTensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::F32) t.data<float>()[i] = static_cast<float>(i);
    else if (dtype == DType::I64) t.data<int64_t>()[i] = i * 3 - 7;
    else t.data<uint8_t>()[i] = (i * 7 / 3) % 2;
  }
  return t;
}

/// Element i of t as int64 (exact for the iota values above).
int64_t at(const HostTensor &t, int64_t i) {
  if (t.dtype == DType::F32) return static_cast<int64_t>(t.data<float>()[i]);
  if (t.dtype == DType::I64) return t.data<int64_t>()[i];
  return t.data<uint8_t>()[i];
}

const DType kDTypes[] = {DType::F32, DType::I64, DType::Bool};

TEST(ShapeKernels, Transpose) {
  std::vector<int64_t> shape = {2, 3, 4, 5};
  for (DType dt : kDTypes)
    for (std::vector<int64_t> perm : {std::vector<int64_t>{0, 2, 1, 3}, {3, 2, 1, 0}, {0, 1, 3, 2}, {1, 0, 2, 3}, {0, 1, 2, 3}}) {
      SCOPED_TRACE(dtypeName(dt).str() + " perm " + shapeToString(perm));
      HostTensor x = iota(dt, shape);
      std::vector<int64_t> ys;
      for (int64_t p : perm) ys.push_back(shape[p]);
      HostTensor y(dt, ys);
      ASSERT_NO_ERR(runKernel("transpose", {&x}, {&y}, Attrs().ints("perm", perm)));
      for (int64_t i = 0; i < y.numel(); ++i) {
        auto yi = unravel(i, ys);
        std::vector<int64_t> xi(4);
        for (int d = 0; d < 4; ++d) xi[perm[d]] = yi[d];
        int64_t flat = ((xi[0] * 3 + xi[1]) * 4 + xi[2]) * 5 + xi[3];
        ASSERT_EQ(at(y, i), at(x, flat)) << i;
      }
    }
  // Large 2-D transpose exercises the threaded path.
  HostTensor x = iota(DType::F32, {300, 301}), y(DType::F32, {301, 300});
  ASSERT_NO_ERR(runKernel("transpose", {&x}, {&y}, Attrs().ints("perm", {1, 0})));
  for (int64_t i = 0; i < 301; ++i)
    for (int64_t j = 0; j < 300; ++j) ASSERT_EQ(y.data<float>()[i * 300 + j], x.data<float>()[j * 301 + i]);
}

TEST(ShapeKernels, Gather) {
  for (DType dt : kDTypes)
    for (int64_t axis : {0, 1, 2}) {
      SCOPED_TRACE(dtypeName(dt).str() + " axis " + std::to_string(axis));
      std::vector<int64_t> shape = {4, 5, 6};
      HostTensor x = iota(dt, shape);
      HostTensor idx(DType::I64, {2, 3});
      int64_t iv[] = {0, -1, 2, 1, -2, 3};
      std::memcpy(idx.data<int64_t>(), iv, sizeof iv);
      std::vector<int64_t> ys(shape.begin(), shape.begin() + axis);
      ys.push_back(2);
      ys.push_back(3);
      ys.insert(ys.end(), shape.begin() + axis + 1, shape.end());
      HostTensor y(dt, ys);
      ASSERT_NO_ERR(runKernel("gather", {&x, &idx}, {&y}, Attrs().i("axis", axis)));
      for (int64_t i = 0; i < y.numel(); ++i) {
        auto yi = unravel(i, ys);
        std::vector<int64_t> xi(yi.begin(), yi.begin() + axis);
        int64_t g = iv[yi[axis] * 3 + yi[axis + 1]];
        xi.push_back(g < 0 ? g + shape[axis] : g);
        xi.insert(xi.end(), yi.begin() + axis + 2, yi.end());
        ASSERT_EQ(at(y, i), at(x, (xi[0] * 5 + xi[1]) * 6 + xi[2]));
      }
    }
}

TEST(ShapeKernels, GatherI32IndicesAndRangeError) {
  HostTensor x = iota(DType::F32, {10, 4}), idx(DType::I32, {3}), y(DType::F32, {3, 4});
  int32_t iv[] = {9, 0, -10};
  std::memcpy(idx.data<int32_t>(), iv, sizeof iv);
  ASSERT_NO_ERR(runKernel("gather", {&x, &idx}, {&y}, Attrs().i("axis", 0)));
  EXPECT_EQ(y.data<float>()[0], 36.0f);
  EXPECT_EQ(y.data<float>()[8], 0.0f);
  iv[1] = 10;
  std::memcpy(idx.data<int32_t>(), iv, sizeof iv);
  EXPECT_NE(errorMessage(runKernel("gather", {&x, &idx}, {&y}, Attrs().i("axis", 0))).find("index 10"),
            std::string::npos);
}

TEST(ShapeKernels, Slice) {
  std::vector<int64_t> shape = {5, 6, 7};
  struct S { std::vector<int64_t> starts, steps, out; };
  for (DType dt : kDTypes)
    for (const S &s : {S{{1, 0, 2}, {1, 1, 1}, {3, 6, 4}}, S{{4, 5, 6}, {-1, -2, -3}, {5, 3, 3}},
                       S{{0, 1, 0}, {2, 2, 2}, {3, 3, 4}}, S{{2, 0, 0}, {1, 1, 1}, {0, 6, 7}}}) {
      SCOPED_TRACE(dtypeName(dt).str() + " starts " + shapeToString(s.starts) + " steps " + shapeToString(s.steps));
      HostTensor x = iota(dt, shape), y(dt, s.out);
      ASSERT_NO_ERR(runKernel("slice", {&x}, {&y}, Attrs().ints("starts", s.starts).ints("steps", s.steps)));
      for (int64_t i = 0; i < y.numel(); ++i) {
        auto yi = unravel(i, s.out);
        int64_t flat = 0;
        for (int d = 0; d < 3; ++d) flat = flat * shape[d] + s.starts[d] + yi[d] * s.steps[d];
        ASSERT_EQ(at(y, i), at(x, flat));
      }
    }
  HostTensor x(DType::F32, {5}), y(DType::F32, {3});
  EXPECT_NE(errorMessage(verifyKernel("slice", {&x}, {&y}, Attrs().ints("starts", {3}).ints("steps", {1})))
                .find("leave the input"), std::string::npos);
}

TEST(ShapeKernels, ConcatAndSplit) {
  for (DType dt : kDTypes)
    for (int64_t axis : {0, 1, 2}) {
      SCOPED_TRACE(dtypeName(dt).str() + " axis " + std::to_string(axis));
      std::vector<int64_t> base = {2, 3, 4};
      std::vector<HostTensor> parts;
      std::vector<int64_t> sizes = {1, 3, 2};
      std::vector<int64_t> whole = base;
      whole[axis] = 6;
      for (int p = 0; p < 3; ++p) {
        std::vector<int64_t> s = base;
        s[axis] = sizes[p];
        parts.push_back(iota(dt, s));
        if (dt == DType::F32)
          for (int64_t i = 0; i < parts.back().numel(); ++i) parts.back().data<float>()[i] += 1000 * p;
      }
      HostTensor y(dt, whole);
      ASSERT_NO_ERR(runKernel("concat", {&parts[0], &parts[1], &parts[2]}, {&y}, Attrs().i("axis", axis)));
      for (int64_t i = 0; i < y.numel(); ++i) {
        auto yi = unravel(i, whole);
        int64_t a = yi[axis], p = 0;
        while (a >= sizes[p]) a -= sizes[p++];
        yi[axis] = a;
        int64_t flat = 0;
        for (int d = 0; d < 3; ++d) flat = flat * parts[p].shape[d] + yi[d];
        ASSERT_EQ(at(y, i), at(parts[p], flat));
      }
      std::vector<HostTensor> back;
      for (int p = 0; p < 3; ++p) back.emplace_back(dt, parts[p].shape);
      ASSERT_NO_ERR(runKernel("split", {&y}, {&back[0], &back[1], &back[2]}, Attrs().i("axis", axis)));
      for (int p = 0; p < 3; ++p) EXPECT_EQ(0, std::memcmp(back[p].buf.data(), parts[p].buf.data(), back[p].buf.size()));
    }
}

TEST(ShapeKernels, Expand) {
  for (DType dt : kDTypes) {
    for (auto [xs, ys] : {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{3, 1}, {2, 3, 4}},
                          {{1}, {5, 6}}, {{4}, {3, 4}}, {{2, 1, 3}, {2, 5, 3}}}) {
      SCOPED_TRACE(dtypeName(dt).str() + " " + shapeToString(xs) + " -> " + shapeToString(ys));
      HostTensor x = iota(dt, xs), y(dt, ys);
      ASSERT_NO_ERR(runKernel("expand", {&x}, {&y}));
      for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(at(y, i), at(x, broadcastIndex(unravel(i, ys), xs)));
    }
  }
}

TEST(ShapeKernels, Trilu) {
  for (DType dt : kDTypes)
    for (int upper : {0, 1})
      for (int64_t k : {-2, 0, 1, 3}) {
        SCOPED_TRACE(dtypeName(dt).str() + " upper " + std::to_string(upper) + " k " + std::to_string(k));
        std::vector<int64_t> shape = {2, 5, 4};
        HostTensor x = iota(dt, shape), y(dt, shape);
        ASSERT_NO_ERR(runKernel("trilu", {&x}, {&y}, Attrs().i("upper", upper).i("k", k)));
        for (int64_t n = 0; n < y.numel(); ++n) {
          auto idx = unravel(n, shape);
          int64_t i = idx[1], j = idx[2];
          bool keep = upper ? j - i >= k : j - i <= k;
          ASSERT_EQ(at(y, n), keep ? at(x, n) : 0);
        }
      }
}

}  // namespace

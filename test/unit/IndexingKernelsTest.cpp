//===- IndexingKernelsTest.cpp - reduce{kind} argmax cumsum gather/scatter one_hot topk pad ---===//
//
// Every kernel of reduce_kinds.cpp and indexing.cpp against a naive reference written here.
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

HostTensor randomF64(llvm::ArrayRef<int64_t> shape, std::mt19937 &rng, double lo = -1, double hi = 1) {
  HostTensor t(DType::F64, shape);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = dist(rng);
  return t;
}

HostTensor i64Tensor(llvm::ArrayRef<int64_t> shape, std::vector<int64_t> values) {
  HostTensor t(DType::I64, shape);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

HostTensor f32Tensor(llvm::ArrayRef<int64_t> shape, std::vector<float> values) {
  HostTensor t(DType::F32, shape);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

/// Reference reduction in double over a keepdims-shaped accumulator.
std::vector<double> referenceReduce(const std::string &kind, const std::vector<double> &x,
                                    const std::vector<int64_t> &shape, const std::vector<int64_t> &axes) {
  std::vector<int64_t> kept;
  for (size_t d = 0; d < shape.size(); ++d)
    kept.push_back(std::count(axes.begin(), axes.end(), int64_t(d)) ? 1 : shape[d]);
  int64_t outN = numElements(kept), count = int64_t(x.size()) / outN;
  std::vector<std::vector<double>> groups(outN);
  for (size_t i = 0; i < x.size(); ++i) groups[broadcastIndex(unravel(i, shape), kept)].push_back(x[i]);
  std::vector<double> out;
  for (auto &g : groups) {
    double r = 0;
    if (kind == "sum") for (double v : g) r += v;
    else if (kind == "mean") { for (double v : g) r += v; r /= count; }
    else if (kind == "max") r = *std::max_element(g.begin(), g.end());
    else if (kind == "min") r = *std::min_element(g.begin(), g.end());
    else if (kind == "prod") { r = 1; for (double v : g) r *= v; }
    else if (kind == "sum_square") for (double v : g) r += v * v;
    else if (kind == "l1") for (double v : g) r += std::fabs(v);
    else if (kind == "l2") { for (double v : g) r += v * v; r = std::sqrt(r); }
    else if (kind == "log_sum") { for (double v : g) r += v; r = std::log(r); }
    else { for (double v : g) r += std::exp(v); r = std::log(r); }
    out.push_back(r);
  }
  return out;
}

std::vector<int64_t> reducedShape(const std::vector<int64_t> &shape, const std::vector<int64_t> &axes, bool keep) {
  std::vector<int64_t> s;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool red = std::count(axes.begin(), axes.end(), int64_t(d));
    if (!red) s.push_back(shape[d]);
    else if (keep) s.push_back(1);
  }
  return s;
}

const char *kKinds[] = {"sum", "mean", "max", "min", "prod", "sum_square", "l1", "l2", "log_sum", "log_sum_exp"};

TEST(ReduceKinds, F32AndF64AgainstReference) {
  std::mt19937 rng(5);
  for (const char *kind : kKinds)
    for (std::vector<int64_t> axes : {std::vector<int64_t>{0}, {1}, {2}, {0, 2}, {0, 1, 2}})
      for (bool keep : {false, true}) {
        SCOPED_TRACE(std::string(kind) + " axes " + shapeToString(axes) + " keep " + std::to_string(keep));
        std::vector<int64_t> shape = {3, 4, 5};
        bool positive = std::string(kind) == "log_sum";
        HostTensor x64 = randomF64(shape, rng, positive ? 0.1 : -1.0, 1.0);
        HostTensor x32(DType::F32, shape);
        std::vector<double> xs(x64.numel());
        for (int64_t i = 0; i < x64.numel(); ++i) xs[i] = x32.data<float>()[i] = float(x64.data<double>()[i]);
        for (int64_t i = 0; i < x64.numel(); ++i) x64.data<double>()[i] = xs[i];
        std::vector<double> want = referenceReduce(kind, xs, shape, axes);
        auto ys = reducedShape(shape, axes, keep);
        HostTensor y64(DType::F64, ys), y32(DType::F32, ys);
        Attrs attrs = Attrs().ints("axes", axes).i("keepdims", keep).s("kind", kind);
        ASSERT_NO_ERR(runKernel("reduce", {&x64}, {&y64}, attrs));
        ASSERT_NO_ERR(runKernel("reduce", {&x32}, {&y32}, attrs));
        for (size_t o = 0; o < want.size(); ++o) {
          EXPECT_NEAR(y64.data<double>()[o], want[o], 1e-12 * (1 + std::fabs(want[o]))) << o;
          EXPECT_NEAR(y32.data<float>()[o], want[o], 1e-4 * (1 + std::fabs(want[o]))) << o;
        }
      }
}

TEST(ReduceKinds, IntegersAndExtraDTypesOfReduceSum) {
  HostTensor x = i64Tensor({2, 3}, {1, -2, 3, 4, 5, -6}), y(DType::I64, {2});
  ASSERT_NO_ERR(runKernel("reduce", {&x}, {&y}, Attrs().ints("axes", {1}).i("keepdims", 0).s("kind", "prod")));
  EXPECT_EQ(y.data<int64_t>()[0], -6);
  EXPECT_EQ(y.data<int64_t>()[1], -120);
  ASSERT_NO_ERR(runKernel("reduce", {&x}, {&y}, Attrs().ints("axes", {1}).i("keepdims", 0).s("kind", "l1")));
  EXPECT_EQ(y.data<int64_t>()[1], 15);
  HostTensor z(DType::I64, {3});
  ASSERT_NO_ERR(runKernel("reduce_sum", {&x}, {&z}, Attrs().ints("axes", {0}).i("keepdims", 0)));
  EXPECT_EQ(z.data<int64_t>()[0], 5);
  EXPECT_EQ(z.data<int64_t>()[2], -3);
  ASSERT_NO_ERR(runKernel("reduce_max", {&x}, {&z}, Attrs().ints("axes", {0}).i("keepdims", 0)));
  EXPECT_EQ(z.data<int64_t>()[1], 5);
  // Float-only kinds are rejected for integers; an unknown kind is rejected.
  EXPECT_NE(errorMessage(verifyKernel("reduce", {&x}, {&y}, Attrs().ints("axes", {1}).i("keepdims", 0).s("kind", "l2")))
                .find("floating-point"), std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("reduce", {&x}, {&y}, Attrs().ints("axes", {1}).i("keepdims", 0).s("kind", "median")))
                .find("kind must be"), std::string::npos);
}

TEST(ReduceKinds, LargeThreadedLanes) {
  std::mt19937 rng(9);
  HostTensor x = randomF32({300, 700}, rng), y(DType::F32, {700});
  ASSERT_NO_ERR(runKernel("reduce", {&x}, {&y}, Attrs().ints("axes", {0}).i("keepdims", 0).s("kind", "min")));
  for (int64_t j = 0; j < 700; ++j) {
    float m = INFINITY;
    for (int64_t i = 0; i < 300; ++i) m = std::min(m, x.data<float>()[i * 700 + j]);
    ASSERT_EQ(y.data<float>()[j], m) << j;
  }
}

TEST(ArgReduce, TiesLastIndexAndNaN) {
  HostTensor x = f32Tensor({2, 4}, {1, 3, 3, 0, 2, NAN, 5, NAN}), y(DType::I64, {2});
  auto run = [&](const char *op, int last) {
    EXPECT_FALSE(static_cast<bool>(runKernel(op, {&x}, {&y},
                                             Attrs().i("axis", 1).i("keepdims", 0).i("select_last_index", last))));
    return std::vector<int64_t>{y.data<int64_t>()[0], y.data<int64_t>()[1]};
  };
  EXPECT_EQ(run("argmax", 0), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(run("argmax", 1), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(run("argmin", 0), (std::vector<int64_t>{3, 1}));  // NumPy: the first NaN wins
  // Axis 0 with keepdims over a wider tensor, against a reference.
  std::mt19937 rng(3);
  HostTensor w = randomI64({5, 300}, rng, -3, 3), z(DType::I64, {1, 300});
  HostTensor wi(DType::I32, {5, 300});
  for (int64_t i = 0; i < w.numel(); ++i) wi.data<int32_t>()[i] = int32_t(w.data<int64_t>()[i]);
  ASSERT_NO_ERR(runKernel("argmin", {&wi}, {&z}, Attrs().i("axis", 0).i("keepdims", 1).i("select_last_index", 0)));
  for (int64_t j = 0; j < 300; ++j) {
    int64_t best = 0;
    for (int64_t i = 1; i < 5; ++i)
      if (w.data<int64_t>()[i * 300 + j] < w.data<int64_t>()[best * 300 + j]) best = i;
    ASSERT_EQ(z.data<int64_t>()[j], best) << j;
  }
}

TEST(CumSum, ExclusiveReverse) {
  std::mt19937 rng(4);
  HostTensor x = randomF64({3, 5, 4}, rng), y(DType::F64, {3, 5, 4});
  for (int excl : {0, 1})
    for (int rev : {0, 1}) {
      ASSERT_NO_ERR(runKernel("cumsum", {&x}, {&y}, Attrs().i("axis", 1).i("exclusive", excl).i("reverse", rev)));
      for (int64_t o = 0; o < 3; ++o)
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t k = 0; k < 5; ++k) {
            double s = 0;
            for (int64_t i = 0; i < 5; ++i) {
              bool in = rev ? (excl ? i > k : i >= k) : (excl ? i < k : i <= k);
              if (in) s += x.data<double>()[(o * 5 + i) * 4 + j];
            }
            ASSERT_NEAR(y.data<double>()[(o * 5 + k) * 4 + j], s, 1e-12);
          }
    }
}

TEST(Gathers, GatherElementsAndGatherND) {
  HostTensor data = f32Tensor({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  HostTensor idx = i64Tensor({2, 3}, {1, 2, 0, 2, 0, -3}), y(DType::F32, {2, 3});
  ASSERT_NO_ERR(runKernel("gather_elements", {&data, &idx}, {&y}, Attrs().i("axis", 0)));
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 6), (std::vector<float>{4, 8, 3, 7, 2, 3}));
  HostTensor idx1 = i64Tensor({3, 1}, {2, 0, 1}), y1(DType::F32, {3, 1});
  ASSERT_NO_ERR(runKernel("gather_elements", {&data, &idx1}, {&y1}, Attrs().i("axis", 1)));
  EXPECT_EQ(std::vector<float>(y1.data<float>(), y1.data<float>() + 3), (std::vector<float>{3, 4, 8}));
  HostTensor bad = i64Tensor({2, 3}, {1, 2, 0, 2, 0, 3});
  EXPECT_NE(errorMessage(runKernel("gather_elements", {&data, &bad}, {&y}, Attrs().i("axis", 0))).find("out of range"),
            std::string::npos);
  // gather_nd with batch_dims 1: data [2, 2, 2], indices [2, 1] → [2, 2].
  HostTensor d3 = f32Tensor({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), i3 = i64Tensor({2, 1}, {1, 0}), y3(DType::F32, {2, 2});
  ASSERT_NO_ERR(runKernel("gather_nd", {&d3, &i3}, {&y3}, Attrs().i("batch_dims", 1)));
  EXPECT_EQ(std::vector<float>(y3.data<float>(), y3.data<float>() + 4), (std::vector<float>{2, 3, 4, 5}));
  HostTensor i4 = i64Tensor({2, 2}, {0, 1, 1, -1}), y4(DType::F32, {2, 2});
  ASSERT_NO_ERR(runKernel("gather_nd", {&d3, &i4}, {&y4}));
  EXPECT_EQ(std::vector<float>(y4.data<float>(), y4.data<float>() + 4), (std::vector<float>{2, 3, 6, 7}));
}

TEST(Scatters, ElementsAndNDWithReductions) {
  HostTensor data = f32Tensor({1, 5}, {1, 2, 3, 4, 5}), idx = i64Tensor({1, 2}, {1, 1}), upd = f32Tensor({1, 2}, {1.1f, 2.1f});
  HostTensor y(DType::F32, {1, 5});
  ASSERT_NO_ERR(runKernel("scatter_elements", {&data, &idx, &upd}, {&y}, Attrs().i("axis", 1).s("reduction", "add")));
  EXPECT_FLOAT_EQ(y.data<float>()[1], 5.2f);
  ASSERT_NO_ERR(runKernel("scatter_elements", {&data, &idx, &upd}, {&y}, Attrs().i("axis", 1).s("reduction", "none")));
  EXPECT_FLOAT_EQ(y.data<float>()[1], 2.1f);
  EXPECT_FLOAT_EQ(y.data<float>()[0], 1.0f);
  HostTensor nd = f32Tensor({4, 2}, {1, 1, 2, 2, 3, 3, 4, 4}), ndIdx = i64Tensor({2, 1}, {0, 2}),
             ndUpd = f32Tensor({2, 2}, {5, 6, 7, 8}), ndY(DType::F32, {4, 2});
  ASSERT_NO_ERR(runKernel("scatter_nd", {&nd, &ndIdx, &ndUpd}, {&ndY}, Attrs().s("reduction", "mul")));
  EXPECT_EQ(std::vector<float>(ndY.data<float>(), ndY.data<float>() + 8), (std::vector<float>{5, 6, 2, 2, 21, 24, 4, 4}));
  // u8 add is arithmetic, not a byte copy.
  HostTensor du(DType::U8, {3}), iu = i64Tensor({2}, {0, 0}), uu(DType::U8, {2}), yu(DType::U8, {3});
  du.data<uint8_t>()[0] = 1; uu.data<uint8_t>()[0] = 2; uu.data<uint8_t>()[1] = 3;
  ASSERT_NO_ERR(runKernel("scatter_elements", {&du, &iu, &uu}, {&yu}, Attrs().i("axis", 0).s("reduction", "add")));
  EXPECT_EQ(yu.data<uint8_t>()[0], 6);
}

TEST(OneHot, AxisAndNegativeIndices) {
  HostTensor idx = i64Tensor({3}, {0, -1, 7}), vals = f32Tensor({2}, {-1, 5}), y(DType::F32, {4, 3});
  ASSERT_NO_ERR(runKernel("one_hot", {&idx, &vals}, {&y}, Attrs().i("axis", 0)));
  std::vector<float> want = {5, -1, -1, -1, -1, -1, -1, -1, -1, -1, 5, -1};
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 12), want);
}

TEST(TopK, LargestSmallestAndTies) {
  std::mt19937 rng(8);
  HostTensor x = randomI64({4, 9}, rng, 0, 4), xf(DType::F32, {4, 9});
  for (int64_t i = 0; i < 36; ++i) xf.data<float>()[i] = float(x.data<int64_t>()[i]);
  for (int largest : {0, 1}) {
    HostTensor v(DType::F32, {4, 3}), ix(DType::I64, {4, 3});
    ASSERT_NO_ERR(runKernel("topk", {&xf}, {&v, &ix}, Attrs().i("axis", 1).i("largest", largest).i("sorted", 1)));
    for (int64_t r = 0; r < 4; ++r) {
      std::vector<int64_t> order(9);
      std::iota(order.begin(), order.end(), 0);
      const float *row = xf.data<float>() + r * 9;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return largest ? row[a] > row[b] : row[a] < row[b];
      });
      for (int64_t t = 0; t < 3; ++t) {
        EXPECT_EQ(ix.data<int64_t>()[r * 3 + t], order[t]);
        EXPECT_EQ(v.data<float>()[r * 3 + t], row[order[t]]);
      }
    }
  }
}

TEST(Pad, Modes) {
  HostTensor x = f32Tensor({2, 3}, {1, 2, 3, 4, 5, 6});
  auto pad = [&](const char *mode, std::vector<int64_t> pads, std::vector<int64_t> shape, HostTensor *value = nullptr) {
    HostTensor y(DType::F32, shape);
    std::vector<HostTensor *> ins = {&x};
    if (value) ins.push_back(value);
    EXPECT_FALSE(static_cast<bool>(runKernel("pad", ins, {&y}, Attrs().ints("pads", pads).s("mode", mode))));
    return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
  };
  HostTensor nine = f32Tensor({}, {9});
  EXPECT_EQ(pad("constant", {0, 1, 0, 1}, {2, 5}, &nine), (std::vector<float>{9, 1, 2, 3, 9, 9, 4, 5, 6, 9}));
  EXPECT_EQ(pad("reflect", {0, 2, 0, 2}, {2, 7}), (std::vector<float>{3, 2, 1, 2, 3, 2, 1, 6, 5, 4, 5, 6, 5, 4}));
  EXPECT_EQ(pad("edge", {1, 1, 0, 0}, {3, 4}), (std::vector<float>{1, 1, 2, 3, 1, 1, 2, 3, 4, 4, 5, 6}));
  EXPECT_EQ(pad("wrap", {0, 1, 0, 1}, {2, 5}), (std::vector<float>{3, 1, 2, 3, 1, 6, 4, 5, 6, 4}));
  EXPECT_EQ(pad("constant", {0, -1, 0, 0}, {2, 2}), (std::vector<float>{2, 3, 5, 6}));  // negative pads crop
}

TEST(MatmulF64, BroadcastBatch) {
  std::mt19937 rng(2);
  HostTensor a = randomF64({2, 3, 4}, rng), b = randomF64({4, 5}, rng), y(DType::F64, {2, 3, 5});
  HostTensor b3(DType::F64, {1, 4, 5});
  std::copy(b.data<double>(), b.data<double>() + 20, b3.data<double>());
  ASSERT_NO_ERR(runKernel("matmul", {&a, &b3}, {&y}));
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        double s = 0;
        for (int64_t k = 0; k < 4; ++k) s += a.data<double>()[(n * 3 + i) * 4 + k] * b.data<double>()[k * 5 + j];
        ASSERT_NEAR(y.data<double>()[(n * 3 + i) * 5 + j], s, 1e-12);
      }
}

}  // namespace

//===- ElementwiseTest.cpp - Elementwise kernels vs naive references ------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <omp.h>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

struct ShapePair {
  std::vector<int64_t> a, b;
};

const std::vector<ShapePair> kShapes = {
    {{2, 3, 4}, {2, 3, 4}},     // same shape
    {{5, 7}, {7}},              // trailing vector
    {{4, 1, 6}, {3, 1}},        // both stretch
    {{1}, {3, 5}},              // scalar-like on the left
    {{}, {4}},                  // rank 0
    {{17, 33}, {17, 1}},        // column broadcast
    {{2, 1, 3, 1}, {1, 4, 1, 5}},
    {{70001}, {70001}},         // long contiguous run (threads)
    {{300, 257}, {257}},        // many rows (threads)
};

std::vector<int64_t> broadcastOf(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

template <typename TIn, typename TOut, typename F>
void referenceBinary(const HostTensor &a, const HostTensor &b, HostTensor &y, F f) {
  for (int64_t i = 0; i < y.numel(); ++i) {
    auto idx = unravel(i, y.shape);
    y.data<TOut>()[i] = f(a.data<TIn>()[broadcastIndex(idx, a.shape)], b.data<TIn>()[broadcastIndex(idx, b.shape)]);
  }
}

void checkF32Binary(const std::string &op, std::function<float(float, float)> f, float lo, float hi) {
  std::mt19937 rng(7);
  for (const ShapePair &s : kShapes) {
    SCOPED_TRACE(op + " " + shapeToString(s.a) + " " + shapeToString(s.b));
    HostTensor a = randomF32(s.a, rng, lo, hi), b = randomF32(s.b, rng, lo, hi);
    auto out = broadcastOf(s.a, s.b);
    HostTensor y(DType::F32, out), want(DType::F32, out);
    ASSERT_NO_ERR(runKernel(op, {&a, &b}, {&y}));
    referenceBinary<float, float>(a, b, want, f);
    expectClose(y.data<float>(), want.data<float>(), y.numel());
    // Operands swapped: broadcasting on the other side.
    HostTensor y2(DType::F32, out), want2(DType::F32, out);
    ASSERT_NO_ERR(runKernel(op, {&b, &a}, {&y2}));
    referenceBinary<float, float>(b, a, want2, f);
    expectClose(y2.data<float>(), want2.data<float>(), y2.numel());
  }
}

TEST(Elementwise, AddF32) { checkF32Binary("add", [](float a, float b) { return a + b; }, -1, 1); }
TEST(Elementwise, SubF32) { checkF32Binary("sub", [](float a, float b) { return a - b; }, -1, 1); }
TEST(Elementwise, MulF32) { checkF32Binary("mul", [](float a, float b) { return a * b; }, -1, 1); }
TEST(Elementwise, DivF32) { checkF32Binary("div", [](float a, float b) { return a / b; }, 0.5f, 2); }
TEST(Elementwise, PowF32) { checkF32Binary("pow", [](float a, float b) { return std::pow(a, b); }, 0.1f, 2); }
TEST(Elementwise, MinF32) { checkF32Binary("min", [](float a, float b) { return std::min(a, b); }, -1, 1); }
TEST(Elementwise, MaxF32) { checkF32Binary("max", [](float a, float b) { return std::max(a, b); }, -1, 1); }

void checkI64Binary(const std::string &op, std::function<int64_t(int64_t, int64_t)> f, int64_t lo, int64_t hi) {
  std::mt19937 rng(11);
  for (const ShapePair &s : kShapes) {
    SCOPED_TRACE(op + " " + shapeToString(s.a) + " " + shapeToString(s.b));
    HostTensor a = randomI64(s.a, rng, -50, 50), b = randomI64(s.b, rng, lo, hi);
    auto out = broadcastOf(s.a, s.b);
    HostTensor y(DType::I64, out), want(DType::I64, out);
    ASSERT_NO_ERR(runKernel(op, {&a, &b}, {&y}));
    referenceBinary<int64_t, int64_t>(a, b, want, f);
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<int64_t>()[i], want.data<int64_t>()[i]) << i;
  }
}

TEST(Elementwise, AddI64) { checkI64Binary("add", [](int64_t a, int64_t b) { return a + b; }, -50, 50); }
TEST(Elementwise, SubI64) { checkI64Binary("sub", [](int64_t a, int64_t b) { return a - b; }, -50, 50); }
TEST(Elementwise, MulI64) { checkI64Binary("mul", [](int64_t a, int64_t b) { return a * b; }, -50, 50); }
TEST(Elementwise, DivI64TruncatesTowardZero) {
  checkI64Binary("div", [](int64_t a, int64_t b) { return a / b; }, 1, 9);
  HostTensor a(DType::I64, {4}), b(DType::I64, {4}), y(DType::I64, {4});
  int64_t av[] = {-7, 7, -7, 5}, bv[] = {2, -2, -2, 0};
  std::memcpy(a.data<int64_t>(), av, sizeof av);
  std::memcpy(b.data<int64_t>(), bv, sizeof bv);
  ASSERT_NO_ERR(runKernel("div", {&a, &b}, {&y}));
  EXPECT_EQ(y.data<int64_t>()[0], -3);
  EXPECT_EQ(y.data<int64_t>()[1], -3);
  EXPECT_EQ(y.data<int64_t>()[2], 3);
  EXPECT_EQ(y.data<int64_t>()[3], 0);  // division by zero does not trap
}
TEST(Elementwise, PowI64) {
  checkI64Binary("pow", [](int64_t a, int64_t b) { int64_t r = 1; for (int i = 0; i < b; ++i) r *= a; return r; }, 0, 3);
}
TEST(Elementwise, MinMaxI64) {
  checkI64Binary("min", [](int64_t a, int64_t b) { return std::min(a, b); }, -50, 50);
  checkI64Binary("max", [](int64_t a, int64_t b) { return std::max(a, b); }, -50, 50);
}

TEST(Elementwise, InPlaceAdd) {
  std::mt19937 rng(3);
  HostTensor a = randomF32({33, 65}, rng), b = randomF32({65}, rng), want(DType::F32, {33, 65});
  referenceBinary<float, float>(a, b, want, [](float x, float y) { return x + y; });
  ASSERT_NO_ERR(runKernel("add", {&a, &b}, {&a}));
  expectClose(a.data<float>(), want.data<float>(), a.numel());
}

TEST(Elementwise, BroadcastShapeMismatchIsAnError) {
  HostTensor a(DType::F32, {2, 3}), b(DType::F32, {4}), y(DType::F32, {2, 3});
  EXPECT_NE(errorMessage(verifyKernel("add", {&a, &b}, {&y})).find("do not broadcast"), std::string::npos);
  HostTensor c(DType::F32, {3}), y2(DType::F32, {3, 3});
  EXPECT_NE(errorMessage(verifyKernel("add", {&a, &c}, {&y2})).find("output has shape"), std::string::npos);
}

template <typename T> void checkCompare(DType dtype, std::mt19937 &rng) {
  for (const ShapePair &s : kShapes) {
    HostTensor a(dtype, s.a), b(dtype, s.b);
    std::uniform_int_distribution<int> dist(0, 3);  // small range: equal values are frequent
    for (int64_t i = 0; i < a.numel(); ++i) a.data<T>()[i] = static_cast<T>(dist(rng) % (dtype == DType::Bool ? 2 : 4));
    for (int64_t i = 0; i < b.numel(); ++i) b.data<T>()[i] = static_cast<T>(dist(rng) % (dtype == DType::Bool ? 2 : 4));
    auto out = broadcastOf(s.a, s.b);
    struct Case { const char *op; std::function<uint8_t(T, T)> f; };
    std::vector<Case> cases = {{"equal", [](T x, T y) { return uint8_t(x == y); }}};
    if (dtype != DType::Bool) {
      cases.push_back({"less", [](T x, T y) { return uint8_t(x < y); }});
      cases.push_back({"greater", [](T x, T y) { return uint8_t(x > y); }});
    }
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(c.op) + " " + dtypeName(dtype).str() + " " + shapeToString(s.a) + shapeToString(s.b));
      HostTensor y(DType::Bool, out), want(DType::Bool, out);
      ASSERT_NO_ERR(runKernel(c.op, {&a, &b}, {&y}));
      referenceBinary<T, uint8_t>(a, b, want, c.f);
      ASSERT_EQ(0, std::memcmp(y.data<uint8_t>(), want.data<uint8_t>(), y.numel()));
    }
  }
}

TEST(Elementwise, Compare) {
  std::mt19937 rng(5);
  checkCompare<float>(DType::F32, rng);
  checkCompare<int64_t>(DType::I64, rng);
  checkCompare<uint8_t>(DType::Bool, rng);
}

template <typename T> void checkWhere(DType dtype) {
  std::mt19937 rng(9);
  struct S { std::vector<int64_t> c, x, y, out; };
  std::vector<S> shapes = {{{4, 1, 5}, {1, 3, 5}, {5}, {4, 3, 5}},
                           {{6, 7}, {6, 7}, {6, 7}, {6, 7}},
                           {{1}, {2, 3}, {2, 1}, {2, 3}},
                           {{200, 300}, {300}, {}, {200, 300}}};
  for (const S &s : shapes) {
    SCOPED_TRACE(dtypeName(dtype).str() + " " + shapeToString(s.out));
    HostTensor c = randomBool(s.c, rng), x(dtype, s.x), y(dtype, s.y), o(dtype, s.out);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<T>()[i] = static_cast<T>(i % 2 ? 1 : 0) + (dtype == DType::Bool ? 0 : static_cast<T>(i));
    for (int64_t i = 0; i < y.numel(); ++i) y.data<T>()[i] = static_cast<T>(dtype == DType::Bool ? (i % 3 == 0) : -static_cast<int64_t>(i) - 1);
    ASSERT_NO_ERR(runKernel("where", {&c, &x, &y}, {&o}));
    for (int64_t i = 0; i < o.numel(); ++i) {
      auto idx = unravel(i, s.out);
      T want = c.data<uint8_t>()[broadcastIndex(idx, s.c)] ? x.data<T>()[broadcastIndex(idx, s.x)]
                                                           : y.data<T>()[broadcastIndex(idx, s.y)];
      ASSERT_EQ(o.data<T>()[i], want) << i;
    }
  }
}

TEST(Elementwise, Where) {
  checkWhere<float>(DType::F32);
  checkWhere<int64_t>(DType::I64);
  checkWhere<uint8_t>(DType::Bool);
}

void checkUnary(const std::string &op, std::function<double(double)> f, float lo, float hi,
                Attrs attrs = Attrs(), float atol = 2e-6f, float rtol = 2e-6f) {
  std::mt19937 rng(13);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{}, {7}, {3, 5, 7}, {100003}}) {
    SCOPED_TRACE(op + " " + shapeToString(shape));
    HostTensor x = randomF32(shape, rng, lo, hi), y(DType::F32, shape), want(DType::F32, shape);
    ASSERT_NO_ERR(runKernel(op, {&x}, {&y}, attrs));
    for (int64_t i = 0; i < x.numel(); ++i) want.data<float>()[i] = static_cast<float>(f(x.data<float>()[i]));
    expectClose(y.data<float>(), want.data<float>(), y.numel(), atol, rtol);
    // In place.
    ASSERT_NO_ERR(runKernel(op, {&x}, {&x}, attrs));
    expectClose(x.data<float>(), want.data<float>(), x.numel(), atol, rtol);
  }
}

TEST(Elementwise, Unary) {
  checkUnary("neg", [](double x) { return -x; }, -5, 5);
  checkUnary("abs", [](double x) { return std::fabs(x); }, -5, 5);
  checkUnary("relu", [](double x) { return x > 0 ? x : 0; }, -5, 5);
  checkUnary("sqrt", [](double x) { return std::sqrt(x); }, 0, 10);
  checkUnary("reciprocal", [](double x) { return 1 / x; }, 0.1f, 10);
  checkUnary("exp", [](double x) { return std::exp(x); }, -80, 80);
  checkUnary("log", [](double x) { return std::log(x); }, 1e-3f, 100);
  checkUnary("erf", [](double x) { return std::erf(x); }, -5, 5);
  checkUnary("tanh", [](double x) { return std::tanh(x); }, -10, 10);
  checkUnary("sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -20, 20);
  checkUnary("silu", [](double x) { return x / (1 + std::exp(-x)); }, -20, 20);
}

// Serving's batch invariance (docs/serving.md) needs an element's result not to depend on where it
// sits in the tensor: the vector body, the loop's remainder and a length-1 call must give the same
// bits, on one thread and on two (the single-thread loop and the threads' chunks compile apart).
TEST(Elementwise, TranscendentalsGiveEachElementTheSameBitsWhereverItSits) {
  std::mt19937 rng(29);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const char *op : {"exp", "tanh", "sigmoid", "silu", "gelu", "erf"})
      for (int64_t n : {int64_t(1032), int64_t(70001)}) {
        SCOPED_TRACE(std::string(op) + " n=" + std::to_string(n) + " threads=" + std::to_string(threads));
        HostTensor x = randomF32({n}, rng, -8, 8), y(DType::F32, {n});
        ASSERT_NO_ERR(runKernel(op, {&x}, {&y}));
        int mismatches = 0;
        for (int64_t i = 0; i < n; i += (i < 64 || i > n - 64) ? 1 : 37) {
          HostTensor one(DType::F32, {1}), out(DType::F32, {1});
          one.data<float>()[0] = x.data<float>()[i];
          ASSERT_NO_ERR(runKernel(op, {&one}, {&out}));
          mismatches += std::memcmp(&out.data<float>()[0], &y.data<float>()[i], sizeof(float)) != 0;
        }
        EXPECT_EQ(mismatches, 0);
      }
  }
  omp_set_num_threads(saved);
}

TEST(Elementwise, Gelu) {
  checkUnary("gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -6, 6);
  checkUnary("gelu", [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); },
             -6, 6, Attrs().s("approximate", "tanh"));
  // Relative accuracy where the result is tiny (x ≤ −1): evaluated as x·σ(2u), no 1 + tanh u
  // cancellation (written as 0.5·x·(1 + tanh u) in float, x = −9 came out 0.29 off).
  {
    const int64_t n = 801;
    HostTensor neg(DType::F32, {n}), out(DType::F32, {n});
    for (int64_t i = 0; i < n; ++i) neg.data<float>()[i] = -1.0f - 8.0f * static_cast<float>(i) / (n - 1);
    ASSERT_NO_ERR(runKernel("gelu", {&neg}, {&out}, Attrs().s("approximate", "tanh")));
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = neg.data<float>()[i];
      // The reference in double as x·σ(2u) too: 1 + tanh u cancels in double as well (u ≈ −33).
      const double exact = x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      worst = std::max(worst, std::fabs(out.data<float>()[i] - exact) / std::fabs(exact));
    }
    EXPECT_LT(worst, 1e-5);
  }
  HostTensor x(DType::F32, {3}), y(DType::F32, {3});
  EXPECT_NE(errorMessage(verifyKernel("gelu", {&x}, {&y}, Attrs().s("approximate", "fast"))).find("approximate"),
            std::string::npos);
}

TEST(Elementwise, UnaryI64) {
  HostTensor x(DType::I64, {5}), y(DType::I64, {5});
  int64_t v[] = {-3, 0, 4, -1, 7};
  std::memcpy(x.data<int64_t>(), v, sizeof v);
  ASSERT_NO_ERR(runKernel("neg", {&x}, {&y}));
  EXPECT_EQ(y.data<int64_t>()[0], 3);
  ASSERT_NO_ERR(runKernel("abs", {&x}, {&y}));
  EXPECT_EQ(y.data<int64_t>()[3], 1);
  ASSERT_NO_ERR(runKernel("relu", {&x}, {&y}));
  EXPECT_EQ(y.data<int64_t>()[0], 0);
  EXPECT_EQ(y.data<int64_t>()[4], 7);
}

TEST(Elementwise, ExpEdgeCases) {
  HostTensor x(DType::F32, {4}), y(DType::F32, {4});
  float v[] = {-INFINITY, INFINITY, NAN, 0};
  std::memcpy(x.data<float>(), v, sizeof v);
  ASSERT_NO_ERR(runKernel("exp", {&x}, {&y}));
  EXPECT_EQ(y.data<float>()[0], 0.0f);
  EXPECT_TRUE(std::isinf(y.data<float>()[1]));
  EXPECT_TRUE(std::isnan(y.data<float>()[2]));
  EXPECT_EQ(y.data<float>()[3], 1.0f);
}

}  // namespace

//===- MathKernelsTest.cpp - unary/binary function kernels and dtype breadth vs references ---===//
#include "TestUtil.h"

#include "../../runtime/kernels/cpu/Half.h"

#include <cmath>
#include <limits>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

/// Naive references of the ONNX definitions, in double (parameters exact in f32).
double softplus(double x) { return std::log(1 + std::exp(x)); }

struct UnaryCase {
  const char *fn;
  std::function<double(double)> ref;
  float lo, hi;
  int params;
  float alpha, beta;
};

const std::vector<UnaryCase> kUnaryCases = {
    {"cos", [](double x) { return std::cos(x); }, -4, 4, 0, 0, 0},
    {"sin", [](double x) { return std::sin(x); }, -4, 4, 0, 0, 0},
    {"tan", [](double x) { return std::tan(x); }, -1.2f, 1.2f, 0, 0, 0},
    {"acos", [](double x) { return std::acos(x); }, -0.99f, 0.99f, 0, 0, 0},
    {"asin", [](double x) { return std::asin(x); }, -0.99f, 0.99f, 0, 0, 0},
    {"atan", [](double x) { return std::atan(x); }, -5, 5, 0, 0, 0},
    {"cosh", [](double x) { return std::cosh(x); }, -3, 3, 0, 0, 0},
    {"sinh", [](double x) { return std::sinh(x); }, -3, 3, 0, 0, 0},
    {"acosh", [](double x) { return std::acosh(x); }, 1, 9, 0, 0, 0},
    {"asinh", [](double x) { return std::asinh(x); }, -9, 9, 0, 0, 0},
    {"atanh", [](double x) { return std::atanh(x); }, -0.99f, 0.99f, 0, 0, 0},
    {"ceil", [](double x) { return std::ceil(x); }, -5, 5, 0, 0, 0},
    {"floor", [](double x) { return std::floor(x); }, -5, 5, 0, 0, 0},
    {"sign", [](double x) { return double((x > 0) - (x < 0)); }, -5, 5, 0, 0, 0},
    {"softplus", softplus, -20, 20, 0, 0, 0},
    {"softsign", [](double x) { return x / (1 + std::fabs(x)); }, -5, 5, 0, 0, 0},
    {"mish", [](double x) { return x * std::tanh(softplus(x)); }, -5, 5, 0, 0, 0},
    {"hard_swish", [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); }, -5, 5,
     0, 0, 0},
    {"elu", [](double x) { return x >= 0 ? x : 0.75 * (std::exp(x) - 1); }, -3, 3, 1, 0.75f, 0},
    {"celu",
     [](double x) { return std::max(0.0, x) + std::min(0.0, 1.5 * (std::exp(x / 1.5) - 1)); },
     -3, 3, 1, 1.5f, 0},
    {"selu", [](double x) { return 1.0625 * (x > 0 ? x : 1.625 * (std::exp(x) - 1)); }, -3, 3, 2,
     1.625f, 1.0625f},
    {"leaky_relu", [](double x) { return x >= 0 ? x : 0.125 * x; }, -3, 3, 1, 0.125f, 0},
    {"thresholded_relu", [](double x) { return x > 0.5 ? x : 0; }, -3, 3, 1, 0.5f, 0},
    {"hard_sigmoid", [](double x) { return std::max(0.0, std::min(1.0, 0.25 * x + 0.5)); }, -5, 5,
     2, 0.25f, 0.5f},
    {"shrink", [](double x) { return x < -0.5 ? x + 0.25 : x > 0.5 ? x - 0.25 : 0; }, -2, 2, 2,
     0.5f, 0.25f},
};

Attrs unaryAttrs(const UnaryCase &u) {
  Attrs a;
  a.s("fn", u.fn);
  if (u.params >= 1) a.f("alpha", u.alpha);
  if (u.params >= 2) a.f("beta", u.beta);
  return a;
}

TEST(UnaryFn, F32MatchesReference) {
  std::mt19937 rng(3);
  for (const UnaryCase &u : kUnaryCases) {
    SCOPED_TRACE(u.fn);
    for (int64_t n : {int64_t(7), int64_t(40000)}) {
      HostTensor x = randomF32({n}, rng, u.lo, u.hi), y(DType::F32, {n}), want(DType::F32, {n});
      for (int64_t i = 0; i < n; ++i) want.data<float>()[i] = float(u.ref(x.data<float>()[i]));
      ASSERT_NO_ERR(runKernel("unary", {&x}, {&y}, unaryAttrs(u)));
      expectClose(y.data<float>(), want.data<float>(), n, 1e-5f, 1e-5f);
    }
  }
}

TEST(UnaryFn, F64AndF16) {
  std::mt19937 rng(4);
  for (const UnaryCase &u : kUnaryCases) {
    SCOPED_TRACE(u.fn);
    HostTensor x = randomF32({33}, rng, u.lo, u.hi);
    HostTensor xd(DType::F64, {33}), yd(DType::F64, {33}), xh(DType::F16, {33}), yh(DType::F16, {33});
    for (int i = 0; i < 33; ++i) {
      xd.data<double>()[i] = x.data<float>()[i];
      xh.data<uint16_t>()[i] = colossal::runtime::cpu::floatToHalf(x.data<float>()[i]);
    }
    ASSERT_NO_ERR(runKernel("unary", {&xd}, {&yd}, unaryAttrs(u)));
    ASSERT_NO_ERR(runKernel("unary", {&xh}, {&yh}, unaryAttrs(u)));
    for (int i = 0; i < 33; ++i) {
      double want = u.ref(xd.data<double>()[i]);
      EXPECT_NEAR(yd.data<double>()[i], want, 1e-9 * (1 + std::fabs(want))) << i;
      double xr = colossal::runtime::cpu::halfToFloat(xh.data<uint16_t>()[i]);
      double wantH = u.ref(xr);
      EXPECT_NEAR(colossal::runtime::cpu::halfToFloat(yh.data<uint16_t>()[i]), wantH,
                  2e-3 * (1 + std::fabs(wantH)))
          << i;
    }
  }
}

TEST(UnaryFn, RoundHalvesToEven) {
  HostTensor x(DType::F32, {6}), y(DType::F32, {6});
  const float in[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f}, want[] = {0, 2, 2, -0.f, -2, 2};
  std::copy(in, in + 6, x.data<float>());
  ASSERT_NO_ERR(runKernel("unary", {&x}, {&y}, Attrs().s("fn", "round")));
  expectClose(y.data<float>(), want, 6, 0, 0);
}

TEST(UnaryFn, PredicatesYieldBool) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  HostTensor x(DType::F32, {4});
  const float in[] = {1.0f, inf, -inf, nan};
  std::copy(in, in + 4, x.data<float>());
  struct { const char *fn; uint8_t want[4]; } cases[] = {
      {"is_nan", {0, 0, 0, 1}}, {"is_inf", {0, 1, 1, 0}},
      {"is_pos_inf", {0, 1, 0, 0}}, {"is_neg_inf", {0, 0, 1, 0}}};
  for (auto &c : cases) {
    HostTensor y(DType::Bool, {4});
    ASSERT_NO_ERR(runKernel("unary", {&x}, {&y}, Attrs().s("fn", c.fn)));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<uint8_t>()[i], c.want[i]) << c.fn << " " << i;
  }
}

TEST(UnaryFn, IntegerSignAndBitwiseNot) {
  HostTensor x(DType::I32, {4}), y(DType::I32, {4});
  const int32_t in[] = {-7, 0, 5, INT32_MIN};
  std::copy(in, in + 4, x.data<int32_t>());
  ASSERT_NO_ERR(runKernel("unary", {&x}, {&y}, Attrs().s("fn", "sign")));
  const int32_t sign[] = {-1, 0, 1, -1};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<int32_t>()[i], sign[i]);
  ASSERT_NO_ERR(runKernel("unary", {&x}, {&y}, Attrs().s("fn", "bitwise_not")));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<int32_t>()[i], ~in[i]);
}

TEST(UnaryFn, VerifyRejectsBadCalls) {
  HostTensor x(DType::F32, {2}), y(DType::F32, {2}), b(DType::Bool, {2}), i(DType::I64, {2});
  EXPECT_NE(errorMessage(verifyKernel("unary", {&x}, {&y}, Attrs().s("fn", "nope"))).find("unknown"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("unary", {&i}, {&i}, Attrs().s("fn", "cos"))).find("not implemented"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("unary", {&x}, {&y}, Attrs().s("fn", "elu"))).find("alpha"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("unary", {&x}, {&y}, Attrs().s("fn", "is_nan"))).find("bool"),
            std::string::npos);
  EXPECT_FALSE(static_cast<bool>(verifyKernel("unary", {&x}, {&b}, Attrs().s("fn", "is_nan"))));
}

/// Runs binary `fn` on int64 inputs a, b (same shape) and returns the result as int64.
template <typename T>
std::vector<int64_t> runIntBinary(const char *fn, DType d, std::vector<int64_t> a,
                                  std::vector<int64_t> b, DType out) {
  int64_t n = int64_t(a.size());
  HostTensor ta(d, {n}), tb(d, {n}), ty(out, {n});
  for (int64_t i = 0; i < n; ++i) {
    ta.data<T>()[i] = T(a[i]);
    tb.data<T>()[i] = T(b[i]);
  }
  llvm::Error e = runKernel("binary", {&ta, &tb}, {&ty}, Attrs().s("fn", fn));
  EXPECT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  std::vector<int64_t> r(n);
  for (int64_t i = 0; i < n; ++i)
    r[i] = out == DType::Bool ? int64_t(ty.data<uint8_t>()[i]) : int64_t(ty.data<T>()[i]);
  return r;
}

TEST(BinaryFn, ModFollowsTheDivisorAndFmodTheDividend) {
  std::vector<int64_t> a = {-4, 7, 5, 4, -7, 8, 3}, b = {3, -3, 0, -2, -2, 3, 1};
  // NumPy: np.mod / np.fmod (0 for a zero divisor here).
  EXPECT_EQ(runIntBinary<int32_t>("mod", DType::I32, a, b, DType::I32),
            (std::vector<int64_t>{2, -2, 0, 0, -1, 2, 0}));
  EXPECT_EQ(runIntBinary<int8_t>("fmod", DType::I8, a, b, DType::I8),
            (std::vector<int64_t>{-1, 1, 0, 0, -1, 2, 0}));
  HostTensor x(DType::F32, {4}), y(DType::F32, {4}), z(DType::F32, {4});
  const float xa[] = {-4.3f, 7.5f, 5.0f, -7.25f}, ya[] = {3, -3, 2.5f, -2};
  std::copy(xa, xa + 4, x.data<float>());
  std::copy(ya, ya + 4, y.data<float>());
  ASSERT_NO_ERR(runKernel("binary", {&x, &y}, {&z}, Attrs().s("fn", "mod")));
  for (int i = 0; i < 4; ++i) {
    double r = std::fmod(double(xa[i]), double(ya[i]));
    if (r != 0 && ((r < 0) != (ya[i] < 0))) r += ya[i];
    EXPECT_NEAR(z.data<float>()[i], r, 1e-5) << i;
  }
}

TEST(BinaryFn, LogicBitsAndShifts) {
  std::vector<int64_t> a = {0, 0, 1, 1}, b = {0, 1, 0, 1};
  EXPECT_EQ(runIntBinary<uint8_t>("and", DType::Bool, a, b, DType::Bool), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(runIntBinary<uint8_t>("or", DType::Bool, a, b, DType::Bool), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(runIntBinary<uint8_t>("xor", DType::Bool, a, b, DType::Bool), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(runIntBinary<int64_t>("bitwise_and", DType::I64, {12, -1}, {10, 5}, DType::I64),
            (std::vector<int64_t>{8, 5}));
  EXPECT_EQ(runIntBinary<uint8_t>("shift_left", DType::U8, {16, 1, 3}, {1, 7, 8}, DType::U8),
            (std::vector<int64_t>{32, 128, 0}));
  EXPECT_EQ(runIntBinary<uint8_t>("shift_right", DType::U8, {16, 255, 3}, {1, 7, 9}, DType::U8),
            (std::vector<int64_t>{8, 1, 0}));
}

TEST(BinaryFn, PReluBroadcastsTheSlope) {
  HostTensor x(DType::F32, {2, 3}), s(DType::F32, {3}), y(DType::F32, {2, 3});
  const float xa[] = {-1, 2, -3, 4, -5, 0}, sa[] = {0.5f, 2, 0.25f};
  std::copy(xa, xa + 6, x.data<float>());
  std::copy(sa, sa + 3, s.data<float>());
  ASSERT_NO_ERR(runKernel("binary", {&x, &s}, {&y}, Attrs().s("fn", "prelu")));
  const float want[] = {-0.5f, 2, -0.75f, 4, -10, 0};
  expectClose(y.data<float>(), want, 6, 0, 0);
}

TEST(BinaryFn, InclusiveComparisonsAndNaN) {
  HostTensor a(DType::F64, {3}), b(DType::F64, {3}), le(DType::Bool, {3}), ge(DType::Bool, {3});
  const double aa[] = {1, 2, std::nan("")}, ba[] = {2, 2, 1};
  std::copy(aa, aa + 3, a.data<double>());
  std::copy(ba, ba + 3, b.data<double>());
  ASSERT_NO_ERR(runKernel("binary", {&a, &b}, {&le}, Attrs().s("fn", "less_equal")));
  ASSERT_NO_ERR(runKernel("binary", {&a, &b}, {&ge}, Attrs().s("fn", "greater_equal")));
  const uint8_t wantLe[] = {1, 1, 0}, wantGe[] = {0, 1, 0};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(le.data<uint8_t>()[i], wantLe[i]);
    EXPECT_EQ(ge.data<uint8_t>()[i], wantGe[i]);
  }
}

TEST(BinaryFn, VerifyRejectsBadCalls) {
  HostTensor f(DType::F32, {2}), b(DType::Bool, {2}), i(DType::I32, {2});
  EXPECT_NE(errorMessage(verifyKernel("binary", {&f, &f}, {&f}, Attrs().s("fn", "and"))).find("not implemented"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("binary", {&f, &i}, {&f}, Attrs().s("fn", "mod"))).find("different dtypes"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("binary", {&f, &f}, {&f}, Attrs().s("fn", "less_equal"))).find("bool"),
            std::string::npos);
}

// ---------------------------------------------------------------- dtype breadth of the core ops

template <typename T> void checkIntArith(DType d) {
  std::vector<int64_t> a = {7, -8, 100, 3, 0}, b = {2, 3, -7, 0, 5};
  if (!std::is_signed_v<T>) a = {7, 8, 200, 3, 0}, b = {2, 3, 7, 0, 5};
  int64_t n = int64_t(a.size());
  HostTensor ta(d, {n}), tb(d, {n});
  for (int64_t i = 0; i < n; ++i) {
    ta.data<T>()[i] = T(a[i]);
    tb.data<T>()[i] = T(b[i]);
  }
  struct { const char *op; std::function<T(T, T)> ref; } ops[] = {
      {"add", [](T x, T y) { return T(x + y); }},
      {"sub", [](T x, T y) { return T(x - y); }},
      {"mul", [](T x, T y) { return T(x * y); }},
      {"div", [](T x, T y) { return y == 0 ? T(0) : T(x / y); }},
      {"min", [](T x, T y) { return std::min(x, y); }},
      {"max", [](T x, T y) { return std::max(x, y); }},
  };
  for (auto &op : ops) {
    HostTensor y(d, {n});
    ASSERT_NO_ERR(runKernel(op.op, {&ta, &tb}, {&y}));
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(y.data<T>()[i], op.ref(ta.data<T>()[i], tb.data<T>()[i])) << op.op << " " << i;
  }
  HostTensor lt(DType::Bool, {n});
  ASSERT_NO_ERR(runKernel("less", {&ta, &tb}, {&lt}));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(lt.data<uint8_t>()[i], ta.data<T>()[i] < tb.data<T>()[i]);
}

TEST(DTypeBreadth, IntegerArithmeticAndCompare) {
  checkIntArith<int8_t>(DType::I8);
  checkIntArith<int16_t>(DType::I16);
  checkIntArith<int32_t>(DType::I32);
  checkIntArith<int64_t>(DType::I64);
  checkIntArith<uint8_t>(DType::U8);
}

TEST(DTypeBreadth, IntegerPow) {
  HostTensor a(DType::I32, {4}), b(DType::I32, {4}), y(DType::I32, {4});
  const int32_t aa[] = {2, -3, 5, 2}, ba[] = {10, 3, 0, -1};
  std::copy(aa, aa + 4, a.data<int32_t>());
  std::copy(ba, ba + 4, b.data<int32_t>());
  ASSERT_NO_ERR(runKernel("pow", {&a, &b}, {&y}));
  const int32_t want[] = {1024, -27, 1, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<int32_t>()[i], want[i]);
}

TEST(DTypeBreadth, F64AndF16Arithmetic) {
  std::mt19937 rng(5);
  HostTensor a = randomF32({5, 7}, rng, 0.5f, 2), b = randomF32({7}, rng, 0.5f, 2);
  HostTensor ad(DType::F64, {5, 7}), bd(DType::F64, {7}), ah(DType::F16, {5, 7}), bh(DType::F16, {7});
  for (int i = 0; i < 35; ++i) {
    ad.data<double>()[i] = a.data<float>()[i];
    ah.data<uint16_t>()[i] = colossal::runtime::cpu::floatToHalf(a.data<float>()[i]);
  }
  for (int i = 0; i < 7; ++i) {
    bd.data<double>()[i] = b.data<float>()[i];
    bh.data<uint16_t>()[i] = colossal::runtime::cpu::floatToHalf(b.data<float>()[i]);
  }
  for (const char *op : {"add", "sub", "mul", "div", "pow", "max"}) {
    SCOPED_TRACE(op);
    HostTensor yd(DType::F64, {5, 7}), yh(DType::F16, {5, 7});
    ASSERT_NO_ERR(runKernel(op, {&ad, &bd}, {&yd}));
    ASSERT_NO_ERR(runKernel(op, {&ah, &bh}, {&yh}));
    for (int i = 0; i < 35; ++i) {
      double x = ad.data<double>()[i], y = bd.data<double>()[i % 7];
      std::string o = op;
      double want = o == "add" ? x + y : o == "sub" ? x - y : o == "mul" ? x * y
                  : o == "div" ? x / y : o == "pow" ? std::pow(x, y) : std::max(x, y);
      EXPECT_NEAR(yd.data<double>()[i], want, 1e-12 * (1 + std::fabs(want)));
      EXPECT_NEAR(colossal::runtime::cpu::halfToFloat(yh.data<uint16_t>()[i]), want,
                  4e-3 * (1 + std::fabs(want)));
    }
  }
}

TEST(DTypeBreadth, WhereMovesEveryElementSize) {
  HostTensor c(DType::Bool, {3});
  c.data<uint8_t>()[0] = 1, c.data<uint8_t>()[1] = 0, c.data<uint8_t>()[2] = 1;
  HostTensor x(DType::I16, {3}), y(DType::I16, {1}), o(DType::I16, {3});
  for (int i = 0; i < 3; ++i) x.data<int16_t>()[i] = int16_t(i + 10);
  y.data<int16_t>()[0] = -1;
  ASSERT_NO_ERR(runKernel("where", {&c, &x, &y}, {&o}));
  EXPECT_EQ(o.data<int16_t>()[0], 10);
  EXPECT_EQ(o.data<int16_t>()[1], -1);
  EXPECT_EQ(o.data<int16_t>()[2], 12);
}

TEST(DTypeBreadth, BFloat16Cast) {
  HostTensor x(DType::F32, {4}), h(DType::BF16, {4}), y(DType::F32, {4});
  const float in[] = {1.0f, 3.140625f, -2.5f, 1.00390625f};  // the last is a tie: rounds to even
  std::copy(in, in + 4, x.data<float>());
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&h}));
  ASSERT_NO_ERR(runKernel("cast", {&h}, {&y}));
  const float want[] = {1.0f, 3.140625f, -2.5f, 1.0f};
  expectClose(y.data<float>(), want, 4, 0, 0);
}

}  // namespace

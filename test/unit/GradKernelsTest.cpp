//===- GradKernelsTest.cpp - backward kernels vs float64 references -------------------------===//
//
// Each backward kernel (grad.cpp, attention_grad.cpp) against a reference written here in float64:
// central finite differences of a naive float64 forward (softmax, log_softmax, layer_norm,
// rms_norm, every unary_grad fn), explicit naive float64 gradient formulas (attention, the norms
// at training sizes), naive scatter loops (gather_grad, slice_grad). attention_grad is also checked
// against finite differences of the runtime's own forward `attention` kernel. Determinism (same
// bits run to run and for 1 or 2 threads) is asserted for the kernels with reductions.
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <functional>
#include <limits>
#include <omp.h>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

HostTensor clone(const HostTensor &t) {
  HostTensor out(t.dtype, t.shape);
  std::memcpy(out.buf.data(), t.buf.data(), t.buf.size());
  return out;
}

HostTensor f64Of(const HostTensor &t) {
  HostTensor out(DType::F64, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) out.data<double>()[i] = t.data<float>()[i];
  return out;
}

std::vector<float> toFloat(const std::vector<double> &v) { return std::vector<float>(v.begin(), v.end()); }

/// EXPECT |got − want| <= atol + rtol·|want| for f64 results.
void expectClose64(const double *got, const double *want, int64_t n, double atol, double rtol) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])) && bad++ < 5)
      ADD_FAILURE() << "index " << i << ": got " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0) << "of " << n << " elements";
}

bool sameBits(const HostTensor &a, const HostTensor &b) {
  return a.buf.size() == b.buf.size() && std::memcmp(a.buf.data(), b.buf.data(), a.buf.size()) == 0;
}

/// Runs `body` with OpenMP limited to `threads` threads, then restores the previous setting.
void withThreads(int threads, const std::function<void()> &body) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  body();
  omp_set_num_threads(saved);
}

/// Central differences of L(x) = Σ dy·f(x) in float64: dL/dx_j for every j.
std::vector<double> finiteDiffVJP(const std::function<std::vector<double>(const std::vector<double> &)> &f,
                                  std::vector<double> x, const std::vector<double> &dy, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t j = 0; j < x.size(); ++j) {
    const double x0 = x[j];
    x[j] = x0 + h;
    std::vector<double> up = f(x);
    x[j] = x0 - h;
    std::vector<double> dn = f(x);
    x[j] = x0;
    double s = 0;
    for (size_t i = 0; i < dy.size(); ++i) s += dy[i] * (up[i] - dn[i]);
    g[j] = s / (2 * h);
  }
  return g;
}

std::vector<double> asDoubles(const HostTensor &t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.dtype == DType::F64 ? t.data<double>()[i] : t.data<float>()[i];
  return v;
}

// ---------------------------------------------------------------- softmax_grad, log_softmax_grad

/// Naive float64 softmax / log_softmax of `x` (shape) along `axis`.
std::vector<double> softmaxRef(const std::vector<double> &x, const std::vector<int64_t> &shape, int64_t axis,
                               bool log) {
  int64_t outer = 1, A = shape[axis], inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double m = -INFINITY, s = 0;
      for (int64_t a = 0; a < A; ++a) m = std::max(m, x[(o * A + a) * inner + j]);
      for (int64_t a = 0; a < A; ++a) s += std::exp(x[(o * A + a) * inner + j] - m);
      for (int64_t a = 0; a < A; ++a) {
        const double z = x[(o * A + a) * inner + j] - m;
        y[(o * A + a) * inner + j] = log ? z - std::log(s) : std::exp(z) / s;
      }
    }
  return y;
}

void checkSoftmaxGrad(bool log, const std::vector<int64_t> &shape, int64_t axis, bool inPlace) {
  SCOPED_TRACE(std::string(log ? "log_softmax_grad " : "softmax_grad ") + shapeToString(shape) + " axis " +
               std::to_string(axis) + (inPlace ? " in place" : ""));
  std::mt19937 rng(5);
  HostTensor x = randomF32(shape, rng, -3, 3), dy = randomF32(shape, rng);
  std::vector<double> x64 = asDoubles(x), dy64 = asDoubles(dy);
  std::vector<double> y64 = softmaxRef(x64, shape, axis, log);
  HostTensor y(DType::F32, shape);
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(y64[i]);
  std::vector<double> want =
      finiteDiffVJP([&](const std::vector<double> &xx) { return softmaxRef(xx, shape, axis, log); }, x64, dy64);

  const char *op = log ? "log_softmax_grad" : "softmax_grad";
  HostTensor dx(DType::F32, shape);
  ASSERT_NO_ERR(runKernel(op, {&y, &dy}, {&dx}, Attrs().i("axis", axis)));
  expectClose(dx.data<float>(), toFloat(want).data(), dx.numel(), 2e-5f, 1e-4f);
  if (inPlace) {  // dx aliasing dy, then dx aliasing y: the same bits
    HostTensor dyCopy = clone(dy), yCopy = clone(y);
    ASSERT_NO_ERR(runKernel(op, {&y, &dyCopy}, {&dyCopy}, Attrs().i("axis", axis)));
    EXPECT_TRUE(sameBits(dyCopy, dx)) << "dx aliasing dy";
    ASSERT_NO_ERR(runKernel(op, {&yCopy, &dy}, {&yCopy}, Attrs().i("axis", axis)));
    EXPECT_TRUE(sameBits(yCopy, dx)) << "dx aliasing y";
  }

  // f64 kernel on the f64 forward output.
  HostTensor y6(DType::F64, shape), dy6 = f64Of(dy), dx6(DType::F64, shape);
  std::copy(y64.begin(), y64.end(), y6.data<double>());
  ASSERT_NO_ERR(runKernel(op, {&y6, &dy6}, {&dx6}, Attrs().i("axis", axis)));
  expectClose64(dx6.data<double>(), want.data(), dx6.numel(), 1e-8, 1e-6);
}

TEST(GradKernels, SoftmaxGrad) {
  checkSoftmaxGrad(false, {4, 9}, 1, false);
  checkSoftmaxGrad(false, {3, 5, 70}, 1, false);  // middle axis, inner 70 > one lane block
  checkSoftmaxGrad(false, {2, 3, 37}, 2, true);   // dx aliases dy
  checkSoftmaxGrad(false, {6, 4}, 0, false);
  checkSoftmaxGrad(false, {3, 5, 70}, 1, true);
}

TEST(GradKernels, LogSoftmaxGrad) {
  checkSoftmaxGrad(true, {4, 9}, 1, false);
  checkSoftmaxGrad(true, {3, 5, 70}, 1, false);
  checkSoftmaxGrad(true, {2, 3, 37}, 2, true);
  checkSoftmaxGrad(true, {3, 5, 70}, 1, true);
}

TEST(GradKernels, SoftmaxGradErrors) {
  HostTensor y(DType::F32, {3, 4}), dy(DType::F32, {3, 5}), dx(DType::F32, {3, 4});
  EXPECT_NE(errorMessage(verifyKernel("softmax_grad", {&y, &dy}, {&dx})).find("y and dy"), std::string::npos);
  HostTensor dy2(DType::F32, {3, 4});
  EXPECT_NE(errorMessage(verifyKernel("softmax_grad", {&y, &dy2}, {&dx}, Attrs().i("axis", 2))).find("axis 2"),
            std::string::npos);
  HostTensor dy64(DType::F64, {3, 4});
  EXPECT_NE(errorMessage(verifyKernel("log_softmax_grad", {&y, &dy64}, {&dx})).find("must be f32"),
            std::string::npos);
}

// ---------------------------------------------------------------- layer_norm_grad, rms_norm_grad

/// Naive float64 layer_norm / rms_norm forward over the last dims starting at `axis`.
std::vector<double> normRef(bool rms, const std::vector<double> &x, const std::vector<double> &scale,
                            const std::vector<double> &bias, int64_t N, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / N; ++r) {
    const double *px = x.data() + r * N;
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < N; ++i) { mean += px[i]; sq += px[i] * px[i]; }
    mean /= N;
    double var = 0;
    for (int64_t i = 0; i < N; ++i) var += (px[i] - mean) * (px[i] - mean);
    var /= N;
    for (int64_t i = 0; i < N; ++i)
      y[r * N + i] = rms ? px[i] / std::sqrt(sq / N + eps) * scale[i]
                         : (px[i] - mean) / std::sqrt(var + eps) * scale[i] + bias[i];
  }
  return y;
}

struct NormGrads {
  std::vector<double> dx, dscale, dbias;
};

/// Finite-difference gradients of L = Σ dy·norm(x, scale, bias) in float64.
NormGrads normFiniteDiff(bool rms, const std::vector<double> &x, const std::vector<double> &scale,
                         const std::vector<double> &dy, int64_t N, double eps) {
  std::vector<double> bias(N, 0.25);
  NormGrads g;
  g.dx = finiteDiffVJP([&](const std::vector<double> &xx) { return normRef(rms, xx, scale, bias, N, eps); }, x, dy);
  g.dscale = finiteDiffVJP([&](const std::vector<double> &ss) { return normRef(rms, x, ss, bias, N, eps); }, scale, dy);
  g.dbias = finiteDiffVJP([&](const std::vector<double> &bb) { return normRef(rms, x, scale, bb, N, eps); }, bias, dy);
  return g;
}

void checkNormGradFD(bool rms, const std::vector<int64_t> &shape, int64_t axis) {
  SCOPED_TRACE(std::string(rms ? "rms_norm_grad " : "layer_norm_grad ") + shapeToString(shape) + " axis " +
               std::to_string(axis));
  std::mt19937 rng(17);
  std::vector<int64_t> tail(shape.begin() + axis, shape.end());
  HostTensor x = randomF32(shape, rng, -2, 3), scale = randomF32(tail, rng, 0.5f, 1.5f),
             dy = randomF32(shape, rng);
  const double eps = 1e-5;
  const int64_t N = numElements(tail);
  NormGrads want = normFiniteDiff(rms, asDoubles(x), asDoubles(scale), asDoubles(dy), N, eps);
  const char *op = rms ? "rms_norm_grad" : "layer_norm_grad";
  Attrs attrs = Attrs().i("axis", axis).f("epsilon", eps);

  HostTensor dx(DType::F32, shape), ds(DType::F32, tail), db(DType::F32, tail);
  std::vector<HostTensor *> outs = {&dx, &ds};
  if (!rms) outs.push_back(&db);
  ASSERT_NO_ERR(runKernel(op, {&x, &scale, &dy}, outs, attrs));
  expectClose(dx.data<float>(), toFloat(want.dx).data(), dx.numel(), 1e-4f, 1e-3f);
  expectClose(ds.data<float>(), toFloat(want.dscale).data(), ds.numel(), 1e-4f, 1e-4f);
  if (!rms) expectClose(db.data<float>(), toFloat(want.dbias).data(), db.numel(), 1e-4f, 1e-4f);

  HostTensor x6 = f64Of(x), s6 = f64Of(scale), dy6 = f64Of(dy);
  HostTensor dx6(DType::F64, shape), ds6(DType::F64, tail), db6(DType::F64, tail);
  std::vector<HostTensor *> outs6 = {&dx6, &ds6};
  if (!rms) outs6.push_back(&db6);
  ASSERT_NO_ERR(runKernel(op, {&x6, &s6, &dy6}, outs6, attrs));
  expectClose64(dx6.data<double>(), want.dx.data(), dx6.numel(), 1e-7, 1e-6);
  expectClose64(ds6.data<double>(), want.dscale.data(), ds6.numel(), 1e-7, 1e-6);
  if (!rms) expectClose64(db6.data<double>(), want.dbias.data(), db6.numel(), 1e-7, 1e-6);
}

TEST(GradKernels, LayerNormGradFiniteDiff) {
  checkNormGradFD(false, {5, 7}, 1);
  checkNormGradFD(false, {2, 3, 2, 5}, 2);  // normalized over two dims
  checkNormGradFD(false, {19, 6}, 1);       // more rows than reduction chunks
  checkNormGradFD(false, {9}, 0);           // one row
}

TEST(GradKernels, RmsNormGradFiniteDiff) {
  checkNormGradFD(true, {5, 7}, 1);
  checkNormGradFD(true, {2, 3, 2, 5}, 2);
  checkNormGradFD(true, {19, 6}, 1);
}

/// Training size (rows 2048, width 384): the analytic formulas in float64, and identical bits
/// run to run and for 1 or 2 threads.
void checkNormGradLarge(bool rms) {
  SCOPED_TRACE(rms ? "rms_norm_grad" : "layer_norm_grad");
  const int64_t R = 2048, N = 384;
  const double eps = 1e-5;
  std::mt19937 rng(3);
  HostTensor x = randomF32({R, N}, rng, -2, 3), scale = randomF32({N}, rng, 0.5f, 1.5f), dy = randomF32({R, N}, rng);
  std::vector<double> dx(R * N), ds(N, 0.0), db(N, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const float *px = x.data<float>() + r * N, *pg = dy.data<float>() + r * N;
    const float *sc = scale.data<float>();
    double mean = 0, sq = 0, var = 0;
    for (int64_t i = 0; i < N; ++i) { mean += px[i]; sq += double(px[i]) * px[i]; }
    mean /= N;
    for (int64_t i = 0; i < N; ++i) var += (px[i] - mean) * (px[i] - mean);
    var /= N;
    if (rms) {
      const double rr = 1 / std::sqrt(sq / N + eps);
      double gx = 0;
      for (int64_t i = 0; i < N; ++i) gx += double(pg[i]) * sc[i] * px[i];
      for (int64_t i = 0; i < N; ++i) {
        dx[r * N + i] = rr * pg[i] * sc[i] - px[i] * rr * rr * rr * gx / N;
        ds[i] += double(pg[i]) * px[i] * rr;
      }
    } else {
      const double rs = 1 / std::sqrt(var + eps);
      double mg = 0, mgx = 0;
      for (int64_t i = 0; i < N; ++i) {
        mg += double(pg[i]) * sc[i];
        mgx += double(pg[i]) * sc[i] * (px[i] - mean) * rs;
      }
      mg /= N;
      mgx /= N;
      for (int64_t i = 0; i < N; ++i) {
        const double xh = (px[i] - mean) * rs;
        dx[r * N + i] = rs * (double(pg[i]) * sc[i] - mg - xh * mgx);
        ds[i] += pg[i] * xh;
        db[i] += pg[i];
      }
    }
  }
  const char *op = rms ? "rms_norm_grad" : "layer_norm_grad";
  Attrs attrs = Attrs().i("axis", 1).f("epsilon", eps);
  auto run = [&](HostTensor &gx, HostTensor &gs, HostTensor &gb) {
    std::vector<HostTensor *> outs = {&gx, &gs};
    if (!rms) outs.push_back(&gb);
    ASSERT_NO_ERR(runKernel(op, {&x, &scale, &dy}, outs, attrs));
  };
  HostTensor gx(DType::F32, {R, N}), gs(DType::F32, {N}), gb(DType::F32, {N});
  withThreads(2, [&] { run(gx, gs, gb); });
  expectClose(gx.data<float>(), toFloat(dx).data(), R * N, 1e-5f, 1e-4f);
  expectClose(gs.data<float>(), toFloat(ds).data(), N, 1e-3f, 1e-4f);
  if (!rms) expectClose(gb.data<float>(), toFloat(db).data(), N, 1e-3f, 1e-4f);

  HostTensor gx2(DType::F32, {R, N}), gs2(DType::F32, {N}), gb2(DType::F32, {N});
  HostTensor gx1(DType::F32, {R, N}), gs1(DType::F32, {N}), gb1(DType::F32, {N});
  withThreads(2, [&] { run(gx2, gs2, gb2); });
  withThreads(1, [&] { run(gx1, gs1, gb1); });
  EXPECT_TRUE(sameBits(gx, gx2) && sameBits(gs, gs2) && (rms || sameBits(gb, gb2))) << "run to run";
  EXPECT_TRUE(sameBits(gx, gx1) && sameBits(gs, gs1) && (rms || sameBits(gb, gb1))) << "1 vs 2 threads";
}

TEST(GradKernels, LayerNormGradLargeDeterministic) { checkNormGradLarge(false); }
TEST(GradKernels, RmsNormGradLargeDeterministic) { checkNormGradLarge(true); }

TEST(GradKernels, NormGradErrors) {
  HostTensor x(DType::F32, {4, 8}), s(DType::F32, {4}), dy(DType::F32, {4, 8});
  HostTensor dx(DType::F32, {4, 8}), ds(DType::F32, {8}), db(DType::F32, {8});
  EXPECT_NE(errorMessage(verifyKernel("layer_norm_grad", {&x, &s, &dy}, {&dx, &ds, &db})).find("scale has shape"),
            std::string::npos);
  HostTensor s8(DType::F32, {8}), ds4(DType::F32, {4});
  EXPECT_NE(errorMessage(verifyKernel("layer_norm_grad", {&x, &s8, &dy}, {&dx, &ds, &ds4})).find("dbias has shape"),
            std::string::npos);
  HostTensor dyBad(DType::F32, {4, 7});
  EXPECT_NE(errorMessage(verifyKernel("rms_norm_grad", {&x, &s8, &dyBad}, {&dx, &ds})).find("x and dy"),
            std::string::npos);
}

// ---------------------------------------------------------------- unary_grad

struct UnaryCase {
  const char *fn;
  std::function<double(double)> f;  // forward, float64
  double lo, hi;                    // sampling range (kinks excluded by `awayFromZero`)
  bool awayFromZero = false;
  double alpha = std::nan("");      // attribute, when the fn takes one
};

std::vector<UnaryCase> unaryCases() {
  const double a = 0.2, e = 1.3;
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  return {
      {"relu", [](double x) { return std::max(x, 0.0); }, -3, 3, true},
      {"sigmoid", sig, -6, 6},
      {"tanh", [](double x) { return std::tanh(x); }, -3, 3},
      {"exp", [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](double x) { return std::log(x); }, 0.1, 5},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0.1, 5},
      {"reciprocal", [](double x) { return 1 / x; }, 0.3, 4},
      {"erf", [](double x) { return std::erf(x); }, -3, 3},
      {"abs", [](double x) { return std::fabs(x); }, -3, 3, true},
      {"silu", [sig](double x) { return x * sig(x); }, -6, 6},
      {"gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -5, 5},
      {"gelu_tanh",
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, -5, 5},
      {"sin", [](double x) { return std::sin(x); }, -4, 4},
      {"cos", [](double x) { return std::cos(x); }, -4, 4},
      {"softplus", [](double x) { return std::log1p(std::exp(x)); }, -8, 8},
      {"leaky_relu", [a](double x) { return x >= 0 ? x : a * x; }, -3, 3, true, a},
      {"elu", [e](double x) { return x >= 0 ? x : e * std::expm1(x); }, -3, 3, true, e},
  };
}

TEST(GradKernels, UnaryGradEveryFn) {
  for (const UnaryCase &uc : unaryCases()) {
    SCOPED_TRACE(uc.fn);
    std::mt19937 rng(11);
    const int64_t n = 1000;
    HostTensor x = randomF32({n}, rng, static_cast<float>(uc.lo), static_cast<float>(uc.hi));
    if (uc.awayFromZero)
      for (int64_t i = 0; i < n; ++i)
        if (std::fabs(x.data<float>()[i]) < 1e-2f) x.data<float>()[i] = 0.5f;
    HostTensor dy = randomF32({n}, rng), dx(DType::F32, {n});
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      const double xi = x.data<float>()[i], h = 1e-6 * std::max(1.0, std::fabs(xi));
      want[i] = dy.data<float>()[i] * (uc.f(xi + h) - uc.f(xi - h)) / (2 * h);
    }
    Attrs attrs = Attrs().s("fn", uc.fn);
    if (!std::isnan(uc.alpha)) attrs.f("alpha", uc.alpha);
    ASSERT_NO_ERR(runKernel("unary_grad", {&x, &dy}, {&dx}, attrs));
    expectClose(dx.data<float>(), toFloat(want).data(), n, 2e-6f, 2e-5f);
    HostTensor x6 = f64Of(x), dy6 = f64Of(dy), dx6(DType::F64, {n});
    ASSERT_NO_ERR(runKernel("unary_grad", {&x6, &dy6}, {&dx6}, attrs));
    expectClose64(dx6.data<double>(), want.data(), n, 1e-8, 1e-6);
    // In place: dx aliasing x, then dx aliasing dy.
    HostTensor xCopy = clone(x);
    ASSERT_NO_ERR(runKernel("unary_grad", {&xCopy, &dy}, {&xCopy}, attrs));
    EXPECT_TRUE(sameBits(xCopy, dx)) << "dx aliasing x";
    ASSERT_NO_ERR(runKernel("unary_grad", {&x, &dy}, {&dy}, attrs));
    EXPECT_TRUE(sameBits(dy, dx)) << "dx aliasing dy";
  }
}

TEST(GradKernels, UnaryGradKinks) {
  HostTensor x(DType::F32, {3}), dy(DType::F32, {3}), dx(DType::F32, {3});
  const float xs[3] = {-1.0f, 0.0f, 2.0f};
  std::copy(xs, xs + 3, x.data<float>());
  std::fill(dy.data<float>(), dy.data<float>() + 3, 2.0f);
  auto grads = [&](Attrs attrs) {
    EXPECT_FALSE(static_cast<bool>(runKernel("unary_grad", {&x, &dy}, {&dx}, attrs)));
    return std::vector<float>(dx.data<float>(), dx.data<float>() + 3);
  };
  EXPECT_EQ(grads(Attrs().s("fn", "relu")), (std::vector<float>{0, 0, 2}));
  EXPECT_EQ(grads(Attrs().s("fn", "abs")), (std::vector<float>{-2, 0, 2}));
  EXPECT_EQ(grads(Attrs().s("fn", "leaky_relu").f("alpha", 0.25)), (std::vector<float>{0.5f, 0.5f, 2}));
  std::vector<float> elu = grads(Attrs().s("fn", "elu").f("alpha", 0.5));
  EXPECT_NEAR(elu[0], 2 * 0.5 * std::exp(-1.0), 1e-6);
  EXPECT_NEAR(elu[1], 2 * 0.5, 1e-6);
  EXPECT_EQ(elu[2], 2.0f);
}

TEST(GradKernels, UnaryGradErrors) {
  HostTensor x(DType::F32, {4}), dy(DType::F32, {4}), dx(DType::F32, {4});
  EXPECT_NE(errorMessage(verifyKernel("unary_grad", {&x, &dy}, {&dx}, Attrs().s("fn", "cosh"))).find("unknown fn 'cosh'"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("unary_grad", {&x, &dy}, {&dx}, Attrs().s("fn", "elu"))).find("alpha"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("unary_grad", {&x, &dy}, {&dx}, Attrs().s("fn", "relu").f("alpha", 1)))
                .find("takes no attribute alpha"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("unary_grad", {&x, &dy}, {&dx})).find("missing attribute 'fn'"),
            std::string::npos);
}

// ---------------------------------------------------------------- attention_grad

enum class MaskKind { None, Additive, Bool };

struct AttnCase {
  int64_t B, Hq, Hkv, Tq, Tk, D, Dv;
  bool causal;
  MaskKind mask;
  std::vector<int64_t> maskShape;
};

std::string describe(const AttnCase &c) {
  return "B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" + std::to_string(c.Hkv) + " Tq" +
         std::to_string(c.Tq) + " Tk" + std::to_string(c.Tk) + " D" + std::to_string(c.D) + " Dv" +
         std::to_string(c.Dv) + (c.causal ? " causal" : "") +
         (c.mask == MaskKind::None ? "" : c.mask == MaskKind::Bool ? " bool mask " : " additive mask ") +
         (c.mask == MaskKind::None ? "" : shapeToString(c.maskShape));
}

struct AttnData {
  HostTensor q, k, v, mask, y, dy;
  std::vector<HostTensor *> inputs(bool withMask) {
    std::vector<HostTensor *> ins = {&q, &k, &v};
    if (withMask) ins.push_back(&mask);
    return ins;
  }
};

AttnData makeAttnData(const AttnCase &c, double scale) {
  std::mt19937 rng(29);
  AttnData a;
  a.q = randomF32({c.B, c.Hq, c.Tq, c.D}, rng, -1.5f, 1.5f);
  a.k = randomF32({c.B, c.Hkv, c.Tk, c.D}, rng, -1.5f, 1.5f);
  a.v = randomF32({c.B, c.Hkv, c.Tk, c.Dv}, rng);
  if (c.mask == MaskKind::Additive) {
    a.mask = randomF32(c.maskShape, rng, -2, 1);
    for (int64_t i = 0; i < a.mask.numel(); i += 5) a.mask.data<float>()[i] = -std::numeric_limits<float>::infinity();
  } else if (c.mask == MaskKind::Bool) {
    a.mask = randomBool(c.maskShape, rng, 0.7);
  }
  a.y = HostTensor(DType::F32, {c.B, c.Hq, c.Tq, c.Dv});
  a.dy = randomF32({c.B, c.Hq, c.Tq, c.Dv}, rng);
  EXPECT_FALSE(static_cast<bool>(runKernel("attention", a.inputs(c.mask != MaskKind::None), {&a.y},
                                           Attrs().f("scale", scale).i("causal", c.causal))));
  return a;
}

/// Naive float64 attention backward: per (b, h, i) the full probability row P, then
/// dV += Pᵀ·dY, dP = dY·Vᵀ, dS = P∘(dP − Σ_j P·dP), dQ = scale·dS·K, dK += scale·dSᵀ·Q.
void attentionGradRef(const AttnCase &c, AttnData &a, double scale, std::vector<double> &dq,
                      std::vector<double> &dk, std::vector<double> &dv) {
  dq.assign(a.q.numel(), 0);
  dk.assign(a.k.numel(), 0);
  dv.assign(a.v.numel(), 0);
  const int64_t group = c.Hq / c.Hkv;
  std::vector<double> p(c.Tk), dp(c.Tk);
  const float *q = a.q.data<float>(), *k = a.k.data<float>(), *v = a.v.data<float>(), *dy = a.dy.data<float>();
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Tq; ++i) {
        const int64_t qi = ((b * c.Hq + h) * c.Tq + i);
        const int64_t kvBase = (b * c.Hkv + h / group) * c.Tk;
        double m = -INFINITY;
        for (int64_t j = 0; j < c.Tk; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += double(q[qi * c.D + d]) * k[(kvBase + j) * c.D + d];
          p[j] = dot * scale;
          if (c.causal && j > i + c.Tk - c.Tq) p[j] = -INFINITY;
          if (c.mask != MaskKind::None) {
            const int64_t mi = broadcastIndex({b, h, i, j}, c.maskShape);
            if (c.mask == MaskKind::Additive) p[j] += a.mask.data<float>()[mi];
            else if (!a.mask.data<uint8_t>()[mi]) p[j] = -INFINITY;
          }
          m = std::max(m, p[j]);
        }
        if (m == -INFINITY) continue;  // the row sees no key: output 0, no gradient
        double l = 0;
        for (int64_t j = 0; j < c.Tk; ++j) l += (p[j] = std::exp(p[j] - m));
        double rowDot = 0;
        for (int64_t j = 0; j < c.Tk; ++j) {
          p[j] /= l;
          double s = 0;
          for (int64_t e = 0; e < c.Dv; ++e) s += double(dy[qi * c.Dv + e]) * v[(kvBase + j) * c.Dv + e];
          dp[j] = s;
          rowDot += p[j] * s;
        }
        for (int64_t j = 0; j < c.Tk; ++j) {
          for (int64_t e = 0; e < c.Dv; ++e) dv[(kvBase + j) * c.Dv + e] += p[j] * dy[qi * c.Dv + e];
          const double ds = p[j] * (dp[j] - rowDot) * scale;
          for (int64_t d = 0; d < c.D; ++d) {
            dq[qi * c.D + d] += ds * k[(kvBase + j) * c.D + d];
            dk[(kvBase + j) * c.D + d] += ds * q[qi * c.D + d];
          }
        }
      }
}

void checkAttentionGrad(const AttnCase &c, bool finiteDiff = false) {
  SCOPED_TRACE(describe(c));
  const double scale = 0.35;
  AttnData a = makeAttnData(c, scale);
  const bool withMask = c.mask != MaskKind::None;
  Attrs attrs = Attrs().f("scale", scale).i("causal", c.causal);
  HostTensor dq(DType::F32, a.q.shape), dk(DType::F32, a.k.shape), dv(DType::F32, a.v.shape);
  std::vector<HostTensor *> ins = a.inputs(withMask);
  ins.push_back(&a.y);
  ins.push_back(&a.dy);
  ASSERT_NO_ERR(runKernel("attention_grad", ins, {&dq, &dk, &dv}, attrs));

  std::vector<double> rq, rk, rv;
  attentionGradRef(c, a, scale, rq, rk, rv);
  {
    SCOPED_TRACE("dq");
    expectClose(dq.data<float>(), toFloat(rq).data(), dq.numel(), 5e-5f, 1e-3f);
  }
  {
    SCOPED_TRACE("dk");
    expectClose(dk.data<float>(), toFloat(rk).data(), dk.numel(), 5e-5f, 1e-3f);
  }
  {
    SCOPED_TRACE("dv");
    expectClose(dv.data<float>(), toFloat(rv).data(), dv.numel(), 5e-5f, 1e-3f);
  }

  // Same bits run to run; and for 1 and 2 threads when there are several (batch, kv head) items,
  // each summed by one thread in a fixed order (a single item lets the GEMMs use every thread).
  HostTensor dq2(DType::F32, a.q.shape), dk2(DType::F32, a.k.shape), dv2(DType::F32, a.v.shape);
  ASSERT_NO_ERR(runKernel("attention_grad", ins, {&dq2, &dk2, &dv2}, attrs));
  EXPECT_TRUE(sameBits(dq, dq2) && sameBits(dk, dk2) && sameBits(dv, dv2)) << "run to run";
  if (c.B * c.Hkv > 1) {
    HostTensor dq1(DType::F32, a.q.shape), dk1(DType::F32, a.k.shape), dv1(DType::F32, a.v.shape);
    withThreads(1, [&] { ASSERT_NO_ERR(runKernel("attention_grad", ins, {&dq1, &dk1, &dv1}, attrs)); });
    EXPECT_TRUE(sameBits(dq, dq1) && sameBits(dk, dk1) && sameBits(dv, dv1)) << "1 vs 2 threads";
  }

  if (!finiteDiff) return;
  // Directional derivatives of L = Σ dy·attention(q, k, v) through the forward f32 kernel:
  // (L(t + h·u) − L(t − h·u)) / 2h ≈ <grad_t, u>, for random directions u of q, k and v.
  std::mt19937 rng(43);
  auto loss = [&]() {
    HostTensor y(DType::F32, a.y.shape);
    EXPECT_FALSE(static_cast<bool>(runKernel("attention", a.inputs(withMask), {&y}, attrs)));
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += double(a.dy.data<float>()[i]) * y.data<float>()[i];
    return s;
  };
  const float h = 1e-2f;
  for (int trial = 0; trial < 3; ++trial)
    for (int which = 0; which < 3; ++which) {
      HostTensor &t = which == 0 ? a.q : which == 1 ? a.k : a.v;
      const HostTensor &g = which == 0 ? dq : which == 1 ? dk : dv;
      HostTensor u = randomF32(t.shape, rng);
      HostTensor saved = clone(t);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = saved.data<float>()[i] + h * u.data<float>()[i];
      const double up = loss();
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = saved.data<float>()[i] - h * u.data<float>()[i];
      const double dn = loss();
      std::memcpy(t.buf.data(), saved.buf.data(), t.buf.size());
      double want = 0;
      for (int64_t i = 0; i < t.numel(); ++i) want += double(g.data<float>()[i]) * u.data<float>()[i];
      const double fd = (up - dn) / (2 * h);
      EXPECT_NEAR(fd, want, 2e-3 * (1 + std::fabs(want))) << "direction " << trial << " of " << "qkv"[which];
    }
}

TEST(GradKernels, AttentionGradPlain) {
  checkAttentionGrad({2, 3, 3, 20, 20, 16, 16, false, MaskKind::None, {}}, true);
  checkAttentionGrad({1, 2, 2, 64, 64, 32, 32, false, MaskKind::None, {}});
}

TEST(GradKernels, AttentionGradCausal) {
  checkAttentionGrad({2, 2, 2, 37, 37, 16, 16, true, MaskKind::None, {}}, true);
  checkAttentionGrad({1, 2, 2, 150, 150, 24, 24, true, MaskKind::None, {}});  // several query blocks
  checkAttentionGrad({1, 2, 2, 13, 70, 16, 8, true, MaskKind::None, {}});     // Tq < Tk (bottom-right)
  checkAttentionGrad({1, 2, 2, 70, 13, 16, 8, true, MaskKind::None, {}});     // Tq > Tk: rows with no key
}

TEST(GradKernels, AttentionGradMasks) {
  checkAttentionGrad({2, 2, 2, 19, 23, 16, 12, false, MaskKind::Additive, {2, 1, 19, 23}}, true);
  checkAttentionGrad({2, 2, 2, 19, 23, 16, 12, true, MaskKind::Additive, {23}});
  checkAttentionGrad({2, 2, 2, 19, 23, 16, 12, false, MaskKind::Bool, {2, 2, 19, 23}}, true);
  checkAttentionGrad({1, 2, 2, 67, 131, 8, 8, true, MaskKind::Bool, {1, 1, 67, 131}});
}

TEST(GradKernels, AttentionGradGQA) {
  checkAttentionGrad({2, 4, 2, 33, 45, 16, 16, false, MaskKind::None, {}}, true);
  checkAttentionGrad({1, 6, 3, 70, 70, 16, 24, true, MaskKind::Additive, {1, 6, 70, 70}});
  checkAttentionGrad({1, 4, 1, 17, 29, 8, 8, true, MaskKind::None, {}});  // MQA
}

TEST(GradKernels, AttentionGradOddAndLongSizes) {
  checkAttentionGrad({1, 1, 1, 67, 131, 24, 40, false, MaskKind::None, {}});
  checkAttentionGrad({1, 1, 1, 1, 1, 3, 5, false, MaskKind::None, {}});
  checkAttentionGrad({1, 1, 1, 90, 2100, 16, 16, false, MaskKind::None, {}});  // smaller query blocks
}

TEST(GradKernels, AttentionGradErrors) {
  HostTensor q(DType::F32, {1, 2, 4, 8}), k(DType::F32, {1, 2, 5, 8}), v(DType::F32, {1, 2, 5, 8});
  HostTensor y(DType::F32, {1, 2, 4, 8}), dy(DType::F32, {1, 2, 4, 8});
  HostTensor dq(DType::F32, {1, 2, 4, 8}), dk(DType::F32, {1, 2, 5, 8}), dv(DType::F32, {1, 2, 5, 8});
  HostTensor badMask(DType::F32, {3, 5});
  EXPECT_NE(errorMessage(verifyKernel("attention_grad", {&q, &k, &v, &badMask, &y, &dy}, {&dq, &dk, &dv}))
                .find("mask shape"),
            std::string::npos);
  HostTensor badDy(DType::F32, {1, 2, 4, 7});
  EXPECT_NE(errorMessage(verifyKernel("attention_grad", {&q, &k, &v, &y, &badDy}, {&dq, &dk, &dv})).find("dy"),
            std::string::npos);
  HostTensor badDk(DType::F32, {1, 2, 4, 8});
  EXPECT_NE(errorMessage(verifyKernel("attention_grad", {&q, &k, &v, &y, &dy}, {&dq, &badDk, &dv})).find("dk and k"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("attention_grad", {&q, &k, &v, &y, &dy}, {&dq, &dk, &dv}, Attrs().i("causal", 2)))
                .find("causal"),
            std::string::npos);
}

// ---------------------------------------------------------------- gather_grad

template <typename Idx> void checkGatherGrad(DType dt, const std::vector<int64_t> &dataShape, int64_t axis,
                                             const std::vector<int64_t> &idxShape, const std::vector<int64_t> &idxVals) {
  SCOPED_TRACE("gather_grad " + shapeToString(dataShape) + " axis " + std::to_string(axis) + " indices " +
               shapeToString(idxShape) + (dt == DType::F64 ? " f64" : " f32"));
  HostTensor idx(sizeof(Idx) == 8 ? DType::I64 : DType::I32, idxShape);
  for (int64_t i = 0; i < idx.numel(); ++i) idx.data<Idx>()[i] = static_cast<Idx>(idxVals[i % idxVals.size()]);
  std::vector<int64_t> dyShape(dataShape.begin(), dataShape.begin() + axis);
  dyShape.insert(dyShape.end(), idxShape.begin(), idxShape.end());
  dyShape.insert(dyShape.end(), dataShape.begin() + axis + 1, dataShape.end());
  std::mt19937 rng(7);
  HostTensor dy32 = randomF32(dyShape, rng);
  HostTensor dy = dt == DType::F64 ? f64Of(dy32) : clone(dy32);
  HostTensor dd(dt, dataShape);

  // Naive reference: every dy element added to ddata, in dy order (= index order per destination),
  // in the kernel's dtype, so the expected sums carry the same rounding.
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= dataShape[i];
  for (size_t i = axis + 1; i < dataShape.size(); ++i) inner *= dataShape[i];
  const int64_t A = dataShape[axis], n = idx.numel();
  std::vector<float> want32(dd.numel(), 0.0f);
  std::vector<double> want64(dd.numel(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < n; ++i) {
      int64_t t = idx.data<Idx>()[i];
      if (t < 0) t += A;
      for (int64_t j = 0; j < inner; ++j) {
        const int64_t src = (o * n + i) * inner + j, dst = (o * A + t) * inner + j;
        want32[dst] += dy32.data<float>()[src];
        want64[dst] += double(dy32.data<float>()[src]);
      }
    }
  ASSERT_NO_ERR(runKernel("gather_grad", {&idx, &dy}, {&dd}, Attrs().i("axis", axis)));
  if (dt == DType::F64) {
    expectClose64(dd.data<double>(), want64.data(), dd.numel(), 0, 0);
  } else {
    EXPECT_EQ(std::memcmp(dd.data<float>(), want32.data(), dd.numel() * sizeof(float)), 0)
        << "f32 sums must be exact in index order";
  }
}

TEST(GradKernels, GatherGradEmbedding) {
  // Embedding: [V, D] table, [B, T] token ids with repeats and negatives.
  std::vector<int64_t> ids;
  for (int i = 0; i < 97; ++i) ids.push_back((i * 37) % 50 - 10);  // -10..39 (negatives count from the end)
  checkGatherGrad<int64_t>(DType::F32, {50, 384}, 0, {8, 64}, ids);
  checkGatherGrad<int32_t>(DType::F32, {50, 3}, 0, {8, 64}, ids);
  checkGatherGrad<int64_t>(DType::F64, {50, 7}, 0, {4, 16}, ids);
}

TEST(GradKernels, GatherGradInnerAxes) {
  checkGatherGrad<int64_t>(DType::F32, {3, 5, 4}, 1, {7}, {0, -1, 4, 4, 2, -5, 0});
  checkGatherGrad<int32_t>(DType::F32, {6, 4}, 1, {2, 3}, {3, -4, 1, 1, 3, 0});
  checkGatherGrad<int64_t>(DType::F64, {2, 3, 9}, 2, {5}, {8, -9, 8, 2, -1});
  checkGatherGrad<int64_t>(DType::F32, {4, 2}, 0, {}, {-1});  // scalar index
}

TEST(GradKernels, GatherGradErrors) {
  HostTensor idx(DType::I64, {3}), dy(DType::F32, {3, 4}), dd(DType::F32, {5, 4});
  idx.data<int64_t>()[0] = 0;
  idx.data<int64_t>()[1] = 5;
  idx.data<int64_t>()[2] = 1;
  EXPECT_NE(errorMessage(runKernel("gather_grad", {&idx, &dy}, {&dd}, Attrs().i("axis", 0)))
                .find("index 5 at position 1 is out of range"),
            std::string::npos);
  HostTensor dyBad(DType::F32, {3, 5});
  EXPECT_NE(errorMessage(verifyKernel("gather_grad", {&idx, &dyBad}, {&dd}, Attrs().i("axis", 0))).find("dy has shape"),
            std::string::npos);
  HostTensor fidx(DType::F32, {3});
  EXPECT_NE(errorMessage(verifyKernel("gather_grad", {&fidx, &dy}, {&dd}, Attrs().i("axis", 0))).find("indices must be"),
            std::string::npos);
}

// ---------------------------------------------------------------- slice_grad

template <typename T>
void checkSliceGrad(DType dt, const std::vector<int64_t> &xShape, const std::vector<int64_t> &starts,
                    const std::vector<int64_t> &steps, const std::vector<int64_t> &yShape) {
  SCOPED_TRACE("slice_grad " + shapeToString(xShape) + " -> " + shapeToString(yShape));
  std::mt19937 rng(13);
  HostTensor dy32 = randomF32(yShape, rng, 1, 2);  // nonzero, so untouched zeros are visible
  HostTensor dy = dt == DType::F64 ? f64Of(dy32) : clone(dy32);
  HostTensor dx(dt, xShape);
  std::fill(static_cast<char *>(dx.buf.data()), static_cast<char *>(dx.buf.data()) + dx.buf.size(), 0x7f);
  ASSERT_NO_ERR(runKernel("slice_grad", {&dy}, {&dx}, Attrs().ints("starts", starts).ints("steps", steps)));
  std::vector<T> want(dx.numel(), T(0));
  for (int64_t i = 0; i < dy.numel(); ++i) {
    std::vector<int64_t> yi = unravel(i, yShape);
    int64_t flat = 0;
    for (size_t d = 0; d < xShape.size(); ++d) flat = flat * xShape[d] + starts[d] + yi[d] * steps[d];
    want[flat] = dy.data<T>()[i];
  }
  EXPECT_EQ(std::memcmp(dx.data<T>(), want.data(), want.size() * sizeof(T)), 0);
}

TEST(GradKernels, SliceGrad) {
  checkSliceGrad<float>(DType::F32, {10}, {1}, {3}, {3});
  checkSliceGrad<float>(DType::F32, {10}, {9}, {-2}, {5});                // negative step
  checkSliceGrad<float>(DType::F32, {4, 6, 5}, {3, 1, 4}, {-1, 2, -3}, {4, 3, 2});
  checkSliceGrad<double>(DType::F64, {4, 6, 5}, {0, 5, 0}, {2, -1, 1}, {2, 6, 5});
  checkSliceGrad<float>(DType::F32, {8, 256, 384}, {0, 0, 128}, {1, 1, 1}, {8, 256, 128});  // qkv split
  checkSliceGrad<float>(DType::F32, {3, 4}, {0, 0}, {1, 1}, {0, 4});      // empty slice: zeros
}

TEST(GradKernels, SliceGradErrors) {
  HostTensor dy(DType::F32, {4}), dx(DType::F32, {10});
  EXPECT_NE(errorMessage(verifyKernel("slice_grad", {&dy}, {&dx}, Attrs().ints("starts", {8}).ints("steps", {1})))
                .find("leave dx's size 10"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("slice_grad", {&dy}, {&dx}, Attrs().ints("starts", {0}).ints("steps", {0})))
                .find("step 0"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("slice_grad", {&dy}, {&dx}, Attrs().ints("starts", {0, 0}).ints("steps", {1, 1})))
                .find("one entry per dim"),
            std::string::npos);
}

}  // namespace

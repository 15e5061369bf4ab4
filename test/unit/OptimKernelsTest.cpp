//===- OptimKernelsTest.cpp - Optimizer, global norm and cross-entropy kernels ---------------===//
//
// Two independent references:
//  - naive float64 loops of the formulas in docs/training.md "Optimizer semantics" and
//    docs/plan.md (written here, step by step, t = 1..5);
//  - PyTorch 1.13 itself: optim_reference.py runs torch.optim.AdamW/Adam/SGD with
//    clip_grad_norm_ and torch.nn.functional.cross_entropy on seeded tensors and writes .npy files
//    that the *MatchesPyTorch tests feed to the kernels.
//
//===----------------------------------------------------------------------------------------===//
#include "TestPlans.h"
#include "TestUtil.h"

#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Npy.h"
#include "colossal/runtime/Plan.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <omp.h>
#include <optional>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

//===------------------------------------------------------------------------------------===//
// Helpers
//===------------------------------------------------------------------------------------===//

HostTensor scalarF32(float v) {
  HostTensor t(DType::F32, {});
  *t.data<float>() = v;
  return t;
}
HostTensor scalarI64(int64_t v) {
  HostTensor t(DType::I64, {});
  *t.data<int64_t>() = v;
  return t;
}
HostTensor copyOf(const HostTensor &t) {
  HostTensor c(t.dtype, t.shape);
  std::memcpy(c.buf.data(), t.buf.data(), t.buf.size());
  return c;
}
std::vector<double> toDouble(const HostTensor &t) {
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}
std::vector<float> toFloat(const std::vector<double> &v) { return std::vector<float>(v.begin(), v.end()); }
void expectAllZero(const HostTensor &t, const char *what) {
  int64_t nonzero = 0;
  for (int64_t i = 0; i < t.numel(); ++i) nonzero += t.data<float>()[i] != 0.0f;
  EXPECT_EQ(nonzero, 0) << what << " must be zeroed";
}

/// An optimizer configuration (attrs of the update instruction).
struct Opt {
  std::string kind;  // adamw | adam | sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0, momentum = 0, dampening = 0;
  bool nesterov = false;
  double maxNorm = 0;

  bool hasBuf() const { return kind == "sgd" && momentum != 0; }
  std::string describe() const {
    return kind + " wd=" + std::to_string(wd) + " momentum=" + std::to_string(momentum) + " dampening=" +
           std::to_string(dampening) + (nesterov ? " nesterov" : "") + " max_grad_norm=" + std::to_string(maxNorm);
  }
  Attrs attrs() const {
    Attrs a;
    a.f("weight_decay", wd).f("max_grad_norm", maxNorm);
    if (kind == "sgd") a.f("momentum", momentum).f("dampening", dampening).i("nesterov", nesterov);
    else a.f("beta1", beta1).f("beta2", beta2).f("eps", eps);
    return a;
  }
};

/// One parameter's tensors: p, g and the optimizer state (m, v for Adam; buf for SGD momentum).
struct ParamState {
  HostTensor p, g, m, v, buf;
};

/// Runs `<kind>_update` in place (outputs are the input buffers).
llvm::Error runUpdate(const Opt &o, ParamState &s, float lr, int64_t step, float gradNorm) {
  HostTensor lrT = scalarF32(lr), stepT = scalarI64(step), normT = scalarF32(gradNorm);
  if (o.kind == "sgd") {
    if (o.hasBuf())
      return runKernel("sgd_update", {&s.p, &s.g, &s.buf, &lrT, &stepT, &normT}, {&s.p, &s.g, &s.buf}, o.attrs());
    return runKernel("sgd_update", {&s.p, &s.g, &lrT, &stepT, &normT}, {&s.p, &s.g}, o.attrs());
  }
  return runKernel(o.kind + "_update", {&s.p, &s.g, &s.m, &s.v, &lrT, &stepT, &normT}, {&s.p, &s.g, &s.m, &s.v},
                   o.attrs());
}

//===------------------------------------------------------------------------------------===//
// Naive float64 reference of docs/training.md "Optimizer semantics"
//===------------------------------------------------------------------------------------===//

struct RefState {
  std::vector<double> p, m, v, buf;
};

void referenceStep(const Opt &o, RefState &s, const std::vector<double> &grad, double lr, int64_t t,
                   double gradNorm) {
  double clip = o.maxNorm > 0 ? std::min(1.0, o.maxNorm / (gradNorm + 1e-6)) : 1.0;
  for (size_t i = 0; i < s.p.size(); ++i) {
    double g = grad[i] * clip;
    if (o.kind == "adamw" || o.kind == "adam") {
      if (o.kind == "adamw") s.p[i] *= 1 - lr * o.wd;
      else g += o.wd * s.p[i];
      s.m[i] = o.beta1 * s.m[i] + (1 - o.beta1) * g;
      s.v[i] = o.beta2 * s.v[i] + (1 - o.beta2) * g * g;
      double bc1 = 1 - std::pow(o.beta1, double(t)), bc2 = 1 - std::pow(o.beta2, double(t));
      s.p[i] -= (lr / bc1) * s.m[i] / (std::sqrt(s.v[i]) / std::sqrt(bc2) + o.eps);
    } else {
      g += o.wd * s.p[i];
      if (o.momentum != 0) {
        s.buf[i] = t == 1 ? g : o.momentum * s.buf[i] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * s.buf[i] : s.buf[i];
      }
      s.p[i] -= lr * g;
    }
  }
}

/// Five steps of `o` on tensors of `n` elements (two parameters, so the global norm spans both)
/// against the float64 reference; gradients are zeroed by every update.
void checkAgainstDoubleReference(const Opt &o, int64_t n) {
  SCOPED_TRACE(o.describe() + " n=" + std::to_string(n));
  std::mt19937 rng(42);
  const float lr = 0.01f;
  std::vector<ParamState> ps(2);
  std::vector<RefState> rs(2);
  for (int j = 0; j < 2; ++j) {
    int64_t size = j == 0 ? n : 37;
    ps[j].p = randomF32({size}, rng, -1, 1);
    ps[j].m = HostTensor(DType::F32, {size});
    ps[j].v = HostTensor(DType::F32, {size});
    ps[j].buf = HostTensor(DType::F32, {size});
    rs[j].p = toDouble(ps[j].p);
    rs[j].m.assign(size, 0);
    rs[j].v.assign(size, 0);
    rs[j].buf.assign(size, 0);
  }
  for (int64_t t = 1; t <= 5; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    double sq = 0;
    for (int j = 0; j < 2; ++j) {
      ps[j].g = randomF32(ps[j].p.shape, rng, -2, 2);
      for (int64_t i = 0; i < ps[j].g.numel(); ++i) sq += double(ps[j].g.data<float>()[i]) * ps[j].g.data<float>()[i];
    }
    HostTensor norm(DType::F32, {});
    ASSERT_NO_ERR(runKernel("global_norm", {&ps[0].g, &ps[1].g}, {&norm}));
    EXPECT_NEAR(*norm.data<float>(), std::sqrt(sq), 1e-6 * std::sqrt(sq));
    for (int j = 0; j < 2; ++j) {
      std::vector<double> grad = toDouble(ps[j].g);
      ASSERT_NO_ERR(runUpdate(o, ps[j], lr, t, *norm.data<float>()));
      referenceStep(o, rs[j], grad, lr, t, std::sqrt(sq));
      expectAllZero(ps[j].g, "g");
      expectClose(ps[j].p.data<float>(), toFloat(rs[j].p).data(), ps[j].p.numel(), 2e-6f, 1e-5f);
      if (o.kind != "sgd") {
        expectClose(ps[j].m.data<float>(), toFloat(rs[j].m).data(), ps[j].m.numel(), 1e-7f, 1e-5f);
        expectClose(ps[j].v.data<float>(), toFloat(rs[j].v).data(), ps[j].v.numel(), 1e-10f, 1e-5f);
      } else if (o.hasBuf()) {
        expectClose(ps[j].buf.data<float>(), toFloat(rs[j].buf).data(), ps[j].buf.numel(), 1e-6f, 1e-5f);
      }
    }
  }
}

//===------------------------------------------------------------------------------------===//
// Update kernels vs the float64 reference
//===------------------------------------------------------------------------------------===//

TEST(OptimKernels, AdamWMatchesDoubleReference) {
  // Gradients in [-2, 2] over ~1000 elements: the norm is ~36, so max_grad_norm 1 clips and 1e4
  // does not.
  for (double wd : {0.0, 0.1})
    for (double maxNorm : {0.0, 1.0, 1e4})
      for (int64_t n : {1000, 40000}) {
        Opt o{"adamw"};
        o.wd = wd;
        o.maxNorm = maxNorm;
        o.beta2 = 0.95;
        o.eps = 1e-6;
        checkAgainstDoubleReference(o, n);
      }
}

TEST(OptimKernels, AdamMatchesDoubleReference) {
  for (double wd : {0.0, 0.05})
    for (double maxNorm : {0.0, 0.5, 1e4})
      for (int64_t n : {1000, 40000}) {
        Opt o{"adam"};
        o.wd = wd;
        o.maxNorm = maxNorm;
        checkAgainstDoubleReference(o, n);
      }
}

TEST(OptimKernels, SgdMatchesDoubleReference) {
  struct Case {
    double momentum, dampening;
    bool nesterov;
  };
  for (Case c : {Case{0, 0, false}, Case{0.9, 0, false}, Case{0.9, 0.3, false}, Case{0.8, 0, true}})
    for (double wd : {0.0, 0.01})
      for (double maxNorm : {0.0, 2.0, 1e4})
        for (int64_t n : {1000, 40000}) {
          Opt o{"sgd"};
          o.momentum = c.momentum;
          o.dampening = c.dampening;
          o.nesterov = c.nesterov;
          o.wd = wd;
          o.maxNorm = maxNorm;
          checkAgainstDoubleReference(o, n);
        }
}

TEST(OptimKernels, SeparateOutputBuffersGetTheUpdatedState) {
  // The plan aliases outputs to inputs; a kernel given other buffers must still produce the state.
  std::mt19937 rng(5);
  Opt o{"adamw"};
  o.wd = 0.1;
  o.maxNorm = 1.0;
  ParamState in{randomF32({300}, rng), randomF32({300}, rng), randomF32({300}, rng, -0.1f, 0.1f),
                randomF32({300}, rng, 0, 0.01f), {}};
  ParamState inPlace{copyOf(in.p), copyOf(in.g), copyOf(in.m), copyOf(in.v), {}};
  ASSERT_NO_ERR(runUpdate(o, inPlace, 0.01f, 3, 4.0f));
  HostTensor p(DType::F32, {300}), g(DType::F32, {300}), m(DType::F32, {300}), v(DType::F32, {300});
  HostTensor lr = scalarF32(0.01f), step = scalarI64(3), norm = scalarF32(4.0f);
  ASSERT_NO_ERR(runKernel("adamw_update", {&in.p, &in.g, &in.m, &in.v, &lr, &step, &norm}, {&p, &g, &m, &v},
                          o.attrs()));
  EXPECT_EQ(std::memcmp(p.buf.data(), inPlace.p.buf.data(), p.buf.size()), 0);
  EXPECT_EQ(std::memcmp(m.buf.data(), inPlace.m.buf.data(), m.buf.size()), 0);
  EXPECT_EQ(std::memcmp(v.buf.data(), inPlace.v.buf.data(), v.buf.size()), 0);
  expectAllZero(g, "g output");
}

TEST(OptimKernels, NonFiniteGradNormSkipsTheUpdate) {
  // A NaN or infinite grad_norm leaves p, g and the optimizer state bit for bit as they were (the
  // caller names the gradient, then stops or skips the step); a finite one updates them.
  std::mt19937 rng(9);
  std::vector<Opt> opts = {Opt{"adamw"}, Opt{"adam"}, Opt{"sgd"}, Opt{"sgd"}};
  opts[0].wd = 0.1;
  opts[0].maxNorm = 1.0;
  opts[3].momentum = 0.9;
  for (const Opt &o : opts)
    for (float norm : {NAN, INFINITY, -INFINITY}) {
      SCOPED_TRACE(o.describe() + " grad_norm " + std::to_string(norm));
      ParamState s{randomF32({40}, rng), randomF32({40}, rng), randomF32({40}, rng, -0.1f, 0.1f),
                   randomF32({40}, rng, 0, 0.01f), randomF32({40}, rng)};
      s.g.data<float>()[7] = norm;  // the element that made the norm non-finite
      ParamState before{copyOf(s.p), copyOf(s.g), copyOf(s.m), copyOf(s.v), copyOf(s.buf)};
      ASSERT_NO_ERR(runUpdate(o, s, 0.01f, 3, norm));
      const HostTensor *now[] = {&s.p, &s.g, &s.m, &s.v, &s.buf}, *was[] = {&before.p, &before.g, &before.m,
                                                                           &before.v, &before.buf};
      for (int k = 0; k < 5; ++k)
        EXPECT_EQ(std::memcmp(now[k]->buf.data(), was[k]->buf.data(), now[k]->buf.size()), 0) << "state " << k;
    }
  // The same state with a finite norm is updated (the check above is not vacuous).
  ParamState s{randomF32({40}, rng), randomF32({40}, rng), randomF32({40}, rng, -0.1f, 0.1f),
               randomF32({40}, rng, 0, 0.01f), {}};
  HostTensor p0 = copyOf(s.p);
  ASSERT_NO_ERR(runUpdate(Opt{"adamw"}, s, 0.01f, 3, 2.0f));
  EXPECT_NE(std::memcmp(s.p.buf.data(), p0.buf.data(), p0.buf.size()), 0);
  expectAllZero(s.g, "g after a finite update");
}

TEST(OptimKernels, AccumulateGrad) {
  std::mt19937 rng(3);
  for (int64_t n : {17, 50000}) {
    HostTensor acc = randomF32({n}, rng);
    std::vector<double> want = toDouble(acc);
    for (float scale : {1.0f, 0.25f}) {
      HostTensor g = randomF32({n}, rng);
      ASSERT_NO_ERR(runKernel("accumulate_grad", {&acc, &g}, {&acc}, Attrs().f("scale", scale)));
      for (int64_t i = 0; i < n; ++i) want[i] += double(scale) * g.data<float>()[i];
    }
    expectClose(acc.data<float>(), toFloat(want).data(), n, 1e-6f, 1e-6f);
  }
  // Default scale 1.
  HostTensor acc = randomF32({5}, rng), g = randomF32({5}, rng);
  std::vector<double> want = toDouble(acc);
  ASSERT_NO_ERR(runKernel("accumulate_grad", {&acc, &g}, {&acc}));
  for (int i = 0; i < 5; ++i) want[i] += g.data<float>()[i];
  expectClose(acc.data<float>(), toFloat(want).data(), 5, 1e-7f, 1e-7f);
}

TEST(OptimKernels, UpdateBufferWritesTheValue) {
  std::mt19937 rng(5);
  HostTensor buf = randomF32({33}, rng), value = randomF32({33}, rng);
  ASSERT_NO_ERR(runKernel("update_buffer", {&buf, &value}, {&buf}));
  EXPECT_EQ(std::memcmp(buf.buf.data(), value.buf.data(), value.buf.size()), 0);
}

//===------------------------------------------------------------------------------------===//
// global_norm
//===------------------------------------------------------------------------------------===//

TEST(OptimKernels, GlobalNormIsExactAndDeterministicAcrossThreadCounts) {
  std::mt19937 rng(11);
  std::vector<HostTensor> gs;
  for (int64_t n : {1, 17, 16384, 16385, 100003, 0, 5}) gs.push_back(randomF32({n}, rng, -3, 3));
  std::vector<HostTensor *> ins;
  double sq = 0;
  for (HostTensor &g : gs) {
    ins.push_back(&g);
    for (int64_t i = 0; i < g.numel(); ++i) sq += double(g.data<float>()[i]) * g.data<float>()[i];
  }
  const int saved = omp_get_max_threads();
  std::vector<float> results;
  for (int threads : {1, 2, 3, 4, 7}) {
    omp_set_num_threads(threads);
    HostTensor norm(DType::F32, {});
    ASSERT_NO_ERR(runKernel("global_norm", ins, {&norm}));
    results.push_back(*norm.data<float>());
  }
  omp_set_num_threads(saved);
  EXPECT_NEAR(results[0], std::sqrt(sq), 1e-7 * std::sqrt(sq));
  for (float r : results) EXPECT_EQ(std::memcmp(&r, &results[0], sizeof(float)), 0) << r << " vs " << results[0];
}

TEST(OptimKernels, GlobalNormAccumulatesInDouble) {
  // 3e19² overflows float; the double sum does not: sqrt(4 · 9e38) = 6e19.
  HostTensor g(DType::F32, {4});
  for (int i = 0; i < 4; ++i) g.data<float>()[i] = 3e19f;
  HostTensor norm(DType::F32, {});
  ASSERT_NO_ERR(runKernel("global_norm", {&g}, {&norm}));
  EXPECT_NEAR(*norm.data<float>(), 6e19, 6e19 * 1e-6);
}

//===------------------------------------------------------------------------------------===//
// cross_entropy vs a float64 reference
//===------------------------------------------------------------------------------------===//

/// Mean over non-ignored rows of logsumexp − logit[label], and its gradient for `dloss`.
void referenceCrossEntropy(const HostTensor &x, const HostTensor &labels, int64_t ignore, double dloss,
                           double &loss, std::vector<double> &grad) {
  const int64_t N = x.shape[0], C = x.shape[1];
  const float *px = x.data<float>();
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += labels.data<int64_t>()[n] != ignore;
  double sum = 0;
  grad.assign(N * C, 0);
  for (int64_t n = 0; n < N; ++n) {
    int64_t l = labels.data<int64_t>()[n];
    if (l == ignore) continue;
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, double(px[n * C + c]));
    for (int64_t c = 0; c < C; ++c) s += std::exp(double(px[n * C + c]) - m);
    double lse = m + std::log(s);
    sum += lse - px[n * C + l];
    for (int64_t c = 0; c < C; ++c)
      grad[n * C + c] = (std::exp(double(px[n * C + c]) - lse) - (c == l)) * dloss / double(count);
  }
  loss = sum / double(count);
}

TEST(CrossEntropy, MatchesDoubleReference) {
  std::mt19937 rng(21);
  struct Case {
    int64_t N, C;
    float lo, hi;
    int64_t ignore;
  };
  for (Case k : {Case{6, 5, -3, 3, -100}, Case{50, 1000, 80, 120, -100}, Case{300, 64, -50, 50, 7},
                 Case{9, 1, -1, 1, -100}}) {
    SCOPED_TRACE("N " + std::to_string(k.N) + " C " + std::to_string(k.C));
    HostTensor x = randomF32({k.N, k.C}, rng, k.lo, k.hi), labels = randomI64({k.N}, rng, 0, k.C - 1);
    labels.data<int64_t>()[k.N / 2] = k.ignore;
    HostTensor loss(DType::F32, {}), dloss = scalarF32(0.5f), dx(DType::F32, {k.N, k.C});
    Attrs a = Attrs().i("ignore_index", k.ignore);
    ASSERT_NO_ERR(runKernel("cross_entropy", {&x, &labels}, {&loss}, a));
    ASSERT_NO_ERR(runKernel("cross_entropy_grad", {&x, &labels, &dloss}, {&dx}, a));
    double want;
    std::vector<double> wantGrad;
    referenceCrossEntropy(x, labels, k.ignore, 0.5, want, wantGrad);
    EXPECT_NEAR(*loss.data<float>(), want, 2e-6 * std::max(1.0, std::fabs(want)));
    expectClose(dx.data<float>(), toFloat(wantGrad).data(), dx.numel(), 1e-7f, 1e-5f);
    // In place: dlogits written over logits.
    HostTensor y = copyOf(x);
    ASSERT_NO_ERR(runKernel("cross_entropy_grad", {&y, &labels, &dloss}, {&y}, a));
    EXPECT_EQ(std::memcmp(y.buf.data(), dx.buf.data(), y.buf.size()), 0);
  }
}

TEST(CrossEntropy, DefaultIgnoreIndexAndAllIgnored) {
  std::mt19937 rng(2);
  HostTensor x = randomF32({3, 4}, rng), labels(DType::I64, {3});
  for (int i = 0; i < 3; ++i) labels.data<int64_t>()[i] = -100;
  HostTensor loss(DType::F32, {}), dloss = scalarF32(1), dx = randomF32({3, 4}, rng);
  ASSERT_NO_ERR(runKernel("cross_entropy", {&x, &labels}, {&loss}));
  EXPECT_TRUE(std::isnan(*loss.data<float>()));
  ASSERT_NO_ERR(runKernel("cross_entropy_grad", {&x, &labels, &dloss}, {&dx}));
  expectAllZero(dx, "dlogits of ignored rows");
  labels.data<int64_t>()[1] = 2;
  ASSERT_NO_ERR(runKernel("cross_entropy", {&x, &labels}, {&loss}));
  double want;
  std::vector<double> wantGrad;
  referenceCrossEntropy(x, labels, -100, 1, want, wantGrad);
  EXPECT_NEAR(*loss.data<float>(), want, 1e-6);
}

TEST(CrossEntropy, DeterministicAcrossThreadCounts) {
  std::mt19937 rng(8);
  HostTensor x = randomF32({4096, 33}, rng, -5, 5), labels = randomI64({4096}, rng, 0, 32);
  const int saved = omp_get_max_threads();
  std::vector<float> results;
  for (int threads : {1, 2, 5}) {
    omp_set_num_threads(threads);
    HostTensor loss(DType::F32, {});
    ASSERT_NO_ERR(runKernel("cross_entropy", {&x, &labels}, {&loss}));
    results.push_back(*loss.data<float>());
  }
  omp_set_num_threads(saved);
  for (float r : results) EXPECT_EQ(std::memcmp(&r, &results[0], sizeof(float)), 0) << r << " vs " << results[0];
}

//===------------------------------------------------------------------------------------===//
// Errors
//===------------------------------------------------------------------------------------===//

TEST(CrossEntropy, LabelOutOfRangeNamesRow) {
  std::mt19937 rng(1);
  HostTensor x = randomF32({4, 5}, rng), labels = randomI64({4}, rng, 0, 4), loss(DType::F32, {});
  HostTensor dloss = scalarF32(1), dx(DType::F32, {4, 5});
  labels.data<int64_t>()[2] = 5;
  EXPECT_EQ(errorMessage(runKernel("cross_entropy", {&x, &labels}, {&loss})),
            "label 5 at row 2 is outside [0, 5) and is not ignore_index -100");
  labels.data<int64_t>()[2] = -1;
  EXPECT_NE(errorMessage(runKernel("cross_entropy_grad", {&x, &labels, &dloss}, {&dx})).find("label -1 at row 2"),
            std::string::npos);
  HostTensor bad(DType::I64, {3});
  EXPECT_NE(errorMessage(verifyKernel("cross_entropy", {&x, &bad}, {&loss})).find("labels shape [3], expected [4]"),
            std::string::npos);
  HostTensor x3(DType::F32, {2, 2, 5});
  EXPECT_NE(errorMessage(verifyKernel("cross_entropy", {&x3, &labels}, {&loss})).find("logits must be [N, C]"),
            std::string::npos);
}

TEST(OptimKernels, VerifyAndRunErrors) {
  HostTensor p(DType::F32, {8}), g(DType::F32, {8}), m(DType::F32, {8}), v(DType::F32, {8});
  HostTensor lr = scalarF32(0.1f), step = scalarI64(0), norm = scalarF32(1), g7(DType::F32, {7});
  std::vector<HostTensor *> ins{&p, &g, &m, &v, &lr, &step, &norm}, outs{&p, &g, &m, &v};
  EXPECT_EQ(errorMessage(runKernel("adamw_update", ins, outs)), "step 0 must be >= 1 (the 1-based update count)");
  *step.data<int64_t>() = 1;
  EXPECT_NE(errorMessage(verifyKernel("adam_update", ins, outs, Attrs().f("beta1", 1.0))).find("'beta1' = 1 must be in [0, 1)"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("adamw_update", {&p, &g7, &m, &v, &lr, &step, &norm}, {&p, &g7, &m, &v}))
                .find("p and g: shapes [8] and [7] differ"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("adamw_update", {&p, &g, &m, &v, &step, &step, &norm}, outs))
                .find("lr must be f32"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("adamw_update", ins, outs, Attrs().f("lr", 0.1))).find("unknown attribute 'lr'"),
            std::string::npos);
  // SGD: the momentum buffer is present exactly when momentum != 0.
  EXPECT_NE(errorMessage(verifyKernel("sgd_update", {&p, &g, &lr, &step, &norm}, {&p, &g}, Attrs().f("momentum", 0.9)))
                .find("needs inputs p, g, buf"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("sgd_update", {&p, &g, &m, &lr, &step, &norm}, {&p, &g, &m}))
                .find("(no momentum buffer)"),
            std::string::npos);
  EXPECT_NE(errorMessage(verifyKernel("sgd_update", {&p, &g, &m, &lr, &step, &norm}, {&p, &g, &m},
                                      Attrs().f("momentum", 0.9).f("dampening", 0.1).i("nesterov", 1)))
                .find("nesterov momentum requires"),
            std::string::npos);
  // State operands sharing memory.
  EXPECT_NE(errorMessage(runKernel("adamw_update", {&p, &g, &m, &m, &lr, &step, &norm}, {&p, &g, &m, &m}))
                .find("state operands 2 and 3 overlap"),
            std::string::npos);
  HostTensor big(DType::F32, {2});
  EXPECT_NE(errorMessage(verifyKernel("global_norm", {&g}, {&big})).find("output must be a scalar"), std::string::npos);
}

/// Through the executor, a bad label names the instruction (index, op, ONNX location) and the row.
class CrossEntropyPlanTest : public MlpPlanTest {};

TEST_F(CrossEntropyPlanTest, BadLabelNamesInstructionAndRow) {
  plan::Program &p = *model.mutable_programs(0);
  plan::Buffer *labels = p.add_buffers();
  labels->set_id(8);
  labels->set_name("labels");
  labels->set_dtype(plan::I64);
  labels->add_shape(4);
  labels->set_storage(plan::ARENA);
  labels->set_offset(512);
  labels->set_size_bytes(32);
  plan::Buffer *loss = p.add_buffers();
  loss->set_id(9);
  loss->set_name("loss");
  loss->set_dtype(plan::F32);
  loss->set_storage(plan::ARENA);
  loss->set_offset(576);
  loss->set_size_bytes(4);
  p.set_arena_bytes(640);
  plan::Instruction *ce = p.add_instructions();
  ce->set_op("cross_entropy");
  ce->add_inputs(6);
  ce->add_inputs(8);
  ce->add_outputs(9);
  ce->set_loc("loss");
  (*ce->mutable_attrs())["ignore_index"].set_i(-100);
  plan::Binding *in = p.add_inputs();
  in->set_name("labels");
  in->set_buffer(8);
  plan::Binding *out = p.add_outputs();
  out->set_name("loss");
  out->set_buffer(9);
  auto loaded = loadPlan(writePlan(), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  auto device = createCpuDevice();
  auto ex = Executor::create(**loaded, KernelRegistry::cpu(), *device);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  int64_t good[4] = {0, 2, -100, 1}, bad[4] = {0, 2, 3, 1};
  ASSERT_NO_ERR((*ex)->setInput("x", DType::F32, {4, 8}, x.data()));
  ASSERT_NO_ERR((*ex)->setInput("labels", DType::I64, {4}, good));
  ASSERT_NO_ERR((*ex)->run());
  std::vector<float> logits, probs;
  reference(x, logits, probs);
  double want = 0;
  for (int n : {0, 1, 3}) want -= std::log(probs[n * 3 + good[n]]) / 3;
  auto got = (*ex)->output("loss");
  ASSERT_TRUE(static_cast<bool>(got));
  EXPECT_NEAR(*got->as<const float>(), want, 1e-5);
  ASSERT_NO_ERR((*ex)->setInput("labels", DType::I64, {4}, bad));
  EXPECT_EQ(errorMessage((*ex)->run()),
            "instruction 5 (cross_entropy at loss): label 3 at row 2 is outside [0, 3) and is not ignore_index -100");
}

//===------------------------------------------------------------------------------------===//
// PyTorch references (optim_reference.py)
//===------------------------------------------------------------------------------------===//

/// Runs optim_reference.py into a fresh folder and parses its manifest.
class PyTorchReference : public ::testing::Test {
protected:
  void SetUp() override {
    // $COLOSSAL_PYTHON overrides the configured interpreter (test/e2e/check_skips.py uses it).
    const char *env = std::getenv("COLOSSAL_PYTHON");
    std::string python = env && *env ? env : COLOSSAL_PYTHON_PATH;
    // Without the reference there is nothing to compare with: skipped (ctest shows it), not passed.
    if (!llvm::sys::fs::can_execute(python))
      GTEST_SKIP() << python << " is not an executable (COLOSSAL_PYTHON)";
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-optim-ref", dir));
    llvm::StringRef args[] = {python, COLOSSAL_OPTIM_REFERENCE_SCRIPT, dir.str()};
    std::string err;
    int rc = llvm::sys::ExecuteAndWait(python, args, std::nullopt, {}, 0, 0, &err);
    if (rc == 77)
      GTEST_SKIP() << python << " cannot import numpy or torch (optim_reference.py)";
    ASSERT_EQ(rc, 0) << COLOSSAL_OPTIM_REFERENCE_SCRIPT << " failed (needs " << python
                     << " with torch and numpy): " << err;
    auto text = llvm::MemoryBuffer::getFile(path("manifest.json"));
    ASSERT_TRUE(static_cast<bool>(text));
    auto parsed = llvm::json::parse((*text)->getBuffer());
    ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
    manifest = std::move(*parsed);
  }
  void TearDown() override {
    if (!dir.empty()) llvm::sys::fs::remove_directories(dir);
  }

  std::string path(const std::string &name) const {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  /// Reads NAME.npy into a tensor (or fails the test).
  HostTensor load(const std::string &name) {
    auto a = readNpy(path(name + ".npy"));
    if (!a) {
      ADD_FAILURE() << llvm::toString(a.takeError());
      return HostTensor();
    }
    HostTensor t(a->dtype, a->shape);
    std::memcpy(t.buf.data(), a->data.data(), a->bytes());
    return t;
  }
  /// Row `step` of a [steps, ...] array, as a tensor of `shape`.
  static HostTensor row(const HostTensor &all, int64_t step, llvm::ArrayRef<int64_t> shape) {
    HostTensor t(all.dtype, shape);
    std::memcpy(t.buf.data(), static_cast<const char *>(all.buf.data()) + step * t.buf.size(), t.buf.size());
    return t;
  }
  const llvm::json::Array &cases(llvm::StringRef key) {
    static const llvm::json::Array empty;
    const llvm::json::Array *a = manifest.getAsObject()->getArray(key);
    return a ? *a : empty;
  }

  llvm::SmallString<128> dir;
  llvm::json::Value manifest = nullptr;
};

TEST_F(PyTorchReference, OptimizersMatchPyTorch) {
  const llvm::json::Array &all = cases("optim");
  ASSERT_EQ(all.size(), 10u);
  for (const llvm::json::Value &cv : all) {
    const llvm::json::Object &c = *cv.getAsObject();
    std::string name = c.getString("name")->str();
    SCOPED_TRACE(name);
    Opt o{c.getString("kind")->str()};
    o.wd = *c.getNumber("weight_decay");
    o.maxNorm = *c.getNumber("max_grad_norm");
    if (o.kind == "sgd") {
      o.momentum = *c.getNumber("momentum");
      o.dampening = *c.getNumber("dampening");
      o.nesterov = *c.getBoolean("nesterov");
    } else {
      o.beta1 = *(*c.getArray("betas"))[0].getAsNumber();
      o.beta2 = *(*c.getArray("betas"))[1].getAsNumber();
      o.eps = *c.getNumber("eps");
    }
    const float lr = static_cast<float>(*c.getNumber("lr"));
    const int64_t steps = *c.getInteger("steps");
    std::vector<ParamState> ps;
    std::vector<Shape> shapes;
    std::vector<HostTensor> grads, params, m, v, buf;
    for (const llvm::json::Value &sv : *c.getArray("shapes")) {
      Shape s;
      for (const llvm::json::Value &d : *sv.getAsArray()) s.push_back(*d.getAsInteger());
      int64_t j = static_cast<int64_t>(shapes.size());
      std::string pre = name + ".p" + std::to_string(j);
      shapes.push_back(s);
      ParamState st;
      st.p = load(pre + ".init");
      ASSERT_EQ(st.p.shape, s);
      st.m = HostTensor(DType::F32, s);
      st.v = HostTensor(DType::F32, s);
      st.buf = HostTensor(DType::F32, s);
      ps.push_back(std::move(st));
      grads.push_back(load(pre + ".grad"));
      params.push_back(load(pre + ".param"));
      if (o.kind != "sgd") {
        m.push_back(load(pre + ".exp_avg"));
        v.push_back(load(pre + ".exp_avg_sq"));
      } else if (o.hasBuf()) {
        buf.push_back(load(pre + ".momentum_buffer"));
      }
    }
    HostTensor torchNorms = o.maxNorm > 0 ? load(name + ".norm") : HostTensor();
    for (int64_t t = 1; t <= steps; ++t) {
      SCOPED_TRACE("step " + std::to_string(t));
      std::vector<HostTensor *> gs;
      for (size_t j = 0; j < ps.size(); ++j) {
        ps[j].g = row(grads[j], t - 1, shapes[j]);
        gs.push_back(&ps[j].g);
      }
      HostTensor norm(DType::F32, {});
      ASSERT_NO_ERR(runKernel("global_norm", gs, {&norm}));
      if (o.maxNorm > 0) {
        float want = torchNorms.data<float>()[t - 1];
        EXPECT_NEAR(*norm.data<float>(), want, 2e-6 * want) << "clip_grad_norm_'s total norm";
      }
      for (size_t j = 0; j < ps.size(); ++j) {
        ASSERT_NO_ERR(runUpdate(o, ps[j], lr, t, *norm.data<float>()));
        expectAllZero(ps[j].g, "g");
        int64_t n = ps[j].p.numel();
        expectClose(ps[j].p.data<float>(), row(params[j], t - 1, shapes[j]).data<float>(), n, 1e-6f, 1e-5f);
        if (o.kind != "sgd") {
          expectClose(ps[j].m.data<float>(), row(m[j], t - 1, shapes[j]).data<float>(), n, 1e-7f, 1e-5f);
          expectClose(ps[j].v.data<float>(), row(v[j], t - 1, shapes[j]).data<float>(), n, 1e-10f, 1e-5f);
        } else if (o.hasBuf()) {
          expectClose(ps[j].buf.data<float>(), row(buf[j], t - 1, shapes[j]).data<float>(), n, 1e-6f, 1e-5f);
        }
      }
    }
  }
}

TEST_F(PyTorchReference, CrossEntropyMatchesPyTorch) {
  const llvm::json::Array &all = cases("cross_entropy");
  ASSERT_EQ(all.size(), 5u);
  for (const llvm::json::Value &cv : all) {
    const llvm::json::Object &c = *cv.getAsObject();
    std::string name = c.getString("name")->str();
    SCOPED_TRACE(name);
    HostTensor x = load(name + ".logits"), labels = load(name + ".labels"), want = load(name + ".loss");
    HostTensor wantGrad = load(name + ".dlogits");
    HostTensor loss(DType::F32, {}), dloss = scalarF32(static_cast<float>(*c.getNumber("dloss")));
    HostTensor dx(DType::F32, x.shape);
    Attrs a = Attrs().i("ignore_index", *c.getInteger("ignore_index"));
    ASSERT_NO_ERR(runKernel("cross_entropy", {&x, &labels}, {&loss}, a));
    ASSERT_NO_ERR(runKernel("cross_entropy_grad", {&x, &labels, &dloss}, {&dx}, a));
    expectClose(loss.data<float>(), want.data<float>(), 1, 1e-6f, 2e-6f);
    expectClose(dx.data<float>(), wantGrad.data<float>(), dx.numel(), 1e-7f, 1e-5f);
  }
}

}  // namespace

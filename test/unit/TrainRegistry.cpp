//===- TrainRegistry.cpp - TEMPORARY naive training kernels until optim.cpp lands on main ----===//
//
// Only registered for ops the CPU registry does not know yet; removed when the optimizer kernels
// (runtime/kernels/cpu/optim.cpp) are merged.
//
//===----------------------------------------------------------------------------------------===//
#include "TrainPlans.h"

#include "colossal/runtime/Kernel.h"

#include <cmath>

namespace colossal::runtime::testing {

namespace {
llvm::Error ok(const KernelCall &) { return llvm::Error::success(); }

llvm::Error runAccumulate(const KernelCall &c) {
  float *acc = c.outputs[0].as<float>();
  const float *g = c.inputs[1].as<const float>();
  float scale = float(c.attrFloat("scale", 1.0));
  for (int64_t i = 0; i < c.outputs[0].numel(); ++i) acc[i] += scale * g[i];
  return llvm::Error::success();
}

llvm::Error runGlobalNorm(const KernelCall &c) {
  double s = 0;
  for (const TensorRef &t : c.inputs)
    for (int64_t i = 0; i < t.numel(); ++i) s += double(t.as<float>()[i]) * t.as<float>()[i];
  c.outputs[0].as<float>()[0] = float(std::sqrt(s));
  return llvm::Error::success();
}

template <bool Decoupled> llvm::Error runAdam(const KernelCall &c) {
  float *p = c.inputs[0].as<float>(), *g = c.inputs[1].as<float>(), *m = c.inputs[2].as<float>(),
        *v = c.inputs[3].as<float>();
  double lr = c.inputs[4].as<float>()[0];
  int64_t t = c.inputs[5].as<int64_t>()[0];
  double gn = c.inputs[6].as<float>()[0];
  double b1 = c.attrFloat("beta1", 0.9), b2 = c.attrFloat("beta2", 0.999), eps = c.attrFloat("eps", 1e-8),
         wd = c.attrFloat("weight_decay", 0), clip = c.attrFloat("max_grad_norm", 0);
  float coef = clip > 0 ? float(std::min(1.0, clip / (gn + 1e-6))) : 1.f;
  double bc1 = 1 - std::pow(b1, double(t)), bc2 = 1 - std::pow(b2, double(t));
  float stepSize = float(lr / bc1), bc2s = float(std::sqrt(bc2));
  for (int64_t i = 0; i < c.inputs[0].numel(); ++i) {
    float gi = g[i] * coef;
    if (Decoupled) p[i] *= float(1 - lr * wd);
    else gi += float(wd) * p[i];
    m[i] = float(b1) * m[i] + float(1 - b1) * gi;
    v[i] = float(b2) * v[i] + float(1 - b2) * gi * gi;
    p[i] -= stepSize * m[i] / (std::sqrt(v[i]) / bc2s + float(eps));
    g[i] = 0;
  }
  return llvm::Error::success();
}

llvm::Error runSgd(const KernelCall &c) {
  float *p = c.inputs[0].as<float>(), *g = c.inputs[1].as<float>();
  bool hasBuf = c.inputs.size() == 6;
  float *buf = hasBuf ? c.inputs[2].as<float>() : nullptr;
  size_t k = hasBuf ? 3 : 2;
  double lr = c.inputs[k].as<float>()[0];
  int64_t t = c.inputs[k + 1].as<int64_t>()[0];
  double gn = c.inputs[k + 2].as<float>()[0];
  double mu = c.attrFloat("momentum", 0), damp = c.attrFloat("dampening", 0), wd = c.attrFloat("weight_decay", 0),
         clip = c.attrFloat("max_grad_norm", 0);
  bool nesterov = c.attrInt("nesterov", 0);
  float coef = clip > 0 ? float(std::min(1.0, clip / (gn + 1e-6))) : 1.f;
  for (int64_t i = 0; i < c.inputs[0].numel(); ++i) {
    float gi = g[i] * coef + float(wd) * p[i];
    if (buf) {
      buf[i] = t == 1 ? gi : float(mu) * buf[i] + float(1 - damp) * gi;
      gi = nesterov ? gi + float(mu) * buf[i] : buf[i];
    }
    p[i] -= float(lr) * gi;
    g[i] = 0;
  }
  return llvm::Error::success();
}
}  // namespace

const KernelRegistry &trainTestRegistry() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    registerCpuKernels(r);
    auto add = [&](const char *op, int minIn, int maxIn, int minOut, int maxOut, std::vector<AttrSpec> attrs,
                   llvm::Error (*run)(const KernelCall &)) {
      if (r.knowsOp(op, DeviceKind::CPU)) return;
      KernelDesc d;
      d.op = op;
      d.minInputs = minIn;
      d.maxInputs = maxIn;
      d.minOutputs = minOut;
      d.maxOutputs = maxOut;
      d.attrs = std::move(attrs);
      d.verify = ok;
      d.run = run;
      r.add(d);
    };
    std::vector<AttrSpec> adam = {{"beta1", AttrKind::Float}, {"beta2", AttrKind::Float}, {"eps", AttrKind::Float},
                                  {"weight_decay", AttrKind::Float}, {"max_grad_norm", AttrKind::Float}};
    add("accumulate_grad", 2, 2, 1, 1, {{"scale", AttrKind::Float}}, runAccumulate);
    add("global_norm", 1, -1, 1, 1, {}, runGlobalNorm);
    add("adamw_update", 7, 7, 4, 4, adam, runAdam<true>);
    add("adam_update", 7, 7, 4, 4, adam, runAdam<false>);
    add("sgd_update", 5, 6, 2, 3,
        {{"momentum", AttrKind::Float}, {"dampening", AttrKind::Float}, {"nesterov", AttrKind::Int},
         {"weight_decay", AttrKind::Float}, {"max_grad_norm", AttrKind::Float}},
        runSgd);
    return r;
  }();
  return registry;
}

}  // namespace colossal::runtime::testing

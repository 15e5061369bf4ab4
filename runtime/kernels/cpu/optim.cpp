//===- optim.cpp - Gradient accumulation, global norm and optimizer update CPU kernels --------===//
//
// The optimizer half of the training instruction set (docs/plan.md "Training instructions",
// docs/training.md "Optimizer semantics"), f32:
//
//   accumulate_grad  acc, g                               -> acc             acc += scale·g
//   update_buffer    buf, value                           -> buf             buf ← value
//   global_norm      g0, g1, ...                          -> n []            sqrt(Σᵢ Σ gᵢ²)
//   adamw_update     p, g, m, v, lr, step, grad_norm      -> p, g, m, v      torch.optim.AdamW
//   adam_update      p, g, m, v, lr, step, grad_norm      -> p, g, m, v      torch.optim.Adam
//   sgd_update       p, g, [buf], lr, step, grad_norm     -> p, g, [buf]     torch.optim.SGD
//
// The update kernels follow PyTorch 1.13's single-tensor path (torch/optim/{adamw,adam,sgd}.py,
// `_single_tensor_*`) operation by operation, in float32 with the same scalar coefficients (each
// computed in double as Python does, then rounded to float as PyTorch does when a Python scalar
// meets a float tensor); clipping is torch.nn.utils.clip_grad_norm_'s
// `g · min(1, max_norm / (total_norm + 1e-6))` applied first, with `grad_norm` the global_norm
// output. `lr` is an f32 scalar input, `step` the 1-based update count as an i64 scalar.
//
// ALIASING: accumulate_grad, update_buffer, adamw_update, adam_update and sgd_update write their state operands
// in place. Output k is the same buffer as input k (the plan loader's one accepted aliasing of
// inputs and outputs, docs/training.md "Plan"); an output given as a different buffer is first
// filled from its input, so the kernels are correct either way. The state operands of one
// instruction must not overlap each other (checked at run time: the fused loops assume it).
// Every update zeroes `g` after use.
//
// A NON-FINITE `grad_norm` (NaN or ±inf: some gradient element is not finite) skips the update:
// p, g and the optimizer state are left exactly as they were, so the caller can name the
// non-finite gradient and decide (docs/training.md "Non-finite values": stop, or skip the step
// and zero the gradients; under fp16 the loss scaler backs off), as torch.cuda.amp.GradScaler
// skips optimizer.step(). Every rank sees the same grad_norm (global_norm is replicated), so they
// all skip together.
//
// Attributes (docs/plan.md): adam(w) `beta1 beta2 eps weight_decay max_grad_norm`, sgd `momentum
// dampening nesterov weight_decay max_grad_norm`, accumulate_grad `scale`; an absent one takes
// PyTorch's default (0.9, 0.999, 1e-8, weight decay 0.01 for AdamW and 0 otherwise, no momentum,
// no clipping, scale 1). sgd_update has the buffer operand exactly when momentum ≠ 0.
//
// Errors. At load (verify): dtypes other than f32 (i64 step), state shapes that differ, an output
// that is not its input's dtype and shape, non-scalar lr/step/grad_norm, attribute values PyTorch
// rejects (betas outside [0, 1), negative eps/weight_decay/momentum/max_grad_norm, nesterov without
// momentum or with dampening), an SGD operand list that does not match its momentum. At run: a step
// below 1, state operands that overlap in memory.
//
// Each update is one fused pass over the elements (one read and one write of each state tensor),
// vectorizable (branch-free, restrict pointers, the variant chosen outside the loop) and split over
// OpenMP threads for large tensors. global_norm sums squares in double over fixed blocks of 16384
// elements and adds the block partials in order (BlockedSum.h): the result is the same for every
// thread count.
//
//===----------------------------------------------------------------------------------------===//
#include "BlockedSum.h"
#include "CpuCommon.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

namespace colossal::runtime::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;      // elements per thread, at least, in the fused updates
constexpr int64_t kNormBlock = 1 << 14;  // elements per global_norm block (fixed: determinism)

// ---------------------------------------------------------------- shared checks

llvm::Error verifyScalar(const TensorRef &t, DType dtype, llvm::StringRef what) {
  if (llvm::Error e = verifyDType(t, dtype, what)) return e;
  if (t.numel() != 1)
    return kernelError(what + " must be a scalar, got shape " + shapeToString(t.shape));
  return llvm::Error::success();
}

/// The first `count` operands are the state tensors `names`: f32, one shape, and output k has
/// input k's dtype and shape (it is the same buffer).
llvm::Error verifyStates(const KernelCall &c, llvm::ArrayRef<const char *> names) {
  for (size_t k = 0; k < names.size(); ++k) {
    if (llvm::Error e = verifyDType(c.inputs[k], DType::F32, names[k])) return e;
    if (k > 0)
      if (llvm::Error e = verifySameShape(c.inputs[0], c.inputs[k], std::string(names[0]) + " and " + names[k]))
        return e;
    if (c.outputs[k].dtype != c.inputs[k].dtype || c.outputs[k].shape != c.inputs[k].shape)
      return kernelError(llvm::Twine("output ") + llvm::Twine(k) + " must be " + names[k] +
                         " itself (" + dtypeName(c.inputs[k].dtype) + " " + shapeToString(c.inputs[k].shape) +
                         "), got " + dtypeName(c.outputs[k].dtype) + " " + shapeToString(c.outputs[k].shape));
  }
  return llvm::Error::success();
}

/// Makes output k hold input k (a copy when the plan gave a separate buffer) and checks that the
/// state outputs are pairwise disjoint, so the fused loops may treat them as restrict.
llvm::Error prepareStates(const KernelCall &c, size_t count) {
  for (size_t k = 0; k < count; ++k)
    if (c.outputs[k].data != c.inputs[k].data && c.outputs[k].bytes())
      std::memmove(c.outputs[k].data, c.inputs[k].data, c.outputs[k].bytes());
  for (size_t a = 0; a < count; ++a)
    for (size_t b = a + 1; b < count; ++b) {
      const char *pa = c.outputs[a].as<const char>(), *pb = c.outputs[b].as<const char>();
      size_t na = c.outputs[a].bytes(), nb = c.outputs[b].bytes();
      if (na && nb && pa < pb + nb && pb < pa + na)
        return kernelError("state operands " + llvm::Twine(a) + " and " + llvm::Twine(b) +
                           " overlap in memory (each must be its own buffer)");
    }
  return llvm::Error::success();
}

/// Reads the scalar operands (lr, step, grad_norm) that follow the state tensors.
struct StepScalars {
  float lr = 0;
  int64_t step = 0;
  float gradNorm = 0;
};
llvm::Expected<StepScalars> readScalars(const KernelCall &c, size_t first) {
  StepScalars s;
  s.lr = *c.inputs[first].as<const float>();
  s.step = *c.inputs[first + 1].as<const int64_t>();
  s.gradNorm = *c.inputs[first + 2].as<const float>();
  if (s.step < 1)
    return kernelError("step " + llvm::Twine(s.step) + " must be >= 1 (the 1-based update count)");
  return s;
}

llvm::Error verifyScalars(const KernelCall &c, size_t first) {
  if (llvm::Error e = verifyScalar(c.inputs[first], DType::F32, "lr")) return e;
  if (llvm::Error e = verifyScalar(c.inputs[first + 1], DType::I64, "step")) return e;
  return verifyScalar(c.inputs[first + 2], DType::F32, "grad_norm");
}

std::string formatNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

/// Checks a float attribute against [lo, hi) (hi exclusive when `hiOpen`), naming it.
llvm::Error verifyRange(const KernelCall &c, const char *name, double fallback, double lo, double hi,
                        bool hiOpen) {
  double v = c.attrFloat(name, fallback);
  if (!(v >= lo) || (hiOpen ? !(v < hi) : !(v <= hi)))
    return kernelError(llvm::Twine("attribute '") + name + "' = " + formatNumber(v) + " must be in [" +
                       formatNumber(lo) + ", " + formatNumber(hi) + (hiOpen ? ")" : "]"));
  return llvm::Error::success();
}

constexpr double kInf = HUGE_VAL;

/// clip_grad_norm_'s factor, in float as PyTorch computes it on the f32 total norm
/// (torch/nn/utils/clip_grad.py: clamp(max_norm / (total_norm + 1e-6), max=1)); 1 when off.
/// Only called with a finite norm (a non-finite one skips the update).
float clipCoefficient(const KernelCall &c, float gradNorm) {
  double maxNorm = c.attrFloat("max_grad_norm", 0);
  if (maxNorm <= 0) return 1.0f;
  float coef = static_cast<float>(maxNorm) / (gradNorm + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

/// Calls f(std::integral_constant<bool, b>) (a run-time flag made a template argument).
template <typename F> void withBool(bool b, F &&f) {
  if (b) f(std::true_type{});
  else f(std::false_type{});
}

// ---------------------------------------------------------------- accumulate_grad

llvm::Error verifyAccumulate(const KernelCall &c) {
  if (llvm::Error e = verifyStates(c, {"acc"})) return e;
  if (llvm::Error e = verifyDType(c.inputs[1], DType::F32, "g")) return e;
  if (llvm::Error e = verifySameShape(c.inputs[0], c.inputs[1], "acc and g")) return e;
  if (!std::isfinite(c.attrFloat("scale", 1.0)))
    return kernelError("attribute 'scale' must be finite");
  return llvm::Error::success();
}

llvm::Error runAccumulate(const KernelCall &c) {
  if (llvm::Error e = prepareStates(c, 1)) return e;
  float *acc = c.outputs[0].as<float>();
  const float *g = c.inputs[1].as<const float>();
  if (g == acc) return kernelError("g must not be the accumulator's own buffer");
  const float scale = static_cast<float>(c.attrFloat("scale", 1.0));
  parallelFor(c.outputs[0].numel(), kGrain, [&](int64_t b, int64_t e) {
    float *__restrict a = acc + b;
    const float *__restrict x = g + b;
    for (int64_t i = 0; i < e - b; ++i) a[i] = a[i] + scale * x[i];
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- update_buffer

llvm::Error verifyUpdateBuffer(const KernelCall &c) {
  if (llvm::Error e = verifyStates(c, {"buf"})) return e;
  if (llvm::Error e = verifyDType(c.inputs[1], DType::F32, "value")) return e;
  return verifySameShape(c.inputs[0], c.inputs[1], "buf and value");
}

llvm::Error runUpdateBuffer(const KernelCall &c) {
  if (llvm::Error e = prepareStates(c, 1)) return e;
  float *buf = c.outputs[0].as<float>();
  const float *value = c.inputs[1].as<const float>();
  if (value != buf) std::memmove(buf, value, static_cast<size_t>(c.outputs[0].numel()) * sizeof(float));
  return llvm::Error::success();
}

// ---------------------------------------------------------------- global_norm

/// A leading f64 scalar input is the running sum of squares to continue; an f64 output is the
/// sum itself (a partial norm), an f32 output its square root.
bool hasRunningSum(const KernelCall &c) {
  return !c.inputs.empty() && c.inputs[0].dtype == DType::F64 && c.inputs[0].numel() == 1 &&
         c.inputs[0].shape.empty();
}

llvm::Error verifyGlobalNorm(const KernelCall &c) {
  const size_t from = hasRunningSum(c) ? 1 : 0;
  if (c.inputs.size() <= from) return llvm::createStringError(llvm::inconvertibleErrorCode(), "no gradient");
  for (size_t k = from; k < c.inputs.size(); ++k)
    if (llvm::Error e = verifyDType(c.inputs[k], DType::F32, "g" + std::to_string(k))) return e;
  return verifyScalar(c.outputs[0], c.outputs[0].dtype == DType::F64 ? DType::F64 : DType::F32, "output");
}

int64_t normBlocks(const TensorRef &t) { return (t.numel() + kNormBlock - 1) / kNormBlock; }

/// Block prefix (inputs + 1 int64) then one double per block.
size_t globalNormWorkspace(const KernelCall &c, int) {
  int64_t blocks = 0;
  for (const TensorRef &t : c.inputs) blocks += normBlocks(t);
  return (c.inputs.size() + 1) * sizeof(int64_t) + static_cast<size_t>(blocks) * sizeof(double);
}

llvm::Error runGlobalNorm(const KernelCall &c) {
  const size_t skip = hasRunningSum(c) ? 1 : 0;
  const llvm::ArrayRef<TensorRef> grads = llvm::ArrayRef<TensorRef>(c.inputs).drop_front(skip);
  const size_t n = grads.size();
  int64_t *first = static_cast<int64_t *>(c.workspace);  // first[k]: tensor k's first block
  first[0] = 0;
  for (size_t k = 0; k < n; ++k) first[k + 1] = first[k] + normBlocks(grads[k]);
  double *partials = reinterpret_cast<double *>(first + n + 1);
  const double start = skip ? *c.inputs[0].as<const double>() : 0.0;
  double total = blockedSum(first[n], 1, partials, start, [&](int64_t block) {
    size_t k = std::upper_bound(first, first + n + 1, block) - first - 1;
    const TensorRef &t = grads[k];
    int64_t begin = (block - first[k]) * kNormBlock;
    return sumSquares(t.as<const float>() + begin, std::min(kNormBlock, t.numel() - begin));
  });
  if (c.outputs[0].dtype == DType::F64)
    *c.outputs[0].as<double>() = total;
  else
    *c.outputs[0].as<float>() = static_cast<float>(std::sqrt(total));
  return llvm::Error::success();
}

// ---------------------------------------------------------------- adam / adamw

/// The float coefficients of one Adam(W) step (PyTorch's Python scalars rounded to float).
struct AdamCoefs {
  float clip;           // clip_grad_norm_ factor
  float decay;          // AdamW: 1 − lr·wd
  float l2;             // Adam: wd (g ← g + wd·p)
  float beta1, oneMinusBeta1, beta2, oneMinusBeta2;
  float bc2Sqrt;        // √(1 − β₂ᵗ)
  float eps;
  float negStepSize;    // −lr / (1 − β₁ᵗ)
};

/// One fused pass of torch.optim.AdamW (DECOUPLED) or Adam (L2: weight decay added to g), in
/// PyTorch's operation order: p.mul_(decay); m.mul_(β₁).add_(g, 1−β₁);
/// v.mul_(β₂).addcmul_(g, g, 1−β₂); p.addcdiv_(m, v.sqrt() / bc2Sqrt + eps, −step_size); g = 0.
template <bool DECOUPLED, bool L2>
void adamRange(float *__restrict p, float *__restrict g, float *__restrict m, float *__restrict v,
               int64_t n, const AdamCoefs k) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * k.clip;
    float pi = p[i];
    if constexpr (DECOUPLED) pi = pi * k.decay;
    if constexpr (L2) gi = gi + k.l2 * pi;
    float mi = m[i] * k.beta1 + k.oneMinusBeta1 * gi;
    float vi = v[i] * k.beta2 + k.oneMinusBeta2 * gi * gi;
    float denom = std::sqrt(vi) / k.bc2Sqrt + k.eps;
    p[i] = pi + k.negStepSize * mi / denom;
    m[i] = mi;
    v[i] = vi;
    g[i] = 0.0f;
  }
}

template <bool DECOUPLED> llvm::Error verifyAdam(const KernelCall &c) {
  if (llvm::Error e = verifyStates(c, {"p", "g", "m", "v"})) return e;
  if (llvm::Error e = verifyScalars(c, 4)) return e;
  // torch.optim.Adam(W)'s own argument checks.
  if (llvm::Error e = verifyRange(c, "beta1", 0.9, 0, 1, true)) return e;
  if (llvm::Error e = verifyRange(c, "beta2", 0.999, 0, 1, true)) return e;
  if (llvm::Error e = verifyRange(c, "eps", 1e-8, 0, kInf, true)) return e;
  if (llvm::Error e = verifyRange(c, "weight_decay", DECOUPLED ? 1e-2 : 0.0, 0, kInf, true)) return e;
  return verifyRange(c, "max_grad_norm", 0, 0, kInf, true);
}

template <bool DECOUPLED> llvm::Error runAdam(const KernelCall &c) {
  if (llvm::Error e = prepareStates(c, 4)) return e;
  llvm::Expected<StepScalars> s = readScalars(c, 4);
  if (!s) return s.takeError();
  if (!std::isfinite(s->gradNorm)) return llvm::Error::success();  // skipped (header comment)
  const double lr = s->lr, t = static_cast<double>(s->step);
  const double beta1 = c.attrFloat("beta1", 0.9), beta2 = c.attrFloat("beta2", 0.999);
  const double wd = c.attrFloat("weight_decay", DECOUPLED ? 1e-2 : 0.0);
  const double biasCorrection1 = 1 - std::pow(beta1, t), biasCorrection2 = 1 - std::pow(beta2, t);
  AdamCoefs k;
  k.clip = clipCoefficient(c, s->gradNorm);
  k.decay = static_cast<float>(1 - lr * wd);
  k.l2 = static_cast<float>(wd);
  k.beta1 = static_cast<float>(beta1);
  k.oneMinusBeta1 = static_cast<float>(1 - beta1);
  k.beta2 = static_cast<float>(beta2);
  k.oneMinusBeta2 = static_cast<float>(1 - beta2);
  k.bc2Sqrt = static_cast<float>(std::sqrt(biasCorrection2));
  k.eps = static_cast<float>(c.attrFloat("eps", 1e-8));
  k.negStepSize = static_cast<float>(-(lr / biasCorrection1));
  float *p = c.outputs[0].as<float>(), *g = c.outputs[1].as<float>();
  float *m = c.outputs[2].as<float>(), *v = c.outputs[3].as<float>();
  // Adam skips `grad.add(param, alpha=wd)` when wd == 0 (which matters for p = ±inf only).
  withBool(!DECOUPLED && wd != 0, [&](auto l2) {
    parallelFor(c.outputs[0].numel(), kGrain, [&](int64_t b, int64_t e) {
      adamRange<DECOUPLED, decltype(l2)::value>(p + b, g + b, m + b, v + b, e - b, k);
    });
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- sgd

struct SgdCoefs {
  float clip, wd, momentum, oneMinusDampening, negLr;
};

/// One fused pass of torch.optim.SGD: d = clip·g (+ wd·p); with momentum, buf = d on the first
/// step (FIRST) else buf.mul_(μ).add_(d, 1 − dampening), then d = d + μ·buf (NESTEROV) or buf;
/// p.add_(d, −lr); g = 0.
template <bool WD, bool MOMENTUM, bool FIRST, bool NESTEROV>
void sgdRange(float *__restrict p, float *__restrict g, float *__restrict buf, int64_t n,
              const SgdCoefs k) {
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] * k.clip;
    if constexpr (WD) d = d + k.wd * p[i];
    if constexpr (MOMENTUM) {
      float b = FIRST ? d : buf[i] * k.momentum + k.oneMinusDampening * d;
      buf[i] = b;
      d = NESTEROV ? d + k.momentum * b : b;
    }
    p[i] = p[i] + k.negLr * d;
    g[i] = 0.0f;
  }
}

llvm::Error verifySgd(const KernelCall &c) {
  const double momentum = c.attrFloat("momentum", 0);
  const bool hasBuf = momentum != 0;
  const size_t states = hasBuf ? 3 : 2;
  if (c.inputs.size() != states + 3 || c.outputs.size() != states)
    return kernelError("momentum " + formatNumber(momentum) + " needs " +
                       (hasBuf ? "inputs p, g, buf, lr, step, grad_norm and outputs p, g, buf"
                               : "inputs p, g, lr, step, grad_norm and outputs p, g (no momentum buffer)") +
                       "; got " + llvm::Twine(c.inputs.size()) + " inputs and " +
                       llvm::Twine(c.outputs.size()) + " outputs");
  if (llvm::Error e = hasBuf ? verifyStates(c, {"p", "g", "buf"}) : verifyStates(c, {"p", "g"})) return e;
  if (llvm::Error e = verifyScalars(c, states)) return e;
  if (llvm::Error e = verifyRange(c, "momentum", 0, 0, kInf, true)) return e;
  if (llvm::Error e = verifyRange(c, "weight_decay", 0, 0, kInf, true)) return e;
  if (llvm::Error e = verifyRange(c, "max_grad_norm", 0, 0, kInf, true)) return e;
  if (!std::isfinite(c.attrFloat("dampening", 0))) return kernelError("attribute 'dampening' must be finite");
  int64_t nesterov = c.attrInt("nesterov", 0);
  if (nesterov != 0 && nesterov != 1)
    return kernelError("attribute 'nesterov' = " + llvm::Twine(nesterov) + " must be 0 or 1");
  if (nesterov && (momentum <= 0 || c.attrFloat("dampening", 0) != 0))
    return kernelError("nesterov momentum requires a momentum > 0 and zero dampening (as torch.optim.SGD)");
  return llvm::Error::success();
}

llvm::Error runSgd(const KernelCall &c) {
  const double momentum = c.attrFloat("momentum", 0), wd = c.attrFloat("weight_decay", 0);
  const bool hasBuf = momentum != 0;
  const size_t states = hasBuf ? 3 : 2;
  if (llvm::Error e = prepareStates(c, states)) return e;
  llvm::Expected<StepScalars> s = readScalars(c, states);
  if (!s) return s.takeError();
  if (!std::isfinite(s->gradNorm)) return llvm::Error::success();  // skipped (header comment)
  SgdCoefs k;
  k.clip = clipCoefficient(c, s->gradNorm);
  k.wd = static_cast<float>(wd);
  k.momentum = static_cast<float>(momentum);
  k.oneMinusDampening = static_cast<float>(1 - c.attrFloat("dampening", 0));
  k.negLr = -s->lr;
  float *p = c.outputs[0].as<float>(), *g = c.outputs[1].as<float>();
  float *buf = hasBuf ? c.outputs[2].as<float>() : nullptr;
  const int64_t n = c.outputs[0].numel();
  withBool(wd != 0, [&](auto hasWd) {
    withBool(hasBuf, [&](auto mom) {
      withBool(s->step == 1, [&](auto first) {
        withBool(c.attrInt("nesterov", 0) != 0, [&](auto nesterov) {
          parallelFor(n, kGrain, [&](int64_t b, int64_t e) {
            sgdRange<decltype(hasWd)::value, decltype(mom)::value, decltype(first)::value,
                     decltype(nesterov)::value>(p + b, g + b, buf ? buf + b : nullptr, e - b, k);
          });
        });
      });
    });
  });
  return llvm::Error::success();
}

}  // namespace

void registerOptimKernels(KernelRegistry &r) {
  KernelDesc d;
  // In place: output 0 (acc) is input 0.
  d.op = "accumulate_grad";
  d.minInputs = d.maxInputs = 2;
  d.attrs = {{"scale", AttrKind::Float}};
  d.verify = verifyAccumulate;
  d.run = runAccumulate;
  r.add(d);

  d = KernelDesc();
  // In place: output 0 (buf) is input 0.
  d.op = "update_buffer";
  d.minInputs = d.maxInputs = 2;
  d.verify = verifyUpdateBuffer;
  d.run = runUpdateBuffer;
  r.add(d);

  d = KernelDesc();
  d.op = "global_norm";
  d.minInputs = 1;
  d.maxInputs = -1;
  d.verify = verifyGlobalNorm;
  d.workspace = globalNormWorkspace;
  d.run = runGlobalNorm;
  r.add(d);
  d.dtype = DType::F64;  // a partial norm: the running sum of squares
  r.add(d);

  // In place: outputs p, g, m, v are inputs 0..3.
  d = KernelDesc();
  d.minInputs = d.maxInputs = 7;
  d.minOutputs = d.maxOutputs = 4;
  d.attrs = {{"beta1", AttrKind::Float},
             {"beta2", AttrKind::Float},
             {"eps", AttrKind::Float},
             {"weight_decay", AttrKind::Float},
             {"max_grad_norm", AttrKind::Float}};
  d.op = "adamw_update";
  d.verify = verifyAdam<true>;
  d.run = runAdam<true>;
  r.add(d);
  d.op = "adam_update";
  d.verify = verifyAdam<false>;
  d.run = runAdam<false>;
  r.add(d);

  // In place: outputs p, g, [buf] are inputs 0..1 (2).
  d = KernelDesc();
  d.op = "sgd_update";
  d.minInputs = 5;
  d.maxInputs = 6;
  d.minOutputs = 2;
  d.maxOutputs = 3;
  d.attrs = {{"momentum", AttrKind::Float},
             {"dampening", AttrKind::Float},
             {"nesterov", AttrKind::Int},
             {"weight_decay", AttrKind::Float},
             {"max_grad_norm", AttrKind::Float}};
  d.verify = verifySgd;
  d.run = runSgd;
  r.add(d);
}

}  // namespace colossal::runtime::cpu

//===- TrainPlans.h - A hand-built training plan and its float64 reference -----*- C++ -*-===//
//
// The model, a token-level "bigram through a bottleneck" language model, small enough for a naive
// reference and built only from existing kernels plus the training instructions:
//
//   h = W[tokens]            W [V, D]  (gather)
//   logits = h · U           U [D, V]  (matmul)
//   loss = mean_n −log_softmax(logits)[n, label_n]   (log_softmax + nll_loss)
//
// and its hand-written backward in `train_step` (N = b·T positions of one microbatch):
//
//   dlogits = (exp(logp) − onehot(labels)) / N        (exp, one_hot, sub, mul)
//   dU = hᵀ · dlogits,  dh = dlogits · Uᵀ              (gemm)
//   dW = scatter-add of dh's rows at the token ids    (scatter_nd, reduction add)
//   accumulate_grad(W.grad, dW), accumulate_grad(U.grad, dU)   (scale 1/grad_accum)
//
// `optimizer_step` is global_norm over the grads and one `<optimizer>_update` per parameter;
// `eval` is the loss only; `forward` maps [B, T] tokens to [B, T, V] logits. The plan follows
// docs/training.md exactly (program names, bindings, states, TrainConfig).
//
// TrainReference recomputes the same training in float64 from the formulas of docs/training.md
// (PyTorch's optimizers), independently of the plan.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_TEST_UNIT_TRAINPLANS_H
#define COLOSSAL_TEST_UNIT_TRAINPLANS_H

#include "TestUtil.h"

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace colossal::runtime::testing {

struct TrainPlanConfig {
  int64_t V = 16, D = 6, B = 4, T = 5, A = 1;
  std::string optimizer = "adamw";  // adamw | adam | sgd
  double lr = 0.05, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.1;
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  double maxGradNorm = 0;
  std::string schedule = "constant";  // constant | cosine
  int64_t warmupSteps = 0, totalSteps = 0;
  double minLr = 0;
  DType tokens = DType::I64;
  uint32_t seed = 7;  // initial weights
};

/// Writes `dir`/train.safetensors for `cfg` and returns the plan (weights size and hash set).
/// `initW`/`initU` receive the initial parameters (row-major).
plan::Plan buildTrainPlan(llvm::StringRef dir, const TrainPlanConfig &cfg, std::vector<float> *initW = nullptr,
                          std::vector<float> *initU = nullptr);
/// Serializes `plan` to `dir`/`name`; returns the path.
std::string writePlanFile(llvm::StringRef dir, const plan::Plan &plan, llvm::StringRef name = "train.cplan");
/// buildTrainPlan + writePlanFile.
std::string writeTrainPlan(llvm::StringRef dir, const TrainPlanConfig &cfg, std::vector<float> *initW = nullptr,
                           std::vector<float> *initU = nullptr);


/// The same model and optimizer in float64.
class TrainReference {
public:
  TrainReference(const TrainPlanConfig &cfg, const std::vector<float> &W, const std::vector<float> &U);
  /// Mean loss of rows of tokens/labels (each [rows, T]) with the current parameters.
  double loss(const std::vector<int64_t> &tokens, const std::vector<int64_t> &labels) const;
  /// One optimizer step over the B rows of `tokens`/`labels` ([B, T]) split into A microbatches;
  /// `lr` is this step's rate, `step` counts from 1. Returns the reported loss (mean of the
  /// microbatch losses) and sets `gradNorm`.
  double step(const std::vector<int64_t> &tokens, const std::vector<int64_t> &labels, double lr, int64_t step,
              double &gradNorm);
  const std::vector<double> &W() const { return W_; }
  const std::vector<double> &U() const { return U_; }
  /// Loss and gradients of one microbatch (rows of [rows, T]).
  double lossAndGrad(const int64_t *tokens, const int64_t *labels, int64_t rows, std::vector<double> &dW,
                     std::vector<double> &dU) const;

private:
  void update(std::vector<double> &p, std::vector<double> &g, std::vector<double> &m, std::vector<double> &v,
              double lr, int64_t t, double clip) const;
  TrainPlanConfig cfg_;
  std::vector<double> W_, U_, mW_, vW_, mU_, vU_;
};

/// The learning rate of step `s` (from 0) under `cfg`'s schedule (docs/training.md), written
/// independently of the runtime's.
double referenceLr(const TrainPlanConfig &cfg, int64_t s);

/// DESIGN.md's data order: row `r` of step `s` starts at ((s·B + r)·T) mod (N − T − 1).
void referenceBatch(const std::vector<uint8_t> &data, int64_t s, int64_t B, int64_t T, std::vector<int64_t> &tokens,
                    std::vector<int64_t> &labels);

}  // namespace colossal::runtime::testing

#endif

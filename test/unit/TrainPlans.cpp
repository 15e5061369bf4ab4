//===- TrainPlans.cpp - The hand-built training plan and its float64 reference ---------------===//
#include "TrainPlans.h"

#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Safetensors.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace colossal::runtime::testing {

namespace {

/// Appends buffers and instructions to one program; ARENA buffers get fresh 64-byte aligned
/// offsets (no reuse), views share their base buffer's bytes under another shape.
class ProgramBuilder {
public:
  ProgramBuilder(plan::Program &p, const std::string &name, plan::Program::Role role) : p_(p) {
    p_.set_name(name);
    p_.set_role(role);
    p_.set_device(plan::CPU);
  }
  uint32_t arena(const std::string &name, DType dt, std::vector<int64_t> shape) {
    plan::Buffer &b = add(name, dt, shape, plan::ARENA);
    b.set_offset(next_);
    next_ += (b.size_bytes() + 63) / 64 * 64;
    p_.set_arena_bytes(next_);
    return b.id();
  }
  uint32_t view(uint32_t base, const std::string &name, std::vector<int64_t> shape) {
    plan::Buffer src = p_.buffers(base);
    plan::Buffer &b = add(name, static_cast<DType>(src.dtype()), shape, src.storage());
    b.set_offset(src.offset());
    b.set_weight_name(src.weight_name());
    b.set_state_name(src.state_name());
    return b.id();
  }
  uint32_t weight(const std::string &key, std::vector<int64_t> shape) {
    plan::Buffer &b = add(key, DType::F32, shape, plan::WEIGHT);
    b.set_weight_name(key);
    return b.id();
  }
  uint32_t state(const std::string &name, std::vector<int64_t> shape) {
    plan::Buffer &b = add(name, DType::F32, shape, plan::STATE);
    b.set_state_name(name);
    return b.id();
  }
  plan::Instruction &inst(const std::string &op, std::vector<uint32_t> in, std::vector<uint32_t> out) {
    plan::Instruction &i = *p_.add_instructions();
    i.set_op(op);
    for (uint32_t v : in) i.add_inputs(v);
    for (uint32_t v : out) i.add_outputs(v);
    i.set_loc("/" + p_.name() + "/" + op + "_" + std::to_string(p_.instructions_size() - 1));
    return i;
  }
  void input(const std::string &name, uint32_t id) {
    plan::Binding &b = *p_.add_inputs();
    b.set_name(name);
    b.set_buffer(id);
  }
  void output(const std::string &name, uint32_t id) {
    plan::Binding &b = *p_.add_outputs();
    b.set_name(name);
    b.set_buffer(id);
  }

private:
  plan::Buffer &add(const std::string &name, DType dt, const std::vector<int64_t> &shape, plan::Storage storage) {
    plan::Buffer &b = *p_.add_buffers();
    b.set_id(p_.buffers_size() - 1);
    b.set_name(name);
    b.set_dtype(static_cast<plan::DType>(dt));
    for (int64_t d : shape) b.add_shape(d);
    b.set_storage(storage);
    b.set_size_bytes(numElements(shape) * dtypeSize(dt));
    return b;
  }
  plan::Program &p_;
  uint64_t next_ = 0;
};

void setF(plan::Instruction &i, const std::string &name, double v) { (*i.mutable_attrs())[name].set_f(v); }
void setI(plan::Instruction &i, const std::string &name, int64_t v) { (*i.mutable_attrs())[name].set_i(v); }
void setS(plan::Instruction &i, const std::string &name, const std::string &v) { (*i.mutable_attrs())[name].set_s(v); }

/// Forward through the loss for `rows` rows; returns {tokens, labels, W, U, hv, labelsView, logp, loss}.
struct LossBuffers {
  uint32_t tokens, labels, W, U, hv, labelsN, logp, loss;
};
LossBuffers buildLoss(ProgramBuilder &pb, const TrainPlanConfig &c, int64_t rows) {
  const int64_t N = rows * c.T;
  LossBuffers r;
  r.tokens = pb.arena("input_ids", c.tokens, {rows, c.T});
  r.labels = pb.arena("labels", DType::I64, {rows, c.T});
  r.W = pb.state("W", {c.V, c.D});
  r.U = pb.state("U", {c.D, c.V});
  uint32_t h = pb.arena("h", DType::F32, {rows, c.T, c.D});
  setI(pb.inst("gather", {r.W, r.tokens}, {h}), "axis", 0);
  r.hv = pb.view(h, "h2d", {N, c.D});
  uint32_t logits = pb.arena("logits2d", DType::F32, {N, c.V});
  pb.inst("matmul", {r.hv, r.U}, {logits});
  r.logp = pb.arena("logp", DType::F32, {N, c.V});
  setI(pb.inst("log_softmax", {logits}, {r.logp}), "axis", 1);
  r.labelsN = pb.view(r.labels, "labels1d", {N});
  r.loss = pb.arena("loss", DType::F32, {});
  setS(pb.inst("nll_loss", {r.logp, r.labelsN}, {r.loss}), "reduction", "mean");
  pb.input("input_ids", r.tokens);
  pb.input("labels", r.labels);
  pb.output("loss", r.loss);
  return r;
}

std::string join(llvm::StringRef dir, llvm::StringRef name) {
  llvm::SmallString<256> p(dir);
  llvm::sys::path::append(p, name);
  return std::string(p);
}

}  // namespace

plan::Plan buildTrainPlan(llvm::StringRef dir, const TrainPlanConfig &c, std::vector<float> *initW,
                          std::vector<float> *initU) {
  plan::Plan model;
  model.set_version(kPlanVersion);
  model.set_producer("unit test");
  model.set_mode("train");
  model.set_weights_file("train.safetensors");
  const int64_t b = c.B / c.A, N = b * c.T;

  // forward: [B, T] tokens -> [B, T, V] logits.
  {
    ProgramBuilder pb(*model.add_programs(), "forward", plan::Program::FORWARD);
    uint32_t tokens = pb.arena("input_ids", c.tokens, {c.B, c.T});
    uint32_t W = pb.state("W", {c.V, c.D}), U = pb.state("U", {c.D, c.V});
    uint32_t h = pb.arena("h", DType::F32, {c.B, c.T, c.D});
    setI(pb.inst("gather", {W, tokens}, {h}), "axis", 0);
    uint32_t hv = pb.view(h, "h2d", {c.B * c.T, c.D});
    uint32_t logits = pb.arena("logits2d", DType::F32, {c.B * c.T, c.V});
    pb.inst("matmul", {hv, U}, {logits});
    uint32_t logits3 = pb.view(logits, "logits", {c.B, c.T, c.V});
    pb.input("input_ids", tokens);
    pb.output("logits", logits3);
  }
  // eval: loss of b rows.
  {
    ProgramBuilder pb(*model.add_programs(), "eval", plan::Program::EVAL);
    buildLoss(pb, c, b);
  }
  // train_step: loss, backward, accumulate.
  {
    ProgramBuilder pb(*model.add_programs(), "train_step", plan::Program::TRAIN_STEP);
    LossBuffers r = buildLoss(pb, c, b);
    uint32_t Wg = pb.state("W.grad", {c.V, c.D}), Ug = pb.state("U.grad", {c.D, c.V});
    uint32_t p = pb.arena("p", DType::F32, {N, c.V});
    pb.inst("exp", {r.logp}, {p});
    uint32_t values = pb.weight("onehot_values", {2});
    uint32_t oh = pb.arena("onehot", DType::F32, {N, c.V});
    setI(pb.inst("one_hot", {r.labelsN, values}, {oh}), "axis", 1);
    uint32_t diff = pb.arena("diff", DType::F32, {N, c.V});
    pb.inst("sub", {p, oh}, {diff});
    uint32_t invN = pb.weight("inv_n", {});
    uint32_t dlogits = pb.arena("dlogits", DType::F32, {N, c.V});
    pb.inst("mul", {diff, invN}, {dlogits});
    uint32_t dU = pb.arena("dU", DType::F32, {c.D, c.V});
    setI(pb.inst("gemm", {r.hv, dlogits}, {dU}), "trans_a", 1);
    uint32_t dh = pb.arena("dh", DType::F32, {N, c.D});
    setI(pb.inst("gemm", {dlogits, r.U}, {dh}), "trans_b", 1);
    uint32_t zeros = pb.weight("zeros_vd", {c.V, c.D});
    uint32_t tokIdx = pb.view(r.tokens, "token_index", {N, 1});
    uint32_t dW = pb.arena("dW", DType::F32, {c.V, c.D});
    setS(pb.inst("scatter_nd", {zeros, tokIdx, dh}, {dW}), "reduction", "add");
    setF(pb.inst("accumulate_grad", {Wg, dW}, {Wg}), "scale", 1.0 / double(c.A));
    setF(pb.inst("accumulate_grad", {Ug, dU}, {Ug}), "scale", 1.0 / double(c.A));
  }
  // optimizer_step.
  {
    ProgramBuilder pb(*model.add_programs(), "optimizer_step", plan::Program::OPTIMIZER_STEP);
    uint32_t lr = pb.arena("lr", DType::F32, {});
    uint32_t step = pb.arena("step", DType::I64, {});
    uint32_t gn = pb.arena("grad_norm", DType::F32, {});
    pb.input("lr", lr);
    pb.input("step", step);
    pb.output("grad_norm", gn);
    struct P { std::string name; std::vector<int64_t> shape; };
    std::vector<P> params = {{"W", {c.V, c.D}}, {"U", {c.D, c.V}}};
    std::vector<uint32_t> grads;
    for (const P &q : params) grads.push_back(pb.state(q.name + ".grad", q.shape));
    pb.inst("global_norm", grads, {gn});
    for (size_t i = 0; i < params.size(); ++i) {
      const P &q = params[i];
      uint32_t pid = pb.state(q.name, q.shape);
      std::vector<uint32_t> st = {pid, grads[i]};
      if (c.optimizer == "sgd") {
        if (c.momentum != 0) st.push_back(pb.state(q.name + ".momentum_buffer", q.shape));
      } else {
        st.push_back(pb.state(q.name + ".exp_avg", q.shape));
        st.push_back(pb.state(q.name + ".exp_avg_sq", q.shape));
      }
      std::vector<uint32_t> ins = st;
      ins.insert(ins.end(), {lr, step, gn});
      plan::Instruction &u = pb.inst(c.optimizer + "_update", ins, st);
      setF(u, "weight_decay", c.weightDecay);
      setF(u, "max_grad_norm", c.maxGradNorm);
      if (c.optimizer == "sgd") {
        setF(u, "momentum", c.momentum);
        setF(u, "dampening", c.dampening);
        setI(u, "nesterov", c.nesterov);
      } else {
        setF(u, "beta1", c.beta1);
        setF(u, "beta2", c.beta2);
        setF(u, "eps", c.eps);
      }
    }
  }

  // States, in the order a compiler would list them: params, grads, optimizer state.
  auto addState = [&](const std::string &name, std::vector<int64_t> shape, plan::StateTensor::Role role,
                      const std::string &param) {
    plan::StateTensor &s = *model.add_states();
    s.set_name(name);
    s.set_dtype(plan::F32);
    for (int64_t d : shape) s.add_shape(d);
    s.set_role(role);
    if (role == plan::StateTensor::PARAM) {
      s.set_init_weight("init." + name);
      s.set_source(name);
    } else {
      s.set_param(param);
    }
  };
  std::vector<std::pair<std::string, std::vector<int64_t>>> params = {{"W", {c.V, c.D}}, {"U", {c.D, c.V}}};
  for (auto &[n, s] : params) addState(n, s, plan::StateTensor::PARAM, "");
  for (auto &[n, s] : params) addState(n + ".grad", s, plan::StateTensor::GRAD, n);
  for (auto &[n, s] : params) {
    if (c.optimizer == "sgd") {
      if (c.momentum != 0) addState(n + ".momentum_buffer", s, plan::StateTensor::OPTIMIZER, n);
    } else {
      addState(n + ".exp_avg", s, plan::StateTensor::OPTIMIZER, n);
      addState(n + ".exp_avg_sq", s, plan::StateTensor::OPTIMIZER, n);
    }
  }

  plan::TrainConfig &tc = *model.mutable_train();
  tc.set_tokens_input("input_ids");
  tc.set_labels_input("labels");
  tc.set_logits_output("logits");
  tc.set_vocab_size(c.V);
  tc.set_global_batch(c.B);
  tc.set_seq_len(c.T);
  tc.set_grad_accum(c.A);
  tc.set_optimizer(c.optimizer);
  tc.set_lr(c.lr);
  tc.set_lr_schedule(c.schedule);
  tc.set_warmup_steps(c.warmupSteps);
  tc.set_total_steps(c.totalSteps);
  tc.set_min_lr(c.minLr);
  tc.set_grad_clip(c.maxGradNorm);
  tc.set_spec_hash(0x5eedULL);

  // Weights: initial parameters and the backward's constants.
  std::mt19937 rng(c.seed);
  std::normal_distribution<float> normal(0.f, 0.5f);
  std::vector<float> W(c.V * c.D), U(c.D * c.V), values = {0.f, 1.f}, invN = {float(1.0 / double(N))},
                     zeros(c.V * c.D, 0.f);
  for (float &v : W) v = normal(rng);
  for (float &v : U) v = normal(rng);
  std::string weightsPath = join(dir, "train.safetensors");
  std::vector<NamedTensor> ts = {{"init.W", DType::F32, {c.V, c.D}, W.data(), W.size() * 4},
                                 {"init.U", DType::F32, {c.D, c.V}, U.data(), U.size() * 4},
                                 {"onehot_values", DType::F32, {2}, values.data(), 8},
                                 {"inv_n", DType::F32, {}, invN.data(), 4},
                                 {"zeros_vd", DType::F32, {c.V, c.D}, zeros.data(), zeros.size() * 4}};
  EXPECT_FALSE(static_cast<bool>(writeSafetensors(weightsPath, ts)));
  uint64_t size = 0;
  EXPECT_FALSE(llvm::sys::fs::file_size(weightsPath, size));
  auto hash = fnv1a64File(weightsPath);
  EXPECT_TRUE(static_cast<bool>(hash));
  model.set_weights_size(size);
  model.set_weights_hash(hash ? *hash : 0);
  if (initW) *initW = W;
  if (initU) *initU = U;
  return model;
}

std::string writePlanFile(llvm::StringRef dir, const plan::Plan &model, llvm::StringRef name) {
  std::string planPath = join(dir, name);
  const std::string bytes = serializePlan(model);
  std::error_code ec;
  llvm::raw_fd_ostream os(planPath, ec);
  EXPECT_FALSE(ec);
  os << bytes;
  return planPath;
}

std::string writeTrainPlan(llvm::StringRef dir, const TrainPlanConfig &c, std::vector<float> *initW,
                           std::vector<float> *initU) {
  return writePlanFile(dir, buildTrainPlan(dir, c, initW, initU));
}

TrainReference::TrainReference(const TrainPlanConfig &cfg, const std::vector<float> &W, const std::vector<float> &U)
    : cfg_(cfg), W_(W.begin(), W.end()), U_(U.begin(), U.end()), mW_(W.size()), vW_(W.size()), mU_(U.size()),
      vU_(U.size()) {}

double TrainReference::lossAndGrad(const int64_t *tokens, const int64_t *labels, int64_t rows,
                                   std::vector<double> &dW, std::vector<double> &dU) const {
  const int64_t V = cfg_.V, D = cfg_.D, N = rows * cfg_.T;
  dW.assign(V * D, 0);
  dU.assign(D * V, 0);
  double total = 0;
  std::vector<double> logits(V), dl(V);
  for (int64_t n = 0; n < N; ++n) {
    const double *h = &W_[tokens[n] * D];
    double m = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += h[d] * U_[d * V + v];
      logits[v] = s;
      m = std::max(m, s);
    }
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits[v] - m);
    double lse = m + std::log(z);
    total += lse - logits[labels[n]];
    for (int64_t v = 0; v < V; ++v) dl[v] = (std::exp(logits[v] - lse) - (v == labels[n] ? 1 : 0)) / double(N);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t v = 0; v < V; ++v) {
        dU[d * V + v] += h[d] * dl[v];
        dW[tokens[n] * D + d] += dl[v] * U_[d * V + v];
      }
  }
  return total / double(N);
}

double TrainReference::loss(const std::vector<int64_t> &tokens, const std::vector<int64_t> &labels) const {
  std::vector<double> dW, dU;
  return lossAndGrad(tokens.data(), labels.data(), int64_t(tokens.size()) / cfg_.T, dW, dU);
}

void TrainReference::update(std::vector<double> &p, std::vector<double> &g, std::vector<double> &m,
                            std::vector<double> &v, double lr, int64_t t, double clip) const {
  const double wd = cfg_.weightDecay;
  for (size_t i = 0; i < p.size(); ++i) {
    double gi = g[i] * clip;
    if (cfg_.optimizer == "sgd") {
      gi += wd * p[i];
      if (cfg_.momentum != 0) {
        m[i] = t == 1 ? gi : cfg_.momentum * m[i] + (1 - cfg_.dampening) * gi;
        gi = cfg_.nesterov ? gi + cfg_.momentum * m[i] : m[i];
      }
      p[i] -= lr * gi;
      continue;
    }
    if (cfg_.optimizer == "adamw") p[i] *= 1 - lr * wd;
    else gi += wd * p[i];
    m[i] = cfg_.beta1 * m[i] + (1 - cfg_.beta1) * gi;
    v[i] = cfg_.beta2 * v[i] + (1 - cfg_.beta2) * gi * gi;
    double bc1 = 1 - std::pow(cfg_.beta1, double(t)), bc2 = 1 - std::pow(cfg_.beta2, double(t));
    p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + cfg_.eps);
  }
}

double TrainReference::step(const std::vector<int64_t> &tokens, const std::vector<int64_t> &labels, double lr,
                            int64_t t, double &gradNorm) {
  const int64_t b = cfg_.B / cfg_.A;
  std::vector<double> gW(W_.size(), 0), gU(U_.size(), 0), dW, dU;
  double lossSum = 0;
  for (int64_t k = 0; k < cfg_.A; ++k) {
    lossSum += lossAndGrad(&tokens[k * b * cfg_.T], &labels[k * b * cfg_.T], b, dW, dU);
    for (size_t i = 0; i < gW.size(); ++i) gW[i] += dW[i] / double(cfg_.A);
    for (size_t i = 0; i < gU.size(); ++i) gU[i] += dU[i] / double(cfg_.A);
  }
  double sq = 0;
  for (double g : gW) sq += g * g;
  for (double g : gU) sq += g * g;
  gradNorm = std::sqrt(sq);
  double clip = cfg_.maxGradNorm > 0 ? std::min(1.0, cfg_.maxGradNorm / (gradNorm + 1e-6)) : 1.0;
  update(W_, gW, mW_, vW_, lr, t, clip);
  update(U_, gU, mU_, vU_, lr, t, clip);
  return lossSum / double(cfg_.A);
}

double referenceLr(const TrainPlanConfig &cfg, int64_t s) {
  if (cfg.schedule == "constant") return cfg.lr;
  if (s < cfg.warmupSteps) return cfg.lr * double(s + 1) / double(cfg.warmupSteps);
  double progress = std::min(1.0, double(s - cfg.warmupSteps) / double(std::max<int64_t>(1, cfg.totalSteps - cfg.warmupSteps)));
  return cfg.minLr + 0.5 * (cfg.lr - cfg.minLr) * (1 + std::cos(M_PI * progress));
}

void referenceBatch(const std::vector<uint8_t> &data, int64_t s, int64_t B, int64_t T, std::vector<int64_t> &tokens,
                    std::vector<int64_t> &labels) {
  const int64_t N = int64_t(data.size());
  tokens.assign(B * T, 0);
  labels.assign(B * T, 0);
  for (int64_t r = 0; r < B; ++r) {
    int64_t start = ((s * B + r) * T) % (N - T - 1);
    for (int64_t t = 0; t < T; ++t) {
      tokens[r * T + t] = data[start + t];
      labels[r * T + t] = data[start + t + 1];
    }
  }
}

}  // namespace colossal::runtime::testing

//===- PipelineRunner.cpp - one rank's share of a pipeline schedule (PipelineRunner.h) ----===//
#include "train/PipelineRunner.h"

#include "colossal/runtime/Mesh.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace colossal::runtime {

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

bool isTransfer(llvm::StringRef name) { return name.starts_with("pp."); }

/// Messages of one microbatch and direction share a tag; between two ranks they arrive in the
/// order sent (MPI's non-overtaking rule), which both sides derive from the plan.
int tagOf(uint32_t mb, bool forward) { return static_cast<int>(mb * 2 + (forward ? 0 : 1)); }

int64_t elements(const plan::Buffer &b) {
  int64_t n = 1;
  for (int64_t d : b.shape()) n *= d;
  return n;
}

} // namespace

llvm::Expected<std::unique_ptr<PipelineRunner>>
PipelineRunner::create(const LoadedPlan &plan, const KernelRegistry &registry, Device &device, CommContext &comm,
                       const ExecutorOptions &options, int64_t dpRank, int64_t dpSize) {
  const plan::Pipeline &pl = plan.plan.pipeline();
  std::unique_ptr<PipelineRunner> r(new PipelineRunner());
  r->dpRank_ = dpRank;
  r->states_ = options.states;
  r->dpSize_ = dpSize;
  r->plan_ = &plan;
  r->device_ = &device;
  r->stages_ = pl.stages();
  r->microbatches_ = pl.microbatches();
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(plan.plan, plan.path);
  if (!mesh) return mesh.takeError();
  std::string axis;
  int index = -1;
  for (int i = 0; i < plan.plan.mesh_size(); ++i)
    if (plan.plan.mesh(i).role() == plan::MeshAxis::PIPELINE) {
      axis = plan.plan.mesh(i).name();
      index = i;
    }
  if (index < 0) return fail(plan.path + ": the plan's pipeline has no pipeline axis in its mesh");
  r->stage_ = static_cast<uint32_t>(mesh->coords(plan.rank)[index]);
  llvm::Expected<Communicator *> group = comm.axes(axis);
  if (!group) return group.takeError();
  r->pp_ = *group;

  const plan::Program *programs[3] = {plan.stageProgram(plan::Program::STAGE_FORWARD, r->stage_),
                                      plan.stageProgram(plan::Program::STAGE_BACKWARD, r->stage_),
                                      plan.stageProgram(plan::Program::STAGE_OPTIMIZER, r->stage_)};
  std::unique_ptr<Executor> *slots[3] = {&r->forward_, &r->backward_, &r->optimizer_};
  for (int k = 0; k < 3; ++k) {
    if (llvm::Error e = comm.prepare(*programs[k])) return std::move(e);
    auto ex = Executor::create(plan, registry, device, programs[k]->name(), options);
    if (!ex) return ex.takeError();
    *slots[k] = std::move(*ex);
  }

  // Who produces and who reads each transferred value.
  struct Producer {
    uint32_t stage;
    bool forward;
    int index;
  };
  std::map<std::string, Producer> producer;
  std::map<std::string, std::vector<uint32_t>> readers;  // stages other than the producer's
  for (const plan::Program &prog : plan.plan.programs()) {
    const bool fwd = prog.role() == plan::Program::STAGE_FORWARD;
    if (!fwd && prog.role() != plan::Program::STAGE_BACKWARD) continue;
    for (int i = 0; i < prog.outputs_size(); ++i)
      if (isTransfer(prog.outputs(i).name()))
        producer[prog.outputs(i).name()] = {static_cast<uint32_t>(prog.stage()), fwd, i};
    for (const plan::Binding &in : prog.inputs())
      if (isTransfer(in.name())) readers[in.name()].push_back(static_cast<uint32_t>(prog.stage()));
  }
  // Owners: the stage whose optimizer updates a state, else the first whose programs read it.
  // A parameter read on several stages (tied) is sent from its owner after each update.
  std::map<std::string, std::set<uint32_t>> stateReaders;
  for (const plan::Program &prog : plan.plan.programs())
    if (prog.role() == plan::Program::STAGE_OPTIMIZER)
      for (const plan::Buffer &b : prog.buffers())
        if (!b.state_name().empty()) r->owner_.try_emplace(b.state_name(), static_cast<uint32_t>(prog.stage()));
  for (const plan::Program &prog : plan.plan.programs())
    if (prog.role() == plan::Program::STAGE_FORWARD || prog.role() == plan::Program::STAGE_BACKWARD)
      for (const plan::Buffer &b : prog.buffers())
        if (!b.state_name().empty()) {
          r->owner_.try_emplace(b.state_name(), static_cast<uint32_t>(prog.stage()));
          stateReaders[b.state_name()].insert(static_cast<uint32_t>(prog.stage()));
        }
  for (auto &[name, stages] : stateReaders)
    if (stages.size() > 1) r->tied_.push_back(name);

  // Receives: every transferred input of this stage's two programs made on another stage, once,
  // ordered as its producer sends (by producer stage, then output index).
  std::vector<std::tuple<uint32_t, int, Message, bool>> incoming;
  for (int k = 0; k < 2; ++k)
    for (const plan::Binding &in : programs[k]->inputs()) {
      if (!isTransfer(in.name())) continue;
      if (k == 1) r->backwardReads_[in.name()] = true;
      const Producer &p = producer.at(in.name());
      if (p.stage == r->stage_) continue;
      const plan::Buffer &b = programs[k]->buffers(static_cast<int>(in.buffer()));
      Message m{in.name(), p.stage, elements(b), static_cast<DType>(b.dtype())};
      bool seen = false;
      for (auto &entry : incoming) seen |= std::get<2>(entry).name == in.name();
      if (!seen) incoming.emplace_back(p.stage, p.index, m, p.forward);
    }
  std::sort(incoming.begin(), incoming.end(), [](const auto &a, const auto &b) {
    return std::make_pair(std::get<0>(a), std::get<1>(a)) < std::make_pair(std::get<0>(b), std::get<1>(b));
  });
  for (auto &[stage, idx, m, fwd] : incoming) r->recv_[fwd ? 0 : 1].push_back(m);
  // Sends: each transferred output to every other stage that reads it, in output order.
  for (int k = 0; k < 2; ++k)
    for (const plan::Binding &out : programs[k]->outputs()) {
      if (!isTransfer(out.name())) continue;
      std::vector<uint32_t> to = readers[out.name()];
      std::sort(to.begin(), to.end());
      to.erase(std::unique(to.begin(), to.end()), to.end());
      const plan::Buffer &b = programs[k]->buffers(static_cast<int>(out.buffer()));
      for (uint32_t s : to)
        if (s != r->stage_)
          r->send_[k].push_back({out.name(), s, elements(b), static_cast<DType>(b.dtype())});
    }
  const plan::TrainConfig &tc = plan.plan.train();
  const int64_t rows = tc.global_batch() / std::max<int64_t>(1, r->microbatches_ * dpSize);
  r->tokens_.resize(rows * tc.seq_len() * sizeof(int64_t));
  r->labels_.resize(rows * tc.seq_len());
  return r;
}

llvm::Error PipelineRunner::receive(bool forward, uint32_t mb) {
  for (const Message &m : recv_[forward ? 0 : 1]) {
    Kept k;
    k.bytes.resize(static_cast<size_t>(m.count) * dtypeSize(m.dtype));
    if (llvm::Error e = pp_->recv(k.bytes.data(), m.count, m.dtype, static_cast<int>(m.peer), tagOf(mb, forward)))
      return fail("stage " + llvm::Twine(stage_) + ": receiving '" + m.name + "' of microbatch " + llvm::Twine(mb) +
                  " from stage " + llvm::Twine(m.peer) + ": " + llvm::toString(std::move(e)));
    k.forBackward = backwardReads_.count(m.name) > 0;
    // Saved activations are forward values; a received gradient is consumed by the next backward.
    k.counted = forward && k.forBackward;
    if (k.counted) peakSaved_ = std::max(peakSaved_, saved_ += static_cast<int64_t>(k.bytes.size()));
    kept_[{m.name, mb}] = std::move(k);
  }
  return llvm::Error::success();
}

llvm::Error PipelineRunner::send(bool forward, uint32_t mb) {
  for (const Message &m : send_[forward ? 0 : 1]) {
    auto it = outbox_.find({m.name, mb});
    if (it == outbox_.end())
      return fail("stage " + llvm::Twine(stage_) + ": '" + m.name + "' of microbatch " + llvm::Twine(mb) +
                  " is sent before it is computed (the schedule's send precedes its " + (forward ? "F" : "B") +
                  llvm::Twine(mb) + ")");
    if (llvm::Error e = pp_->isend(it->second.data(), m.count, m.dtype, static_cast<int>(m.peer), tagOf(mb, forward)))
      return fail("stage " + llvm::Twine(stage_) + ": sending '" + m.name + "' of microbatch " + llvm::Twine(mb) +
                  " to stage " + llvm::Twine(m.peer) + ": " + llvm::toString(std::move(e)));
  }
  // The buffers stay alive (a moved vector keeps its storage) until the step's waitSends().
  for (const Message &m : send_[forward ? 0 : 1]) {
    auto it = outbox_.find({m.name, mb});
    if (it == outbox_.end()) continue;
    inFlightSends_.push_back(std::move(it->second));
    outbox_.erase(it);
  }
  return llvm::Error::success();
}

llvm::Error PipelineRunner::runProgram(Executor &ex, bool forward, uint32_t mb, const TokenData &data, int64_t step,
                                       DType tokensDType, double &lossSum) {
  const plan::TrainConfig &tc = plan_->plan.train();
  const int64_t rows = tc.global_batch() / (microbatches_ * dpSize_), T = tc.seq_len();
  const int64_t firstRow = dpRank_ * (tc.global_batch() / dpSize_) + mb * rows;
  const std::string what = "stage " + std::to_string(stage_) + ", " + (forward ? "F" : "B") + std::to_string(mb);
  bool filled = false;
  for (const BindingInfo &in : ex.inputs()) {
    if (in.name == tc.tokens_input() || in.name == tc.labels_input()) {
      if (!filled) data.fillRows(step, tc.global_batch(), firstRow, rows, tokensDType, tokens_.data(), labels_.data());
      filled = true;
      const bool tokens = in.name == tc.tokens_input();
      if (llvm::Error e = ex.setInput(in.name, tokens ? tokensDType : DType::I64, {rows, T},
                                      tokens ? static_cast<const void *>(tokens_.data()) : labels_.data()))
        return e;
      continue;
    }
    auto it = kept_.find({in.name, mb});
    if (it == kept_.end())
      return fail(what + ": input '" + in.name + "' was neither received nor kept (the schedule runs " +
                  (forward ? "F" : "B") + llvm::Twine(mb) + " before the action that provides it)");
    if (llvm::Error e = ex.setInput(in.name, in.tensor.dtype, in.tensor.shape, it->second.bytes.data())) return e;
  }
  if (llvm::Error e = ex.run()) return fail(what + ": " + llvm::toString(std::move(e)));
  // Release what this run was the last to read: the forward's inputs the backward does not read,
  // and everything the backward read.
  for (const BindingInfo &in : ex.inputs()) {
    auto it = kept_.find({in.name, mb});
    if (it == kept_.end() || (forward && it->second.forBackward)) continue;
    if (it->second.counted) saved_ -= static_cast<int64_t>(it->second.bytes.size());
    kept_.erase(it);
  }
  for (const BindingInfo &out : ex.outputs()) {
    if (out.name == "loss") {
      float v = 0;
      device_->copyToHost(&v, out.tensor.data, sizeof v);
      lossSum += v;
      continue;
    }
    if (!isTransfer(out.name)) continue;
    std::vector<char> bytes(out.tensor.bytes());
    device_->copyToHost(bytes.data(), out.tensor.data, bytes.size());
    bool sent = false;
    for (const Message &m : send_[forward ? 0 : 1]) sent |= m.name == out.name;
    if (forward && backwardReads_.count(out.name)) {
      Kept k;
      k.bytes = sent ? bytes : std::move(bytes);
      k.forBackward = k.counted = true;
      peakSaved_ = std::max(peakSaved_, saved_ += static_cast<int64_t>(k.bytes.size()));
      kept_[{out.name, mb}] = std::move(k);
    }
    if (sent) outbox_[{out.name, mb}] = std::move(bytes);
  }
  return llvm::Error::success();
}

llvm::Expected<double> PipelineRunner::runMicrobatches(const TokenData &data, int64_t step, DType tokensDType) {
  double lossSum = 0;
  saved_ = peakSaved_ = 0;
  using Action = plan::Pipeline::Action;
  events_.clear();
  auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count(); };
  uint32_t index = 0;
  for (const Action &a : plan_->plan.pipeline().ranks(static_cast<int>(stage_)).actions()) {
    const uint32_t mb = a.microbatch();
    const double start = record_ ? now() : 0;
    llvm::Error e = llvm::Error::success();
    switch (a.kind()) {
    case Action::FORWARD: e = runProgram(*forward_, true, mb, data, step, tokensDType, lossSum); break;
    case Action::BACKWARD: e = runProgram(*backward_, false, mb, data, step, tokensDType, lossSum); break;
    case Action::RECV_FORWARD: e = receive(true, mb); break;
    case Action::RECV_BACKWARD: e = receive(false, mb); break;
    case Action::SEND_FORWARD: e = send(true, mb); break;
    case Action::SEND_BACKWARD: e = send(false, mb); break;
    default: e = fail("stage " + llvm::Twine(stage_) + ": unknown pipeline action kind " + llvm::Twine(int(a.kind())));
    }
    if (e) return std::move(e);
    if (record_) {
      int64_t bytes = 0;
      const bool isSend = a.kind() == Action::SEND_FORWARD || a.kind() == Action::SEND_BACKWARD;
      const bool isRecv = a.kind() == Action::RECV_FORWARD || a.kind() == Action::RECV_BACKWARD;
      if (isSend || isRecv) {
        const bool fwd = a.kind() == Action::SEND_FORWARD || a.kind() == Action::RECV_FORWARD;
        for (const Message &m : (isSend ? send_ : recv_)[fwd ? 0 : 1])
          bytes += m.count * static_cast<int64_t>(dtypeSize(m.dtype));
      }
      events_.push_back({index, a.kind(), mb, a.stage(), start, now(), bytes, saved_});
    }
    ++index;
  }
  if (llvm::Error e = pp_->waitSends()) return std::move(e);
  inFlightSends_.clear();
  if (!kept_.empty() || !outbox_.empty())
    return fail("stage " + llvm::Twine(stage_) + ": the schedule left " + llvm::Twine(kept_.size() + outbox_.size()) +
                " values unread (its actions do not match the stage programs)");
  double total = 0;
  if (llvm::Error e = pp_->allReduce(&lossSum, &total, 1, DType::F64, ReduceOp::Sum)) return std::move(e);
  return total;
}

llvm::Expected<double> PipelineRunner::runOptimizer(float lr, int64_t stepNumber) {
  if (llvm::Error e = optimizer_->setInput("lr", DType::F32, {}, &lr)) return std::move(e);
  if (llvm::Error e = optimizer_->setInput("step", DType::I64, {}, &stepNumber)) return std::move(e);
  if (llvm::Error e = optimizer_->run())
    return fail("stage " + llvm::Twine(stage_) + ", program 'stage" + llvm::Twine(stage_) +
                "_optimizer': " + llvm::toString(std::move(e)));
  llvm::Expected<TensorRef> norm = optimizer_->output("grad_norm");
  if (!norm) return norm.takeError();
  float v = 0;
  device_->copyToHost(&v, norm->data, sizeof v);
  // Tied parameters: the owner's updated value to every stage (all take part, in one order).
  for (const std::string &name : tied_) {
    const StateEntry *e = states_->find(name);
    if (!e) return fail("stage " + llvm::Twine(stage_) + ": tied parameter '" + name + "' is not in the state store");
    if (llvm::Error err = pp_->broadcast(e->tensor.data, e->tensor.data, e->tensor.numel(), e->tensor.dtype,
                                         static_cast<int>(owner_.at(name))))
      return err;
  }
  return static_cast<double>(v);
}

llvm::Error PipelineRunner::syncStates(StateStore &states) {
  for (const StateEntry &e : states.entries()) {
    auto it = owner_.find(e.name());
    if (it == owner_.end()) continue;
    if (llvm::Error err = pp_->broadcast(e.tensor.data, e.tensor.data, e.tensor.numel(), e.tensor.dtype,
                                         static_cast<int>(it->second)))
      return err;
  }
  return llvm::Error::success();
}

} // namespace colossal::runtime

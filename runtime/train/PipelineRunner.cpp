//===- PipelineRunner.cpp - one rank's share of a pipeline schedule (PipelineRunner.h) ----===//
#include "colossal/runtime/PipelineRunner.h"

#include "colossal/runtime/Mesh.h"
#include "colossal/runtime/PipelineSchedule.h"

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
  r->dpSize_ = dpSize;
  r->states_ = options.states;
  r->plan_ = &plan;
  r->device_ = &device;
  r->stages_ = pl.stages();
  r->microbatches_ = pl.microbatches();
  r->ranks_ = pl.stages() / std::max<uint32_t>(1, pl.virtual_stages());
  // Messages are tagged by (microbatch, receiving stage, direction): MPI guarantees 32767 tags.
  if (static_cast<int64_t>(r->microbatches_) * r->stages_ * 2 > 32767)
    return fail(plan.path + ": " + llvm::Twine(r->microbatches_) + " microbatches x " + llvm::Twine(r->stages_) +
                " stages need more message tags than MPI guarantees (32767)");
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
  r->rank_ = static_cast<uint32_t>(mesh->coords(plan.rank)[index]);
  llvm::Expected<Communicator *> group = comm.axes(axis);
  if (!group) return group.takeError();
  r->pp_ = *group;
  auto rankOf = [&](uint32_t stage) { return rankOfStage(pl, stage); };

  // This rank's programs: forward and backward (with a split backward also W) of each of its
  // stages, one optimizer.
  auto make = [&](const plan::Program *prog, std::unique_ptr<Executor> &out) -> llvm::Error {
    if (llvm::Error e = comm.prepare(*prog)) return e;
    auto ex = Executor::create(plan, registry, device, prog->name(), options);
    if (!ex) return ex.takeError();
    out = std::move(*ex);
    return llvm::Error::success();
  };
  std::vector<std::pair<uint32_t, const plan::Program *>> mine[3];  // (stage, program) per phase
  for (uint32_t s = 0; s < r->stages_; ++s) {
    if (rankOf(s) != r->rank_) continue;
    Stage &st = r->local_[s];
    const plan::Program *f = plan.stageProgram(plan::Program::STAGE_FORWARD, s);
    if (llvm::Error e = make(f, st.programs[kForward])) return std::move(e);
    mine[kForward].emplace_back(s, f);
    if (pl.forward_only()) continue;
    const plan::Program *b = plan.stageProgram(plan::Program::STAGE_BACKWARD, s);
    if (llvm::Error e = make(b, st.programs[kBackward])) return std::move(e);
    mine[kBackward].emplace_back(s, b);
    if (!pl.weight_split()) continue;
    const plan::Program *w = plan.stageProgram(plan::Program::STAGE_BACKWARD_WEIGHT, s);
    if (llvm::Error e = make(w, st.programs[kWeight])) return std::move(e);
    mine[kWeight].emplace_back(s, w);
  }
  if (!pl.forward_only())
    if (llvm::Error e = make(plan.stageProgram(plan::Program::STAGE_OPTIMIZER, r->rank_), r->optimizer_))
      return std::move(e);

  // Who produces each transferred value, and which (stage, phase) programs read it.
  struct Producer {
    uint32_t stage;
    bool forward;
    int index;
  };
  std::map<std::string, Producer> producer;
  std::map<std::string, std::vector<std::pair<uint32_t, bool>>> readers;
  for (const plan::Program &prog : plan.plan.programs()) {
    const bool fwd = prog.role() == plan::Program::STAGE_FORWARD;
    if (!fwd && prog.role() != plan::Program::STAGE_BACKWARD && prog.role() != plan::Program::STAGE_BACKWARD_WEIGHT)
      continue;
    for (int i = 0; i < prog.outputs_size(); ++i)
      if (isTransfer(prog.outputs(i).name()))
        producer[prog.outputs(i).name()] = {static_cast<uint32_t>(prog.stage()), fwd, i};
    for (const plan::Binding &in : prog.inputs())
      if (isTransfer(in.name())) readers[in.name()].emplace_back(static_cast<uint32_t>(prog.stage()), fwd);
  }
  // The stage of rank q whose receive action takes `name`: a forward value at the first of q's
  // stages that reads it, a gradient at the last (backward runs the stages in reverse).
  auto receivingStage = [&](const std::string &name, uint32_t q) {
    const bool fwd = producer.at(name).forward;
    int64_t chosen = -1;
    for (auto &[stage, phase] : readers[name])
      if (rankOf(stage) == q)
        chosen = chosen < 0 ? stage : fwd ? std::min<int64_t>(chosen, stage) : std::max<int64_t>(chosen, stage);
    return static_cast<uint32_t>(chosen);
  };

  // Receives, per receiving stage and direction, ordered as the producers send: by producer
  // stage in the direction's order (ascending forward, descending backward), then output index.
  std::vector<std::tuple<bool, int64_t, int, Message>> incoming;
  std::set<std::string> seen;
  for (int k = 0; k < 3; ++k)
    for (auto &[s, prog] : mine[k])
      for (const plan::Binding &in : prog->inputs()) {
        if (!isTransfer(in.name())) continue;
        ++r->localReaders_[in.name()];
        const Producer &p = producer.at(in.name());
        if (p.forward && k != kForward) r->savedHere_[in.name()] = true;
        if (rankOf(p.stage) == r->rank_ || !seen.insert(in.name()).second) continue;
        const plan::Buffer &b = prog->buffers(static_cast<int>(in.buffer()));
        Message m{in.name(), rankOf(p.stage), elements(b), static_cast<DType>(b.dtype()),
                  receivingStage(in.name(), r->rank_)};
        incoming.emplace_back(p.forward, p.forward ? int64_t(p.stage) : -int64_t(p.stage), p.index, m);
      }
  std::sort(incoming.begin(), incoming.end(), [](const auto &a, const auto &b) {
    return std::make_pair(std::get<1>(a), std::get<2>(a)) < std::make_pair(std::get<1>(b), std::get<2>(b));
  });
  for (auto &[fwd, order, idx, m] : incoming) r->local_[m.tagStage].recv[fwd ? 0 : 1].push_back(m);
  // Sends: each transferred output to every other rank that reads it, in output order (a W's
  // outputs stay in it).
  for (int k = 0; k < 2; ++k)
    for (auto &[s, prog] : mine[k])
      for (const plan::Binding &out : prog->outputs()) {
        if (!isTransfer(out.name())) continue;
        std::set<uint32_t> to;
        for (auto &[stage, phase] : readers[out.name()])
          if (rankOf(stage) != r->rank_) to.insert(rankOf(stage));
        const plan::Buffer &b = prog->buffers(static_cast<int>(out.buffer()));
        for (uint32_t q : to)
          r->local_[s].send[k].push_back(
              {out.name(), q, elements(b), static_cast<DType>(b.dtype()), receivingStage(out.name(), q)});
      }

  // Owners: the rank whose optimizer updates a state, else the first that reads it. A parameter
  // read on several ranks (tied) is sent from its owner after each update.
  std::map<std::string, std::set<uint32_t>> stateReaders;
  for (const plan::Program &prog : plan.plan.programs())
    if (prog.role() == plan::Program::STAGE_OPTIMIZER)
      for (const plan::Buffer &b : prog.buffers())
        if (!b.state_name().empty()) r->owner_.try_emplace(b.state_name(), static_cast<uint32_t>(prog.stage()));
  for (const plan::Program &prog : plan.plan.programs())
    if (prog.role() == plan::Program::STAGE_FORWARD || prog.role() == plan::Program::STAGE_BACKWARD ||
        prog.role() == plan::Program::STAGE_BACKWARD_WEIGHT)
      for (const plan::Buffer &b : prog.buffers())
        if (!b.state_name().empty()) {
          r->owner_.try_emplace(b.state_name(), rankOf(static_cast<uint32_t>(prog.stage())));
          stateReaders[b.state_name()].insert(rankOf(static_cast<uint32_t>(prog.stage())));
        }
  for (auto &[name, ranks] : stateReaders)
    if (ranks.size() > 1) r->tied_.push_back(name);
  for (const plan::Pipeline::Action &a : pl.ranks(static_cast<int>(r->rank_)).actions())
    if (a.kind() != plan::Pipeline::Action::FORWARD && a.kind() != plan::Pipeline::Action::BACKWARD &&
        a.kind() != plan::Pipeline::Action::WEIGHT)
      r->explicit_.insert({int(a.kind()), a.stage()});
  const plan::TrainConfig &tc = plan.plan.train();
  const int64_t rows = tc.global_batch() / std::max<int64_t>(1, r->microbatches_ * dpSize);
  r->tokens_.resize(rows * tc.seq_len() * sizeof(int64_t));
  r->labels_.resize(rows * tc.seq_len());
  return r;
}

void PipelineRunner::keep(const std::string &name, uint32_t mb, std::vector<char> bytes) {
  Kept k;
  k.readers = localReaders_[name];
  k.counted = savedHere_.count(name) > 0;
  if (k.counted) peakSaved_ = std::max(peakSaved_, saved_ += static_cast<int64_t>(bytes.size()));
  k.bytes = std::move(bytes);
  kept_[{name, mb}] = std::move(k);
}

llvm::Error PipelineRunner::receive(uint32_t stage, bool forward, uint32_t mb) {
  for (const Message &m : local_.at(stage).recv[forward ? 0 : 1]) {
    std::vector<char> bytes(static_cast<size_t>(m.count) * dtypeSize(m.dtype));
    if (llvm::Error e = pp_->recv(bytes.data(), m.count, m.dtype, static_cast<int>(m.peer), tagOf(mb, stage, forward)))
      return fail("stage " + llvm::Twine(stage) + ": receiving '" + m.name + "' of microbatch " + llvm::Twine(mb) +
                  " from pipeline rank " + llvm::Twine(m.peer) + ": " + llvm::toString(std::move(e)));
    keep(m.name, mb, std::move(bytes));
  }
  return llvm::Error::success();
}

llvm::Error PipelineRunner::send(uint32_t stage, bool forward, uint32_t mb) {
  const std::vector<Message> &list = local_.at(stage).send[forward ? 0 : 1];
  for (const Message &m : list) {
    auto it = outbox_.find({m.name, mb});
    if (it == outbox_.end())
      return fail("stage " + llvm::Twine(stage) + ": '" + m.name + "' of microbatch " + llvm::Twine(mb) +
                  " is sent before it is computed (the schedule's send precedes its " + (forward ? "F" : "B") +
                  llvm::Twine(mb) + ")");
    if (llvm::Error e = pp_->isend(it->second.data(), m.count, m.dtype, static_cast<int>(m.peer),
                                   tagOf(mb, m.tagStage, forward)))
      return fail("stage " + llvm::Twine(stage) + ": sending '" + m.name + "' of microbatch " + llvm::Twine(mb) +
                  " to pipeline rank " + llvm::Twine(m.peer) + ": " + llvm::toString(std::move(e)));
  }
  // The buffers stay alive (a moved vector keeps its storage) until the step's waitSends().
  for (const Message &m : list) {
    auto it = outbox_.find({m.name, mb});
    if (it == outbox_.end()) continue;
    inFlightSends_.push_back(std::move(it->second));
    outbox_.erase(it);
  }
  return llvm::Error::success();
}

llvm::Error PipelineRunner::runProgram(uint32_t stage, Phase phase, uint32_t mb, const Feed &feed,
                                       const Collect *collect, double &lossSum) {
  Stage &st = local_.at(stage);
  Executor &ex = *st.programs[phase];
  const bool forward = phase == kForward;
  static const char *const letter[] = {"F", "B", "W"};
  const std::string what = "stage " + std::to_string(stage) + ", " + letter[phase] + std::to_string(mb);
  for (const BindingInfo &in : ex.inputs()) {
    if (!isTransfer(in.name)) {
      llvm::Expected<bool> fed = feed(ex, in, mb);
      if (!fed) return fail(what + ": input '" + in.name + "': " + llvm::toString(fed.takeError()));
      if (!*fed) return fail(what + ": input '" + in.name + "' is not a value the pipeline runner provides");
      continue;
    }
    auto it = kept_.find({in.name, mb});
    if (it == kept_.end())
      return fail(what + ": input '" + in.name + "' was neither received nor kept (the schedule runs " +
                  letter[phase] + llvm::Twine(mb) + " before the action that provides it)");
    if (llvm::Error e = ex.setInput(in.name, in.tensor.dtype, in.tensor.shape, it->second.bytes.data())) return e;
  }
  if (llvm::Error e = ex.run()) return fail(what + ": " + llvm::toString(std::move(e)));
  // Each kept value goes once the last of this rank's programs that read it has run.
  for (const BindingInfo &in : ex.inputs()) {
    auto it = kept_.find({in.name, mb});
    if (it == kept_.end() || --it->second.readers > 0) continue;
    if (it->second.counted) saved_ -= static_cast<int64_t>(it->second.bytes.size());
    kept_.erase(it);
  }
  static const std::vector<Message> none;
  const std::vector<Message> &sends = phase == kWeight ? none : st.send[forward ? 0 : 1];
  for (const BindingInfo &out : ex.outputs()) {
    if (collect && !isTransfer(out.name)) {
      if (llvm::Error e = (*collect)(out, mb)) return fail(what + ": output '" + out.name + "': " + llvm::toString(std::move(e)));
      continue;
    }
    if (out.name == "loss") {
      float v = 0;
      device_->copyToHost(&v, out.tensor.data, sizeof v);
      lossSum += v;
      continue;
    }
    if (!isTransfer(out.name)) continue;
    std::vector<char> bytes(out.tensor.bytes());
    device_->copyToHost(bytes.data(), out.tensor.data, bytes.size());
    const bool sent = std::any_of(sends.begin(), sends.end(), [&](const Message &m) { return m.name == out.name; });
    if (localReaders_.count(out.name)) keep(out.name, mb, sent ? bytes : std::move(bytes));
    if (sent) outbox_[{out.name, mb}] = std::move(bytes);
  }
  return llvm::Error::success();
}

llvm::Expected<double> PipelineRunner::runMicrobatches(const TokenData &data, int64_t step, DType tokensDType) {
  const plan::TrainConfig &tc = plan_->plan.train();
  const int64_t rows = tc.global_batch() / (microbatches_ * dpSize_), T = tc.seq_len();
  // The tokens and labels of microbatch mb, filled once per program run that reads them.
  Feed feed = [&](Executor &ex, const BindingInfo &in, uint32_t mb) -> llvm::Expected<bool> {
    const bool tokens = in.name == tc.tokens_input();
    if (!tokens && in.name != tc.labels_input()) return false;
    const int64_t firstRow = dpRank_ * (tc.global_batch() / dpSize_) + mb * rows;
    data.fillRows(step, tc.global_batch(), firstRow, rows, tokensDType, tokens_.data(), labels_.data());
    if (llvm::Error e = ex.setInput(in.name, tokens ? tokensDType : DType::I64, {rows, T},
                                    tokens ? static_cast<const void *>(tokens_.data()) : labels_.data()))
      return std::move(e);
    return true;
  };
  double lossSum = 0;
  if (llvm::Error e = runActions(feed, nullptr, lossSum)) return std::move(e);
  double total = 0;
  if (llvm::Error e = pp_->allReduce(&lossSum, &total, 1, DType::F64, ReduceOp::Sum)) return std::move(e);
  return total;
}

llvm::Error PipelineRunner::runForward(const Feed &feed, const Collect &collect) {
  double unused = 0;
  return runActions(feed, &collect, unused);
}

llvm::Error PipelineRunner::runActions(const Feed &feed, const Collect *collect, double &lossSum) {
  saved_ = peakSaved_ = 0;
  using Action = plan::Pipeline::Action;
  events_.clear();
  auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count(); };
  uint32_t index = 0;
  for (const Action &a : plan_->plan.pipeline().ranks(static_cast<int>(rank_)).actions()) {
    const uint32_t mb = a.microbatch(), s = a.stage();
    if (!local_.count(s))
      return fail("pipeline rank " + llvm::Twine(rank_) + ": the schedule names stage " + llvm::Twine(s) +
                  ", which runs on another rank");
    const double start = record_ ? now() : 0;
    int64_t implicitSent = 0;  // bytes a compute action sent without a send action
    llvm::Error e = llvm::Error::success();
    switch (a.kind()) {
    case Action::FORWARD:
    case Action::BACKWARD: {
      // Messages without an action of their own (to or from a stage whose neighbour runs on this
      // rank: ZB-V's turn) are received before and sent after the compute that needs them.
      const bool fwd = a.kind() == Action::FORWARD;
      const Stage &st = local_.at(s);
      if (!st.recv[fwd ? 0 : 1].empty() && !explicit_.count({int(fwd ? Action::RECV_FORWARD : Action::RECV_BACKWARD), s}))
        e = receive(s, fwd, mb);
      if (!e) e = runProgram(s, fwd ? kForward : kBackward, mb, feed, collect, lossSum);
      if (!e && !st.send[fwd ? 0 : 1].empty() &&
          !explicit_.count({int(fwd ? Action::SEND_FORWARD : Action::SEND_BACKWARD), s})) {
        e = send(s, fwd, mb);
        implicitSent = bytesOf(st.send[fwd ? 0 : 1]);
      }
      break;
    }
    case Action::WEIGHT:
      e = local_.at(s).programs[kWeight] ? runProgram(s, kWeight, mb, feed, collect, lossSum)
                                         : fail("stage " + llvm::Twine(s) + ": the schedule runs W" + llvm::Twine(mb) +
                                                " but the plan's backward is not split");
      break;
    case Action::RECV_FORWARD: e = receive(s, true, mb); break;
    case Action::RECV_BACKWARD: e = receive(s, false, mb); break;
    case Action::SEND_FORWARD: e = send(s, true, mb); break;
    case Action::SEND_BACKWARD: e = send(s, false, mb); break;
    default: e = fail("stage " + llvm::Twine(s) + ": unknown pipeline action kind " + llvm::Twine(int(a.kind())));
    }
    if (e) return e;
    if (record_) {
      int64_t bytes = 0;
      const bool isSend = a.kind() == Action::SEND_FORWARD || a.kind() == Action::SEND_BACKWARD;
      const bool isRecv = a.kind() == Action::RECV_FORWARD || a.kind() == Action::RECV_BACKWARD;
      if (isSend || isRecv) {
        const bool fwd = a.kind() == Action::SEND_FORWARD || a.kind() == Action::RECV_FORWARD;
        bytes = bytesOf((isSend ? local_.at(s).send : local_.at(s).recv)[fwd ? 0 : 1]);
      } else {
        bytes = implicitSent;
      }
      events_.push_back({index, a.kind(), mb, a.stage(), start, now(), bytes, saved_});
    }
    ++index;
  }
  if (llvm::Error e = pp_->waitSends()) return e;
  inFlightSends_.clear();
  if (!kept_.empty() || !outbox_.empty())
    return fail("pipeline rank " + llvm::Twine(rank_) + ": the schedule left " + llvm::Twine(kept_.size() + outbox_.size()) +
                " values unread (its actions do not match the stage programs)");
  return llvm::Error::success();
}

llvm::Expected<double> PipelineRunner::runOptimizer(float lr, int64_t stepNumber) {
  if (llvm::Error e = optimizer_->setInput("lr", DType::F32, {}, &lr)) return std::move(e);
  if (llvm::Error e = optimizer_->setInput("step", DType::I64, {}, &stepNumber)) return std::move(e);
  if (llvm::Error e = optimizer_->run())
    return fail("pipeline rank " + llvm::Twine(rank_) + ", program 'stage" + llvm::Twine(rank_) +
                "_optimizer': " + llvm::toString(std::move(e)));
  llvm::Expected<TensorRef> norm = optimizer_->output("grad_norm");
  if (!norm) return norm.takeError();
  float v = 0;
  device_->copyToHost(&v, norm->data, sizeof v);
  // Tied parameters: the owner's updated value to every stage (all take part, in one order).
  for (const std::string &name : tied_) {
    const StateEntry *e = states_->find(name);
    if (!e) return fail("pipeline rank " + llvm::Twine(rank_) + ": tied parameter '" + name + "' is not in the state store");
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

//===- Trainer.cpp - The training loop of `colossal-run M.cplan train` -----------------------===//
#include "colossal/runtime/Trainer.h"
#include "colossal/runtime/PipelineRunner.h"
#include "train/PipelineTrace.h"

#include "colossal/runtime/Checkpoint.h"
#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Mesh.h"
#include "colossal/runtime/NonFinite.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>

namespace colossal::runtime {

namespace {

/// Written over the whole arena at start; a 64-bit word a kernel writes equals it with
/// probability 2^-64 (StepResult::memory).
constexpr uint64_t kArenaCanary = 0xC0105A1CA4E4A5A5ull;

/// The process's resident set now (/proc/self/statm), bytes; -1 when unknown.
int64_t residentBytes() {
  long pages = 0, resident = 0;
  FILE *f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  const bool ok = std::fscanf(f, "%ld %ld", &pages, &resident) == 2;
  std::fclose(f);
  return ok ? static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE) : -1;
}


llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

/// A scalar output of `ex` as double.
llvm::Expected<double> scalarOutput(const Executor &ex, Device &device, llvm::StringRef name) {
  llvm::Expected<TensorRef> t = ex.output(name);
  if (!t) return t.takeError();
  float v = 0;
  device.copyToHost(&v, t->data, sizeof v);
  return static_cast<double>(v);
}

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

/// Keeps the lines of an existing metrics file whose "step" is below `step` (a resumed run
/// continues the file; lines the interrupted run wrote after its checkpoint are dropped).
llvm::Error truncateMetrics(llvm::StringRef path, int64_t step) {
  if (!llvm::sys::fs::exists(path)) return llvm::Error::success();
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf) return fail(path + ": cannot read metrics file: " + buf.getError().message());
  std::string kept;
  llvm::SmallVector<llvm::StringRef, 0> lines;
  (*buf)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : lines) {
    llvm::Expected<llvm::json::Value> v = llvm::json::parse(line);
    if (!v) {
      llvm::consumeError(v.takeError());
      continue;  // a line cut by the interruption
    }
    const llvm::json::Object *o = v->getAsObject();
    std::optional<int64_t> s = o ? o->getInteger("step") : std::nullopt;
    if (s && *s < step) kept += line.str() + "\n";
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) return fail(path + ": cannot write metrics file: " + ec.message());
  os << kept;
  return llvm::Error::success();
}

}  // namespace

double scheduledLearningRate(const plan::TrainConfig &tc, int64_t step) {
  if (tc.lr_schedule() != "cosine") return tc.lr();
  const int64_t warmup = tc.warmup_steps();
  if (step < warmup) return tc.lr() * static_cast<double>(step + 1) / static_cast<double>(warmup);
  double progress = std::min(1.0, static_cast<double>(step - warmup) /
                                      static_cast<double>(std::max<int64_t>(1, tc.total_steps() - warmup)));
  return tc.min_lr() + 0.5 * (tc.lr() - tc.min_lr()) * (1.0 + std::cos(M_PI * progress));
}

/// "step 2: the gradient norm is not finite (inf); the first non-finite tensor is the gradient of
/// 'W' (element 3: inf)": what made step `s` non-finite.
static std::string nonFiniteSummary(int64_t s, const StepResult &r) {
  std::string out = "step " + std::to_string(s) + ": the " +
                    (r.nonFinite == NonFiniteCause::Loss ? "loss" : "gradient norm") + " is not finite (" +
                    r.nonFiniteValue + ")";
  out += r.firstNonFinite.empty() ? std::string("; every parameter, gradient and optimizer state is finite")
                                  : "; the first non-finite tensor is " + r.firstNonFinite;
  return out;
}

/// Where to go back to: "the newest checkpoint is DIR/step-N" or "no checkpoint was written".
static std::string newestText(const std::string &newest) {
  return newest.empty() ? "no checkpoint was written" : "the newest checkpoint is " + newest;
}

/// The error that ends a run at a non-finite step.
static std::string stopMessage(const std::string &what, const StepResult &r, NonFinitePolicy policy,
                               const std::string &newest) {
  std::string out = what + "; its update was not applied";
  if (policy == NonFinitePolicy::Skip)
    out += ", and skipping steps cannot recover (a parameter or optimizer state is itself not finite)";
  out += "; training stopped (" + newestText(newest) + ")";
  if (policy == NonFinitePolicy::Stop && !r.stateNonFinite) out += "; --on-nonfinite skip skips such steps";
  return out;
}

/// A save refused for non-finite values becomes the run's NonFiniteError naming step `s`.
static llvm::Error refusedSave(int64_t s, llvm::Error err, const std::string &newest) {
  return llvm::handleErrors(std::move(err), [&](const NonFiniteError &e) -> llvm::Error {
    return llvm::make_error<NonFiniteError>("step " + std::to_string(s) + ": after its update, " + e.text() +
                                            "; training stopped (" +
                                            newestText(newest) + ")");
  });
}

/// The plan's mesh axes with size > 1 as (name, size), sorted by name (as a manifest stores them).
static std::vector<std::pair<std::string, int64_t>> planMesh(const LoadedPlan &plan) {
  std::vector<std::pair<std::string, int64_t>> mesh;
  for (const plan::MeshAxis &a : plan.plan.mesh())
    if (a.size() > 1) mesh.emplace_back(a.name(), a.size());
  std::sort(mesh.begin(), mesh.end());
  return mesh;
}

/// "dp=2" / "dp=2xtp=2" / "one rank".
static std::string meshText(const std::vector<std::pair<std::string, int64_t>> &mesh) {
  if (mesh.empty()) return "one rank";
  std::string out;
  for (const auto &[axis, size] : mesh) out += (out.empty() ? "" : "x") + axis + "=" + std::to_string(size);
  return out;
}

/// `v` in its shortest round-trip form (as Python prints floats).
static std::string shortest(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string metricsLine(int64_t step, const StepResult &r, double tokensPerS, const double *evalLoss) {
  // Numbers in their shortest round-trip form (as Python's json writes them), null when not finite.
  std::string out = "{\"step\":" + std::to_string(step);
  auto number = [&](llvm::StringRef key, double v) {
    out += ",\"" + key.str() + "\":";
    out += std::isfinite(v) ? shortest(v) : std::string("null");
  };
  number("loss", r.loss);
  number("lr", r.lr);
  number("grad_norm", r.gradNorm);
  number("tokens_per_s", tokensPerS);
  if (evalLoss) number("eval_loss", *evalLoss);
  if (r.lossScale > 0) number("loss_scale", r.lossScale);
  out += r.skipped() || r.overflow ? ",\"skipped\":true" : ",\"skipped\":false";
  out += ",\"skipped_total\":" + std::to_string(r.skippedTotal);
  if (r.commSeconds >= 0) {
    number("comm_s", r.commSeconds);
    out += ",\"comm_elements\":{\"all_reduce\":" + std::to_string(r.commElements.allReduce) +
           ",\"reduce_scatter\":" + std::to_string(r.commElements.reduceScatter) +
           ",\"all_gather\":" + std::to_string(r.commElements.allGather) + "}";
  }
  if (r.stateBytes.params + r.stateBytes.grads + r.stateBytes.optimizer > 0)
    out += ",\"state_bytes\":{\"params\":" + std::to_string(r.stateBytes.params) +
           ",\"grads\":" + std::to_string(r.stateBytes.grads) +
           ",\"optimizer\":" + std::to_string(r.stateBytes.optimizer) + "}";
  if (r.memory.arenaBytes <= 0)
    return out + "}";
  out += ",\"memory\":{\"arena_bytes\":" + std::to_string(r.memory.arenaBytes);
  if (r.memory.offloadedBytes >= 0)
    out += ",\"offloaded_bytes\":" + std::to_string(r.memory.offloadedBytes) +
           ",\"prefetched_bytes\":" + std::to_string(r.memory.tierPrefetchedBytes) +
           ",\"prefetch_s\":" + shortest(r.memory.tierPrefetchSeconds) +
           ",\"evict_s\":" + shortest(r.memory.tierEvictSeconds);
  if (r.memory.offloadedBytes >= 0 && r.memory.majorFaults >= 0)
    out += ",\"major_faults\":" + std::to_string(r.memory.majorFaults);
  if (r.memory.arenaHighWater >= 0)
    out += ",\"arena_high_water_bytes\":" + std::to_string(r.memory.arenaHighWater);
  if (r.memory.peakRss >= 0)
    out += ",\"peak_rss_bytes\":" + std::to_string(r.memory.peakRss);
  if (r.memory.baselineRss >= 0)
    out += ",\"baseline_rss_bytes\":" + std::to_string(r.memory.baselineRss);
  if (!r.memory.pipelineSavedPeak.empty()) {
    out += ",\"pipeline_saved_peak_bytes\":[";
    for (size_t s = 0; s < r.memory.pipelineSavedPeak.size(); ++s)
      out += (s ? "," : "") + std::to_string(r.memory.pipelineSavedPeak[s]);
    out += "]";
  }
  return out + "}}";
}

int64_t Trainer::arenaHighWater() const {
  if (device_->kind() != DeviceKind::CPU)
    return -1;
  const uint64_t *words = static_cast<const uint64_t *>(arena_);
  uint64_t n = arenaBytes_ / sizeof(uint64_t);
  while (n > 0 && words[n - 1] == kArenaCanary)
    --n;
  const uint64_t line = 64;
  return static_cast<int64_t>((n * sizeof(uint64_t) + line - 1) / line * line);
}

Trainer::~Trainer() {
  trainStep_.reset();
  optimizerStep_.reset();
  eval_.reset();
  if (arena_) device_->deallocate(arena_);
}

llvm::Expected<std::unique_ptr<Trainer>> Trainer::create(const LoadedPlan &plan, const KernelRegistry &registry,
                                                         Device &device, CommContext *comm) {
  if (plan.plan.mode() != "train")
    return fail(plan.path + ": not a training plan (mode '" + plan.plan.mode() +
                "'); compile the model with `mode: train`");
  std::unique_ptr<Trainer> t(new Trainer());
  t->baselineRss_ = residentBytes();
  t->plan_ = &plan;
  t->device_ = &device;
  auto states = StateStore::create(plan, device);
  if (!states) return states.takeError();
  t->states_ = std::move(*states);
  // Offload: the weights file's pages held the initial values the states now have.
  if (t->states_->tier() && plan.weights) plan.weights->releasePages();
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) == 0) t->majorFaults_ = static_cast<int64_t>(usage.ru_majflt);
  for (const StateEntry &e : t->states_->entries()) {
    const int64_t bytes = static_cast<int64_t>(e.tensor.bytes());
    switch (e.role()) {
    case plan::StateTensor::PARAM: t->stateBytes_.params += bytes; break;
    case plan::StateTensor::GRAD: t->stateBytes_.grads += bytes; break;
    case plan::StateTensor::OPTIMIZER: t->stateBytes_.optimizer += bytes; break;
    default: break;
    }
  }
  uint64_t arenaBytes = maxArenaBytes(plan.plan);
  llvm::Expected<void *> arena = device.allocate(arenaBytes, kArenaAlignment);
  if (!arena) return arena.takeError();
  t->arena_ = *arena;
  t->arenaBytes_ = arenaBytes;
  if (device.kind() == DeviceKind::CPU)
    std::fill_n(static_cast<uint64_t *>(t->arena_), arenaBytes / sizeof(uint64_t), kArenaCanary);
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(plan.plan, plan.path);
  if (!mesh) return mesh.takeError();
  const int64_t meshRanks = mesh->size();
  t->dpSize_ = mesh->dataSize();
  if (meshRanks > 1) {
    t->comm_ = comm;
    if (!comm || comm->worldSize() != meshRanks)
      return fail(plan.path + ": the plan's mesh has " + llvm::Twine(meshRanks) +
                  " ranks; train it under mpirun (colossal-run --nproc " + llvm::Twine(meshRanks) + ")");
    if (plan.rank != comm->rank())
      return fail(plan.path + ": the plan's shards are sliced for rank " + llvm::Twine(plan.rank) +
                  " but this is rank " + llvm::Twine(comm->rank()) + " (selectRank)");
    // Data rows and the loss reductions follow the rank's coordinate on the data axes alone: the
    // ranks of one data coordinate (the other axes: tensor parallelism) see the same rows and
    // compute the same loss (docs/parallelism.md).
    if (t->dpSize_ > 1) {
      llvm::Expected<Communicator *> group = comm->axes(mesh->dataAxes());
      if (!group) return group.takeError();
      t->dp_ = *group;
      t->dpRank_ = t->dp_->rank();
    }
    if (plan.plan.train().grad_accum() % t->dpSize_ != 0)
      return fail(plan.path + ": grad_accum " + llvm::Twine(plan.plan.train().grad_accum()) +
                  " (microbatches of all ranks) is not divisible by dp = " + llvm::Twine(t->dpSize_));
    // Every group the programs' collectives name, created now and in one order on every rank.
    for (plan::Program::Role role : {plan::Program::TRAIN_STEP, plan::Program::OPTIMIZER_STEP, plan::Program::EVAL})
      if (const plan::Program *prog = plan.program(role))
        if (llvm::Error e = comm->prepare(*prog)) return std::move(e);
  }
  ExecutorOptions opts;
  opts.comm = comm;
  opts.states = t->states_.get();
  opts.arena = t->arena_;
  opts.arenaBytes = arenaBytes;
  // The loader checked that a training plan has one program of each role.
  auto make = [&](plan::Program::Role role, std::unique_ptr<Executor> &out) -> llvm::Error {
    auto ex = Executor::create(plan, registry, device, plan.program(role)->name(), opts);
    if (!ex) return ex.takeError();
    out = std::move(*ex);
    return llvm::Error::success();
  };
  if (llvm::Error e = make(plan::Program::TRAIN_STEP, t->trainStep_)) return std::move(e);
  if (llvm::Error e = make(plan::Program::OPTIMIZER_STEP, t->optimizerStep_)) return std::move(e);
  if (llvm::Error e = make(plan::Program::EVAL, t->eval_)) return std::move(e);
  if (plan.plan.has_pipeline()) {
    if (!comm) return fail(plan.path + ": a pipeline plan needs the job's communicators");
    auto runner = PipelineRunner::create(plan, registry, device, *comm, opts, t->dpRank_, t->dpSize_);
    if (!runner) return runner.takeError();
    t->pipeline_ = std::move(*runner);
  }
  const plan::TrainConfig &tc = plan.plan.train();
  for (const BindingInfo &in : t->trainStep_->inputs())
    if (in.name == tc.tokens_input()) t->tokensDType_ = in.tensor.dtype;
  const int64_t rows = tc.global_batch() / tc.grad_accum();
  t->tokens_.resize(rows * tc.seq_len() * dtypeSize(t->tokensDType_));
  t->labels_.resize(rows * tc.seq_len());
  if (const char *hook = std::getenv("COLOSSAL_TEST_NONFINITE")) {
    llvm::SmallVector<llvm::StringRef, 3> parts;
    llvm::StringRef(hook).split(parts, ':');
    bool bad = parts.size() < 2 || parts.size() > 3 ||
               (parts[0] != "loss" && parts[0] != "grad" && parts[0] != "grad-inf") ||
               (parts.size() == 3 && parts[2].getAsInteger(10, t->hookRank_));
    if (!bad) {
      llvm::SmallVector<llvm::StringRef, 8> steps;
      parts[1].split(steps, ',');
      for (llvm::StringRef text : steps) {
        int64_t v;
        if (text.getAsInteger(10, v)) bad = true;
        else t->hookSteps_.push_back(v);
      }
    }
    if (bad)
      return fail(llvm::Twine("COLOSSAL_TEST_NONFINITE='") + hook + "': expected loss|grad|grad-inf:STEP[,STEP...][:RANK]");
    t->hookKind_ = parts[0].str();
  }
  t->lossScale_ = tc.loss_scale_initial();
  return t;
}

void Trainer::applyTestHook(int64_t step, double &lossSum) {
  if (!llvm::is_contained(hookSteps_, step) || (hookRank_ >= 0 && (comm_ ? comm_->rank() : 0) != hookRank_)) return;
  if (hookKind_ == "loss") {
    lossSum = NAN;
    return;
  }
  for (const StateEntry &e : states_->entries())
    if (e.role() == plan::StateTensor::GRAD && e.tensor.dtype == DType::F32 && e.tensor.numel() > 0) {
      const float bad = hookKind_ == "grad-inf" ? INFINITY : NAN;
      device_->copyFromHost(e.tensor.data, &bad, sizeof bad);
      return;
    }
}

bool Trainer::unscaleGradients(double factor) {
  bool nonFinite = false;
  const float f = static_cast<float>(factor);
  for (const StateEntry &e : states_->entries()) {
    if (e.role() != plan::StateTensor::GRAD || e.tensor.dtype != DType::F32) continue;
    // The CPU device's states are host memory (a CUDA device would run this as a kernel).
    auto *g = static_cast<float *>(e.tensor.data);
    const int64_t n = e.tensor.numel();
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) {
      g[i] *= f;
      bad |= !std::isfinite(g[i]);
    }
    nonFinite |= bad;
  }
  return nonFinite;
}

llvm::Expected<double> Trainer::sumOverRanks(double local) {
  if (!dp_) return local;
  double global = 0;
  if (llvm::Error e = dp_->allReduce(&local, &global, 1, DType::F64, ReduceOp::Sum)) return std::move(e);
  return global;
}

llvm::Error Trainer::feedTokens(Executor &ex, const TokenData &data, int64_t step, int64_t firstRow, int64_t rows) {
  const plan::TrainConfig &tc = config();
  const int64_t T = tc.seq_len();
  data.fillRows(step, tc.global_batch(), firstRow, rows, tokensDType_, tokens_.data(), labels_.data());
  if (llvm::Error e = ex.setInput(tc.tokens_input(), tokensDType_, {rows, T}, tokens_.data())) return e;
  return ex.setInput(tc.labels_input(), DType::I64, {rows, T}, labels_.data());
}

llvm::Expected<double> Trainer::runLoss(Executor &ex, Feed feed, int64_t firstRow) {
  const plan::TrainConfig &tc = config();
  if (llvm::Error e = feed(ex, firstRow, tc.global_batch() / tc.grad_accum())) return std::move(e);
  if (llvm::Error e = ex.run()) return std::move(e);
  return scalarOutput(ex, *device_, "loss");
}

llvm::Expected<StepResult> Trainer::step(const TokenData &data, int64_t step) {
  if (!config().data_inputs().empty())
    return fail(plan_->path + ": the plan reads its inputs from train.inputs, not from token data");
  return runStep([&](Executor &ex, int64_t first, int64_t rows) { return feedTokens(ex, data, step, first, rows); },
                 step, &data);
}

llvm::Expected<StepResult> Trainer::step(TrainInputs &inputs, int64_t step) {
  inputs.prepare(step);
  return runStep([&](Executor &ex, int64_t first, int64_t rows) { return inputs.feed(ex, first, rows); }, step,
                 nullptr);
}

llvm::Expected<StepResult> Trainer::runStep(Feed feed, int64_t step, const TokenData *tokens) {
  const plan::TrainConfig &tc = config();
  auto t0 = std::chrono::steady_clock::now();
  const double comm0 = commSecondsTotal();
  const CommElements elements0 = commElementsTotal();
  StepResult r;
  // This rank's microbatches: dpRank_·A .. dpRank_·A + A − 1 of the step's grad_accum() (all ranks').
  const int64_t A = tc.grad_accum() / dpSize_, rows = tc.global_batch() / tc.grad_accum();
  double lossSum = 0;
  const bool scaling = lossScale_ > 0;
  const float scale = static_cast<float>(lossScale_);
  r.lossScale = lossScale_;
  llvm::Expected<double> allLosses = 0.0;
  if (pipeline_) {
    if (!tokens)
      return fail(plan_->path + ": train.inputs with pipeline parallelism is not supported yet");
    // The schedule's microbatches through this rank's stage; the loss sum is every rank's.
    llvm::Expected<double> pipelineLoss = pipeline_->runMicrobatches(*tokens, step, tokensDType_);
    if (!pipelineLoss)
      return fail(plan_->path + ": step " + llvm::Twine(step) + ": " + llvm::toString(pipelineLoss.takeError()));
    if (trace_) trace_->addPipelineStep(*pipeline_, step);
    allLosses = sumOverRanks(*pipelineLoss);
    if (!allLosses) return allLosses.takeError();
    if (llvm::Error e = gatherPipelineMemory(r)) return std::move(e);
  } else {
    for (int64_t k = dpRank_ * A; k < (dpRank_ + 1) * A; ++k) {
      if (scaling)
        if (llvm::Error e = trainStep_->setInput("loss_scale", DType::F32, {}, &scale)) return std::move(e);
      const double start = trace_ ? PipelineTrace::now() : 0;
      llvm::Expected<double> loss = runLoss(*trainStep_, feed, k * rows);
      if (!loss) return fail(plan_->path + ": program 'train_step' (step " + llvm::Twine(step) + ", microbatch " +
                             llvm::Twine(k) + "): " + llvm::toString(loss.takeError()));
      if (trace_) trace_->add({TraceEvent::Kind::TrainStep, step, k, 0, start, PipelineTrace::now()});
      lossSum += *loss;
    }
    applyTestHook(step, lossSum);
    allLosses = sumOverRanks(lossSum);
    if (!allLosses) return allLosses.takeError();
  }
  r.loss = *allLosses / static_cast<double>(tc.grad_accum());
  r.lr = scheduledLearningRate(tc, step);
  // The ranks agree before optimizer_step, whose collectives all of them must run or none.
  llvm::Expected<std::optional<NonFiniteValue>> lossBad = firstNonFiniteRank(r.loss, comm_);
  if (!lossBad) return lossBad.takeError();
  NonFiniteCause cause = NonFiniteCause::None;
  std::optional<NonFiniteValue> bad = *lossBad;
  bool overflow = false;
  if (!bad && scaling) {
    // GradScaler.unscale_ and its found_inf, agreed by every rank (a non-finite gradient on any
    // rank skips the update everywhere): the gradients are unscaled before the norm and clipping.
    const bool local = unscaleGradients(1.0 / static_cast<double>(scale));
    llvm::Expected<std::optional<NonFiniteValue>> any = firstNonFiniteRank(local ? INFINITY : 0.0, comm_);
    if (!any) return any.takeError();
    overflow = any->has_value();
  }
  if (bad) {
    cause = NonFiniteCause::Loss;
    r.gradNorm = NAN;
  } else if (overflow) {
    // GradScaler.step skips, GradScaler.update backs off: parameters, optimizer state and the
    // optimizer's step count stay as they were; the gradients are zeroed for the next step.
    r.overflow = true;
    r.gradNorm = NAN;
    states_->zero(plan::StateTensor::GRAD);
    ++skipped_;
    growthTracker_ = 0;
    lossScale_ *= tc.loss_scale_backoff_factor();
    r.lossScaleUnderflow = lossScale_ < tc.loss_scale_min();
  } else {
    float lr = static_cast<float>(r.lr);
    int64_t stepNumber = updates_ + 1;
    llvm::Expected<double> gn = 0.0;
    const double start = trace_ ? PipelineTrace::now() : 0;
    if (pipeline_) {
      gn = pipeline_->runOptimizer(lr, stepNumber);
      if (!gn) return fail(plan_->path + ": step " + llvm::Twine(step) + ": " + llvm::toString(gn.takeError()));
    } else {
      if (llvm::Error e = optimizerStep_->setInput("lr", DType::F32, {}, &lr)) return std::move(e);
      if (llvm::Error e = optimizerStep_->setInput("step", DType::I64, {}, &stepNumber)) return std::move(e);
      if (llvm::Error e = optimizerStep_->run())
        return fail(plan_->path + ": program 'optimizer_step' (step " + llvm::Twine(step) + "): " + llvm::toString(std::move(e)));
      gn = scalarOutput(*optimizerStep_, *device_, "grad_norm");
      if (!gn) return gn.takeError();
    }
    if (trace_)
      trace_->add({TraceEvent::Kind::OptimizerStep, step, -1, pipeline_ ? int64_t(pipeline_->rank()) : 0, start,
                   PipelineTrace::now()});
    r.gradNorm = *gn;
    // grad_norm is replicated by construction (global_norm), so the updates skipped on every rank
    // alike; the agreement only guards the decision that follows.
    llvm::Expected<std::optional<NonFiniteValue>> normBad = firstNonFiniteRank(r.gradNorm, comm_);
    if (!normBad) return normBad.takeError();
    bad = *normBad;
    if (bad) cause = NonFiniteCause::GradNorm;
  }
  if (bad) {
    if (llvm::Error e = skipStep(r, cause, *bad)) return std::move(e);
  } else if (!overflow) {
    ++updates_;
    if (scaling && ++growthTracker_ == tc.loss_scale_growth_interval()) {
      lossScale_ *= tc.loss_scale_growth_factor();
      growthTracker_ = 0;
    }
  }
  r.skippedTotal = skipped_;
  r.stateBytes = stateBytes_;
  // Offload: whatever ran outside the programs' schedules this step (a skip's zeroing, fp16's
  // unscaling, test hooks) leaves no offloaded page behind.
  states_->evictOffloaded();
  if (const Tier *tier = states_->tier()) {
    r.memory.offloadedBytes = static_cast<int64_t>(tier->bytes());
    r.memory.tierPrefetchedBytes = static_cast<int64_t>(tier->prefetchedBytes() - tierPrefetched_);
    tierPrefetched_ = tier->prefetchedBytes();
    r.memory.tierPrefetchSeconds = tier->prefetchSeconds() - tierPrefetchSeconds_;
    r.memory.tierEvictSeconds = tier->evictSeconds() - tierEvictSeconds_;
    tierPrefetchSeconds_ = tier->prefetchSeconds();
    tierEvictSeconds_ = tier->evictSeconds();
  }
  r.memory.arenaBytes = static_cast<int64_t>(arenaBytes_);
  r.memory.baselineRss = baselineRss_;
  r.memory.arenaHighWater = arenaHighWater();
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    r.memory.peakRss = static_cast<int64_t>(usage.ru_maxrss) * 1024;
    r.memory.majorFaults = static_cast<int64_t>(usage.ru_majflt) - majorFaults_;
    majorFaults_ = static_cast<int64_t>(usage.ru_majflt);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every plan with a mesh of two or more ranks reports it (dp, tp or both: the collectives of
  // train_step and optimizer_step and the loss reduction all go through the Communicator's timer).
  int64_t meshRanks = 1;
  for (const plan::MeshAxis &a : plan_->plan.mesh()) meshRanks *= a.size();
  if (meshRanks > 1) {
    r.commSeconds = commSecondsTotal() - comm0;
    const CommElements now = commElementsTotal();
    r.commElements = {now.allReduce - elements0.allReduce, now.reduceScatter - elements0.reduceScatter,
                      now.allGather - elements0.allGather};
  }
  return r;
}

llvm::Error Trainer::skipStep(StepResult &r, NonFiniteCause cause, const NonFiniteValue &value) {
  using Role = plan::StateTensor::Role;
  r.nonFinite = cause;
  r.nonFiniteValue = value.text + (value.rank != 0 ? " on rank " + std::to_string(value.rank) : "");
  // Parameters first: a non-finite one is the cause of everything after it.
  llvm::Expected<std::optional<NonFiniteState>> first =
      findNonFiniteState(*states_, {plan::StateTensor::PARAM, plan::StateTensor::OPTIMIZER, plan::StateTensor::GRAD},
                         comm_);
  if (!first) return first.takeError();
  if (*first) {
    r.firstNonFinite = describeNonFinite(**first);
    const Role role = (*first)->entry->role();
    r.stateNonFinite = role == plan::StateTensor::PARAM || role == plan::StateTensor::OPTIMIZER;
  }
  states_->zero(plan::StateTensor::GRAD);
  ++skipped_;
  return llvm::Error::success();
}

void Trainer::setTrace(PipelineTrace *trace) {
  trace_ = trace;
  if (pipeline_) pipeline_->recordEvents(trace != nullptr);
}

llvm::Error Trainer::syncStates() {
  return pipeline_ ? pipeline_->syncStates(*states_) : llvm::Error::success();
}

llvm::Error Trainer::gatherPipelineMemory(StepResult &r) {
  const double mine = static_cast<double>(pipeline_->peakSavedBytes());
  std::vector<double> all(static_cast<size_t>(pipeline_->group().size()), 0.0);
  if (llvm::Error e = pipeline_->group().allGather(&mine, all.data(), {1}, 0, DType::F64)) return e;
  for (double v : all) r.memory.pipelineSavedPeak.push_back(static_cast<int64_t>(v));
  return llvm::Error::success();
}

llvm::Expected<double> Trainer::evaluate(const TokenData &data, int64_t evalSteps) {
  // Eval runs the whole model on every rank: each needs the stages' current parameters.
  if (llvm::Error e = syncStates()) return std::move(e);
  const plan::TrainConfig &tc = config();
  const int64_t A = tc.grad_accum() / dpSize_, rows = tc.global_batch() / tc.grad_accum();
  double sum = 0;
  for (int64_t s = 0; s < evalSteps; ++s)
    for (int64_t k = dpRank_ * A; k < (dpRank_ + 1) * A; ++k) {
      llvm::Expected<double> loss = runLoss(
          *eval_, [&](Executor &ex, int64_t first, int64_t n) { return feedTokens(ex, data, s, first, n); }, k * rows);
      if (!loss) return fail(plan_->path + ": program 'eval' (batch " + llvm::Twine(s) + "): " + llvm::toString(loss.takeError()));
      sum += *loss;
    }
  llvm::Expected<double> all = sumOverRanks(sum);
  if (!all) return all.takeError();
  return *all / static_cast<double>(evalSteps * tc.grad_accum());
}

/// `--resume`: loads the checkpoint into `tr`'s states and counters, checks it against the plan and
/// --steps, prints the mesh note or the other-spec warning and cuts the metrics file at its step.
static llvm::Expected<CheckpointInfo> resumeTraining(const LoadedPlan &plan, Trainer &tr, const TrainOptions &o,
                                                     bool writer, llvm::raw_ostream &log) {
  const plan::TrainConfig &tc = tr.config();
  llvm::Expected<CheckpointInfo> info = loadCheckpoint(o.resumeDir, tr.states(), o.allowNonFiniteCheckpoint);
  if (!info) return info.takeError();
  tr.setCounts(info->step - info->skippedTotal, info->skippedTotal);
  if (tr.lossScale() > 0 && info->lossScale > 0) tr.setLossScale(info->lossScale, info->lossScaleGrowthTracker);
  if (info->dataPosition != info->step * tc.global_batch())
    return fail(o.resumeDir + ": data position " + llvm::Twine(info->dataPosition) + " does not match step " +
                llvm::Twine(info->step) + " with global batch " + llvm::Twine(tc.global_batch()) +
                " (the checkpoint was written for another batch size)");
  // A mesh change is supported (checkpoints hold global shapes) and changes the spec file, so
  // its hash: then a note, not the warning about another spec.
  std::vector<std::pair<std::string, int64_t>> mesh = planMesh(plan);
  if (mesh != info->mesh) {
    if (writer)
      log << "note: " << o.resumeDir << ": saved under mesh " << meshText(info->mesh) << ", resuming under "
          << meshText(mesh) << " (supported: checkpoints hold global shapes)"
          << (info->specHash != tc.spec_hash() ? "; its spec file differed, and this plan's settings apply" : "") << "\n";
  } else if (info->specHash != tc.spec_hash() && writer) {
    log << "warning: " << o.resumeDir << ": the checkpoint was written by a plan compiled from another spec; "
        << "training continues with this plan's hyperparameters\n";
  }
  if (o.steps <= info->step)
    return fail("checkpoint is at step " + llvm::Twine(info->step) + "; --steps " + llvm::Twine(o.steps) +
                " is the total step count, so nothing to do (pass --steps > " + llvm::Twine(info->step) + ")");
  if (writer)
    if (llvm::Error e = truncateMetrics(o.metricsPath, info->step)) return std::move(e);
  return info;
}

llvm::Error runTraining(const LoadedPlan &plan, const KernelRegistry &registry, Device &device,
                        const TrainOptions &o, llvm::raw_ostream &log) {
  if (o.steps < 0) return fail("--steps must be >= 0");
  if (o.saveEvery < 0) return fail("--save-every must be >= 0");
  if (o.evalEvery < 0) return fail("--eval-every K needs K >= 1 (evaluate after every K steps)");
  if (o.evalSteps < 1) return fail("--eval-steps M needs M >= 1");
  if (!o.evalDataPath.empty() && o.evalEvery == 0) return fail("--eval-data needs --eval-every K (K >= 1)");
  if (o.evalDataPath.empty() && o.evalEvery > 0) return fail("--eval-every needs --eval-data FILE");
  if (o.metricsPath.empty()) return fail("train needs --metrics FILE");
  // Several ranks: every rank trains and resumes; rank 0 alone writes metrics and checkpoints.
  const bool writer = !o.comm || o.comm->rank() == 0;
  auto trainer = Trainer::create(plan, registry, device, o.comm);
  if (!trainer) return trainer.takeError();
  Trainer &tr = **trainer;
  const plan::TrainConfig &tc = tr.config();
  // A plan with train.inputs reads npy arrays and draws from the RNG; --data's token files are for
  // token models, and giving both would leave unclear which feeds the model (docs/training.md).
  const bool dataInputs = tc.data_inputs_size() > 0;
  std::string sources;
  for (const plan::DataInput &d : tc.data_inputs()) sources += (sources.empty() ? "'" : ", '") + d.name() + "'";
  if (dataInputs && !o.dataPath.empty())
    return fail("--data " + o.dataPath + ": this plan reads its inputs from the spec's train.inputs (" + sources +
                "); --data and --token-dtype are for token models, leave them out");
  if (dataInputs && !o.evalDataPath.empty())
    return fail("--eval-data: evaluation on token data applies to token models; this plan reads train.inputs (" +
                sources + ")");
  if (!dataInputs && o.dataPath.empty()) return fail("train needs --data TOKENS.bin");
  if (!dataInputs && (o.shuffle || !o.dumpInputsDir.empty()))
    return fail(std::string(o.shuffle ? "--shuffle" : "--dump-inputs") +
                " applies to plans whose inputs come from the spec's train.inputs; this plan reads token data "
                "(--data) in the documented order");
  std::unique_ptr<TokenData> tokens;
  std::unique_ptr<TrainInputs> inputs;
  if (dataInputs) {
    auto in = TrainInputs::open(tc, tr.trainStepInputs(), o.seed, o.shuffle);
    if (!in) return in.takeError();
    inputs = std::move(*in);
  } else {
    auto data = TokenData::open(o.dataPath, o.tokenDType, tc.vocab_size(), tc.seq_len());
    if (!data) return data.takeError();
    tokens = std::move(*data);
  }
  std::unique_ptr<TokenData> evalData;
  if (!o.evalDataPath.empty()) {
    auto ed = TokenData::open(o.evalDataPath, o.tokenDType, tc.vocab_size(), tc.seq_len());
    if (!ed) return ed.takeError();
    evalData = std::move(*ed);
  }

  int64_t start = 0;
  std::string newest;  // the newest checkpoint of the run (resumed from or saved), for messages
  if (!o.resumeDir.empty()) {
    llvm::Expected<CheckpointInfo> info = resumeTraining(plan, tr, o, writer, log);
    if (!info) return info.takeError();
    start = info->step;
    if (llvm::Expected<std::string> dir = checkpointStepDir(o.resumeDir)) newest = *dir;
    else llvm::consumeError(dir.takeError());
  }
  std::error_code ec;
  llvm::raw_fd_ostream metrics(writer ? llvm::StringRef(o.metricsPath) : llvm::StringRef("-"), ec,
                               o.resumeDir.empty() ? llvm::sys::fs::OF_None : llvm::sys::fs::OF_Append);
  if (ec) return fail(o.metricsPath + ": cannot open metrics file: " + ec.message());

  // --trace: the clocks are measured here, every rank at the same point; rank 0 writes at the end.
  std::unique_ptr<PipelineTrace> trace;
  std::optional<llvm::raw_fd_ostream> traceOut;
  if (!o.tracePath.empty()) {
    if (writer) {
      traceOut.emplace(o.tracePath, ec);
      if (ec) return fail(o.tracePath + ": cannot open trace file: " + ec.message());
    }
    llvm::Expected<std::unique_ptr<PipelineTrace>> started = PipelineTrace::start(plan, o.comm);
    if (!started) return started.takeError();
    trace = std::move(*started);
    tr.setTrace(trace.get());
  }

  // train.inputs: tokens_per_s counts rows (samples).
  const double tokensPerStep = static_cast<double>(tc.global_batch() * (dataInputs ? 1 : tc.seq_len()));
  double trainSeconds = 0;
  for (int64_t s = start; s < o.steps; ++s) {
    llvm::Expected<StepResult> r = inputs ? tr.step(*inputs, s) : tr.step(*tokens, s);
    if (!r) return r.takeError();
    if (inputs && writer && !o.dumpInputsDir.empty())
      if (llvm::Error e = inputs->dump(o.dumpInputsDir, s)) return e;
    trainSeconds += r->seconds;
    // Under precision.compute: fp16 (a later issue) a GradNorm cause goes to the loss scaler
    // (back off, skip) before the policy below sees it.
    const bool stop = r->skipped() && (o.onNonFinite == NonFinitePolicy::Stop || r->stateNonFinite);
    std::optional<double> evalLoss;
    if (!stop && evalData && (s + 1) % o.evalEvery == 0) {
      llvm::Expected<double> el = tr.evaluate(*evalData, o.evalSteps);
      if (!el) return el.takeError();
      evalLoss = *el;
    }
    double tps = r->seconds > 0 ? tokensPerStep / r->seconds : 0;
    if (writer) {
      metrics << metricsLine(s, *r, tps, evalLoss ? &*evalLoss : nullptr) << "\n";
      metrics.flush();
      if (metrics.has_error()) {
        std::error_code werr = metrics.error();
        metrics.clear_error();
        return fail(o.metricsPath + ": write failed: " + werr.message());
      }
    }
    if (r->lossScaleUnderflow)
      return fail(plan.path + ": step " + llvm::Twine(s) + ": the loss scale fell to " + shortest(tr.lossScale()) +
                  ", below precision.loss_scale.min " + shortest(tc.loss_scale_min()) +
                  ", after a non-finite gradient at every scale tried since the last clean step "
                  "(lower precision.loss_scale.min, or the run has diverged or overflows fp16 in "
                  "its forward pass)");
    if (r->skipped()) {
      std::string what = nonFiniteSummary(s, *r);
      if (stop) return llvm::make_error<NonFiniteError>(stopMessage(what, *r, o.onNonFinite, newest));
      if (writer)
        log << (o.progressBar ? "\r\x1b[K" : "") << "warning: " << what << "; the step was skipped (" << r->skippedTotal << " skipped so far)\n";
    }
    // Every rank takes part in a save (sharded states are gathered); rank 0 writes.
    if (!o.saveDir.empty() && ((o.saveEvery > 0 && (s + 1) % o.saveEvery == 0) || s + 1 == o.steps)) {
      CheckpointInfo info{s + 1, (s + 1) * tc.global_batch(), o.seed, tc.spec_hash(), planMesh(plan)};
      info.skippedTotal = tr.skippedTotal();
      info.lossScale = tr.lossScale();
      info.lossScaleGrowthTracker = tr.lossScaleGrowthTracker();
      if (llvm::Error e = tr.syncStates()) return e;
      llvm::Expected<std::string> saved = saveCheckpoint(o.saveDir, tr.states(), info, 2, o.comm);
      tr.states().evictOffloaded(); // the save read every state
      if (!saved) return refusedSave(s, saved.takeError(), newest);
      newest = *saved;
    }
    if (!writer) continue;
    if (o.progressBar) {
      int64_t done = s + 1 - start;
      double eta = trainSeconds / static_cast<double>(done) * static_cast<double>(o.steps - s - 1);
      log << llvm::format("\rstep %lld/%lld  loss %.4f  %.0f tok/s  ETA %s", (long long)(s + 1), (long long)o.steps,
                          r->loss, tps, formatDuration(eta).c_str())
          << (evalLoss ? llvm::formatv("  eval {0:F4}", *evalLoss).str() : std::string()) << "\x1b[K";
      log.flush();
    }
  }
  if (o.progressBar && start < o.steps) log << "\n";
  if (trace) {
    tr.setTrace(nullptr);
    llvm::raw_null_ostream none;
    if (llvm::Error e = trace->finish(traceOut ? static_cast<llvm::raw_ostream &>(*traceOut) : none)) return e;
    if (traceOut) {
      traceOut->close();
      if (traceOut->has_error()) {
        std::error_code werr = traceOut->error();
        traceOut->clear_error();
        return fail(o.tracePath + ": write failed: " + werr.message());
      }
    }
  }
  if (writer && tr.skippedTotal() > 0)
    log << "note: " << tr.skippedTotal() << " of " << o.steps << " steps were skipped (non-finite loss or gradients)\n";
  // --steps 0 is a dry run (the plan, the data and the inputs load and are checked); say so rather
  // than exit without a word.
  if (writer && o.steps == 0)
    log << "note: --steps 0: no step ran (the plan, its data and its inputs were loaded and checked)\n";
  return llvm::Error::success();
}

}  // namespace colossal::runtime

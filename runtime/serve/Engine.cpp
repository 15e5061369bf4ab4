//===- Engine.cpp - The engine thread: scheduler steps, detokenizing, stop strings ----------===//
#include "Engine.h"

#include "llvm/ADT/STLExtras.h"

#include <cassert>
#include <cstdio>
#include <random>

namespace colossal::runtime::serve {

//===----------------------------------------------------------------------------------------===//
// Generation: one request's channel.
//===----------------------------------------------------------------------------------------===//

llvm::Error Generation::waitAccepted() {
  std::unique_lock<std::mutex> lk(mutex_);
  cv_.wait(lk, [&] { return state_ != State::Pending; });
  if (state_ == State::Refused) return llvm::make_error<ApiError>(*refusal_);
  return llvm::Error::success();
}

bool Generation::next(std::chrono::milliseconds timeout, std::vector<ChoiceDelta> &out) {
  std::unique_lock<std::mutex> lk(mutex_);
  cv_.wait_for(lk, timeout, [&] { return !deltas_.empty() || open_ == 0 || !failure_.empty(); });
  for (ChoiceDelta &d : deltas_) out.push_back(std::move(d));
  deltas_.clear();
  return open_ > 0 && failure_.empty();
}

std::string Generation::failure() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return failure_;
}

void Generation::accept() {
  std::lock_guard<std::mutex> lk(mutex_);
  state_ = State::Accepted;
  cv_.notify_all();
}

void Generation::refuse(llvm::Error error) {
  std::lock_guard<std::mutex> lk(mutex_);
  llvm::handleAllErrors(
      std::move(error), [&](const ApiError &e) { refusal_ = std::make_unique<ApiError>(e); },
      [&](const InvalidRequestError &e) {
        refusal_ = std::make_unique<ApiError>(400, "invalid_request_error", e.param(), "invalid_value", e.text());
      },
      [&](const llvm::ErrorInfoBase &e) {
        refusal_ = std::make_unique<ApiError>(500, "server_error", "", "server_error", e.message());
      });
  state_ = State::Refused;
  cv_.notify_all();
}

void Generation::push(ChoiceDelta delta) {
  std::lock_guard<std::mutex> lk(mutex_);
  if (delta.finish && open_ > 0) --open_;
  deltas_.push_back(std::move(delta));
  cv_.notify_all();
}

void Generation::fail(std::string why) {
  std::lock_guard<std::mutex> lk(mutex_);
  if (failure_.empty()) failure_ = std::move(why);
  cv_.notify_all();
}

//===----------------------------------------------------------------------------------------===//
// Engine
//===----------------------------------------------------------------------------------------===//

llvm::Expected<std::unique_ptr<Engine>> Engine::create(StepModel &model, const Tokenizer &tokenizer,
                                                      const SpeculativeConfig &speculative) {
  auto scheduler = Scheduler::create(model.config(), speculative);
  if (!scheduler) return scheduler.takeError();
  return std::unique_ptr<Engine>(new Engine(model, tokenizer, std::move(*scheduler)));
}

Engine::Engine(StepModel &model, const Tokenizer &tokenizer, std::unique_ptr<Scheduler> scheduler)
    : model_(model), tokenizer_(tokenizer), config_(scheduler->config()), scheduler_(std::move(scheduler)) {
  metrics_.kvBlocks = scheduler_->blockManager().numBlocks();
  metrics_.speculative = scheduler_->speculativeConfig().drafter != nullptr;
}

Engine::~Engine() { stop(); }

void Engine::start() {
  std::lock_guard<std::mutex> lk(mutex_);
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Generation> Engine::submit(GenerationRequest request) {
  auto g = std::make_shared<Generation>(std::move(request));
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (!stopping_) {
      inbox_.push_back({g, false});
      cv_.notify_all();
      return g;
    }
  }
  g->refuse(llvm::make_error<ApiError>(503, "server_error", "", "server_error", "the server is shutting down"));
  return g;
}

void Engine::cancel(const std::shared_ptr<Generation> &g) {
  std::lock_guard<std::mutex> lk(mutex_);
  inbox_.push_back({g, true});
  cv_.notify_all();
}

void Engine::countRejected() {
  std::lock_guard<std::mutex> lk(metricsMutex_);
  ++metrics_.rejected;
}

std::string Engine::metricsText(const std::string &model) const {
  std::lock_guard<std::mutex> lk(metricsMutex_);
  return metrics_.render(model);
}

void Engine::loop() {
  for (;;) {
    std::deque<Command> commands;
    bool stopping;
    {
      std::unique_lock<std::mutex> lk(mutex_);
      cv_.wait(lk, [&] { return stopping_ || !inbox_.empty() || scheduler_->hasUnfinished(); });
      commands.swap(inbox_);
      stopping = stopping_;
    }
    if (stopping) {
      for (Command &c : commands)
        if (!c.cancel)
          c.gen->refuse(
              llvm::make_error<ApiError>(503, "server_error", "", "server_error", "the server is shutting down"));
      failAll("the server is shutting down");
      return;
    }
    for (Command &c : commands) {
      if (c.cancel)
        cancelChoices(c.gen.get());
      else
        admit(c.gen);
    }
    drainFinished();
    if (scheduler_->hasUnfinished()) runStep();
    drainFinished();
    updateGauges();
  }
}

void Engine::admit(const std::shared_ptr<Generation> &g) {
  static thread_local std::mt19937_64 seeds{std::random_device{}()};
  const GenerationRequest &r = g->request();
  const uint64_t seed = r.seed ? *r.seed : seeds();
  std::vector<SeqId> seqs;
  int64_t promptTokens = 0;
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    promptTokens += static_cast<int64_t>(r.prompts[p].size());
    SeqId first = -1;  // choice 0 of this prompt: the others fork from it (copy-on-write)
    for (int32_t c = 0; c < r.n; ++c) {
      Request q;
      q.id = "c" + std::to_string(nextId_++);
      q.prompt = r.prompts[p];
      q.forkOf = first;
      q.maxTokens = r.maxTokens;
      q.stopTokenIds = r.stopTokenIds;
      q.sampling = r.sampling;
      q.sampling.seed = seed + static_cast<uint64_t>(c);
      const std::string id = q.id;
      const SamplingParams sampling = q.sampling;
      auto seq = scheduler_->addRequest(std::move(q));
      if (!seq) {
        for (SeqId s : seqs) {
          Choice &ch = choices_.at(s);
          ch.ended = true;
          llvm::consumeError(scheduler_->abort(ch.id));
        }
        g->refuse(seq.takeError());
        std::lock_guard<std::mutex> lk(metricsMutex_);
        ++metrics_.rejected;
        return;
      }
      Choice &ch =
          choices_.try_emplace(*seq, tokenizer_, completionStartsSequence(tokenizer_, r.prompts[p])).first->second;
      ch.gen = g;
      ch.index = static_cast<int32_t>(p) * r.n + c;
      ch.id = id;
      ch.sampling = sampling;
      seqs.push_back(*seq);
      seqsOf_[g.get()].push_back(*seq);
      if (c == 0) first = *seq;
    }
  }
  {
    std::lock_guard<std::mutex> lk(metricsMutex_);
    metrics_.promptTokens += promptTokens;
  }
  g->accept();
}

void Engine::cancelChoices(Generation *g) {
  auto it = seqsOf_.find(g);
  if (it == seqsOf_.end()) return;
  int64_t aborted = 0;
  for (SeqId s : it->second) {
    Choice &c = choices_.at(s);
    if (c.ended) continue;
    c.ended = true;
    c.endReason.reset();
    llvm::consumeError(scheduler_->abort(c.id));
    ++aborted;
  }
  std::lock_guard<std::mutex> lk(metricsMutex_);
  metrics_.aborted += aborted;
}

void Engine::runStep() {
  auto step = [&](const StepBatch &b, llvm::MutableArrayRef<float> logits) { return model_.step(b, logits); };
  if (llvm::Error e = scheduler_->step(step)) {
    // The requests of the failed batch end with the error; the others go on.
    const std::string why = "the model failed: " + llvm::toString(std::move(e));
    std::fprintf(stderr, "serve: %s\n", why.c_str());
    std::vector<Generation *> gens;
    for (const ScheduledChunk &ch : scheduler_->lastBatch().chunks) {
      auto it = choices_.find(ch.seq);
      if (it != choices_.end() && !llvm::is_contained(gens, it->second.gen.get())) gens.push_back(it->second.gen.get());
    }
    int64_t failed = 0;
    for (Generation *g : gens) {
      g->fail(why);
      for (SeqId s : seqsOf_[g]) {
        Choice &c = choices_.at(s);
        if (c.ended) continue;
        c.ended = true;
        c.endReason.reset();
        llvm::consumeError(scheduler_->abort(c.id));
        ++failed;
      }
    }
    std::lock_guard<std::mutex> lk(metricsMutex_);
    ++metrics_.modelErrors;
    metrics_.failed += failed;
    return;
  }
  const StepRecord &rec = scheduler_->lastStep();
  {
    std::lock_guard<std::mutex> lk(metricsMutex_);
    ++metrics_.steps;
    metrics_.prefillTokens += rec.prefillTokens;
    metrics_.preemptions = rec.preemptionsTotal;
    const SpeculativeStats &spec = scheduler_->speculativeStats();
    metrics_.specDraftTokens = spec.draftTokens;
    metrics_.specAcceptedTokens = spec.acceptedTokens;
    metrics_.specVerifications = spec.verifications;
    metrics_.specEmittedTokens = spec.emittedTokens;
  }
  for (const ScheduledChunk &ch : scheduler_->lastStep().chunks) {  // forks' first tokens included
    auto it = choices_.find(ch.seq);
    if (it == choices_.end()) continue;
    // A stop string found in an accepted run ends the choice: the tokens after it are dropped.
    for (size_t j = 0; j < ch.tokens.size() && !it->second.ended; ++j)
      onToken(it->second, ch.tokens[j], j < ch.logprobs.size() ? &ch.logprobs[j] : nullptr);
  }
}

namespace {
/// The position of the first stop string in `text`, or npos.
size_t findStop(const std::string &text, const std::vector<std::string> &stops) {
  size_t cut = std::string::npos;
  for (const std::string &s : stops) cut = std::min(cut, text.find(s));
  return cut;
}
/// The length of the longest suffix of `text` that is a proper prefix of a stop string.
size_t stopPrefixSuffix(const std::string &text, const std::vector<std::string> &stops) {
  size_t keep = 0;
  for (const std::string &s : stops)
    for (size_t k = std::min(s.size() - 1, text.size()); k > keep; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  return keep;
}
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void Engine::onToken(Choice &c, TokenId token, const SampledToken *logprobs) {
  Generation &g = *c.gen;
  const GenerationRequest &r = g.request();
  ChoiceDelta d;
  d.index = c.index;
  d.tokens.push_back(token);
  if (c.sampling.logprobs >= 0 && logprobs) d.logprobs.push_back(*logprobs);
  const Clock::time_point now = Clock::now();
  if (c.tokens++ == 0) {
    c.firstToken = now;
    std::lock_guard<std::mutex> lk(metricsMutex_);
    metrics_.ttft.observe(seconds(now - g.arrival()));
  }
  {
    std::lock_guard<std::mutex> lk(metricsMutex_);
    ++metrics_.generationTokens;
  }
  if (!llvm::is_contained(r.stopTokenIds, token)) c.held += c.detok.push(token);
  if (!r.stop.empty()) {
    const size_t cut = findStop(c.held, r.stop);
    if (cut != std::string::npos) {
      d.text = c.held.substr(0, cut);
      c.held.clear();
      c.ended = true;
      c.endReason = FinishReason::Stop;
      llvm::consumeError(scheduler_->abort(c.id));
      g.push(std::move(d));
      return;
    }
    const size_t keep = stopPrefixSuffix(c.held, r.stop);
    d.text = c.held.substr(0, c.held.size() - keep);
    c.held.erase(0, c.held.size() - keep);
  } else {
    d.text = std::move(c.held);
    c.held.clear();
  }
  g.push(std::move(d));
}

void Engine::drainFinished() {
  for (RequestOutput &o : scheduler_->takeFinished()) {
    auto it = choices_.find(o.seq);
    if (it == choices_.end()) continue;
    Choice &c = it->second;
    std::optional<FinishReason> reason;
    ChoiceDelta d;
    d.index = c.index;
    d.cachedPromptTokens = o.cachedPromptTokens;
    if (c.ended || o.finish == FinishReason::Abort) {
      // A stop string ended it (it may have reached max_tokens in the same step); else it was
      // cancelled or failed: nothing to send.
      reason = c.endReason;
    } else {
      reason = o.finish;
      d.text = c.held + c.detok.finish();
      const size_t cut = c.gen->request().stop.empty() ? std::string::npos : findStop(d.text, c.gen->request().stop);
      if (cut != std::string::npos) {
        d.text.resize(cut);
        reason = FinishReason::Stop;
      }
    }
    if (reason) {
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> lk(metricsMutex_);
      ++(*reason == FinishReason::Stop ? metrics_.finishedStop : metrics_.finishedLength);
      metrics_.e2e.observe(seconds(now - c.gen->arrival()));
      if (c.tokens >= 2) metrics_.tpot.observe(seconds(now - c.firstToken) / double(c.tokens - 1));
    }
    if (reason) {
      d.finish = reason;
      c.gen->push(std::move(d));
    }
    auto seqs = seqsOf_.find(c.gen.get());
    if (seqs != seqsOf_.end()) {
      llvm::erase(seqs->second, o.seq);
      if (seqs->second.empty()) seqsOf_.erase(seqs);
    }
    choices_.erase(it);
  }
}

void Engine::failAll(const std::string &why) {
  int64_t failed = 0;
  for (auto &[seq, c] : choices_) {
    if (c.ended) continue;
    c.ended = true;
    c.endReason.reset();
    c.gen->fail(why);
    llvm::consumeError(scheduler_->abort(c.id));
    ++failed;
  }
  drainFinished();
  std::lock_guard<std::mutex> lk(metricsMutex_);
  metrics_.failed += failed;
}

void Engine::updateGauges() {
  const BlockManager &bm = scheduler_->blockManager();
  std::lock_guard<std::mutex> lk(metricsMutex_);
  metrics_.running = scheduler_->numRunning();
  metrics_.waiting = scheduler_->numWaiting();
  metrics_.kvBlocksUsed = bm.numBlocks() - bm.numFreeBlocks();
  metrics_.prefixQueriedTokens = bm.prefixCacheStats().queriedTokens;
  metrics_.prefixHitTokens = bm.prefixCacheStats().hitTokens;
}

}  // namespace colossal::runtime::serve

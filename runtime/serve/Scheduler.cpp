//===- Scheduler.cpp - Continuous batching: decodes, prompt chunks, admission, preemption ----===//
#include "colossal/runtime/serve/Scheduler.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace colossal::runtime::serve {

StepModel::~StepModel() = default;

char InvalidRequestError::ID = 0;

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}
}  // namespace

llvm::Expected<std::unique_ptr<Scheduler>> Scheduler::create(const SchedulerConfig &config,
                                                          const SpeculativeConfig &speculative) {
  if (config.maxSeqLen < 1) return error("max_seq_len must be >= 1, not " + llvm::Twine(config.maxSeqLen));
  if (config.maxBatchSeqs < 1)
    return error("max_batch_seqs must be >= 1, not " + llvm::Twine(config.maxBatchSeqs));
  if (config.maxBatchTokens < 0)
    return error("max_batch_tokens must be >= 0 (0: no limit), not " + llvm::Twine(config.maxBatchTokens));
  if (config.vocabSize < 1) return error("the vocabulary size must be >= 1, not " + llvm::Twine(config.vocabSize));
  if (speculative.drafter) {
    const int64_t k = speculative.numSpeculativeTokens;
    if (k < 1) return error("--num-speculative-tokens must be >= 1, not " + llvm::Twine(k));
    if (config.maxBatchTokens > 0 && k + 1 > config.maxBatchTokens)
      return error("--num-speculative-tokens " + llvm::Twine(k) + ": a verification runs K + 1 = " +
                   llvm::Twine(k + 1) + " tokens, above max_batch_tokens " + llvm::Twine(config.maxBatchTokens));
  }
  auto blocks = BlockManager::create({config.numBlocks, config.blockSize, config.prefixCaching, config.maxSeqLen});
  if (!blocks) return blocks.takeError();
  return std::unique_ptr<Scheduler>(new Scheduler(config, speculative, std::move(*blocks)));
}

Scheduler::Scheduler(const SchedulerConfig &config, const SpeculativeConfig &speculative,
                     std::unique_ptr<BlockManager> blocks)
    : config_(config), spec_(speculative), blocks_(std::move(blocks)) {
  batch_.maxBlocksPerSeq = static_cast<int32_t>(blocks_->blocksFor(config.maxSeqLen));
}

llvm::Error Scheduler::invalid(const Request &r, const char *param, const llvm::Twine &msg) const {
  return llvm::make_error<InvalidRequestError>(r.id, param, ("request '" + r.id + "': " + msg).str());
}

llvm::Error Scheduler::validate(const Request &r) const {
  if (liveIds_.count(r.id)) return invalid(r, "id", "the id is already in use");
  if (r.prompt.empty()) return invalid(r, "prompt", "the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= config_.vocabSize)
      return invalid(r, "prompt",
                     "prompt token " + llvm::Twine(i) + " is " + llvm::Twine(r.prompt[i]) +
                         ", outside the vocabulary [0, " + llvm::Twine(config_.vocabSize) + ")");
  if (r.maxTokens < 1) return invalid(r, "max_tokens", "max_tokens must be >= 1, not " + llvm::Twine(r.maxTokens));
  const int64_t len = static_cast<int64_t>(r.prompt.size());
  if (len + r.maxTokens > config_.maxSeqLen)
    return invalid(r, "max_tokens",
                   "prompt of " + llvm::Twine(len) + " tokens + max_tokens " + llvm::Twine(r.maxTokens) + " = " +
                       llvm::Twine(len + r.maxTokens) + " is above max_seq_len " + llvm::Twine(config_.maxSeqLen));
  if (r.forkOf >= 0) {
    auto parent = seqs_.find(r.forkOf);
    if (parent == seqs_.end() || parent->second.admittedOnce)
      return invalid(r, "n", "forkOf " + llvm::Twine(r.forkOf) + " is not a request still waiting for admission");
    if (parent->second.out.prompt != r.prompt) return invalid(r, "n", "a fork has its parent's prompt");
  }
  if (llvm::Error e = validateSamplingParams(r.sampling)) {
    // validateSamplingParams's message starts with the parameter's name.
    std::string msg = llvm::toString(std::move(e));
    std::string param = msg.substr(0, msg.find(' '));
    return invalid(r, param.c_str(), msg);
  }
  return llvm::Error::success();
}

llvm::Expected<SeqId> Scheduler::addRequest(Request request) {
  if (llvm::Error e = validate(request)) return std::move(e);
  const SeqId id = nextSeq_++;
  Sequence s;
  s.out.id = request.id;
  s.out.seq = id;
  s.out.prompt = std::move(request.prompt);
  s.out.arrivalStep = steps_;
  s.all = s.out.prompt;
  s.request = std::move(request);
  liveIds_.emplace(s.out.id, id);
  const SeqId parent = s.request.forkOf;
  seqs_.emplace(id, std::move(s));
  if (parent >= 0)
    forks_[parent].push_back(id);
  else
    waiting_.push_back(id);
  return id;
}

llvm::Error Scheduler::abort(llvm::StringRef id) {
  auto it = liveIds_.find(id.str());
  if (it == liveIds_.end() || !seqs_.count(it->second))
    return error("abort: no unfinished request '" + id + "'");
  const SeqId seq = it->second;
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (w != waiting_.end()) waiting_.erase(w);
  return finish(seq, FinishReason::Abort);
}

std::vector<RequestOutput> Scheduler::takeFinished() {
  for (const RequestOutput &o : finished_) liveIds_.erase(o.id);
  return std::move(finished_);
}

void Scheduler::removeRunning(SeqId seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  if (it != running_.end()) running_.erase(it);
}

void Scheduler::preempt(SeqId seq) {
  Sequence &s = seqs_.at(seq);
  llvm::cantFail(blocks_->release(seq));
  if (spec_.drafter) spec_.drafter->release(seq);
  s.drafts.clear();
  s.draftProbs.clear();
  s.computed = 0;
  ++s.out.preemptions;
  ++preemptions_;
  removeRunning(seq);
  waiting_.push_front(seq);
  record_.preempted.push_back(seq);
}

llvm::Error Scheduler::finish(SeqId seq, FinishReason reason) {
  auto it = seqs_.find(seq);
  Sequence &s = it->second;
  // A fork still waiting leaves its parent's list; a parent ended before its first token (an
  // abort) leaves its forks to prefill on their own, in their place in the queue.
  if (s.request.forkOf >= 0) {
    auto f = forks_.find(s.request.forkOf);
    if (f != forks_.end()) {
      llvm::erase(f->second, seq);
      if (f->second.empty()) forks_.erase(f);
    }
  }
  if (auto f = forks_.find(seq); f != forks_.end()) {
    for (SeqId child : llvm::reverse(f->second)) {
      seqs_.at(child).request.forkOf = -1;
      waiting_.push_front(child);
    }
    forks_.erase(f);
  }
  if (blocks_->contains(seq))
    if (llvm::Error e = blocks_->release(seq)) return e;
  if (spec_.drafter) spec_.drafter->release(seq);
  removeRunning(seq);
  s.out.finish = reason;
  s.out.finishStep = steps_;
  finished_.push_back(std::move(s.out));
  seqs_.erase(it);
  record_.finished.push_back(seq);
  return llvm::Error::success();
}

void Scheduler::addChunk(Sequence &s, int64_t start, int64_t end, bool decode) {
  ScheduledChunk c;
  c.seq = s.out.seq;
  c.start = start;
  c.end = end;
  c.decode = decode;
  c.numDrafts = static_cast<int32_t>(s.drafts.size());
  c.sampled = end == static_cast<int64_t>(s.all.size() + s.drafts.size());
  batch_.chunks.push_back(c);
  s.scheduledStep = steps_;
}

llvm::Error Scheduler::proposeDrafts(int64_t budget) {
  draftRequests_.clear();
  draftStop_.reset();
  for (SeqId seq : running_) {  // drafts of a decode that waited are proposed again
    seqs_.at(seq).drafts.clear();
    seqs_.at(seq).draftProbs.clear();
  }
  int32_t seqs = 0;
  for (SeqId seq : running_) {
    Sequence &s = seqs_.at(seq);
    const int64_t len = static_cast<int64_t>(s.all.size());
    if (blocks_->length(seq) == len) continue;  // still prefilling
    // The whole run (drafts + the target's token) stays within max_tokens, hence max_seq_len.
    const int64_t generated = static_cast<int64_t>(s.out.tokens.size());
    const int64_t k = std::min<int64_t>({spec_.numSpeculativeTokens, s.request.maxTokens - generated - 1,
                                         config_.maxSeqLen - len});
    if (budget < 1 + std::max<int64_t>(k, 0) || seqs == config_.maxBatchSeqs) {
      // This decode and the newer ones wait for a step with room for all their drafts: run now
      // without them, a sampled request's tokens would depend on what else is running.
      draftStop_ = seq;
      break;
    }
    budget -= 1 + std::max<int64_t>(k, 0);
    ++seqs;
    if (k < 1) continue;
    DraftRequest r;
    r.seq = seq;
    r.tokens = s.all;
    r.maxDrafts = static_cast<int32_t>(k);
    r.sampling = &s.request.sampling;
    r.firstIndex = static_cast<uint64_t>(generated);
    draftRequests_.push_back(std::move(r));
  }
  if (draftRequests_.empty()) return llvm::Error::success();
  if (llvm::Error e = spec_.drafter->propose(draftRequests_)) return e;
  for (DraftRequest &r : draftRequests_) {
    Sequence &s = seqs_.at(r.seq);
    s.drafts = std::move(r.drafts);
    s.draftProbs = std::move(r.probs);
  }
  return llvm::Error::success();
}

llvm::Error Scheduler::scheduleDecodes(int64_t &budget) {
  if (spec_.drafter)
    if (llvm::Error e = proposeDrafts(budget)) return e;
  // A copy: preemption removes sequences from running_. Victims are always the newest, never one
  // already scheduled: those are older than the sequence being scheduled.
  const std::vector<SeqId> order = running_;
  for (SeqId seq : order) {
    if (budget == 0 || static_cast<int32_t>(batch_.chunks.size()) == config_.maxBatchSeqs) break;
    if (!blocks_->contains(seq)) continue;  // preempted for an older sequence's decode
    Sequence &s = seqs_.at(seq);
    const int64_t held = blocks_->length(seq);
    if (held == static_cast<int64_t>(s.all.size())) continue;  // still prefilling
    if (draftStop_ && seq == *draftStop_) break;  // no room for its drafts this step
    // A decode runs with all its drafts or waits: its drafts must not depend on the batch.
    if (1 + static_cast<int64_t>(s.drafts.size()) > budget) break;
    std::vector<TokenId> pending(s.all.begin() + held, s.all.end());
    pending.insert(pending.end(), s.drafts.begin(), s.drafts.end());
    bool preemptedSelf = false;
    while (true) {
      auto r = blocks_->append(seq, pending);
      if (!r) return r.takeError();
      if (r->status == KvStatus::Ok) {
        if (r->copy) batch_.blockCopies.push_back(*r->copy);
        break;
      }
      const SeqId victim = running_.back();
      preempt(victim);
      if (victim == seq) {
        preemptedSelf = true;
        break;
      }
    }
    if (preemptedSelf) break;  // every newer sequence is gone too
    addChunk(s, s.computed, static_cast<int64_t>(s.all.size() + s.drafts.size()), /*decode=*/true);
    budget -= 1 + static_cast<int64_t>(s.drafts.size());
  }
  return llvm::Error::success();
}

void Scheduler::schedulePrefills(int64_t &budget) {
  for (SeqId seq : running_) {
    if (budget == 0 || static_cast<int32_t>(batch_.chunks.size()) == config_.maxBatchSeqs) return;
    Sequence &s = seqs_.at(seq);
    const int64_t len = static_cast<int64_t>(s.all.size());
    // Decodes: scheduled, or left out by the budget (their token has no slot yet).
    if (s.scheduledStep == steps_ || blocks_->length(seq) < len) continue;
    const int64_t n = std::min(len - s.computed, budget);
    addChunk(s, s.computed, s.computed + n, /*decode=*/false);
    budget -= n;
  }
}

llvm::Error Scheduler::admit(int64_t &budget) {
  while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(batch_.chunks.size()) < config_.maxBatchSeqs) {
    const SeqId seq = waiting_.front();
    Sequence &s = seqs_.at(seq);
    auto r = blocks_->allocate(seq, s.all);
    if (!r) return r.takeError();
    if (r->status == KvStatus::OutOfBlocks) break;  // first come, first served: nobody overtakes
    waiting_.pop_front();
    running_.push_back(seq);
    s.computed = r->cachedTokens;
    if (!s.admittedOnce) s.out.cachedPromptTokens = r->cachedTokens;
    s.admittedOnce = true;
    const int64_t n = std::min(static_cast<int64_t>(s.all.size()) - s.computed, budget);
    addChunk(s, s.computed, s.computed + n, /*decode=*/false);
    budget -= n;
  }
  return llvm::Error::success();
}

llvm::Error Scheduler::schedule() {
  batch_.chunks.clear();
  batch_.blockCopies.clear();
  int64_t budget = config_.maxBatchTokens == 0 ? std::numeric_limits<int64_t>::max() : config_.maxBatchTokens;
  if (llvm::Error e = scheduleDecodes(budget)) return e;
  schedulePrefills(budget);
  // After a preemption the pool is short: admitting now would only preempt again next step.
  if (record_.preempted.empty())
    if (llvm::Error e = admit(budget)) return e;
  buildBatch();
  return llvm::Error::success();
}

void Scheduler::buildBatch() {
  StepBatch &b = batch_;
  b.tokenIds.clear();
  b.positions.clear();
  b.slotMapping.clear();
  b.queryStartLoc.assign(1, 0);
  b.contextLens.clear();
  b.logitsIndices.clear();
  const int32_t width = b.maxBlocksPerSeq;
  b.blockTables.assign(b.chunks.size() * width, -1);
  for (size_t i = 0; i < b.chunks.size(); ++i) {
    const ScheduledChunk &c = b.chunks[i];
    const Sequence &s = seqs_.at(c.seq);
    const int64_t len = static_cast<int64_t>(s.all.size());
    for (int64_t p = c.start; p < c.end; ++p) {
      b.tokenIds.push_back(p < len ? s.all[p] : s.drafts[p - len]);
      b.positions.push_back(static_cast<int32_t>(p));
    }
    blocks_->slotMapping(c.seq, c.start, c.end, b.slotMapping);
    llvm::ArrayRef<BlockId> table = blocks_->blockTable(c.seq);
    std::copy(table.begin(), table.end(), b.blockTables.begin() + i * width);
    b.contextLens.push_back(static_cast<int32_t>(c.end));
    b.queryStartLoc.push_back(static_cast<int32_t>(b.tokenIds.size()));
    const int32_t end = static_cast<int32_t>(b.tokenIds.size());
    if (c.sampled)
      for (int32_t r = end - 1 - c.numDrafts; r < end; ++r) b.logitsIndices.push_back(r);
  }
}

llvm::Expected<bool> Scheduler::emit(Sequence &s, ScheduledChunk &c, TokenId token, llvm::ArrayRef<float> row) {
  const int64_t index = static_cast<int64_t>(s.out.tokens.size());
  c.tokens.push_back(token);
  if (s.request.sampling.logprobs >= 0) {
    SampledToken t = tokenLogprobs(row, token, s.request.sampling.logprobs, workspace_);
    c.logprobs.push_back(t);
    s.out.logprobs.push_back(std::move(t));
  }
  s.all.push_back(token);
  s.out.tokens.push_back(token);
  if (s.out.firstTokenStep < 0) s.out.firstTokenStep = steps_;
  const bool stop = llvm::is_contained(s.request.stopTokenIds, token);
  if (!stop && index + 1 < s.request.maxTokens) return false;
  if (llvm::Error e = finish(c.seq, stop ? FinishReason::Stop : FinishReason::Length)) return std::move(e);
  return true;
}

llvm::Error Scheduler::completeSpeculative(ScheduledChunk &c, llvm::ArrayRef<float> rows) {
  Sequence &s = seqs_.at(c.seq);
  const std::vector<TokenId> drafts = std::move(s.drafts);
  const std::vector<double> probs = std::move(s.draftProbs);
  s.drafts.clear();
  s.draftProbs.clear();
  int32_t accepted = 0;
  const std::vector<TokenId> run = verifyDrafts(rows, drafts, probs, s.request.sampling, s.all,
                                                static_cast<uint64_t>(s.out.tokens.size()), workspace_, accepted);
  c.acceptedDrafts = accepted;
  ++specStats_.verifications;
  specStats_.draftTokens += static_cast<int64_t>(drafts.size());
  specStats_.acceptedTokens += accepted;
  // Keys and values are valid for the last token and the accepted drafts; the rest is dropped
  // before anything is marked computed, so the prefix cache sees verified tokens only.
  const int64_t verified = c.start + 1 + accepted;
  if (llvm::Error e = blocks_->truncate(c.seq, verified)) return e;
  if (llvm::Error e = blocks_->markComputed(c.seq, verified)) return e;
  s.computed = verified;
  const size_t V = static_cast<size_t>(config_.vocabSize);
  for (size_t j = 0; j < run.size(); ++j) {
    ++specStats_.emittedTokens;
    auto finished = emit(s, c, run[j], rows.slice(j * V, V));
    if (!finished) return finished.takeError();
    if (*finished) break;
  }
  return llvm::Error::success();
}

llvm::Error Scheduler::complete() {
  size_t row = 0;
  const size_t V = static_cast<size_t>(config_.vocabSize);
  for (ScheduledChunk &c : batch_.chunks) {
    if (c.numDrafts > 0) {
      const size_t n = 1 + static_cast<size_t>(c.numDrafts);
      llvm::ArrayRef<float> rows(logits_.data() + row * V, n * V);
      row += n;
      if (llvm::Error e = completeSpeculative(c, rows)) return e;
      continue;
    }
    Sequence &s = seqs_.at(c.seq);
    s.computed = c.end;
    if (llvm::Error e = blocks_->markComputed(c.seq, c.end)) return e;
    if (!c.sampled) continue;
    llvm::ArrayRef<float> logits(logits_.data() + row++ * V, V);
    // The forks waiting for this prompt share its blocks from here and sample from this row.
    if (auto f = forks_.find(c.seq); f != forks_.end()) {
      const std::vector<SeqId> children = std::move(f->second);
      forks_.erase(f);
      for (SeqId child : children) {
        Sequence &k = seqs_.at(child);
        if (llvm::Error e = blocks_->fork(c.seq, child)) return e;
        k.computed = s.computed;
        k.admittedOnce = true;
        k.out.cachedPromptTokens = s.out.cachedPromptTokens;
        k.request.forkOf = -1;
        running_.push_back(child);
        // The fork's first token, reported as a chunk of no rows at the end of its prompt.
        ScheduledChunk forked;
        forked.seq = child;
        forked.start = forked.end = s.computed;
        forked.sampled = true;
        const TokenId first = sampleToken(logits, k.request.sampling, k.all, 0, workspace_).id;
        auto finished = emit(k, forked, first, logits);
        if (!finished) return finished.takeError();
        forkedChunks_.push_back(std::move(forked));
      }
    }
    const int64_t index = static_cast<int64_t>(s.out.tokens.size());
    const TokenId token = sampleToken(logits, s.request.sampling, s.all, index, workspace_).id;
    auto finished = emit(s, c, token, logits);
    if (!finished) return finished.takeError();
  }
  return llvm::Error::success();
}

llvm::Error Scheduler::step(ModelStep model) {
  record_ = StepRecord();
  record_.step = steps_;
  if (hasUnfinished()) {
    if (llvm::Error e = schedule()) return e;
    // Something always fits: the oldest running sequence can always grow (the pool holds one
    // sequence of max_seq_len), and with none running the pool is free for the first waiting one.
    assert(!batch_.chunks.empty() && "a step with unfinished requests scheduled nothing");
    logits_.resize(batch_.logitsIndices.size() * config_.vocabSize);
    if (llvm::Error e = model(batch_, logits_)) return e;
    if (llvm::Error e = complete()) return e;
  } else {
    batch_.chunks.clear();
  }
  record_.chunks = batch_.chunks;
  record_.chunks.insert(record_.chunks.end(), forkedChunks_.begin(), forkedChunks_.end());
  forkedChunks_.clear();
  for (const ScheduledChunk &c : batch_.chunks) {
    const int64_t n = c.end - c.start;
    record_.scheduledTokens += n;
    (c.decode ? record_.decodeTokens : record_.prefillTokens) += n;
  }
  record_.preemptionsTotal = preemptions_;
  record_.waiting = numWaiting();
  record_.running = numRunning();
  record_.freeBlocks = blocks_->numFreeBlocks();
  ++steps_;
  return llvm::Error::success();
}

}  // namespace colossal::runtime::serve

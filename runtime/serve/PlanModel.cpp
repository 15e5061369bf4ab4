//===- PlanModel.cpp - a generate plan as the scheduler's model ----------------------------===//
//
// PlanModel.h. Inputs are staged in host vectors and copied with Executor::setInput; the logits
// rows the scheduler asks for are copied out of the program's output.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/serve/PlanModel.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/StateStore.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cstring>

namespace colossal::runtime::serve {
namespace {

llvm::Error fail(const llvm::Twine &msg) { return llvm::createStringError(llvm::inconvertibleErrorCode(), msg); }

}  // namespace

PlanModel::~PlanModel() {
  programs_.clear();  // the executors use the arena
  if (arena_) device_->deallocate(arena_);
}

llvm::Expected<std::unique_ptr<PlanModel>> PlanModel::create(const LoadedPlan &plan, const KernelRegistry &registry,
                                                             Device &device, CommContext *comm) {
  if (plan.plan.mode() != "generate" || !plan.plan.has_generate())
    return fail(plan.path + ": not a generate plan (mode '" + plan.plan.mode() +
                "'); compile the model with `mode: generate` to serve it");
  const plan::GenerateConfig &g = plan.plan.generate();
  std::unique_ptr<PlanModel> m(new PlanModel());
  m->plan_ = &plan;
  m->device_ = &device;
  m->config_.maxSeqLen = g.max_seq_len();
  m->config_.blockSize = static_cast<int32_t>(g.block_size());
  m->config_.numBlocks = static_cast<int32_t>(g.num_blocks());
  m->config_.maxBatchSeqs = static_cast<int32_t>(g.max_batch_seqs());
  m->config_.maxBatchTokens = g.max_batch_tokens();
  m->config_.vocabSize = static_cast<int32_t>(g.vocab_size());
  auto states = StateStore::create(plan, device);
  if (!states) return states.takeError();
  m->states_ = std::move(*states);
  const uint64_t arenaBytes = maxArenaBytes(plan.plan);
  if (arenaBytes > 0) {
    auto arena = device.allocate(arenaBytes, kArenaAlignment);
    if (!arena) return arena.takeError();
    m->arena_ = *arena;
  }
  for (const plan::Program &p : plan.plan.programs()) {
    if (p.role() != plan::Program::GENERATE) continue;
    ExecutorOptions o;
    o.states = m->states_.get();
    o.arena = m->arena_;
    o.arenaBytes = arenaBytes;
    o.comm = comm;
    auto exec = Executor::create(plan, registry, device, p.name(), o);
    if (!exec) return exec.takeError();
    m->programs_.push_back({p.tokens(), std::move(*exec)});
  }
  std::sort(m->programs_.begin(), m->programs_.end(),
            [](const Program &a, const Program &b) { return a.tokens < b.tokens; });
  if (m->programs_.empty()) return fail(plan.path + ": the generate plan has no generate program");
  for (const BindingInfo &in : m->programs_.front().exec->inputs())
    if (in.name == "tokens") m->tokenDtype_ = in.tensor.dtype;
  const int64_t n = m->programs_.back().tokens, S = g.max_batch_seqs();
  m->tokens64_.resize(n);
  m->tokens32_.resize(n);
  m->positions_.resize(n);
  m->slots_.resize(n);
  m->tables_.resize(S * g.max_blocks_per_seq());
  m->contextLens_.resize(S);
  m->queryStart_.resize(S + 1);
  return m;
}

std::vector<int64_t> PlanModel::programTokens() const {
  std::vector<int64_t> out;
  for (const Program &p : programs_) out.push_back(p.tokens);
  return out;
}

void PlanModel::resetCache() { states_->zero(plan::StateTensor::KV_CACHE); }

llvm::Error PlanModel::step(const StepBatch &batch, llvm::MutableArrayRef<float> logits) {
  const plan::GenerateConfig &g = plan_->plan.generate();
  const int64_t T = batch.numTokens(), S = static_cast<int64_t>(batch.contextLens.size());
  const int64_t V = g.vocab_size(), MB = g.max_blocks_per_seq(), maxS = g.max_batch_seqs();
  auto it = std::find_if(programs_.begin(), programs_.end(), [&](const Program &p) { return p.tokens >= T; });
  if (it == programs_.end())
    return fail("generate step: " + llvm::Twine(T) + " tokens, more than the plan's largest program (" +
                llvm::Twine(programs_.back().tokens) + ")");
  if (S > maxS) return fail("generate step: " + llvm::Twine(S) + " sequences, more than max_batch_seqs " + llvm::Twine(maxS));
  if (batch.maxBlocksPerSeq != MB)
    return fail("generate step: block tables of width " + llvm::Twine(batch.maxBlocksPerSeq) + ", the plan's is " +
                llvm::Twine(MB));
  if (static_cast<int64_t>(batch.positions.size()) != T || static_cast<int64_t>(batch.slotMapping.size()) != T ||
      static_cast<int64_t>(batch.queryStartLoc.size()) != S + 1 || static_cast<int64_t>(batch.contextLens.size()) != S ||
      static_cast<int64_t>(batch.blockTables.size()) != S * MB)
    return fail("generate step: the batch's arrays disagree with its " + llvm::Twine(T) + " tokens and " +
                llvm::Twine(S) + " sequences");
  if (logits.size() != batch.logitsIndices.size() * static_cast<size_t>(V))
    return fail("generate step: a logits buffer of " + llvm::Twine(logits.size()) + " floats for " +
                llvm::Twine(batch.logitsIndices.size()) + " rows of " + llvm::Twine(V));
  const int64_t N = it->tokens;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = batch.tokenIds[t];
    if (id < 0 || id >= V)
      return fail("generate step: token id " + llvm::Twine(id) + " (row " + llvm::Twine(t) + ") is outside the vocabulary [0, " +
                  llvm::Twine(V) + ")");
    if (batch.positions[t] < 0 || batch.positions[t] >= g.max_seq_len())
      return fail("generate step: position " + llvm::Twine(batch.positions[t]) + " (row " + llvm::Twine(t) +
                  ") is outside [0, max_seq_len " + llvm::Twine(g.max_seq_len()) + ")");
    tokens64_[t] = id;
    tokens32_[t] = id;
    positions_[t] = batch.positions[t];
    slots_[t] = batch.slotMapping[t];
  }
  for (int64_t t = T; t < N; ++t) {  // padding rows
    tokens64_[t] = tokens32_[t] = positions_[t] = 0;
    slots_[t] = -1;
  }
  std::copy(batch.blockTables.begin(), batch.blockTables.end(), tables_.begin());
  std::fill(tables_.begin() + S * MB, tables_.end(), -1);
  std::copy(batch.contextLens.begin(), batch.contextLens.end(), contextLens_.begin());
  std::fill(contextLens_.begin() + S, contextLens_.end(), 0);
  std::copy(batch.queryStartLoc.begin(), batch.queryStartLoc.end(), queryStart_.begin());
  std::fill(queryStart_.begin() + S + 1, queryStart_.end(), S > 0 ? batch.queryStartLoc[S] : 0);

  // Copy-on-write block copies before this step's keys and values land (BlockManager::fork).
  if (!batch.blockCopies.empty()) {
    if (device_->kind() != DeviceKind::CPU) return fail("generate step: block copies on this device are not supported yet");
    for (const StateEntry &e : states_->entries()) {
      if (e.role() != plan::StateTensor::KV_CACHE) continue;
      const size_t blockBytes = e.tensor.bytes() / static_cast<size_t>(e.tensor.shape[0]);
      char *base = static_cast<char *>(e.tensor.data);
      for (const BlockCopy &c : batch.blockCopies) {
        if (c.src < 0 || c.dst < 0 || c.src >= e.tensor.shape[0] || c.dst >= e.tensor.shape[0])
          return fail("generate step: block copy " + llvm::Twine(c.src) + " -> " + llvm::Twine(c.dst) + " outside the cache");
        if (c.src != c.dst) std::memcpy(base + c.dst * blockBytes, base + c.src * blockBytes, blockBytes);
      }
    }
  }

  // The kernels' thread count is an OpenMP setting of the calling thread (oneDNN reads it too),
  // and the server calls from its engine thread, not the one that set it: set it for this one.
  device_->setThreads(device_->threads());
  Executor &exec = *it->exec;
  const bool wide = tokenDtype_ == DType::I64;
  if (llvm::Error e = exec.setInput("tokens", tokenDtype_, {N}, wide ? static_cast<const void *>(tokens64_.data()) : tokens32_.data()))
    return e;
  if (llvm::Error e = exec.setInput("positions", DType::I32, {N}, positions_.data())) return e;
  if (llvm::Error e = exec.setInput("slot_mapping", DType::I32, {N}, slots_.data())) return e;
  if (llvm::Error e = exec.setInput("block_tables", DType::I32, {maxS, MB}, tables_.data())) return e;
  if (llvm::Error e = exec.setInput("context_lens", DType::I32, {maxS}, contextLens_.data())) return e;
  if (llvm::Error e = exec.setInput("query_start_loc", DType::I32, {maxS + 1}, queryStart_.data())) return e;
  if (llvm::Error e = exec.run()) return e;
  auto out = exec.output("logits");
  if (!out) return out.takeError();
  const char *rows = static_cast<const char *>(out->data);
  for (size_t j = 0; j < batch.logitsIndices.size(); ++j) {
    const int32_t r = batch.logitsIndices[j];
    if (r < 0 || r >= T) return fail("generate step: logits row " + llvm::Twine(r) + " outside the step's " + llvm::Twine(T) + " tokens");
    device_->copyToHost(logits.data() + j * V, rows + static_cast<size_t>(r) * V * sizeof(float), V * sizeof(float));
  }
  return llvm::Error::success();
}

namespace {

/// The step header rank 0 broadcasts: what follows, and the sizes of the body's arrays.
enum : int64_t { kStop = 0, kStep = 1 };
struct StepHeader {
  int64_t kind = kStop, tokens = 0, seqs = 0, blocksPerSeq = 0, logitsRows = 0, copies = 0;
};
constexpr int64_t kHeaderWords = sizeof(StepHeader) / sizeof(int64_t);

/// The body: tokenIds, positions, slotMapping [T], queryStartLoc [S + 1], contextLens [S],
/// blockTables [S·MB], logitsIndices [L], blockCopies [2C] (src, dst), all i32.
int64_t bodyWords(const StepHeader &h) {
  return 3 * h.tokens + (h.seqs + 1) + h.seqs + h.seqs * h.blocksPerSeq + h.logitsRows + 2 * h.copies;
}

}  // namespace

LeaderStepModel::~LeaderStepModel() { llvm::consumeError(finish()); }

llvm::Error LeaderStepModel::finish() {
  if (finished_) return llvm::Error::success();
  finished_ = true;
  StepHeader h;
  return world_.broadcast(&h, &h, kHeaderWords, DType::I64, 0);
}

llvm::Error LeaderStepModel::step(const StepBatch &batch, llvm::MutableArrayRef<float> logits) {
  if (finished_) return fail("generate step after the followers were told to stop");
  StepHeader h;
  h.kind = kStep;
  h.tokens = batch.numTokens();
  h.seqs = static_cast<int64_t>(batch.contextLens.size());
  h.blocksPerSeq = batch.maxBlocksPerSeq;
  h.logitsRows = static_cast<int64_t>(batch.logitsIndices.size());
  h.copies = static_cast<int64_t>(batch.blockCopies.size());
  if (static_cast<int64_t>(batch.positions.size()) != h.tokens ||
      static_cast<int64_t>(batch.slotMapping.size()) != h.tokens ||
      static_cast<int64_t>(batch.queryStartLoc.size()) != h.seqs + 1 ||
      static_cast<int64_t>(batch.blockTables.size()) != h.seqs * h.blocksPerSeq)
    return fail("generate step: the batch's arrays disagree with its " + llvm::Twine(h.tokens) + " tokens and " +
                llvm::Twine(h.seqs) + " sequences");
  body_.clear();
  body_.insert(body_.end(), batch.tokenIds.begin(), batch.tokenIds.end());
  body_.insert(body_.end(), batch.positions.begin(), batch.positions.end());
  body_.insert(body_.end(), batch.slotMapping.begin(), batch.slotMapping.end());
  body_.insert(body_.end(), batch.queryStartLoc.begin(), batch.queryStartLoc.end());
  body_.insert(body_.end(), batch.contextLens.begin(), batch.contextLens.end());
  body_.insert(body_.end(), batch.blockTables.begin(), batch.blockTables.end());
  body_.insert(body_.end(), batch.logitsIndices.begin(), batch.logitsIndices.end());
  for (const BlockCopy &c : batch.blockCopies) {
    body_.push_back(c.src);
    body_.push_back(c.dst);
  }
  if (llvm::Error e = world_.broadcast(&h, &h, kHeaderWords, DType::I64, 0)) return e;
  if (llvm::Error e = world_.broadcast(body_.data(), body_.data(), static_cast<int64_t>(body_.size()), DType::I32, 0))
    return e;
  return local_.step(batch, logits);
}

llvm::Error followSteps(StepModel &local, CommContext &comm) {
  Communicator &world = comm.world();
  const double deadline = comm.timeoutSeconds();
  constexpr double kIdle = 1e9;  // seconds: no deadline while rank 0 waits for requests
  std::vector<int32_t> body;
  std::vector<float> logits;
  StepBatch batch;
  for (;;) {
    StepHeader h;
    comm.setTimeoutSeconds(kIdle);
    llvm::Error received = world.broadcast(&h, &h, kHeaderWords, DType::I64, 0);
    comm.setTimeoutSeconds(deadline);
    if (received) return received;
    if (h.kind == kStop) return llvm::Error::success();
    if (h.kind != kStep || h.tokens < 0 || h.seqs < 0 || h.blocksPerSeq < 0 || h.logitsRows < 0 || h.copies < 0)
      return fail("rank " + llvm::Twine(comm.rank()) + ": a malformed step header from rank 0");
    body.resize(static_cast<size_t>(bodyWords(h)));
    if (llvm::Error e = world.broadcast(body.data(), body.data(), static_cast<int64_t>(body.size()), DType::I32, 0))
      return e;
    const int32_t *p = body.data();
    auto take = [&](auto &out, int64_t n) {
      out.assign(p, p + n);
      p += n;
    };
    take(batch.tokenIds, h.tokens);
    take(batch.positions, h.tokens);
    take(batch.slotMapping, h.tokens);
    take(batch.queryStartLoc, h.seqs + 1);
    take(batch.contextLens, h.seqs);
    take(batch.blockTables, h.seqs * h.blocksPerSeq);
    take(batch.logitsIndices, h.logitsRows);
    batch.maxBlocksPerSeq = static_cast<int32_t>(h.blocksPerSeq);
    batch.blockCopies.resize(static_cast<size_t>(h.copies));
    for (BlockCopy &c : batch.blockCopies) {
      c.src = p[0];
      c.dst = p[1];
      p += 2;
    }
    logits.resize(batch.logitsIndices.size() * static_cast<size_t>(local.config().vocabSize));
    // The same inputs give rank 0 the same error, which it reports; the job goes on.
    llvm::consumeError(local.step(batch, logits));
  }
}

}  // namespace colossal::runtime::serve

//===- Generate.cpp - colossal-run MODEL.cplan generate -------------------------------------===//
//
// Generate.h. The engine is runtime/serve: PlanModel runs the plan's step programs, Scheduler
// batches the requests continuously, Tokenizer and StreamDetokenizer turn text into ids and back.
//
//===----------------------------------------------------------------------------------------===//
#include "Generate.h"
#include "Parallel.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Npy.h"
#include "colossal/runtime/serve/PlanModel.h"
#include "colossal/runtime/serve/StreamDetokenizer.h"
#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

namespace colossal::tools {
namespace {

namespace cl = llvm::cl;
using namespace colossal::runtime;
using namespace colossal::runtime::serve;

cl::OptionCategory &category() {
  static cl::OptionCategory c("generate options (colossal-run MODEL.cplan generate ...)");
  return c;
}

cl::opt<std::string> promptIds("prompt-ids", cl::desc("The prompt as token ids, used as given (no BOS added)"),
                               cl::value_desc("ID,ID,..."), cl::cat(category()));
cl::opt<int64_t> maxTokens("max-tokens", cl::desc("Tokens to generate per request (requests may give their own)"),
                           cl::init(-1), cl::cat(category()));
cl::opt<double> topP("top-p", cl::desc("Nucleus sampling: keep the most likely tokens up to this mass (1 = off)"),
                     cl::init(1.0), cl::cat(category()));
cl::opt<int> topK("top-k", cl::desc("Keep the k most likely tokens (0 = off)"), cl::init(0), cl::cat(category()));
cl::opt<double> minP("min-p", cl::desc("Drop tokens below this fraction of the top probability (0 = off)"),
                     cl::init(0.0), cl::cat(category()));
cl::opt<double> repetitionPenalty("repetition-penalty", cl::desc("Penalty for tokens already seen (1 = off)"),
                                  cl::init(1.0), cl::cat(category()));
cl::opt<bool> ignoreEos("ignore-eos", cl::desc("Do not stop at the tokenizer's end-of-sequence token"),
                        cl::cat(category()));
cl::opt<std::string> requestsPath("requests",
                                  cl::desc("Run the requests of a JSON-lines file together (docs/serving.md)"),
                                  cl::value_desc("FILE.jsonl"), cl::cat(category()));
cl::opt<std::string> outputPath("output", cl::desc("--requests: write one JSON line per request here (default: stdout)"),
                                cl::value_desc("FILE.jsonl"), cl::cat(category()));
cl::opt<std::string> dumpLogitsDir("dump-logits",
                                   cl::desc("Write each request's logits of every generated token to DIR/ID.npy "
                                            "([tokens, vocab] f32)"),
                                   cl::value_desc("DIR"), cl::cat(category()));
cl::opt<int64_t> batchTokens("max-batch-tokens",
                             cl::desc("Token rows per step, at most the plan's generate.max_batch_tokens (default: it)"),
                             cl::init(0), cl::cat(category()));
cl::opt<int64_t> batchSeqs("max-batch-seqs",
                           cl::desc("Sequences per step, at most the plan's generate.max_batch_seqs (default: it)"),
                           cl::init(0), cl::cat(category()));
cl::opt<int64_t> kvBlocks("kv-blocks", cl::desc("KV blocks the scheduler may use, at most the plan's (default: all)"),
                          cl::init(0), cl::cat(category()));
cl::opt<bool> noPrefixCaching("no-prefix-caching", cl::desc("Do not reuse the KV blocks of a common prompt prefix"),
                              cl::cat(category()));
cl::opt<std::string> timingsPath("timings",
                                 cl::desc("--requests: write when each request arrived and each of its tokens was "
                                          "sampled (seconds since the first step) to this JSON file"),
                                 cl::value_desc("FILE.json"), cl::cat(category()));

/// Errors every rank hits alike are printed by rank 0 (Parallel.h isPrintingRank()).
int fail(const llvm::Twine &msg) {
  if (isPrintingRank()) llvm::errs() << ("error: " + msg + "\n").str();
  return 1;
}
int fail(llvm::Error e) { return fail(llvm::toString(std::move(e))); }

/// One request as read (the prompt still text or ids).
struct Job {
  Request request;
  std::optional<std::string> text;  // a text prompt
  int64_t arrivalStep = 0;
  bool ignoreEos = false;
};

llvm::Expected<std::vector<TokenId>> parseIds(llvm::StringRef list, llvm::StringRef what) {
  std::vector<TokenId> ids;
  llvm::SmallVector<llvm::StringRef> parts;
  list.split(parts, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef p : parts) {
    int64_t v;
    if (p.trim().getAsInteger(10, v) || v < 0 || v > INT32_MAX)
      return llvm::createStringError(what + ": '" + p.str() + "' is not a token id");
    ids.push_back(static_cast<TokenId>(v));
  }
  if (ids.empty()) return llvm::createStringError(what + ": no token ids");
  return ids;
}

SamplingParams flagSampling(const SharedGenerateOptions &shared) {
  SamplingParams s;
  s.temperature = shared.temperature;
  s.topK = topK;
  s.topP = topP;
  s.minP = minP;
  s.repetitionPenalty = repetitionPenalty;
  s.seed = shared.seed;
  return s;
}

/// The requests of a JSON-lines file: {"id", "prompt": TEXT | [IDS], "max_tokens", "temperature",
/// "top_p", "top_k", "min_p", "repetition_penalty", "seed", "ignore_eos", "arrival_step"}.
llvm::Expected<std::vector<Job>> readRequests(llvm::StringRef path, const SharedGenerateOptions &shared) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) return llvm::createStringError(path + ": " + buffer.getError().message());
  std::vector<Job> jobs;
  llvm::SmallVector<llvm::StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    llvm::StringRef line = lines[i].trim();
    if (line.empty()) continue;
    const std::string where = path.str() + ":" + std::to_string(i + 1) + ": ";
    auto value = llvm::json::parse(line);
    if (!value) return llvm::createStringError(where + llvm::toString(value.takeError()));
    const llvm::json::Object *o = value->getAsObject();
    if (!o) return llvm::createStringError(where + "a request is a JSON object");
    static const char *known[] = {"id", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p",
                                  "repetition_penalty", "seed", "ignore_eos", "arrival_step"};
    for (const auto &kv : *o)
      if (!llvm::is_contained(known, llvm::StringRef(kv.first)))
        return llvm::createStringError(where + "unknown field '" + kv.first.str() + "'");
    Job job;
    job.request.id = o->getString("id") ? o->getString("id")->str() : "req-" + std::to_string(jobs.size());
    const llvm::json::Value *p = o->get("prompt");
    if (!p) return llvm::createStringError(where + "request '" + job.request.id + "' has no prompt");
    if (auto s = p->getAsString()) {
      job.text = s->str();
    } else if (const llvm::json::Array *a = p->getAsArray()) {
      for (const llvm::json::Value &v : *a) {
        auto id = v.getAsInteger();
        if (!id || *id < 0 || *id > INT32_MAX)
          return llvm::createStringError(where + "request '" + job.request.id + "': prompt ids are integers >= 0");
        job.request.prompt.push_back(static_cast<TokenId>(*id));
      }
    } else {
      return llvm::createStringError(where + "request '" + job.request.id + "': prompt is a string or a list of token ids");
    }
    job.request.maxTokens = o->getInteger("max_tokens").value_or(maxTokens >= 0 ? int64_t(maxTokens) : 16);
    job.request.sampling = flagSampling(shared);
    SamplingParams &s = job.request.sampling;
    if (auto v = o->getNumber("temperature")) s.temperature = *v;
    if (auto v = o->getNumber("top_p")) s.topP = *v;
    if (auto v = o->getInteger("top_k")) s.topK = static_cast<int32_t>(*v);
    if (auto v = o->getNumber("min_p")) s.minP = *v;
    if (auto v = o->getNumber("repetition_penalty")) s.repetitionPenalty = *v;
    if (auto v = o->getInteger("seed")) s.seed = static_cast<uint64_t>(*v);
    job.arrivalStep = o->getInteger("arrival_step").value_or(0);
    if (job.arrivalStep < 0) return llvm::createStringError(where + "arrival_step must be >= 0");
    job.ignoreEos = o->getBoolean("ignore_eos").value_or(ignoreEos);
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) return llvm::createStringError(path + ": no requests");
  return jobs;
}

const char *finishName(FinishReason r) {
  switch (r) {
  case FinishReason::Stop: return "stop";
  case FinishReason::Length: return "length";
  case FinishReason::Abort: return "abort";
  }
  return "?";
}

}  // namespace

llvm::cl::OptionCategory &generateCategory() { return category(); }

std::vector<llvm::cl::Option *> generateOnlyOptions() {
  return {&promptIds, &maxTokens, &topP, &topK, &minP, &repetitionPenalty, &ignoreEos,
          &requestsPath, &outputPath, &dumpLogitsDir, &timingsPath};
}

std::vector<llvm::cl::Option *> schedulerOptions() { return {&batchTokens, &batchSeqs, &kvBlocks, &noPrefixCaching}; }

llvm::Expected<SchedulerConfig> schedulerConfig(SchedulerConfig config) {
  auto limit = [&](const cl::opt<int64_t> &flag, auto &field, const char *key) -> llvm::Error {
    if (flag.getNumOccurrences() == 0) return llvm::Error::success();  // 0 given is an error, not "the plan's"
    if (flag < 1 || flag > static_cast<int64_t>(field))
      return llvm::createStringError("--" + flag.ArgStr + " " + llvm::Twine(int64_t(flag)) + ": must be in [1, " +
                                     llvm::Twine(static_cast<int64_t>(field)) + "] (the plan's " + key + ")");
    field = static_cast<std::remove_reference_t<decltype(field)>>(int64_t(flag));
    return llvm::Error::success();
  };
  if (llvm::Error e = limit(batchTokens, config.maxBatchTokens, "generate.max_batch_tokens")) return std::move(e);
  if (llvm::Error e = limit(batchSeqs, config.maxBatchSeqs, "generate.max_batch_seqs")) return std::move(e);
  if (llvm::Error e = limit(kvBlocks, config.numBlocks, "KV blocks")) return std::move(e);
  config.prefixCaching = !noPrefixCaching;
  return config;
}

int followMain(StepModel &model, CommContext &comm) {
  if (llvm::Error e = followSteps(model, comm)) {
    llvm::errs() << "error: rank " << comm.rank() << ": " << llvm::toString(std::move(e)) << "\n";
    return 1;
  }
  return 0;
}

int generateMain(const LoadedPlan &plan, Device &device, CommContext &comm, const SharedGenerateOptions &shared) {
  const bool batchMode = !requestsPath.empty();
  if (batchMode && (shared.prompt || !promptIds.empty()))
    return fail("--requests runs the file's prompts; leave out --prompt and --prompt-ids");
  if (!batchMode && shared.prompt.has_value() == !promptIds.empty())
    return fail("generate needs one prompt: --prompt TEXT (with --tokenizer) or --prompt-ids ID,ID,... "
                "(or --requests FILE.jsonl)");
  if (!batchMode && maxTokens < 1) return fail("generate needs --max-tokens N (N >= 1)");
  if (!outputPath.empty() && !batchMode) return fail("--output is for --requests");
  if (!timingsPath.empty() && !batchMode) return fail("--timings is for --requests");

  auto model = PlanModel::create(plan, KernelRegistry::cpu(), device, &comm);
  if (!model) return fail(model.takeError());
  // Tensor parallelism: rank 0 schedules, samples and prints; the others run its steps. The
  // leader exists from here on, so every return below releases the followers.
  if (comm.rank() != 0) return followMain(**model, comm);
  std::optional<LeaderStepModel> leader;
  if (comm.worldSize() > 1) leader.emplace(**model, comm.world());
  StepModel &stepModel = leader ? static_cast<StepModel &>(*leader) : **model;
  auto limited = schedulerConfig((*model)->config());
  if (!limited) return fail(limited.takeError());
  const SchedulerConfig config = *limited;
  auto speculative = setupSpeculative(plan, config, (*model)->programTokens().back(), device, comm);
  if (!speculative) return fail(speculative.takeError());
  auto scheduler = Scheduler::create(config, speculative->config);
  if (!scheduler) return fail(scheduler.takeError());

  std::unique_ptr<Tokenizer> tokenizer;
  const std::string &tokenizerPath = shared.tokenizer;
  if (!tokenizerPath.empty()) {
    auto t = loadTokenizer(tokenizerPath);
    if (!t) return fail(t.takeError());
    tokenizer = std::move(*t);
    if (tokenizer->vocabSize() > config.vocabSize)
      return fail(tokenizerPath + ": a vocabulary of " + llvm::Twine(tokenizer->vocabSize()) +
                  " tokens, more than the model's " + llvm::Twine(config.vocabSize));
  }

  std::vector<Job> jobs;
  if (batchMode) {
    auto read = readRequests(requestsPath, shared);
    if (!read) return fail(read.takeError());
    jobs = std::move(*read);
  } else {
    Job job;
    job.request.id = "prompt";
    job.request.maxTokens = maxTokens;
    job.request.sampling = flagSampling(shared);
    if (shared.prompt) {
      job.text = *shared.prompt;
    } else {
      auto ids = parseIds(promptIds, "--prompt-ids");
      if (!ids) return fail(ids.takeError());
      job.request.prompt = std::move(*ids);
    }
    job.ignoreEos = ignoreEos;
    jobs.push_back(std::move(job));
  }
  // Prompts as ids; stops: the tokenizer's EOS unless ignore_eos.
  for (Job &job : jobs) {
    if (job.text) {
      if (!tokenizer) return fail("request '" + job.request.id + "' has a text prompt: give --tokenizer FILE");
      auto ids = tokenizer->encode(*job.text, /*addBos=*/true);
      if (!ids) return fail(ids.takeError());
      job.request.prompt = std::move(*ids);
    }
    if (tokenizer && !job.ignoreEos && tokenizer->eosId() >= 0) job.request.stopTokenIds.push_back(tokenizer->eosId());
  }

  // Arrival order: by arrival step, then file order.
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return jobs[a].arrivalStep < jobs[b].arrivalStep; });

  std::map<SeqId, size_t> jobOf;
  std::map<std::string, RequestOutput> done;
  std::map<size_t, std::vector<float>> logitRows;
  const bool keepLogits = !dumpLogitsDir.empty();
  // --dump-logits writes DIR/ID.npy: an id must be a file name, checked before any step runs.
  if (keepLogits)
    for (const Job &job : jobs) {
      llvm::StringRef id = job.request.id;
      if (id.empty() || id == "." || id == ".." || id.contains('/') || id.contains('\\'))
        return fail("--dump-logits: request id '" + id + "' is not a file name (DIR/ID.npy); use ids without '/'");
    }
  std::unique_ptr<StreamDetokenizer> stream;
  // The completion continues its prompt (completionStartsSequence, the server's rule too).
  auto completionText = [&](const RequestOutput &out) {
    StreamDetokenizer d(*tokenizer, completionStartsSequence(*tokenizer, out.prompt));
    std::string text;
    for (TokenId t : out.tokens) text += d.push(t);
    return text + d.finish();
  };
  if (!batchMode && tokenizer)
    stream = std::make_unique<StreamDetokenizer>(*tokenizer, completionStartsSequence(*tokenizer, jobs.front().request.prompt));
  const int64_t V = config.vocabSize;
  int64_t generated = 0;
  // --timings: per job, its arrival and the time each of its tokens was sampled (seconds since start).
  std::vector<double> arrivalSeconds(jobs.size(), 0.0);
  // The steps an idle engine had jumped over when each request was added: its output's steps are
  // on the clock of the requests' arrival_step (scheduler steps + jumps). A jump happens only
  // while nothing is unfinished, so one value holds for a request's whole life.
  std::vector<int64_t> jumpedAtArrival(jobs.size(), 0);
  std::vector<std::vector<double>> tokenSeconds(jobs.size());

  std::vector<float> stepLogits;  // --dump-logits: the last step's rows
  auto model2 = [&](const StepBatch &batch, llvm::MutableArrayRef<float> logits) -> llvm::Error {
    if (llvm::Error e = stepModel.step(batch, logits)) return e;
    if (keepLogits) stepLogits.assign(logits.begin(), logits.end());
    return llvm::Error::success();
  };

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  size_t next = 0;
  Scheduler &sched = **scheduler;
  int64_t idleSteps = 0;  // arrival steps an idle engine jumped over
  while (next < order.size() || sched.hasUnfinished()) {
    // Arrivals; an idle engine jumps to the next arrival step, taking every request of that step.
    if (next < order.size() && !sched.hasUnfinished())
      idleSteps = std::max(idleSteps, jobs[order[next]].arrivalStep - sched.numSteps());
    while (next < order.size() && jobs[order[next]].arrivalStep <= sched.numSteps() + idleSteps) {
      Job &job = jobs[order[next]];
      auto seq = sched.addRequest(job.request);
      if (!seq) return fail(seq.takeError());
      jobOf[*seq] = order[next];
      arrivalSeconds[order[next]] = elapsed();
      jumpedAtArrival[order[next]] = idleSteps;
      ++next;
    }
    if (llvm::Error e = sched.step(model2)) return fail(std::move(e));
    // A sampled chunk has 1 + numDrafts logits rows; its j-th new token came from row j.
    const double stepEnd = elapsed();
    size_t row = 0;
    for (const ScheduledChunk &c : sched.lastStep().chunks) {
      if (!c.sampled) continue;
      if (keepLogits) {
        std::vector<float> &rows = logitRows[jobOf[c.seq]];
        rows.insert(rows.end(), stepLogits.begin() + row * V, stepLogits.begin() + (row + c.tokens.size()) * V);
      }
      row += 1 + static_cast<size_t>(c.numDrafts);
      generated += static_cast<int64_t>(c.tokens.size());
      tokenSeconds[jobOf[c.seq]].insert(tokenSeconds[jobOf[c.seq]].end(), c.tokens.size(), stepEnd);
      if (stream) {
        for (TokenId t : c.tokens) llvm::outs() << stream->push(t);
        llvm::outs().flush();
      }
    }
    for (RequestOutput &out : sched.takeFinished()) done[out.id] = std::move(out);
  }
  const double seconds = elapsed();

  if (!batchMode) {
    const RequestOutput &out = done.begin()->second;
    if (stream) {
      llvm::outs() << stream->finish() << "\n";
    } else {
      std::string ids;
      for (TokenId t : out.tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
      llvm::outs() << ids << "\n";
    }
  }
  if (keepLogits) {
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpLogitsDir))
      return fail("--dump-logits " + dumpLogitsDir + ": " + ec.message());
    for (size_t i = 0; i < jobs.size(); ++i) {
      const std::vector<float> &rows = logitRows[i];
      llvm::SmallString<256> path(dumpLogitsDir);
      llvm::sys::path::append(path, jobs[i].request.id + ".npy");
      const int64_t n = static_cast<int64_t>(rows.size()) / V;
      if (llvm::Error e = writeNpy(path, DType::F32, {n, V}, rows.data())) return fail(std::move(e));
    }
  }
  if (batchMode) {
    std::error_code ec;
    std::unique_ptr<llvm::raw_fd_ostream> file;
    if (!outputPath.empty()) {
      file = std::make_unique<llvm::raw_fd_ostream>(outputPath, ec);
      if (ec) return fail("--output " + outputPath + ": " + ec.message());
    }
    llvm::raw_ostream &os = file ? *file : llvm::outs();
    for (size_t i = 0; i < jobs.size(); ++i) {
      const Job &job = jobs[i];
      const RequestOutput &out = done[job.request.id];
      const int64_t jumped = jumpedAtArrival[i];
      llvm::json::Array ids;
      for (TokenId t : out.tokens) ids.push_back(t);
      llvm::json::Object line{{"id", out.id},
                              {"prompt_tokens", static_cast<int64_t>(out.prompt.size())},
                              {"token_ids", std::move(ids)},
                              {"finish_reason", finishName(out.finish)},
                              {"cached_tokens", out.cachedPromptTokens},
                              {"preemptions", out.preemptions},
                              {"arrival_step", out.arrivalStep + jumped},
                              {"first_token_step", out.firstTokenStep < 0 ? out.firstTokenStep : out.firstTokenStep + jumped},
                              {"finish_step", out.finishStep < 0 ? out.finishStep : out.finishStep + jumped}};
      if (tokenizer) line["text"] = completionText(out);
      os << llvm::json::Value(std::move(line)) << "\n";
    }
  }
  if (!timingsPath.empty()) {
    llvm::json::Array requests;
    for (size_t i = 0; i < jobs.size(); ++i) {
      llvm::json::Array times;
      for (double t : tokenSeconds[i]) times.push_back(t);
      requests.push_back(llvm::json::Object{{"id", jobs[i].request.id}, {"arrival_s", arrivalSeconds[i]},
                                            {"token_s", std::move(times)}});
    }
    std::error_code ec;
    llvm::raw_fd_ostream file(timingsPath, ec);
    if (ec) return fail("--timings " + timingsPath + ": " + ec.message());
    file << llvm::json::Value(llvm::json::Object{{"wall_s", seconds}, {"requests", std::move(requests)}}) << "\n";
  }
  llvm::outs().flush(); // the text (and its final newline) before the summary on a shared terminal
  llvm::errs() << "generate: " << jobs.size() << (jobs.size() == 1 ? " request, " : " requests, ") << generated
               << " tokens in " << sched.numSteps() << " steps (" << sched.numPreemptions() << " preemptions), "
               << llvm::format("%.1f", seconds > 0 ? generated / seconds : 0.0) << " tokens/s\n";
  if (speculative->drafter) llvm::errs() << "generate: " << speculativeSummary(*speculative, sched.speculativeStats()) << "\n";
  return 0;
}

}  // namespace colossal::tools

//===- Engine.h - The engine thread, its inbox and the per-request channels -----*- C++ -*-===//
//
// The queue and task layers under the HTTP server (Server.h). One engine thread owns the
// Scheduler: it takes submissions and cancellations from a mutex-guarded inbox between steps,
// runs StepModel::step while any request is unfinished, and turns each choice's sampled tokens
// into text deltas (StreamDetokenizer, stop strings) that it pushes into the request's
// Generation, where the handler thread waits for them.
//
// Stop strings: a choice's text is held back while its end could be the start of a stop string
// (the longest suffix that is a prefix of one); when the text holds a stop string the choice ends
// before it (finish reason stop, the stop string not returned, as OpenAI) and its sequence is
// aborted. A stop token ends the choice too; its text is not returned, the token is counted and
// listed in token_ids.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_ENGINE_H
#define COLOSSAL_RUNTIME_SERVE_ENGINE_H

#include "Metrics.h"

#include "colossal/runtime/serve/OpenAiApi.h"
#include "colossal/runtime/serve/Scheduler.h"
#include "colossal/runtime/serve/Server.h"
#include "colossal/runtime/serve/StreamDetokenizer.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace colossal::runtime::serve {

using Clock = std::chrono::steady_clock;

/// What one choice got in one step (or at its end).
struct ChoiceDelta {
  int32_t index = 0;                   // p * n + c
  std::string text;                    // valid UTF-8
  std::vector<TokenId> tokens;         // the tokens this text comes from
  std::vector<SampledToken> logprobs;  // one per token when logprobs were asked for
  std::optional<FinishReason> finish;  // Stop or Length: the choice's last delta
  int64_t cachedPromptTokens = 0;      // with finish
};

/// One request's channel: the engine writes, the handler thread reads.
class Generation {
public:
  explicit Generation(GenerationRequest request)
      : request_(std::move(request)), arrival_(Clock::now()), open_(request_.choices()) {}
  const GenerationRequest &request() const { return request_; }
  Clock::time_point arrival() const { return arrival_; }

  // The handler's side.
  /// Blocks until the engine took the request (success) or refused it (an ApiError).
  llvm::Error waitAccepted();
  /// Waits at most `timeout` for deltas and appends them to `out`. False once every choice has
  /// finished or the request failed and everything was handed out.
  bool next(std::chrono::milliseconds timeout, std::vector<ChoiceDelta> &out);
  /// Why the request failed (a model error, shutdown), or "".
  std::string failure() const;

  // The engine's side.
  void accept();
  void refuse(llvm::Error error);
  void push(ChoiceDelta delta);
  void fail(std::string why);

private:
  GenerationRequest request_;
  Clock::time_point arrival_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  enum class State { Pending, Accepted, Refused } state_ = State::Pending;
  std::unique_ptr<ApiError> refusal_;
  std::deque<ChoiceDelta> deltas_;
  size_t open_;  // choices not finished
  std::string failure_;
};

class Engine {
public:
  /// `speculative`: the scheduler's speculative decoding (its drafter outlives the engine).
  /// Errors: Scheduler::create's.
  static llvm::Expected<std::unique_ptr<Engine>> create(StepModel &model, const Tokenizer &tokenizer,
                                                        const SpeculativeConfig &speculative = {});
  ~Engine();

  void start();
  /// Fails every open request ("the server is shutting down") and joins the engine thread.
  void stop();

  /// Queues a parsed request; the engine accepts it (Scheduler::addRequest for each choice) or
  /// refuses it (the scheduler's InvalidRequestError as a 400) before its next step.
  std::shared_ptr<Generation> submit(GenerationRequest request);
  /// The client went away: abort every unfinished choice of `g` (their blocks are freed).
  void cancel(const std::shared_ptr<Generation> &g);

  const SchedulerConfig &config() const { return config_; }
  std::string metricsText(const std::string &model) const;
  void countRejected();

private:
  struct Choice {
    std::shared_ptr<Generation> gen;
    int32_t index = 0;
    std::string id;
    SamplingParams sampling;
    StreamDetokenizer detok;
    std::string held;  // text not yet sent (a possible stop-string start)
    int64_t tokens = 0;
    bool ended = false;                     // finished by a stop string, cancelled or failed: awaits its abort
    std::optional<FinishReason> endReason;  // set with a stop-string end: the delta sent at the abort
    Clock::time_point firstToken;
    /// `atSequenceStart`: completionStartsSequence(tokenizer, prompt).
    Choice(const Tokenizer &t, bool atSequenceStart) : detok(t, atSequenceStart) {}
  };
  struct Command {
    std::shared_ptr<Generation> gen;
    bool cancel = false;
  };

  Engine(StepModel &model, const Tokenizer &tokenizer, std::unique_ptr<Scheduler> scheduler);
  void loop();
  void admit(const std::shared_ptr<Generation> &g);
  void cancelChoices(Generation *g);
  void runStep();
  /// One token of `c`, with its logprobs when the choice asked for them (the scheduler's).
  void onToken(Choice &c, TokenId token, const SampledToken *logprobs);
  void drainFinished();
  void failAll(const std::string &why);
  void updateGauges();

  StepModel &model_;
  const Tokenizer &tokenizer_;
  SchedulerConfig config_;
  std::unique_ptr<Scheduler> scheduler_;  // engine thread only
  std::unordered_map<SeqId, Choice> choices_;
  std::unordered_map<Generation *, std::vector<SeqId>> seqsOf_;
  uint64_t nextId_ = 0;

  std::mutex mutex_;  // inbox_, stopping_
  std::condition_variable cv_;
  std::deque<Command> inbox_;
  bool stopping_ = false;
  std::thread thread_;

  mutable std::mutex metricsMutex_;
  ServingMetrics metrics_;
};

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_ENGINE_H

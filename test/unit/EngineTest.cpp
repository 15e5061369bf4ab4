//===- EngineTest.cpp - The server's engine: deltas, stop strings, failures, cancels --------===//
//
// The engine thread (runtime/serve/Engine.h) over a scripted model on a byte tokenizer: the
// greedy token at position p is script[p % script.size()], so a request's text is known. Checked:
// text deltas add up to the text; a stop string split across tokens ends the text before it and
// no delta ever shows its first bytes; a near-miss is held back and then released; a stop token's
// text is not returned while the token is counted; a model error fails the requests of its batch
// and the engine serves the next; a cancelled request frees its blocks; n = 2 gives two choices;
// the scheduler's refusal comes back as a 400.
//
//===----------------------------------------------------------------------------------------===//
#include "ByteTokenizer.h"
#include "TestUtil.h"

#include "serve/Engine.h"

#include <atomic>
#include <thread>

using namespace colossal::runtime::testing;
using namespace colossal::runtime::serve;

namespace {

/// Greedy output at position p: script[p % size]; fails while `failing` is set.
class ScriptedModel : public StepModel {
public:
  explicit ScriptedModel(std::vector<TokenId> script) : script_(std::move(script)) {
    config_.maxSeqLen = 128;
    config_.blockSize = 4;
    config_.numBlocks = 4 * 32;
    config_.maxBatchSeqs = 8;
    config_.maxBatchTokens = 16;
    config_.vocabSize = 259;
  }
  const SchedulerConfig &config() const override { return config_; }
  llvm::Error step(const StepBatch &b, llvm::MutableArrayRef<float> logits) override {
    if (failing) return llvm::createStringError(llvm::inconvertibleErrorCode(), "scripted failure");
    if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::fill(logits.begin(), logits.end(), 0.0f);
    for (size_t j = 0; j < b.logitsIndices.size(); ++j) {
      const int32_t p = b.positions[b.logitsIndices[j]];
      logits[j * config_.vocabSize + script_[p % script_.size()]] = 10.0f;
    }
    return llvm::Error::success();
  }
  std::atomic<bool> failing{false}, slow{false};

private:
  SchedulerConfig config_;
  std::vector<TokenId> script_;
};

std::vector<TokenId> bytes(llvm::StringRef s) {
  std::vector<TokenId> ids;
  for (unsigned char c : s) ids.push_back(c + 3);
  return ids;
}

struct Result {
  std::vector<std::string> texts;  // per choice: each delta's text
  std::vector<std::vector<TokenId>> tokens;
  std::vector<std::optional<FinishReason>> finish;
  std::string failure;
  std::string text(size_t i = 0) const {
    std::string s;
    for (const std::string &t : llvm::ArrayRef<std::string>(texts).drop_front(i).take_front(1)) s += t;
    return s;
  }
};

/// Runs one request to its end; `deltas` collects every delta's text of choice 0.
Result run(Engine &e, GenerationRequest r, std::vector<std::string> *deltas = nullptr) {
  auto g = e.submit(std::move(r));
  Result out;
  if (llvm::Error err = g->waitAccepted()) {
    out.failure = llvm::toString(std::move(err));
    return out;
  }
  const size_t n = g->request().choices();
  out.texts.resize(n);
  out.tokens.resize(n);
  out.finish.resize(n);
  std::vector<ChoiceDelta> ds;
  for (bool more = true; more;) {
    ds.clear();
    more = g->next(std::chrono::milliseconds(100), ds);
    for (ChoiceDelta &d : ds) {
      if (deltas && d.index == 0 && !d.text.empty()) deltas->push_back(d.text);
      out.texts[d.index] += d.text;
      out.tokens[d.index].insert(out.tokens[d.index].end(), d.tokens.begin(), d.tokens.end());
      if (d.finish) out.finish[d.index] = d.finish;
    }
  }
  out.failure = g->failure();
  return out;
}

GenerationRequest request(std::vector<TokenId> prompt, int64_t maxTokens) {
  GenerationRequest r;
  r.prompts = {std::move(prompt)};
  r.maxTokens = maxTokens;
  r.sampling.temperature = 0;
  r.stopTokenIds = {2};
  return r;
}

double metric(const std::string &text, const std::string &name) {
  const size_t at = text.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(text.find("} ", at) + 2));
}

TEST(Engine, StopStringSplitAcrossTokensEndsTheTextBeforeIt) {
  // Prompt "x" (one token, position 0): the output from position 0 on is the script.
  ScriptedModel model(bytes("abcSTOPdefghijklmnopqrstuvwxyz"));
  ByteTokenizer tok;
  auto engine = llvm::cantFail(Engine::create(model, tok));
  engine->start();

  Result plain = run(*engine, request(bytes("x"), 12));
  EXPECT_EQ(plain.text(), "abcSTOPdefgh");
  EXPECT_EQ(plain.finish[0], FinishReason::Length);
  EXPECT_EQ(plain.tokens[0].size(), 12u);

  GenerationRequest r = request(bytes("x"), 20);
  r.stop = {"zz", "STOP"};
  std::vector<std::string> deltas;
  Result stopped = run(*engine, r, &deltas);
  EXPECT_EQ(stopped.text(), "abc");
  EXPECT_EQ(stopped.finish[0], FinishReason::Stop);
  EXPECT_EQ(stopped.tokens[0], bytes("abcSTOP"));  // up to the token that completed the stop string
  for (const std::string &d : deltas)
    EXPECT_EQ(d.find('S'), std::string::npos) << "a delta showed the stop string: " << d;

  // A near miss: "STX" is held back while it could start, then released.
  r.stop = {"STX"};
  deltas.clear();
  Result miss = run(*engine, r, &deltas);
  EXPECT_EQ(miss.text(), "abcSTOPdefghijklmnop");
  EXPECT_EQ(miss.finish[0], FinishReason::Length);
  ASSERT_GE(deltas.size(), 2u);
  bool released = false;
  for (const std::string &d : deltas) released |= d == "STO";  // "S", "ST" waited for the "O"
  EXPECT_TRUE(released);
  engine->stop();
}

TEST(Engine, StopTokenEndsWithoutItsTextAndCountsIt) {
  std::vector<TokenId> script = bytes("hi there");
  script.push_back(2);  // EOS after "hi there"
  ScriptedModel model(script);
  ByteTokenizer tok;
  auto engine = llvm::cantFail(Engine::create(model, tok));
  engine->start();
  Result r = run(*engine, request(bytes("x"), 30));
  EXPECT_EQ(r.text(), "hi there");
  EXPECT_EQ(r.finish[0], FinishReason::Stop);
  EXPECT_EQ(r.tokens[0].size(), 9u);
  EXPECT_EQ(r.tokens[0].back(), 2);
  // A stop string past the end: the whole text.
  GenerationRequest q = request(bytes("x"), 30);
  q.stop = {"here!"};
  EXPECT_EQ(run(*engine, q).text(), "hi there");
}

TEST(Engine, ModelErrorFailsTheBatchAndTheEngineServesOn) {
  ScriptedModel model(bytes("abcdefgh"));
  ByteTokenizer tok;
  auto engine = llvm::cantFail(Engine::create(model, tok));
  engine->start();
  model.failing = true;
  Result failed = run(*engine, request(bytes("x"), 5));
  EXPECT_EQ(failed.failure, "the model failed: scripted failure");
  model.failing = false;
  Result ok = run(*engine, request(bytes("x"), 5));
  EXPECT_EQ(ok.failure, "");
  EXPECT_EQ(ok.text(), "abcde");
  const std::string m = engine->metricsText("toy");
  EXPECT_EQ(metric(m, "colossal_model_errors_total"), 1);
  EXPECT_EQ(metric(m, "colossal_request_failed_total"), 1);
}

TEST(Engine, CancelFreesTheBlocksAndRefusalsAre400) {
  ScriptedModel model(bytes("abcdefgh"));
  ByteTokenizer tok;
  auto engine = llvm::cantFail(Engine::create(model, tok));
  engine->start();
  model.slow = true;  // 2 ms a step: 120 tokens take 240 ms
  GenerationRequest r = request(bytes("x"), 120);
  auto g = engine->submit(r);
  ASSERT_FALSE(static_cast<bool>(g->waitAccepted()));
  std::vector<ChoiceDelta> ds;
  while (ds.empty()) g->next(std::chrono::milliseconds(100), ds);
  engine->cancel(g);
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = engine->metricsText("toy");
    if (metric(m, "colossal_request_aborted_total") == 1 && metric(m, "colossal_requests_running") == 0 &&
        metric(m, "colossal_kv_cache_usage_ratio") == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(metric(m, "colossal_requests_running"), 0);
  EXPECT_EQ(metric(m, "colossal_kv_cache_usage_ratio"), 0);
  EXPECT_EQ(metric(m, "colossal_request_aborted_total"), 1);
  EXPECT_LT(metric(m, "colossal_generation_tokens_total"), 120);

  // The scheduler's own checks come back as a 400 naming the field.
  GenerationRequest bad = request(bytes("x"), 500);  // above max_seq_len 128
  Result refused = run(*engine, bad);
  EXPECT_NE(refused.failure.find("max_tokens 500 = 501 is above max_seq_len 128"), std::string::npos)
      << refused.failure;
}

TEST(Engine, NChoicesAreIndependentSequences) {
  ScriptedModel model(bytes("abcdefgh"));
  ByteTokenizer tok;
  auto engine = llvm::cantFail(Engine::create(model, tok));
  engine->start();
  GenerationRequest r = request(bytes("x"), 4);
  r.n = 2;
  r.prompts.push_back(bytes("yy"));  // a batch of two prompts: choices 0, 1 and 2, 3
  Result out = run(*engine, r);
  ASSERT_EQ(out.texts.size(), 4u);
  EXPECT_EQ(out.texts[0], "abcd");
  EXPECT_EQ(out.texts[1], "abcd");
  EXPECT_EQ(out.texts[2], "bcde");
  EXPECT_EQ(out.texts[3], "bcde");
  for (const auto &f : out.finish) EXPECT_EQ(f, FinishReason::Length);
}

}  // namespace

namespace {

TEST(Engine, SpeculativeDecodingGivesTheSameTextLogprobsAndStopsAndCountsDrafts) {
  // A repeating script: the n-gram drafter's lookups are mostly right.
  ScriptedModel model(bytes("the cat sat on the mat; the cat sat on the hat; the dog"));
  ByteTokenizer tok;
  auto plainEngine = llvm::cantFail(Engine::create(model, tok));
  auto ngram = llvm::cantFail(NgramDrafter::create(1, 3));
  auto specEngine = llvm::cantFail(Engine::create(model, tok, {4, ngram.get()}));
  plainEngine->start();
  specEngine->start();
  std::vector<GenerationRequest> requests;
  requests.push_back(request(bytes("x"), 60));
  GenerationRequest stopped = request(bytes("x"), 60);
  stopped.stop = {"hat"};  // inside an accepted run of drafts
  requests.push_back(stopped);
  GenerationRequest withLogprobs = request(bytes("x"), 40);
  withLogprobs.sampling.logprobs = 2;
  requests.push_back(withLogprobs);
  for (const GenerationRequest &r : requests) {
    const Result want = run(*plainEngine, r), got = run(*specEngine, r);
    EXPECT_EQ(got.text(), want.text());
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.finish, want.finish);
  }
  EXPECT_EQ(run(*specEngine, requests[1]).text(), "the cat sat on the mat; the cat sat on the ");
  const std::string metrics = specEngine->metricsText("toy");
  const double drafts = metric(metrics, "colossal_spec_decode_draft_tokens_total");
  const double accepted = metric(metrics, "colossal_spec_decode_accepted_tokens_total");
  EXPECT_GT(drafts, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_LE(accepted, drafts);
  EXPECT_GT(metric(metrics, "colossal_spec_decode_num_drafts_total"), 0);
  EXPECT_EQ(metric(plainEngine->metricsText("toy"), "colossal_spec_decode_draft_tokens_total"), -1);  // not shown
  // The logprobs the engine streams with speculation are the non-speculative ones.
  auto logprobsOf = [&](Engine &e) {
    auto g = e.submit(requests[2]);
    EXPECT_FALSE(static_cast<bool>(g->waitAccepted()));
    std::vector<ChoiceDelta> ds;
    while (g->next(std::chrono::milliseconds(100), ds)) {
    }
    std::vector<std::pair<TokenId, double>> out;
    for (const ChoiceDelta &d : ds)
      for (const SampledToken &t : d.logprobs) {
        out.push_back({t.id, t.logprob});
        for (const TokenLogprob &top : t.top) out.push_back({top.id, top.logprob});
      }
    return out;
  };
  const auto plainLogprobs = logprobsOf(*plainEngine), specLogprobs = logprobsOf(*specEngine);
  EXPECT_EQ(plainLogprobs.size(), 40u * 3);
  EXPECT_EQ(specLogprobs, plainLogprobs);
  plainEngine->stop();
  specEngine->stop();
}

}  // namespace

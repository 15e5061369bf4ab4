//===- Server.cpp - HTTP routes, JSON answers and server-sent events over the engine --------===//
#include "colossal/runtime/serve/Server.h"

#include "Engine.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>

namespace colossal::runtime::serve {

using nlohmann::json;

namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char *finishName(FinishReason r) { return r == FinishReason::Stop ? "stop" : "length"; }

/// SIGINT / SIGTERM seen by Server::run (a flag: the handler may do nothing else).
volatile std::sig_atomic_t gSignal = 0;
extern "C" void onSignal(int sig) { gSignal = sig; }

/// How often a waiting handler looks whether its client is still there.
constexpr std::chrono::milliseconds kPoll{100};

/// What a response has gathered for one choice.
struct ChoiceState {
  std::string text;
  std::vector<TokenId> tokens;
  std::vector<SampledToken> logprobs;
  std::optional<FinishReason> finish;
  int64_t cachedPromptTokens = 0;
  int64_t textOffset = 0;  // completions logprobs' text_offset of the next token
};

}  // namespace

class Server::Impl {
public:
  Impl(StepModel &model, const Tokenizer &tokenizer, ServerOptions options, std::optional<ChatTemplate> chat,
       std::unique_ptr<Engine> engine)
      : model_(model), tokenizer_(tokenizer), options_(std::move(options)), chat_(std::move(chat)),
        engine_(std::move(engine)), created_(std::time(nullptr)) {
    ctx_.tokenizer = &tokenizer_;
    ctx_.chatTemplate = chat_ ? &*chat_ : nullptr;
    ctx_.modelName = options_.modelName;
    ctx_.maxSeqLen = engine_->config().maxSeqLen;
    ctx_.vocabSize = engine_->config().vocabSize;
    routes();
  }
  ~Impl() { stop(); }

  llvm::Error start();
  void stop();
  void waitForStop();
  void requestStop() {
    std::lock_guard<std::mutex> lk(stopMutex_);
    stopRequested_ = true;
    stopCv_.notify_all();
  }
  int port() const { return port_; }

private:
  struct Response;
  void routes();
  void generate(ApiKind kind, const httplib::Request &req, httplib::Response &res);
  void error(httplib::Response &res, llvm::Error e);
  json logprobsJson(ApiKind kind, ChoiceState &c, llvm::ArrayRef<SampledToken> lps) const;
  std::string tokenText(TokenId id) const;

  StepModel &model_;
  const Tokenizer &tokenizer_;
  ServerOptions options_;
  std::optional<ChatTemplate> chat_;
  std::unique_ptr<Engine> engine_;
  ApiContext ctx_;
  httplib::Server http_;
  std::thread listener_;
  int port_ = -1;
  std::time_t created_;
  std::atomic<uint64_t> nextId_{0};
  std::mutex stopMutex_, shutdownMutex_;
  std::condition_variable stopCv_;
  bool stopRequested_ = false, stopped_ = false;
};

/// One response in flight: its request's generation and what the answer has gathered.
struct Server::Impl::Response {
  Impl *server;
  std::shared_ptr<Generation> gen;
  ApiKind kind;
  std::string id;
  std::time_t created;
  std::vector<ChoiceState> choices;
  bool rolesSent = false;
  bool complete = false;  // the answer was written to its end

  /// Folds `deltas` into `choices`; returns the choices they touched, in order of first delta.
  std::vector<std::pair<int32_t, ChoiceState>> fold(std::vector<ChoiceDelta> &deltas) {
    std::vector<std::pair<int32_t, ChoiceState>> touched;
    for (ChoiceDelta &d : deltas) {
      ChoiceState &all = choices[d.index];
      auto it = std::find_if(touched.begin(), touched.end(), [&](auto &p) { return p.first == d.index; });
      if (it == touched.end()) {
        touched.push_back({d.index, ChoiceState()});
        it = touched.end() - 1;
        it->second.textOffset = static_cast<int64_t>(all.text.size());
      }
      ChoiceState &part = it->second;
      for (ChoiceState *s : {&all, &part}) {
        s->text += d.text;
        s->tokens.insert(s->tokens.end(), d.tokens.begin(), d.tokens.end());
        s->logprobs.insert(s->logprobs.end(), d.logprobs.begin(), d.logprobs.end());
        if (d.finish) {
          s->finish = d.finish;
          s->cachedPromptTokens = d.cachedPromptTokens;
        }
      }
    }
    return touched;
  }

  json usage() const {
    const GenerationRequest &r = gen->request();
    int64_t prompt = 0, completion = 0, cached = 0;
    for (size_t p = 0; p < r.prompts.size(); ++p) {
      prompt += static_cast<int64_t>(r.prompts[p].size());
      cached += choices[p * r.n].cachedPromptTokens;
    }
    for (const ChoiceState &c : choices) completion += static_cast<int64_t>(c.tokens.size());
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  json envelope(bool chunk) const {
    const bool chat = kind == ApiKind::ChatCompletions;
    return {{"id", id},
            {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
            {"created", created},
            {"model", server->options_.modelName}};
  }

  /// One choice of an answer (`chunk`: a streamed delta).
  json choiceJson(int32_t index, ChoiceState &c, bool chunk) const {
    const GenerationRequest &r = gen->request();
    json j = {{"index", index}};
    const bool chat = kind == ApiKind::ChatCompletions;
    if (!chat)
      j["text"] = c.text;
    else if (!chunk)
      j["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      j["delta"] = c.text.empty() ? json::object() : json{{"content", c.text}};
    j["logprobs"] = r.sampling.logprobs >= 0 ? server->logprobsJson(kind, c, c.logprobs) : json(nullptr);
    j["finish_reason"] = c.finish ? json(finishName(*c.finish)) : json(nullptr);
    if (r.returnTokenIds) j["token_ids"] = c.tokens;
    return j;
  }

  std::string whole() {
    json j = envelope(false);
    j["choices"] = json::array();
    for (size_t i = 0; i < choices.size(); ++i)
      j["choices"].push_back(choiceJson(static_cast<int32_t>(i), choices[i], false));
    j["usage"] = usage();
    return dump(j);
  }

  static std::string event(const json &j) { return "data: " + dump(j) + "\n\n"; }

  /// The server-sent events for `touched` (chat: a role delta per choice first).
  std::string events(std::vector<std::pair<int32_t, ChoiceState>> &touched) {
    std::string out;
    if (kind == ApiKind::ChatCompletions && !rolesSent) {
      json j = envelope(true);
      j["choices"] = json::array();
      for (size_t i = 0; i < choices.size(); ++i)
        j["choices"].push_back({{"index", i},
                                {"delta", {{"role", "assistant"}, {"content", ""}}},
                                {"logprobs", nullptr},
                                {"finish_reason", nullptr}});
      out += event(j);
      rolesSent = true;
    }
    for (auto &[index, part] : touched) {
      json j = envelope(true);
      j["choices"] = json::array({choiceJson(index, part, true)});
      out += event(j);
    }
    return out;
  }

  /// The streamed answer's content provider: waits up to kPoll for deltas and writes them as
  /// events; at the end an error event (a failure) or the usage chunk (include_usage), then
  /// `data: [DONE]`. False (the client is gone) cancels through the releaser.
  bool writeEvents(httplib::DataSink &sink) {
    std::vector<ChoiceDelta> deltas;
    const bool more = gen->next(kPoll, deltas);
    auto touched = fold(deltas);
    std::string out = events(touched);
    if (!more) {
      const std::string failure = gen->failure();
      if (!failure.empty()) {
        out += event(json::parse(ApiError(500, "server_error", "", "server_error", failure).body()));
      } else if (gen->request().includeUsage) {
        json j = envelope(true);
        j["choices"] = json::array();
        j["usage"] = usage();
        out += event(j);
      }
      out += "data: [DONE]\n\n";
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) return false;
    if (more) return out.empty() ? sink.is_writable() : true;
    complete = true;
    sink.done();
    return true;
  }

  /// The non-streamed answer's content provider: gathers deltas until the end, then writes the
  /// whole object. The status line is out already, so a failure after acceptance is told in the
  /// body (an error object).
  bool writeWhole(httplib::DataSink &sink) {
    std::vector<ChoiceDelta> deltas;
    const bool more = gen->next(kPoll, deltas);
    fold(deltas);
    if (more) return sink.is_writable();
    const std::string failure = gen->failure();
    const std::string body =
        failure.empty() ? whole() : ApiError(500, "server_error", "", "server_error", failure).body();
    if (!sink.write(body.data(), body.size())) return false;
    complete = true;
    sink.done();
    return true;
  }
};

std::string Server::Impl::tokenText(TokenId id) const {
  std::string s;
  tokenizer_.appendTokenBytes(id, /*atStart=*/false, s);
  return s;
}

json Server::Impl::logprobsJson(ApiKind kind, ChoiceState &c, llvm::ArrayRef<SampledToken> lps) const {
  if (kind == ApiKind::ChatCompletions) {
    auto entry = [&](TokenId id, double lp) {
      const std::string s = tokenText(id);
      json bytes = json::array();
      for (char b : s) bytes.push_back(static_cast<uint8_t>(b));
      return json{{"token", s}, {"logprob", lp}, {"bytes", bytes}};
    };
    json content = json::array();
    for (const SampledToken &t : lps) {
      json e = entry(t.id, t.logprob);
      e["top_logprobs"] = json::array();
      for (const TokenLogprob &alt : t.top) e["top_logprobs"].push_back(entry(alt.id, alt.logprob));
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  json tokens = json::array(), values = json::array(), top = json::array(), offsets = json::array();
  int64_t offset = c.textOffset;
  for (const SampledToken &t : lps) {
    const std::string s = tokenText(t.id);
    tokens.push_back(s);
    values.push_back(t.logprob);
    json alts = json::object();
    for (const TokenLogprob &alt : t.top) alts[tokenText(alt.id)] = alt.logprob;
    top.push_back(t.top.empty() ? json(nullptr) : alts);
    offsets.push_back(offset);
    offset += static_cast<int64_t>(s.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", top}, {"text_offset", offsets}};
}

void Server::Impl::error(httplib::Response &res, llvm::Error e) {
  llvm::handleAllErrors(
      std::move(e),
      [&](const ApiError &a) {
        res.status = a.status;
        res.set_content(a.body(), "application/json");
      },
      [&](const llvm::ErrorInfoBase &other) {
        ApiError a(500, "server_error", "", "server_error", other.message());
        res.status = 500;
        res.set_content(a.body(), "application/json");
      });
}

void Server::Impl::generate(ApiKind kind, const httplib::Request &req, httplib::Response &res) {
  auto parsed = parseGenerationRequest(kind, req.body, ctx_);
  if (!parsed) {
    engine_->countRejected();
    return error(res, parsed.takeError());
  }
  const bool stream = parsed->stream;
  auto gen = engine_->submit(std::move(*parsed));
  if (llvm::Error e = gen->waitAccepted()) return error(res, std::move(e));

  auto r = std::make_shared<Response>();
  r->server = this;
  r->gen = gen;
  r->kind = kind;
  char id[32];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(nextId_++ ^ (uint64_t(created_) << 24)));
  r->id = (kind == ApiKind::Completions ? "cmpl-" : "chatcmpl-") + std::string(id);
  r->created = std::time(nullptr);
  r->choices.resize(gen->request().choices());

  // Both kinds of answer are chunked so that a handler waiting for tokens notices a client that
  // went away (DataSink::is_writable) and cancels its request; the releaser cancels one that
  // ends any other way before its answer was complete.
  auto releaser = [this, r](bool) {
    if (!r->complete) engine_->cancel(r->gen);
  };
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [r](size_t, httplib::DataSink &sink) { return r->writeEvents(sink); }, releaser);
  } else {
    res.set_chunked_content_provider(
        "application/json", [r](size_t, httplib::DataSink &sink) { return r->writeWhole(sink); }, releaser);
  }
}

void Server::Impl::routes() {
  http_.new_task_queue = [n = std::max(options_.httpThreads, 1)] { return new httplib::ThreadPool(n); };
  // Streamed chunks are small writes: without TCP_NODELAY, Nagle's algorithm holds each behind the
  // client's delayed ACK (~40 ms a chunk).
  http_.set_tcp_nodelay(true);
  // httplib's default also sets SO_REUSEPORT, with which a second server on the same port would
  // share it silently instead of failing to bind: SO_REUSEADDR only (a restart need not wait out
  // TIME_WAIT).
  http_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http_.Post("/v1/completions",
             [this](const httplib::Request &q, httplib::Response &s) { generate(ApiKind::Completions, q, s); });
  http_.Post("/v1/chat/completions",
             [this](const httplib::Request &q, httplib::Response &s) { generate(ApiKind::ChatCompletions, q, s); });
  auto modelJson = [this] {
    return json{{"id", options_.modelName},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "colossal"},
                {"max_model_len", engine_->config().maxSeqLen}};
  };
  http_.Get("/v1/models", [modelJson](const httplib::Request &, httplib::Response &s) {
    s.set_content(dump({{"object", "list"}, {"data", json::array({modelJson()})}}), "application/json");
  });
  http_.Get(R"(/v1/models/(.+))", [this, modelJson](const httplib::Request &q, httplib::Response &s) {
    if (q.matches[1] != options_.modelName)
      return error(s, llvm::make_error<ApiError>(404, "invalid_request_error", "model", "model_not_found",
                                                 "the model '" + q.matches[1].str() + "' does not exist"));
    s.set_content(dump(modelJson()), "application/json");
  });
  http_.Get("/health", [](const httplib::Request &, httplib::Response &s) {
    s.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http_.Get("/metrics", [this](const httplib::Request &, httplib::Response &s) {
    s.set_content(engine_->metricsText(options_.modelName), "text/plain; version=0.0.4; charset=utf-8");
  });
  // A known path with the wrong method: 405 with an Allow header (RFC 9110 §15.5.6), not "no
  // route", so a client that GETs /v1/completions learns what it should send.
  auto wrongMethod = [this](const char *allow) {
    return [this, allow](const httplib::Request &q, httplib::Response &s) {
      s.set_header("Allow", allow);
      error(s, llvm::make_error<ApiError>(405, "invalid_request_error", "", "method_not_allowed",
                                          q.method + " is not allowed on " + q.path + " (use " + allow + ")"));
    };
  };
  for (const char *path : {"/v1/completions", "/v1/chat/completions"}) {
    http_.Get(path, wrongMethod("POST"));
    http_.Put(path, wrongMethod("POST"));
    http_.Patch(path, wrongMethod("POST"));
    http_.Delete(path, wrongMethod("POST"));
  }
  for (const char *path : {"/v1/models", R"(/v1/models/(.+))", "/health", "/metrics"}) {
    http_.Post(path, wrongMethod("GET"));
    http_.Put(path, wrongMethod("GET"));
    http_.Patch(path, wrongMethod("GET"));
    http_.Delete(path, wrongMethod("GET"));
  }
  // Statuses without a body of ours (an unknown path, a wrong method) get an OpenAI error too.
  http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request &q, httplib::Response &s) {
    if (!s.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError a(s.status, s.status >= 500 ? "server_error" : "invalid_request_error", "",
               s.status == 404 ? "not_found" : "", "no route " + q.method + " " + q.path);
    s.set_content(a.body(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_.set_exception_handler([](const httplib::Request &, httplib::Response &s, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception &e) {
      what = e.what();
    } catch (...) {}
    s.status = 500;
    s.set_content(ApiError(500, "server_error", "", "server_error", what).body(), "application/json");
  });
  if (!options_.quiet)
    http_.set_logger([](const httplib::Request &q, const httplib::Response &s) {
      std::fprintf(stderr, "serve: %s %s %d\n", q.method.c_str(), q.path.c_str(), s.status);
    });
}

llvm::Error Server::Impl::start() {
  // A client that goes away mid-answer must not kill the server with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  if (options_.port == 0)
    port_ = http_.bind_to_any_port(options_.host);
  else
    port_ = http_.bind_to_port(options_.host, options_.port) ? options_.port : -1;
  if (port_ < 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot listen on %s:%d (in use, or not an address here)", options_.host.c_str(),
                                   options_.port);
  engine_->start();
  listener_ = std::thread([this] { http_.listen_after_bind(); });
  // Until the listener runs, httplib's stop() would not reach it (and joining it would hang).
  while (!http_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("listening on http://%s:%d\n", options_.host.c_str(), port_);
  std::fflush(stdout);
  return llvm::Error::success();
}

void Server::Impl::waitForStop() {
  std::unique_lock<std::mutex> lk(stopMutex_);
  while (!stopRequested_ && !gSignal) stopCv_.wait_for(lk, kPoll);
}

void Server::Impl::stop() {
  // A second caller (run() woken by another thread's stop()) waits here until the first is done.
  std::lock_guard<std::mutex> shutdown(shutdownMutex_);
  {
    std::lock_guard<std::mutex> lk(stopMutex_);
    if (stopped_) return;
    stopped_ = stopRequested_ = true;
    stopCv_.notify_all();
  }
  // The listener first: open answers see is_shutting_down and end (their releasers cancel);
  // then the engine, which fails whatever is left.
  http_.stop();
  if (listener_.joinable()) listener_.join();
  engine_->stop();
}

//===----------------------------------------------------------------------------------------===//

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

llvm::Expected<std::unique_ptr<Server>> Server::create(StepModel &model, const Tokenizer &tokenizer,
                                                       ServerOptions options) {
  if (options.modelName.empty()) options.modelName = "colossal";
  std::optional<ChatTemplate> chat;
  if (!options.chatTemplate.empty()) {
    auto t = ChatTemplate::load(options.chatTemplate);
    if (!t) return t.takeError();
    chat = std::move(*t);
  }
  if (tokenizer.vocabSize() > model.config().vocabSize)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the tokenizer has %d tokens but the model's vocabulary is %d",
                                   tokenizer.vocabSize(), model.config().vocabSize);
  auto engine = Engine::create(model, tokenizer, options.speculative);
  if (!engine) return engine.takeError();
  return std::unique_ptr<Server>(
      new Server(std::make_unique<Impl>(model, tokenizer, std::move(options), std::move(chat), std::move(*engine))));
}

llvm::Error Server::start() { return impl_->start(); }

llvm::Error Server::run() {
  if (llvm::Error e = impl_->start()) return e;
  gSignal = 0;
  auto oldInt = std::signal(SIGINT, onSignal), oldTerm = std::signal(SIGTERM, onSignal);
  impl_->waitForStop();
  impl_->stop();
  std::signal(SIGINT, oldInt);
  std::signal(SIGTERM, oldTerm);
  return llvm::Error::success();
}

void Server::stop() { impl_->stop(); }
int Server::port() const { return impl_->port(); }

}  // namespace colossal::runtime::serve

//===- Server.h - The OpenAI-compatible HTTP server over the serving engine ------*- C++ -*-===//
//
// `colossal-run M.cplan serve` (docs/serving.md "Server"). Three layers, as llama.cpp's server
// splits http / queue / task:
//
//   HTTP      cpp-httplib handler threads parse and validate a request (OpenAiApi.h), submit it,
//             and write the answer: one JSON body, or server-sent events ending in `data: [DONE]`;
//   queue     a thread-safe inbox of submissions and cancellations to the engine, and one channel
//             per request back to its handler (runtime/serve/Engine.h);
//   engine    one thread owns the Scheduler and calls StepModel::step while any request is
//             unfinished; it detokenizes each choice's tokens (StreamDetokenizer), finds stop
//             strings, and pushes text deltas into the channels.
//
// A client that disconnects has its request aborted within ~0.1 s (its KV blocks freed).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_SERVER_H
#define COLOSSAL_RUNTIME_SERVE_SERVER_H

#include "colossal/runtime/serve/Scheduler.h"
#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace colossal::runtime::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;           // 0: a free port, chosen by the system (Server::port() says which)
  std::string modelName;     // the `model` requests name and /v1/models lists; empty: "colossal"
  std::string chatTemplate;  // a chat template file (docs/serving.md "Chat templates"); empty: the default
  int httpThreads = 256;     // requests served at once: each open stream or idle keep-alive connection holds one thread
  bool quiet = false;        // no per-request log lines on stderr
  SpeculativeConfig speculative;  // speculative decoding (Speculative.h); its drafter outlives the server
};

/// Serves `model` with `tokenizer` (both outlive the server) until stop(), SIGINT or SIGTERM.
class Server {
public:
  /// Errors: the model's config refused by Scheduler::create (with its numbers), a chat template
  /// that does not parse (file and line), a tokenizer whose vocabulary exceeds the model's.
  static llvm::Expected<std::unique_ptr<Server>> create(StepModel &model, const Tokenizer &tokenizer,
                                                        ServerOptions options);
  ~Server();

  /// Binds host:port and serves on background threads; returns once listening, having printed
  /// "listening on http://HOST:PORT" (the bound port) to stdout. Errors: the address cannot be bound.
  llvm::Error start();
  /// start(), then blocks until stop() (from any thread), SIGINT or SIGTERM; then stops.
  llvm::Error run();
  /// Stops accepting, fails requests still running (their streams end), joins the threads.
  /// Thread-safe and idempotent.
  void stop();
  /// The bound port (after start).
  int port() const;

  class Impl;

private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_SERVER_H

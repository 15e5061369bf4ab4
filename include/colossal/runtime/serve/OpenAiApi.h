//===- OpenAiApi.h - OpenAI completion requests: parsing and validation ----------*- C++ -*-===//
//
// The request side of /v1/completions and /v1/chat/completions (docs/serving.md "Server"): a JSON
// body becomes a GenerationRequest of token ids and sampling parameters, or an ApiError, the
// HTTP status and OpenAI error object the server answers with. Pure functions of the body and
// the serving context, so that they are tested without a server.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_OPENAIAPI_H
#define COLOSSAL_RUNTIME_SERVE_OPENAIAPI_H

#include "colossal/runtime/serve/ChatTemplate.h"
#include "colossal/runtime/serve/Sampling.h"
#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace colossal::runtime::serve {

enum class ApiKind { Completions, ChatCompletions };

/// A request answered with an error: HTTP `status` and the body
/// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
class ApiError : public llvm::ErrorInfo<ApiError> {
public:
  static char ID;
  ApiError(int status, std::string type, std::string param, std::string code, std::string message)
      : status(status), type(std::move(type)), param(std::move(param)), code(std::move(code)),
        message(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override { os << message; }
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }
  /// The JSON body.
  std::string body() const;

  int status;
  std::string type;   // invalid_request_error (4xx), server_error (5xx)
  std::string param;  // the request field at fault
  std::string code;   // invalid_json, invalid_type, invalid_value, context_length_exceeded,
                      // unsupported_parameter, model_not_found, not_found, server_error
  std::string message;
};

/// A 400 invalid_request_error.
llvm::Error badRequest(llvm::StringRef param, llvm::StringRef code, const llvm::Twine &message);

/// What the parser needs to know of the server.
struct ApiContext {
  const Tokenizer *tokenizer = nullptr;
  const ChatTemplate *chatTemplate = nullptr;  // chat; null: ChatTemplate::defaultTemplate()
  std::string modelName;
  int64_t maxSeqLen = 0;     // prompt + max_tokens of one choice
  int32_t vocabSize = 0;     // the model's: prompt ids must be below it
  int32_t maxN = 64;         // the most choices per prompt
  int32_t maxChoices = 256;  // the most choices (prompts × n) per request
};

/// One request, prompts as token ids. Choice c of prompt p is the independent sequence
/// index p * n + c: it samples with seed + c (when a seed is given), its stops and max_tokens are
/// the request's.
struct GenerationRequest {
  ApiKind kind = ApiKind::Completions;
  std::vector<std::vector<TokenId>> prompts;  // >= 1; chat: exactly one
  int64_t maxTokens = 16;
  int32_t n = 1;
  SamplingParams sampling;  // seed filled in by the engine when absent
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;      // stop strings: the text ends before the first
  std::vector<TokenId> stopTokenIds;  // stop tokens, the tokenizer's EOS included unless ignore_eos
  bool stream = false;
  bool includeUsage = false;    // stream_options.include_usage
  bool returnTokenIds = false;  // "return_token_ids": each choice's token_ids
  bool chatLogprobs = false;    // chat: logprobs true (sampling.logprobs = top_logprobs)
  size_t choices() const { return prompts.size() * static_cast<size_t>(n); }
};

/// Parses and validates `body` as `kind`'s request. Errors (ApiError): malformed JSON or a body
/// that is not an object (invalid_json); a field of the wrong type (invalid_type); `model` not the
/// served one (404 model_not_found); no prompt / messages, malformed messages, an empty prompt, a
/// prompt id outside the vocabulary; temperature < 0, top_p outside (0, 1], top_k < 0, min_p
/// outside [0, 1], repetition_penalty <= 0, max_tokens <= 0, n outside [1, maxN] or more than
/// maxChoices choices, logprobs
/// outside [0, 20] (invalid_value); prompt + max_tokens above maxSeqLen
/// (context_length_exceeded); echo, suffix, best_of != n, logit_bias, non-zero presence or
/// frequency penalties, tools (unsupported_parameter).
llvm::Expected<GenerationRequest> parseGenerationRequest(ApiKind kind, llvm::StringRef body, const ApiContext &ctx);

/// The chat messages of a /v1/chat/completions body (for tests and for the parser): each an
/// object with a string `role` and a `content` that is a string or a list of {"type": "text",
/// "text": ...} parts. Errors: ApiError (param "messages").
llvm::Expected<std::vector<ChatMessage>> parseChatMessages(llvm::StringRef messagesJson);

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_OPENAIAPI_H

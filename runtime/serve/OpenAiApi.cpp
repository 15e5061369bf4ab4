//===- OpenAiApi.cpp - Completion and chat requests into token ids and parameters -----------===//
#include "colossal/runtime/serve/OpenAiApi.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace colossal::runtime::serve {

char ApiError::ID = 0;

using nlohmann::json;

std::string ApiError::body() const {
  json e = {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

llvm::Error badRequest(llvm::StringRef param, llvm::StringRef code, const llvm::Twine &message) {
  return llvm::make_error<ApiError>(400, "invalid_request_error", param.str(), code.str(), message.str());
}

namespace {

const char *typeName(const json &v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an integer";
  }
}

llvm::Error wrongType(llvm::StringRef param, const json &v, llvm::StringRef want) {
  return badRequest(param, "invalid_type", "'" + param + "' must be " + want + ", not " + typeName(v));
}
/// A part of field `param` (e.g. `at` = "prompt[3]") of the wrong type.
llvm::Error wrongTypeAt(llvm::StringRef param, const std::string &at, const json &v, llvm::StringRef want) {
  return badRequest(param, "invalid_type", at + " must be " + want + ", not " + typeName(v));
}

std::string str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// Reads optional fields of the body; null counts as absent (as the OpenAI clients send it).
class Fields {
public:
  explicit Fields(const json &body) : body_(body) {}
  const json *get(const char *key) const {
    auto it = body_.find(key);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }
  llvm::Error number(const char *key, double &out) const {
    if (const json *v = get(key)) {
      if (!v->is_number()) return wrongType(key, *v, "a number");
      out = v->get<double>();
      if (!std::isfinite(out)) return badRequest(key, "invalid_value", llvm::Twine("'") + key + "' must be finite");
    }
    return llvm::Error::success();
  }
  llvm::Error integer(const char *key, int64_t &out, bool *given = nullptr) const {
    if (const json *v = get(key)) {
      if (v->is_number_float() && v->get<double>() == std::floor(v->get<double>()) &&
          std::fabs(v->get<double>()) < 9e15)
        out = static_cast<int64_t>(v->get<double>());
      else if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
        return badRequest(key, "invalid_value", std::string(key) + " " + v->dump() + " is out of range (at most 2^63 - 1)");
      else if (v->is_number_integer()) // signed or unsigned (nlohmann counts both) within int64
        out = v->get<int64_t>();
      else
        return wrongType(key, *v, "an integer");
      if (given) *given = true;
    }
    return llvm::Error::success();
  }
  llvm::Error boolean(const char *key, bool &out) const {
    if (const json *v = get(key)) {
      if (!v->is_boolean()) return wrongType(key, *v, "a boolean");
      out = v->get<bool>();
    }
    return llvm::Error::success();
  }

private:
  const json &body_;
};

/// One token id `t` (the request's `where`, e.g. "prompt[3]"), checked against the vocabulary;
/// `param` names it in errors.
llvm::Error tokenId(const json &t, const char *param, const std::string &where, int32_t vocab,
                    std::vector<TokenId> &out) {
  if (!t.is_number_integer()) // signed or unsigned
    return wrongTypeAt(param, where, t, "a token id (an integer)");
  const bool huge = t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT64_MAX);
  const int64_t id = huge ? INT64_MAX : t.get<int64_t>();
  if (id < 0 || id >= vocab)
    return badRequest(param, "invalid_value",
                      where + " is token id " + t.dump() + ", outside the vocabulary [0, " + std::to_string(vocab) +
                          ")");
  out.push_back(static_cast<TokenId>(id));
  return llvm::Error::success();
}

/// A list of token ids, checked against the vocabulary; `param` names it in errors.
llvm::Error tokenIds(const json &v, const char *param, const std::string &at, int32_t vocab,
                     std::vector<TokenId> &out) {
  for (size_t i = 0; i < v.size(); ++i)
    if (llvm::Error e = tokenId(v[i], param, at + "[" + std::to_string(i) + "]", vocab, out)) return e;
  return llvm::Error::success();
}

llvm::Error encodeText(const ApiContext &ctx, llvm::StringRef text, const char *param, std::vector<TokenId> &out) {
  auto ids = ctx.tokenizer->encode(text, /*addBos=*/true);
  if (!ids)
    return badRequest(param, "invalid_value", "the tokenizer refused the text: " + llvm::toString(ids.takeError()));
  out = std::move(*ids);
  return llvm::Error::success();
}

/// `prompt`: a string, a list of token ids, a list of strings, or a list of lists of ids.
llvm::Error completionPrompts(const json &body, const ApiContext &ctx, GenerationRequest &r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return badRequest("prompt", "missing_field", "'prompt' is required");
  const json &p = *it;
  auto one = [&](const json &v, const std::string &at) -> llvm::Error {
    std::vector<TokenId> ids;
    if (v.is_string()) {
      if (llvm::Error e = encodeText(ctx, v.get<std::string>(), "prompt", ids)) return e;
    } else if (v.is_array()) {
      if (llvm::Error e = tokenIds(v, "prompt", at, ctx.vocabSize, ids)) return e;
    } else {
      return wrongTypeAt("prompt", at, v, "a string or a list of token ids");
    }
    if (ids.empty()) return badRequest("prompt", "invalid_value", at + " is empty (no token ids)");
    r.prompts.push_back(std::move(ids));
    return llvm::Error::success();
  };
  if (p.is_string()) return one(p, "prompt");
  if (!p.is_array()) return wrongType("prompt", p, "a string, a list of token ids, or a list of those");
  if (p.empty()) return badRequest("prompt", "invalid_value", "prompt is empty (no token ids)");
  if (p[0].is_string() || p[0].is_array()) {  // a batch of prompts
    for (size_t i = 0; i < p.size(); ++i)
      if (llvm::Error e = one(p[i], "prompt[" + std::to_string(i) + "]")) return e;
    return llvm::Error::success();
  }
  return one(p, "prompt");
}

llvm::Expected<std::vector<ChatMessage>> chatMessages(const json &m) {
  if (!m.is_array()) return wrongType("messages", m, "a list of messages");
  if (m.empty()) return badRequest("messages", "invalid_value", "'messages' is empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const json &msg = m[i];
    if (!msg.is_object()) return wrongTypeAt("messages", at, msg, "an object with 'role' and 'content'");
    auto role = msg.find("role");
    if (role == msg.end()) return badRequest("messages", "missing_field", at + " has no 'role'");
    if (!role->is_string() || role->get<std::string>().empty())
      return badRequest("messages", "invalid_type", at + ".role must be a non-empty string");
    auto content = msg.find("content");
    if (content == msg.end()) return badRequest("messages", "missing_field", at + " has no 'content'");
    ChatMessage cm{role->get<std::string>(), ""};
    if (content->is_string()) {
      cm.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t j = 0; j < content->size(); ++j) {
        const json &part = (*content)[j];
        auto type = part.is_object() ? part.find("type") : part.end();
        auto text = part.is_object() ? part.find("text") : part.end();
        if (!part.is_object() || type == part.end() || *type != "text" || text == part.end() || !text->is_string())
          return badRequest(
              "messages", "invalid_value",
              at + ".content[" + std::to_string(j) + "] is not a {\"type\": \"text\", \"text\": ...} part");
        cm.content += text->get<std::string>();
      }
    } else {
      return badRequest("messages", "invalid_type",
                        at + ".content must be a string or a list of text parts, not " + typeName(*content));
    }
    out.push_back(std::move(cm));
  }
  return out;
}

/// `stop`: a string or a list (strings are stop strings, integers stop token ids); and
/// `stop_token_ids`.
llvm::Error stops(const json &body, const ApiContext &ctx, GenerationRequest &r) {
  auto addString = [&](const json &s, const std::string &param) -> llvm::Error {
    if (s.get<std::string>().empty()) return badRequest("stop", "invalid_value", param + " is an empty string");
    r.stop.push_back(s.get<std::string>());
    return llvm::Error::success();
  };
  auto it = body.find("stop");
  if (it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      if (llvm::Error e = addString(*it, "stop")) return e;
    } else if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const json &s = (*it)[i];
        const std::string param = "stop[" + std::to_string(i) + "]";
        if (s.is_string()) {
          if (llvm::Error e = addString(s, param)) return e;
        } else if (s.is_number_integer() || s.is_number_unsigned()) {
          if (llvm::Error e = tokenId(s, "stop", param, ctx.vocabSize, r.stopTokenIds)) return e;
        } else {
          return wrongTypeAt("stop", param, s, "a string or a token id");
        }
      }
    } else {
      return wrongType("stop", *it, "a string or a list of strings and token ids");
    }
  }
  auto ids = body.find("stop_token_ids");
  if (ids != body.end() && !ids->is_null()) {
    if (!ids->is_array()) return wrongType("stop_token_ids", *ids, "a list of token ids");
    if (llvm::Error e = tokenIds(*ids, "stop_token_ids", "stop_token_ids", ctx.vocabSize, r.stopTokenIds)) return e;
  }
  return llvm::Error::success();
}

/// Fields this server does not implement: an error when given other than their neutral value.
llvm::Error unsupported(const json &body, const GenerationRequest &r) {
  Fields f(body);
  auto refuse = [](const char *key, const llvm::Twine &why) {
    return badRequest(key, "unsupported_parameter", llvm::Twine("'") + key + "' is not supported" + why);
  };
  bool echo = false;
  if (llvm::Error e = f.boolean("echo", echo)) return e;
  if (echo) return refuse("echo", "");
  if (f.get("suffix")) return refuse("suffix", "");
  int64_t bestOf = r.n;
  if (llvm::Error e = f.integer("best_of", bestOf)) return e;
  if (bestOf != r.n) return refuse("best_of", " (other than equal to n)");
  for (const char *key : {"presence_penalty", "frequency_penalty"}) {
    double v = 0;
    if (llvm::Error e = f.number(key, v)) return e;
    if (v != 0) return refuse(key, "; repetition_penalty is");
  }
  if (const json *v = f.get("logit_bias"); v && !v->empty()) return refuse("logit_bias", "");
  for (const char *key : {"tools", "functions", "tool_choice", "function_call", "response_format"})
    if (const json *v = f.get(key); v && !(v->is_array() && v->empty())) {
      if (std::string(key) == "response_format" && v->is_object() && v->value("type", "") == "text") continue;
      if (std::string(key) == "tool_choice" && v->is_string() && *v == "none") continue;
      return refuse(key, "");
    }
  return llvm::Error::success();
}

llvm::Error sampling(const json &body, ApiKind kind, GenerationRequest &r) {
  Fields f(body);
  SamplingParams &s = r.sampling;
  if (llvm::Error e = f.number("temperature", s.temperature)) return e;
  if (s.temperature < 0)
    return badRequest("temperature", "invalid_value",
                      "temperature must be >= 0 (0 = greedy), not " + str(s.temperature));
  if (llvm::Error e = f.number("top_p", s.topP)) return e;
  if (!(s.topP > 0 && s.topP <= 1))
    return badRequest("top_p", "invalid_value", "top_p must be in (0, 1], not " + str(s.topP));
  int64_t topK = 0;
  if (llvm::Error e = f.integer("top_k", topK)) return e;
  if (topK == -1) topK = 0;  // vLLM's "off"
  if (topK < 0 || topK > INT32_MAX)
    return badRequest("top_k", "invalid_value", "top_k must be >= 0 (0 or -1 = off), not " + llvm::Twine(topK));
  s.topK = static_cast<int32_t>(topK);
  if (llvm::Error e = f.number("min_p", s.minP)) return e;
  if (!(s.minP >= 0 && s.minP <= 1))
    return badRequest("min_p", "invalid_value", "min_p must be in [0, 1], not " + str(s.minP));
  if (llvm::Error e = f.number("repetition_penalty", s.repetitionPenalty)) return e;
  if (s.repetitionPenalty <= 0)
    return badRequest("repetition_penalty", "invalid_value",
                      "repetition_penalty must be > 0 (1 = off), not " + str(s.repetitionPenalty));
  if (const json *v = f.get("seed")) {
    if (v->is_number_unsigned())
      r.seed = v->get<uint64_t>();
    else if (v->is_number_integer()) // negative: its two's-complement bits, as torch's manual_seed
      r.seed = static_cast<uint64_t>(v->get<int64_t>());
    else
      return wrongType("seed", *v, "an integer");
  }
  // logprobs: completions an integer (the top alternatives); chat a boolean plus top_logprobs.
  if (kind == ApiKind::Completions) {
    int64_t lp = -1;
    if (const json *v = f.get("logprobs"); v && v->is_boolean())
      return wrongType("logprobs", *v, "an integer in [0, 20] (true/false is the chat API's logprobs)");
    if (llvm::Error e = f.integer("logprobs", lp)) return e;
    if (f.get("logprobs") && (lp < 0 || lp > 20))
      return badRequest("logprobs", "invalid_value", "logprobs must be in [0, 20], not " + llvm::Twine(lp));
    s.logprobs = static_cast<int32_t>(lp);
  } else {
    if (llvm::Error e = f.boolean("logprobs", r.chatLogprobs)) return e;
    int64_t top = 0;
    bool given = false;
    if (llvm::Error e = f.integer("top_logprobs", top, &given)) return e;
    if (top < 0 || top > 20)
      return badRequest("top_logprobs", "invalid_value", "top_logprobs must be in [0, 20], not " + llvm::Twine(top));
    if (given && !r.chatLogprobs)
      return badRequest("top_logprobs", "invalid_value", "top_logprobs needs \"logprobs\": true");
    s.logprobs = r.chatLogprobs ? static_cast<int32_t>(top) : -1;
  }
  if (llvm::Error e = validateSamplingParams(s)) {  // a backstop: every field was checked above
    std::string msg = llvm::toString(std::move(e));
    return badRequest(llvm::StringRef(msg).split(' ').first, "invalid_value", msg);
  }
  return llvm::Error::success();
}

/// `max_tokens` (chat: also `max_completion_tokens`) into r.maxTokens, checked against the
/// context; chat's default is the rest of the context.
llvm::Error parseMaxTokens(const json &body, const ApiContext &ctx, GenerationRequest &r) {
  Fields f(body);
  const ApiKind kind = r.kind;
  size_t longest = 0;
  for (const auto &p : r.prompts) longest = std::max(longest, p.size());
  const char *promptParam = kind == ApiKind::Completions ? "prompt" : "messages";
  bool given = false;
  const char *maxKey = "max_tokens";
  if (kind == ApiKind::ChatCompletions && f.get("max_completion_tokens")) maxKey = "max_completion_tokens";
  int64_t maxTokens = kind == ApiKind::Completions ? 16 : 0;
  if (llvm::Error e = f.integer(maxKey, maxTokens, &given)) return e;
  if (given && maxTokens < 1)
    return badRequest(maxKey, "invalid_value", llvm::Twine(maxKey) + " must be >= 1, not " + llvm::Twine(maxTokens));
  if (static_cast<int64_t>(longest) >= ctx.maxSeqLen)
    return badRequest(promptParam, "context_length_exceeded",
                      "the prompt is " + llvm::Twine(longest) + " tokens; the context is " +
                          llvm::Twine(ctx.maxSeqLen) + " tokens, which leaves no room to generate");
  if (!given && kind == ApiKind::ChatCompletions) maxTokens = ctx.maxSeqLen - static_cast<int64_t>(longest);
  if (maxTokens > ctx.maxSeqLen - static_cast<int64_t>(longest))
    return badRequest(maxKey, "context_length_exceeded",
                      "the prompt of " + llvm::Twine(longest) + " tokens + " + maxKey + " " + llvm::Twine(maxTokens) +
                          " is above the context of " + llvm::Twine(ctx.maxSeqLen) + " tokens");
  r.maxTokens = maxTokens;
  return llvm::Error::success();
}

}  // namespace

llvm::Expected<std::vector<ChatMessage>> parseChatMessages(llvm::StringRef messagesJson) {
  json m = json::parse(messagesJson.begin(), messagesJson.end(), nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded()) return badRequest("messages", "invalid_json", "'messages' is not valid JSON");
  return chatMessages(m);
}

llvm::Expected<GenerationRequest> parseGenerationRequest(ApiKind kind, llvm::StringRef text, const ApiContext &ctx) {
  json body;
  try {
    body = json::parse(text.begin(), text.end());
  } catch (const json::parse_error &e) {
    return badRequest("", "invalid_json", llvm::Twine("the body is not valid JSON: ") + e.what());
  } catch (const json::out_of_range &e) {  // a number beyond double's range (1e400)
    return badRequest("", "invalid_json", llvm::Twine("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object())
    return badRequest("", "invalid_json", llvm::Twine("the body must be a JSON object, not ") + typeName(body));
  Fields f(body);
  GenerationRequest r;
  r.kind = kind;

  if (const json *model = f.get("model")) {
    if (!model->is_string()) return wrongType("model", *model, "a string");
    if (*model != ctx.modelName)
      return llvm::make_error<ApiError>(
          404, "invalid_request_error", "model", "model_not_found",
          "the model '" + model->get<std::string>() + "' does not exist; this server serves '" + ctx.modelName + "'");
  }

  if (kind == ApiKind::Completions) {
    if (llvm::Error e = completionPrompts(body, ctx, r)) return std::move(e);
  } else {
    auto it = body.find("messages");
    if (it == body.end() || it->is_null()) return badRequest("messages", "missing_field", "'messages' is required");
    auto messages = chatMessages(*it);
    if (!messages) return messages.takeError();
    const ChatTemplate &t = ctx.chatTemplate ? *ctx.chatTemplate : ChatTemplate::defaultTemplate();
    auto prompt = t.render(*messages);
    if (!prompt) return badRequest("messages", "invalid_value", llvm::toString(prompt.takeError()));
    r.prompts.emplace_back();
    if (llvm::Error e = encodeText(ctx, *prompt, "messages", r.prompts.back())) return std::move(e);
  }

  int64_t n = 1;
  if (llvm::Error e = f.integer("n", n)) return std::move(e);
  if (n < 1 || n > ctx.maxN)
    return badRequest("n", "invalid_value", "n must be in [1, " + llvm::Twine(ctx.maxN) + "], not " + llvm::Twine(n));
  r.n = static_cast<int32_t>(n);
  if (r.choices() > static_cast<size_t>(ctx.maxChoices))
    return badRequest("n", "invalid_value",
                      llvm::Twine(r.prompts.size()) + " prompts × n " + llvm::Twine(n) + " = " +
                          llvm::Twine(r.choices()) + " choices; at most " + llvm::Twine(ctx.maxChoices) +
                          " in one request");
  if (llvm::Error e = unsupported(body, r)) return std::move(e);
  if (llvm::Error e = sampling(body, kind, r)) return std::move(e);
  if (llvm::Error e = stops(body, ctx, r)) return std::move(e);
  bool ignoreEos = false;
  if (llvm::Error e = f.boolean("ignore_eos", ignoreEos)) return std::move(e);
  const TokenId eos = ctx.tokenizer->eosId();
  if (!ignoreEos && eos >= 0 && eos < ctx.vocabSize) r.stopTokenIds.push_back(eos);
  if (llvm::Error e = f.boolean("stream", r.stream)) return std::move(e);
  if (const json *so = f.get("stream_options")) {
    if (!so->is_object()) return wrongType("stream_options", *so, "an object");
    if (!r.stream) return badRequest("stream_options", "invalid_value", "stream_options needs \"stream\": true");
    if (llvm::Error e = Fields(*so).boolean("include_usage", r.includeUsage)) return std::move(e);
  }
  if (llvm::Error e = f.boolean("return_token_ids", r.returnTokenIds)) return std::move(e);

  if (llvm::Error e = parseMaxTokens(body, ctx, r)) return std::move(e);
  return r;
}

}  // namespace colossal::runtime::serve

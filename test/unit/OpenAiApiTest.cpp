//===- OpenAiApiTest.cpp - Completion and chat request parsing and validation ---------------===//
//
// parseGenerationRequest (OpenAiApi.h) on a byte tokenizer (id = byte + 3, BOS 1, EOS 2): the
// prompt forms, defaults, the sampling fields, stops, n, stream options, chat messages through
// the default template, and every error's status, param and code.
//
//===----------------------------------------------------------------------------------------===//
#include "ByteTokenizer.h"
#include "TestUtil.h"

#include "colossal/runtime/serve/OpenAiApi.h"

using namespace colossal::runtime::testing;
using namespace colossal::runtime::serve;

namespace {

struct Fixture {
  ByteTokenizer tok;
  ApiContext ctx;
  Fixture() {
    ctx.tokenizer = &tok;
    ctx.modelName = "toy";
    ctx.maxSeqLen = 64;
    ctx.vocabSize = 300;
  }
  llvm::Expected<GenerationRequest> completion(llvm::StringRef body) {
    return parseGenerationRequest(ApiKind::Completions, body, ctx);
  }
  llvm::Expected<GenerationRequest> chat(llvm::StringRef body) {
    return parseGenerationRequest(ApiKind::ChatCompletions, body, ctx);
  }
};

struct Failure {
  int status = 0;
  std::string param, code, message, body;
};

Failure failure(llvm::Expected<GenerationRequest> r) {
  Failure f;
  if (r) {
    f.message = "(parsed)";
    return f;
  }
  llvm::handleAllErrors(r.takeError(), [&](const ApiError &e) {
    f = {e.status, e.param, e.code, e.message, e.body()};
  });
  return f;
}

GenerationRequest ok(llvm::Expected<GenerationRequest> r) {
  if (!r) {
    ADD_FAILURE() << llvm::toString(r.takeError());
    return {};
  }
  return std::move(*r);
}

TEST(OpenAiApi, CompletionPromptForms) {
  Fixture f;
  GenerationRequest r = ok(f.completion(R"({"model": "toy", "prompt": "hi"})"));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], (std::vector<TokenId>{1, 'h' + 3, 'i' + 3}));  // a string gets the BOS
  EXPECT_EQ(r.maxTokens, 16);                                            // OpenAI's default for completions
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.sampling.temperature, 1.0);
  EXPECT_EQ(r.sampling.logprobs, -1);
  EXPECT_EQ(r.stopTokenIds, (std::vector<TokenId>{2}));  // the EOS
  EXPECT_FALSE(r.seed.has_value());

  r = ok(f.completion(R"({"prompt": [5, 6, 299]})"));  // ids as given, no BOS; model optional
  EXPECT_EQ(r.prompts[0], (std::vector<TokenId>{5, 6, 299}));

  r = ok(f.completion(R"({"prompt": ["a", [7, 8]], "n": 3})"));  // a batch of prompts
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1], (std::vector<TokenId>{7, 8}));
  EXPECT_EQ(r.choices(), 6u);
}

TEST(OpenAiApi, SamplingStopsAndOptions) {
  Fixture f;
  GenerationRequest r = ok(f.completion(
      R"({"prompt": "x", "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 7, "min_p": 0.1,
          "repetition_penalty": 1.2, "seed": 42, "stop": ["ab", 9], "stop_token_ids": [11],
          "logprobs": 3, "stream": true, "stream_options": {"include_usage": true},
          "return_token_ids": true, "ignore_eos": true, "user": "u", "presence_penalty": 0})"));
  EXPECT_EQ(r.maxTokens, 5);
  EXPECT_EQ(r.sampling.temperature, 0.0);
  EXPECT_EQ(r.sampling.topP, 0.5);
  EXPECT_EQ(r.sampling.topK, 7);
  EXPECT_EQ(r.sampling.minP, 0.1);
  EXPECT_EQ(r.sampling.repetitionPenalty, 1.2);
  EXPECT_EQ(r.seed, std::optional<uint64_t>(42));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"ab"}));
  EXPECT_EQ(r.stopTokenIds, (std::vector<TokenId>{9, 11}));  // ignore_eos: no EOS
  EXPECT_EQ(r.sampling.logprobs, 3);
  EXPECT_TRUE(r.stream && r.includeUsage && r.returnTokenIds);

  r = ok(f.completion(R"({"prompt": "x", "stop": "\n", "top_k": -1, "temperature": null})"));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(r.sampling.topK, 0);
  EXPECT_EQ(r.sampling.temperature, 1.0);  // null is absent
}

TEST(OpenAiApi, ChatMessagesThroughTheDefaultTemplate) {
  Fixture f;
  GenerationRequest r = ok(f.chat(
      R"({"model": "toy", "messages": [{"role": "system", "content": "S"},
          {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 4})"));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(f.tok.decode(r.prompts[0]), "system: S\nuser: ab\nassistant:");
  EXPECT_EQ(r.prompts[0][0], 1);
  EXPECT_TRUE(r.chatLogprobs);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_EQ(r.maxTokens, 4);
  // Chat's default max_tokens: the rest of the context.
  r = ok(f.chat(R"({"messages": [{"role": "user", "content": "hi"}]})"));
  EXPECT_EQ(r.maxTokens, 64 - static_cast<int64_t>(r.prompts[0].size()));
  EXPECT_EQ(r.sampling.logprobs, -1);
}

TEST(OpenAiApi, ErrorsCarryStatusParamAndCode) {
  Fixture f;
  struct Case {
    ApiKind kind;
    const char *body;
    int status;
    const char *param, *code;
  };
  const ApiKind C = ApiKind::Completions, H = ApiKind::ChatCompletions;
  const Case cases[] = {
      {C, R"({"prompt": "x",)", 400, "", "invalid_json"},
      {C, R"([1, 2])", 400, "", "invalid_json"},
      {C, R"({"prompt": "x", "temperature": 1e400})", 400, "", "invalid_json"},  // beyond double
      {C, R"({"model": "gpt-4", "prompt": "x"})", 404, "model", "model_not_found"},
      {C, R"({"model": 3, "prompt": "x"})", 400, "model", "invalid_type"},
      {C, R"({"max_tokens": 3})", 400, "prompt", "missing_field"},
      {C, R"({"prompt": []})", 400, "prompt", "invalid_value"},
      {C, R"({"prompt": [1, 300]})", 400, "prompt", "invalid_value"},
      {C, R"({"prompt": [1, -1]})", 400, "prompt", "invalid_value"},
      {C, R"({"prompt": [1, "a"]})", 400, "prompt", "invalid_type"},
      {C, R"({"prompt": {"a": 1}})", 400, "prompt", "invalid_type"},
      {C, R"({"prompt": "x", "temperature": -0.5})", 400, "temperature", "invalid_value"},
      {C, R"({"prompt": "x", "temperature": "hot"})", 400, "temperature", "invalid_type"},
      {C, R"({"prompt": "x", "top_p": 1.5})", 400, "top_p", "invalid_value"},
      {C, R"({"prompt": "x", "top_p": 0})", 400, "top_p", "invalid_value"},
      {C, R"({"prompt": "x", "top_k": -2})", 400, "top_k", "invalid_value"},
      {C, R"({"prompt": "x", "min_p": 2})", 400, "min_p", "invalid_value"},
      {C, R"({"prompt": "x", "repetition_penalty": 0})", 400, "repetition_penalty", "invalid_value"},
      {C, R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens", "invalid_value"},
      {C, R"({"prompt": "x", "max_tokens": -3})", 400, "max_tokens", "invalid_value"},
      {C, R"({"prompt": "x", "max_tokens": 2.5})", 400, "max_tokens", "invalid_type"},
      {C, R"({"prompt": "x", "max_tokens": 63})", 400, "max_tokens", "context_length_exceeded"},
      {C, R"({"prompt": "x", "max_tokens": 9223372036854775807})", 400, "max_tokens", "context_length_exceeded"},
      {C, R"({"prompt": "x", "n": 0})", 400, "n", "invalid_value"},
      {C, R"({"prompt": "x", "n": 65})", 400, "n", "invalid_value"},
      {C, R"({"prompt": ["a", "b", "c", "d", "e"], "n": 60})", 400, "n", "invalid_value"},  // 300 choices
      {C, R"({"prompt": "x", "logprobs": 21})", 400, "logprobs", "invalid_value"},
      {C, R"({"prompt": "x", "logprobs": -1})", 400, "logprobs", "invalid_value"},
      {C, R"({"prompt": "x", "logprobs": true})", 400, "logprobs", "invalid_type"},  // chat's form
      // Integers beyond int64 (nlohmann keeps them unsigned) are out of range, never wrapped.
      {C, R"({"prompt": "x", "max_tokens": 9223372036854775808})", 400, "max_tokens", "invalid_value"},
      {C, R"({"prompt": "x", "n": 18446744073709551615})", 400, "n", "invalid_value"},
      {C, R"({"prompt": "x", "top_k": 18446744073709551615})", 400, "top_k", "invalid_value"},
      {C, R"({"prompt": [1, 18446744073709551615]})", 400, "prompt", "invalid_value"},
      {C, R"({"prompt": [[1], []]})", 400, "prompt", "invalid_value"},
      {C, R"({"prompt": "x", "stop": [9999]})", 400, "stop", "invalid_value"},
      {C, R"({"prompt": "x", "stop": ""})", 400, "stop", "invalid_value"},
      {C, R"({"prompt": "x", "stop": [true]})", 400, "stop", "invalid_type"},
      {C, R"({"prompt": "x", "stream": "yes"})", 400, "stream", "invalid_type"},
      {C, R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400, "stream_options", "invalid_value"},
      {C, R"({"prompt": "x", "echo": true})", 400, "echo", "unsupported_parameter"},
      {C, R"({"prompt": "x", "best_of": 2})", 400, "best_of", "unsupported_parameter"},
      {C, R"({"prompt": "x", "frequency_penalty": 0.5})", 400, "frequency_penalty", "unsupported_parameter"},
      {C, R"({"prompt": "x", "logit_bias": {"5": 1}})", 400, "logit_bias", "unsupported_parameter"},
      {H, R"({"prompt": "x"})", 400, "messages", "missing_field"},
      {H, R"({"messages": "hi"})", 400, "messages", "invalid_type"},
      {H, R"({"messages": []})", 400, "messages", "invalid_value"},
      {H, R"({"messages": ["hi"]})", 400, "messages", "invalid_type"},
      {H, R"({"messages": [{"content": "hi"}]})", 400, "messages", "missing_field"},
      {H, R"({"messages": [{"role": "user"}]})", 400, "messages", "missing_field"},
      {H, R"({"messages": [{"role": 1, "content": "hi"}]})", 400, "messages", "invalid_type"},
      {H, R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages", "invalid_type"},
      {H, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400, "messages", "invalid_value"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", 400, "top_logprobs",
       "invalid_value"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})", 400, "tools",
       "unsupported_parameter"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 60})", 400, "max_tokens",
       "context_length_exceeded"},
      {H, R"({"messages": [{"role": "user", "content": "0123456789012345678901234567890123456789012345678901"}]})", 400,
       "messages", "context_length_exceeded"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.body);
    Failure e = failure(parseGenerationRequest(c.kind, c.body, f.ctx));
    EXPECT_EQ(e.status, c.status) << e.message;
    EXPECT_EQ(e.param, c.param) << e.message;
    EXPECT_EQ(e.code, c.code) << e.message;
    EXPECT_FALSE(e.message.empty());
  }
  // The body: OpenAI's error object, null where there is no param.
  Failure e = failure(f.completion(R"({"prompt": "x", "temperature": -1})"));
  EXPECT_EQ(e.body, R"({"error":{"code":"invalid_value","message":"temperature must be >= 0 (0 = greedy), not -1",)"
                    R"("param":"temperature","type":"invalid_request_error"}})");
  e = failure(f.completion("nope"));
  EXPECT_NE(e.body.find(R"("param":null)"), std::string::npos) << e.body;
  e = failure(f.completion(R"({"prompt": "x", "max_tokens": 63})"));
  EXPECT_EQ(e.message, "the prompt of 2 tokens + max_tokens 63 is above the context of 64 tokens");
  // Messages name the element and give the number as sent.
  EXPECT_EQ(failure(f.completion(R"({"prompt": "x", "max_tokens": 18446744073709551615})")).message,
            "max_tokens 18446744073709551615 is out of range (at most 2^63 - 1)");
  EXPECT_EQ(failure(f.completion(R"({"prompt": [1, 18446744073709551615]})")).message,
            "prompt[1] is token id 18446744073709551615, outside the vocabulary [0, 300)");
  EXPECT_EQ(failure(f.completion(R"({"prompt": "x", "stop": ["a", 9999]})")).message,
            "stop[1] is token id 9999, outside the vocabulary [0, 300)");
  EXPECT_EQ(failure(f.completion(R"({"prompt": [[1], []]})")).message, "prompt[1] is empty (no token ids)");
}

}  // namespace

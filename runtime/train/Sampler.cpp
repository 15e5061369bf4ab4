//===- Sampler.cpp - Text generation with a trained model -----------------------------------===//
#include "colossal/runtime/Sampler.h"

#include "colossal/runtime/serve/StreamDetokenizer.h"

#include <cmath>
#include <optional>
#include <vector>

namespace colossal::runtime {

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}
/// An error when `logits` cannot be sampled from: a NaN or +inf, or no finite logit at all (−inf
/// alone is a masked token and stays allowed).
llvm::Error checkLogits(llvm::ArrayRef<float> logits, const LoadedPlan &plan, int64_t token, int64_t position) {
  bool anyFinite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    anyFinite |= std::isfinite(v);
    if (std::isnan(v) || v == INFINITY)
      return fail(plan.path + ": program 'forward': the logits of generated token " + llvm::Twine(token) +
                  " (context position " + llvm::Twine(position) + ") are not finite (id " + llvm::Twine(i) + ": " +
                  (std::isnan(v) ? "nan" : "inf") +
                  "); the weights hold non-finite values or overflow (a diverged checkpoint?), nothing is sampled");
  }
  if (!anyFinite)
    return fail(plan.path + ": program 'forward': every logit of generated token " + llvm::Twine(token) +
                " (context position " + llvm::Twine(position) + ") is -inf; nothing is sampled");
  return llvm::Error::success();
}

/// The prompt's token ids: its bytes, or with a tokenizer its encoding after BOS.
llvm::Expected<std::vector<int64_t>> promptIds(const SampleOptions &o, int64_t V, const LoadedPlan &plan) {
  if (o.tokenizer) {
    const int64_t ids = o.tokenizer->vocabSize();
    if (ids > V)
      return fail("--tokenizer: the tokenizer has " + llvm::Twine(ids) + " ids, the model's vocabulary " +
                  llvm::Twine(V) + " (" + plan.path + "): not this model's tokenizer");
    if (o.prompt.empty() && o.tokenizer->bosId() < 0)
      return fail("--prompt must not be empty: the tokenizer has no BOS to start from");
    llvm::Expected<std::vector<serve::TokenId>> encoded = o.tokenizer->encode(o.prompt, /*addBos=*/true);
    if (!encoded) return encoded.takeError();
    return std::vector<int64_t>(encoded->begin(), encoded->end());
  }
  if (V > 256)
    return fail(plan.path + ": sample reads and prints bytes, but the vocabulary has " + llvm::Twine(V) +
                " ids (more than 256: not a byte-level model); give the model's tokenizer with --tokenizer FILE");
  if (o.prompt.empty()) return fail("--prompt must not be empty (the first token comes from it)");
  for (size_t i = 0; i < o.prompt.size(); ++i)
    if (static_cast<uint8_t>(o.prompt[i]) >= V)
      return fail("--prompt: byte " + llvm::Twine(static_cast<unsigned>(static_cast<uint8_t>(o.prompt[i]))) +
                  " at offset " + llvm::Twine(i) + " is outside the vocabulary of " + llvm::Twine(V) + " ids");
  std::vector<int64_t> ids;
  for (char c : o.prompt) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

}  // namespace

int64_t pickToken(llvm::ArrayRef<float> logits, double temperature, std::mt19937_64 &rng) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(logits.size()); ++i)
    if (logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i]))) best = i;
  if (temperature <= 0) return best;
  const double m = logits[best];
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::isnan(logits[i]) ? 0 : std::exp((double(logits[i]) - m) / temperature);
    z += p[i];
  }
  if (!(z > 0) || !std::isfinite(z)) return best;
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * z;
  for (size_t i = 0; i < p.size(); ++i) {
    if (u < p[i]) return static_cast<int64_t>(i);
    u -= p[i];
  }
  return best;  // rounding left u just above the total
}

llvm::Error sampleText(const LoadedPlan &plan, const KernelRegistry &registry, Device &device, const StateStore &states,
                       const SampleOptions &o, llvm::raw_ostream &out) {
  if (!plan.plan.has_train() || plan.plan.train().tokens_input().empty())
    return fail(plan.path + ": sample needs a training plan (its TrainConfig names the tokens input and logits output)");
  const plan::TrainConfig &tc = plan.plan.train();
  const int64_t V = tc.vocab_size(), B = tc.global_batch(), T = tc.seq_len();
  if (o.tokens < 0) return fail("--tokens must be >= 0");
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) return fail("--temperature must be finite and >= 0");
  llvm::Expected<std::vector<int64_t>> prompt = promptIds(o, V, plan);
  if (!prompt) return prompt.takeError();

  ExecutorOptions opts;
  opts.states = &states;
  opts.comm = o.comm;
  auto ex = Executor::create(plan, registry, device, plan.program(plan::Program::FORWARD)->name(), opts);
  if (!ex) return ex.takeError();
  DType tokensDType = DType::I64;
  for (const BindingInfo &in : (*ex)->inputs())
    if (in.name == tc.tokens_input()) tokensDType = in.tensor.dtype;
  llvm::Expected<TensorRef> logitsRef = (*ex)->output(tc.logits_output());
  if (!logitsRef) return logitsRef.takeError();

  std::vector<int64_t> context = std::move(*prompt);
  // With a tokenizer the new ids continue the prompt's text (or start it, after BOS alone).
  std::optional<serve::StreamDetokenizer> text;
  if (o.tokenizer) text.emplace(*o.tokenizer, /*atSequenceStart=*/o.prompt.empty());
  std::vector<char> tokens(B * T * dtypeSize(tokensDType), 0);
  std::vector<float> logits(V);
  std::mt19937_64 rng(o.seed);
  // The prompt is printed once the first token's logits are known to be usable.
  if (o.tokens == 0) out << o.prompt;
  for (int64_t n = 0; n < o.tokens; ++n) {
    const int64_t len = std::min<int64_t>(T, context.size());
    const int64_t *window = context.data() + context.size() - len;
    std::fill(tokens.begin(), tokens.end(), 0);
    for (int64_t t = 0; t < len; ++t) {
      if (tokensDType == DType::I32) reinterpret_cast<int32_t *>(tokens.data())[t] = static_cast<int32_t>(window[t]);
      else reinterpret_cast<int64_t *>(tokens.data())[t] = window[t];
    }
    if (llvm::Error e = (*ex)->setInput(tc.tokens_input(), tokensDType, {B, T}, tokens.data())) return e;
    if (llvm::Error e = (*ex)->run()) return fail(plan.path + ": program 'forward': " + llvm::toString(std::move(e)));
    // Row 0, position len − 1 of the [B, T, V] logits.
    device.copyToHost(logits.data(), logitsRef->as<float>() + (len - 1) * V, V * sizeof(float));
    if (llvm::Error e = checkLogits(logits, plan, n, len - 1)) return e;
    int64_t next = pickToken(logits, o.temperature, rng);
    context.push_back(next);
    if (n == 0) out << o.prompt;
    if (text && next == o.tokenizer->eosId()) break;
    if (text) out << text->push(static_cast<serve::TokenId>(next));
    else out << static_cast<char>(next);
    out.flush();
  }
  if (text) out << text->finish();
  return llvm::Error::success();
}

}  // namespace colossal::runtime

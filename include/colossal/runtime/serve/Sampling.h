//===- Sampling.h - The next token from a row of logits, per request ------------*- C++ -*-===//
//
// Sampling for serving (docs/serving.md "Sampling"). A token is a pure function of one row of
// logits, the request's parameters, the tokens it has seen (for the repetition penalty), its seed
// and the index of the token being generated: nothing depends on the other rows of the batch or on
// how many draws other requests made. The random number is Philox4x32-10 (Salmon et al. 2011,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11) keyed by the seed, with the token index
// as its counter, so a request's draws repeat whatever the batch, the order, or preemption.
//
// The steps, in order (Hugging Face transformers' logits processors and warpers, in the order a
// GenerationConfig applies them; the same definitions as vLLM):
//  1. repetition penalty r (Keskar et al. 2019, CTRL §4.1): the logit l of every distinct token in
//     `history` becomes l / r if l > 0, else l · r;
//  2. temperature T: logits / T; T == 0 is greedy — the argmax of the penalized logits (ties: the
//     lowest id), and steps 3–6 are skipped;
//  3. top-k: keep the tokens whose logit is >= the k-th largest (ties with it are kept);
//  4. top-p: of what is left, in order of probability (ties: the lower id first), keep the
//     shortest prefix whose probability mass, renormalized over the kept tokens, reaches p; a token
//     is kept when the mass strictly before it is < p;
//  5. min-p: keep the tokens whose probability is >= min_p × the largest probability;
//  6. draw from the softmax of the kept logits (in double), by inverse CDF over ids in order with
//     one uniform u in [0, 1).
// Logprobs are of the model's distribution, log_softmax of the raw logits (vLLM's default
// "raw_logprobs"), computed only when asked for: the chosen token's and the `logprobs` most likely
// tokens' (ties: lower id).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_SAMPLING_H
#define COLOSSAL_RUNTIME_SERVE_SAMPLING_H

#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <vector>

namespace colossal::runtime::serve {

struct SamplingParams {
  double temperature = 1.0;        // >= 0; 0 = greedy
  int32_t topK = 0;                // 0 = off; else >= 1
  double topP = 1.0;               // (0, 1]; 1 = off
  double minP = 0.0;               // [0, 1]; 0 = off
  double repetitionPenalty = 1.0;  // > 0; 1 = off
  uint64_t seed = 0;
  int32_t logprobs = -1;           // -1: none; 0: the chosen token's; n: and the n most likely
};

/// An error naming the parameter (temperature, top_k, top_p, min_p, repetition_penalty, logprobs)
/// when one is out of its range or not finite.
llvm::Error validateSamplingParams(const SamplingParams &params);

struct TokenLogprob {
  TokenId id;
  double logprob;
};

struct SampledToken {
  TokenId id = -1;
  double logprob = 0;              // log_softmax(raw logits)[id] (0 when params.logprobs is -1)
  std::vector<TokenLogprob> top;   // the params.logprobs most likely, most likely first
};

/// Philox4x32-10: the four output words for a 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32x10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

/// Philox4x32-10's first output pair as a double in [0, 1): (53 bits of the two words) · 2⁻⁵³.
/// The counter is (token index low, high, `stream`, 0), the key the seed's two halves; `stream`
/// tells apart independent draws for one token.
double philoxUniform(uint64_t seed, uint64_t counter, uint32_t stream = 0);

/// Reusable buffers, so that sampling a token does not allocate once they have grown.
struct SamplingWorkspace {
  std::vector<double> logits, weights;
  std::vector<int32_t> order;
  std::vector<bool> kept;
};

/// The next token from `logits` [vocab] (float32, any finite or −inf values; NaN counts as −inf)
/// for a request with `params` whose tokens so far are `history`, generating its token number
/// `tokenIndex` (0 for the first generated token). Preconditions: params valid (history ids
/// outside the vocabulary are ignored). When every logit is −inf or NaN the result is id 0.
SampledToken sampleToken(llvm::ArrayRef<float> logits, const SamplingParams &params, llvm::ArrayRef<TokenId> history,
                         uint64_t tokenIndex, SamplingWorkspace &workspace);

/// `id`'s logprob under log_softmax(`logits`) (the raw model distribution; NaN counts as −inf)
/// and, for `top` > 0, the `top` most likely tokens' (ties: lower id) in `out.top`: what
/// sampleToken reports for params.logprobs = `top`. For a token chosen by another rule
/// (speculative decoding's acceptance).
SampledToken tokenLogprobs(llvm::ArrayRef<float> logits, TokenId id, int32_t top, SamplingWorkspace &workspace);

/// The probabilities sampleToken draws from for these inputs, one per id (zero for the filtered);
/// greedy puts 1 on the argmax. For tests and for speculative decoding's acceptance rule.
std::vector<double> samplingDistribution(llvm::ArrayRef<float> logits, const SamplingParams &params,
                                         llvm::ArrayRef<TokenId> history, SamplingWorkspace &workspace);

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_SAMPLING_H

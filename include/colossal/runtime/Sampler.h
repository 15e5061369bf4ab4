//===- Sampler.h - Text generation with a trained model ---------------------------*- C++ -*-===//
//
// `colossal-run M.cplan sample [--checkpoint DIR] --prompt TEXT --tokens N [--tokenizer FILE]
// [--temperature X --seed S]` (docs/training.md "Runtime"). Without a tokenizer token ids are bytes:
// the prompt's bytes are the first ids, each generated id is printed as one byte. With one
// (serve::Tokenizer: llama2.c tokenizer.bin, SentencePiece, tokenizer.json), the prompt is encoded
// with the tokenizer's BOS first, and the generated ids are decoded as a stream that never prints
// part of a UTF-8 character (serve::StreamDetokenizer); the tokenizer's EOS ends the text. Each new
// token runs program `forward` on the context placed in row 0 of its [B, T] tokens input (the other
// rows and the positions after the context are 0; the model must be causal, so they do not affect
// the logits read) and reads the logits at the context's last position. A context longer than T keeps its last T tokens (a sliding window).
// Temperature 0 takes the argmax (ties: the lowest id); temperature X > 0 samples from
// softmax(logits / X) with a 64-bit Mersenne Twister seeded with --seed.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SAMPLER_H
#define COLOSSAL_RUNTIME_SAMPLER_H

#include "colossal/runtime/Executor.h"
#include "colossal/runtime/StateStore.h"
#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <random>

namespace colossal::runtime {

struct SampleOptions {
  std::string prompt;        // its bytes are the first ids (non-empty); with a tokenizer: encoded after BOS
  /// Token ids <-> text for a model whose vocabulary is not bytes; null: ids are bytes.
  const serve::Tokenizer *tokenizer = nullptr;
  int64_t tokens = 0;        // how many tokens to generate
  double temperature = 0;    // 0: greedy
  uint64_t seed = 0;         // temperature sampling
  /// The job's communicators, for a plan whose forward holds collectives (tensor parallelism:
  /// every rank runs the sampler alike; callers print rank 0's text). Null on one rank.
  CommContext *comm = nullptr;
};

/// The next token from one row of logits [vocab]: argmax when temperature == 0 (ties: lowest id;
/// NaNs are never chosen unless all are NaN), else a draw from softmax(logits / temperature)
/// (computed in double, max-subtracted) using u = (rng() >> 11)·2⁻⁵³.
int64_t pickToken(llvm::ArrayRef<float> logits, double temperature, std::mt19937_64 &rng);

/// Generates `options.tokens` tokens after the prompt and writes the prompt, then each new token
/// as it is produced, to `out` (flushed per token). `states` holds the weights (a checkpoint
/// loaded into it, or the initial values). Errors: not a training plan (no TrainConfig naming
/// the tokens input and logits output); without a tokenizer: a vocabulary above 256 ids (not
/// byte-level), an empty prompt, or a prompt byte >= the vocabulary size (names the byte and its
/// offset); with one: a tokenizer with more ids than the model's vocabulary, an empty prompt when
/// the tokenizer has no BOS, the tokenizer's own encoding errors; a negative
/// temperature or token count; kernel errors; logits holding NaN or +inf, or only −inf (names the
/// generated token, its position and the id: weights that diverged give this, not NUL bytes).
/// The prompt is written once the first token's logits passed that check; generation stops early
/// at the tokenizer's EOS (which is not printed).
llvm::Error sampleText(const LoadedPlan &plan, const KernelRegistry &registry, Device &device, const StateStore &states,
                       const SampleOptions &options, llvm::raw_ostream &out);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_SAMPLER_H

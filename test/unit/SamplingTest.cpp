//===- SamplingTest.cpp - Sampling against exact filtered distributions ---------------------===//
//
// The reference distributions are computed here from the definitions in Sampling.h, written out
// differently from runtime/serve/Sampling.cpp (sorting pairs, explicit normalization, no
// logit-domain shortcut for min-p). Goodness of fit: Pearson's chi-square over 10,000 draws (token
// indices 0..9999 of one seed) against the expected counts, at significance 0.001; tokens the
// filters remove must never be drawn.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/serve/Sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>

using namespace colossal::runtime::serve;

namespace {

/// The toy vocabulary: 12 tokens, distinct logits, one tie (ids 4 and 5), one masked (−inf).
const std::vector<float> kLogits = {1.5f, -0.3f, 2.2f, 0.0f, 0.9f, 0.9f, -1.7f, 3.0f, -INFINITY, 0.4f, -2.5f, 1.1f};

/// The exact distribution of the definitions: penalty, temperature, top-k, top-p, min-p.
std::vector<double> referenceDistribution(const std::vector<float> &logits, const SamplingParams &p,
                                          const std::vector<TokenId> &history) {
  const int V = static_cast<int>(logits.size());
  std::vector<double> l(logits.begin(), logits.end());
  std::vector<bool> seen(V, false);
  for (TokenId id : history) seen[id] = true;
  for (int i = 0; i < V; ++i)
    if (seen[i]) l[i] = l[i] > 0 ? l[i] / p.repetitionPenalty : l[i] * p.repetitionPenalty;
  std::vector<double> probs(V, 0.0);
  if (p.temperature == 0) {
    probs[std::max_element(l.begin(), l.end()) - l.begin()] = 1;
    return probs;
  }
  std::vector<std::pair<double, int>> ranked;  // (scaled logit, id), most likely first
  for (int i = 0; i < V; ++i)
    if (l[i] != -INFINITY) ranked.push_back({l[i] / p.temperature, i});
  std::sort(ranked.begin(), ranked.end(),
            [](auto a, auto b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  auto softmax = [](const std::vector<std::pair<double, int>> &r) {
    std::vector<double> q;
    double z = 0;
    for (auto [x, id] : r) z += std::exp(x);
    for (auto [x, id] : r) q.push_back(std::exp(x) / z);
    return q;
  };
  if (p.topK > 0 && p.topK < static_cast<int>(ranked.size())) {
    const double kth = ranked[p.topK - 1].first;
    ranked.erase(std::remove_if(ranked.begin(), ranked.end(), [&](auto e) { return e.first < kth; }), ranked.end());
  }
  if (p.topP < 1) {
    const std::vector<double> q = softmax(ranked);
    double cumulative = 0;
    size_t keep = 0;
    while (keep < ranked.size() && cumulative < p.topP) cumulative += q[keep++];
    ranked.resize(std::max<size_t>(keep, 1));
  }
  if (p.minP > 0) {
    const std::vector<double> q = softmax(ranked);
    std::vector<std::pair<double, int>> kept;
    for (size_t i = 0; i < ranked.size(); ++i)
      if (q[i] >= p.minP * q[0]) kept.push_back(ranked[i]);
    ranked = kept;
  }
  const std::vector<double> q = softmax(ranked);
  for (size_t i = 0; i < ranked.size(); ++i) probs[ranked[i].second] = q[i];
  return probs;
}

/// The upper 0.001 point of chi-square with `df` degrees of freedom (Wilson–Hilferty; within 1%
/// of the tables for df >= 2, and a hair above them for df = 1).
double chiSquareCritical(int df) {
  const double z = 3.090232;  // the standard normal's 0.999 quantile
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct FitResult {
  double chi2;
  int df;
  double critical;
};

FitResult fitOf(const SamplingParams &params, const std::vector<TokenId> &history, const char *name) {
  const std::vector<double> expected = referenceDistribution(kLogits, params, history);
  SamplingWorkspace ws;
  // The runtime's own distribution agrees with the reference.
  const std::vector<double> runtime = samplingDistribution(kLogits, params, history, ws);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(runtime[i], expected[i], 1e-12) << name << " id " << i;
  const int N = 10000;
  std::vector<int> counts(kLogits.size(), 0);
  for (int t = 0; t < N; ++t) ++counts[sampleToken(kLogits, params, history, t, ws).id];
  double chi2 = 0;
  int support = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << name << ": id " << i << " is filtered out but was drawn";
      continue;
    }
    ++support;
    const double e = expected[i] * N;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  FitResult r{chi2, std::max(support - 1, 1), 0};
  r.critical = chiSquareCritical(r.df);
  std::printf("%-34s support %2d  chi2 %7.3f  df %2d  critical(0.001) %6.2f\n", name, support, chi2, r.df,
              r.critical);
  return r;
}

SamplingParams with(double temperature, int topK = 0, double topP = 1, double minP = 0, double penalty = 1,
                    uint64_t seed = 1234) {
  SamplingParams p;
  p.temperature = temperature;
  p.topK = topK;
  p.topP = topP;
  p.minP = minP;
  p.repetitionPenalty = penalty;
  p.seed = seed;
  return p;
}

TEST(Sampling, ChiSquareFitsTheFilteredDistributions) {
  const struct {
    const char *name;
    SamplingParams params;
    std::vector<TokenId> history;
  } cases[] = {
      {"temperature 1", with(1.0), {}},
      {"temperature 0.6", with(0.6), {}},
      {"temperature 2.5", with(2.5), {}},
      {"top-k 4", with(1.0, 4), {}},
      {"top-k 5 (tie at the 5th kept)", with(1.0, 5), {}},
      {"top-p 0.8", with(1.0, 0, 0.8), {}},
      {"top-p 0.5, temperature 1.7", with(1.7, 0, 0.5), {}},
      {"min-p 0.1", with(1.0, 0, 1, 0.1), {}},
      {"min-p 0.05, temperature 1.5", with(1.5, 0, 1, 0.05), {}},
      {"top-k 6, top-p 0.9, min-p 0.02", with(1.2, 6, 0.9, 0.02), {}},
      {"repetition penalty 1.8", with(1.0, 0, 1, 0, 1.8), {7, 2, 2, 6}},
  };
  for (const auto &c : cases) {
    const FitResult r = fitOf(c.params, c.history, c.name);
    EXPECT_LT(r.chi2, r.critical) << c.name;
  }
}

TEST(Sampling, GreedyIsTheArgmaxAfterThePenalty) {
  SamplingWorkspace ws;
  EXPECT_EQ(sampleToken(kLogits, with(0), {}, 0, ws).id, 7);
  // Penalized, id 7's 3.0 becomes 1.5 and id 2's 2.2 becomes 1.1: 1.5 ties id 0's, the lower id wins.
  EXPECT_EQ(sampleToken(kLogits, with(0, 0, 1, 0, 2.0), {7, 2, 7}, 0, ws).id, 0);
  // Negative logits are multiplied: a penalized −0.3 becomes −0.6.
  const std::vector<float> negative = {-0.3f, -0.5f};
  EXPECT_EQ(sampleToken(negative, with(0, 0, 1, 0, 2.0), {0}, 0, ws).id, 1);
}

TEST(Sampling, NaNIsMaskedAndAllMaskedGivesIdZero) {
  SamplingWorkspace ws;
  const std::vector<float> withNan = {NAN, 0.5f, NAN, -1.0f};
  for (int t = 0; t < 100; ++t) {
    const TokenId id = sampleToken(withNan, with(1.0), {}, t, ws).id;
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
  const std::vector<float> masked = {-INFINITY, NAN, -INFINITY};
  EXPECT_EQ(sampleToken(masked, with(1.0, 2, 0.5, 0.1), {}, 0, ws).id, 0);
  EXPECT_EQ(sampleToken(masked, with(0), {}, 0, ws).id, 0);
}

TEST(Sampling, SameSeedSameTokensOtherSeedOthers) {
  SamplingWorkspace ws;
  std::vector<TokenId> a, b, c;
  for (int t = 0; t < 200; ++t) {
    a.push_back(sampleToken(kLogits, with(1.3, 0, 0.95), {}, t, ws).id);
    b.push_back(sampleToken(kLogits, with(1.3, 0, 0.95), {}, t, ws).id);
    c.push_back(sampleToken(kLogits, with(1.3, 0, 0.95, 0, 1, 99), {}, t, ws).id);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampling, TokensDoNotDependOnTheBatch) {
  // Four requests with their own seeds and parameters, generated alone and then in batches of
  // changing composition and order (other rows random, of other lengths, with other seeds).
  const int V = 64;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 2);
  auto row = [&](int request, int step) {
    std::mt19937 r(request * 1000 + step);
    std::normal_distribution<float> n(0, 2);
    std::vector<float> l(V);
    for (float &x : l) x = n(r);
    return l;
  };
  const SamplingParams params[] = {with(0.8, 0, 0.9, 0, 1, 11), with(1.0, 8, 1, 0, 1.3, 12),
                                   with(1.5, 0, 1, 0.05, 1, 13),
                                   with(0.0, 0, 1, 0, 1.2, 14)};
  const int steps = 50;
  std::vector<std::vector<TokenId>> alone(4);
  SamplingWorkspace ws;
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < steps; ++s) alone[r].push_back(sampleToken(row(r, s), params[r], alone[r], s, ws).id);

  std::vector<std::vector<TokenId>> batched(4);
  SamplingWorkspace shared;
  for (int s = 0; s < steps; ++s) {
    std::vector<int> order = {0, 1, 2, 3};
    std::shuffle(order.begin(), order.end(), rng);
    for (int r : order) {
      // Unrelated rows before this one, drawing from the same workspace.
      for (int k = 0; k < int(rng() % 3); ++k) {
        std::vector<float> other(V);
        for (float &x : other) x = normal(rng);
        sampleToken(other, with(1.0, 0, 1, 0, 1, rng()), {}, rng() % 100, shared);
      }
      batched[r].push_back(sampleToken(row(r, s), params[r], batched[r], s, shared).id);
    }
  }
  EXPECT_EQ(batched, alone);
}

TEST(Sampling, LogprobsAreOfTheRawLogits) {
  SamplingParams p = with(0.5, 2);
  p.logprobs = 3;
  SamplingWorkspace ws;
  const SampledToken t = sampleToken(kLogits, p, {}, 0, ws);
  double z = 0;
  for (float l : kLogits) z += std::exp(double(l));
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].id, 7);
  EXPECT_EQ(t.top[1].id, 2);
  EXPECT_EQ(t.top[2].id, 0);
  EXPECT_NEAR(t.top[0].logprob, 3.0 - std::log(z), 1e-9);
  EXPECT_NEAR(t.logprob, double(kLogits[t.id]) - std::log(z), 1e-9);
  EXPECT_TRUE(t.id == 7 || t.id == 2);  // top-k 2
  // logprobs -1 (the default): none computed; 0: the chosen token's only.
  p.logprobs = -1;
  EXPECT_TRUE(sampleToken(kLogits, p, {}, 0, ws).top.empty());
  p.logprobs = 0;
  const SampledToken chosen = sampleToken(kLogits, p, {}, 0, ws);
  EXPECT_TRUE(chosen.top.empty());
  EXPECT_NEAR(chosen.logprob, double(kLogits[chosen.id]) - std::log(z), 1e-9);
}

TEST(Sampling, LargeVocabularyTopPMatchesTheReference) {
  // 50,257 logits (GPT-2's vocabulary size): top-p ranks the nucleus in rounds of 64, 256, ...
  // and must keep exactly what a full sort keeps.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> logits(50257);
  for (float &x : logits) x = normal(rng);
  SamplingWorkspace ws;
  for (const SamplingParams &p : {with(0.8, 0, 0.9), with(1.5, 0, 0.99), with(1.0, 300, 0.7, 0.001), with(0.5, 0, 0.3)}) {
    std::vector<float> copy = logits;
    const std::vector<double> q = samplingDistribution(copy, p, {}, ws);
    // Reference: a full sort.
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<double> l(logits.begin(), logits.end());
    for (double &x : l) x /= p.temperature;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
    size_t support = 0;
    for (double x : q) support += x > 0;
    size_t kept = p.topK > 0 ? p.topK : order.size();
    double z = 0;
    for (size_t i = 0; i < kept; ++i) z += std::exp(l[order[i]] - l[order[0]]);
    double before = 0;
    size_t n = 0;
    while (n < kept && before < p.topP) before += std::exp(l[order[n++]] - l[order[0]]) / z;
    kept = n;
    if (p.minP > 0)
      while (kept > 1 && std::exp(l[order[kept - 1]] - l[order[0]]) < p.minP) --kept;
    EXPECT_EQ(support, kept) << "temperature " << p.temperature << " top_p " << p.topP;
    for (size_t i = 0; i < kept; ++i) EXPECT_GT(q[order[i]], 0) << "rank " << i;
  }
}

TEST(Sampling, PhiloxMatchesTheKnownAnswers) {
  // Random123's known-answer vectors for philox4x32 with 10 rounds.
  EXPECT_EQ(philox4x32x10({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32x10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32x10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  const double u = philoxUniform(42, 7);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

TEST(Sampling, InvalidParametersNameTheParameter) {
  auto message = [](SamplingParams p) {
    llvm::Error e = validateSamplingParams(p);
    return e ? llvm::toString(std::move(e)) : std::string();
  };
  EXPECT_EQ(message(with(1.0)), "");
  EXPECT_NE(message(with(-0.1)).find("temperature"), std::string::npos);
  EXPECT_NE(message(with(NAN)).find("temperature"), std::string::npos);
  EXPECT_NE(message(with(1.0, -1)).find("top_k"), std::string::npos);
  EXPECT_NE(message(with(1.0, 0, 0)).find("top_p"), std::string::npos);
  EXPECT_NE(message(with(1.0, 0, 1.5)).find("top_p"), std::string::npos);
  EXPECT_NE(message(with(1.0, 0, 1, 1.5)).find("min_p"), std::string::npos);
  EXPECT_NE(message(with(1.0, 0, 1, 0, 0)).find("repetition_penalty"), std::string::npos);
  SamplingParams p;
  p.logprobs = -2;
  EXPECT_NE(message(p).find("logprobs"), std::string::npos);
}

}  // namespace

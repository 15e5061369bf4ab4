//===- Sampling.cpp - Repetition penalty, temperature, top-k, top-p, min-p, Philox ----------===//
#include "colossal/runtime/serve/Sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

namespace colossal::runtime::serve {

namespace {
llvm::Error badParam(const char *name, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), (llvm::Twine(name) + " " + msg).str());
}
std::string str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}  // namespace

llvm::Error validateSamplingParams(const SamplingParams &p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return badParam("temperature", "must be finite and >= 0, not " + str(p.temperature));
  if (p.topK < 0) return badParam("top_k", "must be >= 0 (0 = off), not " + llvm::Twine(p.topK));
  if (!(p.topP > 0 && p.topP <= 1)) return badParam("top_p", "must be in (0, 1], not " + str(p.topP));
  if (!(p.minP >= 0 && p.minP <= 1)) return badParam("min_p", "must be in [0, 1], not " + str(p.minP));
  if (!std::isfinite(p.repetitionPenalty) || p.repetitionPenalty <= 0)
    return badParam("repetition_penalty", "must be finite and > 0, not " + str(p.repetitionPenalty));
  if (p.logprobs < -1) return badParam("logprobs", "must be >= -1 (-1 = none), not " + llvm::Twine(p.logprobs));
  return llvm::Error::success();
}

// Philox4x32 with 10 rounds: each round multiplies two of the four counter words by the Philox
// constants, mixes the high and low halves of the products with the key, and bumps the key by the
// Weyl constants (Salmon et al. 2011, §4.3).
std::array<uint32_t, 4> philox4x32x10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57, kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c[0], p1 = uint64_t(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

double philoxUniform(uint64_t seed, uint64_t counter, uint32_t stream) {
  const auto r = philox4x32x10({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), stream, 0},
                               {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t bits = ((uint64_t(r[0]) << 32) | r[1]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

namespace {

/// Steps 1–5 of Sampling.h: ws.logits holds the penalized, temperature-scaled logits with the
/// filtered ones at −inf. Returns the argmax of the penalized logits (ties: lowest id), which no
/// filter removes. Without top-k/top-p/min-p nothing is ranked; top-k and min-p are thresholds
/// (one selection, one pass); top-p ranks only as many of the most likely tokens as it needs,
/// selecting 64, 256, 1024, ... of them until the mass reaches p.
int32_t filteredLogits(llvm::ArrayRef<float> logits, const SamplingParams &p, llvm::ArrayRef<TokenId> history,
                       SamplingWorkspace &ws) {
  const int32_t V = static_cast<int32_t>(logits.size());
  ws.logits.assign(logits.begin(), logits.end());
  for (double &l : ws.logits)
    if (std::isnan(l)) l = kNegInf;
  if (p.repetitionPenalty != 1.0) {
    ws.kept.assign(V, false);  // here: "already penalized", so each distinct token is penalized once
    for (TokenId id : history) {
      if (id < 0 || id >= V || ws.kept[id]) continue;
      ws.kept[id] = true;
      double &l = ws.logits[id];
      l = l > 0 ? l / p.repetitionPenalty : l * p.repetitionPenalty;
    }
  }
  int32_t best = 0;
  for (int32_t i = 1; i < V; ++i)
    if (ws.logits[i] > ws.logits[best]) best = i;
  if (p.temperature == 0) return best;
  for (double &l : ws.logits) l /= p.temperature;
  if (p.topK == 0 && p.topP >= 1 && p.minP == 0) return best;
  const double maxLogit = ws.logits[best];
  if (maxLogit == kNegInf) return best;

  // The candidates, in id order; `ranked` is the order top-k and top-p read (logit descending,
  // ties by id), a strict total order so that any selection of the first n is well defined.
  std::vector<int32_t> &cand = ws.order;
  cand.clear();
  for (int32_t i = 0; i < V; ++i)
    if (ws.logits[i] != kNegInf) cand.push_back(i);
  auto ranked = [&](int32_t a, int32_t b) {
    return ws.logits[a] != ws.logits[b] ? ws.logits[a] > ws.logits[b] : a < b;
  };
  auto keepIf = [&](auto pred) {
    cand.erase(std::remove_if(cand.begin(), cand.end(), [&](int32_t i) { return !pred(i); }), cand.end());
  };
  if (p.topK > 0 && p.topK < static_cast<int32_t>(cand.size())) {
    std::nth_element(cand.begin(), cand.begin() + (p.topK - 1), cand.end(), ranked);
    const double kth = ws.logits[cand[p.topK - 1]];
    keepIf([&](int32_t i) { return ws.logits[i] >= kth; });  // ties with the k-th stay
  }
  if (p.topP < 1) {
    double z = 0;
    for (int32_t i : cand) z += std::exp(ws.logits[i] - maxLogit);
    for (size_t n = std::min<size_t>(64, cand.size());; n = std::min(n * 4, cand.size())) {
      std::nth_element(cand.begin(), cand.begin() + (n - 1), cand.end(), ranked);
      std::sort(cand.begin(), cand.begin() + n, ranked);
      double before = 0;
      size_t keep = 0;
      while (keep < n && before < p.topP) before += std::exp(ws.logits[cand[keep++]] - maxLogit) / z;
      if (before >= p.topP || n == cand.size()) {
        cand.resize(std::max<size_t>(keep, 1));
        break;
      }
    }
  }
  if (p.minP > 0) {
    // p_i >= min_p · p_max  <=>  l_i − l_max >= log(min_p), whatever the normalization.
    const double threshold = maxLogit + std::log(p.minP);
    keepIf([&](int32_t i) { return ws.logits[i] >= threshold; });
  }
  ws.kept.assign(V, false);
  for (int32_t i : cand) ws.kept[i] = true;
  for (int32_t i = 0; i < V; ++i)
    if (!ws.kept[i]) ws.logits[i] = kNegInf;
  return best;
}

/// ws.weights = exp(ws.logits − max) for the kept tokens; returns their sum.
double weights(int32_t best, SamplingWorkspace &ws) {
  const double m = ws.logits[best];  // the argmax survives every filter
  ws.weights.resize(ws.logits.size());
  double z = 0;
  for (size_t i = 0; i < ws.logits.size(); ++i) z += ws.weights[i] = std::exp(ws.logits[i] - m);
  return z;
}

}  // namespace

std::vector<double> samplingDistribution(llvm::ArrayRef<float> logits, const SamplingParams &p,
                                         llvm::ArrayRef<TokenId> history, SamplingWorkspace &ws) {
  const int32_t best = filteredLogits(logits, p, history, ws);
  std::vector<double> probs(logits.size(), 0.0);
  if (p.temperature == 0 || ws.logits[best] == kNegInf) {
    probs[best] = 1;
    return probs;
  }
  const double z = weights(best, ws);
  for (size_t i = 0; i < probs.size(); ++i) probs[i] = ws.weights[i] / z;
  return probs;
}

SampledToken sampleToken(llvm::ArrayRef<float> logits, const SamplingParams &p, llvm::ArrayRef<TokenId> history,
                         uint64_t tokenIndex, SamplingWorkspace &ws) {
  const int32_t V = static_cast<int32_t>(logits.size());
  SampledToken out;
  const int32_t best = filteredLogits(logits, p, history, ws);
  if (p.temperature == 0 || ws.logits[best] == kNegInf) {  // greedy, or nothing to draw from
    out.id = best;
  } else {
    double u = philoxUniform(p.seed, tokenIndex) * weights(best, ws);
    out.id = best;  // if rounding leaves u above the running total
    for (int32_t i = 0; i < V; ++i) {
      const double w = ws.weights[i];
      if (w == 0) continue;
      if (u < w) {
        out.id = i;
        break;
      }
      u -= w;
    }
  }
  if (p.logprobs < 0) return out;
  return tokenLogprobs(logits, out.id, p.logprobs, ws);
}

SampledToken tokenLogprobs(llvm::ArrayRef<float> logits, TokenId id, int32_t top, SamplingWorkspace &ws) {
  const int32_t V = static_cast<int32_t>(logits.size());
  SampledToken out;
  out.id = id;
  // Logprobs of the raw logits.
  double m = kNegInf;
  for (float l : logits)
    if (!std::isnan(l)) m = std::max(m, double(l));
  double z = 0;
  for (float l : logits)
    if (!std::isnan(l)) z += std::exp(double(l) - m);
  const double logZ = m + std::log(z);
  auto logprob = [&](TokenId t) {
    const float l = logits[t];
    return std::isnan(l) ? kNegInf : double(l) - logZ;
  };
  out.logprob = logprob(out.id);
  if (top > 0) {
    const int32_t n = std::min(top, V);
    ws.order.resize(V);
    std::iota(ws.order.begin(), ws.order.end(), 0);
    std::partial_sort(ws.order.begin(), ws.order.begin() + n, ws.order.end(), [&](int32_t a, int32_t b) {
      const double la = logprob(a), lb = logprob(b);
      return la != lb ? la > lb : a < b;
    });
    out.top.reserve(n);
    for (int32_t i = 0; i < n; ++i) out.top.push_back({ws.order[i], logprob(ws.order[i])});
  }
  return out;
}

}  // namespace colossal::runtime::serve

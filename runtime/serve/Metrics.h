//===- Metrics.h - The server's Prometheus counters, gauges and histograms ------*- C++ -*-===//
//
// What GET /metrics shows (docs/serving.md "Server"), in the Prometheus text exposition format
// (version 0.0.4): `# HELP` and `# TYPE` lines, then samples; histograms as cumulative
// `_bucket{le="..."}` counts with `+Inf`, `_sum` and `_count`. Not thread-safe: the engine guards
// it with its mutex.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_METRICS_H
#define COLOSSAL_RUNTIME_SERVE_METRICS_H

#include <cstdint>
#include <string>
#include <vector>

namespace colossal::runtime::serve {

class Histogram {
public:
  /// `bounds`: the buckets' upper bounds, increasing (seconds).
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  /// Appends the Prometheus text of the histogram `name`: its _bucket lines (cumulative, `le`
  /// after `labels`), _sum and _count, each with `labels` (`key="value",...`; may be empty).
  void render(std::string &out, const char *name, const char *help, const std::string &labels = "") const;
  uint64_t count() const { return count_; }

private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct ServingMetrics {
  // Gauges, after the last step.
  int64_t running = 0, waiting = 0;
  int32_t kvBlocks = 0, kvBlocksUsed = 0;  // blocks referenced by live sequences
  // Counters since start.
  int64_t promptTokens = 0;      // prompt tokens of the accepted choices
  int64_t prefillTokens = 0;     // prompt tokens computed (prefix-cache hits and preemption change it)
  int64_t generationTokens = 0;  // tokens sampled and delivered
  int64_t prefixQueriedTokens = 0, prefixHitTokens = 0;
  int64_t preemptions = 0, steps = 0, modelErrors = 0;
  int64_t finishedStop = 0, finishedLength = 0, aborted = 0, failed = 0;
  int64_t rejected = 0;  // requests answered with 4xx
  // Speculative decoding (shown when `speculative`): drafts proposed and accepted, verifications
  // (target chunks with drafts) and the tokens they emitted.
  bool speculative = false;
  int64_t specDraftTokens = 0, specAcceptedTokens = 0, specVerifications = 0, specEmittedTokens = 0;
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}};
  Histogram tpot{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}};
  Histogram e2e{{0.01, 0.05, 0.1, 0.3, 0.5, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120}};

  /// The exposition text; `model` labels every sample (model_name="...").
  std::string render(const std::string &model) const;
};

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_METRICS_H

//===- Metrics.cpp - Prometheus text exposition of the server's metrics ---------------------===//
#include "Metrics.h"

#include <cstdio>
#include <cstdlib>

namespace colossal::runtime::serve {

namespace {
/// The shortest decimal that reads back as v (0.005, not 0.0050000000000000001).
std::string num(double v) {
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}
void header(std::string &out, const char *name, const char *type, const char *help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}
}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string &out, const char *name, const char *help, const std::string &labels) const {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  const std::string prefix = labels.empty() ? "" : labels + ",";
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name;
    out += "_bucket{" + prefix + "le=\"";
    out += i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    out += "\"} " + std::to_string(cumulative) + "\n";
  }
  const std::string set = labels.empty() ? "" : "{" + labels + "}";
  out += std::string(name) + "_sum" + set + " " + num(sum_) + "\n";
  out += std::string(name) + "_count" + set + " " + std::to_string(count_) + "\n";
}

std::string ServingMetrics::render(const std::string &modelName) const {
  std::string model;  // a label value: backslash, quote and line feed escaped
  for (char c : modelName) {
    if (c == '\\' || c == '"') model += '\\';
    model += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  std::string out;
  auto sample = [&](const char *name, const char *type, const char *help, double v) {
    header(out, name, type, help);
    out += name;
    out += "{model_name=\"" + model + "\"} " + num(v) + "\n";
  };
  sample("colossal_requests_running", "gauge", "Requests with a sequence in the running batch.", running);
  sample("colossal_requests_waiting", "gauge", "Requests waiting to be admitted (or preempted).", waiting);
  sample("colossal_kv_cache_usage_ratio", "gauge", "KV-cache blocks referenced by live sequences / all blocks.",
         kvBlocks ? double(kvBlocksUsed) / kvBlocks : 0.0);
  sample("colossal_kv_cache_blocks", "gauge", "KV-cache blocks in the pool.", kvBlocks);
  sample("colossal_prompt_tokens_total", "counter", "Prompt tokens of the accepted requests.", promptTokens);
  sample("colossal_prefill_tokens_total", "counter", "Prompt tokens computed (cache hits are not).", prefillTokens);
  sample("colossal_generation_tokens_total", "counter", "Tokens generated.", generationTokens);
  sample("colossal_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         prefixQueriedTokens);
  sample("colossal_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", prefixHitTokens);
  sample("colossal_preemptions_total", "counter", "Sequences preempted (recomputed later).", preemptions);
  sample("colossal_engine_steps_total", "counter", "Model steps run.", steps);
  sample("colossal_model_errors_total", "counter", "Model steps that failed.", modelErrors);
  header(out, "colossal_request_success_total", "counter", "Choices finished, by finish reason.");
  out += "colossal_request_success_total{model_name=\"" + model + "\",finished_reason=\"stop\"} " +
         std::to_string(finishedStop) + "\n";
  out += "colossal_request_success_total{model_name=\"" + model + "\",finished_reason=\"length\"} " +
         std::to_string(finishedLength) + "\n";
  sample("colossal_request_aborted_total", "counter", "Choices aborted (the client went away).", aborted);
  sample("colossal_request_failed_total", "counter", "Choices failed by a model error or shutdown.", failed);
  sample("colossal_request_rejected_total", "counter", "Requests refused with a 4xx answer.", rejected);
  if (speculative) {
    sample("colossal_spec_decode_num_drafts_total", "counter",
           "Speculative verifications: target chunks that checked at least one draft.", specVerifications);
    sample("colossal_spec_decode_draft_tokens_total", "counter", "Draft tokens proposed and verified.",
           specDraftTokens);
    sample("colossal_spec_decode_accepted_tokens_total", "counter", "Draft tokens accepted.", specAcceptedTokens);
    sample("colossal_spec_decode_emitted_tokens_total", "counter",
           "Tokens emitted by speculative verifications (accepted drafts and the target's own).", specEmittedTokens);
  }
  const std::string label = "model_name=\"" + model + "\"";
  ttft.render(out, "colossal_time_to_first_token_seconds", "Time from arrival to the first token.", label);
  tpot.render(out, "colossal_time_per_output_token_seconds",
              "Per choice: (finish - first token) / (tokens - 1), for choices of 2 tokens or more.", label);
  e2e.render(out, "colossal_e2e_request_latency_seconds", "Time from arrival to the last token.", label);
  return out;
}

}  // namespace colossal::runtime::serve

//===- llama_harness.cpp - llama.cpp as the serving benchmark's peer ------------------------===//
//
// Runs groups of requests through llama.cpp's C API (llama.h of the node-llama-cpp release the
// benchmark pins; bench/serve/run.sh compiles this file against the shared libraries the package
// ships) the way llama-bench drives it: one context, a persistent ggml threadpool attached to it,
// one llama_decode per step over every sequence of the group (the prompts together, then one token
// per sequence per step), greedy (argmax, lowest id on ties), end of sequence ignored.
//
//   llama_harness --model M.gguf --lib-dir DIR --threads N --requests FILE --config exact|default
//                 --timings OUT.json
//
// FILE: one request per line, `GROUP ID MAX_TOKENS TOKEN...`; consecutive lines of one GROUP run
// together, a group starting when the previous one is done (its arrival time). Configs: `exact` is
// f32 end to end (the GGUF's f32 weights, f32 KV cache, flash attention off); `default` is
// llama.cpp's context defaults (f16 KV cache, flash attention auto) over the same weights.
// OUT.json: {"wall_s", "requests": [{"id", "arrival_s", "token_s": [...], "token_ids": [...]}]},
// times in seconds since the first group started (bench/serve/report.py reads it).
//
//===----------------------------------------------------------------------------------------===//
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Request {
  std::string group, id;
  int maxTokens = 0;
  std::vector<llama_token> prompt;
  double arrival = 0;
  std::vector<double> tokenTimes;
  std::vector<llama_token> tokens;
};

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "llama_harness: %s\n", msg.c_str());
  std::exit(1);
}

std::vector<Request> readRequests(const std::string &path) {
  std::ifstream in(path);
  if (!in) die("cannot read " + path);
  std::vector<Request> requests;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Request r;
    if (!(fields >> r.group >> r.id >> r.maxTokens)) continue;
    for (llama_token t; fields >> t;) r.prompt.push_back(t);
    if (r.prompt.empty() || r.maxTokens < 1) die(path + ": request " + r.id + " needs a prompt and MAX_TOKENS >= 1");
    requests.push_back(std::move(r));
  }
  if (requests.empty()) die(path + ": no requests");
  return requests;
}

llama_token argmax(const float *logits, int vocab) {
  return static_cast<llama_token>(std::max_element(logits, logits + vocab) - logits);
}

void addToken(llama_batch &batch, llama_token token, llama_pos pos, llama_seq_id seq, bool logits) {
  const int i = batch.n_tokens++;
  batch.token[i] = token;
  batch.pos[i] = pos;
  batch.n_seq_id[i] = 1;
  batch.seq_id[i][0] = seq;
  batch.logits[i] = logits;
}

/// Runs one group: the prompts in one batch, then decode steps until every request has its tokens.
void runGroup(llama_context *ctx, llama_batch &batch, int vocab, std::vector<Request *> &group,
              std::chrono::steady_clock::time_point start) {
  auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  llama_memory_clear(llama_get_memory(ctx), true);
  const double arrival = now();
  batch.n_tokens = 0;
  for (size_t s = 0; s < group.size(); ++s) {
    Request &r = *group[s];
    r.arrival = arrival;
    for (size_t p = 0; p < r.prompt.size(); ++p)
      addToken(batch, r.prompt[p], static_cast<llama_pos>(p), static_cast<llama_seq_id>(s), p + 1 == r.prompt.size());
  }
  std::vector<int> row(group.size());  // the batch row whose logits each sequence reads
  for (int i = 0, s = 0; i < batch.n_tokens; ++i)
    if (batch.logits[i]) row[s++] = i;
  for (bool first = true;; first = false) {
    if (int rc = llama_decode(ctx, batch)) die("llama_decode returned " + std::to_string(rc));
    const double t = now();
    bool more = false;
    for (size_t s = 0; s < group.size(); ++s) {
      Request &r = *group[s];
      if (!first && static_cast<int>(r.tokens.size()) >= r.maxTokens) continue;
      r.tokens.push_back(argmax(llama_get_logits_ith(ctx, row[s]), vocab));
      r.tokenTimes.push_back(t);
      more |= static_cast<int>(r.tokens.size()) < r.maxTokens;
    }
    if (!more) break;
    batch.n_tokens = 0;
    for (size_t s = 0; s < group.size(); ++s) {
      Request &r = *group[s];
      if (static_cast<int>(r.tokens.size()) >= r.maxTokens) continue;
      row[s] = batch.n_tokens;
      addToken(batch, r.tokens.back(), static_cast<llama_pos>(r.prompt.size() + r.tokens.size() - 1),
               static_cast<llama_seq_id>(s), true);
    }
  }
}

void writeTimings(const std::string &path, const std::vector<Request> &requests, double wall) {
  std::ofstream out(path);
  if (!out) die("cannot write " + path);
  out << "{\"wall_s\": " << wall << ", \"requests\": [";
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request &r = requests[i];
    out << (i ? ",\n" : "\n") << "{\"id\": \"" << r.id << "\", \"arrival_s\": " << r.arrival << ", \"token_s\": [";
    for (size_t j = 0; j < r.tokenTimes.size(); ++j) out << (j ? ", " : "") << r.tokenTimes[j];
    out << "], \"token_ids\": [";
    for (size_t j = 0; j < r.tokens.size(); ++j) out << (j ? ", " : "") << r.tokens[j];
    out << "]}";
  }
  out << "]}\n";
}

void quietLog(ggml_log_level level, const char *text, void *) {
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char **argv) {
  std::string modelPath, libDir, requestsPath, config = "exact", timingsPath;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--model") modelPath = value;
    else if (flag == "--lib-dir") libDir = value;
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--requests") requestsPath = value;
    else if (flag == "--config") config = value;
    else if (flag == "--timings") timingsPath = value;
    else die("unknown flag " + flag);
  }
  if (modelPath.empty() || libDir.empty() || requestsPath.empty() || timingsPath.empty() || threads < 1 ||
      (config != "exact" && config != "default"))
    die("usage: llama_harness --model M.gguf --lib-dir DIR --threads N --requests FILE --config exact|default "
        "--timings OUT.json");
  std::vector<Request> requests = readRequests(requestsPath);

  llama_log_set(quietLog, nullptr);
  ggml_backend_load_all_from_path(libDir.c_str());
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model *model = llama_model_load_from_file(modelPath.c_str(), mp);
  if (!model) die("cannot load " + modelPath);
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  // The context holds the largest group; each sequence its longest request.
  size_t maxGroup = 0, maxLen = 0, maxPrompt = 0;
  for (size_t i = 0; i < requests.size();) {
    size_t j = i, tokens = 0;
    for (; j < requests.size() && requests[j].group == requests[i].group; ++j) {
      maxLen = std::max(maxLen, requests[j].prompt.size() + requests[j].maxTokens);
      tokens += requests[j].prompt.size();
    }
    maxGroup = std::max(maxGroup, j - i);
    maxPrompt = std::max(maxPrompt, tokens);
    i = j;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_seq_max = static_cast<uint32_t>(maxGroup);
  cp.n_ctx = static_cast<uint32_t>(maxGroup * ((maxLen + 255) / 256 * 256));
  cp.n_batch = static_cast<uint32_t>(std::max<size_t>(maxPrompt, cp.n_batch));
  cp.n_threads = cp.n_threads_batch = threads;
  cp.no_perf = true;
  if (config == "exact") {
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }
  llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create a context");

  // A persistent threadpool, as llama-bench attaches one (the CPU backend exports its constructor).
  ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
  if (!cpu) die("no CPU backend in " + libDir);
  auto newPool = reinterpret_cast<decltype(ggml_threadpool_new) *>(ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_new"));
  auto freePool = reinterpret_cast<decltype(ggml_threadpool_free) *>(ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_free"));
  if (!newPool || !freePool) die("the CPU backend exports no threadpool");
  ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
  ggml_threadpool *pool = newPool(&tpp);
  if (!pool) die("cannot create a threadpool of " + std::to_string(threads));
  llama_attach_threadpool(ctx, pool, nullptr);
  std::fprintf(stderr, "llama_harness: %s, config %s, %d threads, n_ctx %u, n_seq_max %u; %s\n", modelPath.c_str(),
               config.c_str(), threads, cp.n_ctx, cp.n_seq_max, llama_print_system_info());

  llama_batch batch = llama_batch_init(static_cast<int32_t>(std::max(maxPrompt, maxGroup)), 0, 1);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < requests.size();) {
    std::vector<Request *> group;
    for (size_t j = i; j < requests.size() && requests[j].group == requests[i].group; ++j) group.push_back(&requests[j]);
    runGroup(ctx, batch, vocab, group, start);
    i += group.size();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  writeTimings(timingsPath, requests, wall);

  llama_batch_free(batch);
  llama_free(ctx);
  freePool(pool);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

//===- toy_server.cpp - The HTTP server over the toy decoder, for tests and docs ------------===//
//
//   colossal-serve-toy --tokenizer TOK [--host 127.0.0.1] [--port 8000] [--chat-template FILE]
//                      [--model-name toy] [--max-seq-len 384] [--block-size 16] [--kv-blocks N]
//                      [--max-batch-seqs 16] [--max-batch-tokens 64] [--step-delay-ms 0]
//
// Serves test/unit/ToyDecoder.h (random weights, the real paged KV-cache kernels) with a real
// tokenizer, whose vocabulary is the model's: what `colossal-run M.cplan serve` does with a
// compiled plan, so that the server can be driven end to end before a plan serves.
//
//===----------------------------------------------------------------------------------------===//
#include "ToyDecoder.h"

#include "colossal/runtime/serve/Server.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <thread>

using namespace colossal::runtime;
using namespace colossal::runtime::serve;

namespace {

namespace cl = llvm::cl;
cl::opt<std::string> tokenizerPath("tokenizer", cl::desc("tokenizer file (tokenizer.bin, .model, tokenizer.json)"),
                                   cl::Required);
cl::opt<std::string> host("host", cl::desc("address to listen on"), cl::init("127.0.0.1"));
cl::opt<int> port("port", cl::desc("port (0: any free one)"), cl::init(8000));
cl::opt<std::string> chatTemplate("chat-template", cl::desc("chat template file"), cl::init(""));
cl::opt<std::string> modelName("model-name", cl::desc("the model's name in the API"), cl::init("toy"));
cl::opt<int64_t> maxSeqLen("max-seq-len", cl::desc("context length"), cl::init(384));
cl::opt<int32_t> blockSize("block-size", cl::desc("KV-cache block size"), cl::init(16));
cl::opt<int32_t> kvBlocks("kv-blocks", cl::desc("KV-cache blocks (0: max-batch-seqs × ⌈max-seq-len / block-size⌉)"),
                          cl::init(0));
cl::opt<int32_t> maxBatchSeqs("max-batch-seqs", cl::desc("sequences per step"), cl::init(16));
cl::opt<int64_t> maxBatchTokens("max-batch-tokens", cl::desc("query tokens per step (0: no limit)"), cl::init(64));
cl::opt<bool> quiet("quiet", cl::desc("no per-request log lines"), cl::init(false));
cl::opt<int> stepDelayMs("step-delay-ms", cl::desc("sleep this long in every step (tests of slow models)"),
                         cl::init(0));

class ToyStepModel : public StepModel {
public:
  explicit ToyStepModel(const SchedulerConfig &c) : config_(c), decoder_(c) {}
  const SchedulerConfig &config() const override { return config_; }
  llvm::Error step(const StepBatch &batch, llvm::MutableArrayRef<float> logits) override {
    if (stepDelayMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(stepDelayMs));
    return decoder_(batch, logits);
  }

private:
  SchedulerConfig config_;
  colossal::runtime::testing::ToyDecoder decoder_;
};

}  // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "HTTP server over the toy decoder (tests, docs)\n");
  auto tok = loadTokenizer(tokenizerPath);
  if (!tok) {
    llvm::errs() << "colossal-serve-toy: " << llvm::toString(tok.takeError()) << "\n";
    return 1;
  }
  SchedulerConfig c;
  c.maxSeqLen = maxSeqLen;
  c.blockSize = blockSize;
  c.maxBatchSeqs = maxBatchSeqs;
  c.maxBatchTokens = maxBatchTokens;
  c.numBlocks =
      kvBlocks > 0 ? kvBlocks : static_cast<int32_t>(maxBatchSeqs * ((maxSeqLen + blockSize - 1) / blockSize));
  c.vocabSize = (*tok)->vocabSize();
  ToyStepModel model(c);
  ServerOptions options;
  options.host = host;
  options.port = port;
  options.modelName = modelName;
  options.chatTemplate = chatTemplate;
  options.quiet = quiet;
  auto server = Server::create(model, **tok, options);
  if (!server) {
    llvm::errs() << "colossal-serve-toy: " << llvm::toString(server.takeError()) << "\n";
    return 1;
  }
  if (llvm::Error e = (*server)->run()) {
    llvm::errs() << "colossal-serve-toy: " << llvm::toString(std::move(e)) << "\n";
    return 1;
  }
  return 0;
}

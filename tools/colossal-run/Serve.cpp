//===- Serve.cpp - colossal-run MODEL.cplan serve --------------------------------------------===//
//
// Generate.h: the OpenAI-compatible server (runtime/serve/Server.cpp) over a `mode: generate`
// plan's PlanModel. Built without cpp-httplib / nlohmann-json (COLOSSAL_HAVE_SERVER off), `serve`
// is an error that says what to install.
//
//===----------------------------------------------------------------------------------------===//
#include "Generate.h"
#include "Parallel.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/serve/PlanModel.h"
#include "colossal/runtime/serve/Server.h"
#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace colossal::tools {
namespace {

namespace cl = llvm::cl;
using namespace colossal::runtime;
using namespace colossal::runtime::serve;

cl::OptionCategory &category() {
  static cl::OptionCategory c("serve options (colossal-run MODEL.cplan serve ...)");
  return c;
}
cl::opt<std::string> host("host", cl::desc("Address to listen on"), cl::init("127.0.0.1"), cl::cat(category()));
cl::opt<int> port("port", cl::desc("Port to listen on (0: a free one, printed)"), cl::init(8000), cl::cat(category()));
cl::opt<std::string> modelName("model-name", cl::desc("The model name requests give and /v1/models lists (default: the plan's file stem)"),
                               cl::cat(category()));
cl::opt<std::string> chatTemplate("chat-template", cl::desc("Chat template file (docs/serving.md \"Chat templates\")"),
                                  cl::value_desc("FILE"), cl::cat(category()));
cl::opt<bool> quiet("quiet", cl::desc("No per-request log lines"), cl::cat(category()));

int fail(const llvm::Twine &msg) {
  if (isPrintingRank()) llvm::errs() << ("error: " + msg + "\n").str();
  return 1;
}
int fail(llvm::Error e) { return fail(llvm::toString(std::move(e))); }

/// `model` under the scheduler flags' configuration (schedulerConfig()).
class ConfiguredModel : public StepModel {
public:
  ConfiguredModel(StepModel &model, SchedulerConfig config) : model_(model), config_(std::move(config)) {}
  const SchedulerConfig &config() const override { return config_; }
  llvm::Error step(const StepBatch &batch, llvm::MutableArrayRef<float> logits) override {
    return model_.step(batch, logits);
  }

private:
  StepModel &model_;
  SchedulerConfig config_;
};

}  // namespace

llvm::cl::OptionCategory &serveCategory() { return category(); }

std::vector<llvm::cl::Option *> serveOnlyOptions() { return {&host, &port, &modelName, &chatTemplate, &quiet}; }

int serveMain(const LoadedPlan &plan, Device &device, CommContext &comm, const std::string &tokenizerPath) {
#ifndef COLOSSAL_HAVE_SERVER
  (void)plan, (void)device, (void)comm, (void)tokenizerPath;
  return fail("this colossal-run was built without the HTTP server (install libcpp-httplib-dev and "
              "nlohmann-json3-dev, scripts/install-deps.sh, and rebuild)");
#else
  if (tokenizerPath.empty()) return fail("serve needs --tokenizer FILE (the model's tokenizer)");
  if (port < 0 || port > 65535) return fail("--port must be in [0, 65535]");
  auto tokenizer = loadTokenizer(tokenizerPath);
  if (!tokenizer) return fail(tokenizer.takeError());
  auto model = PlanModel::create(plan, KernelRegistry::cpu(), device, &comm);
  if (!model) return fail(model.takeError());
  // Tensor parallelism: rank 0 serves HTTP and schedules; the others run its steps.
  if (comm.rank() != 0) return followMain(**model, comm);
  std::optional<LeaderStepModel> leader;
  if (comm.worldSize() > 1) leader.emplace(**model, comm.world());
  StepModel &planModel = leader ? static_cast<StepModel &>(*leader) : **model;
  auto config = schedulerConfig(planModel.config());
  if (!config) return fail(config.takeError());
  ConfiguredModel stepModel(planModel, *config);
  auto speculative = setupSpeculative(plan, *config, (*model)->programTokens().back(), device, comm);
  if (!speculative) return fail(speculative.takeError());
  ServerOptions o;
  o.speculative = speculative->config;
  o.host = host;
  o.port = port;
  o.modelName = modelName.empty() ? llvm::sys::path::stem(plan.path).str() : std::string(modelName);
  o.chatTemplate = chatTemplate;
  o.quiet = quiet;
  auto server = Server::create(stepModel, **tokenizer, o);
  if (!server) return fail(server.takeError());
  if (llvm::Error e = (*server)->run()) return fail(std::move(e));
  return 0;
#endif
}

}  // namespace colossal::tools

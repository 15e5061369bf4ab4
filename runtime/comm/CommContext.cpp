//===- CommContext.cpp - Starting a job's communication --------------------------------------===//
//
// MPI is started only when needed: a one-rank mesh run without a launcher stays local (a singleton
// MPI_Init costs ~0.45 s here). A multi-rank mesh without a launcher is an error before MPI starts.
//
//===----------------------------------------------------------------------------------------===//
#include "CommBackend.h"

#include <cstdlib>

namespace colossal::runtime {

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

std::string rankCount(int64_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }
}  // namespace

#ifndef COLOSSAL_HAVE_MPI
llvm::Expected<std::unique_ptr<CommContext::Backend>> createMpiBackend() {
  return fail("this colossal-run was built without MPI (install libopenmpi-dev and rebuild)");
}
#endif

llvm::Expected<std::unique_ptr<CommContext>> CommContext::create(const Mesh &mesh,
                                                                 const CommOptions &options) {
  if (!(options.timeoutSeconds > 0))
    return fail("the communication timeout must be > 0 seconds");
  std::unique_ptr<CommContext> ctx(new CommContext());
  ctx->mesh_ = mesh;
  ctx->shared_.timeoutSeconds = options.timeoutSeconds;
  if (const char *s = std::getenv("COLOSSAL_TEST_STALL_RANK")) ctx->shared_.stallRank = std::atoi(s);
  if (const char *s = std::getenv("COLOSSAL_TEST_STALL_SECONDS")) ctx->shared_.stallSeconds = std::atof(s);

  auto mismatch = [&](int64_t world) {
    std::string msg = "the plan's mesh (" + mesh.toString() + ") has " + rankCount(mesh.size()) +
                      " but the job has " + rankCount(world);
    if (!launchedByMpirun())
      msg += "; run it with 'mpirun -np " + std::to_string(mesh.size()) + " colossal-run ...' or "
             "'colossal-run --nproc " + std::to_string(mesh.size()) + " ...'";
    else
      msg += " (mpirun -np " + std::to_string(world) + ")";
    return fail(msg);
  };

  if (!launchedByMpirun()) {
    if (mesh.size() != 1) return mismatch(1);
    ctx->world_ = createLocalCommunicator("world", ctx->shared_);
    return ctx;
  }
  llvm::Expected<std::unique_ptr<Backend>> backend = createMpiBackend();
  if (!backend) return backend.takeError();
  ctx->backend_ = std::move(*backend);
  ctx->usesMpi_ = true;
  ctx->shared_.worldRank = ctx->backend_->worldRank();
  if (ctx->backend_->worldSize() != mesh.size()) return mismatch(ctx->backend_->worldSize());
  ctx->world_ = ctx->backend_->world(ctx->shared_);
  return ctx;
}

}  // namespace colossal::runtime

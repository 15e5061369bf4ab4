//===- Parallel.cpp - colossal-run under several ranks -----------------------------------------===//
#include "Parallel.h"

#include "colossal/runtime/Mesh.h"
#include "plan.pb.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

#include <cerrno>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace colossal::runtime {

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}
}  // namespace

llvm::Error checkPlanRanks(llvm::StringRef planPath, int nproc) {
  auto buf = llvm::MemoryBuffer::getFile(planPath, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  plan::Plan p;
  if (!buf || (*buf)->getBufferSize() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !p.ParseFromArray((*buf)->getBufferStart(), static_cast<int>((*buf)->getBufferSize())))
    return llvm::Error::success();
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(p, planPath.str());
  if (!mesh) {
    llvm::consumeError(mesh.takeError());
    return llvm::Error::success();
  }
  if (mesh->size() == nproc) return llvm::Error::success();
  auto ranks = [](int64_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); };
  return fail(planPath + ": the plan's mesh (" + mesh->toString() + ") has " + ranks(mesh->size()) +
              " but --nproc asks for " + ranks(nproc) + "; run it with --nproc " + std::to_string(mesh->size()) +
              " (nothing was started)");
}

llvm::Error relaunchUnderMpirun(int argc, char **argv, int nproc) {
  if (nproc < 1) return fail("--nproc must be >= 1");
  if (launchedByMpirun()) {
    const char *world = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (world && std::atoi(world) != nproc)
      return fail("--nproc " + llvm::Twine(nproc) + " but mpirun started " + world + " ranks");
    return llvm::Error::success();
  }
  std::string launcher = COLOSSAL_MPIEXEC;
  if (launcher.empty() || access(launcher.c_str(), X_OK) != 0) {
    llvm::ErrorOr<std::string> found = llvm::sys::findProgramByName("mpirun");
    if (!found) return fail("--nproc needs mpirun, which is not installed (openmpi-bin)");
    launcher = *found;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fail("--nproc: cannot find this program's path");
  self[n] = 0;

  std::vector<std::string> args = {launcher, "-np", std::to_string(nproc), "--oversubscribe",
                                   "--bind-to", "none", self};
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef a(argv[i]);
    if (a == "--nproc" || a == "-nproc") {
      ++i;  // and its value
      continue;
    }
    if (a.starts_with("--nproc=") || a.starts_with("-nproc=")) continue;
    args.push_back(a.str());
  }
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  std::vector<char *> cargs;
  for (std::string &s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  execv(launcher.c_str(), cargs.data());
  return fail("--nproc: cannot start " + launcher + ": " + std::strerror(errno));
}

llvm::Expected<std::unique_ptr<CommContext>> startCommunication(const LoadedPlan &plan,
                                                               llvm::StringRef program,
                                                               double timeoutSeconds) {
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(plan.plan, plan.path);
  if (!mesh) return mesh.takeError();
  CommOptions options;
  options.timeoutSeconds = timeoutSeconds;
  llvm::Expected<std::unique_ptr<CommContext>> comm = CommContext::create(*mesh, options);
  // Name the plan: "M.cplan: the plan's mesh (tp=2) has 2 ranks but the job has 3 ranks ...".
  if (!comm)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   plan.path + ": " + llvm::toString(comm.takeError()));
  if (const plan::Program *prog = plan.program(program))
    if (llvm::Error e = (*comm)->prepare(*prog)) return std::move(e);
  return comm;
}

bool isPrintingRank() { return !launchedByMpirun() || launcherRank() == 0; }

}  // namespace colossal::runtime

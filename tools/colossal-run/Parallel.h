//===- Parallel.h - colossal-run under several ranks ----------------------------*- C++ -*-===//
//
// The multi-rank glue of colossal-run (docs/parallelism.md): `--nproc N` re-executes the command
// under mpirun, the job's CommContext is started from the plan's mesh, and errors are printed once
// (rank 0) when every rank hits them, or by the failing rank with its number before the job is
// aborted.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_TOOLS_COLOSSAL_RUN_PARALLEL_H
#define COLOSSAL_TOOLS_COLOSSAL_RUN_PARALLEL_H

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Plan.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>

namespace colossal::runtime {

/// Replaces this process by `mpirun -np nproc --oversubscribe --bind-to none <this binary> <argv
/// without --nproc>` (with OMPI_ALLOW_RUN_AS_ROOT{,_CONFIRM}=1 when running as root). Returns only
/// on failure. Under mpirun already, returns success when nproc equals the world size (nothing to
/// do) and an error otherwise.
llvm::Error relaunchUnderMpirun(int argc, char **argv, int nproc);

/// Before `--nproc` starts mpirun: the plan file `planPath`'s mesh must have `nproc` ranks
/// ("M.cplan: the plan's mesh (pp=2) has 2 ranks but --nproc asks for 3 ..."; nothing is
/// started). A plan that cannot be read passes (loading it reports why).
llvm::Error checkPlanRanks(llvm::StringRef planPath, int nproc);

/// Starts the job's communication for `plan` (its mesh; CommContext::create) and creates the
/// groups used by program `program`. Errors are the same on every rank (print on rank 0).
llvm::Expected<std::unique_ptr<CommContext>> startCommunication(const LoadedPlan &plan,
                                                               llvm::StringRef program,
                                                               double timeoutSeconds);

/// Whether this process prints errors that every rank hits alike: rank 0 of a launched job, or a
/// process started without a launcher.
bool isPrintingRank();

}  // namespace colossal::runtime

#endif

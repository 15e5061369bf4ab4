//===- CommBackend.h - What a communication backend provides to CommContext -----*- C++ -*-===//
//
// Internal to runtime/comm. The MPI backend (mpi/MpiCommunicator.cpp) implements it; a build
// without MPI gets createMpiBackend() returning an error, and one-rank jobs never call it.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_COMM_COMMBACKEND_H
#define COLOSSAL_RUNTIME_COMM_COMMBACKEND_H

#include "colossal/runtime/Communicator.h"

namespace colossal::runtime {

struct CommContext::Backend {
  /// Shuts the backend down (MPI_Finalize).
  virtual ~Backend();
  virtual int worldRank() const = 0;
  virtual int worldSize() const = 0;
  /// The communicator of all ranks.
  virtual std::unique_ptr<Communicator> world(const CommShared &shared) = 0;
  /// Collective over the world: the ranks passing the same `color` form one group, ordered by
  /// `key`; `axes` labels it for messages.
  virtual llvm::Expected<std::unique_ptr<Communicator>> split(int64_t color, int64_t key,
                                                              std::string axes,
                                                              const CommShared &shared) = 0;
  /// Waits (with the watchdog) until every rank has arrived; used before split().
  virtual llvm::Error barrier(const CommShared &shared, llvm::StringRef what) = 0;
  [[noreturn]] virtual void abort(int status) = 0;
};

/// Initializes MPI and returns its backend. Errors: the build has no MPI; MPI_Init failed.
llvm::Expected<std::unique_ptr<CommContext::Backend>> createMpiBackend();

/// The one-rank communicator (every collective is a copy).
std::unique_ptr<Communicator> createLocalCommunicator(std::string axes, const CommShared &shared);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_COMM_COMMBACKEND_H

//===- DataParallelIO.h - Data-parallel inputs and outputs of a run -------------*- C++ -*-===//
//
// docs/parallelism.md "Data parallelism", inference. A plan on a mesh with data axes (role DATA)
// runs a program of b = B / D rows on each of the D data-parallel ranks. The user gives global
// arrays [B, ...]; rank r of the data group keeps rows [r·b, (r+1)·b) (scatter), and after the
// run each output [b, ...] is all-gathered along dim 0 over the data group into [B, ...] (gather,
// every rank takes part) so that rank 0 can write it whole. Ranks that differ only in other axes
// (tensor parallelism) hold the same rows. No MPI here beyond the Communicator interface.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_DATAPARALLELIO_H
#define COLOSSAL_RUNTIME_DATAPARALLELIO_H

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Npy.h"
#include "colossal/runtime/Tensor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace colossal::runtime {

class Mesh;

class DataParallelIO {
public:
  /// The data-parallel group of `mesh` (its DATA axes) in `comm`; size 1 (nothing to split) when
  /// the mesh has none. Errors: the group cannot be created.
  static llvm::Expected<DataParallelIO> create(const Mesh &mesh, CommContext &comm);

  /// The number of data-parallel ranks D (1: no data parallelism).
  int64_t size() const { return size_; }

  /// Replaces the global array `arr` ([D·b, rest...]) by this rank's rows ([b, rest...]) for an
  /// input bound as `local` ([b, rest...]); a no-op when size() is 1. Errors (naming `what`, e.g.
  /// "input 'x' (x.npy)"): a scalar binding, or a shape that is not [D·b, rest...].
  llvm::Error scatter(NpyArray &arr, llvm::ArrayRef<int64_t> local, llvm::StringRef what) const;

  /// The output `local` ([b, rest...], `hostData` its bytes on the host) gathered along dim 0 over
  /// the data group: [D·b, rest...] in rank order. Every rank of the group must call it. Errors:
  /// a scalar output (naming `what`), or the collective's.
  llvm::Expected<AlignedBuffer> gather(const void *hostData, llvm::ArrayRef<int64_t> local,
                                       DType dtype, llvm::StringRef what) const;

private:
  Communicator *group_ = nullptr;
  int64_t size_ = 1, rank_ = 0;
};

}  // namespace colossal::runtime

#endif

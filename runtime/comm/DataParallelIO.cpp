//===- DataParallelIO.cpp - Data-parallel inputs and outputs of a run -----------------------===//
#include "colossal/runtime/DataParallelIO.h"

#include "colossal/runtime/Mesh.h"

#include <cstring>

namespace colossal::runtime {

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}
}  // namespace

llvm::Expected<DataParallelIO> DataParallelIO::create(const Mesh &mesh, CommContext &comm) {
  DataParallelIO io;
  if (mesh.dataSize() <= 1) return io;
  llvm::Expected<Communicator *> group = comm.axes(mesh.dataAxes());
  if (!group) return group.takeError();
  io.group_ = *group;
  io.size_ = mesh.dataSize();
  io.rank_ = io.group_->rank();
  return io;
}

llvm::Error DataParallelIO::scatter(NpyArray &arr, llvm::ArrayRef<int64_t> local,
                                    llvm::StringRef what) const {
  if (size_ == 1) return llvm::Error::success();
  if (local.empty())
    return fail(what + ": a scalar input has no batch dim to split over the " +
                llvm::Twine(size_) + " data-parallel ranks");
  Shape global(local.begin(), local.end());
  global[0] *= size_;
  if (llvm::ArrayRef<int64_t>(arr.shape) != llvm::ArrayRef<int64_t>(global))
    return fail(what + ": expected shape " + shapeToString(global) + " (the global batch; each of the dp=" +
                llvm::Twine(size_) + " ranks takes " + llvm::Twine(local[0]) + " rows), got " +
                shapeToString(arr.shape));
  const size_t rankBytes = static_cast<size_t>(numElements(local)) * dtypeSize(arr.dtype);
  AlignedBuffer mine(rankBytes);
  std::memcpy(mine.data(), static_cast<const char *>(arr.data.data()) + rank_ * rankBytes, rankBytes);
  arr.data = std::move(mine);
  arr.shape.assign(local.begin(), local.end());
  return llvm::Error::success();
}

llvm::Expected<AlignedBuffer> DataParallelIO::gather(const void *hostData, llvm::ArrayRef<int64_t> local,
                                                     DType dtype, llvm::StringRef what) const {
  if (local.empty())
    return fail(what + " is a scalar: a data-parallel plan cannot gather it");
  const size_t bytes = static_cast<size_t>(numElements(local)) * dtypeSize(dtype);
  AlignedBuffer all(bytes * static_cast<size_t>(size_));
  if (size_ == 1) {
    std::memcpy(all.data(), hostData, bytes);
    return all;
  }
  if (llvm::Error e = group_->allGather(hostData, all.data(), local, 0, dtype)) return std::move(e);
  return all;
}

}  // namespace colossal::runtime

//===- Tier.h - the slower memory tier that offloaded state lives in ----------------*- C++ -*-===//
//
// docs/training.md "Offload". Persistent tensors a plan offloads (Plan.offload) live in a slower
// tier at fixed addresses; the compiler's schedule (Program.tier_actions) says when each chunk is
// fetched ahead of use and when it leaves fast memory. One interface, one implementation per
// backend: on the CPU a file in the offload folder mapped shared (FileTier: the kernel reads a
// prefetched range asynchronously and writes modified pages back on its own); the CUDA backend's
// will be pinned host memory with copies on a stream.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TIER_H
#define COLOSSAL_RUNTIME_TIER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>

namespace colossal::runtime {

class Tier {
public:
  virtual ~Tier();
  /// The tier's bytes, addressable by kernels (offloaded states point into it).
  virtual void *base() const = 0;
  virtual uint64_t bytes() const = 0;
  /// Starts bringing [offset, offset + bytes) into fast memory; returns at once.
  virtual void prefetch(uint64_t offset, uint64_t bytes) = 0;
  /// Takes [offset, offset + bytes) out of fast memory; its contents stay (written back when
  /// modified) and are read again on the next access.
  virtual void evict(uint64_t offset, uint64_t bytes) = 0;
  void evictAll() { evict(0, bytes()); }
  /// Returns when every move asked for so far has been done.
  virtual void drain() = 0;
  /// Bytes moved since creation: ranges prefetched, ranges evicted.
  uint64_t prefetchedBytes() const { return prefetched_; }
  uint64_t evictedBytes() const { return evicted_; }
  /// Seconds spent moving since creation: prefetching (off the caller's thread) and evicting
  /// (on it, waits for an overlapping prefetch included).
  virtual double prefetchSeconds() const = 0;
  double evictSeconds() const { return evictSeconds_; }

protected:
  uint64_t prefetched_ = 0, evicted_ = 0;
  double evictSeconds_ = 0;
};

/// A new file `dir`/rank-`rank`.PID.N.bin of `bytes` bytes (`dir` created if needed; never an
/// existing file or a link), its space reserved (posix_fallocate), mapped shared and unlinked at
/// once, so runs sharing `dir` never share a tier and the OS frees it however the run ends.
/// Prefetch maps a range's pages on an I/O thread (MADV_POPULATE_WRITE); evict drops them at once
/// (MADV_DONTNEED: the file keeps their contents). Offsets and sizes are rounded out to whole
/// pages. Errors name the file: folder or file cannot be created, space not reserved (a full
/// disk), mapping failed.
llvm::Expected<std::unique_ptr<Tier>> createFileTier(llvm::StringRef dir, int64_t rank, uint64_t bytes);

} // namespace colossal::runtime

#endif

//===- Device.h - Backend abstraction: memory, copies, threads ------------------*- C++ -*-===//
//
// A Device owns what differs between backends for the executor: where the arena lives, how bytes
// move in and out, how parallel it runs, and how to wait for it. The CPU device is the only one
// today; a CUDA device implements the same interface (device memory, cudaMemcpyAsync on its streams).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_DEVICE_H
#define COLOSSAL_RUNTIME_DEVICE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace colossal::runtime {

/// Values match plan.proto's `Device`.
enum class DeviceKind : uint8_t { CPU = 0, CUDA = 1 };

llvm::StringRef deviceKindName(DeviceKind kind);

class Device {
public:
  virtual ~Device();
  virtual DeviceKind kind() const = 0;

  /// Memory of `bytes` bytes (zero-filled), aligned to `alignment` (a power of two, >= 64).
  virtual llvm::Expected<void *> allocate(size_t bytes, size_t alignment) = 0;
  virtual void deallocate(void *ptr) = 0;

  /// Host <-> device copies; `device` pointers come from allocate() (or weights bound to it).
  virtual void copyFromHost(void *device, const void *host, size_t bytes) = 0;
  virtual void copyToHost(void *host, const void *device, size_t bytes) = 0;

  /// Degree of parallelism of kernels (CPU threads). 0 = all hardware threads.
  virtual void setThreads(int threads) = 0;
  virtual int threads() const = 0;

  /// Waits until all work issued on the device is done (a no-op on CPU).
  virtual void synchronize() = 0;
};

/// The host CPU: arena from aligned_alloc, copies are memcpy, kernels use OpenMP threads.
std::unique_ptr<Device> createCpuDevice();

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_DEVICE_H

//===- CpuDevice.cpp - The host CPU as a Device ---------------------------------------------===//
#include "colossal/runtime/Device.h"

#include <cstdlib>
#include <cstring>
#include <omp.h>

namespace colossal::runtime {

llvm::StringRef deviceKindName(DeviceKind kind) {
  return kind == DeviceKind::CPU ? "cpu" : "cuda";
}

Device::~Device() = default;

namespace {
class CpuDevice final : public Device {
public:
  DeviceKind kind() const override { return DeviceKind::CPU; }

  llvm::Expected<void *> allocate(size_t bytes, size_t alignment) override {
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    if (rounded == 0) rounded = alignment;
    void *p = std::aligned_alloc(alignment, rounded);
    if (!p)
      return llvm::createStringError("cannot allocate %zu bytes of host memory", bytes);
    std::memset(p, 0, rounded);
    return p;
  }
  void deallocate(void *ptr) override { std::free(ptr); }
  void copyFromHost(void *device, const void *host, size_t bytes) override {
    if (bytes) std::memcpy(device, host, bytes);
  }
  void copyToHost(void *host, const void *device, size_t bytes) override {
    if (bytes) std::memcpy(host, device, bytes);
  }
  void setThreads(int threads) override {
    threads_ = threads > 0 ? threads : omp_get_num_procs();
    // OpenMP's setting is shared with oneDNN's GEMM, which reads omp_get_max_threads().
    omp_set_num_threads(threads_);
  }
  int threads() const override { return threads_; }
  void synchronize() override {}

private:
  int threads_ = omp_get_max_threads();
};
}  // namespace

std::unique_ptr<Device> createCpuDevice() { return std::make_unique<CpuDevice>(); }

}  // namespace colossal::runtime

//===- StateStore.h - The persistent tensors of a training plan -----------------*- C++ -*-===//
//
// A training plan (docs/training.md "Plan") lists its persistent tensors in Plan.states: trainable
// parameters (PARAM), gradient accumulators (GRAD) and optimizer state (OPTIMIZER). The StateStore
// allocates each of them once on the Device, before any program runs; every program's STATE
// buffers with that name are views of it (Executor binds them), so an update written by
// `optimizer_step` is what the next `train_step` reads. Initial values: a PARAM is copied from
// its `init_weight` in the plan's weights file, every other state is zero.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_STATESTORE_H
#define COLOSSAL_RUNTIME_STATESTORE_H

#include "colossal/runtime/Device.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <vector>

namespace colossal::runtime {

/// One persistent tensor: its declaration in the plan and its memory on the device.
struct StateEntry {
  const plan::StateTensor *desc = nullptr;  // points into the LoadedPlan
  TensorRef tensor;                         // dtype and shape of the declaration; device memory
  const std::string &name() const { return desc->name(); }
  plan::StateTensor::Role role() const { return desc->role(); }
};

class StateStore {
public:
  /// Allocates every tensor of `plan.plan.states()` on `device` (one 64-byte aligned block, each
  /// tensor at a 64-byte aligned offset), copies each PARAM's `init_weight` from the plan's
  /// weights file and zeroes the others. `plan` and `device` must outlive the store. A plan
  /// without states gives an empty store. Errors: allocation failure; a PARAM whose initial
  /// weight is not loaded (cannot happen after loadPlan, which checks names, dtypes and shapes).
  static llvm::Expected<std::unique_ptr<StateStore>> create(const LoadedPlan &plan, Device &device);
  ~StateStore();
  StateStore(const StateStore &) = delete;
  StateStore &operator=(const StateStore &) = delete;

  /// Every state in the plan's order.
  llvm::ArrayRef<StateEntry> entries() const { return entries_; }
  /// The state named `name`, or nullptr.
  const StateEntry *find(llvm::StringRef name) const;
  Device &device() const { return *device_; }
  const LoadedPlan &plan() const { return *plan_; }

  /// Copies `bytes` host bytes into state `name`. Errors: unknown name; `bytes` different from the
  /// state's size (names both).
  llvm::Error write(llvm::StringRef name, const void *host, size_t bytes);
  /// Copies state `name` to `host` (its size in bytes). Error: unknown name.
  llvm::Error read(llvm::StringRef name, void *host) const;

  /// Zeroes every state of `role` (e.g. the GRAD accumulators after loading a checkpoint).
  void zero(plan::StateTensor::Role role);
  /// Puts every state back to its initial value (PARAM from the weights file, others zero).
  llvm::Error reset();

private:
  StateStore() = default;
  const LoadedPlan *plan_ = nullptr;
  Device *device_ = nullptr;
  void *memory_ = nullptr;
  std::vector<StateEntry> entries_;
  llvm::StringMap<size_t> index_;
};

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_STATESTORE_H

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
#include "colossal/runtime/Mesh.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Sharding.h"
#include "colossal/runtime/Tensor.h"
#include "colossal/runtime/Tier.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <vector>

namespace colossal::runtime {

/// One persistent tensor: its declaration in the plan and its memory on the device.
struct StateEntry {
  const plan::StateTensor *desc = nullptr;  // points into the LoadedPlan
  TensorRef tensor;                         // dtype and shape of the declaration; device memory
  /// Set when the store holds a shard of a tensor split over the mesh (a sharding that splits
  /// some dim over axes of size > 1): `tensor` is then the local shard of layout->globalShape.
  std::optional<ShardLayout> layout;
  const std::string &name() const { return desc->name(); }
  plan::StateTensor::Role role() const { return desc->role(); }
  /// The whole tensor's shape: layout->globalShape when sharded, else tensor.shape.
  Shape globalShape() const { return layout ? layout->globalShape : tensor.shape; }
};

class StateStore {
public:
  /// Allocates every tensor of `plan.plan.states()` on `device` (one 64-byte aligned block, each
  /// tensor at a 64-byte aligned offset; with Plan.offload the offloaded ones in a file tier in
  /// `offload.dir`, each chunk page-aligned, their tensors back to back as listed), copies each PARAM's `init_weight` from the plan's
  /// weights file and zeroes the others. `plan` and `device` must outlive the store. A plan
  /// without states gives an empty store. Errors: allocation failure; a PARAM whose initial
  /// weight is not loaded (cannot happen after loadPlan, which checks names, dtypes and shapes).
  /// Sharded states hold plan.rank's shard, or (globalShapes) the whole tensor. Extra errors: a
  /// state's sharding does not fit the plan's mesh (loadPlan has checked it).
  static llvm::Expected<std::unique_ptr<StateStore>> create(const LoadedPlan &plan, Device &device,
                                                            bool globalShapes = false);
  ~StateStore();
  StateStore(const StateStore &) = delete;
  StateStore &operator=(const StateStore &) = delete;

  /// Every state in the plan's order.
  llvm::ArrayRef<StateEntry> entries() const { return entries_; }
  /// The state named `name`, or nullptr.
  const StateEntry *find(llvm::StringRef name) const;
  Device &device() const { return *device_; }
  const LoadedPlan &plan() const { return *plan_; }
  /// The plan's mesh, and the world rank whose shards the store holds (LoadedPlan::rank).
  const Mesh &mesh() const { return mesh_; }
  int64_t rank() const { return rank_; }

  /// Sets state `name` from the WHOLE tensor `global` (host bytes of its global shape, row-major):
  /// a sharded state keeps this rank's shard of it, others copy it. Errors: unknown name; `bytes`
  /// is not the size of the global tensor.
  llvm::Error writeGlobal(llvm::StringRef name, const void *global, size_t bytes);

  /// Copies `bytes` host bytes into state `name`. Errors: unknown name; `bytes` different from the
  /// state's size (names both).
  llvm::Error write(llvm::StringRef name, const void *host, size_t bytes);
  /// Copies state `name` to `host` (its size in bytes). Error: unknown name.
  llvm::Error read(llvm::StringRef name, void *host) const;

  /// Zeroes every state of `role` (e.g. the GRAD accumulators after loading a checkpoint).
  void zero(plan::StateTensor::Role role);
  /// Puts every state back to its initial value (PARAM from the weights file, others zero).
  llvm::Error reset();

  /// Offload (Plan.offload; docs/training.md "Offload"): the slower tier the offloaded states
  /// live in (null without offload), and chunk `c`'s byte range in it.
  Tier *tier() const { return tier_.get(); }
  std::pair<uint64_t, uint64_t> chunkRange(uint32_t c) const { return chunkRanges_[c]; }
  size_t numChunks() const { return chunkRanges_.size(); }
  /// Drops every offloaded page from fast memory (after work outside the programs' schedules:
  /// initial values, checkpoints, scans of the gradients). No-op without offload.
  void evictOffloaded() const {
    if (!tier_) return;
    tier_->evictAll();
    tier_->drain();
  }

private:
  StateStore() = default;
  const LoadedPlan *plan_ = nullptr;
  Device *device_ = nullptr;
  Mesh mesh_;
  int64_t rank_ = 0;
  /// After a copy into or out of an offloaded state: its pages leave fast memory again.
  void evictEntry(const StateEntry &e) const;
  void *memory_ = nullptr;
  std::unique_ptr<Tier> tier_;
  std::vector<std::pair<uint64_t, uint64_t>> chunkRanges_; // offset, bytes in the tier
  std::vector<StateEntry> entries_;
  llvm::StringMap<size_t> index_;
};

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_STATESTORE_H

//===- StateStore.cpp - The persistent tensors of a training plan ---------------------------===//
#include "colossal/runtime/StateStore.h"

#include "colossal/runtime/Safetensors.h"

#include <algorithm>

namespace colossal::runtime {

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

/// Fills `bytes` device bytes at `dst` with zeros through a small host buffer (the Device
/// interface moves bytes only by copies).
void zeroDevice(Device &device, void *dst, size_t bytes) {
  static const std::vector<char> zeros(1 << 20, 0);
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(bytes - done, zeros.size());
    device.copyFromHost(static_cast<char *>(dst) + done, zeros.data(), n);
    done += n;
  }
}
}  // namespace

StateStore::~StateStore() {
  if (memory_) device_->deallocate(memory_);
}

llvm::Expected<std::unique_ptr<StateStore>> StateStore::create(const LoadedPlan &plan, Device &device,
                                                               bool globalShapes) {
  std::unique_ptr<StateStore> store(new StateStore());
  store->plan_ = &plan;
  store->device_ = &device;
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(plan.plan, plan.path);
  if (!mesh) return mesh.takeError();
  store->mesh_ = std::move(*mesh);
  store->rank_ = plan.rank;
  const auto &states = plan.plan.states();
  // Each state's shape in the store and its layout when it holds a shard.
  std::vector<Shape> shapes;
  std::vector<std::optional<ShardLayout>> layouts;
  for (const plan::StateTensor &st : states) {
    shapes.emplace_back(st.shape().begin(), st.shape().end());
    layouts.emplace_back();
    if (!st.has_sharding()) continue;
    llvm::Expected<ShardLayout> layout =
        makeShardLayout(st.sharding(), store->mesh_, plan.path + ": state '" + st.name() + "'");
    if (!layout) return layout.takeError();
    if (globalShapes)
      shapes.back() = layout->globalShape;
    else if (layout->splits(store->mesh_))
      layouts.back() = std::move(*layout);
  }
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (int i = 0; i < states.size(); ++i) {
    const plan::StateTensor &st = states[i];
    offsets.push_back(total);
    uint64_t bytes = static_cast<uint64_t>(numElements(shapes[i])) * dtypeSize(static_cast<DType>(st.dtype()));
    total += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  }
  if (states.empty()) return store;
  llvm::Expected<void *> mem = device.allocate(total, kArenaAlignment);
  if (!mem)
    return fail(plan.path + ": cannot allocate " + llvm::Twine(total) + " bytes for the plan's " +
                llvm::Twine(states.size()) + " state tensors: " + llvm::toString(mem.takeError()));
  store->memory_ = *mem;
  for (int i = 0; i < states.size(); ++i) {
    const plan::StateTensor &st = states[i];
    StateEntry e;
    e.desc = &st;
    e.tensor.dtype = static_cast<DType>(st.dtype());
    e.tensor.shape = shapes[i];
    e.tensor.data = static_cast<char *>(store->memory_) + offsets[i];
    e.layout = std::move(layouts[i]);
    store->index_[st.name()] = store->entries_.size();
    store->entries_.push_back(std::move(e));
  }
  if (llvm::Error e = store->reset()) return std::move(e);
  return store;
}

const StateEntry *StateStore::find(llvm::StringRef name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

llvm::Error StateStore::write(llvm::StringRef name, const void *host, size_t bytes) {
  const StateEntry *e = find(name);
  if (!e) return fail("state '" + name + "' is not in the plan");
  if (bytes != e->tensor.bytes())
    return fail("state '" + name + "': " + llvm::Twine(bytes) + " bytes given, " + dtypeName(e->tensor.dtype) +
                " " + shapeToString(e->tensor.shape) + " holds " + llvm::Twine(e->tensor.bytes()));
  device_->copyFromHost(e->tensor.data, host, bytes);
  return llvm::Error::success();
}

llvm::Error StateStore::writeGlobal(llvm::StringRef name, const void *global, size_t bytes) {
  const StateEntry *e = find(name);
  if (!e) return fail("state '" + name + "' is not in the plan");
  if (!e->layout) return write(name, global, bytes);
  const size_t elem = dtypeSize(e->tensor.dtype);
  Shape whole = e->globalShape();
  if (bytes != static_cast<size_t>(numElements(whole)) * elem)
    return fail("state '" + name + "': " + llvm::Twine(bytes) + " bytes given, the global " + dtypeName(e->tensor.dtype) +
                " " + shapeToString(whole) + " holds " + llvm::Twine(numElements(whole) * elem));
  AlignedBuffer local(e->tensor.bytes());
  sliceShard(global, local.data(), elem, *e->layout, mesh_, rank_);
  device_->copyFromHost(e->tensor.data, local.data(), local.size());
  return llvm::Error::success();
}

llvm::Error StateStore::read(llvm::StringRef name, void *host) const {
  const StateEntry *e = find(name);
  if (!e) return fail("state '" + name + "' is not in the plan");
  device_->copyToHost(host, e->tensor.data, e->tensor.bytes());
  return llvm::Error::success();
}

void StateStore::zero(plan::StateTensor::Role role) {
  for (StateEntry &e : entries_)
    if (e.role() == role) zeroDevice(*device_, e.tensor.data, e.tensor.bytes());
}

llvm::Error StateStore::reset() {
  for (StateEntry &e : entries_) {
    if (e.role() != plan::StateTensor::PARAM) {
      zeroDevice(*device_, e.tensor.data, e.tensor.bytes());
      continue;
    }
    const SafetensorsTensor *w = plan_->weights ? plan_->weights->find(e.desc->init_weight()) : nullptr;
    const size_t globalBytes = static_cast<size_t>(numElements(e.globalShape())) * dtypeSize(e.tensor.dtype);
    if (!w || w->size_bytes != globalBytes)
      return fail(plan_->path + ": initial value '" + e.desc->init_weight() + "' of state '" + e.name() +
                  "' is not loaded from the weights file");
    if (llvm::Error err = writeGlobal(e.name(), w->data, w->size_bytes)) return err;
  }
  return llvm::Error::success();
}

}  // namespace colossal::runtime

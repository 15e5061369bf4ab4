//===- StateStore.cpp - The persistent tensors of a training plan ---------------------------===//
#include "colossal/runtime/StateStore.h"

#include "colossal/runtime/Safetensors.h"

#include <algorithm>
#include <unistd.h>

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
  auto align = [](uint64_t v, uint64_t a) { return (v + a - 1) / a * a; };
  auto stateBytes = [&](int i) {
    return static_cast<uint64_t>(numElements(shapes[i])) * dtypeSize(static_cast<DType>(states[i].dtype()));
  };
  // Offloaded states: name -> offset in the tier (chunks page-aligned, as the compiler laid them).
  llvm::StringMap<uint64_t> tierOffset;
  uint64_t tierBytes = 0;
  if (!globalShapes && plan.plan.has_offload()) {
    llvm::StringMap<int> byName;
    for (int i = 0; i < states.size(); ++i) byName[states[i].name()] = i;
    const uint64_t page = std::max<uint64_t>(4096, static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
    const auto &chunks = plan.plan.offload().chunks();
    for (int c = 0; c < chunks.size(); ++c) {
      uint64_t at = align(tierBytes, page), used = 0;
      for (const std::string &name : chunks[c].states()) {
        auto it = byName.find(name);
        if (it == byName.end() || tierOffset.count(name))
          return fail(plan.path + ": offload chunk " + llvm::Twine(c) + " names state '" + name + "', which " +
                      (it == byName.end() ? "the plan does not have" : "another chunk holds"));
        used = align(used, kArenaAlignment);
        tierOffset[name] = at + used;
        used += stateBytes(it->second);
      }
      store->chunkRanges_.push_back({at, align(used, page)});
      tierBytes = at + align(used, page);
    }
  }
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (int i = 0; i < states.size(); ++i) {
    offsets.push_back(total);
    if (!tierOffset.count(states[i].name())) total += align(stateBytes(i), kArenaAlignment);
  }
  if (states.empty()) return store;
  llvm::Expected<void *> mem = device.allocate(std::max<uint64_t>(total, kArenaAlignment), kArenaAlignment);
  if (!mem)
    return fail(plan.path + ": cannot allocate " + llvm::Twine(total) + " bytes for the plan's " +
                llvm::Twine(states.size()) + " state tensors: " + llvm::toString(mem.takeError()));
  store->memory_ = *mem;
  if (!tierOffset.empty()) {
    if (device.kind() != DeviceKind::CPU)
      return fail(plan.path + ": offload needs the CPU device's file tier (the CUDA tier is not built yet)");
    llvm::Expected<std::unique_ptr<Tier>> tier = createFileTier(plan.plan.offload().dir(), plan.rank, tierBytes);
    if (!tier) return tier.takeError();
    store->tier_ = std::move(*tier);
  }
  for (int i = 0; i < states.size(); ++i) {
    const plan::StateTensor &st = states[i];
    StateEntry e;
    e.desc = &st;
    e.tensor.dtype = static_cast<DType>(st.dtype());
    e.tensor.shape = shapes[i];
    auto off = tierOffset.find(st.name());
    e.tensor.data = off != tierOffset.end() ? static_cast<char *>(store->tier_->base()) + off->second
                                            : static_cast<char *>(store->memory_) + offsets[i];
    e.layout = std::move(layouts[i]);
    store->index_[st.name()] = store->entries_.size();
    store->entries_.push_back(std::move(e));
  }
  if (llvm::Error e = store->reset()) return std::move(e);
  store->evictOffloaded();
  return store;
}

void StateStore::evictEntry(const StateEntry &e) const {
  if (!tier_) return;
  const char *base = static_cast<const char *>(tier_->base());
  const char *data = static_cast<const char *>(e.tensor.data);
  if (data >= base && data < base + tier_->bytes())
    tier_->evict(static_cast<uint64_t>(data - base), e.tensor.bytes());
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
  evictEntry(*e);
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
  evictEntry(*e);
  return llvm::Error::success();
}

llvm::Error StateStore::read(llvm::StringRef name, void *host) const {
  const StateEntry *e = find(name);
  if (!e) return fail("state '" + name + "' is not in the plan");
  device_->copyToHost(host, e->tensor.data, e->tensor.bytes());
  evictEntry(*e);
  return llvm::Error::success();
}

void StateStore::zero(plan::StateTensor::Role role) {
  for (StateEntry &e : entries_)
    if (e.role() == role) {
      zeroDevice(*device_, e.tensor.data, e.tensor.bytes());
      evictEntry(e);
    }
}

llvm::Error StateStore::reset() {
  for (StateEntry &e : entries_) {
    if (e.role() != plan::StateTensor::PARAM) {
      zeroDevice(*device_, e.tensor.data, e.tensor.bytes());
      evictEntry(e);
      continue;
    }
    const SafetensorsTensor *w = plan_->weights ? plan_->weights->find(e.desc->init_weight()) : nullptr;
    const size_t globalBytes = static_cast<size_t>(numElements(e.globalShape())) * dtypeSize(e.tensor.dtype);
    if (!w || w->size_bytes != globalBytes)
      return fail(plan_->path + ": initial value '" + e.desc->init_weight() + "' of state '" + e.name() +
                  "' is not loaded from the weights file");
    if (llvm::Error err = writeGlobal(e.name(), w->data, w->size_bytes)) return err;
    // Offload: neither the weights file's pages nor this state's stay resident.
    if (tier_) {
      plan_->weights->releasePages(*w);
      tier_->drain();
    }
  }
  return llvm::Error::success();
}

}  // namespace colossal::runtime

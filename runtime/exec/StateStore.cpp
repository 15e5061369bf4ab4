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

llvm::Expected<std::unique_ptr<StateStore>> StateStore::create(const LoadedPlan &plan, Device &device) {
  std::unique_ptr<StateStore> store(new StateStore());
  store->plan_ = &plan;
  store->device_ = &device;
  const auto &states = plan.plan.states();
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (const plan::StateTensor &st : states) {
    offsets.push_back(total);
    uint64_t bytes = static_cast<uint64_t>(numElements(std::vector<int64_t>(st.shape().begin(), st.shape().end()))) *
                     dtypeSize(static_cast<DType>(st.dtype()));
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
    e.tensor.shape.assign(st.shape().begin(), st.shape().end());
    e.tensor.data = static_cast<char *>(store->memory_) + offsets[i];
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
    if (!w || w->size_bytes != e.tensor.bytes())
      return fail(plan_->path + ": initial value '" + e.desc->init_weight() + "' of state '" + e.name() +
                  "' is not loaded from the weights file");
    device_->copyFromHost(e.tensor.data, w->data, w->size_bytes);
  }
  return llvm::Error::success();
}

}  // namespace colossal::runtime

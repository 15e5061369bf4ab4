//===- KernelRegistry.cpp - Kernel lookup and attribute access -------------------------------===//
#include "colossal/runtime/Kernel.h"

#include "plan.pb.h"

#include <set>

namespace colossal::runtime {

namespace {
const plan::Attr *findAttr(const KernelCall &call, llvm::StringRef name) {
  if (call.attrsIndexed) {
    for (const auto &[key, attr] : call.attrTable)
      if (key == name) return attr;
    return nullptr;
  }
  const plan::Instruction *inst = call.instruction;
  if (!inst) return nullptr;
  auto it = inst->attrs().find(std::string(name));
  return it == inst->attrs().end() ? nullptr : &it->second;
}
}  // namespace

void KernelCall::indexAttrs() {
  attrTable.clear();
  if (instruction)
    for (const auto &[name, attr] : instruction->attrs()) attrTable.push_back({llvm::StringRef(name), &attr});
  attrsIndexed = true;
}

bool KernelCall::hasAttr(llvm::StringRef name) const { return findAttr(*this, name); }

int64_t KernelCall::attrInt(llvm::StringRef name, int64_t fallback) const {
  const plan::Attr *a = findAttr(*this, name);
  return a && a->has_i() ? a->i() : fallback;
}

double KernelCall::attrFloat(llvm::StringRef name, double fallback) const {
  const plan::Attr *a = findAttr(*this, name);
  if (!a) return fallback;
  if (a->has_f()) return a->f();
  if (a->has_i()) return static_cast<double>(a->i());
  return fallback;
}

std::string KernelCall::attrString(llvm::StringRef name, llvm::StringRef fallback) const {
  const plan::Attr *a = findAttr(*this, name);
  return a && a->has_s() ? a->s() : fallback.str();
}

llvm::SmallVector<int64_t, 6> KernelCall::attrInts(llvm::StringRef name) const {
  llvm::SmallVector<int64_t, 6> out;
  const plan::Attr *a = findAttr(*this, name);
  if (a && a->has_ints()) out.assign(a->ints().values().begin(), a->ints().values().end());
  return out;
}

llvm::Error verifyAttrKinds(const KernelDesc &desc, const KernelCall &call) {
  if (!call.instruction) return llvm::Error::success();
  for (const auto &[name, attr] : call.instruction->attrs()) {
    const AttrSpec *spec = nullptr;
    for (const AttrSpec &s : desc.attrs)
      if (name == s.name) spec = &s;
    if (!spec)
      return llvm::createStringError("unknown attribute '%s' for op '%s'", name.c_str(),
                                     desc.op.c_str());
    bool ok = false;
    switch (spec->kind) {
    case AttrKind::Int: ok = attr.has_i(); break;
    case AttrKind::Float: ok = attr.has_f() || attr.has_i(); break;
    case AttrKind::String: ok = attr.has_s(); break;
    case AttrKind::Ints: ok = attr.has_ints(); break;
    case AttrKind::Floats: ok = attr.has_floats(); break;
    }
    if (!ok)
      return llvm::createStringError("attribute '%s' of op '%s' has the wrong kind", name.c_str(),
                                     desc.op.c_str());
  }
  return llvm::Error::success();
}

void KernelRegistry::add(KernelDesc desc) {
  auto key = std::make_tuple(desc.op, desc.dtype, desc.device);
  kernels_[key] = std::move(desc);
}

const KernelDesc *KernelRegistry::find(llvm::StringRef op, DType dtype, DeviceKind device) const {
  auto it = kernels_.find(std::make_tuple(op.str(), dtype, device));
  return it == kernels_.end() ? nullptr : &it->second;
}

bool KernelRegistry::knowsOp(llvm::StringRef op, DeviceKind device) const {
  return !dtypesOf(op, device).empty();
}

std::vector<DType> KernelRegistry::dtypesOf(llvm::StringRef op, DeviceKind device) const {
  std::vector<DType> out;
  auto it = kernels_.lower_bound(std::make_tuple(op.str(), DType::Invalid, DeviceKind::CPU));
  for (; it != kernels_.end() && std::get<0>(it->first) == op; ++it)
    if (std::get<2>(it->first) == device) out.push_back(std::get<1>(it->first));
  return out;
}

std::vector<std::string> KernelRegistry::ops(DeviceKind device) const {
  std::set<std::string> names;
  for (const auto &kv : kernels_)
    if (std::get<2>(kv.first) == device) names.insert(std::get<0>(kv.first));
  return {names.begin(), names.end()};
}

const KernelRegistry &KernelRegistry::cpu() {
  static const KernelRegistry *registry = [] {
    auto *r = new KernelRegistry();
    registerCpuKernels(*r);
    return r;
  }();
  return *registry;
}

}  // namespace colossal::runtime

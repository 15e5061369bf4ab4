//===- Sharding.cpp - shardings over a named mesh (Sharding.h) ---------------------===//
#include "passes/Parallel/Sharding.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace colossal::spmd {

int Mesh::find(llvm::StringRef name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return static_cast<int>(i);
  return -1;
}

int64_t Mesh::groupSize(llvm::ArrayRef<int> axes) const {
  int64_t p = 1;
  for (int a : axes)
    p *= sizes[a];
  return p;
}

ArrayAttr Mesh::axesAttr(MLIRContext *ctx, llvm::ArrayRef<int> axes) const {
  SmallVector<Attribute> attrs;
  for (int a : axes)
    attrs.push_back(StringAttr::get(ctx, names[a]));
  return ArrayAttr::get(ctx, attrs);
}

bool Sharding::isSplit() const {
  return llvm::any_of(dims, [](const Axes &a) { return !a.empty(); });
}

Axes Sharding::usedAxes() const {
  Axes used(partial.begin(), partial.end());
  for (const Axes &d : dims)
    used.append(d.begin(), d.end());
  return used;
}

std::string Sharding::str(const Mesh &mesh) const {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d)
      s += ", ";
    if (dims[d].empty())
      s += "-";
    for (size_t i = 0; i < dims[d].size(); ++i)
      s += (i ? "*" : "") + mesh.names[dims[d][i]];
    if (blocks[d] > 1)
      s += "/" + std::to_string(blocks[d]);
  }
  s += "]";
  if (!partial.empty()) {
    s += " partial(";
    for (size_t i = 0; i < partial.size(); ++i)
      s += (i ? "," : "") + mesh.names[partial[i]];
    s += ")";
  }
  return s;
}

SmallVector<int64_t> localShape(ArrayRef<int64_t> global, const Sharding &s, const Mesh &mesh) {
  SmallVector<int64_t> local(global.begin(), global.end());
  for (size_t d = 0; d < local.size() && d < s.dims.size(); ++d)
    local[d] /= mesh.groupSize(s.dims[d]);
  return local;
}

bool divides(ArrayRef<int64_t> global, const Sharding &s, const Mesh &mesh) {
  for (size_t d = 0; d < global.size() && d < s.dims.size(); ++d) {
    if (s.dims[d].empty())
      continue;
    if (global[d] % (mesh.groupSize(s.dims[d]) * s.blocks[d]) != 0)
      return false;
  }
  return true;
}

} // namespace colossal::spmd

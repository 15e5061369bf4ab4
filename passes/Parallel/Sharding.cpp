//===- Sharding.cpp - shardings over a named mesh (Sharding.h) ---------------------===//
#include "passes/Parallel/Sharding.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace colossal::spmd {

Mesh Mesh::of(MeshOp op) {
  Mesh mesh;
  mesh.context = op->getContext();
  mesh.symbol = op.getSymName().str();
  for (auto [name, size] : llvm::zip(op.getAxes(), op.getShape())) {
    mesh.names.push_back(cast<StringAttr>(name).str());
    mesh.sizes.push_back(size);
  }
  return mesh;
}

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

ShardingAttr Sharding::toAttr(const Mesh &mesh) const {
  MLIRContext *ctx = mesh.context;
  auto names = [&](ArrayRef<int> axes) {
    SmallVector<StringAttr> out;
    for (int a : axes)
      out.push_back(StringAttr::get(ctx, mesh.names[a]));
    return out;
  };
  SmallVector<DimShardingAttr> attrDims;
  for (auto [axes, k] : llvm::zip(dims, blocks))
    attrDims.push_back(DimShardingAttr::get(ctx, names(axes), axes.empty() ? 1 : k));
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(ctx, mesh.symbol), attrDims,
                           names(partial));
}

std::string Sharding::str(const Mesh &mesh) const {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << toAttr(mesh);
  return text;
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

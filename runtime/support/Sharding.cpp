//===- Sharding.cpp - Sharded tensors: local shapes, slicing and assembling -----------------===//
#include "colossal/runtime/Sharding.h"

#include "plan.pb.h"

#include "llvm/ADT/STLExtras.h"

#include <cstring>

namespace colossal::runtime {

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

/// The index arithmetic of one dim (header comment): global n, group size P, blocks k, the
/// local chunk m = n / (k·P) of each block, group rank r.
struct DimMap {
  int64_t n = 1, k = 1, m = 1, r = 0;
  int64_t local() const { return m * k; }
  int64_t global(int64_t j) const { return (j / m) * (n / k) + r * m + (j % m); }
};

std::vector<DimMap> dimMaps(const ShardLayout &layout, const Mesh &mesh, int64_t rank) {
  std::vector<DimMap> maps(layout.globalShape.size());
  for (size_t d = 0; d < maps.size(); ++d) {
    const DimShard &ds = layout.dims[d];
    DimMap &m = maps[d];
    m.n = layout.globalShape[d];
    m.k = ds.blocks;
    int64_t p = mesh.groupSize(ds.axes);
    m.m = m.n / (m.k * p);
    m.r = ds.axes.empty() ? 0 : mesh.groupRank(rank, ds.axes);
  }
  return maps;
}

/// Copies between the global tensor and rank's shard: toLocal ? global -> local : local -> global.
void copyShard(const void *src, void *dst, size_t elemSize, const ShardLayout &layout,
               const Mesh &mesh, int64_t rank, bool toLocal) {
  const std::vector<DimMap> maps = dimMaps(layout, mesh, rank);
  const size_t rank_ = maps.size();
  const char *in = static_cast<const char *>(src);
  char *out = static_cast<char *>(dst);
  if (rank_ == 0) {
    std::memcpy(out, in, elemSize);
    return;
  }
  for (const DimMap &m : maps)
    if (m.local() == 0) return;
  // Element strides of the global and the local tensor.
  std::vector<int64_t> gStride(rank_, 1), lStride(rank_, 1);
  for (size_t d = rank_ - 1; d-- > 0;) {
    gStride[d] = gStride[d + 1] * maps[d + 1].n;
    lStride[d] = lStride[d + 1] * maps[d + 1].local();
  }
  const DimMap &last = maps.back();
  const size_t run = static_cast<size_t>(last.m) * elemSize;
  // Odometer over the local indices of every dim but the last.
  std::vector<int64_t> idx(rank_ - 1, 0);
  while (true) {
    int64_t g = 0, l = 0;
    for (size_t d = 0; d + 1 < rank_; ++d) {
      g += maps[d].global(idx[d]) * gStride[d];
      l += idx[d] * lStride[d];
    }
    for (int64_t b = 0; b < last.k; ++b) {
      int64_t gOff = g + b * (last.n / last.k) + last.r * last.m;
      int64_t lOff = l + b * last.m;
      if (toLocal)
        std::memcpy(out + lOff * elemSize, in + gOff * elemSize, run);
      else
        std::memcpy(out + gOff * elemSize, in + lOff * elemSize, run);
    }
    size_t d = rank_ - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < maps[d].local()) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (rank_ == 1) return;
  }
}

}  // namespace

bool ShardLayout::splits(const Mesh &mesh) const {
  for (const DimShard &d : dims)
    if (mesh.groupSize(d.axes) > 1) return true;
  return false;
}

llvm::Expected<ShardLayout> makeShardLayout(const plan::Sharding &sharding, const Mesh &mesh,
                                            const std::string &what) {
  ShardLayout layout;
  layout.globalShape.assign(sharding.global_shape().begin(), sharding.global_shape().end());
  if (sharding.dims_size() != sharding.global_shape_size())
    return fail(what + ": sharding has " + llvm::Twine(sharding.dims_size()) + " dims but its global_shape " +
                shapeToString(layout.globalShape) + " has rank " + llvm::Twine(sharding.global_shape_size()));
  std::string known;
  for (const MeshAxis &a : mesh.axes()) known += (known.empty() ? "" : ", ") + a.name;
  if (known.empty()) known = "none: the plan has no mesh";
  llvm::SmallVector<int, 4> used;
  for (int d = 0; d < sharding.dims_size(); ++d) {
    const plan::DimSharding &ds = sharding.dims(d);
    DimShard out;
    int64_t n = layout.globalShape[d];
    if (n < 0) return fail(what + ": sharding global_shape " + shapeToString(layout.globalShape) + " has a negative dim");
    if (ds.blocks() < 0) return fail(what + ": sharding dim " + llvm::Twine(d) + " has blocks " + llvm::Twine(ds.blocks()) + " (expected >= 0)");
    out.blocks = ds.blocks() == 0 ? 1 : ds.blocks();
    for (const std::string &name : ds.axes()) {
      int i = mesh.axisIndex(name);
      if (i < 0)
        return fail(what + ": sharding dim " + llvm::Twine(d) + " names mesh axis '" + name +
                    "', which is not on the plan's mesh (its axes: " + known + ")");
      if (llvm::is_contained(used, i))
        return fail(what + ": sharding names mesh axis '" + name + "' twice");
      used.push_back(i);
      out.axes.push_back(i);
    }
    int64_t p = mesh.groupSize(out.axes);
    if (n % (out.blocks * p) != 0)
      return fail(what + ": global dim " + llvm::Twine(d) + " of size " + llvm::Twine(n) + " is not divisible by " +
                  (out.blocks > 1 ? llvm::Twine(out.blocks) + " blocks x " : llvm::Twine()) + "group size " +
                  llvm::Twine(p) + " of its mesh axes");
    layout.dims.push_back(std::move(out));
  }
  return layout;
}

Shape localShape(const ShardLayout &layout, const Mesh &mesh) {
  Shape s = layout.globalShape;
  for (size_t d = 0; d < s.size(); ++d) s[d] /= mesh.groupSize(layout.dims[d].axes);
  return s;
}

llvm::SmallVector<int64_t, 6> shardIndex(const ShardLayout &layout, const Mesh &mesh, int64_t rank) {
  llvm::SmallVector<int64_t, 6> out;
  for (const DimShard &d : layout.dims) out.push_back(d.axes.empty() ? 0 : mesh.groupRank(rank, d.axes));
  return out;
}

void sliceShard(const void *global, void *local, size_t elemSize, const ShardLayout &layout,
                const Mesh &mesh, int64_t rank) {
  copyShard(global, local, elemSize, layout, mesh, rank, /*toLocal=*/true);
}

void placeShard(const void *local, void *global, size_t elemSize, const ShardLayout &layout,
                const Mesh &mesh, int64_t rank) {
  copyShard(local, global, elemSize, layout, mesh, rank, /*toLocal=*/false);
}

void assembleShards(const void *locals, void *global, size_t elemSize, const ShardLayout &layout,
                    const Mesh &mesh) {
  const size_t bytes = static_cast<size_t>(numElements(localShape(layout, mesh))) * elemSize;
  for (int64_t r = 0; r < mesh.size(); ++r)
    placeShard(static_cast<const char *>(locals) + r * bytes, global, elemSize, layout, mesh, r);
}

}  // namespace colossal::runtime

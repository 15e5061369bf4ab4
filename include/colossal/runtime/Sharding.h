//===- Sharding.h - Sharded tensors: local shapes, slicing and assembling ------*- C++ -*-===//
//
// How a tensor of a global shape is split over the mesh (plan.proto `Sharding`, docs/parallelism.md
// "Sharded tensors in the plan and the runtime"). For each dim of global size n, split over the
// mesh axes A (group size P = product of their sizes) with k blocks (k = 0 or 1: contiguous):
//
//   view the dim as [k, n/k]; group rank r (row-major over A in the listed order, from the rank's
//   mesh coordinates: Mesh::groupRank) holds [k, (n/k)/P], chunk r of the inner dim.
//
// So local index j of that dim (0 <= j < n/P, m = n/(k·P)) is global index
//   (j / m) · (n/k) + r · m + (j % m).
// Dims slice independently; a dim with no axes is whole. Pure arithmetic and memory copies: no
// MPI, no MLIR.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SHARDING_H
#define COLOSSAL_RUNTIME_SHARDING_H

#include "colossal/runtime/Mesh.h"
#include "colossal/runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace colossal::plan {
class Sharding;
}

namespace colossal::runtime {

/// One dim of a sharding: the mesh axes (indices into Mesh::axes(), major to minor) and blocks.
struct DimShard {
  llvm::SmallVector<int, 2> axes;
  int64_t blocks = 1;  // >= 1
};

/// A checked sharding against one mesh.
struct ShardLayout {
  Shape globalShape;
  std::vector<DimShard> dims;  // one per dim of globalShape
  /// True when some dim is split over at least one axis of size > 1.
  bool splits(const Mesh &mesh) const;
};

/// Checks `sharding` (plan.proto) against `mesh` and returns it with axis indices. Errors (each
/// prefixed by `what`): the number of DimSharding entries differs from global_shape's rank; a
/// negative dim; an axis that is not on the mesh (lists the mesh's axes) or is used twice in the
/// tensor (in one dim or two); blocks < 0; a dim not divisible by blocks · group size.
llvm::Expected<ShardLayout> makeShardLayout(const plan::Sharding &sharding, const Mesh &mesh,
                                            const std::string &what);

/// The local shard's shape: global dim n becomes n / P (P the group size of its axes).
Shape localShape(const ShardLayout &layout, const Mesh &mesh);

/// Per dim, `rank`'s group rank over that dim's axes (0 for a whole dim).
llvm::SmallVector<int64_t, 6> shardIndex(const ShardLayout &layout, const Mesh &mesh, int64_t rank);

/// Copies world rank `rank`'s shard out of the global tensor: `global` holds the row-major
/// globalShape of `elemSize`-byte elements, `local` receives localShape() elements, row-major.
/// `rank` must be in [0, mesh.size()); the buffers must not overlap.
void sliceShard(const void *global, void *local, size_t elemSize, const ShardLayout &layout,
                const Mesh &mesh, int64_t rank);

/// The inverse of sliceShard: writes `local` (rank `rank`'s shard) into its place in `global`,
/// leaving the other elements unchanged.
void placeShard(const void *local, void *global, size_t elemSize, const ShardLayout &layout,
                const Mesh &mesh, int64_t rank);

/// Rebuilds the global tensor from every rank's shard: `locals` holds mesh.size() shards of
/// localShape() elements back to back, in world-rank order (what an all_gather over the world of
/// the flat local buffers gives). Ranks holding the same shard (replicas over the axes the tensor
/// is not split on) must agree; the last one written wins.
void assembleShards(const void *locals, void *global, size_t elemSize, const ShardLayout &layout,
                    const Mesh &mesh);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_SHARDING_H

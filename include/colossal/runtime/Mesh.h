//===- Mesh.h - Named device-mesh axes and the rank layout ----------------------*- C++ -*-===//
//
// A mesh is an ordered list of named axes (plan.proto `Plan.mesh`, e.g. dp=2, tp=2). Ranks are laid
// out row-major over the axes in the order the plan lists them: the last axis varies fastest, so
//
//   rank = ((c0 * size1 + c1) * size2 + c2) ...        (c_i the coordinate on axis i)
//
// and for dp=2, tp=2 the tp groups are {0,1}, {2,3} and the dp groups {0,2}, {1,3}. A group over a
// set of axes holds the ranks whose coordinates agree on every other axis; inside it, ranks are
// numbered row-major over the group's axes in the order they were named (docs/parallelism.md).
// Pure arithmetic: no MPI.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_MESH_H
#define COLOSSAL_RUNTIME_MESH_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace colossal::plan {
class Plan;
}

namespace colossal::runtime {

/// What a mesh axis does (plan.proto MeshAxis.Role). Data axes split the batch: the runtime
/// scatters inputs, gathers outputs and reduces the loss over them.
enum class AxisRole { Unspecified, Data, Tensor, Pipeline, GridRow, GridCol, GridDepth };

/// One named axis of a mesh.
struct MeshAxis {
  std::string name;
  int64_t size = 1;
  AxisRole role = AxisRole::Unspecified;
};

/// The largest number of ranks a mesh may have (MPI ranks are `int`).
constexpr int64_t kMaxMeshRanks = int64_t(1) << 30;

class Mesh {
public:
  /// The one-rank mesh (no axes).
  Mesh() = default;

  /// Checks and builds a mesh. Errors: an empty name, a name that is not [A-Za-z_][A-Za-z0-9_]*, a
  /// name given twice, a size < 1, a product above kMaxMeshRanks.
  static llvm::Expected<Mesh> create(std::vector<MeshAxis> axes);
  /// The mesh of a plan (its `mesh` entries in order); errors as create(), prefixed by `planPath`.
  static llvm::Expected<Mesh> fromPlan(const plan::Plan &plan, llvm::StringRef planPath);

  llvm::ArrayRef<MeshAxis> axes() const { return axes_; }
  /// The number of ranks: the product of the axis sizes (1 for no axes).
  int64_t size() const { return size_; }
  /// Index of the axis named `name`, or -1.
  int axisIndex(llvm::StringRef name) const;
  /// The data-parallel axes (role Data): their names joined with "," (for Communicator::axes;
  /// empty without one) and the product of their sizes (1 without one).
  std::string dataAxes() const;
  int64_t dataSize() const;
  /// "dp=2 x tp=2" (or "one rank" for an empty mesh), for messages.
  std::string toString() const;

  /// Coordinates of `rank` (0 <= rank < size()), one per axis.
  llvm::SmallVector<int64_t, 4> coords(int64_t rank) const;
  /// The rank at `coords` (one per axis, each in [0, axis size)).
  int64_t rankOf(llvm::ArrayRef<int64_t> coords) const;

  /// Parses a comma-separated list of axis names ("tp", "dp,tp"; spaces around names allowed)
  /// into axis indices, in the order written. Errors: empty list or name, unknown name (lists the
  /// mesh's axes), a name given twice.
  llvm::Expected<llvm::SmallVector<int, 4>> parseAxes(llvm::StringRef list) const;

  /// The product of the sizes of `axes`.
  int64_t groupSize(llvm::ArrayRef<int> axes) const;
  /// The ranks of the group over `axes` that contains `rank`, indexed by their group rank:
  /// row-major over `axes` in the given order, every other coordinate equal to `rank`'s.
  std::vector<int64_t> groupRanks(int64_t rank, llvm::ArrayRef<int> axes) const;
  /// `rank`'s index inside its group over `axes` (its position in groupRanks()).
  int64_t groupRank(int64_t rank, llvm::ArrayRef<int> axes) const;
  /// Identifies the group over `axes` holding `rank`: row-major index of its coordinates on the
  /// other axes (in mesh order). Ranks share a group iff they share this number; it is in
  /// [0, size() / groupSize(axes)).
  int64_t groupId(int64_t rank, llvm::ArrayRef<int> axes) const;

private:
  std::vector<MeshAxis> axes_;
  int64_t size_ = 1;
};

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_MESH_H

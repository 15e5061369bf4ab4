//===- Sharding.h - shardings of tensors over a named device mesh -----*- C++ -*-===//
//
// The partitioner's working form of a `#colossal.sharding` (ColossalAttrs.td), with mesh axes as
// indices; toAttr converts, and the IR and every diagnostic print the attribute.
// The value a sharding describes (docs/parallelism.md "Tensor parallelism"): a tensor of global
// shape G, split over the mesh. Per dim, the mesh axes it is split over (major to minor; group
// rank row-major over them) and a block count k (k > 1: the dim is k equal blocks, each split
// separately, as a fused QKV projection's columns); plus the axes over which the local value is a
// partial sum still to be reduced (GSPMD's "partial", Xu et al. 2021 §3.2; Megatron's row-parallel
// output before its all_reduce).
//===----------------------------------------------------------------------------------===//
#ifndef COLOSSAL_PASSES_PARALLEL_SHARDING_H
#define COLOSSAL_PASSES_PARALLEL_SHARDING_H

#include "dialects/Colossal/ColossalOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace colossal::spmd {

/// The mesh: axis names in rank-layout order and their sizes, and the symbol of its
/// `colossal.mesh` (the `@mesh` of every `#colossal.sharding` written over it).
struct Mesh {
  mlir::MLIRContext *context = nullptr;
  std::string symbol;
  llvm::SmallVector<std::string> names;
  llvm::SmallVector<int64_t> sizes;

  /// The axes of `op`.
  static Mesh of(MeshOp op);

  /// Index of `name`, or -1.
  int find(llvm::StringRef name) const;
  /// Π sizes of `axes`.
  int64_t groupSize(llvm::ArrayRef<int> axes) const;
  /// `["tp", "dp"]` as a StrArrayAttr.
  mlir::ArrayAttr axesAttr(mlir::MLIRContext *ctx, llvm::ArrayRef<int> axes) const;
};

using Axes = llvm::SmallVector<int, 2>;

struct Sharding {
  llvm::SmallVector<Axes> dims;      // per dim: mesh axis indices it is split over
  llvm::SmallVector<int64_t> blocks; // per dim: 1, or k equal blocks split separately
  Axes partial;                      // sorted: pending sum over these axes

  static Sharding replicated(int64_t rank) {
    Sharding s;
    s.dims.resize(rank);
    s.blocks.assign(rank, 1);
    return s;
  }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool isSplit() const;
  bool isReplicated() const { return !isSplit() && partial.empty(); }
  /// Every axis used by a dim or the partial set.
  Axes usedAxes() const;
  /// The same sharding without the partial axes.
  Sharding withoutPartial() const {
    Sharding s = *this;
    s.partial.clear();
    return s;
  }
  bool operator==(const Sharding &o) const {
    return dims == o.dims && blocks == o.blocks && partial == o.partial;
  }
  bool operator!=(const Sharding &o) const { return !(*this == o); }
  /// The IR form, `#colossal.sharding<@mesh, [{"tp"}, {}], partial = {"tp"}>`.
  ShardingAttr toAttr(const Mesh &mesh) const;
  /// The attribute's text, for diagnostics.
  std::string str(const Mesh &mesh) const;
};

/// Local (per-rank) shape of `global` under `s`: each split dim divided by its group size.
llvm::SmallVector<int64_t> localShape(llvm::ArrayRef<int64_t> global, const Sharding &s,
                                      const Mesh &mesh);

/// Whether `s` divides `global` evenly (every split dim by group size × blocks).
bool divides(llvm::ArrayRef<int64_t> global, const Sharding &s, const Mesh &mesh);

} // namespace colossal::spmd

#endif

//===- Reshard.cpp - moving a value between shardings with collectives ---===//
//
// Partitioner.h. all_reduce / reduce_scatter for partial sums, all_gather for splits that must
// go, shard_slice (no communication) for splits that must appear.
//===----------------------------------------------------------------------------------===//
#include "passes/Parallel/Partitioner.h"

#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace colossal;
using namespace colossal::spmd;

//===----------------------------------------------------------------------===//
// Resharding
//===----------------------------------------------------------------------===//

/// A dim of k blocks (k > 1) viewed as [k, n/k], so a collective acts on each block: returns the
/// view and the dim to act on (dim + 1); k = 1: `x` and `dim` unchanged.
static std::pair<Value, int64_t> blockView(OpBuilder &b, Location loc, Value x, int64_t dim,
                                           int64_t k) {
  if (k <= 1)
    return {x, dim};
  auto type = tensorType(x);
  SmallVector<int64_t> view(type.getShape());
  view[dim] /= k;
  view.insert(view.begin() + dim, k);
  Value v =
      colossal::ReshapeOp::create(b, loc, RankedTensorType::get(view, type.getElementType()), x);
  return {v, dim + 1};
}

/// all_gather over `axes` (a suffix of s.dims[dim]) along `dim`; blocks via [k, n/k] views.
Value Partitioner::gatherDim(OpBuilder &b, Location loc, Value v, Sharding &s, int64_t dim,
                             ArrayRef<int> axes) {
  auto global = globalTypes.lookup(v);
  auto local = tensorType(v);
  int64_t p = mesh.groupSize(axes), k = s.blocks[dim];
  s.dims[dim].resize(s.dims[dim].size() - axes.size());
  if (s.dims[dim].empty())
    s.blocks[dim] = 1;
  auto outLocal = localType(global, s);
  auto [x, gdim] = blockView(b, loc, v, dim, k);
  SmallVector<int64_t> gathered(tensorType(x).getShape());
  gathered[gdim] *= p;
  x = colossal::AllGatherOp::create(b, loc, RankedTensorType::get(gathered, local.getElementType()),
                                    x, mesh.axesAttr(b.getContext(), axes),
                                    b.getI64IntegerAttr(gdim));
  if (k > 1)
    x = colossal::ReshapeOp::create(b, loc, outLocal, x);
  return record(x, global, s);
}

/// shard_slice over `axes` appended to s.dims[dim] (with `blocks`), no communication.
Value Partitioner::sliceDim(OpBuilder &b, Location loc, Value v, Sharding &s, int64_t dim,
                            ArrayRef<int> axes, int64_t blocks) {
  auto global = globalTypes.lookup(v);
  auto local = tensorType(v);
  int64_t p = mesh.groupSize(axes);
  s.dims[dim].append(axes.begin(), axes.end());
  s.blocks[dim] = blocks;
  auto outLocal = localType(global, s);
  auto [x, sdim] = blockView(b, loc, v, dim, blocks);
  SmallVector<int64_t> sliced(tensorType(x).getShape());
  sliced[sdim] /= p;
  x = colossal::ShardSliceOp::create(b, loc, RankedTensorType::get(sliced, local.getElementType()),
                                     x, mesh.axesAttr(b.getContext(), axes),
                                     b.getI64IntegerAttr(sdim));
  if (blocks > 1)
    x = colossal::ReshapeOp::create(b, loc, outLocal, x);
  return record(x, global, s);
}

Value Partitioner::reshard(OpBuilder &b, Location loc, Value v, const Sharding &to) {
  Sharding s = shardings.lookup(v);
  if (s == to)
    return v;
  auto global = globalTypes.lookup(v);
  // 1. Partial sums: reduce_scatter when the target splits a dim over exactly the pending axes
  //    on top of what it already has there (Megatron sequence parallelism), else all_reduce.
  Axes pending;
  for (int a : s.partial)
    if (!llvm::is_contained(to.partial, a))
      pending.push_back(a);
  if (!pending.empty()) {
    // reduce_scatter over the axes the target appends to a dim (a suffix of the pending ones
    // in order), all_reduce over the rest first.
    std::optional<int64_t> scatterDim;
    for (int64_t d = 0; d < s.rank() && !scatterDim; ++d) {
      const Axes &want = to.dims[d];
      if (to.blocks[d] != 1 || s.blocks[d] != 1 || want.size() <= s.dims[d].size() ||
          ArrayRef<int>(want).take_front(s.dims[d].size()) != ArrayRef<int>(s.dims[d]))
        continue;
      ArrayRef<int> extra = ArrayRef<int>(want).drop_front(s.dims[d].size());
      if (llvm::all_of(extra, [&](int a) { return llvm::is_contained(pending, a); }))
        scatterDim = d;
    }
    if (scatterDim) {
      ArrayRef<int> extra =
          ArrayRef<int>(to.dims[*scatterDim]).drop_front(s.dims[*scatterDim].size());
      Axes first;
      for (int a : pending)
        if (!llvm::is_contained(extra, a))
          first.push_back(a);
      if (!first.empty()) {
        Sharding next = s;
        next.partial.clear();
        for (int a : s.partial)
          if (!llvm::is_contained(first, a))
            next.partial.push_back(a);
        Value x = colossal::AllReduceOp::create(
            b, loc, tensorType(v), v, mesh.axesAttr(b.getContext(), first), b.getStringAttr("sum"));
        v = record(x, global, next);
        s = next;
      }
      pending.assign(extra.begin(), extra.end());
    }
    Sharding next = s;
    next.partial.clear();
    for (int a : s.partial)
      if (!llvm::is_contained(pending, a))
        next.partial.push_back(a);
    Value x;
    if (scatterDim) {
      next.dims[*scatterDim].append(pending.begin(), pending.end());
      x = colossal::ReduceScatterOp::create(
          b, loc, localType(global, next), v, mesh.axesAttr(b.getContext(), pending),
          b.getI64IntegerAttr(*scatterDim), b.getStringAttr("sum"));
    } else {
      x = colossal::AllReduceOp::create(
          b, loc, tensorType(v), v, mesh.axesAttr(b.getContext(), pending), b.getStringAttr("sum"));
    }
    v = record(x, global, next);
    s = next;
  }
  // 2. Gather what must go (keep the longest common prefix of each dim's axes), then 3. slice.
  SmallVector<size_t> keep(s.rank());
  for (int64_t d = 0; d < s.rank(); ++d) {
    size_t c = 0;
    if (s.blocks[d] == to.blocks[d] || s.dims[d].empty())
      while (c < s.dims[d].size() && c < to.dims[d].size() && s.dims[d][c] == to.dims[d][c])
        ++c;
    keep[d] = c;
    if (c < s.dims[d].size()) {
      Axes drop(s.dims[d].begin() + c, s.dims[d].end());
      v = gatherDim(b, loc, v, s, d, drop);
    }
  }
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (s.dims[d].size() < to.dims[d].size()) {
      Axes add(to.dims[d].begin() + s.dims[d].size(), to.dims[d].end());
      v = sliceDim(b, loc, v, s, d, add, to.blocks[d]);
    }
  }
  assert(shardings.lookup(v) == to && "reshard did not reach its target");
  return v;
}

//===- ShardingRule.h - what an op's sharding rule is -------------*- C++ -*-===//
//
// Each op that can run on split operands states its rule next to its definition (the
// `ShardingRuleOpInterface`, ColossalInterfaces.td; `Sharded` in the op's traits), and the SPMD
// partitioner (passes/Parallel/Rules.cpp) applies the rule to the operands' shardings. An op
// without the interface, or whose getShardingRule() is nullopt for its attributes, has no rule: a
// split or partial operand reaching it is a compile error naming the op (never a silent
// all_gather). docs/parallelism.md "Sharding rules".
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_SHARDINGRULE_H
#define COLOSSAL_DIALECTS_COLOSSAL_SHARDINGRULE_H

#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <initializer_list>

namespace colossal {

struct ShardingRule {
  enum class Kind : uint8_t {
    /// NumPy-broadcast elementwise: a dim split in an operand of the full extent splits the
    /// result alike; `partial` says how pending sums pass through.
    Elementwise,
    /// matmul / gemm: Megatron column- and row-parallel, SUMMA on 2D/2.5D/3D grids.
    Contraction,
    Reshape,
    Transpose,
    Split,
    Concat,
    Slice,
    SliceGrad,
    /// expand: dims that broadcast are whole, the others carry over.
    Broadcast,
    /// Normalizes (or masks, trilu) over dims [axis, rank) of its first `numX` operands, which
    /// share one sharding; `xLikeOperand` (>= 0) is one more such operand (a *_grad op's dy);
    /// the last `numResultsReduced` results are sums over the leading dims (dscale, dbias).
    Normalization,
    /// reduce_sum / reduce_mean / reduce_max over the op's `axes`; `reduce` says which.
    Reduction,
    /// attention / attention_grad: batch and heads split, sequence and head dims whole.
    Attention,
    /// gather along axis 0 (vocab-parallel embedding).
    Gather,
    /// gather_grad along axis 0: rows split with the indices give a partial sum.
    GatherGrad,
    /// cross_entropy(_grad): vocab-parallel when the logits arrive split over the classes.
    CrossEntropy,
    /// nll_loss on row blocks (colossal-split-batch): the loss of the block's rows.
    NllLoss,
    /// acc += scale * g (accumulate_grad), buf ← value (update_buffer): both operands alike.
    AccumulateGrad,
    /// adam(w) / sgd: every state operand sharded like its parameter, none partial.
    OptimizerUpdate,
    /// Each row of dim 0 is computed alone (conv, pool, resize, ...): the `rowOperands` are
    /// split with the rows, every other dim whole.
    RowWise,
    /// Operands and results whole (the op's stated rule: it needs the whole tensors).
    Whole,
  };
  /// Elementwise: how a pending sum (partial) passes through. Additive: all operands partial
  /// alike stay partial (add, sub); Scaling: one partial operand times whole ones stays partial
  /// (mul, neg); Numerator: as Scaling, for operand 0 only (div).
  enum class Partial : uint8_t { None, Additive, Scaling, Numerator };
  /// Reduction: sum (a split reduced dim becomes partial), mean (the row block's mean under
  /// colossal-split-batch), max (needs whole reduced dims).
  enum class Reduce : uint8_t { Sum, Mean, Max };

  Kind kind = Kind::Whole;
  Partial partial = Partial::None;
  Reduce reduce = Reduce::Sum;
  int64_t axis = 0; // Normalization: first normalized dim (negative: from the end)
  int numX = 1;
  int numResultsReduced = 0;
  int xLikeOperand = -1;
  llvm::SmallVector<unsigned, 2> rowOperands;

  static ShardingRule of(Kind kind) {
    ShardingRule r;
    r.kind = kind;
    return r;
  }
  static ShardingRule elementwise(Partial partial = Partial::None) {
    ShardingRule r = of(Kind::Elementwise);
    r.partial = partial;
    return r;
  }
  static ShardingRule normalization(int64_t axis, int numX = 1, int numResultsReduced = 0,
                                    int xLikeOperand = -1) {
    ShardingRule r = of(Kind::Normalization);
    r.axis = axis;
    r.numX = numX;
    r.numResultsReduced = numResultsReduced;
    r.xLikeOperand = xLikeOperand;
    return r;
  }
  static ShardingRule reduction(Reduce reduce) {
    ShardingRule r = of(Kind::Reduction);
    r.reduce = reduce;
    return r;
  }
  static ShardingRule rowWise(std::initializer_list<unsigned> rowOperands = {0}) {
    ShardingRule r = of(Kind::RowWise);
    r.rowOperands.assign(rowOperands.begin(), rowOperands.end());
    return r;
  }
};

} // namespace colossal

#endif

//===- Partitioner.h - the SPMD partitioner's walk, rules and resharding ---*- C++ -*-===//
//
// docs/parallelism.md "Tensor parallelism: the partitioner". A Partitioner rewrites one function
// into its per-rank program: Partitioner.cpp walks the ops, Rules.cpp applies each op's sharding
// rule (and the strategy's choice for a parameter at its first use), Reshard.cpp the collectives
// that move a value between shardings, Emit.cpp the ops that become several (vocab-parallel
// gather and cross-entropy, SUMMA, the sharded global norm). SpmdPartition.cpp is the pass.
//===----------------------------------------------------------------------------------===//
#ifndef COLOSSAL_PASSES_PARALLEL_PARTITIONER_H
#define COLOSSAL_PASSES_PARALLEL_PARTITIONER_H

#include "passes/Parallel/Sharding.h"

#include "dialects/Colossal/ColossalOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Regex.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace colossal::spmd {

using namespace mlir;

inline RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Strategy options (the spec's `parallel.tensor`).
struct Strategy {
  std::string style = "1d";
  bool sequenceParallel = false;
  Axes tp;       // the axes tensor parallelism splits over (1d: [tp])
  Axes row, col; // 2d/2.5d/3d: the q x q grid
  Axes depth;    // 2.5d/3d: the third axis
  Axes batch;    // 2d/2.5d/3d: the axes the batch (dim 0 of token inputs) is split over
  /// colossal-split-batch: every function input (`colossal.input`) arrives split along dim 0
  /// over these axes and results that keep that split stay split (the program of one row
  /// block); split arguments carry no `colossal.sharding` (nothing is sharded across ranks).
  Axes localBatch;
  /// With localBatch: the argument numbers that arrive split; empty means every input
  /// (colossal-generate splits the token rows, never the block tables).
  SmallVector<unsigned> localBatchArgs;
  /// colossal-split-batch in train mode: a result that is a sum or mean over the rows (partial
  /// over `localBatch`) stays the row block's value; the training loop combines the row blocks'
  /// losses (their mean, as grad_accum always has).
  bool localPartialResults = false;
  /// colossal-split-batch: the global batch (dim 0 of the inputs). A constant with this many rows
  /// whose row blocks are equal (position ids, masks and tables broadcast to the batch, folded at
  /// import) is taken as split along dim 0 like an input, so what is computed from it follows.
  int64_t localBatchRows = 0;
  /// The end of the error for an op without a sharding rule.
  std::string noRuleAdvice =
      "an op without a rule is never silently replicated: give its operands a whole layout with "
      "parallel.tensor.hints, or run it without tensor parallelism";
  struct Hint {
    std::string pattern;
    llvm::Regex regex;
    SmallVector<Axes> dims;
    bool used = false;
  };
  std::vector<std::unique_ptr<Hint>> hints;
};

/// Block 0 of `value` cut into `ways` equal blocks along `dim`, typed `local`, when every block
/// holds the same elements; nullopt otherwise.
std::optional<DenseElementsAttr> equalRowBlock(ElementsAttr value, int64_t dim, int64_t ways,
                                               RankedTensorType local);

/// colossal-split-batch and colossal-generate run the partitioner over an axis of their own (row
/// blocks, token rows) that must leave no collective behind. These are their shared pieces.
/// Whether `op` is a collective (or axis_index) over mesh axis `axis`.
bool isCollectiveOver(Operation *op, llvm::StringRef axis);
/// A cut of a broadcast (expand of a tensor of size 1 or absent on the cut dim) is the same
/// broadcast to the smaller type: `slice` is replaced by it and erased; false when `slice` cuts
/// anything else.
bool shrinkBroadcastCut(colossal::ShardSliceOp slice);
/// The op to name in the error for a collective `op` over such an axis: the producer of a partial
/// sum (all_reduce, reduce_scatter), else the consumer of a gathered value, else `op`.
Operation *collectiveBlame(Operation *op);
/// Erases the ops of `f` left trivially dead, last first.
void eraseDeadOps(func::FuncOp f);

/// One op's needs: the sharding each operand must have, and those of its results.
struct Decision {
  SmallVector<Sharding> operands;
  SmallVector<Sharding> results;
  bool summa = false; // emit the matmul as SUMMA's q broadcast steps (emitSumma)
};

class Partitioner {
public:
  Partitioner(const Mesh &mesh, Strategy &strategy, llvm::StringMap<Sharding> &decided,
              bool deciding)
      : mesh(mesh), strategy(strategy), decided(decided), deciding(deciding) {}

  LogicalResult run(func::FuncOp f);
  /// Records, op by op in walk order, the shardings of each op's results (stage=propagate).
  void setTrace(std::vector<Attribute> *t) { trace = t; }

private:
  const Mesh &mesh;
  Strategy &strategy;
  llvm::StringMap<Sharding> &decided; // parameter name -> sharding
  bool deciding;                      // undecided parameters may be decided by their first use
  llvm::DenseMap<Value, RankedTensorType> globalTypes;
  llvm::DenseMap<Value, Sharding> shardings;
  llvm::DenseMap<Value, std::string> freeParams; // undecided parameter arguments -> name
  llvm::DenseMap<Value, Value> castSources;      // deciding: a cast copy of a free parameter -> it
  llvm::DenseSet<Value> weights;                 // parameters and what is derived from them alone
  llvm::DenseSet<Value> tokenDerived;            // function inputs of integer type and views
  std::vector<Attribute> *trace = nullptr;       // stage=propagate: results' shardings per op
  Operation *errorOp = nullptr;                  // a size the strategy cannot split (phase 1)
  std::string errorMessage;

  /// An op that reaches the partitioner without a sharding rule for its operands' shardings:
  /// an error in both phases (Strategy::noRuleAdvice says what to do).
  void noRule(Operation *op, const Twine &message) {
    if (!errorOp) {
      errorOp = op;
      errorMessage = (message + "; " + strategy.noRuleAdvice).str();
    }
  }
  void sizeError(Operation *op, const Twine &message) {
    if (deciding && !errorOp) {
      errorOp = op;
      errorMessage = message.str();
    }
  }
  std::string axesName(ArrayRef<int> axes) {
    std::string s;
    for (int a : axes)
      s += (s.empty() ? "" : "*") + mesh.names[a] + "=" + std::to_string(mesh.sizes[a]);
    return s;
  }

  ArrayRef<int64_t> gshape(Value v) { return globalTypes.lookup(v).getShape(); }
  RankedTensorType localType(RankedTensorType global, const Sharding &s) {
    return RankedTensorType::get(localShape(global.getShape(), s, mesh), global.getElementType());
  }
  Value record(Value v, RankedTensorType global, const Sharding &s) {
    globalTypes[v] = global;
    shardings[v] = s;
    return v;
  }

  /// The op's sharding rule (its ShardingRuleOpInterface, dialects/Colossal/ShardingRule.h)
  /// applied to its operands' shardings `in`; one function per ShardingRule::Kind below.
  Decision rule(Operation *op, ArrayRef<Sharding> in);
  Decision elementwise(Operation *op, ArrayRef<Sharding> in, ShardingRule::Partial partial);
  Decision contraction(Operation *op, ArrayRef<Sharding> in);
  Decision reshape(Operation *op, ArrayRef<Sharding> in);
  Decision normalization(Operation *op, ArrayRef<Sharding> in, int64_t axis, int numX,
                         int numResultsReduced, int xLikeOperand);
  Decision attention(Operation *op, ArrayRef<Sharding> in);
  Decision gather(Operation *op, ArrayRef<Sharding> in);
  Decision rowWise(Operation *op, ArrayRef<Sharding> in, ArrayRef<unsigned> rowOperands);
  /// kv_append and paged_attention: rows along dim 0 of the step's rows, heads along dim 1 of
  /// the rows and of the caches [NB, Hkv, BS, D] (the keys' split decides the cache's).
  Decision pagedKv(Operation *op, ArrayRef<Sharding> in);
  Decision transpose(colossal::TransposeOp op, ArrayRef<Sharding> in);
  Decision split(colossal::SplitOp op, ArrayRef<Sharding> in);
  Decision concat(colossal::ConcatOp op, ArrayRef<Sharding> in);
  Decision slice(colossal::SliceOp op, ArrayRef<Sharding> in);
  Decision sliceGrad(colossal::SliceGradOp op, ArrayRef<Sharding> in);
  Decision broadcast(Operation *op, ArrayRef<Sharding> in);
  Decision reduction(Operation *op, ArrayRef<Sharding> in, ShardingRule::Reduce reduce);
  Decision gatherGrad(Operation *op, ArrayRef<Sharding> in);
  Decision crossEntropy(Operation *op, ArrayRef<Sharding> in);
  Decision nllLoss(colossal::NllLossOp op, ArrayRef<Sharding> in);
  Decision allReplicated(Operation *op);

  Value reshard(OpBuilder &b, Location loc, Value v, const Sharding &to);
  Value gatherDim(OpBuilder &b, Location loc, Value v, Sharding &s, int64_t dim,
                  ArrayRef<int> axes);
  Value sliceDim(OpBuilder &b, Location loc, Value v, Sharding &s, int64_t dim, ArrayRef<int> axes,
                 int64_t blocks);
  void sequenceParallelPolicy(Sharding &out, const Sharding &partialOperand,
                              ArrayRef<int64_t> shape);
  std::optional<Sharding> decideWeight(Operation *op, unsigned operand, ArrayRef<Sharding> in);
  /// Records free parameter value `v` (an argument, or a cast copy of one) as decided to `s`.
  void decideFree(Value v, const Sharding &s);
  LogicalResult emitVocabParallelGather(colossal::GatherOp op, const Decision &d);
  LogicalResult emitGlobalNorm(colossal::GlobalNormOp op);
  struct LocalIndex {
    Value safe, inLow, inHigh;
  };
  LocalIndex localIndex(OpBuilder &b, Location loc, Value ids, ArrayAttr axes, int64_t rows);
  void emitSumma(colossal::MatMulOp op, const Decision &d);
  std::optional<Decision> summa(Operation *op, ArrayRef<Sharding> in);
  LogicalResult emitVocabParallelCrossEntropy(Operation *op, const Decision &d);
  bool axesFree(const Sharding &s, ArrayRef<int> axes) {
    Axes used = s.usedAxes();
    return llvm::none_of(axes, [&](int a) { return llvm::is_contained(used, a); });
  }
};

} // namespace colossal::spmd

#endif

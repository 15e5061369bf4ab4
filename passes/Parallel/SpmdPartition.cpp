//===- SpmdPartition.cpp - colossal-spmd-partition: one program → per-rank programs ---===//
//
// docs/parallelism.md "Tensor parallelism". Two phases over the module:
//
// 1. Strategy: parameters get shardings. Hints from the spec first; then the walk of the primary
//    function (@train_step, else @forward) decides each remaining parameter at its first use by
//    the rule of the op that reads it (Megatron-LM's choice, Shoeybi et al. 2019 §3, found on the
//    graph rather than by module names): a matmul weight whose input is not split on K is
//    column-parallel (its columns over `tp`; k blocks when the product feeds a k-way equal split,
//    a fused QKV), one whose input is split on K is row-parallel; a gather table read with token
//    ids is vocab-parallel; everything else is replicated.
// 2. Partitioning: every function is rewritten, op by op in program order, into the per-rank
//    program. Each op's rule maps its operands' shardings to the shardings it needs and those of
//    its results (the GSPMD recipe, Xu et al. 2021); an operand whose sharding differs is
//    resharded with collectives (all_reduce or reduce_scatter for a partial sum, all_gather for a
//    split that must go, shard_slice — no communication — for a split that must appear). Result
//    types become local shapes. Function results are made whole.
//
// Data parallelism (`dp`) is not handled here: the batch import and the runtime do it.
//===----------------------------------------------------------------------------------===//
#include "passes/Parallel/Sharding.h"
#include "passes/Passes.h"

#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Regex.h"

#include <map>

namespace colossal {
#define GEN_PASS_DEF_SPMDPARTITION
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::spmd;

namespace {

RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Strategy options (the spec's `parallel.tensor`).
struct Strategy {
  std::string style = "1d";
  bool sequenceParallel = false;
  Axes tp;       // the axes tensor parallelism splits over (1d: [tp])
  Axes row, col; // 2d/2.5d/3d: the q x q grid
  Axes depth;    // 2.5d/3d: the third axis
  Axes batch;    // 2d/2.5d/3d: the axes the batch (dim 0 of token inputs) is split over
  struct Hint {
    std::string pattern;
    llvm::Regex regex;
    SmallVector<Axes> dims;
    bool used = false;
  };
  std::vector<std::unique_ptr<Hint>> hints;
};

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
  void setTrace(std::vector<std::string> *t) { trace = t; }

private:
  const Mesh &mesh;
  Strategy &strategy;
  llvm::StringMap<Sharding> &decided; // parameter name -> sharding
  bool deciding;                      // undecided parameters may be decided by their first use
  llvm::DenseMap<Value, RankedTensorType> globalTypes;
  llvm::DenseMap<Value, Sharding> shardings;
  llvm::DenseMap<Value, std::string> freeParams; // undecided parameter arguments -> name
  llvm::DenseSet<Value> weights;                 // parameters and what is derived from them alone
  llvm::DenseSet<Value> tokenDerived;            // function inputs of integer type and views
  std::vector<std::string> *trace = nullptr;     // stage=propagate: results' shardings per op
  Operation *errorOp = nullptr;                  // a size the strategy cannot split (phase 1)
  std::string errorMessage;

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

  Decision rule(Operation *op, ArrayRef<Sharding> in);
  Decision elementwise(Operation *op, ArrayRef<Sharding> in);
  Decision contraction(Operation *op, ArrayRef<Sharding> in);
  Decision reshape(Operation *op, ArrayRef<Sharding> in);
  Decision normalization(Operation *op, ArrayRef<Sharding> in, int64_t axis, int numX,
                         int numResultsReduced);
  Decision attention(Operation *op, ArrayRef<Sharding> in);
  Decision gather(Operation *op, ArrayRef<Sharding> in);
  Decision allReplicated(Operation *op);

  Value reshard(OpBuilder &b, Location loc, Value v, const Sharding &to);
  Value gatherDim(OpBuilder &b, Location loc, Value v, Sharding &s, int64_t dim,
                  ArrayRef<int> axes);
  Value sliceDim(OpBuilder &b, Location loc, Value v, Sharding &s, int64_t dim, ArrayRef<int> axes,
                 int64_t blocks);
  void sequenceParallelPolicy(Sharding &out, const Sharding &partialOperand,
                              ArrayRef<int64_t> shape);
  std::optional<Sharding> decideWeight(Operation *op, unsigned operand, ArrayRef<Sharding> in);
  LogicalResult emitVocabParallelGather(colossal::GatherOp op, const Decision &d);
  LogicalResult emitGlobalNorm(colossal::GlobalNormOp op);
  void emitSumma(colossal::MatMulOp op, const Decision &d);
  std::optional<Decision> summa(Operation *op, ArrayRef<Sharding> in);
  LogicalResult emitVocabParallelCrossEntropy(Operation *op, const Decision &d);
  bool axesFree(const Sharding &s, ArrayRef<int> axes) {
    Axes used = s.usedAxes();
    return llvm::none_of(axes, [&](int a) { return llvm::is_contained(used, a); });
  }
};

//===----------------------------------------------------------------------===//
// Resharding
//===----------------------------------------------------------------------===//

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
  Value x = v;
  int64_t gdim = dim;
  if (k > 1) {
    SmallVector<int64_t> view(local.getShape());
    view[dim] = local.getDimSize(dim) / k;
    view.insert(view.begin() + dim, k);
    x = colossal::ReshapeOp::create(b, loc, RankedTensorType::get(view, local.getElementType()), x);
    gdim = dim + 1;
  }
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
  Value x = v;
  int64_t sdim = dim;
  if (blocks > 1) {
    SmallVector<int64_t> view(local.getShape());
    view[dim] = local.getDimSize(dim) / blocks;
    view.insert(view.begin() + dim, blocks);
    x = colossal::ReshapeOp::create(b, loc, RankedTensorType::get(view, local.getElementType()), x);
    sdim = dim + 1;
  }
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

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

Decision Partitioner::allReplicated(Operation *op) {
  Decision d;
  for (Value v : op->getOperands())
    d.operands.push_back(Sharding::replicated(tensorType(v).getRank()));
  for (Value r : op->getResults())
    d.results.push_back(Sharding::replicated(tensorType(r).getRank()));
  return d;
}

/// Megatron sequence parallelism: a partial [.., T, d] value that must be reduced is
/// reduce-scattered along T (dim rank-2) instead of all-reduced, when T divides.
void Partitioner::sequenceParallelPolicy(Sharding &out, const Sharding &partialOperand,
                                         ArrayRef<int64_t> shape) {
  if (!strategy.sequenceParallel || partialOperand.partial.empty() || out.rank() < 3)
    return;
  int64_t t = out.rank() - 2;
  const Axes &p = partialOperand.partial;
  if (!out.dims[t].empty() || !axesFree(out, p) || shape[t] % mesh.groupSize(p) != 0)
    return;
  out.dims[t] = p;
  out.blocks[t] = 1;
}

/// Elementwise ops with NumPy broadcasting. Sums stay partial through add/sub (all operands
/// partial alike), mul/div by a whole value and neg; everything else needs whole values.
Decision Partitioner::elementwise(Operation *op, ArrayRef<Sharding> in) {
  auto result = globalTypes.lookup(op->getResult(0));
  ArrayRef<int64_t> shape = result.getShape();
  int64_t rank = result.getRank();
  Sharding out = Sharding::replicated(rank);
  auto operandShape = [&](unsigned i) { return gshape(op->getOperand(i)); };
  for (unsigned i = 0; i < in.size(); ++i) {
    if (freeParams.count(op->getOperand(i)))
      continue;
    ArrayRef<int64_t> s = operandShape(i);
    int64_t off = rank - static_cast<int64_t>(s.size());
    for (int64_t j = 0; j < static_cast<int64_t>(s.size()); ++j) {
      int64_t d = off + j;
      if (s[j] != shape[d] || in[i].dims[j].empty() || !out.dims[d].empty() ||
          !axesFree(out, in[i].dims[j]))
        continue;
      out.dims[d] = in[i].dims[j];
      out.blocks[d] = in[i].blocks[j];
    }
  }
  // Partial sums.
  bool linearAdd = isa<colossal::AddOp, colossal::SubOp>(op);
  bool linearScale = isa<colossal::MulOp, colossal::DivOp, colossal::NegOp>(op);
  Axes partial;
  SmallVector<bool> keepPartial(in.size(), false);
  if (linearAdd && llvm::all_of(in, [&](const Sharding &s) {
        return !s.partial.empty() && s.partial == in[0].partial;
      })) {
    partial = in[0].partial;
    keepPartial.assign(in.size(), true);
  } else if (linearScale) {
    SmallVector<unsigned> partials;
    for (unsigned i = 0; i < in.size(); ++i)
      if (!in[i].partial.empty())
        partials.push_back(i);
    if (partials.size() == 1 && (!isa<colossal::DivOp>(op) || partials[0] == 0)) {
      partial = in[partials[0]].partial;
      keepPartial[partials[0]] = true;
    }
  }
  if (!partial.empty() && !axesFree(out, partial)) {
    partial.clear();
    keepPartial.assign(in.size(), false);
  }
  if (partial.empty())
    for (const Sharding &s : in)
      sequenceParallelPolicy(out, s, shape);
  out.partial = partial;
  Decision d;
  for (unsigned i = 0; i < in.size(); ++i) {
    ArrayRef<int64_t> s = operandShape(i);
    int64_t off = rank - static_cast<int64_t>(s.size());
    Sharding want = Sharding::replicated(s.size());
    for (int64_t j = 0; j < static_cast<int64_t>(s.size()); ++j)
      if (s[j] == shape[off + j]) {
        want.dims[j] = out.dims[off + j];
        want.blocks[j] = out.blocks[off + j];
      }
    if (keepPartial[i])
      want.partial = partial;
    d.operands.push_back(want);
  }
  for (unsigned r = 0; r < op->getNumResults(); ++r)
    d.results.push_back(out);
  return d;
}

/// k when the matmul's product (through bias adds) feeds a split of its last dim into k equal
/// parts (a fused QKV projection), else 1: its columns are then split block by block.
static int64_t splitBlocks(colossal::MatMulOp matmul) {
  SmallVector<Operation *> users(matmul->getUsers());
  for (size_t i = 0; i < users.size(); ++i) {
    Operation *u = users[i];
    if (isa<colossal::AddOp>(u) && i < 4)
      users.append(u->getUsers().begin(), u->getUsers().end());
    if (auto split = dyn_cast<colossal::SplitOp>(u))
      if (split.getAxis() == tensorType(split.getX()).getRank() - 1 && split.getNumResults() > 1 &&
          llvm::all_equal(llvm::map_range(split.getResults(),
                                          [](Value r) { return tensorType(r).getShape().back(); })))
        return split.getNumResults();
  }
  return 1;
}

/// The weight operand's sharding at its first use (strategy phase 1); nullopt = replicated.
std::optional<Sharding> Partitioner::decideWeight(Operation *op, unsigned operand,
                                                  ArrayRef<Sharding> in) {
  Value w = op->getOperand(operand);
  ArrayRef<int64_t> shape = gshape(w);
  if (strategy.tp.empty() && strategy.row.empty())
    return std::nullopt;
  if (auto matmul = dyn_cast<colossal::MatMulOp>(op)) {
    if (operand != 1 || shape.size() != 2)
      return std::nullopt;
    const Sharding &x = in[0];
    int64_t kx = x.rank() - 1;
    Sharding s = Sharding::replicated(2);
    if (strategy.style == "1d") {
      int64_t p = mesh.groupSize(strategy.tp);
      if (!x.dims[kx].empty()) { // row-parallel: follow the input's split of K
        if (x.blocks[kx] == 1 && shape[0] % mesh.groupSize(x.dims[kx]) == 0) {
          s.dims[0] = x.dims[kx];
          return s;
        }
        sizeError(op, "tensor parallelism over " + axesName(x.dims[kx]) + ": parameter '" +
                          freeParams.lookup(w) + "' " + shapeStr(shape) +
                          " would be split by rows (Megatron row-parallel), but its " +
                          Twine(shape[0]) + " input features are not divisible by " +
                          Twine(mesh.groupSize(x.dims[kx])));
        return std::nullopt;
      }
      // Column-parallel; k blocks when the product (through a bias add) feeds a k-way split.
      int64_t blocks = splitBlocks(matmul);
      if (shape[1] % (p * blocks) != 0) {
        std::string name = freeParams.lookup(w);
        sizeError(op, "tensor parallelism over " + axesName(strategy.tp) + ": parameter '" + name +
                          "' " + shapeStr(shape) +
                          " would be split by "
                          "columns (Megatron column-parallel), but its " +
                          Twine(shape[1]) + " output features " +
                          (blocks > 1 ? "in " + Twine(blocks) + " blocks " : Twine()) +
                          "are not divisible by " + Twine(p * blocks) +
                          " (give it a hint in parallel.tensor.hints to keep it whole)");
        return std::nullopt;
      }
      s.dims[1] = strategy.tp;
      s.blocks[1] = blocks;
      return s;
    }
    // 2d / 2.5d: weights as a q x q grid of blocks [K over row, N over col]. 3d: K over the
    // grid axis the input's K arrives split on (else row), N over the other one, so consecutive
    // matmuls alternate layouts and each reduces over one axis (Agarwal et al. 1995's 3D matmul
    // as ColossalAI's 3D tensor parallelism arranges it).
    Axes kAxes = strategy.row, nAxes = strategy.col;
    if (strategy.style == "3d" && x.dims[x.rank() - 1] == strategy.col)
      std::swap(kAxes, nAxes);
    int64_t blocks = splitBlocks(matmul);
    // 3d stores each weight block split once more over depth (1/q^3 of it per rank, as
    // ColossalAI's 3D); the matmul gathers it over depth, where the batch is split.
    if (strategy.style == "3d")
      nAxes.append(strategy.depth.begin(), strategy.depth.end());
    if (shape[0] % mesh.groupSize(kAxes) == 0 && shape[1] % (mesh.groupSize(nAxes) * blocks) == 0) {
      s.dims[0] = kAxes;
      s.dims[1] = nAxes;
      s.blocks[1] = blocks;
      return s;
    }
    sizeError(op, "tensor parallelism (" + strategy.style + "): parameter '" +
                      freeParams.lookup(w) + "' " + shapeStr(shape) + " is not divisible by the " +
                      Twine(mesh.groupSize(kAxes)) + " x " + Twine(mesh.groupSize(nAxes)) +
                      " grid (give it a hint in parallel.tensor.hints to keep it whole)");
    return std::nullopt;
  }
  if (auto g = dyn_cast<colossal::GatherOp>(op)) {
    // Vocab-parallel embedding: a table read with token ids (Megatron's VocabParallelEmbedding).
    if (operand != 0 || g.getAxis() != 0 || shape.size() != 2 ||
        !tokenDerived.count(g.getIndices()))
      return std::nullopt;
    Sharding s = Sharding::replicated(2);
    if (strategy.style != "1d") { // grids: the hidden dim over col, like the activations
      if (shape[1] % mesh.groupSize(strategy.col) != 0)
        return std::nullopt;
      s.dims[1] = strategy.col;
      return s;
    }
    // Small tables (BERT's token types) are not worth a collective: at least 16 rows per rank.
    int64_t p = mesh.groupSize(strategy.tp);
    if (shape[0] % p != 0 || shape[0] < 16 * p)
      return std::nullopt;
    s.dims[0] = strategy.tp;
    return s;
  }
  return std::nullopt;
}

/// matmul [..., M, K] x [..., K, N] and gemm (2-D, transpose flags; C only when K is whole).
Decision Partitioner::contraction(Operation *op, ArrayRef<Sharding> inIn) {
  if (std::optional<Decision> d = summa(op, inIn))
    return *d;
  SmallVector<Sharding> in(inIn.begin(), inIn.end());
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  int64_t lr = in[0].rank(), rr = in[1].rank(),
          outRank = globalTypes.lookup(op->getResult(0)).getRank();
  int64_t lM, lK, rK, rN;
  bool hasC = false;
  if (auto gemm = dyn_cast<colossal::GemmOp>(op)) {
    lM = gemm.getTransA() ? 1 : 0;
    lK = 1 - lM;
    rK = gemm.getTransB() ? 1 : 0;
    rN = 1 - rK;
    hasC = gemm.getC() != nullptr;
  } else {
    if (lr < 2 || rr < 2)
      return allReplicated(op);
    lM = lr - 2;
    lK = lr - 1;
    rK = rr - 2;
    rN = rr - 1;
  }
  for (Sharding &s : in)
    s.partial.clear();
  // K: both operands must split it alike; the result is then a partial sum over those axes.
  // When they differ, take the first of (lhs's K split, rhs's K split, whole) that leaves the
  // batch, M and N splits alone: a replicated operand is sliced for free (Megatron row-parallel),
  // and two different splits are both gathered (2D: SUMMA in all-gather form).
  Axes k;
  int64_t kBlocks = 1;
  if (in[0].dims[lK] == in[1].dims[rK] && in[0].blocks[lK] == in[1].blocks[rK]) {
    k = in[0].dims[lK];
    kBlocks = in[0].blocks[lK];
  } else {
    Axes keep;
    for (int64_t d = 0; d < lr; ++d)
      if (d != lK)
        keep.append(in[0].dims[d].begin(), in[0].dims[d].end());
    for (int64_t d = 0; d < rr; ++d)
      if (d != rK)
        keep.append(in[1].dims[d].begin(), in[1].dims[d].end());
    auto clear = [&](const Axes &axes) {
      return llvm::none_of(axes, [&](int a) { return llvm::is_contained(keep, a); });
    };
    if (!in[0].dims[lK].empty() && clear(in[0].dims[lK])) {
      k = in[0].dims[lK];
      kBlocks = in[0].blocks[lK];
    } else if (!in[1].dims[rK].empty() && clear(in[1].dims[rK])) {
      k = in[1].dims[rK];
      kBlocks = in[1].blocks[rK];
    }
  }
  if (hasC)
    k.clear();
  if (k.empty())
    kBlocks = 1;
  Sharding out = Sharding::replicated(outRank);
  Axes used = k;
  // An output dim takes its operand's split, or the longest prefix of it whose axes are free (3d:
  // a weight stored split over [col, depth] is gathered over depth, where the batch lives).
  auto claim = [&](int64_t outDim, const Sharding &from, int64_t fromDim) {
    const Axes &axes = from.dims[fromDim];
    size_t n = 0;
    while (n < axes.size() && !llvm::is_contained(used, axes[n]))
      ++n;
    if (n == 0)
      return;
    used.append(axes.begin(), axes.begin() + n);
    out.dims[outDim].assign(axes.begin(), axes.begin() + n);
    out.blocks[outDim] = from.blocks[fromDim];
  };
  ArrayRef<int64_t> outShape = globalTypes.lookup(op->getResult(0)).getShape();
  // Batch dims first (matmul only): from the lhs where it is not broadcast, else from the rhs.
  for (int64_t d = 0; d < outRank - 2; ++d) {
    int64_t li = d - (outRank - lr), ri = d - (outRank - rr);
    if (li >= 0 && gshape(lhs)[li] == outShape[d] && !in[0].dims[li].empty())
      claim(d, in[0], li);
    else if (ri >= 0 && gshape(rhs)[ri] == outShape[d] && !in[1].dims[ri].empty())
      claim(d, in[1], ri);
  }
  // Weights keep their split (N before M when the rhs is a weight, M before N otherwise).
  bool rhsWeight = weights.count(rhs) && !weights.count(lhs);
  int64_t oM = outRank - 2, oN = outRank - 1;
  if (rhsWeight) {
    claim(oN, in[1], rN);
    claim(oM, in[0], lM);
  } else {
    claim(oM, in[0], lM);
    claim(oN, in[1], rN);
  }
  out.partial = k;
  llvm::sort(out.partial);
  Decision dec;
  Sharding wl = Sharding::replicated(lr), wr = Sharding::replicated(rr);
  wl.dims[lK] = k;
  wl.blocks[lK] = kBlocks;
  wr.dims[rK] = k;
  wr.blocks[rK] = kBlocks;
  wl.dims[lM] = out.dims[oM];
  wl.blocks[lM] = out.blocks[oM];
  wr.dims[rN] = out.dims[oN];
  wr.blocks[rN] = out.blocks[oN];
  for (int64_t d = 0; d < outRank - 2; ++d) {
    int64_t li = d - (outRank - lr), ri = d - (outRank - rr);
    if (li >= 0 && gshape(lhs)[li] == outShape[d]) {
      wl.dims[li] = out.dims[d];
      wl.blocks[li] = out.blocks[d];
    }
    if (ri >= 0 && gshape(rhs)[ri] == outShape[d]) {
      wr.dims[ri] = out.dims[d];
      wr.blocks[ri] = out.blocks[d];
    }
  }
  dec.operands = {wl, wr};
  if (hasC) {
    ArrayRef<int64_t> cs = gshape(op->getOperand(2));
    Sharding wc = Sharding::replicated(cs.size());
    int64_t off = outRank - static_cast<int64_t>(cs.size());
    for (int64_t j = 0; j < static_cast<int64_t>(cs.size()); ++j)
      if (cs[j] == outShape[off + j]) {
        wc.dims[j] = out.dims[off + j];
        wc.blocks[j] = out.blocks[off + j];
      }
    dec.operands.push_back(wc);
  }
  dec.results = {out};
  return dec;
}

/// 2D grids: lhs [..., M over row, K over col (or whole: sliced for free)] x rhs [K over row,
/// N over col] is SUMMA (van de Geijn & Watts 1997): C_ij = Σ_k A_ik B_kj, step k broadcasting
/// A_ik along the grid row and B_kj along the grid column; no operand is gathered whole.
std::optional<Decision> Partitioner::summa(Operation *op, ArrayRef<Sharding> in) {
  if (strategy.row.empty() || strategy.style == "3d" || !isa<colossal::MatMulOp>(op) ||
      in[1].rank() != 2 || in[0].rank() < 2 ||
      mesh.groupSize(strategy.row) != mesh.groupSize(strategy.col))
    return std::nullopt;
  const Axes &row = strategy.row, &col = strategy.col;
  int64_t lK = in[0].rank() - 1;
  const Sharding &l = in[0], &r = in[1];
  if (r.dims[0] != row || r.blocks[0] != 1 || r.dims[1] != col)
    return std::nullopt;
  if (!(l.dims[lK].empty() || (l.dims[lK] == col && l.blocks[lK] == 1)))
    return std::nullopt;
  // The M side is split over the grid row (2.5d: depth x row, SUMMA within each depth layer).
  bool rowOnM = false;
  for (int64_t d = 0; d < lK; ++d) {
    ArrayRef<int> axes = l.dims[d];
    rowOnM |= axes.size() >= row.size() && axes.take_back(row.size()) == ArrayRef<int>(row) &&
              l.blocks[d] == 1;
    if (llvm::any_of(axes, [&](int a) { return llvm::is_contained(col, a); }))
      return std::nullopt;
  }
  if (!rowOnM || gshape(op->getOperand(0))[lK] % mesh.groupSize(col) != 0)
    return std::nullopt;
  Decision d;
  Sharding wl = l;
  wl.partial.clear();
  wl.dims[lK] = col;
  wl.blocks[lK] = 1;
  Sharding wr = r;
  wr.partial.clear();
  Sharding out = Sharding::replicated(globalTypes.lookup(op->getResult(0)).getRank());
  for (int64_t k = 0; k < lK; ++k) {
    out.dims[k] = l.dims[k];
    out.blocks[k] = l.blocks[k];
  }
  out.dims[lK] = col;
  out.blocks[lK] = r.blocks[1];
  d.operands = {wl, wr};
  d.results = {out};
  d.summa = true;
  return d;
}

void Partitioner::emitSumma(colossal::MatMulOp op, const Decision &d) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  MLIRContext *ctx = b.getContext();
  int64_t q = mesh.groupSize(strategy.col);
  Value acc;
  for (int64_t k = 0; k < q; ++k) {
    Value a = colossal::BroadcastOp::create(b, loc, op.getLhs().getType(), op.getLhs(),
                                            mesh.axesAttr(ctx, strategy.col),
                                            b.getI64IntegerAttr(k));
    Value w = colossal::BroadcastOp::create(b, loc, op.getRhs().getType(), op.getRhs(),
                                            mesh.axesAttr(ctx, strategy.row),
                                            b.getI64IntegerAttr(k));
    Value p = colossal::MatMulOp::create(b, loc, op.getResult().getType(), a, w);
    acc = acc ? colossal::AddOp::create(b, loc, acc, p).getResult() : p;
  }
  op.getResult().replaceAllUsesWith(acc);
  record(acc, globalTypes.lookup(op.getResult()), d.results[0]);
  op.erase();
}

/// Reshape: factor the shapes into groups of dims with equal products; a split may ride only on
/// the outermost (non-1) dim of a group and lands on the outermost dim of the other side.
Decision Partitioner::reshape(Operation *op, ArrayRef<Sharding> in) {
  ArrayRef<int64_t> is = gshape(op->getOperand(0));
  ArrayRef<int64_t> os = globalTypes.lookup(op->getResult(0)).getShape();
  Sharding want = in[0], out = Sharding::replicated(os.size());
  out.partial = in[0].partial;
  size_t i = 0, o = 0;
  while (i < is.size() || o < os.size()) {
    // Skip size-1 dims (never split).
    if (i < is.size() && is[i] == 1 && (o >= os.size() || os[o] != 1)) {
      want.dims[i].clear();
      want.blocks[i] = 1;
      ++i;
      continue;
    }
    if (o < os.size() && os[o] == 1 && (i >= is.size() || is[i] != 1)) {
      ++o;
      continue;
    }
    if (i >= is.size() || o >= os.size())
      break;
    size_t i0 = i, o0 = o;
    int64_t pi = is[i++], po = os[o++];
    while (pi != po) {
      if (pi < po && i < is.size())
        pi *= is[i++];
      else if (po < pi && o < os.size())
        po *= os[o++];
      else
        break;
    }
    // Group in [i0, i), out [o0, o).
    bool ok = true;
    for (size_t j = i0 + 1; j < i; ++j)
      if (!want.dims[j].empty()) {
        ok = false;
        break;
      }
    const Axes &axes = want.dims[i0];
    if (ok && !axes.empty()) {
      int64_t p = mesh.groupSize(axes) * want.blocks[i0];
      if (os[o0] % p == 0) {
        out.dims[o0] = axes;
        out.blocks[o0] = want.blocks[i0];
      } else {
        sizeError(op, "tensor parallelism over " + axesName(axes) + " cannot split the reshape " +
                          shapeStr(is) + " -> " + shapeStr(os) + ": dim " + Twine(o0) +
                          " of the result has size " + Twine(os[o0]) + ", not divisible by " +
                          Twine(p) +
                          " (attention heads, including key/value heads, must be "
                          "divisible by the tensor-parallel size; or keep the weights feeding it "
                          "whole with parallel.tensor.hints)");
        ok = false;
      }
    }
    if (!ok)
      for (size_t j = i0; j < i; ++j) {
        want.dims[j].clear();
        want.blocks[j] = 1;
      }
  }
  return Decision{{want}, {out}};
}

/// Ops normalizing or reducing over dims [axis, rank) of their first `numX` operands (which share
/// one sharding); other operands (scale, bias) whole. Results: the first numX-like ones take x's
/// sharding; the last `numResultsReduced` (dscale, dbias) are sums over x's leading dims.
Decision Partitioner::normalization(Operation *op, ArrayRef<Sharding> in, int64_t axis, int numX,
                                    int numResultsReduced) {
  int64_t rank = in[0].rank();
  if (axis < 0)
    axis += rank;
  Sharding x = in[0];
  for (int i = 1; i < numX; ++i)
    if (in[i].partial.size() > x.partial.size())
      x.partial = in[i].partial;
  Sharding xs = x;
  xs.partial.clear();
  for (int64_t d = axis; d < rank; ++d) {
    xs.dims[d].clear();
    xs.blocks[d] = 1;
  }
  sequenceParallelPolicy(xs, x, gshape(op->getOperand(0)));
  Decision d;
  for (unsigned i = 0; i < op->getNumOperands(); ++i)
    d.operands.push_back(static_cast<int>(i) < numX ? xs : Sharding::replicated(in[i].rank()));
  // Operand order of the *_grad ops is (x, scale, dy): dy is x-like too.
  if (isa<colossal::LayerNormGradOp, colossal::RmsNormGradOp>(op))
    d.operands[2] = xs;
  Axes leading;
  for (int64_t j = 0; j < axis; ++j)
    leading.append(xs.dims[j].begin(), xs.dims[j].end());
  llvm::sort(leading);
  int numResults = op->getNumResults();
  for (int r = 0; r < numResults; ++r) {
    if (r < numResults - numResultsReduced) {
      d.results.push_back(xs);
    } else {
      Sharding s = Sharding::replicated(tensorType(op->getResult(r)).getRank());
      s.partial = leading;
      d.results.push_back(s);
    }
  }
  return d;
}

/// attention / attention_grad: batch and heads may be split (heads: query and kv heads alike,
/// so GQA groups stay on one rank); sequence and head dims whole.
Decision Partitioner::attention(Operation *op, ArrayRef<Sharding> in) {
  Value q = op->getOperand(0), k = op->getOperand(1);
  Axes batch = in[0].dims[0], heads = in[0].dims[1];
  if (in[0].blocks[1] != 1 || in[0].blocks[0] != 1) {
    batch.clear();
    heads.clear();
  }
  int64_t hq = gshape(q)[1], hkv = gshape(k)[1];
  if (!heads.empty() && (hkv % mesh.groupSize(heads) != 0 || hq % mesh.groupSize(heads) != 0)) {
    sizeError(op, "tensor parallelism over " + axesName(heads) + ": attention with " + Twine(hq) +
                      " query heads and " + Twine(hkv) +
                      " key/value heads cannot split its heads: "
                      "both must be divisible by " +
                      Twine(mesh.groupSize(heads)));
    heads.clear();
  }
  Decision d;
  auto like = [&](Value v) {
    ArrayRef<int64_t> s = gshape(v);
    Sharding w = Sharding::replicated(s.size());
    if (s.size() == 4) {
      if (s[0] == gshape(q)[0])
        w.dims[0] = batch;
      if (s[1] == hq || s[1] == hkv)
        w.dims[1] = heads;
    }
    return w;
  };
  for (Value v : op->getOperands())
    d.operands.push_back(like(v));
  for (Value r : op->getResults())
    d.results.push_back(like(r));
  return d;
}

/// gather(data, indices, axis 0): a vocab-split table gives a partial sum (rows outside the
/// local range read zeros, Megatron's VocabParallelEmbedding); other data dims and the indices'
/// splits carry over to the result.
Decision Partitioner::gather(Operation *op, ArrayRef<Sharding> in) {
  auto g = cast<colossal::GatherOp>(op);
  int64_t axis = g.getAxis();
  Sharding data = in[0], idx = in[1];
  data.partial.clear();
  idx.partial.clear();
  // Only a table split along its rows (axis 0, no blocks) is read vocab-parallel; any other
  // split of the gathered axis goes.
  if (!data.dims[axis].empty() && (axis != 0 || data.blocks[axis] != 1)) {
    data.dims[axis].clear();
    data.blocks[axis] = 1;
  }
  Sharding out = Sharding::replicated(tensorType(op->getResult(0)).getRank());
  Axes used = data.dims[axis];
  auto take = [&](Sharding &from, int64_t fromDim, int64_t outDim) {
    const Axes &axes = from.dims[fromDim];
    if (llvm::any_of(axes, [&](int a) { return llvm::is_contained(used, a); })) {
      from.dims[fromDim].clear();
      from.blocks[fromDim] = 1;
      return;
    }
    used.append(axes.begin(), axes.end());
    out.dims[outDim] = axes;
    out.blocks[outDim] = from.blocks[fromDim];
  };
  // result = data.shape[:axis] ++ indices.shape ++ data.shape[axis+1:]
  int64_t ni = idx.rank();
  for (int64_t j = 0; j < axis; ++j)
    take(data, j, j);
  for (int64_t j = 0; j < ni; ++j)
    take(idx, j, axis + j);
  for (int64_t j = axis + 1; j < data.rank(); ++j)
    take(data, j, ni + j - 1);
  out.partial = data.dims[axis];
  llvm::sort(out.partial);
  return Decision{{data, idx}, {out}};
}

Decision Partitioner::rule(Operation *op, ArrayRef<Sharding> in) {
  if (isa<colossal::AddOp, colossal::SubOp, colossal::MulOp, colossal::DivOp, colossal::PowOp,
          colossal::MinOp, colossal::MaxOp, colossal::EqualOp, colossal::LessOp,
          colossal::GreaterOp, colossal::WhereOp, colossal::NegOp, colossal::AbsOp,
          colossal::SqrtOp, colossal::ReciprocalOp, colossal::ExpOp, colossal::LogOp,
          colossal::ErfOp, colossal::TanhOp, colossal::SigmoidOp, colossal::ReluOp,
          colossal::SiluOp, colossal::GeluOp, colossal::CastOp, colossal::UnaryFnOp,
          colossal::BinaryFnOp, colossal::UnaryGradOp>(op))
    return elementwise(op, in);
  if (isa<colossal::MatMulOp, colossal::GemmOp>(op))
    return contraction(op, in);
  if (isa<colossal::ReshapeOp>(op))
    return reshape(op, in);
  if (auto t = dyn_cast<colossal::TransposeOp>(op)) {
    Sharding out = Sharding::replicated(in[0].rank());
    out.partial = in[0].partial;
    for (auto [d, p] : llvm::enumerate(t.getPerm())) {
      out.dims[d] = in[0].dims[p];
      out.blocks[d] = in[0].blocks[p];
    }
    return Decision{{in[0]}, {out}};
  }
  if (auto s = dyn_cast<colossal::SplitOp>(op)) {
    int64_t axis = s.getAxis();
    Sharding want = in[0];
    Decision d;
    unsigned n = s.getNumResults();
    Sharding out = want;
    if (!want.dims[axis].empty()) {
      bool equal = llvm::all_equal(llvm::map_range(
          s.getResults(), [&](Value r) { return globalTypes.lookup(r).getDimSize(axis); }));
      if (want.blocks[axis] == static_cast<int64_t>(n) && equal) {
        out.blocks[axis] = 1;
      } else {
        want.dims[axis].clear();
        want.blocks[axis] = 1;
        out = want;
      }
    }
    d.operands = {want};
    d.results.assign(n, out);
    return d;
  }
  if (auto c = dyn_cast<colossal::ConcatOp>(op)) {
    int64_t axis = c.getAxis();
    Sharding first = in[0];
    bool same = llvm::all_of(in, [&](const Sharding &s) { return s == first; });
    bool equal = llvm::all_equal(llvm::map_range(
        c.getInputs(), [&](Value v) { return globalTypes.lookup(v).getDimSize(axis); }));
    Decision d;
    if (same && !first.dims[axis].empty() && first.blocks[axis] == 1 && equal) {
      Sharding out = first;
      out.blocks[axis] = in.size();
      d.operands.assign(in.size(), first);
      d.results = {out};
      return d;
    }
    Sharding want = first;
    if (!same)
      want.partial.clear();
    want.dims[axis].clear();
    want.blocks[axis] = 1;
    d.operands.assign(in.size(), want);
    d.results = {want};
    return d;
  }
  if (auto s = dyn_cast<colossal::SliceOp>(op)) {
    Sharding want = in[0];
    ArrayRef<int64_t> shape = gshape(s.getX());
    for (int64_t d = 0; d < want.rank(); ++d)
      if (s.getStarts()[d] != 0 || s.getSteps()[d] != 1 || s.getLimits()[d] < shape[d]) {
        want.dims[d].clear();
        want.blocks[d] = 1;
      }
    return Decision{{want}, {want}};
  }
  if (auto s = dyn_cast<colossal::SliceGradOp>(op)) {
    Sharding want = in[0];
    ArrayRef<int64_t> dy = gshape(s.getDy());
    ArrayRef<int64_t> x = globalTypes.lookup(s.getResult()).getShape();
    for (int64_t d = 0; d < want.rank(); ++d)
      if (dy[d] != x[d]) {
        want.dims[d].clear();
        want.blocks[d] = 1;
      }
    return Decision{{want}, {want}};
  }
  if (isa<colossal::ExpandOp>(op)) {
    ArrayRef<int64_t> is = gshape(op->getOperand(0));
    ArrayRef<int64_t> os = globalTypes.lookup(op->getResult(0)).getShape();
    Sharding want = in[0], out = Sharding::replicated(os.size());
    want.partial.clear();
    int64_t off = os.size() - is.size();
    for (int64_t j = 0; j < static_cast<int64_t>(is.size()); ++j) {
      if (is[j] != os[off + j]) {
        want.dims[j].clear();
        want.blocks[j] = 1;
      }
      out.dims[off + j] = want.dims[j];
      out.blocks[off + j] = want.blocks[j];
    }
    return Decision{{want}, {out}};
  }
  if (auto t = dyn_cast<colossal::TriluOp>(op))
    return normalization(op, in, in[0].rank() - 2, 1, 0);
  if (auto s = dyn_cast<colossal::SoftmaxOp>(op))
    return normalization(op, in, s.getAxis(), 1, 0);
  if (auto s = dyn_cast<colossal::LogSoftmaxOp>(op))
    return normalization(op, in, s.getAxis(), 1, 0);
  if (auto s = dyn_cast<colossal::SoftmaxGradOp>(op))
    return normalization(op, in, s.getAxis(), 2, 0);
  if (auto s = dyn_cast<colossal::LogSoftmaxGradOp>(op))
    return normalization(op, in, s.getAxis(), 2, 0);
  if (auto n = dyn_cast<colossal::LayerNormOp>(op))
    return normalization(op, in, n.getAxis(), 1, 0);
  if (auto n = dyn_cast<colossal::RmsNormOp>(op))
    return normalization(op, in, n.getAxis(), 1, 0);
  if (auto n = dyn_cast<colossal::LayerNormGradOp>(op))
    return normalization(op, in, n.getAxis(), 1, 2);
  if (auto n = dyn_cast<colossal::RmsNormGradOp>(op))
    return normalization(op, in, n.getAxis(), 1, 1);
  if (isa<colossal::ReduceSumOp, colossal::ReduceMeanOp, colossal::ReduceMaxOp>(op)) {
    ArrayRef<int64_t> axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
    bool keepdims = op->getAttrOfType<BoolAttr>("keepdims").getValue();
    bool sum = isa<colossal::ReduceSumOp>(op);
    Sharding want = in[0];
    if (!sum)
      want.partial.clear();
    Sharding out = Sharding::replicated(tensorType(op->getResult(0)).getRank());
    out.partial = want.partial;
    int64_t o = 0;
    for (int64_t d = 0; d < want.rank(); ++d) {
      bool reduced = llvm::is_contained(axes, d);
      if (reduced) {
        if (sum && want.blocks[d] == 1 && !want.dims[d].empty())
          out.partial.append(want.dims[d].begin(), want.dims[d].end());
        else {
          want.dims[d].clear();
          want.blocks[d] = 1;
        }
        if (keepdims)
          ++o;
        continue;
      }
      out.dims[o] = want.dims[d];
      out.blocks[o] = want.blocks[d];
      ++o;
    }
    llvm::sort(out.partial);
    return Decision{{want}, {out}};
  }
  if (isa<colossal::AttentionOp, colossal::AttentionGradOp>(op))
    return attention(op, in);
  if (isa<colossal::GatherOp>(op))
    return gather(op, in);
  if (auto gg = dyn_cast<colossal::GatherGradOp>(op)) {
    if (gg.getAxis() != 0)
      return allReplicated(op);
    // indices [I...], dy [I..., rest...] -> [V, rest...]: rows of dy split alike with the
    // indices give a partial sum; trailing splits carry over.
    Sharding dy = in[1];
    dy.partial.clear();
    int64_t ni = in[0].rank();
    Sharding idx = Sharding::replicated(ni);
    Sharding out = Sharding::replicated(tensorType(op->getResult(0)).getRank());
    for (int64_t j = 0; j < ni; ++j) {
      idx.dims[j] = dy.dims[j];
      if (dy.blocks[j] != 1)
        dy.dims[j].clear(), dy.blocks[j] = 1, idx.dims[j].clear();
      out.partial.append(dy.dims[j].begin(), dy.dims[j].end());
    }
    for (int64_t j = ni; j < dy.rank(); ++j) {
      out.dims[j - ni + 1] = dy.dims[j];
      out.blocks[j - ni + 1] = dy.blocks[j];
    }
    llvm::sort(out.partial);
    return Decision{{idx, dy}, {out}};
  }
  if (isa<colossal::CrossEntropyOp, colossal::CrossEntropyGradOp>(op)) {
    // Vocab-parallel when the logits arrive split over the classes only (Megatron's
    // vocab_parallel_cross_entropy); otherwise whole.
    const Sharding &logits = in[0];
    if (logits.rank() == 2 && logits.dims[0].empty() && !logits.dims[1].empty() &&
        logits.blocks[1] == 1) {
      Sharding l = logits;
      l.partial.clear();
      Decision d;
      d.operands.push_back(l);
      for (unsigned i = 1; i < op->getNumOperands(); ++i)
        d.operands.push_back(Sharding::replicated(in[i].rank()));
      d.results.push_back(isa<colossal::CrossEntropyOp>(op) ? Sharding::replicated(0) : l);
      return d;
    }
    return allReplicated(op);
  }
  if (isa<colossal::AccumulateGradOp>(op)) {
    Sharding acc = in[0];
    return Decision{{acc, acc}, {}};
  }
  if (isa<colossal::AdamWUpdateOp, colossal::AdamUpdateOp, colossal::SgdUpdateOp>(op)) {
    Decision d;
    for (const Sharding &s : in) {
      Sharding w = s;
      w.partial.clear();
      d.operands.push_back(w);
    }
    return d;
  }
  return allReplicated(op);
}

//===----------------------------------------------------------------------===//
// Custom emission
//===----------------------------------------------------------------------===//

/// Vocab-parallel gather: local ids = ids − r·(V/P); out-of-range ids read row 0 and are zeroed.
LogicalResult Partitioner::emitVocabParallelGather(colossal::GatherOp op, const Decision &d) {
  const Sharding &data = d.operands[0];
  OpBuilder b(op);
  Location loc = op.getLoc();
  MLIRContext *ctx = b.getContext();
  Value ids = op.getIndices();
  auto idsType = tensorType(ids);
  Type idElem = idsType.getElementType();
  int64_t rows = tensorType(op.getData()).getDimSize(0); // local V/P
  auto scalar = [&](int64_t v) -> Value {
    auto t = RankedTensorType::get({}, idElem);
    return colossal::ConstantOp::create(b, loc,
                                        DenseElementsAttr::get(t, b.getIntegerAttr(idElem, v)));
  };
  Value r = colossal::AxisIndexOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()),
                                          mesh.axesAttr(ctx, data.dims[0]));
  if (!idElem.isInteger(64))
    r = colossal::CastOp::create(b, loc, RankedTensorType::get({}, idElem), r);
  Value offset = colossal::MulOp::create(b, loc, r, scalar(rows));
  Value local = colossal::SubOp::create(b, loc, ids, offset);
  auto boolType = RankedTensorType::get(idsType.getShape(), b.getI1Type());
  Value low = colossal::GreaterOp::create(b, loc, boolType, local, scalar(-1));
  Value high = colossal::LessOp::create(b, loc, boolType, local, scalar(rows));
  Value zeroId = scalar(0);
  Value safe = colossal::WhereOp::create(b, loc, low, local, zeroId);
  safe = colossal::WhereOp::create(b, loc, high, safe, zeroId);
  auto outType = tensorType(op.getResult());
  Value g = colossal::GatherOp::create(b, loc, outType, op.getData(), safe, op.getAxisAttr());
  // Masks broadcast over the gathered row: [I...] -> [I..., 1...].
  SmallVector<int64_t> maskShape(idsType.getShape());
  maskShape.append(outType.getRank() - idsType.getRank(), 1);
  auto maskType = RankedTensorType::get(maskShape, b.getI1Type());
  Value lowB = colossal::ReshapeOp::create(b, loc, maskType, low);
  Value highB = colossal::ReshapeOp::create(b, loc, maskType, high);
  auto zeroT = RankedTensorType::get({}, outType.getElementType());
  Value zero = colossal::ConstantOp::create(
      b, loc, DenseElementsAttr::get(zeroT, b.getZeroAttr(outType.getElementType())));
  g = colossal::WhereOp::create(b, loc, lowB, g, zero);
  g = colossal::WhereOp::create(b, loc, highB, g, zero);
  op.getResult().replaceAllUsesWith(g);
  record(g, globalTypes.lookup(op.getResult()), d.results[0]);
  op.erase();
  return success();
}

/// Vocab-parallel cross_entropy / cross_entropy_grad (Shoeybi et al. 2019 §3; Megatron's
/// vocab_parallel_cross_entropy): logits [N, V/P] per rank. The row max is all-reduced (max), the
/// sum of exponentials and the target logit (zero on ranks not holding the label) all-reduced
/// (sum), so each rank has logsumexp and the target exactly; loss = mean over rows whose label is
/// not ignore_index of logsumexp − target; ∂loss/∂logits = (softmax − onehot)·dloss/count on the
/// local columns.
LogicalResult Partitioner::emitVocabParallelCrossEntropy(Operation *op, const Decision &d) {
  OpBuilder b(op);
  Location loc = op->getLoc();
  MLIRContext *ctx = b.getContext();
  Value logits = op->getOperand(0), labels = op->getOperand(1);
  auto lt = tensorType(logits);
  int64_t n = lt.getDimSize(0), vl = lt.getDimSize(1);
  Type f32 = lt.getElementType(), i64 = b.getI64Type();
  ArrayAttr axes = mesh.axesAttr(ctx, d.operands[0].dims[1]);
  int64_t ignore = op->getAttrOfType<IntegerAttr>("ignore_index").getInt();
  auto cst = [&](Type t, ArrayRef<int64_t> shape, Attribute v) -> Value {
    return colossal::ConstantOp::create(b, loc,
                                        DenseElementsAttr::get(RankedTensorType::get(shape, t), v));
  };
  auto col = [&](Type t) { return RankedTensorType::get({n, 1}, t); };
  auto reduce = [&](bool max, Value x, ArrayRef<int64_t> axesR, bool keep) -> Value {
    auto xt = tensorType(x);
    SmallVector<int64_t> shape;
    for (int64_t i = 0; i < xt.getRank(); ++i)
      if (!llvm::is_contained(axesR, i))
        shape.push_back(xt.getDimSize(i));
      else if (keep)
        shape.push_back(1);
    auto rt = RankedTensorType::get(shape, xt.getElementType());
    if (max)
      return colossal::ReduceMaxOp::create(b, loc, rt, x, b.getDenseI64ArrayAttr(axesR),
                                           b.getBoolAttr(keep));
    return colossal::ReduceSumOp::create(b, loc, rt, x, b.getDenseI64ArrayAttr(axesR),
                                         b.getBoolAttr(keep));
  };
  // Local label and whether this rank holds it.
  Value r = colossal::AxisIndexOp::create(b, loc, RankedTensorType::get({}, i64), axes);
  Value local = colossal::SubOp::create(
      b, loc, labels, colossal::MulOp::create(b, loc, r, cst(i64, {}, b.getI64IntegerAttr(vl))));
  auto boolN = RankedTensorType::get({n}, b.getI1Type());
  Value low =
      colossal::GreaterOp::create(b, loc, boolN, local, cst(i64, {}, b.getI64IntegerAttr(-1)));
  Value high =
      colossal::LessOp::create(b, loc, boolN, local, cst(i64, {}, b.getI64IntegerAttr(vl)));
  Value zeroI = cst(i64, {}, b.getI64IntegerAttr(0));
  Value safe = colossal::WhereOp::create(b, loc, low, local, zeroI);
  safe = colossal::WhereOp::create(b, loc, high, safe, zeroI);
  Value safeCol = colossal::ReshapeOp::create(b, loc, col(i64), safe);
  Value lowCol = colossal::ReshapeOp::create(b, loc, col(b.getI1Type()), low);
  Value highCol = colossal::ReshapeOp::create(b, loc, col(b.getI1Type()), high);
  Value zeroF = cst(f32, {}, b.getFloatAttr(f32, 0.0));
  Value oneF = cst(f32, {}, b.getFloatAttr(f32, 1.0));
  // Global row max, shifted logits, global Σ exp.
  Value m = reduce(true, logits, {1}, true);
  m = colossal::AllReduceOp::create(b, loc, m.getType(), m, axes, b.getStringAttr("max"));
  Value z = colossal::SubOp::create(b, loc, logits, m);
  Value e = colossal::ExpOp::create(b, loc, z.getType(), z);
  Value sum = reduce(false, e, {1}, true);
  sum = colossal::AllReduceOp::create(b, loc, sum.getType(), sum, axes, b.getStringAttr("sum"));
  // Rows that count.
  Value ignored =
      colossal::EqualOp::create(b, loc, boolN, labels, cst(i64, {}, b.getI64IntegerAttr(ignore)));
  Value valid = colossal::WhereOp::create(b, loc, ignored, zeroF, oneF);
  Value validCol = colossal::ReshapeOp::create(b, loc, col(f32), valid);
  Value count = reduce(false, valid, {0}, false);
  Value result;
  if (isa<colossal::CrossEntropyOp>(op)) {
    Value t =
        colossal::GatherElementsOp::create(b, loc, col(f32), z, safeCol, b.getI64IntegerAttr(1));
    t = colossal::WhereOp::create(b, loc, lowCol, t, zeroF);
    t = colossal::WhereOp::create(b, loc, highCol, t, zeroF);
    t = colossal::AllReduceOp::create(b, loc, t.getType(), t, axes, b.getStringAttr("sum"));
    Value lse = colossal::LogOp::create(b, loc, sum.getType(), sum);
    Value row = colossal::SubOp::create(b, loc, lse, t);
    row = colossal::MulOp::create(b, loc, row, validCol);
    result = colossal::DivOp::create(b, loc, reduce(false, row, {0, 1}, false), count);
  } else {
    Value dloss = op->getOperand(2);
    Value p = colossal::DivOp::create(b, loc, e, sum);
    SmallVector<int64_t> iota(vl);
    for (int64_t i = 0; i < vl; ++i)
      iota[i] = i;
    Value classes = colossal::ConstantOp::create(
        b, loc,
        DenseElementsAttr::get(RankedTensorType::get({1, vl}, i64), ArrayRef<int64_t>(iota)));
    Value hit = colossal::EqualOp::create(b, loc, RankedTensorType::get({n, vl}, b.getI1Type()),
                                          classes, safeCol);
    Value onehot = colossal::WhereOp::create(b, loc, hit, oneF, zeroF);
    onehot = colossal::WhereOp::create(b, loc, lowCol, onehot, zeroF);
    onehot = colossal::WhereOp::create(b, loc, highCol, onehot, zeroF);
    Value g = colossal::SubOp::create(b, loc, p, onehot);
    Value scale = colossal::DivOp::create(b, loc, dloss, count);
    g = colossal::MulOp::create(b, loc, g, colossal::MulOp::create(b, loc, validCol, scale));
    result = g;
  }
  op->getResult(0).replaceAllUsesWith(result);
  record(result, globalTypes.lookup(op->getResult(0)), d.results[0]);
  op->erase();
  return success();
}

/// global_norm over sharded gradients: per group of gradients split over the same axes, the
/// local norm squared is summed over those axes; replicated gradients count once.
LogicalResult Partitioner::emitGlobalNorm(colossal::GlobalNormOp op) {
  std::map<std::vector<int>, SmallVector<Value>> groups;
  for (Value g : op.getGrads()) {
    std::vector<int> axes;
    for (const Axes &d : shardings.lookup(g).dims)
      axes.insert(axes.end(), d.begin(), d.end());
    llvm::sort(axes);
    groups[axes].push_back(g);
  }
  if (groups.size() == 1 && groups.begin()->first.empty())
    return success();
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto scalarType = tensorType(op.getNorm());
  Value total;
  for (auto &[axes, grads] : groups) {
    Value n = colossal::GlobalNormOp::create(b, loc, scalarType, grads);
    Value sq = colossal::MulOp::create(b, loc, n, n);
    if (!axes.empty())
      sq = colossal::AllReduceOp::create(
          b, loc, scalarType, sq, mesh.axesAttr(b.getContext(), axes), b.getStringAttr("sum"));
    total = total ? colossal::AddOp::create(b, loc, total, sq).getResult() : sq;
  }
  Value norm = colossal::SqrtOp::create(b, loc, total.getType(), total);
  op.getNorm().replaceAllUsesWith(norm);
  record(norm, scalarType, Sharding::replicated(0));
  op.erase();
  return success();
}

//===----------------------------------------------------------------------===//
// The walk
//===----------------------------------------------------------------------===//

/// The parameter a state argument belongs to: the longest parameter name p with state = p + ".x".
std::string paramOf(StringRef state, const llvm::StringMap<Sharding> &known,
                    ArrayRef<std::string> params) {
  std::string best;
  for (const std::string &p : params)
    if (state.size() > p.size() + 1 && state.starts_with(p) && state[p.size()] == '.' &&
        p.size() > best.size())
      best = p;
  return best;
}

LogicalResult Partitioner::run(func::FuncOp f) {
  Block &body = f.getBody().front();
  MLIRContext *ctx = f.getContext();
  SmallVector<std::string> params;
  for (BlockArgument arg : body.getArguments())
    if (auto p = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "colossal.param"))
      params.push_back(p.str());
  for (BlockArgument arg : body.getArguments()) {
    auto type = tensorType(arg);
    globalTypes[arg] = type;
    Sharding s = Sharding::replicated(type.getRank());
    std::string name;
    unsigned i = arg.getArgNumber();
    if (auto p = f.getArgAttrOfType<StringAttr>(i, "colossal.param"))
      name = p.str();
    else if (auto st = f.getArgAttrOfType<StringAttr>(i, "colossal.state"))
      name = paramOf(st.getValue(), decided, params);
    if (!name.empty() && f.getArgAttr(i, "colossal.param"))
      weights.insert(arg);
    if (f.getArgAttr(i, "colossal.input") && isa<IntegerType>(type.getElementType()))
      tokenDerived.insert(arg);
    if (!name.empty()) {
      bool isParam = f.getArgAttr(i, "colossal.param") != nullptr;
      auto it = decided.find(name);
      if (it != decided.end())
        s = it->second;
      else if (deciding && isParam) // states follow their parameter once it is decided
        freeParams[arg] = name;
      else if (!deciding)
        decided[name] = s;
    }
    shardings[arg] = s;
    if (!deciding)
      arg.setType(localType(type, s));
  }

  // Grid styles split the batch of integer inputs (token ids, labels) over the batch axes; the
  // activations follow from there.
  if (!strategy.batch.empty()) {
    OpBuilder b = OpBuilder::atBlockBegin(&body);
    int64_t p = mesh.groupSize(strategy.batch);
    for (BlockArgument arg : body.getArguments()) {
      auto type = tensorType(arg);
      if (!f.getArgAttr(arg.getArgNumber(), "colossal.input") ||
          !isa<IntegerType>(type.getElementType()) || type.getRank() < 1 ||
          type.getDimSize(0) % p != 0 || arg.use_empty())
        continue;
      Sharding sl = shardings.lookup(arg);
      Value v = sliceDim(b, f.getLoc(), arg, sl, 0, strategy.batch, 1);
      arg.replaceAllUsesExcept(v, v.getDefiningOp());
      tokenDerived.insert(v);
    }
  }

  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    if (!isa<colossal::ShardSliceOp>(op))
      ops.push_back(&op);
  for (Operation *op : ops) {
    for (Value r : op->getResults())
      globalTypes[r] = tensorType(r);
    // Views of weights are weights; views of token ids are token ids.
    if (isa<colossal::ReshapeOp, colossal::TransposeOp, colossal::CastOp>(op)) {
      if (weights.count(op->getOperand(0)))
        weights.insert(op->getResult(0));
      if (tokenDerived.count(op->getOperand(0)))
        tokenDerived.insert(op->getResult(0));
    }
    if (auto g = dyn_cast<colossal::GlobalNormOp>(op)) {
      if (trace)
        trace->push_back("[]");
      if (failed(emitGlobalNorm(g)))
        return failure();
      continue;
    }
    SmallVector<Sharding> in;
    for (Value v : op->getOperands())
      in.push_back(shardings.lookup(v));
    // Strategy: decide undecided parameters at their first use.
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      auto it = freeParams.find(op->getOperand(i));
      if (it == freeParams.end())
        continue;
      std::optional<Sharding> s = decideWeight(op, i, in);
      if (errorOp)
        return errorOp->emitError(errorMessage);
      if (!s) { // elementwise ops decide biases below from the other operands
        if (isa<colossal::AddOp>(op))
          continue;
        s = Sharding::replicated(in[i].rank());
      }
      decided[it->second] = *s;
      shardings[op->getOperand(i)] = *s;
      in[i] = *s;
      freeParams.erase(it);
    }
    Decision d = rule(op, in);
    if (errorOp)
      return errorOp->emitError(errorMessage);
    if (trace) {
      std::string text;
      for (const Sharding &r : d.results)
        text += (text.empty() ? "" : "; ") + r.str(mesh);
      trace->push_back(text);
    }
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      auto it = freeParams.find(op->getOperand(i));
      if (it == freeParams.end())
        continue;
      Sharding s = d.operands[i];
      s.partial.clear();
      decided[it->second] = s;
      shardings[op->getOperand(i)] = s;
      freeParams.erase(it);
    }
    OpBuilder b(op);
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      Value v = op->getOperand(i);
      Value w = reshard(b, op->getLoc(), v, d.operands[i]);
      if (w != v)
        op->setOperand(i, w);
    }
    if (isa<colossal::CrossEntropyOp, colossal::CrossEntropyGradOp>(op) &&
        d.operands[0].isSplit()) {
      if (failed(emitVocabParallelCrossEntropy(op, d)))
        return failure();
      continue;
    }
    if (d.summa) {
      for (auto [r, sh] : llvm::zip(op->getResults(), d.results))
        r.setType(localType(globalTypes.lookup(r), sh));
      emitSumma(cast<colossal::MatMulOp>(op), d);
      continue;
    }
    if (auto g = dyn_cast<colossal::GatherOp>(op);
        g && g.getAxis() == 0 && !d.operands[0].dims[0].empty()) {
      for (auto [r, s] : llvm::zip(op->getResults(), d.results))
        r.setType(localType(globalTypes.lookup(r), s));
      if (failed(emitVocabParallelGather(g, d)))
        return failure();
      continue;
    }
    for (auto [r, s] : llvm::zip(op->getResults(), d.results)) {
      r.setType(localType(globalTypes.lookup(r), s));
      shardings[r] = s;
    }
    // Slice limits of split dims are the local sizes.
    if (auto s = dyn_cast<colossal::SliceOp>(op)) {
      SmallVector<int64_t> limits(s.getLimits());
      auto local = tensorType(s.getX()).getShape();
      for (size_t dd = 0; dd < limits.size(); ++dd)
        if (!d.operands[0].dims[dd].empty())
          limits[dd] = local[dd];
      s.setLimits(limits);
    }
  }
  // Results whole.
  Operation *ret = body.getTerminator();
  OpBuilder b(ret);
  for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
    Value v = ret->getOperand(i);
    Value w = reshard(b, ret->getLoc(), v, Sharding::replicated(tensorType(v).getRank()));
    if (w != v)
      ret->setOperand(i, w);
  }
  if (deciding)
    return success();
  // Arguments: local types and their shardings.
  for (BlockArgument arg : body.getArguments()) {
    const Sharding &s = shardings.lookup(arg);
    if (!s.isSplit())
      continue;
    SmallVector<Attribute> dims;
    bool blocked = false;
    for (auto [axes, k] : llvm::zip(s.dims, s.blocks)) {
      dims.push_back(mesh.axesAttr(ctx, axes));
      blocked |= k > 1;
    }
    f.setArgAttr(arg.getArgNumber(), "colossal.sharding", ArrayAttr::get(ctx, dims));
    if (blocked)
      f.setArgAttr(arg.getArgNumber(), "colossal.shard_blocks",
                   DenseI64ArrayAttr::get(ctx, s.blocks));
  }
  f.setFunctionType(FunctionType::get(ctx, body.getArgumentTypes(), ret->getOperandTypes()));
  return success();
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct SpmdPartitionPass : colossal::impl::SpmdPartitionBase<SpmdPartitionPass> {
  using SpmdPartitionBase::SpmdPartitionBase;

  LogicalResult parseOptions(Mesh &mesh, Strategy &strategy, ModuleOp module) {
    for (const std::string &entry : meshAxes) {
      auto [name, size] = StringRef(entry).split('=');
      int64_t n;
      if (name.empty() || size.getAsInteger(10, n) || n < 1)
        return module.emitError("colossal-spmd-partition: mesh entry '")
               << entry << "' is not AXIS=SIZE";
      mesh.names.push_back(name.str());
      mesh.sizes.push_back(n);
    }
    strategy.style = style;
    strategy.sequenceParallel = sequenceParallel;
    int tp = mesh.find("tp");
    if (style == "1d") {
      if (tp >= 0)
        strategy.tp = {tp};
    } else {
      int row = mesh.find("tp_row"), col = mesh.find("tp_col"), depth = mesh.find("tp_depth");
      if (row < 0 || col < 0)
        return module.emitError("colossal-spmd-partition: style ")
               << style << " needs mesh axes tp_row and tp_col";
      strategy.row = {row};
      strategy.col = {col};
      if (depth >= 0)
        strategy.depth = {depth};
      // ColossalAI's layouts: activations [batch over row (2.5d: depth x row; 3d: depth),
      // hidden over col], weights [K over row, N over col] (3d: alternating row/col).
      if (style == "2d")
        strategy.batch = {row};
      else if (style == "2.5d")
        strategy.batch = {depth, row};
      else
        strategy.batch = {depth};
    }
    // Hints: REGEX=DIMS;... with DIMS one entry per dim separated by '/', '-' for whole and
    // axes joined by '*'.
    for (StringRef hint : llvm::split(StringRef(hints), ';')) {
      if (hint.trim().empty())
        continue;
      auto [pattern, dimsText] = hint.rsplit('=');
      auto h = std::make_unique<Strategy::Hint>();
      h->pattern = pattern.str();
      h->regex = llvm::Regex(("^(" + pattern + ")$").str());
      std::string err;
      if (!h->regex.isValid(err))
        return module.emitError("parallel.tensor.hints: '")
               << pattern << "' is not a regex: " << err;
      for (StringRef dim : llvm::split(dimsText, '/')) {
        Axes axes;
        dim = dim.trim();
        if (dim != "-" && dim != "")
          for (StringRef a : llvm::split(dim, '*')) {
            int idx = mesh.find(a.trim());
            if (idx < 0)
              return module.emitError("parallel.tensor.hints: '")
                     << pattern << "': '" << a << "' is not a mesh axis";
            axes.push_back(idx);
          }
        h->dims.push_back(axes);
      }
      strategy.hints.push_back(std::move(h));
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    Mesh mesh;
    Strategy strategy;
    if (failed(parseOptions(mesh, strategy, module)))
      return signalPassFailure();
    SmallVector<Attribute> names;
    for (const std::string &n : mesh.names)
      names.push_back(StringAttr::get(ctx, n));
    module->setAttr("colossal.mesh_axes", ArrayAttr::get(ctx, names));
    module->setAttr("colossal.mesh_shape", DenseI64ArrayAttr::get(ctx, mesh.sizes));
    bool anySplit = llvm::any_of(mesh.names, [&](const std::string &n) {
      return n != "dp" && mesh.sizes[mesh.find(n)] > 1;
    });
    if (!anySplit)
      return;

    // Phase 1: hints, then the primary function's walk decides the remaining parameters.
    llvm::StringMap<Sharding> decided;
    func::FuncOp primary = module.lookupSymbol<func::FuncOp>("train_step");
    if (!primary)
      primary = module.lookupSymbol<func::FuncOp>("forward");
    if (!primary) {
      module.emitError("colossal-spmd-partition: the module has neither @train_step nor @forward");
      return signalPassFailure();
    }
    for (unsigned i = 0; i < primary.getNumArguments(); ++i) {
      auto name = primary.getArgAttrOfType<StringAttr>(i, "colossal.param");
      if (!name)
        continue;
      auto shape = cast<RankedTensorType>(primary.getArgument(i).getType()).getShape();
      // DESIGN.md: a regex matches the parameter's name or the name of a node that reads it
      // (torch renames transposed weights `onnx::MatMul_N`; the consumer keeps the module path).
      SmallVector<std::string> names = {name.getValue().str()};
      for (Operation *user : primary.getArgument(i).getUsers())
        if (auto loc = dyn_cast<NameLoc>(user->getLoc()))
          names.push_back(loc.getName().str());
      for (auto &h : strategy.hints) {
        if (llvm::none_of(names, [&](const std::string &n) { return h->regex.match(n); }))
          continue;
        h->used = true;
        if (h->dims.size() != shape.size()) {
          module.emitError("parallel.tensor.hints: '")
              << h->pattern << "' gives " << h->dims.size() << " dims but parameter '"
              << name.getValue() << "' has shape " << shapeStr(shape);
          return signalPassFailure();
        }
        Sharding s = Sharding::replicated(shape.size());
        s.dims.assign(h->dims.begin(), h->dims.end());
        if (!divides(shape, s, mesh)) {
          module.emitError("parallel.tensor.hints: '")
              << h->pattern << "' splits parameter '" << name.getValue() << "' " << shapeStr(shape)
              << " as " << s.str(mesh) << ", which does not divide its shape";
          return signalPassFailure();
        }
        decided[name.getValue()] = s;
        break;
      }
    }
    for (auto &h : strategy.hints)
      if (!h->used) {
        module.emitError("parallel.tensor.hints: '")
            << h->pattern << "' matches no parameter of the model";
        return signalPassFailure();
      }
    {
      auto clone = cast<func::FuncOp>(primary->clone());
      Partitioner deciding(mesh, strategy, decided, /*deciding=*/true);
      LogicalResult ok = deciding.run(clone);
      clone->erase();
      if (failed(ok))
        return signalPassFailure();
    }
    if (stage != "strategy" && stage != "propagate" && stage != "partition") {
      module.emitError(
          "colossal-spmd-partition: stage must be strategy, propagate or partition, got '")
          << stage << "'";
      return signalPassFailure();
    }
    if (stage != "partition") {
      for (auto f : module.getOps<func::FuncOp>()) {
        // Parameters (and their states) with their shardings; the program stays whole.
        for (unsigned i = 0; i < f.getNumArguments(); ++i) {
          auto name = f.getArgAttrOfType<StringAttr>(i, "colossal.param");
          if (!name || !decided.count(name.getValue()))
            continue;
          f.setArgAttr(i, "colossal.sharding",
                       StringAttr::get(ctx, decided[name.getValue()].str(mesh)));
        }
        if (stage == "strategy")
          continue;
        std::vector<std::string> trace;
        auto clone = cast<func::FuncOp>(f->clone());
        Partitioner p(mesh, strategy, decided, /*deciding=*/false);
        p.setTrace(&trace);
        LogicalResult ok = p.run(clone);
        clone->erase();
        if (failed(ok))
          return signalPassFailure();
        size_t i = 0;
        for (Operation &op : f.getBody().front().without_terminator())
          if (i < trace.size())
            op.setAttr("colossal.sharding", StringAttr::get(ctx, trace[i++]));
      }
      return;
    }
    // Phase 2: partition every function with the decided shardings.
    for (auto f : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      Partitioner partitioner(mesh, strategy, decided, /*deciding=*/false);
      if (failed(partitioner.run(f)))
        return signalPassFailure();
    }
  }
};

} // namespace

//===- Rules.cpp - each op's sharding rule and the strategy's parameter choices ---===//
//
// Partitioner.h; the table of rules is in docs/parallelism.md "The walk".
//===----------------------------------------------------------------------------------===//
#include "passes/Parallel/Partitioner.h"

#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace colossal;
using namespace colossal::spmd;

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
Decision Partitioner::elementwise(Operation *op, ArrayRef<Sharding> in,
                                  ShardingRule::Partial partialRule) {
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
  bool linearAdd = partialRule == ShardingRule::Partial::Additive;
  bool linearScale = partialRule == ShardingRule::Partial::Scaling ||
                     partialRule == ShardingRule::Partial::Numerator;
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
    if (partials.size() == 1 && (partialRule != ShardingRule::Partial::Numerator || partials[0] == 0)) {
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
                                    int numResultsReduced, int xLikeOperand) {
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
  // The *_grad ops' dy (operands x, scale, dy) is x-like too.
  if (xLikeOperand >= 0)
    d.operands[xLikeOperand] = xs;
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

/// The row-wise rule: rows split over the axes dim 0 of operand 0 is split over (whole otherwise),
/// every other dim whole; the `rowOperands` and the results split alike along dim 0.
Decision Partitioner::rowWise(Operation *op, ArrayRef<Sharding> in,
                              ArrayRef<unsigned> rowOperands) {
  // The rows come with the first row operand.
  const unsigned first = rowOperands.empty() ? 0 : rowOperands.front();
  Axes rows = in.size() <= first || in[first].rank() == 0 || in[first].blocks[0] != 1
                  ? Axes()
                  : in[first].dims[0];
  Decision d;
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    Sharding s = Sharding::replicated(tensorType(v).getRank());
    if (llvm::is_contained(rowOperands, i) && s.rank() >= 1)
      s.dims[0] = rows;
    d.operands.push_back(s);
  }
  for (Value r : op->getResults()) {
    Sharding s = Sharding::replicated(tensorType(r).getRank());
    if (s.rank() >= 1)
      s.dims[0] = rows;
    d.results.push_back(s);
  }
  return d;
}

Decision Partitioner::transpose(colossal::TransposeOp t, ArrayRef<Sharding> in) {
  Sharding out = Sharding::replicated(in[0].rank());
  out.partial = in[0].partial;
  for (auto [d, p] : llvm::enumerate(t.getPerm())) {
    out.dims[d] = in[0].dims[p];
    out.blocks[d] = in[0].blocks[p];
  }
  return Decision{{in[0]}, {out}};
}

Decision Partitioner::split(colossal::SplitOp s, ArrayRef<Sharding> in) {
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

Decision Partitioner::concat(colossal::ConcatOp c, ArrayRef<Sharding> in) {
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

Decision Partitioner::slice(colossal::SliceOp s, ArrayRef<Sharding> in) {
  Sharding want = in[0];
  ArrayRef<int64_t> shape = gshape(s.getX());
  for (int64_t d = 0; d < want.rank(); ++d)
    if (s.getStarts()[d] != 0 || s.getSteps()[d] != 1 || s.getLimits()[d] < shape[d]) {
      want.dims[d].clear();
      want.blocks[d] = 1;
    }
  return Decision{{want}, {want}};
}

Decision Partitioner::sliceGrad(colossal::SliceGradOp s, ArrayRef<Sharding> in) {
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

Decision Partitioner::broadcast(Operation *op, ArrayRef<Sharding> in) {
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

Decision Partitioner::reduction(Operation *op, ArrayRef<Sharding> in, ShardingRule::Reduce reduce) {
  ArrayRef<int64_t> axes = op->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
  bool keepdims = op->getAttrOfType<BoolAttr>("keepdims").getValue();
  bool sum = reduce == ShardingRule::Reduce::Sum;
  // Row blocks (colossal-split-batch): a mean over the rows is the row block's mean, which the
  // training loop averages (a partial over the row-block axes, legal only as a loss).
  bool rowMean = reduce == ShardingRule::Reduce::Mean && !strategy.localBatch.empty();
  Sharding want = in[0];
  if (!sum)
    want.partial.clear();
  Sharding out = Sharding::replicated(tensorType(op->getResult(0)).getRank());
  out.partial = want.partial;
  int64_t o = 0;
  for (int64_t d = 0; d < want.rank(); ++d) {
    bool reduced = llvm::is_contained(axes, d);
    if (reduced) {
      if ((sum || (rowMean && want.dims[d] == strategy.localBatch)) && want.blocks[d] == 1 &&
          !want.dims[d].empty())
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

Decision Partitioner::gatherGrad(Operation *op, ArrayRef<Sharding> in) {
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

Decision Partitioner::crossEntropy(Operation *op, ArrayRef<Sharding> in) {
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
    // cross_entropy's loss is a whole scalar; cross_entropy_grad's result is like the logits.
    Value result = op->getResult(0);
    d.results.push_back(tensorType(result).getRank() == 0 ? Sharding::replicated(0) : l);
    return d;
  }
  return allReplicated(op);
}

Decision Partitioner::nllLoss(colossal::NllLossOp nll, ArrayRef<Sharding> in) {
  // Row blocks (colossal-split-batch): the loss of the row block's rows; "mean" and "sum" are
  // partial over the row-block axes (combined by the training loop, as a model's own loss
  // under grad_accum always was), "none" keeps the rows split.
  const Axes &rows = strategy.localBatch;
  Decision d;
  for (Value v : nll->getOperands())
    d.operands.push_back(Sharding::replicated(tensorType(v).getRank()));
  d.operands[0].dims[0] = rows;
  d.operands[1].dims[0] = rows;
  Sharding out = Sharding::replicated(tensorType(nll.getResult()).getRank());
  if (nll.getReduction() == "none")
    out.dims[0] = rows;
  else
    out.partial = rows;
  d.results.push_back(out);
  return d;
}

Decision Partitioner::pagedKv(Operation *op, ArrayRef<Sharding> in) {
  // Operands: kv_append (k_cache, v_cache, k, v, slot_mapping); paged_attention (q, k_cache,
  // v_cache, block_tables, context_lens, query_start_loc). Rows [T, heads, dim]; caches
  // [NB, Hkv, BS, dim].
  const bool append = isa<colossal::KvAppendOp>(op);
  const Sharding &x = in[append ? 2 : 0];
  Axes rows = x.blocks[0] == 1 ? x.dims[0] : Axes();
  Axes heads;
  if (append) {
    // The heads follow the keys' split when it is a plain split of whole heads.
    if (x.blocks[1] == 1 && !x.dims[1].empty() && gshape(op->getOperand(2))[1] % mesh.groupSize(x.dims[1]) == 0)
      heads = x.dims[1];
  } else {
    // The queries follow the cache (kv_append decided it): query head h reads kv head
    // h / (Hq / Hkv), so a rank holding kv heads [r·Hkv/p, (r+1)·Hkv/p) needs query heads
    // [r·Hq/p, (r+1)·Hq/p).
    const Sharding &cache = in[1];
    heads = cache.dims[1];
    const int64_t hq = gshape(op->getOperand(0))[1], hkv = gshape(op->getOperand(1))[1];
    if (!heads.empty() && hq % mesh.groupSize(heads) != 0) {
      sizeError(op, "tensor parallelism over " + axesName(heads) + ": attention with " + Twine(hq) +
                        " query heads and " + Twine(hkv) +
                        " key/value heads cannot split its heads: both must be divisible by " +
                        Twine(mesh.groupSize(heads)));
      heads.clear();
    }
  }
  auto rowsAndHeads = [&](Value v) {
    Sharding s = Sharding::replicated(tensorType(v).getRank());
    s.dims[0] = rows;
    s.dims[1] = heads;
    return s;
  };
  auto cacheOf = [&](Value v) {
    Sharding s = Sharding::replicated(tensorType(v).getRank());
    s.dims[1] = heads;
    return s;
  };
  auto rowVector = [&](Value v) {
    Sharding s = Sharding::replicated(tensorType(v).getRank());
    s.dims[0] = rows;
    return s;
  };
  Decision d;
  if (append) {
    d.operands = {cacheOf(op->getOperand(0)), cacheOf(op->getOperand(1)), rowsAndHeads(op->getOperand(2)),
                  rowsAndHeads(op->getOperand(3)), rowVector(op->getOperand(4))};
  } else {
    d.operands = {rowsAndHeads(op->getOperand(0)), cacheOf(op->getOperand(1)), cacheOf(op->getOperand(2))};
    for (unsigned i = 3; i < op->getNumOperands(); ++i)
      d.operands.push_back(Sharding::replicated(tensorType(op->getOperand(i)).getRank()));
    d.results = {rowsAndHeads(op->getResult(0))};
  }
  return d;
}

Decision Partitioner::rule(Operation *op, ArrayRef<Sharding> in) {
  using Kind = ShardingRule::Kind;
  // The paged KV ops: token rows (colossal-generate's steps) and heads (tensor parallelism).
  if (isa<colossal::KvAppendOp, colossal::PagedAttentionOp>(op))
    return pagedKv(op, in);
  std::optional<ShardingRule> r;
  if (auto sharded = dyn_cast<colossal::ShardingRuleOpInterface>(op))
    r = sharded.getShardingRule();
  // Row blocks only (colossal-split-batch): nll_loss's rule is the block's rows.
  if (r && r->kind == Kind::NllLoss && strategy.localBatch.empty())
    r.reset();
  if (!r) {
    // No rule: whole operands are already what replication needs; a split or partial operand
    // would be gathered or reduced silently, so that is an error naming the op and its shardings.
    if (llvm::any_of(in, [](const Sharding &s) { return !s.isReplicated(); })) {
      std::string shardings;
      for (const Sharding &s : in)
        shardings += (shardings.empty() ? "" : ", ") + s.str(mesh);
      noRule(op, "'" + op->getName().getStringRef().str() + "' has no sharding rule for operands " +
                     shardings);
    }
    return allReplicated(op);
  }
  switch (r->kind) {
  case Kind::Whole:
    return allReplicated(op);
  case Kind::RowWise:
    return rowWise(op, in, r->rowOperands);
  case Kind::Elementwise:
    return elementwise(op, in, r->partial);
  case Kind::Contraction:
    return contraction(op, in);
  case Kind::Reshape:
    return reshape(op, in);
  case Kind::Normalization:
    return normalization(op, in, r->axis, r->numX, r->numResultsReduced, r->xLikeOperand);
  case Kind::Attention:
    return attention(op, in);
  case Kind::Gather:
    return gather(op, in);
  case Kind::Transpose:
    return transpose(cast<colossal::TransposeOp>(op), in);
  case Kind::Split:
    return split(cast<colossal::SplitOp>(op), in);
  case Kind::Concat:
    return concat(cast<colossal::ConcatOp>(op), in);
  case Kind::Slice:
    return slice(cast<colossal::SliceOp>(op), in);
  case Kind::SliceGrad:
    return sliceGrad(cast<colossal::SliceGradOp>(op), in);
  case Kind::Broadcast:
    return broadcast(op, in);
  case Kind::Reduction:
    return reduction(op, in, r->reduce);
  case Kind::GatherGrad:
    return gatherGrad(op, in);
  case Kind::CrossEntropy:
    return crossEntropy(op, in);
  case Kind::NllLoss:
    return nllLoss(cast<colossal::NllLossOp>(op), in);
  case Kind::AccumulateGrad:
    return Decision{{in[0], in[0]}, {}};
  case Kind::OptimizerUpdate: {
    Decision d;
    for (const Sharding &s : in) {
      Sharding w = s;
      w.partial.clear();
      d.operands.push_back(w);
    }
    return d;
  }
  }
  llvm_unreachable("ShardingRule::Kind");
}

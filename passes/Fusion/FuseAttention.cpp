//===- FuseAttention.cpp - fuse scaled dot-product attention -------------===//
//
// Anchored on the last MatMul of attention, the pattern walks up its softmax input:
//
//   MatMul(Softmax(S, axis = 3), v)
//   S = masks( scale( MatMul(scale(q), scale(kᵀ)) ) )
//
// `scale(t)` is zero or more Mul/Div of t by scalar constants (HF divides the scores by √D;
// torch's SDPA export multiplies q and kᵀ by √scale each). `masks(s)` is up to two of
//   Add(s, m)                       additive mask (either operand order)
//   Where(keep, s, fill)            keep-mask, fill = -inf or ~finfo.min
//   Where(masked, fill, s)          the same with the condition inverted
// of which a constant one whose pattern is exactly "key j visible from query i iff
// j <= i + Tk - Tq" becomes `causal = true` and any other becomes the `mask` operand.
//
// Grouped-query attention: Llama's repeat_kv (Reshape to [B,Hkv,1,T,D], Expand to [B,Hkv,n,T,D],
// Reshape to [B,Hkv·n,T,D]) or torch's repeat_interleave on dim 1 (Split into heads, repeat_kv
// each, Concat in head order) on both k and v is skipped; the fused op reads kv head h / n for
// query head h, which is exactly the head both copy. A `.repeat()` (Tile: query head h reads kv
// head h mod Hkv) is another mapping and stays unfused.
//===----------------------------------------------------------------------===//
#include "passes/Fusion/Match.h"
#include "passes/Passes.h"

#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace colossal {
#define GEN_PASS_DEF_FUSEATTENTION
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::match;

namespace {

/// What the walk up from the softmax input found.
struct AttentionMatch {
  Value q;
  Value kSource;             // k = transpose(kSource, kPerm), or kSource itself when identity
  SmallVector<int64_t> kPerm;
  double scale = 1.0;
  bool causal = false;
  Value mask;                // additive float mask or i1 keep-mask
  bool invertMask = false;   // `mask` is an i1 "masked" condition; keep = !mask
};

bool isIdentity(ArrayRef<int64_t> perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i))
      return false;
  return true;
}

/// Strips Mul/Div by scalar constants from `v`, multiplying their factors into `scale`.
Value peelScale(Value v, double &scale) {
  double factor;
  while (Value inner = peelScalarFactor(v, factor)) {
    scale *= factor;
    v = inner;
  }
  return v;
}

/// Whether constant `mask` (rank >= 2, last dims [Tq, Tk]) is the causal pattern: for every
/// leading index, element (i, j) is "visible" iff j <= i + Tk - Tq. `visible(value)` says whether
/// one element lets its key through; it must be decisive for every element (e.g. an additive
/// value that is neither 0 nor a masking value is not causal).
bool isCausalConstant(Value mask, int64_t tq, int64_t tk,
                      function_ref<std::optional<bool>(double)> visible) {
  Attribute attr;
  if (!matchPattern(mask, m_Constant(&attr)))
    return false;
  auto type = llvm::cast<RankedTensorType>(mask.getType());
  if (type.getRank() < 2 || type.getShape().take_back(2) != ArrayRef<int64_t>{tq, tk})
    return false;
  auto host = HostTensor::from(attr);
  if (!host)
    return false;
  for (int64_t e = 0; e < host->numel(); ++e) {
    int64_t i = (e / tk) % tq, j = e % tk;
    std::optional<bool> vis = visible(host->asDouble(e));
    if (!vis || *vis != (j <= i + tk - tq))
      return false;
  }
  return true;
}

/// Records `m` as the causal mask when it is the causal constant, else as the mask operand.
/// Fails when the slot it needs is already taken.
bool recordMask(AttentionMatch &am, Value m, bool causalConstant, bool inverted) {
  if (causalConstant && !am.causal) {
    am.causal = true;
    return true;
  }
  if (am.mask)
    return false;
  am.mask = m;
  am.invertMask = inverted;
  return true;
}

bool matchScores(Value s, AttentionMatch &am, int masksLeft, int64_t tq, int64_t tk);

/// The product q·kᵀ below the masks and the scaling.
bool matchProduct(Value s, AttentionMatch &am) {
  auto mm = peelScale(s, am.scale).getDefiningOp<MatMulOp>();
  if (!mm)
    return false;
  am.q = peelScale(mm.getLhs(), am.scale);
  Value kT = peelScale(mm.getRhs(), am.scale);
  am.kPerm = {0, 1, 3, 2};
  am.kSource = kT;
  if (auto tr = kT.getDefiningOp<TransposeOp>(); tr && tr.getPerm().size() == 4) {
    // kᵀ = transpose(X, p) ⇒ k = transpose(X, p with its last two entries swapped).
    ArrayRef<int64_t> p = tr.getPerm();
    am.kPerm = {p[0], p[1], p[3], p[2]};
    double inner = 1.0;
    am.kSource = peelScale(tr.getX(), inner);
    am.scale *= inner;
  }
  return true;
}

/// Matches the softmax input `s` of shape [B, Hq, Tq, Tk].
bool matchScores(Value s, AttentionMatch &am, int masksLeft, int64_t tq, int64_t tk) {
  if (masksLeft > 0) {
    if (auto where = s.getDefiningOp<WhereOp>()) {
      Value cond = where.getCondition();
      auto keepCausal = [](double c) -> std::optional<bool> { return c != 0; };
      auto maskCausal = [](double c) -> std::optional<bool> { return c == 0; };
      for (bool inverted : {false, true}) {
        Value fill = inverted ? where.getX() : where.getY();
        Value inner = inverted ? where.getY() : where.getX();
        if (!isMaskingFill(fill) || inner.getType() != where.getType())
          continue;
        AttentionMatch trial = am;
        bool causal = isCausalConstant(cond, tq, tk, inverted ? maskCausal : keepCausal);
        if (recordMask(trial, cond, causal, inverted) &&
            matchScores(inner, trial, masksLeft - 1, tq, tk)) {
          am = trial;
          return true;
        }
      }
      return false;
    }
    if (auto add = s.getDefiningOp<AddOp>()) {
      auto additiveCausal = [&](double c) -> std::optional<bool> {
        if (c == 0)
          return true;
        if (c == -INFINITY || c <= 0.5 * lowestFinite(add.getType()))
          return false;
        return std::nullopt;
      };
      AttentionMatch found;
      bool ok = eitherOrder(add, [&](Value inner, Value m) {
        if (inner.getType() != add.getType())
          return false;
        AttentionMatch trial = am;
        bool causal = isCausalConstant(m, tq, tk, additiveCausal);
        if (!recordMask(trial, m, causal, /*inverted=*/false) ||
            !matchScores(inner, trial, masksLeft - 1, tq, tk))
          return false;
        found = trial;
        return true;
      });
      if (ok)
        am = found;
      return ok;
    }
  }
  return matchProduct(s, am);
}

/// Llama's repeat_kv: Reshape(Expand(Reshape(t0 : [B,Hkv,T,D]) : [B,Hkv,1,T,D]) : [B,Hkv,n,T,D])
/// : [B,Hkv·n,T,D]. Returns t0 and sets n.
Value matchRepeatKv(Value t, int64_t &n) {
  auto outer = t.getDefiningOp<ReshapeOp>();
  auto expand = outer ? outer.getX().getDefiningOp<ExpandOp>() : ExpandOp();
  auto inner = expand ? expand.getX().getDefiningOp<ReshapeOp>() : ReshapeOp();
  if (!inner)
    return {};
  ArrayRef<int64_t> t0 = inner.getX().getType().getShape(), u = inner.getType().getShape(),
                    e = expand.getType().getShape(), r = outer.getType().getShape();
  if (t0.size() != 4 || u.size() != 5 || e.size() != 5 || r.size() != 4)
    return {};
  int64_t b = t0[0], hkv = t0[1], len = t0[2], d = t0[3];
  if (u != ArrayRef<int64_t>{b, hkv, 1, len, d} || e[0] != b || e[1] != hkv || e[3] != len ||
      e[4] != d || r != ArrayRef<int64_t>{b, hkv * e[2], len, d})
    return {};
  n = e[2];
  return inner.getX();
}

/// torch's `repeat_interleave(t0, n, dim=1)` on t0 : [B,Hkv,T,D] as torch.onnx exports it: t0 split
/// into its Hkv heads (one Split along dim 1, pieces [B,1,T,D]), each head repeated n times by the
/// repeat_kv chain above (with Hkv = 1), the results concatenated along dim 1 in head order. Query
/// head q then reads kv head q / n — the fused op's grouping. Pieces out of order, from another
/// tensor, or repeated unequally do not match. Returns t0 and sets n.
Value matchRepeatInterleave(Value t, int64_t &n) {
  auto concat = t.getDefiningOp<ConcatOp>();
  if (!concat || concat.getAxis() != 1)
    return {};
  SplitOp split;
  n = 0;
  for (auto [h, piece] : llvm::enumerate(concat.getInputs())) {
    int64_t repeats = 0;
    Value head = matchRepeatKv(piece, repeats);
    auto result = llvm::dyn_cast_or_null<OpResult>(head);
    auto from = result ? llvm::dyn_cast<SplitOp>(result.getOwner()) : SplitOp();
    if (!from || from.getAxis() != 1 || result.getResultNumber() != h || (split && from != split) ||
        (n && repeats != n))
      return {};
    split = from;
    n = repeats;
  }
  if (!split || split.getNumResults() != concat.getInputs().size())
    return {};
  return split.getX();
}

/// k or v with its heads repeated for grouped-query attention (repeat_kv or repeat_interleave);
/// the un-repeated tensor and n, or null.
Value matchRepeatedHeads(Value t, int64_t &n) {
  if (Value t0 = matchRepeatKv(t, n))
    return t0;
  return matchRepeatInterleave(t, n);
}

/// MatMul(Softmax(S), v) → colossal.attention.
struct FuseAttention : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatMulOp op, PatternRewriter &rewriter) const override {
    auto softmax = op.getLhs().getDefiningOp<SoftmaxOp>();
    auto scoresType = llvm::cast<RankedTensorType>(op.getLhs().getType());
    if (!softmax || scoresType.getRank() != 4 || softmax.getAxis() != 3)
      return rewriter.notifyMatchFailure(op, "lhs is not a softmax over the last of 4 dims");
    // The probabilities are the whole point of fusing; another user would recompute them.
    if (!softmax->hasOneUse())
      return rewriter.notifyMatchFailure(op, "softmax has other users");
    if (!llvm::isa<FloatType>(scoresType.getElementType()))
      return failure();
    int64_t tq = scoresType.getDimSize(2), tk = scoresType.getDimSize(3);

    AttentionMatch am;
    if (!matchScores(softmax.getX(), am, /*masksLeft=*/2, tq, tk))
      return rewriter.notifyMatchFailure(op, "softmax input is not scaled, masked q·kᵀ");

    // Shapes: q [B,Hq,Tq,D], k [B,Hk,Tk,D], v [B,Hk,Tk,Dv], result [B,Hq,Tq,Dv].
    auto qType = llvm::cast<RankedTensorType>(am.q.getType());
    auto srcType = llvm::cast<RankedTensorType>(am.kSource.getType());
    auto vType = llvm::cast<RankedTensorType>(op.getRhs().getType());
    if (qType.getRank() != 4 || srcType.getRank() != 4 || vType.getRank() != 4)
      return rewriter.notifyMatchFailure(op, "q, k, v are not rank 4");
    SmallVector<int64_t> kShape;
    for (int64_t p : am.kPerm)
      kShape.push_back(srcType.getDimSize(p));
    ArrayRef<int64_t> qs = qType.getShape(), vs = vType.getShape();
    int64_t b = qs[0], hq = qs[1];
    bool shapesAgree = kShape[0] == b && vs[0] == b && kShape[1] == vs[1] && kShape[1] > 0 &&
                       hq % kShape[1] == 0 && qs[2] == tq && kShape[2] == tk && vs[2] == tk &&
                       qs[3] == kShape[3] && scoresType.getShape()[0] == b &&
                       scoresType.getShape()[1] == hq &&
                       op.getType().getShape() == ArrayRef<int64_t>{b, hq, tq, vs[3]} &&
                       qType.getElementType() == scoresType.getElementType() &&
                       srcType.getElementType() == scoresType.getElementType() &&
                       vType.getElementType() == scoresType.getElementType();
    if (!shapesAgree)
      return rewriter.notifyMatchFailure(op, "q, k, v shapes do not form attention");

    Location loc = op.getLoc();
    Value k = am.kSource, v = op.getRhs();
    if (isIdentity(am.kPerm)) {
      // Grouped-query attention: drop repeat_kv / repeat_interleave when k and v repeat their
      // heads alike.
      int64_t nk = 0, nv = 0;
      Value k0 = matchRepeatedHeads(k, nk), v0 = matchRepeatedHeads(v, nv);
      if (k0 && v0 && nk == nv)
        k = k0, v = v0;
    } else {
      k = TransposeOp::create(rewriter, loc, am.kSource, am.kPerm);
    }

    Value mask = am.mask;
    if (mask && am.invertMask) {
      auto falseType = RankedTensorType::get({}, rewriter.getI1Type());
      auto falseAttr = DenseElementsAttr::get(falseType, false);
      Value f = ConstantOp::create(rewriter, loc, llvm::cast<ElementsAttr>(falseAttr));
      mask = EqualOp::create(rewriter, loc, mask, f);
    }
    rewriter.replaceOpWithNewOp<AttentionOp>(op, am.q, k, v, mask,
                                             rewriter.getF32FloatAttr(float(am.scale)),
                                             rewriter.getBoolAttr(am.causal));
    return success();
  }
};

struct FuseAttentionPass : colossal::impl::FuseAttentionBase<FuseAttentionPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseAttention>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

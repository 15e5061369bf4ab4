//===- FuseNorms.cpp - fuse decomposed LayerNorm / RMSNorm ---------------===//
//
// LayerNorm (torch.onnx, opset < 17):
//   m = ReduceMean(x, trailing axes, keepdims); d = Sub(x, m)
//   n = Div(d, Sqrt(Add(ReduceMean(Pow(d, 2), same axes, keepdims), eps)))
//   y = Add(Mul(n, weight), bias)
// RMSNorm (Llama):
//   n = Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2), trailing axes, keepdims), eps))))
//   y = Mul(weight, n)
//
// The normalization `n` is rewritten first, with a ones scale; two more patterns then fold a
// following Mul by the weight into the scale and a following Add of the bias into the LayerNorm,
// so every prefix of the chain that torch may emit (no weight, weight, weight and bias) fuses.
//===----------------------------------------------------------------------===//
#include "passes/Fusion/Match.h"
#include "passes/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace colossal {
#define GEN_PASS_DEF_FUSENORMS
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::match;

namespace {

/// `num / den`, as Div(num, den), Mul(num, Reciprocal(den)) or Mul(num, Div(1, den)), operands of
/// the Mul in either order.
bool matchQuotient(Operation *op, Value &num, Value &den) {
  if (auto div = llvm::dyn_cast<DivOp>(op)) {
    num = div.getLhs();
    den = div.getRhs();
    return true;
  }
  if (!llvm::isa<MulOp>(op))
    return false;
  return eitherOrder(op, [&](Value a, Value r) {
    if (auto recip = r.getDefiningOp<ReciprocalOp>()) {
      num = a;
      den = recip.getX();
      return true;
    }
    if (auto div = r.getDefiningOp<DivOp>();
        div && isConstantExactly(div.getLhs(), 1.0) && div.getRhs().getType() == div.getType()) {
      num = a;
      den = div.getRhs();
      return true;
    }
    return false;
  });
}

/// `y²` as Pow(y, 2) (exponent exactly 2) or Mul(y, y); returns y.
Value matchSquare(Value v) {
  if (auto pow = v.getDefiningOp<PowOp>())
    return isConstantExactly(pow.getRhs(), 2.0) && pow.getLhs().getType() == pow.getType()
               ? pow.getLhs()
               : Value();
  if (auto mul = v.getDefiningOp<MulOp>())
    return mul.getLhs() == mul.getRhs() ? mul.getLhs() : Value();
  return {};
}

/// The root-mean-square denominator of a normalization.
struct RootMeanSquare {
  Value y;           // the tensor whose mean square is taken
  int64_t axis = 0;  // first normalized dim
  double epsilon = 0;
};

/// `Sqrt(Add(ReduceMean(y², trailing axes, keepdims), eps))`, eps a scalar constant.
std::optional<RootMeanSquare> matchRootMeanSquare(Value den) {
  auto sqrt = den.getDefiningOp<SqrtOp>();
  if (!sqrt)
    return std::nullopt;
  auto add = sqrt.getX().getDefiningOp<AddOp>();
  if (!add)
    return std::nullopt;
  std::optional<RootMeanSquare> result;
  eitherOrder(add, [&](Value meanSquare, Value eps) {
    auto epsilon = splatFloat(eps);
    auto mean = meanSquare.getDefiningOp<ReduceMeanOp>();
    if (!epsilon || !mean || !mean.getKeepdims() || meanSquare.getType() != add.getType())
      return false;
    Value y = matchSquare(mean.getX());
    if (!y)
      return false;
    auto axis = trailingAxis(mean.getAxes(), llvm::cast<RankedTensorType>(y.getType()).getRank());
    if (!axis)
      return false;
    result = RootMeanSquare{y, *axis, *epsilon};
    return true;
  });
  return result;
}

/// A constant tensor of ones with the normalized shape x.shape[axis:].
Value onesScale(PatternRewriter &rewriter, Location loc, RankedTensorType x, int64_t axis) {
  auto type = RankedTensorType::get(x.getShape().drop_front(axis), x.getElementType());
  auto ones = DenseElementsAttr::get(type, rewriter.getFloatAttr(x.getElementType(), 1.0));
  return ConstantOp::create(rewriter, loc, llvm::cast<ElementsAttr>(ones));
}

/// Rewrites the normalization n = (x − mean) / rms (LayerNorm) or n = x / rms (RMSNorm) to the
/// fused op with a ones scale. Anchored on the Div or Mul that divides by the root mean square.
template <typename OpTy>
struct FuseNormalization : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;

  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &rewriter) const override {
    Value num, den;
    if (!matchQuotient(op, num, den) || num.getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "not a quotient keeping the numerator's type");
    auto rms = matchRootMeanSquare(den);
    if (!rms || rms->y != num)
      return rewriter.notifyMatchFailure(op, "denominator is not sqrt(mean(num^2) + eps)");
    auto type = llvm::cast<RankedTensorType>(op.getType());
    if (!llvm::isa<FloatType>(type.getElementType()))
      return failure();
    Location loc = op.getLoc();
    auto eps = rewriter.getF32FloatAttr(float(rms->epsilon));
    auto axis = rewriter.getI64IntegerAttr(rms->axis);

    // LayerNorm when the numerator is x − ReduceMean(x) over the same axes.
    if (auto sub = num.getDefiningOp<SubOp>()) {
      auto mean = sub.getRhs().getDefiningOp<ReduceMeanOp>();
      Value x = sub.getLhs();
      if (mean && mean.getX() == x && mean.getKeepdims() && x.getType() == type &&
          trailingAxis(mean.getAxes(), type.getRank()) == rms->axis) {
        Value scale = onesScale(rewriter, loc, type, rms->axis);
        rewriter.replaceOp(op, LayerNormOp::create(rewriter, loc, x, scale, Value(), axis, eps));
        return success();
      }
    }
    Value scale = onesScale(rewriter, loc, type, rms->axis);
    rewriter.replaceOp(op, RmsNormOp::create(rewriter, loc, num, scale, axis, eps));
    return success();
  }
};

/// `p` as a parameter of the normalized shape `shape`: its own type, or the same elements with
/// leading dims of 1 that a reshape drops. Null when `p` has any other shape.
Value asNormalizedParam(PatternRewriter &rewriter, Value p, RankedTensorType x, int64_t axis) {
  auto pt = llvm::dyn_cast<RankedTensorType>(p.getType());
  ArrayRef<int64_t> shape = x.getShape().drop_front(axis);
  if (!pt || pt.getElementType() != x.getElementType() || pt.getRank() < int64_t(shape.size()))
    return {};
  ArrayRef<int64_t> lead = pt.getShape().drop_back(shape.size());
  if (pt.getShape().take_back(shape.size()) != shape ||
      !llvm::all_of(lead, [](int64_t d) { return d == 1; }))
    return {};
  if (lead.empty())
    return p;
  return ReshapeOp::create(rewriter, p.getLoc(), RankedTensorType::get(shape, pt.getElementType()),
                           p);
}

/// Whether `scale` is a constant of ones (the scale FuseNormalization creates).
bool isOnes(Value scale) { return isConstantExactly(scale, 1.0); }

/// Mul(norm(x, ones), w) → norm(x, w) when w has the normalized shape.
struct AbsorbScale : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp op, PatternRewriter &rewriter) const override {
    bool done = eitherOrder(op, [&](Value n, Value w) {
      Operation *norm = n.getDefiningOp();
      if (!norm || !n.hasOneUse() || n.getType() != op.getType())
        return false;
      auto ln = llvm::dyn_cast<LayerNormOp>(norm);
      if (ln && isOnes(ln.getScale()) && !ln.getBias()) {
        Value scale = asNormalizedParam(rewriter, w, ln.getX().getType(), ln.getAxis());
        if (!scale)
          return false;
        rewriter.replaceOp(op, LayerNormOp::create(rewriter, op.getLoc(), ln.getX(), scale, Value(),
                                                   ln.getAxisAttr(), ln.getEpsilonAttr()));
        return true;
      }
      if (auto rms = llvm::dyn_cast<RmsNormOp>(norm); rms && isOnes(rms.getScale())) {
        Value scale = asNormalizedParam(rewriter, w, rms.getX().getType(), rms.getAxis());
        if (!scale)
          return false;
        rewriter.replaceOp(op, RmsNormOp::create(rewriter, op.getLoc(), rms.getX(), scale,
                                                 rms.getAxisAttr(), rms.getEpsilonAttr()));
        return true;
      }
      return false;
    });
    return success(done);
  }
};

/// Add(layer_norm(x, s), b) → layer_norm(x, s, b) when b has the normalized shape.
struct AbsorbBias : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp op, PatternRewriter &rewriter) const override {
    bool done = eitherOrder(op, [&](Value n, Value b) {
      auto ln = n.getDefiningOp<LayerNormOp>();
      if (!ln || ln.getBias() || !n.hasOneUse() || n.getType() != op.getType())
        return false;
      Value bias = asNormalizedParam(rewriter, b, ln.getX().getType(), ln.getAxis());
      if (!bias)
        return false;
      rewriter.replaceOp(op, LayerNormOp::create(rewriter, op.getLoc(), ln.getX(), ln.getScale(),
                                                 bias, ln.getAxisAttr(), ln.getEpsilonAttr()));
      return true;
    });
    return success(done);
  }
};

struct FuseNormsPass : colossal::impl::FuseNormsBase<FuseNormsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseNormalization<DivOp>, FuseNormalization<MulOp>, AbsorbScale, AbsorbBias>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

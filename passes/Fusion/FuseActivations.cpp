//===- FuseActivations.cpp - fuse decomposed GELU and SiLU ---------------===//
//
// GELU (Hendrycks & Gimpel 2016) as torch.onnx exports it below opset 20:
//   erf form:  Mul(Mul(x, Add(Erf(Div(x, 1.4142135)), 1)), 0.5)
//   tanh form: Mul(0.5, Mul(x, Add(1, Tanh(Mul(0.7978846,
//                                             Add(x, Mul(0.044715, Mul(x, Mul(x, x)))))))))
// Other exporters (HF's NewGELUActivation, hand-written modules) order and associate the three
// factors 0.5, x and (1 + ...) differently, write x³ as Pow(x, 3) and x/√2 as x · (1/√2); all of
// these match. SiLU is Mul(x, Sigmoid(x)) in either order.
//===----------------------------------------------------------------------===//
#include "passes/Fusion/Match.h"
#include "passes/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace colossal {
#define GEN_PASS_DEF_FUSEACTIVATIONS
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::match;

namespace {

constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrt2OverPi = 0.79788456080286535588; // √(2/π)
constexpr double kTanhCubic = 0.044715;

/// `x / √2` as Div(x, √2) or Mul(x, 1/√2) (either order), keeping x's type.
bool isXOverSqrt2(Value v, Value x) {
  if (v.getType() != x.getType())
    return false;
  if (auto div = v.getDefiningOp<DivOp>())
    return div.getLhs() == x && isConstantNear(div.getRhs(), kSqrt2);
  if (auto mul = v.getDefiningOp<MulOp>())
    return eitherOrder(mul, [&](Value a, Value c) {
      return a == x && isConstantNear(c, 1.0 / kSqrt2);
    });
  return false;
}

/// `x³` as Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x).
bool isCube(Value v, Value x) {
  if (v.getType() != x.getType())
    return false;
  if (auto pow = v.getDefiningOp<PowOp>())
    return pow.getLhs() == x && isConstantExactly(pow.getRhs(), 3.0);
  if (auto mul = v.getDefiningOp<MulOp>())
    return eitherOrder(mul, [&](Value a, Value sq) {
      auto square = sq.getDefiningOp<MulOp>();
      return a == x && square && square.getLhs() == x && square.getRhs() == x;
    });
  return false;
}

/// `√(2/π) · (x + 0.044715 · x³)`, each product and sum in either order.
bool isTanhArgument(Value v, Value x) {
  auto outer = v.getDefiningOp<MulOp>();
  if (!outer || v.getType() != x.getType())
    return false;
  return eitherOrder(outer, [&](Value c, Value sum) {
    auto add = sum.getDefiningOp<AddOp>();
    if (!isConstantNear(c, kSqrt2OverPi) || !add || sum.getType() != x.getType())
      return false;
    return eitherOrder(add, [&](Value a, Value cubic) {
      auto term = cubic.getDefiningOp<MulOp>();
      return a == x && term && cubic.getType() == x.getType() &&
             eitherOrder(term, [&](Value k, Value cube) {
               return isConstantNear(k, kTanhCubic) && isCube(cube, x);
             });
    });
  });
}

/// Which GELU `1 + erf(x/√2)` or `1 + tanh(...)` belongs to; nullopt when neither.
std::optional<StringRef> geluBracket(Value v, Value x) {
  auto add = v.getDefiningOp<AddOp>();
  if (!add || v.getType() != x.getType())
    return std::nullopt;
  std::optional<StringRef> kind;
  eitherOrder(add, [&](Value one, Value t) {
    if (!isConstantNear(one, 1.0) || t.getType() != x.getType())
      return false;
    if (auto erf = t.getDefiningOp<ErfOp>(); erf && isXOverSqrt2(erf.getX(), x))
      kind = "none";
    else if (auto tanh = t.getDefiningOp<TanhOp>(); tanh && isTanhArgument(tanh.getX(), x))
      kind = "tanh";
    return kind.has_value();
  });
  return kind;
}

/// The ways to read `v` as factors of a product of type `type`: `v` itself, or the two operands
/// of a Mul of that type. Every partial product keeping the final type means no factor (the
/// scalar constants in particular) broadcasts the result beyond x's shape.
SmallVector<SmallVector<Value, 2>> factorings(Value v, Type type) {
  SmallVector<SmallVector<Value, 2>> result{{v}};
  if (auto mul = v.getDefiningOp<MulOp>(); mul && mul.getType() == type)
    result.push_back({mul.getLhs(), mul.getRhs()});
  return result;
}

/// 0.5 · x · (1 + erf(x/√2)) or its tanh approximation → colossal.gelu. Anchored on the outer Mul;
/// the three factors may come in any order and association.
struct FuseGelu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp op, PatternRewriter &rewriter) const override {
    auto type = llvm::cast<RankedTensorType>(op.getType());
    if (!llvm::isa<FloatType>(type.getElementType()))
      return failure();
    for (auto &lhs : factorings(op.getLhs(), type))
      for (auto &rhs : factorings(op.getRhs(), type)) {
        if (lhs.size() + rhs.size() != 3)
          continue;
        SmallVector<Value, 3> factors(lhs.begin(), lhs.end());
        factors.append(rhs.begin(), rhs.end());
        // One factor is the constant 0.5, one is x, one is the bracket of x.
        for (int half = 0; half < 3; ++half) {
          if (!isConstantNear(factors[half], 0.5))
            continue;
          for (int xi = 0; xi < 3; ++xi) {
            if (xi == half)
              continue;
            Value x = factors[xi], bracket = factors[3 - half - xi];
            if (x.getType() != type)
              continue;
            if (auto kind = geluBracket(bracket, x)) {
              rewriter.replaceOpWithNewOp<GeluOp>(op, x, rewriter.getStringAttr(*kind));
              return success();
            }
          }
        }
      }
    return rewriter.notifyMatchFailure(op, "not 0.5 * x * (1 + erf|tanh(...))");
  }
};

/// x · sigmoid(x) → colossal.silu.
struct FuseSilu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp op, PatternRewriter &rewriter) const override {
    Value x;
    eitherOrder(op, [&](Value a, Value s) {
      auto sigmoid = s.getDefiningOp<SigmoidOp>();
      if (!sigmoid || sigmoid.getX() != a || a.getType() != op.getType())
        return false;
      x = a;
      return true;
    });
    if (!x)
      return rewriter.notifyMatchFailure(op, "not x * sigmoid(x)");
    rewriter.replaceOpWithNewOp<SiluOp>(op, x);
    return success();
  }
};

struct FuseActivationsPass : colossal::impl::FuseActivationsBase<FuseActivationsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseGelu, FuseSilu>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

//===- FuseConvEpilogue.cpp - fold per-channel affine ops and activations into conv --===//
//
// Inference CNNs follow each convolution with an inference-mode BatchNormalization, which the
// importer decomposes into (y − mean) / √(var + ε) · γ + β with per-channel constants, and then an
// activation (ReLU, ReLU6 as Clip, HardSwish as x · clip(x + 3, 0, 6) / 6, HardSigmoid, Sigmoid).
// Every one of them is a full pass over the activation tensor. This pass folds the per-channel
// affine chain into the conv's weights and bias at compile time (w'[m] = s[m]·w[m],
// b'[m] = s[m]·b[m] + t[m]) and moves the activation into the conv's `activation` attribute, which
// the runtime applies inside the convolution (docs/kernels.md "Convolution"), with a scalar
// affine map after the activation as `output_scale`/`output_shift`.
//===----------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalDialect.h"
#include "passes/Fusion/Match.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <cstring>

namespace colossal {
#define GEN_PASS_DEF_FUSECONVEPILOGUE
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::match;

namespace {

/// The f32 data of a constant `v`: a colossal.constant (dense or dense_resource) or a parameter
/// argument carrying its value (`colossal.value`). Empty when `v` is neither or not f32.
std::optional<std::vector<float>> constantData(Value v) {
  ElementsAttr attr;
  if (auto c = v.getDefiningOp<ConstantOp>()) {
    attr = llvm::dyn_cast<ElementsAttr>(c.getValue());
  } else if (auto arg = llvm::dyn_cast<BlockArgument>(v)) {
    if (auto fn = llvm::dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      attr = fn.getArgAttrOfType<ElementsAttr>(arg.getArgNumber(), kValueAttr);
  }
  auto type = llvm::dyn_cast_or_null<RankedTensorType>(attr ? attr.getType() : Type());
  if (!type || !type.getElementType().isF32())
    return std::nullopt;
  std::vector<float> out(type.getNumElements());
  if (auto dense = llvm::dyn_cast<DenseElementsAttr>(attr)) {
    if (dense.isSplat())
      std::fill(out.begin(), out.end(), dense.getSplatValue<float>());
    else
      llvm::copy(dense.getValues<float>(), out.begin());
    return out;
  }
  if (auto resource = llvm::dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob || blob->getData().size() != out.size() * sizeof(float))
      return std::nullopt;
    std::memcpy(out.data(), blob->getData().data(), blob->getData().size());
    return out;
  }
  return std::nullopt;
}

/// The values of `v` when it is computable at compile time from constants and parameter values
/// and holds one value (a scalar) or `M` values (one per channel): a constant, a parameter, a
/// reshape of one, sqrt, or add/sub/mul/div of two (batch norm's √(var + ε) of torch exports,
/// whose statistics are parameters). Returns M values (a scalar repeated); nullopt otherwise.
std::optional<std::vector<double>> channelValues(Value v, int64_t M, int depth = 0) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  if (!type || depth > 8 || (type.getNumElements() != M && type.getNumElements() != 1))
    return std::nullopt;
  auto spread = [&](std::vector<double> vals) -> std::optional<std::vector<double>> {
    if (vals.size() == 1)
      vals.assign(M, vals[0]);
    if (int64_t(vals.size()) != M)
      return std::nullopt;
    return vals;
  };
  if (auto data = constantData(v))
    return spread(std::vector<double>(data->begin(), data->end()));
  Operation *op = v.getDefiningOp();
  if (!op)
    return std::nullopt;
  if (auto reshape = llvm::dyn_cast<ReshapeOp>(op))
    return channelValues(reshape.getX(), M, depth + 1);
  if (auto sqrt = llvm::dyn_cast<SqrtOp>(op)) {
    auto x = channelValues(sqrt.getX(), M, depth + 1);
    if (!x)
      return std::nullopt;
    for (double &e : *x)
      e = std::sqrt(e);
    return x;
  }
  if (!llvm::isa<AddOp, SubOp, MulOp, DivOp>(op))
    return std::nullopt;
  auto a = channelValues(op->getOperand(0), M, depth + 1), b = channelValues(op->getOperand(1), M, depth + 1);
  if (!a || !b)
    return std::nullopt;
  for (int64_t m = 0; m < M; ++m) {
    double &x = (*a)[m], y = (*b)[m];
    x = llvm::isa<AddOp>(op) ? x + y : llvm::isa<SubOp>(op) ? x - y : llvm::isa<MulOp>(op) ? x * y : x / y;
  }
  return a;
}

/// When `c` broadcast against a conv result [N, M, D...] varies at most along the channel dim
/// and its values are known at compile time (channelValues), its value per channel.
std::optional<std::vector<double>> perChannel(Value c, RankedTensorType result) {
  auto type = llvm::dyn_cast<RankedTensorType>(c.getType());
  if (!type || type.getRank() > result.getRank())
    return std::nullopt;
  const int64_t M = result.getDimSize(1), shift = result.getRank() - type.getRank();
  for (int64_t d = 0; d < type.getRank(); ++d) {
    int64_t size = type.getDimSize(d);
    if (size != 1 && (d + shift != 1 || size != M))
      return std::nullopt;
  }
  return channelValues(c, M);
}

/// The only user of `v`, when it has exactly one use.
Operation *singleUser(Value v) { return v.hasOneUse() ? *v.getUsers().begin() : nullptr; }

/// One step y → s·y + t of an affine chain, for an Add/Sub/Mul/Div of y and a per-channel
/// constant of y's type (y / c, not c / y). False when `op` is not such a step.
bool affineStep(Operation *op, Value y, std::vector<double> &s, std::vector<double> &t) {
  if (!op || op->getNumResults() != 1 || op->getResult(0).getType() != y.getType())
    return false;
  auto type = llvm::cast<RankedTensorType>(y.getType());
  bool lhs = op->getNumOperands() == 2 && op->getOperand(0) == y;
  if (op->getNumOperands() != 2 || (!lhs && op->getOperand(1) != y))
    return false;
  auto c = perChannel(op->getOperand(lhs ? 1 : 0), type);
  if (!c)
    return false;
  const size_t M = c->size();
  if (llvm::isa<AddOp>(op)) {
    for (size_t m = 0; m < M; ++m)
      t[m] += (*c)[m];
  } else if (llvm::isa<SubOp>(op)) {
    for (size_t m = 0; m < M; ++m) {
      if (lhs) {
        t[m] -= (*c)[m]; // y − c
      } else {                   // c − y
        s[m] = -s[m];
        t[m] = (*c)[m] - t[m];
      }
    }
  } else if (llvm::isa<MulOp>(op)) {
    for (size_t m = 0; m < M; ++m) {
      s[m] *= (*c)[m];
      t[m] *= (*c)[m];
    }
  } else if (llvm::isa<DivOp>(op) && lhs) {
    for (size_t m = 0; m < M; ++m) {
      if ((*c)[m] == 0)
        return false;
      s[m] /= (*c)[m];
      t[m] /= (*c)[m];
    }
  } else {
    return false;
  }
  return true;
}

/// An activation that follows `y` and the op whose result it replaces.
struct Activation {
  StringRef kind;
  std::optional<float> alpha, beta;
  Operation *last = nullptr;
};

/// `v` is min(max(x, lo), hi) or max(min(x, hi), lo) for scalar constants lo <= hi.
bool isClip(Value v, Value x, double &lo, double &hi) {
  Operation *outer = v.getDefiningOp();
  if (!outer || !llvm::isa<MinOp, MaxOp>(outer) || v.getType() != x.getType())
    return false;
  bool outerMin = llvm::isa<MinOp>(outer);
  return eitherOrder(outer, [&](Value inner, Value c1) {
    std::optional<double> b1 = splatFloat(c1);
    Operation *in = inner.getDefiningOp();
    if (!b1 || !in || !inner.hasOneUse() || inner.getType() != x.getType() ||
        (outerMin ? !llvm::isa<MaxOp>(in) : !llvm::isa<MinOp>(in)))
      return false;
    return eitherOrder(in, [&](Value a, Value c2) {
      std::optional<double> b2 = splatFloat(c2);
      if (a != x || !b2)
        return false;
      lo = outerMin ? *b2 : *b1;
      hi = outerMin ? *b1 : *b2;
      return lo <= hi;
    });
  });
}

/// y · clip(y + 3, 0, 6) / 6 (the division also as · 1/6, the 1/6 on either side) or
/// y · hard_sigmoid(y, 1/6, 1/2): HardSwish as Paddle and torch export it.
Operation *matchHardSwish(Value y) {
  // The two users of y: the add of 3 (or the hard_sigmoid) and the product with y.
  if (!llvm::hasNItems(y.getUses(), 2))
    return nullptr;
  for (Operation *user : y.getUsers()) {
    auto mul = llvm::dyn_cast<MulOp>(user);
    if (!mul || mul.getType() != y.getType())
      continue;
    Value gate;
    if (!eitherOrder(mul, [&](Value a, Value g) { return a == y && g != y && (gate = g, true); }))
      continue;
    if (!gate.hasOneUse())
      continue;
    if (auto hs = gate.getDefiningOp<UnaryFnOp>()) {
      if (hs.getFn() == "hard_sigmoid" && hs.getX() == y && hs.getAlpha() && hs.getBeta() &&
          std::abs(hs.getAlpha()->convertToDouble() - 1.0 / 6) < 1e-6 &&
          std::abs(hs.getBeta()->convertToDouble() - 0.5) < 1e-6)
        return mul;
      continue;
    }
    // gate = clip(y + 3, 0, 6), the product then divided by 6; or gate = clip(y + 3, 0, 6) / 6.
    double scale = 1.0;
    Value clip = peelScalarFactor(gate, scale);
    bool scaledGate = bool(clip);
    if (!clip)
      clip = gate;
    Operation *clipOp = clip.getDefiningOp();
    if (!clipOp || !llvm::isa<MinOp, MaxOp>(clipOp))
      continue;
    // The clip's argument: the add of y and 3, possibly through a ReLU (torch exports relu6 as
    // Relu then Clip).
    Value added;
    eitherOrder(clipOp, [&](Value inner, Value) {
      Operation *in = inner.getDefiningOp();
      if (!in || !llvm::isa<MinOp, MaxOp>(in))
        return false;
      return eitherOrder(in, [&](Value a, Value) {
        Value sum = a;
        if (auto relu = a.getDefiningOp<ReluOp>(); relu && a.hasOneUse())
          sum = relu.getX();
        auto add = sum.getDefiningOp<AddOp>();
        if (!add || !sum.hasOneUse())
          return false;
        return eitherOrder(add, [&](Value x, Value three) {
          return x == y && isConstantNear(three, 3.0) && (added = a, true);
        });
      });
    });
    double lo = 0, hi = 0;
    if (!added || !isClip(clip, added, lo, hi) || lo != 0.0 || hi != 6.0 || !clip.hasOneUse())
      continue;
    if (scaledGate) {
      if (std::abs(scale - 1.0 / 6) < 1e-6)
        return mul;
      continue;
    }
    // The product divided by 6 (or times 1/6).
    Operation *next = singleUser(mul.getResult());
    if (!next)
      continue;
    double f = 1.0;
    if (peelScalarFactor(next->getResult(0), f) == mul.getResult() && std::abs(f - 1.0 / 6) < 1e-6)
      return next;
  }
  return nullptr;
}

/// The activation applied to `y` (its only use, or both uses for HardSwish), if any.
std::optional<Activation> matchActivation(Value y) {
  if (Operation *last = matchHardSwish(y))
    return Activation{"hard_swish", std::nullopt, std::nullopt, last};
  Operation *user = singleUser(y);
  if (!user || user->getNumResults() != 1 || user->getResult(0).getType() != y.getType())
    return std::nullopt;
  if (llvm::isa<ReluOp>(user))
    return Activation{"relu", std::nullopt, std::nullopt, user};
  if (llvm::isa<SigmoidOp>(user))
    return Activation{"sigmoid", std::nullopt, std::nullopt, user};
  if (auto fn = llvm::dyn_cast<UnaryFnOp>(user)) {
    if (fn.getFn() == "hard_swish")
      return Activation{"hard_swish", std::nullopt, std::nullopt, user};
    if (fn.getFn() == "hard_sigmoid" && fn.getAlpha() && fn.getBeta())
      return Activation{"hard_sigmoid", fn.getAlpha()->convertToFloat(), fn.getBeta()->convertToFloat(), user};
    return std::nullopt;
  }
  if (llvm::isa<MinOp, MaxOp>(user)) {
    Operation *outer = singleUser(user->getResult(0));
    double lo, hi;
    if (outer && outer->getNumResults() == 1 && isClip(outer->getResult(0), y, lo, hi))
      return Activation{"clip", float(lo), float(hi), outer};
    // max(y, 0) alone is a ReLU.
    std::optional<double> c;
    eitherOrder(user, [&](Value a, Value k) { return a == y && (c = splatFloat(k)).has_value(); });
    if (llvm::isa<MaxOp>(user) && c && *c == 0.0)
      return Activation{"relu", std::nullopt, std::nullopt, user};
  }
  return std::nullopt;
}

/// A new f32 constant of `type` holding `data` at `loc` (the folded weights keep their name).
Value makeConstant(PatternRewriter &rewriter, Location loc, RankedTensorType type, ArrayRef<float> data) {
  return ConstantOp::create(rewriter, loc, DenseElementsAttr::get(type, data));
}

/// Index of the output channel that weight element `i` of `w` feeds: conv's w is [M, C/g, K...]
/// (channel-major); conv_transpose's is [C, M/g, K...] with groups of C/g input rows.
int64_t outChannelOf(ConvOp, RankedTensorType w, int64_t i, int64_t) {
  return i / (w.getNumElements() / w.getDimSize(0));
}
int64_t outChannelOf(ConvTransposeOp, RankedTensorType w, int64_t i, int64_t group) {
  int64_t per = w.getNumElements() / (w.getDimSize(0) * w.getDimSize(1));
  int64_t c = i / (w.getDimSize(1) * per), mg = (i / per) % w.getDimSize(1);
  return c / (w.getDimSize(0) / group) * w.getDimSize(1) + mg;
}

ConvOp rebuild(PatternRewriter &rewriter, ConvOp op, Value w, Value bias, StringAttr act, FloatAttr alpha,
               FloatAttr beta, FloatAttr scale, FloatAttr shift) {
  return ConvOp::create(rewriter, op.getLoc(), op.getX(), w, bias, op.getStrides(), op.getPads(),
                        op.getDilations(), op.getGroup(), act, alpha, beta, scale, shift);
}
ConvTransposeOp rebuild(PatternRewriter &rewriter, ConvTransposeOp op, Value w, Value bias, StringAttr act,
                        FloatAttr alpha, FloatAttr beta, FloatAttr scale, FloatAttr shift) {
  return ConvTransposeOp::create(rewriter, op.getLoc(), op.getX(), w, bias, op.getStrides(), op.getPads(),
                                 op.getDilations(), op.getOutputPadding(), op.getGroup(), act, alpha, beta,
                                 scale, shift);
}

/// The epilogue fusion, for conv and conv_transpose alike.
template <typename ConvT> struct FuseConvEpilogue : OpRewritePattern<ConvT> {
  using OpRewritePattern<ConvT>::OpRewritePattern;

  LogicalResult matchAndRewrite(ConvT conv, PatternRewriter &rewriter) const override {
    if (conv.getActivation() || conv.getOutputScale() || conv.getOutputShift())
      return rewriter.notifyMatchFailure(conv, "already has an epilogue");
    auto type = llvm::cast<RankedTensorType>(conv.getType());
    if (!type.getElementType().isF32() || type.getRank() < 3)
      return rewriter.notifyMatchFailure(conv, "not an f32 conv");
    const int64_t M = type.getDimSize(1);

    // The affine chain y → s·y + t, op by op while each result has one user.
    std::vector<double> s(M, 1.0), t(M, 0.0);
    Value y = conv.getResult();
    Operation *affineEnd = nullptr;
    while (Operation *user = singleUser(y)) {
      std::vector<double> s2 = s, t2 = t;
      if (!affineStep(user, y, s2, t2))
        break;
      s = std::move(s2);
      t = std::move(t2);
      y = user->getResult(0);
      affineEnd = user;
    }
    std::optional<std::vector<float>> w, b;
    if (affineEnd) {
      w = constantData(conv.getW());
      if (conv.getBias())
        b = constantData(conv.getBias());
      if (!w || (conv.getBias() && !b))
        affineEnd = nullptr, y = conv.getResult(); // weights not known at compile time
    }
    std::optional<Activation> act = matchActivation(y);
    if (!affineEnd && !act)
      return rewriter.notifyMatchFailure(conv, "no per-channel affine op or activation follows");
    // A scalar affine map after the activation (PP-LCNet's learnable affine block, a·act(y) + b)
    // stays in the epilogue: it cannot move into the weights past the activation.
    std::optional<double> outScale, outShift;
    if (act) {
      std::vector<double> s2(M, 1.0), t2(M, 0.0);
      Value z = act->last->getResult(0);
      Operation *end = nullptr;
      while (Operation *user = singleUser(z)) {
        std::vector<double> s3 = s2, t3 = t2;
        if (!affineStep(user, z, s3, t3) || llvm::any_of(s3, [&](double v) { return v != s3[0]; }) ||
            llvm::any_of(t3, [&](double v) { return v != t3[0]; }))
          break;
        s2 = std::move(s3);
        t2 = std::move(t3);
        z = user->getResult(0);
        end = user;
      }
      if (end) {
        act->last = end;
        outScale = s2[0];
        outShift = t2[0];
      }
    }

    Value newW = conv.getW(), newBias = conv.getBias();
    if (affineEnd) {
      auto wType = llvm::cast<RankedTensorType>(conv.getW().getType());
      std::vector<float> wf(w->size()), bf(M);
      for (int64_t i = 0; i < int64_t(wf.size()); ++i)
        wf[i] = float(s[outChannelOf(conv, wType, i, conv.getGroup())] * (*w)[i]);
      for (int64_t m = 0; m < M; ++m)
        bf[m] = float(s[m] * (b ? (*b)[m] : 0.0) + t[m]);
      newW = makeConstant(rewriter, conv.getW().getLoc(), wType, wf);
      newBias = makeConstant(rewriter, conv.getLoc(),
                             RankedTensorType::get({M}, type.getElementType()), bf);
    }
    auto fused = rebuild(rewriter, conv, newW, newBias, act ? rewriter.getStringAttr(act->kind) : StringAttr(),
                                act && act->alpha ? rewriter.getF32FloatAttr(*act->alpha) : FloatAttr(),
                                act && act->beta ? rewriter.getF32FloatAttr(*act->beta) : FloatAttr(),
                                outScale ? rewriter.getF32FloatAttr(*outScale) : FloatAttr(),
                                outShift ? rewriter.getF32FloatAttr(*outShift) : FloatAttr());
    Operation *last = act ? act->last : affineEnd;
    rewriter.replaceOp(last, fused.getResult());
    return success();
  }
};

struct FuseConvEpiloguePass : colossal::impl::FuseConvEpilogueBase<FuseConvEpiloguePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseConvEpilogue<ConvOp>, FuseConvEpilogue<ConvTransposeOp>>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

//===- ImportElementwise.cpp - the long tail of ONNX elementwise operators -------------------===//
//
// Trigonometric, rounding and activation functions become colossal.unary, modulo, logic, bit
// operations, PRelu and the inclusive comparisons colossal.binary (ElementwiseFns.h); Clip, Mean
// and CastLike are composed from existing ops. Attribute defaults are the ONNX spec's
// (https://onnx.ai/onnx/operators/); every opset from 7 on has the same attributes except Clip,
// whose bounds moved from attributes to inputs in opset 11.
//===----------------------------------------------------------------------------------------===//
#include "ImporterImpl.h"
#include "dialects/Colossal/ElementwiseFns.h"

#include <limits>

using namespace mlir;

namespace colossal::onnx_import {
namespace {

using Ctx = NodeContext;


bool inDomain(Type t, unsigned domain) {
  if (llvm::isa<FloatType>(t))
    return domain & kFloatDomain;
  if (t.isInteger(1))
    return domain & kBoolDomain;
  return llvm::isa<IntegerType>(t) && (domain & kIntDomain);
}

/// x ↦ colossal.unary `fn` with the given parameters (as many as the function takes).
LogicalResult unaryFn(Ctx &c, StringRef fn, std::optional<float> alpha = std::nullopt,
                      std::optional<float> beta = std::nullopt) {
  if (failed(c.requireInputs(1)))
    return failure();
  const UnaryFnInfo *info = lookupUnaryFn(fn);
  Type et = c.typeOf(0).getElementType();
  if (!inDomain(et, info->domain))
    return c.error("element type " + typeStr(et) + " is not supported");
  FloatAttr a = alpha ? c.b.getF32FloatAttr(*alpha) : FloatAttr();
  FloatAttr b = beta ? c.b.getF32FloatAttr(*beta) : FloatAttr();
  return setOut(c, c.make<UnaryFnOp>(c.b.getStringAttr(fn), c.in[0], a, b));
}

/// (a, b) ↦ colossal.binary `fn`.
LogicalResult binaryFn(Ctx &c, StringRef fn) {
  if (failed(c.requireInputs(2)))
    return failure();
  const BinaryFnInfo *info = lookupBinaryFn(fn);
  Type et = c.typeOf(0).getElementType();
  if (!inDomain(et, info->domain))
    return c.error("element type " + typeStr(et) + " is not supported");
  return setOut(c, c.make<BinaryFnOp>(c.b.getStringAttr(fn), c.in[0], c.in[1]));
}

template <const char *Fn> LogicalResult simpleUnary(Ctx &c) { return unaryFn(c, Fn); }
template <const char *Fn> LogicalResult simpleBinary(Ctx &c) { return binaryFn(c, Fn); }

LogicalResult importIsInf(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  bool pos = c.attrInt("detect_positive", 1) != 0, neg = c.attrInt("detect_negative", 1) != 0;
  if (!pos && !neg) {
    if (!llvm::isa<FloatType>(c.typeOf(0).getElementType()))
      return c.error("element type " + typeStr(c.typeOf(0).getElementType()) +
                     " is not supported");
    auto t = c.typeOf(0).clone(c.b.getI1Type());
    c.out.push_back(c.constant(DenseElementsAttr::get(t, false)));
    return success();
  }
  return unaryFn(c, pos && neg ? "is_inf" : pos ? "is_pos_inf" : "is_neg_inf");
}

LogicalResult importMod(Ctx &c) {
  int64_t fmod = c.attrInt("fmod", 0);
  if (fmod != 0 && fmod != 1)
    return c.error("attribute 'fmod' must be 0 or 1, got " + Twine(fmod));
  return binaryFn(c, fmod ? "fmod" : "mod");
}

LogicalResult importBitShift(Ctx &c) {
  std::string dir = c.attrString("direction", "");
  if (dir != "LEFT" && dir != "RIGHT")
    return c.error("attribute 'direction' must be 'LEFT' or 'RIGHT', got '" + dir + "'");
  return binaryFn(c, dir == "LEFT" ? "shift_left" : "shift_right");
}

LogicalResult importPRelu(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  // The slope broadcasts to x (unidirectional): the result keeps x's shape.
  if (failed(binaryFn(c, "prelu")))
    return failure();
  auto r = llvm::cast<RankedTensorType>(c.out.back().getType());
  if (r.getShape() != c.typeOf(0).getShape())
    return c.error("slope does not broadcast to the shape of x");
  return success();
}

/// A rank-0 constant of element type `et` holding `v`.
Value scalar(Ctx &c, Type et, double v) {
  auto t = RankedTensorType::get({}, et);
  HostTensor h = HostTensor::zeros(t);
  if (h.isFloat())
    h.f[0] = v;
  else
    h.i[0] = int64_t(v);
  return c.constant(h.toAttr());
}

/// Clip: y = min(max(x, lo), hi); bounds are attributes before opset 11, optional inputs after.
LogicalResult importClip(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  Type et = t.getElementType();
  if (et.isInteger(1))
    return c.error("element type i1 is not supported");
  Value lo, hi;
  if (c.opset < 11) {
    if (!llvm::isa<FloatType>(et))
      return c.error("element type " + typeStr(et) + " is not supported before opset 11");
    if (c.attr("min"))
      lo = scalar(c, et, c.attrFloat("min", 0));
    if (c.attr("max"))
      hi = scalar(c, et, c.attrFloat("max", 0));
  } else {
    for (size_t i : {1, 2}) {
      if (!c.has(i))
        continue;
      if (c.typeOf(i).getElementType() != et)
        return c.error("bound " + Twine(i) + " has element type " +
                       typeStr(c.typeOf(i).getElementType()) + ", x has " + typeStr(et));
      if (c.typeOf(i).getNumElements() != 1)
        return c.error("bound " + Twine(i) + " must be a scalar");
      (i == 1 ? lo : hi) = c.in[i];
    }
  }
  Value y = c.in[0];
  if (lo) {
    auto r = c.make<MaxOp>(y, lo);
    if (failed(r))
      return failure();
    y = *r;
  }
  if (hi) {
    auto r = c.make<MinOp>(y, hi);
    if (failed(r))
      return failure();
    y = *r;
  }
  if (llvm::cast<RankedTensorType>(y.getType()).getShape() != t.getShape())
    return setOut(c, c.reshape(y, t.getShape()));
  c.out.push_back(y);
  return success();
}

/// Mean: the sum of the inputs (broadcast) divided by their count.
LogicalResult importMean(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  Type et = c.typeOf(0).getElementType();
  if (!llvm::isa<FloatType>(et))
    return c.error("element type " + typeStr(et) + " is not supported (Mean takes floats)");
  Value acc = c.in[0];
  for (size_t i = 1; i < c.in.size(); ++i) {
    auto r = c.make<AddOp>(acc, c.in[i]);
    if (failed(r))
      return failure();
    acc = *r;
  }
  if (c.in.size() == 1) {
    c.out.push_back(acc);
    return success();
  }
  return setOut(c, c.make<DivOp>(acc, scalar(c, et, double(c.in.size()))));
}

LogicalResult importCastLike(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto t = c.typeOf(0);
  Type et = c.typeOf(1).getElementType();
  if (t.getElementType() == et) {
    c.out.push_back(c.in[0]);
    return success();
  }
  return setOut(c, c.makeTyped1<CastOp>(t.clone(et), c.in[0]));
}

// Template arguments must have linkage: one named constant per function.
#define FN(var, name) constexpr char var[] = name;
FN(kCos, "cos") FN(kSin, "sin") FN(kTan, "tan") FN(kAcos, "acos") FN(kAsin, "asin")
FN(kAtan, "atan") FN(kCosh, "cosh") FN(kSinh, "sinh") FN(kAcosh, "acosh") FN(kAsinh, "asinh")
FN(kAtanh, "atanh") FN(kCeil, "ceil") FN(kFloor, "floor") FN(kRound, "round") FN(kSign, "sign")
FN(kSoftplus, "softplus") FN(kSoftsign, "softsign") FN(kMish, "mish")
FN(kHardSwish, "hard_swish") FN(kBitwiseNot, "bitwise_not") FN(kIsNaN, "is_nan")
FN(kAnd, "and") FN(kOr, "or") FN(kXor, "xor") FN(kBitwiseAnd, "bitwise_and")
FN(kBitwiseOr, "bitwise_or") FN(kBitwiseXor, "bitwise_xor") FN(kLessEqual, "less_equal")
FN(kGreaterEqual, "greater_equal")
#undef FN

} // namespace

void registerElementwiseImporters(ImporterTable &table) {
  static const std::pair<const char *, OpImporter> ops[] = {
      {"Cos", simpleUnary<kCos>},
      {"Sin", simpleUnary<kSin>},
      {"Tan", simpleUnary<kTan>},
      {"Acos", simpleUnary<kAcos>},
      {"Asin", simpleUnary<kAsin>},
      {"Atan", simpleUnary<kAtan>},
      {"Cosh", simpleUnary<kCosh>},
      {"Sinh", simpleUnary<kSinh>},
      {"Acosh", simpleUnary<kAcosh>},
      {"Asinh", simpleUnary<kAsinh>},
      {"Atanh", simpleUnary<kAtanh>},
      {"Ceil", simpleUnary<kCeil>},
      {"Floor", simpleUnary<kFloor>},
      {"Round", simpleUnary<kRound>},
      {"Sign", simpleUnary<kSign>},
      {"Softplus", simpleUnary<kSoftplus>},
      {"Softsign", simpleUnary<kSoftsign>},
      {"Mish", simpleUnary<kMish>},
      {"HardSwish", simpleUnary<kHardSwish>},
      {"BitwiseNot", simpleUnary<kBitwiseNot>},
      {"IsNaN", simpleUnary<kIsNaN>},
      {"IsInf", importIsInf},
      {"Elu", [](Ctx &c) { return unaryFn(c, "elu", c.attrFloat("alpha", 1.0f)); }},
      {"Celu", [](Ctx &c) { return unaryFn(c, "celu", c.attrFloat("alpha", 1.0f)); }},
      {"Selu",
       [](Ctx &c) {
         return unaryFn(c, "selu", c.attrFloat("alpha", 1.67326319217681884765625f),
                        c.attrFloat("gamma", 1.05070102214813232421875f));
       }},
      {"LeakyRelu", [](Ctx &c) { return unaryFn(c, "leaky_relu", c.attrFloat("alpha", 0.01f)); }},
      {"ThresholdedRelu",
       [](Ctx &c) { return unaryFn(c, "thresholded_relu", c.attrFloat("alpha", 1.0f)); }},
      {"HardSigmoid",
       [](Ctx &c) {
         return unaryFn(c, "hard_sigmoid", c.attrFloat("alpha", 0.2f), c.attrFloat("beta", 0.5f));
       }},
      {"Shrink",
       [](Ctx &c) {
         return unaryFn(c, "shrink", c.attrFloat("lambd", 0.5f), c.attrFloat("bias", 0.0f));
       }},
      {"Mod", importMod},
      {"BitShift", importBitShift},
      {"PRelu", importPRelu},
      {"And", simpleBinary<kAnd>},
      {"Or", simpleBinary<kOr>},
      {"Xor", simpleBinary<kXor>},
      {"BitwiseAnd", simpleBinary<kBitwiseAnd>},
      {"BitwiseOr", simpleBinary<kBitwiseOr>},
      {"BitwiseXor", simpleBinary<kBitwiseXor>},
      {"LessOrEqual", simpleBinary<kLessEqual>},
      {"GreaterOrEqual", simpleBinary<kGreaterEqual>},
      {"Clip", importClip},
      {"Mean", importMean},
      {"CastLike", importCastLike},
  };
  for (const auto &[name, fn] : ops)
    table[name] = fn;
}

} // namespace colossal::onnx_import

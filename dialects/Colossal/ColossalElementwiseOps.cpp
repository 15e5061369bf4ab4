//===- ColossalElementwiseOps.cpp - colossal.unary / colossal.binary -----===//
//
// The function tables (ElementwiseFns.h), type inference, verifiers and folders of the
// table-driven elementwise ops. Folding evaluates on widened host values (ConstantEval.h) with
// the same formulas the CPU kernels use.
//===----------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"
#include "dialects/Colossal/ElementwiseFns.h"
#include "dialects/Colossal/VJP.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace colossal;

//===----------------------------------------------------------------------===//
// Tables
//===----------------------------------------------------------------------===//

namespace {

double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

#define F(expr) [](double x, double alpha, double beta) -> double { (void)alpha; (void)beta; return expr; }
const UnaryFnInfo kUnaryFns[] = {
    {"cos", kFloatDomain, false, 0, F(std::cos(x)), nullptr},
    {"sin", kFloatDomain, false, 0, F(std::sin(x)), nullptr},
    {"tan", kFloatDomain, false, 0, F(std::tan(x)), nullptr},
    {"acos", kFloatDomain, false, 0, F(std::acos(x)), nullptr},
    {"asin", kFloatDomain, false, 0, F(std::asin(x)), nullptr},
    {"atan", kFloatDomain, false, 0, F(std::atan(x)), nullptr},
    {"cosh", kFloatDomain, false, 0, F(std::cosh(x)), nullptr},
    {"sinh", kFloatDomain, false, 0, F(std::sinh(x)), nullptr},
    {"acosh", kFloatDomain, false, 0, F(std::acosh(x)), nullptr},
    {"asinh", kFloatDomain, false, 0, F(std::asinh(x)), nullptr},
    {"atanh", kFloatDomain, false, 0, F(std::atanh(x)), nullptr},
    {"ceil", kFloatDomain, false, 0, F(std::ceil(x)), nullptr},
    {"floor", kFloatDomain, false, 0, F(std::floor(x)), nullptr},
    {"round", kFloatDomain, false, 0, F(std::nearbyint(x)), nullptr},
    {"sign", kFloatDomain | kIntDomain, false, 0, F(x > 0 ? 1.0 : x < 0 ? -1.0 : x),
     [](int64_t x) -> int64_t { return x > 0 ? 1 : x < 0 ? -1 : 0; }},
    {"softplus", kFloatDomain, false, 0, F(softplus(x)), nullptr},
    {"softsign", kFloatDomain, false, 0, F(x / (1 + std::fabs(x))), nullptr},
    {"mish", kFloatDomain, false, 0, F(x * std::tanh(softplus(x))), nullptr},
    {"hard_swish", kFloatDomain, false, 0, F(x * std::fmax(0.0, std::fmin(1.0, x / 6 + 0.5))),
     nullptr},
    {"elu", kFloatDomain, false, 1, F(x >= 0 ? x : alpha * std::expm1(x)), nullptr},
    {"celu", kFloatDomain, false, 1,
     F(std::fmax(0.0, x) + std::fmin(0.0, alpha * std::expm1(x / alpha))), nullptr},
    {"selu", kFloatDomain, false, 2, F(beta * (x > 0 ? x : alpha * std::expm1(x))), nullptr},
    {"leaky_relu", kFloatDomain, false, 1, F(x >= 0 ? x : alpha * x), nullptr},
    {"thresholded_relu", kFloatDomain, false, 1, F(x > alpha ? x : 0.0), nullptr},
    {"hard_sigmoid", kFloatDomain, false, 2, F(std::fmax(0.0, std::fmin(1.0, alpha * x + beta))),
     nullptr},
    {"shrink", kFloatDomain, false, 2, F(x < -alpha ? x + beta : x > alpha ? x - beta : 0.0),
     nullptr},
    {"bitwise_not", kIntDomain, false, 0, nullptr, [](int64_t x) -> int64_t { return ~x; }},
    {"is_nan", kFloatDomain, true, 0, F(std::isnan(x) ? 1.0 : 0.0), nullptr},
    {"is_inf", kFloatDomain, true, 0, F(std::isinf(x) ? 1.0 : 0.0), nullptr},
    {"is_pos_inf", kFloatDomain, true, 0, F(std::isinf(x) && x > 0 ? 1.0 : 0.0), nullptr},
    {"is_neg_inf", kFloatDomain, true, 0, F(std::isinf(x) && x < 0 ? 1.0 : 0.0), nullptr},
};
#undef F

/// Python's modulo: the result takes the divisor's sign.
int64_t intMod(int64_t a, int64_t b) {
  if (b == 0)
    return 0;
  if (b == -1)
    return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
double floatMod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

#define I(expr) [](int64_t a, int64_t b, unsigned w) -> int64_t { (void)w; return expr; }
#define D(expr) [](double a, double b) -> double { return expr; }
const BinaryFnInfo kBinaryFns[] = {
    {"mod", kFloatDomain | kIntDomain, false, D(floatMod(a, b)), I(intMod(a, b))},
    {"fmod", kFloatDomain | kIntDomain, false, D(std::fmod(a, b)),
     I(b == 0 || b == -1 ? 0 : a % b)},
    {"and", kBoolDomain, false, nullptr, I(int64_t((a != 0) & (b != 0)))},
    {"or", kBoolDomain, false, nullptr, I(int64_t((a != 0) | (b != 0)))},
    {"xor", kBoolDomain, false, nullptr, I(int64_t((a != 0) ^ (b != 0)))},
    {"bitwise_and", kIntDomain, false, nullptr, I(a & b)},
    {"bitwise_or", kIntDomain, false, nullptr, I(a | b)},
    {"bitwise_xor", kIntDomain, false, nullptr, I(a ^ b)},
    {"shift_left", kIntDomain, false, nullptr,
     I(b < 0 || uint64_t(b) >= w ? 0 : int64_t(uint64_t(a) << b))},
    {"shift_right", kIntDomain, false, nullptr,
     I(b < 0 || uint64_t(b) >= w ? 0 : int64_t(uint64_t(a) >> b))},
    {"prelu", kFloatDomain | kIntDomain, false, D(a < 0 ? a * b : a), I(a < 0 ? a * b : a)},
    {"less_equal", kFloatDomain | kIntDomain, true, D(a <= b ? 1.0 : 0.0), I(a <= b)},
    {"greater_equal", kFloatDomain | kIntDomain, true, D(a >= b ? 1.0 : 0.0), I(a >= b)},
};
#undef I
#undef D

} // namespace

const UnaryFnInfo *colossal::lookupUnaryFn(llvm::StringRef fn) {
  for (const UnaryFnInfo &row : kUnaryFns)
    if (row.name == fn)
      return &row;
  return nullptr;
}

const BinaryFnInfo *colossal::lookupBinaryFn(llvm::StringRef fn) {
  for (const BinaryFnInfo &row : kBinaryFns)
    if (row.name == fn)
      return &row;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {

unsigned domainOf(Type t) {
  if (llvm::isa<FloatType>(t))
    return kFloatDomain;
  if (t.isInteger(1))
    return kBoolDomain;
  if (llvm::isa<IntegerType>(t))
    return kIntDomain;
  return 0;
}

std::string domainNames(unsigned d) {
  std::string s;
  auto add = [&](const char *n) { s += (s.empty() ? "" : ", ") + std::string(n); };
  if (d & kFloatDomain)
    add("floating-point");
  if (d & kIntDomain)
    add("integer");
  if (d & kBoolDomain)
    add("i1");
  return s;
}


} // namespace

//===----------------------------------------------------------------------===//
// UnaryFnOp
//===----------------------------------------------------------------------===//

LogicalResult UnaryFnOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto x = llvm::cast<RankedTensorType>(adaptor.getX().getType());
  const UnaryFnInfo *info = lookupUnaryFn(adaptor.getFn());
  if (!info)
    return emitOptionalError(loc, "unknown unary function '", adaptor.getFn(), "'");
  inferred.push_back(info->boolResult ? x.clone(IntegerType::get(ctx, 1)) : Type(x));
  return success();
}

LogicalResult UnaryFnOp::verify() {
  const UnaryFnInfo *info = lookupUnaryFn(getFn());
  if (!info)
    return emitOpError("unknown unary function '") << getFn() << "'";
  Type et = getX().getType().getElementType();
  if (!(domainOf(et) & info->domain))
    return emitOpError("'") << getFn() << "' takes " << domainNames(info->domain)
                            << " elements, got " << et;
  auto rt = getResult().getType();
  if (rt.getShape() != getX().getType().getShape())
    return emitOpError("result shape differs from the operand's");
  Type want = info->boolResult ? IntegerType::get(getContext(), 1) : et;
  if (rt.getElementType() != want)
    return emitOpError("result element type must be ") << want;
  if (bool(getAlpha()) != (info->numParams >= 1) || bool(getBeta()) != (info->numParams >= 2))
    return emitOpError("'") << getFn() << "' takes " << info->numParams
                            << " of the parameters alpha, beta";
  return success();
}

OpFoldResult UnaryFnOp::fold(FoldAdaptor a) {
  auto in = HostTensor::from(a.getX());
  const UnaryFnInfo *info = lookupUnaryFn(getFn());
  if (!in || !info)
    return {};
  auto type = getType();
  double alpha = getAlpha() ? getAlpha()->convertToDouble() : 0.0;
  double beta = getBeta() ? getBeta()->convertToDouble() : 0.0;
  HostTensor out = HostTensor::zeros(type);
  for (int64_t k = 0; k < in->numel(); ++k) {
    if (in->isFloat()) {
      double r = info->evalFloat(in->f[k], alpha, beta);
      if (out.isFloat())
        out.f[k] = r;
      else
        out.i[k] = r != 0.0;
    } else {
      if (!info->evalInt)
        return {};
      out.i[k] = info->evalInt(in->i[k]);
    }
  }
  return out.toAttr();
}

//===----------------------------------------------------------------------===//
// BinaryFnOp
//===----------------------------------------------------------------------===//

LogicalResult BinaryFnOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto lhs = llvm::cast<RankedTensorType>(adaptor.getLhs().getType());
  auto rhs = llvm::cast<RankedTensorType>(adaptor.getRhs().getType());
  const BinaryFnInfo *info = lookupBinaryFn(adaptor.getFn());
  if (!info)
    return emitOptionalError(loc, "unknown binary function '", adaptor.getFn(), "'");
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "operand element types differ: ", lhs.getElementType(), " vs ",
                             rhs.getElementType());
  SmallVector<int64_t> shape;
  if (!broadcastShapes(lhs.getShape(), rhs.getShape(), shape))
    return emitOptionalError(loc, "operand shapes do not broadcast");
  inferred.push_back(RankedTensorType::get(
      shape, info->boolResult ? IntegerType::get(ctx, 1) : lhs.getElementType()));
  return success();
}

LogicalResult BinaryFnOp::verify() {
  const BinaryFnInfo *info = lookupBinaryFn(getFn());
  if (!info)
    return emitOpError("unknown binary function '") << getFn() << "'";
  Type et = getLhs().getType().getElementType();
  if (!(domainOf(et) & info->domain))
    return emitOpError("'") << getFn() << "' takes " << domainNames(info->domain)
                            << " elements, got " << et;
  SmallVector<Type> inferred;
  if (failed(inferReturnTypes(getContext(), getLoc(), Adaptor(*this), inferred)))
    return failure();
  if (inferred[0] != getType())
    return emitOpError("result type must be ") << inferred[0];
  return success();
}

OpFoldResult BinaryFnOp::fold(FoldAdaptor a) {
  auto lhs = HostTensor::from(a.getLhs()), rhs = HostTensor::from(a.getRhs());
  const BinaryFnInfo *info = lookupBinaryFn(getFn());
  if (!lhs || !rhs || !info)
    return {};
  auto type = llvm::cast<RankedTensorType>(getType());
  if (type.getNumElements() > kMaxFoldElements)
    return {};
  bool isFloat = lhs->isFloat();
  if (isFloat && !info->evalFloat)
    return {};
  unsigned width = isFloat ? 0 : lhs->type.getElementType().getIntOrFloatBitWidth();
  auto ffn = [&](ArrayRef<double> v) { return info->evalFloat(v[0], v[1]); };
  auto ifn = [&](ArrayRef<int64_t> v) { return info->evalInt(v[0], v[1], width); };
  return evalBroadcast(type, {&*lhs, &*rhs}, ffn, ifn, isFloat).toAttr();
}

//===----------------------------------------------------------------------===//
// Vector-Jacobian product of colossal.unary (VJPOpInterface)
//===----------------------------------------------------------------------===//

// f'(x) per `fn`: one fused unary_grad where the kernel has the function (docs/plan.md), else the
// derivative composed from elementwise ops (textbook derivatives; at the kinks the one-sided value
// PyTorch uses). Rounding and sign functions are flat almost everywhere: no gradient.
LogicalResult UnaryFnOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool>,
                                  SmallVectorImpl<Value> &og) {
  Location loc = getLoc();
  Value x = getX(), g = resultGrads[0];
  Type type = x.getType(), elt = rankedType(x).getElementType();
  StringRef fn = getFn();
  double alpha = getAlpha() ? getAlpha()->convertToDouble() : 0.0;
  double beta = getBeta() ? getBeta()->convertToDouble() : 0.0;
  auto c = [&](double v) { return scalarConstant(b, loc, elt, v); };
  auto mul = [&](Value p, Value q) -> Value { return MulOp::create(b, loc, p, q); };
  auto add = [&](Value p, Value q) -> Value { return AddOp::create(b, loc, p, q); };
  auto sub = [&](Value p, Value q) -> Value { return SubOp::create(b, loc, p, q); };
  auto div = [&](Value p, Value q) -> Value { return DivOp::create(b, loc, p, q); };
  auto fnOf = [&](StringRef f, Value v) -> Value {
    return UnaryFnOp::create(b, loc, type, b.getStringAttr(f), v, FloatAttr(), FloatAttr());
  };
  auto select = [&](Value cond, Value p, Value q) -> Value {
    return WhereOp::create(b, loc, cond, p, q);
  };
  auto gt = [&](Value p, Value q) -> Value { return GreaterOp::create(b, loc, p, q); };
  auto lt = [&](Value p, Value q) -> Value { return LessOp::create(b, loc, p, q); };
  Value x2 = nullptr;
  auto square = [&]() { return x2 ? x2 : (x2 = mul(x, x)); };

  if (llvm::is_contained({"sin", "cos", "softplus"}, fn)) {
    og[0] = unaryGrad(b, loc, fn, x, g);
  } else if (fn == "leaky_relu" || fn == "elu") {
    og[0] = unaryGrad(b, loc, fn, x, g, alpha);
  } else if (llvm::is_contained({"ceil", "floor", "round", "sign"}, fn)) {
    return success();
  } else if (fn == "tan") { // 1 + tan²
    Value y = getResult();
    og[0] = mul(g, add(c(1), mul(y, y)));
  } else if (fn == "atan") { // 1 / (1 + x²)
    og[0] = div(g, add(c(1), square()));
  } else if (fn == "asin" || fn == "acos") { // ±1 / √(1 − x²)
    Value d = div(g, SqrtOp::create(b, loc, type, sub(c(1), square())));
    og[0] = fn == "asin" ? d : Value(NegOp::create(b, loc, type, d));
  } else if (fn == "sinh") {
    og[0] = mul(g, fnOf("cosh", x));
  } else if (fn == "cosh") {
    og[0] = mul(g, fnOf("sinh", x));
  } else if (fn == "asinh") { // 1 / √(x² + 1)
    og[0] = div(g, SqrtOp::create(b, loc, type, add(square(), c(1))));
  } else if (fn == "acosh") { // 1 / √(x² − 1)
    og[0] = div(g, SqrtOp::create(b, loc, type, sub(square(), c(1))));
  } else if (fn == "atanh") { // 1 / (1 − x²)
    og[0] = div(g, sub(c(1), square()));
  } else if (fn == "softsign") { // 1 / (1 + |x|)²
    Value d = add(c(1), AbsOp::create(b, loc, type, x));
    og[0] = div(g, mul(d, d));
  } else if (fn == "mish") { // tanh(sp) + x·sech²(sp)·σ(x), sp = softplus(x)
    Value t = TanhOp::create(b, loc, type, fnOf("softplus", x));
    Value sech2 = sub(c(1), mul(t, t));
    og[0] = mul(g, add(t, mul(mul(x, sech2), SigmoidOp::create(b, loc, type, x))));
  } else if (fn == "hard_swish") { // 0 below −3, x/3 + ½ on [−3, 3], 1 above (torch)
    Value mid = add(div(x, c(3)), c(0.5));
    og[0] = mul(g, select(lt(x, c(-3)), c(0), select(gt(x, c(3)), c(1), mid)));
  } else if (fn == "celu") { // 1 for x > 0, else e^(x/α)
    Value e = ExpOp::create(b, loc, type, div(x, c(alpha)));
    og[0] = mul(g, select(gt(x, c(0)), c(1), e));
  } else if (fn == "selu") { // γ for x > 0, else γ·α·e^x
    Value e = mul(ExpOp::create(b, loc, type, x), c(alpha * beta));
    og[0] = mul(g, select(gt(x, c(0)), c(beta), e));
  } else if (fn == "thresholded_relu") {
    og[0] = select(gt(x, c(alpha)), g, c(0));
  } else if (fn == "hard_sigmoid") { // α inside the linear part (0, 1), else 0
    Value z = add(mul(x, c(alpha)), c(beta));
    Value inside = select(gt(z, c(0)), select(lt(z, c(1)), c(alpha), c(0)), c(0));
    og[0] = mul(g, inside);
  } else if (fn == "shrink") { // 1 outside [−λ, λ]
    og[0] = select(lt(x, c(-alpha)), g, select(gt(x, c(alpha)), g, c(0)));
  } else {
    return emitOpError("has no vector-Jacobian product for fn '") << fn << "'";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Vector-Jacobian product of colossal.binary (VJPOpInterface)
//===----------------------------------------------------------------------===//

// The float functions of the table; the others take integers or yield i1, so autodiff never
// reaches them. mod and fmod are a − q·b with q = floor(a/b) resp. trunc(a/b) flat almost
// everywhere (torch.remainder, torch.fmod); prelu is piecewise linear with slope b below 0.
LogicalResult BinaryFnOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                                   SmallVectorImpl<Value> &og) {
  Location loc = getLoc();
  Value lhs = getLhs(), rhs = getRhs(), g = resultGrads[0];
  auto lt = rankedType(lhs), rt = rankedType(rhs);
  Type elt = lt.getElementType();
  StringRef fn = getFn();
  auto c = [&](double v) { return scalarConstant(b, loc, elt, v); };
  auto mul = [&](Value p, Value q) -> Value { return MulOp::create(b, loc, p, q); };
  auto select = [&](Value cond, Value p, Value q) -> Value {
    return WhereOp::create(b, loc, cond, p, q);
  };
  auto round = [&](StringRef f, Value v) -> Value {
    return UnaryFnOp::create(b, loc, v.getType(), b.getStringAttr(f), v, FloatAttr(),
                             FloatAttr());
  };
  if (!llvm::isa<FloatType>(elt) || lookupBinaryFn(fn)->boolResult)
    return success();
  if (fn == "mod" || fn == "fmod") {
    if (needed[0])
      og[0] = reduceToShape(b, loc, g, lt);
    if (needed[1]) {
      Value q = DivOp::create(b, loc, lhs, rhs);
      Value whole = fn == "mod" ? round("floor", q)
                                : select(LessOp::create(b, loc, q, c(0)), round("ceil", q),
                                         round("floor", q));
      og[1] = NegOp::create(b, loc, reduceToShape(b, loc, mul(g, whole), rt));
    }
    return success();
  }
  if (fn == "prelu") {
    Value negative = LessOp::create(b, loc, lhs, c(0));
    if (needed[0])
      og[0] = reduceToShape(b, loc, mul(g, select(negative, rhs, c(1))), lt);
    if (needed[1])
      og[1] = reduceToShape(b, loc, mul(g, select(negative, lhs, c(0))), rt);
    return success();
  }
  return emitOpError("has no vector-Jacobian product for fn '") << fn << "'";
}

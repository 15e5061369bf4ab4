//===- ColossalOps.cpp - type inference, verifiers and folders -----------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"
#include "dialects/Colossal/VJP.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>
#include <map>

using namespace mlir;
using namespace colossal;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {




std::optional<HostTensor> constantOperand(Attribute a) { return HostTensor::from(a); }

/// Results above kMaxFoldElements stay ops: folding is for shape arithmetic, not bulk data.
bool tooLargeToFold(Type t) {
  return llvm::cast<RankedTensorType>(t).getNumElements() > kMaxFoldElements;
}

/// Folds an elementwise op whose operands are all constants.
OpFoldResult foldElementwise(Operation *op, ArrayRef<Attribute> operands,
                             const std::function<double(ArrayRef<double>)> &ffn,
                             const std::function<int64_t(ArrayRef<int64_t>)> &ifn) {
  SmallVector<HostTensor> hosts;
  bool anyFloat = false;
  for (Attribute a : operands) {
    auto h = constantOperand(a);
    if (!h)
      return {};
    hosts.push_back(std::move(*h));
  }
  // Where's condition does not decide the compute domain; the data operands do.
  for (size_t k = isa<WhereOp>(op) ? 1 : 0; k < hosts.size(); ++k)
    anyFloat |= hosts[k].isFloat();
  if (anyFloat && !ffn)
    return {};
  if (!anyFloat && !ifn)
    return {};
  SmallVector<const HostTensor *> ptrs;
  for (auto &h : hosts)
    ptrs.push_back(&h);
  auto type = llvm::cast<RankedTensorType>(op->getResult(0).getType());
  if (type.getNumElements() > kMaxFoldElements)
    return {};
  return evalBroadcast(type, ptrs, ffn, ifn, anyFloat).toAttr();
}

LogicalResult inferBroadcast(std::optional<Location> loc, Type lhsT, Type rhsT, Type resultElt,
                             SmallVectorImpl<Type> &inferred) {
  auto lhs = llvm::cast<RankedTensorType>(lhsT), rhs = llvm::cast<RankedTensorType>(rhsT);
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "operand element types differ: ", lhs.getElementType(), " vs ",
                             rhs.getElementType());
  SmallVector<int64_t> shape;
  if (!broadcastShapes(lhs.getShape(), rhs.getShape(), shape))
    return emitOptionalError(loc, "shapes ", shapeStr(lhs.getShape()), " and ",
                             shapeStr(rhs.getShape()), " do not broadcast");
  inferred.push_back(
      RankedTensorType::get(shape, resultElt ? resultElt : lhs.getElementType()));
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Broadcast binary ops
//===----------------------------------------------------------------------===//

#define COLOSSAL_BINARY_INFER(OP, RESULT_ELT)                                                     \
  LogicalResult OP::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,              \
                                     Adaptor adaptor, SmallVectorImpl<Type> &inferred) {         \
    (void)ctx;                                                                                   \
    return inferBroadcast(loc, adaptor.getLhs().getType(), adaptor.getRhs().getType(),           \
                          RESULT_ELT, inferred);                                                 \
  }
COLOSSAL_BINARY_INFER(AddOp, Type())
COLOSSAL_BINARY_INFER(SubOp, Type())
COLOSSAL_BINARY_INFER(MulOp, Type())
COLOSSAL_BINARY_INFER(DivOp, Type())
COLOSSAL_BINARY_INFER(PowOp, Type())
COLOSSAL_BINARY_INFER(MinOp, Type())
COLOSSAL_BINARY_INFER(MaxOp, Type())
COLOSSAL_BINARY_INFER(EqualOp, IntegerType::get(ctx, 1))
COLOSSAL_BINARY_INFER(LessOp, IntegerType::get(ctx, 1))
COLOSSAL_BINARY_INFER(GreaterOp, IntegerType::get(ctx, 1))
#undef COLOSSAL_BINARY_INFER

OpFoldResult AddOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(), [](ArrayRef<double> v) { return v[0] + v[1]; },
                         [](ArrayRef<int64_t> v) { return v[0] + v[1]; });
}
OpFoldResult SubOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(), [](ArrayRef<double> v) { return v[0] - v[1]; },
                         [](ArrayRef<int64_t> v) { return v[0] - v[1]; });
}
OpFoldResult MulOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(), [](ArrayRef<double> v) { return v[0] * v[1]; },
                         [](ArrayRef<int64_t> v) { return v[0] * v[1]; });
}
OpFoldResult DivOp::fold(FoldAdaptor a) {
  // Integer division by zero is left for the runtime to report.
  if (auto rhs = constantOperand(a.getRhs()); rhs && !rhs->isFloat())
    for (int64_t x : rhs->i)
      if (x == 0)
        return {};
  return foldElementwise(*this, a.getOperands(), [](ArrayRef<double> v) { return v[0] / v[1]; },
                         [](ArrayRef<int64_t> v) { return v[0] / v[1]; });
}
OpFoldResult PowOp::fold(FoldAdaptor a) {
  return foldElementwise(
      *this, a.getOperands(), [](ArrayRef<double> v) { return std::pow(v[0], v[1]); },
      [](ArrayRef<int64_t> v) { return int64_t(std::llround(std::pow(double(v[0]), double(v[1])))); });
}
OpFoldResult MinOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(),
                         [](ArrayRef<double> v) { return std::fmin(v[0], v[1]); },
                         [](ArrayRef<int64_t> v) { return std::min(v[0], v[1]); });
}
OpFoldResult MaxOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(),
                         [](ArrayRef<double> v) { return std::fmax(v[0], v[1]); },
                         [](ArrayRef<int64_t> v) { return std::max(v[0], v[1]); });
}
OpFoldResult EqualOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(),
                         [](ArrayRef<double> v) { return double(v[0] == v[1]); },
                         [](ArrayRef<int64_t> v) { return int64_t(v[0] == v[1]); });
}
OpFoldResult LessOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(),
                         [](ArrayRef<double> v) { return double(v[0] < v[1]); },
                         [](ArrayRef<int64_t> v) { return int64_t(v[0] < v[1]); });
}
OpFoldResult GreaterOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(),
                         [](ArrayRef<double> v) { return double(v[0] > v[1]); },
                         [](ArrayRef<int64_t> v) { return int64_t(v[0] > v[1]); });
}

LogicalResult WhereOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto c = rankedType(adaptor.getCondition());
  if (!c.getElementType().isInteger(1))
    return emitOptionalError(loc, "condition must be i1, got ", c.getElementType());
  SmallVector<Type> xy;
  if (failed(inferBroadcast(loc, adaptor.getX().getType(), adaptor.getY().getType(), Type(), xy)))
    return failure();
  auto t = llvm::cast<RankedTensorType>(xy[0]);
  SmallVector<int64_t> shape;
  if (!broadcastShapes(c.getShape(), t.getShape(), shape))
    return emitOptionalError(loc, "condition shape ", shapeStr(c.getShape()),
                             " does not broadcast with ", shapeStr(t.getShape()));
  inferred.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

OpFoldResult WhereOp::fold(FoldAdaptor a) {
  return foldElementwise(*this, a.getOperands(),
                         [](ArrayRef<double> v) { return v[0] != 0 ? v[1] : v[2]; },
                         [](ArrayRef<int64_t> v) { return v[0] != 0 ? v[1] : v[2]; });
}

//===----------------------------------------------------------------------===//
// Unary ops
//===----------------------------------------------------------------------===//

#define COLOSSAL_UNARY_FOLD(OP, FEXPR, IEXPR)                                                     \
  OpFoldResult OP::fold(FoldAdaptor a) {                                                          \
    std::function<int64_t(ArrayRef<int64_t>)> ifn = IEXPR;                                       \
    return foldElementwise(                                                                      \
        *this, a.getOperands(), [](ArrayRef<double> v) { double x = v[0]; return FEXPR; }, ifn); \
  }
#define NO_INT nullptr
COLOSSAL_UNARY_FOLD(NegOp, -x, [](ArrayRef<int64_t> v) { return -v[0]; })
COLOSSAL_UNARY_FOLD(AbsOp, std::fabs(x), [](ArrayRef<int64_t> v) { return std::abs(v[0]); })
COLOSSAL_UNARY_FOLD(SqrtOp, std::sqrt(x), NO_INT)
COLOSSAL_UNARY_FOLD(ReciprocalOp, 1.0 / x, NO_INT)
COLOSSAL_UNARY_FOLD(ExpOp, std::exp(x), NO_INT)
COLOSSAL_UNARY_FOLD(LogOp, std::log(x), NO_INT)
COLOSSAL_UNARY_FOLD(ErfOp, std::erf(x), NO_INT)
COLOSSAL_UNARY_FOLD(TanhOp, std::tanh(x), NO_INT)
COLOSSAL_UNARY_FOLD(SigmoidOp, 1.0 / (1.0 + std::exp(-x)), NO_INT)
COLOSSAL_UNARY_FOLD(ReluOp, x > 0 ? x : 0.0,
                    [](ArrayRef<int64_t> v) { return std::max<int64_t>(v[0], 0); })
COLOSSAL_UNARY_FOLD(SiluOp, x / (1.0 + std::exp(-x)), NO_INT)
#undef COLOSSAL_UNARY_FOLD
#undef NO_INT

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"") << getApproximate()
                                                                         << "\"";
  return success();
}

LogicalResult CastOp::verify() {
  if (getX().getType().getShape() != getResult().getType().getShape())
    return emitOpError("changes the shape");
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor a) {
  if (getX().getType() == getType())
    return getX();
  auto in = constantOperand(a.getX());
  if (!in)
    return {};
  auto type = llvm::cast<RankedTensorType>(getType());
  HostTensor out = HostTensor::zeros(type);
  bool toBool = type.getElementType().isInteger(1);
  // A float outside int64's range (or NaN) has no int64 to narrow from (e.g. 2^63 and above for
  // ui64 results): left to the runtime kernel.
  if (in->isFloat() && !out.isFloat() && !toBool)
    for (double v : in->f)
      if (!(std::trunc(v) >= -0x1p63 && std::trunc(v) < 0x1p63))
        return {};
  for (int64_t k = 0; k < in->numel(); ++k) {
    if (out.isFloat())
      out.f[k] = in->asDouble(k);
    else if (toBool)
      out.i[k] = in->asDouble(k) != 0.0;
    else
      out.i[k] = in->isFloat() ? int64_t(std::trunc(in->f[k])) : in->i[k];
  }
  return out.toAttr();
}

//===----------------------------------------------------------------------===//
// Softmax and normalization
//===----------------------------------------------------------------------===//

static LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError("axis ") << axis << " out of range for rank " << rank;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getX().getType().getRank());
}
LogicalResult LogSoftmaxOp::verify() {
  return verifyAxis(*this, getAxis(), getX().getType().getRank());
}

static LogicalResult verifyNormParam(Operation *op, RankedTensorType x, int64_t axis, Value p,
                                     StringRef what) {
  if (failed(verifyAxis(op, axis, x.getRank())))
    return failure();
  auto pt = rankedType(p);
  if (pt.getShape() != x.getShape().drop_front(axis))
    return op->emitOpError() << what << " shape " << shapeStr(pt.getShape())
                             << " must equal the normalized shape "
                             << shapeStr(x.getShape().drop_front(axis));
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  inferred.push_back(adaptor.getX().getType());
  return success();
}
LogicalResult LayerNormOp::verify() {
  auto x = getX().getType();
  if (failed(verifyNormParam(*this, llvm::cast<RankedTensorType>(x), getAxis(), getScale(), "scale")))
    return failure();
  if (getBias())
    return verifyNormParam(*this, llvm::cast<RankedTensorType>(x), getAxis(), getBias(), "bias");
  return success();
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *, std::optional<Location>, Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  inferred.push_back(adaptor.getX().getType());
  return success();
}
LogicalResult RmsNormOp::verify() {
  return verifyNormParam(*this, llvm::cast<RankedTensorType>(getX().getType()), getAxis(),
                         getScale(), "scale");
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

static LogicalResult inferReduce(std::optional<Location> loc, Value x, ArrayRef<int64_t> axes,
                                 bool keepdims, SmallVectorImpl<Type> &inferred) {
  auto t = rankedType(x);
  if (axes.empty())
    return emitOptionalError(loc, "axes must not be empty");
  SmallVector<int64_t> shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= t.getRank() || (i && axes[i] <= axes[i - 1]))
      return emitOptionalError(loc, "axes must be sorted, unique and in [0, ", t.getRank(), ")");
  }
  for (int64_t d = 0; d < t.getRank(); ++d) {
    bool reduced = llvm::is_contained(axes, d);
    if (!reduced)
      shape.push_back(t.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  inferred.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

static OpFoldResult foldReduce(Operation *op, Attribute operand, ArrayRef<int64_t> axes,
                               int kind /*0 sum, 1 mean, 2 max*/) {
  auto in = constantOperand(operand);
  if (!in)
    return {};
  auto type = llvm::cast<RankedTensorType>(op->getResult(0).getType());
  auto inShape = in->type.getShape();
  HostTensor out = HostTensor::zeros(type);
  std::vector<double> acc(type.getNumElements(), kind == 2 ? -INFINITY : 0.0);
  int64_t count = 1;
  for (int64_t a : axes)
    count *= inShape[a];
  SmallVector<int64_t> idx;
  for (int64_t k = 0; k < in->numel(); ++k) {
    unflatten(k, inShape, idx);
    int64_t o = 0;
    for (int64_t d = 0, od = 0; d < int64_t(inShape.size()); ++d) {
      bool reduced = llvm::is_contained(axes, d);
      if (reduced && type.getRank() != int64_t(inShape.size()))
        continue;
      o = o * type.getDimSize(od) + (reduced ? 0 : idx[d]);
      ++od;
    }
    double v = in->asDouble(k);
    acc[o] = kind == 2 ? std::max(acc[o], v) : acc[o] + v;
  }
  for (int64_t k = 0; k < type.getNumElements(); ++k) {
    double v = kind == 1 ? acc[k] / double(count) : acc[k];
    if (out.isFloat())
      out.f[k] = v;
    else
      out.i[k] = int64_t(v);
  }
  return out.toAttr();
}

#define COLOSSAL_REDUCE(OP, KIND)                                                                 \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor, \
                                     SmallVectorImpl<Type> &inferred) {                           \
    return inferReduce(loc, adaptor.getX(), adaptor.getAxes(), adaptor.getKeepdims(), inferred);  \
  }                                                                                               \
  OpFoldResult OP::fold(FoldAdaptor a) { return foldReduce(*this, a.getX(), getAxes(), KIND); }
COLOSSAL_REDUCE(ReduceSumOp, 0)
COLOSSAL_REDUCE(ReduceMeanOp, 1)
COLOSSAL_REDUCE(ReduceMaxOp, 2)
#undef COLOSSAL_REDUCE

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto a = rankedType(adaptor.getLhs()), b = rankedType(adaptor.getRhs());
  if (a.getRank() < 2 || b.getRank() < 2)
    return emitOptionalError(loc, "operands must have rank >= 2");
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "operand element types differ");
  int64_t k1 = a.getShape().back(), k2 = b.getShape()[b.getRank() - 2];
  if (k1 != k2)
    return emitOptionalError(loc, "contracting dims differ: ", shapeStr(a.getShape()), " x ",
                             shapeStr(b.getShape()));
  SmallVector<int64_t> batch;
  if (!broadcastShapes(a.getShape().drop_back(2), b.getShape().drop_back(2), batch))
    return emitOptionalError(loc, "batch dims do not broadcast: ", shapeStr(a.getShape()), " x ",
                             shapeStr(b.getShape()));
  batch.push_back(a.getShape()[a.getRank() - 2]);
  batch.push_back(b.getShape().back());
  inferred.push_back(RankedTensorType::get(batch, a.getElementType()));
  return success();
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto a = rankedType(adaptor.getA()), b = rankedType(adaptor.getB());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOptionalError(loc, "operands must be matrices");
  int64_t m = adaptor.getTransA() ? a.getDimSize(1) : a.getDimSize(0);
  int64_t ka = adaptor.getTransA() ? a.getDimSize(0) : a.getDimSize(1);
  int64_t kb = adaptor.getTransB() ? b.getDimSize(1) : b.getDimSize(0);
  int64_t n = adaptor.getTransB() ? b.getDimSize(0) : b.getDimSize(1);
  if (ka != kb)
    return emitOptionalError(loc, "contracting dims differ: ", ka, " vs ", kb);
  SmallVector<int64_t> shape{m, n};
  if (Value c = adaptor.getC()) {
    SmallVector<int64_t> bc;
    if (!broadcastShapes(rankedType(c).getShape(), shape, bc) || ArrayRef<int64_t>(bc) != ArrayRef<int64_t>(shape))
      return emitOptionalError(loc, "c of shape ", shapeStr(rankedType(c).getShape()),
                               " does not broadcast to ", shapeStr(shape));
  }
  inferred.push_back(RankedTensorType::get(shape, a.getElementType()));
  return success();
}

bool colossal::lowPrecisionResultsCompatible(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != 1 || actual.size() != 1)
    return false;
  if (inferred[0] == actual[0])
    return true;
  auto i = llvm::dyn_cast<RankedTensorType>(inferred[0]);
  auto a = llvm::dyn_cast<RankedTensorType>(actual[0]);
  return i && a && i.getShape() == a.getShape() &&
         (i.getElementType().isBF16() || i.getElementType().isF16()) &&
         a.getElementType().isF32();
}

bool MatMulOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return lowPrecisionResultsCompatible(l, r);
}
bool GemmOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return lowPrecisionResultsCompatible(l, r);
}
bool AttentionOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return lowPrecisionResultsCompatible(l, r);
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto q = rankedType(adaptor.getQ()), v = rankedType(adaptor.getV());
  if (q.getRank() != 4 || v.getRank() != 4)
    return emitOptionalError(loc, "q, k and v must be [B, H, T, D]");
  inferred.push_back(RankedTensorType::get(
      {q.getDimSize(0), q.getDimSize(1), q.getDimSize(2), v.getDimSize(3)}, q.getElementType()));
  return success();
}

LogicalResult AttentionOp::verify() {
  auto q = getQ().getType(), k = getK().getType(), v = getV().getType();
  auto qs = q.getShape(), ks = k.getShape(), vs = v.getShape();
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return emitOpError("q, k and v must be rank 4: [B, H, T, D]");
  if (qs[0] != ks[0] || ks[0] != vs[0])
    return emitOpError("batch sizes differ");
  if (ks[1] != vs[1] || ks[2] != vs[2])
    return emitOpError("k and v must agree on heads and length");
  if (qs[3] != ks[3])
    return emitOpError("q and k head dims differ: ") << qs[3] << " vs " << ks[3];
  if (ks[1] == 0 || qs[1] % ks[1] != 0)
    return emitOpError("query heads (") << qs[1] << ") must be a multiple of key/value heads ("
                                        << ks[1] << ")";
  if (Value m = getMask()) {
    SmallVector<int64_t> scores{qs[0], qs[1], qs[2], ks[2]}, bc;
    auto ms = rankedType(m).getShape();
    if (ms.size() > 4 || !broadcastShapes(ms, scores, bc) || ArrayRef<int64_t>(bc) != ArrayRef<int64_t>(scores))
      return emitOpError("mask of shape ") << shapeStr(ms) << " does not broadcast to scores "
                                           << shapeStr(scores);
  }
  return success();
}

LogicalResult LinearOp::verify() {
  auto x = getX().getType(), w = getW().getType(), b = getBias().getType();
  auto y = llvm::cast<RankedTensorType>(getType());
  for (Type t : {x.getElementType(), w.getElementType(), b.getElementType(), y.getElementType()})
    if (!t.isF32())
      return emitOpError("operands and result must be f32");
  if (x.getRank() < 2 || w.getRank() != 2 || b.getRank() != 1)
    return emitOpError("expects x [..., M, K], w [K, N] and bias [N], got ")
           << shapeStr(x.getShape()) << ", " << shapeStr(w.getShape()) << ", " << shapeStr(b.getShape());
  const int64_t K = w.getDimSize(0), N = w.getDimSize(1);
  if (x.getShape().back() != K || b.getDimSize(0) != N)
    return emitOpError("x ") << shapeStr(x.getShape()) << " · w " << shapeStr(w.getShape()) << " + bias "
                             << shapeStr(b.getShape()) << " do not agree";
  SmallVector<int64_t> want(x.getShape());
  want.back() = N;
  if (y.getShape() != ArrayRef<int64_t>(want))
    return emitOpError("result shape ") << shapeStr(y.getShape()) << ", expected " << shapeStr(want);
  if (Value r = getResidual())
    if (r.getType() != y)
      return emitOpError("residual must have the result's type");
  StringRef act = getActivation();
  if (act != "none" && act != "relu" && act != "gelu" && act != "gelu_tanh")
    return emitOpError("activation must be none, relu, gelu or gelu_tanh, got '") << act << "'";
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  if (getX().getType().getNumElements() != getType().getNumElements())
    return emitOpError("element count changes: ")
           << shapeStr(getX().getType().getShape()) << " -> " << shapeStr(getType().getShape());
  if (getX().getType().getElementType() != getType().getElementType())
    return emitOpError("element type changes");
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor a) {
  if (getX().getType() == getType())
    return getX();
  if (auto dense = llvm::dyn_cast_or_null<DenseElementsAttr>(a.getX()))
    return dense.reshape(llvm::cast<ShapedType>(getType()));
  if (auto inner = getX().getDefiningOp<ReshapeOp>()) {
    getXMutable().assign(inner.getX());
    return getResult();
  }
  return {};
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto t = rankedType(adaptor.getX());
  auto perm = adaptor.getPerm();
  if (int64_t(perm.size()) != t.getRank())
    return emitOptionalError(loc, "perm has ", perm.size(), " entries for rank ", t.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= t.getRank() || seen[p])
      return emitOptionalError(loc, "perm is not a permutation");
    seen[p] = true;
    shape.push_back(t.getDimSize(p));
  }
  inferred.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor a) {
  auto perm = getPerm();
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity &= perm[i] == int64_t(i);
  if (identity)
    return getX();
  auto in = constantOperand(a.getX());
  if (!in)
    return {};
  auto inStrides = broadcastStrides(in->type.getShape(), in->type.getShape());
  return evalPermute(getType(), *in, [&](ArrayRef<int64_t> idx) {
           int64_t off = 0;
           for (size_t d = 0; d < idx.size(); ++d)
             off += idx[d] * inStrides[perm[d]];
           return off;
         }).toAttr();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto data = rankedType(adaptor.getData()), idx = rankedType(adaptor.getIndices());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= data.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range for rank ", data.getRank());
  if (!llvm::isa<IntegerType>(idx.getElementType()))
    return emitOptionalError(loc, "indices must be integers");
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, idx.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  inferred.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

OpFoldResult GatherOp::fold(FoldAdaptor a) {
  if (tooLargeToFold(getType()))
    return {};
  auto data = constantOperand(a.getData()), indices = constantOperand(a.getIndices());
  if (!data || !indices)
    return {};
  int64_t axis = getAxis();
  auto ds = data->type.getShape();
  int64_t dimSize = ds[axis];
  for (int64_t i : indices->i)
    if (i < -dimSize || i >= dimSize)
      return {}; // out of range: the runtime reports it with the instruction's location
  int64_t idxRank = indices->type.getRank();
  auto dStrides = broadcastStrides(ds, ds);
  auto iStrides = broadcastStrides(indices->type.getShape(), indices->type.getShape());
  return evalPermute(getType(), *data, [&](ArrayRef<int64_t> idx) {
           int64_t ioff = 0;
           for (int64_t d = 0; d < idxRank; ++d)
             ioff += idx[axis + d] * iStrides[d];
           int64_t sel = indices->i[ioff];
           if (sel < 0)
             sel += dimSize;
           int64_t off = 0;
           for (int64_t d = 0; d < int64_t(ds.size()); ++d) {
             int64_t v = d < axis ? idx[d] : d == axis ? sel : idx[d - 1 + idxRank];
             off += v * dStrides[d];
           }
           return off;
         }).toAttr();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto t = rankedType(adaptor.getX());
  auto starts = adaptor.getStarts(), limits = adaptor.getLimits(), steps = adaptor.getSteps();
  int64_t r = t.getRank();
  if (int64_t(starts.size()) != r || int64_t(limits.size()) != r || int64_t(steps.size()) != r)
    return emitOptionalError(loc, "starts, limits and steps need one entry per dim");
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < r; ++d) {
    int64_t s = starts[d], l = limits[d], st = steps[d], n = t.getDimSize(d);
    if (st == 0)
      return emitOptionalError(loc, "step of dim ", d, " is zero");
    if (st > 0 ? (s < 0 || s > n || l < s || l > n) : (s < -1 || s >= n || l > s || l < -1))
      return emitOptionalError(loc, "dim ", d, ": start ", s, " limit ", l, " step ", st,
                               " not normalized for size ", n);
    int64_t count = st > 0 ? (l - s + st - 1) / st : (s - l + (-st) - 1) / (-st);
    shape.push_back(std::max<int64_t>(count, 0));
  }
  inferred.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

OpFoldResult SliceOp::fold(FoldAdaptor a) {
  if (getX().getType() == getType() && llvm::all_of(getSteps(), [](int64_t s) { return s == 1; }))
    return getX();
  auto in = constantOperand(a.getX());
  if (!in)
    return {};
  auto strides = broadcastStrides(in->type.getShape(), in->type.getShape());
  auto starts = getStarts(), steps = getSteps();
  return evalPermute(getType(), *in, [&](ArrayRef<int64_t> idx) {
           int64_t off = 0;
           for (size_t d = 0; d < idx.size(); ++d)
             off += (starts[d] + idx[d] * steps[d]) * strides[d];
           return off;
         }).toAttr();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(loc, "needs at least one input");
  auto first = rankedType(inputs[0]);
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= first.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range for rank ", first.getRank());
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value v : inputs) {
    auto t = rankedType(v);
    if (t.getRank() != first.getRank() || t.getElementType() != first.getElementType())
      return emitOptionalError(loc, "inputs differ in rank or element type");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != axis && t.getDimSize(d) != first.getDimSize(d))
        return emitOptionalError(loc, "inputs differ in dim ", d);
    shape[axis] += t.getDimSize(axis);
  }
  inferred.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

OpFoldResult ConcatOp::fold(FoldAdaptor a) {
  if (getInputs().size() == 1)
    return getInputs()[0];
  if (tooLargeToFold(getType()))
    return {};
  SmallVector<HostTensor> ins;
  for (Attribute attr : a.getInputs()) {
    auto h = constantOperand(attr);
    if (!h)
      return {};
    ins.push_back(std::move(*h));
  }
  int64_t axis = getAxis();
  auto type = getType();
  HostTensor out = HostTensor::zeros(type);
  SmallVector<int64_t> idx;
  for (int64_t k = 0; k < type.getNumElements(); ++k) {
    unflatten(k, type.getShape(), idx);
    int64_t pos = idx[axis];
    size_t which = 0;
    while (pos >= ins[which].type.getDimSize(axis))
      pos -= ins[which++].type.getDimSize(axis);
    idx[axis] = pos;
    auto s = broadcastStrides(ins[which].type.getShape(), ins[which].type.getShape());
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      off += idx[d] * s[d];
    if (out.isFloat())
      out.f[k] = ins[which].asDouble(off);
    else
      out.i[k] = ins[which].asInt(off);
  }
  return out.toAttr();
}

LogicalResult SplitOp::verify() {
  auto t = getX().getType();
  int64_t axis = getAxis();
  if (failed(verifyAxis(*this, axis, t.getRank())))
    return failure();
  int64_t total = 0;
  for (Value r : getResults()) {
    auto rt = rankedType(r);
    if (rt.getRank() != t.getRank() || rt.getElementType() != t.getElementType())
      return emitOpError("results must keep rank and element type");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != axis && rt.getDimSize(d) != t.getDimSize(d))
        return emitOpError("results differ from the input in dim ") << d;
    total += rt.getDimSize(axis);
  }
  if (total != t.getDimSize(axis))
    return emitOpError("result sizes sum to ") << total << ", input dim is " << t.getDimSize(axis);
  return success();
}

LogicalResult SplitOp::fold(FoldAdaptor a, SmallVectorImpl<OpFoldResult> &results) {
  if (getNumResults() == 1 && getResult(0).getType() == getX().getType()) {
    results.push_back(getX());
    return success();
  }
  if (llvm::any_of(getResultTypes(), [](Type t) { return tooLargeToFold(t); }))
    return failure();
  auto in = constantOperand(a.getX());
  if (!in)
    return failure();
  int64_t axis = getAxis(), start = 0;
  auto strides = broadcastStrides(in->type.getShape(), in->type.getShape());
  for (Value r : getResults()) {
    auto type = rankedType(r);
    results.push_back(evalPermute(type, *in, [&](ArrayRef<int64_t> idx) {
                        int64_t off = 0;
                        for (size_t d = 0; d < idx.size(); ++d)
                          off += (idx[d] + (int64_t(d) == axis ? start : 0)) * strides[d];
                        return off;
                      }).toAttr());
    start += type.getDimSize(axis);
  }
  return success();
}

LogicalResult ExpandOp::verify() {
  SmallVector<int64_t> bc;
  auto in = getX().getType().getShape(), out = getType().getShape();
  if (!broadcastShapes(in, out, bc) || ArrayRef<int64_t>(bc) != out)
    return emitOpError("cannot broadcast ") << shapeStr(in) << " to " << shapeStr(out);
  if (getX().getType().getElementType() != getType().getElementType())
    return emitOpError("element type changes");
  return success();
}

OpFoldResult ExpandOp::fold(FoldAdaptor a) {
  if (getX().getType() == getType())
    return getX();
  auto dense = llvm::dyn_cast_or_null<DenseElementsAttr>(a.getX());
  if (!dense)
    return {};
  if (dense.isSplat())
    return DenseElementsAttr::get(llvm::cast<ShapedType>(getType()), dense.getSplatValue<Attribute>());
  if (tooLargeToFold(getType()))
    return {};
  auto in = constantOperand(dense);
  if (!in)
    return {};
  auto strides = broadcastStrides(in->type.getShape(), getType().getShape());
  return evalPermute(getType(), *in, [&](ArrayRef<int64_t> idx) {
           int64_t off = 0;
           for (size_t d = 0; d < idx.size(); ++d)
             off += idx[d] * strides[d];
           return off;
         }).toAttr();
}

OpFoldResult TriluOp::fold(FoldAdaptor a) {
  auto in = constantOperand(a.getX());
  if (!in || in->type.getRank() < 2)
    return {};
  int64_t k = getK();
  bool upper = getUpper();
  auto shape = in->type.getShape();
  HostTensor out = *in;
  SmallVector<int64_t> idx;
  for (int64_t e = 0; e < in->numel(); ++e) {
    unflatten(e, shape, idx);
    int64_t i = idx[idx.size() - 2], j = idx.back();
    bool keep = upper ? j - i >= k : j - i <= k;
    if (!keep) {
      if (out.isFloat())
        out.f[e] = 0;
      else
        out.i[e] = 0;
    }
  }
  return out.toAttr();
}

#define GET_OP_CLASSES
#include "dialects/Colossal/ColossalOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Vector-Jacobian products (VJPOpInterface, docs/training.md "Autodiff")
//
// Each buildVJP gets g = ∂L/∂result and builds ∂L/∂operand for the operands the driver needs.
// Broadcast operands get g reduced back to their shape (reduceToShape); scaling by constants and
// negation are applied after that reduction, on the smaller tensor.
//===----------------------------------------------------------------------===//

namespace {

Value mulV(OpBuilder &b, Location loc, Value x, Value y) { return MulOp::create(b, loc, x, y); }
Value divV(OpBuilder &b, Location loc, Value x, Value y) { return DivOp::create(b, loc, x, y); }
Value elt(OpBuilder &b, Location loc, Value like, double v) {
  return scalarConstant(b, loc, rankedType(like).getElementType(), v);
}
Value reshapeTo(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> shape) {
  auto t = RankedTensorType::get(shape, rankedType(x).getElementType());
  return t == x.getType() ? x : Value(ReshapeOp::create(b, loc, t, x));
}
Value gemmV(OpBuilder &b, Location loc, Value x, Value y, bool ta, bool tb, double alpha) {
  return GemmOp::create(b, loc, x, y, Value(), b.getBoolAttr(ta), b.getBoolAttr(tb),
                        b.getF32FloatAttr(float(alpha)), b.getF32FloatAttr(1.0f));
}
/// x converted to `like`'s element type (x itself when it has it): a contraction whose f32 result
/// came from bf16 operands takes its cotangent in bf16, so every product of its VJP has operands
/// of one type and a result of the operand's type.
Value toElementTypeOf(OpBuilder &b, Location loc, Value x, Value like) {
  Type e = rankedType(like).getElementType();
  auto t = rankedType(x);
  if (t.getElementType() == e)
    return x;
  return CastOp::create(b, loc, RankedTensorType::get(t.getShape(), e), x);
}
/// x with its last two dims swapped.
Value swapLastTwo(OpBuilder &b, Location loc, Value x) {
  int64_t r = rankedType(x).getRank();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, r));
  std::swap(perm[r - 1], perm[r - 2]);
  return TransposeOp::create(b, loc, x, b.getDenseI64ArrayAttr(perm));
}
/// The splat value of a constant operand, if it is one.
std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat() ||
      !llvm::isa<FloatType>(attr.getElementType()))
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

/// Broadcasts the cotangent of a reduction over `axes` back to x's shape, times `scale`.
Value unreduce(OpBuilder &b, Location loc, Value g, RankedTensorType x, ArrayRef<int64_t> axes,
               double scale) {
  SmallVector<int64_t> kept(x.getShape());
  for (int64_t a : axes)
    kept[a] = 1;
  Value gk = reshapeTo(b, loc, g, kept);
  if (scale != 1.0)
    gk = mulV(b, loc, gk, elt(b, loc, gk, scale));
  if (rankedType(gk) == x)
    return gk;
  return ExpandOp::create(b, loc, x, gk);
}

/// ∂max(a,b)/∂a (or of min with `less`): 1 where a wins, ½ on ties (as torch.maximum), else 0.
template <typename CmpOp>
LogicalResult minMaxVJP(Operation *op, OpBuilder &b, Value lhs, Value rhs, Value g,
                        ArrayRef<bool> needed, SmallVectorImpl<Value> &og) {
  Location loc = op->getLoc();
  Value wins = CmpOp::create(b, loc, lhs, rhs);
  Value tie = EqualOp::create(b, loc, lhs, rhs);
  Value half = WhereOp::create(b, loc, tie, elt(b, loc, g, 0.5), elt(b, loc, g, 0.0));
  Value w = WhereOp::create(b, loc, wins, elt(b, loc, g, 1.0), half);
  Value ga = mulV(b, loc, g, w);
  if (needed[0])
    og[0] = reduceToShape(b, loc, ga, rankedType(lhs));
  if (needed[1])
    og[1] = reduceToShape(b, loc, SubOp::create(b, loc, g, ga), rankedType(rhs));
  return success();
}

} // namespace

#define COLOSSAL_VJP(OP)                                                                           \
  LogicalResult OP::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,         \
                             SmallVectorImpl<Value> &og)

// d(a + b) = da + db.
COLOSSAL_VJP(AddOp) {
  Value g = resultGrads[0];
  if (needed[0])
    og[0] = reduceToShape(b, getLoc(), g, rankedType(getLhs()));
  if (needed[1])
    og[1] = reduceToShape(b, getLoc(), g, rankedType(getRhs()));
  return success();
}

COLOSSAL_VJP(SubOp) {
  Value g = resultGrads[0];
  if (needed[0])
    og[0] = reduceToShape(b, getLoc(), g, rankedType(getLhs()));
  if (needed[1])
    og[1] = NegOp::create(b, getLoc(), reduceToShape(b, getLoc(), g, rankedType(getRhs())));
  return success();
}

COLOSSAL_VJP(MulOp) {
  Value g = resultGrads[0];
  if (needed[0])
    og[0] = reduceToShape(b, getLoc(), mulV(b, getLoc(), g, getRhs()), rankedType(getLhs()));
  if (needed[1])
    og[1] = reduceToShape(b, getLoc(), mulV(b, getLoc(), g, getLhs()), rankedType(getRhs()));
  return success();
}

// y = a / b: da = g / b, db = −g·y / b.
COLOSSAL_VJP(DivOp) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  if (needed[0])
    og[0] = reduceToShape(b, loc, divV(b, loc, g, getRhs()), rankedType(getLhs()));
  if (needed[1]) {
    Value t = divV(b, loc, mulV(b, loc, g, getResult()), getRhs());
    og[1] = NegOp::create(b, loc, reduceToShape(b, loc, t, rankedType(getRhs())));
  }
  return success();
}

// y = a^e: da = g·e·a^(e−1) (a constant e folds to one pow and one mul; e = 2 to a mul),
// de = g·y·ln a.
COLOSSAL_VJP(PowOp) {
  Location loc = getLoc();
  Value g = resultGrads[0], a = getLhs(), e = getRhs();
  if (needed[0]) {
    Value da;
    if (auto c = splatValue(e)) {
      if (*c == 2.0)
        da = mulV(b, loc, g, mulV(b, loc, a, elt(b, loc, a, 2.0)));
      else if (*c == 1.0)
        da = g;
      else
        da = mulV(b, loc, g,
                  mulV(b, loc, PowOp::create(b, loc, a, elt(b, loc, a, *c - 1.0)),
                       elt(b, loc, a, *c)));
    } else {
      Value em1 = SubOp::create(b, loc, e, elt(b, loc, e, 1.0));
      da = mulV(b, loc, g, mulV(b, loc, e, PowOp::create(b, loc, a, em1)));
    }
    og[0] = reduceToShape(b, loc, da, rankedType(a));
  }
  if (needed[1]) {
    Value de = mulV(b, loc, mulV(b, loc, g, getResult()), LogOp::create(b, loc, a.getType(), a));
    og[1] = reduceToShape(b, loc, de, rankedType(e));
  }
  return success();
}

COLOSSAL_VJP(MinOp) {
  return minMaxVJP<LessOp>(*this, b, getLhs(), getRhs(), resultGrads[0], needed, og);
}
COLOSSAL_VJP(MaxOp) {
  return minMaxVJP<GreaterOp>(*this, b, getLhs(), getRhs(), resultGrads[0], needed, og);
}

// The condition gets no gradient; each branch gets g where it was selected.
COLOSSAL_VJP(WhereOp) {
  Location loc = getLoc();
  Value g = resultGrads[0], zero = elt(b, loc, g, 0.0);
  if (needed[1])
    og[1] = reduceToShape(b, loc, WhereOp::create(b, loc, getCondition(), g, zero),
                          rankedType(getX()));
  if (needed[2])
    og[2] = reduceToShape(b, loc, WhereOp::create(b, loc, getCondition(), zero, g),
                          rankedType(getY()));
  return success();
}

COLOSSAL_VJP(NegOp) {
  og[0] = NegOp::create(b, getLoc(), resultGrads[0]);
  return success();
}
// d e^x = e^x dx: reuses the forward result, no recomputation.
COLOSSAL_VJP(ExpOp) {
  og[0] = mulV(b, getLoc(), resultGrads[0], getResult());
  return success();
}

// The rest of the named elementwise ops: one fused unary_grad kernel each.
#define COLOSSAL_UNARY_VJP(OP, FN)                                                                 \
  COLOSSAL_VJP(OP) {                                                                               \
    (void)needed;                                                                                  \
    og[0] = unaryGrad(b, getLoc(), FN, getX(), resultGrads[0]);                                    \
    return success();                                                                              \
  }
COLOSSAL_UNARY_VJP(AbsOp, "abs")
COLOSSAL_UNARY_VJP(SqrtOp, "sqrt")
COLOSSAL_UNARY_VJP(ReciprocalOp, "reciprocal")
COLOSSAL_UNARY_VJP(LogOp, "log")
COLOSSAL_UNARY_VJP(ErfOp, "erf")
COLOSSAL_UNARY_VJP(TanhOp, "tanh")
COLOSSAL_UNARY_VJP(SigmoidOp, "sigmoid")
COLOSSAL_UNARY_VJP(ReluOp, "relu")
COLOSSAL_UNARY_VJP(SiluOp, "silu")
COLOSSAL_UNARY_VJP(GeluOp, getApproximate() == "tanh" ? "gelu_tanh" : "gelu")
#undef COLOSSAL_UNARY_VJP

// float → float: the cotangent converts back. Integer operands are never differentiated.
COLOSSAL_VJP(CastOp) {
  if (!llvm::isa<FloatType>(getX().getType().getElementType()))
    return success();
  Value g = resultGrads[0];
  og[0] = g.getType() == getX().getType() ? g
                                          : Value(CastOp::create(b, getLoc(), getX().getType(), g));
  return success();
}

COLOSSAL_VJP(SoftmaxOp) {
  og[0] = SoftmaxGradOp::create(b, getLoc(), getType(), getResult(), resultGrads[0],
                                getAxisAttr());
  return success();
}
COLOSSAL_VJP(LogSoftmaxOp) {
  og[0] = LogSoftmaxGradOp::create(b, getLoc(), getType(), getResult(), resultGrads[0],
                                   getAxisAttr());
  return success();
}

COLOSSAL_VJP(LayerNormOp) {
  auto grad = LayerNormGradOp::create(b, getLoc(), getX(), getScale(), resultGrads[0],
                                      getAxisAttr(), getEpsilonAttr());
  og[0] = grad.getDx();
  og[1] = grad.getDscale();
  if (getBias())
    og[2] = grad.getDbias();
  return success();
}

COLOSSAL_VJP(RmsNormOp) {
  auto grad = RmsNormGradOp::create(b, getLoc(), getX(), getScale(), resultGrads[0],
                                    getAxisAttr(), getEpsilonAttr());
  og[0] = grad.getDx();
  og[1] = grad.getDscale();
  return success();
}

COLOSSAL_VJP(ReduceSumOp) {
  og[0] = unreduce(b, getLoc(), resultGrads[0], rankedType(getX()), getAxes(), 1.0);
  return success();
}

COLOSSAL_VJP(ReduceMeanOp) {
  auto x = rankedType(getX());
  int64_t n = 1;
  for (int64_t a : getAxes())
    n *= x.getDimSize(a);
  og[0] = unreduce(b, getLoc(), resultGrads[0], x, getAxes(), 1.0 / double(n));
  return success();
}

// The maximum's cotangent is shared evenly by the elements that attain it (torch.amax).
COLOSSAL_VJP(ReduceMaxOp) {
  Location loc = getLoc();
  auto x = rankedType(getX());
  SmallVector<int64_t> kept(x.getShape());
  for (int64_t a : getAxes())
    kept[a] = 1;
  Value mask = EqualOp::create(b, loc, getX(), reshapeTo(b, loc, getResult(), kept));
  Value ones = WhereOp::create(b, loc, mask, elt(b, loc, getX(), 1.0), elt(b, loc, getX(), 0.0));
  Value count = ReduceSumOp::create(b, loc, ones, b.getDenseI64ArrayAttr(getAxes()),
                                    b.getBoolAttr(true));
  Value share = divV(b, loc, reshapeTo(b, loc, resultGrads[0], kept), count);
  og[0] = WhereOp::create(b, loc, mask, share, elt(b, loc, getX(), 0.0));
  return success();
}

// y = a·b. With a 2-D b ([..., M, K] × [K, N], every linear layer) the batch dims fold into M and
// both products are single gemms with transpose flags: da = g·bᵀ, db = aᵀ·g. Otherwise batched
// matmuls against transposed operands, summed over broadcast batch dims.
COLOSSAL_VJP(MatMulOp) {
  Location loc = getLoc();
  Value a = getLhs(), bm = getRhs();
  Value g = toElementTypeOf(b, loc, resultGrads[0], a);
  auto at = rankedType(a), bt = rankedType(bm);
  if (bt.getRank() == 2) {
    int64_t k = at.getShape().back(), n = bt.getDimSize(1);
    int64_t rows = k == 0 ? 0 : at.getNumElements() / k;
    Value g2 = reshapeTo(b, loc, g, {rows, n});
    if (needed[0])
      og[0] = reshapeTo(b, loc, gemmV(b, loc, g2, bm, false, true, 1.0), at.getShape());
    if (needed[1])
      og[1] = gemmV(b, loc, reshapeTo(b, loc, a, {rows, k}), g2, true, false, 1.0);
    return success();
  }
  if (needed[0])
    og[0] = reduceToShape(b, loc, MatMulOp::create(b, loc, g, swapLastTwo(b, loc, bm)), at);
  if (needed[1])
    og[1] = reduceToShape(b, loc, MatMulOp::create(b, loc, swapLastTwo(b, loc, a), g), bt);
  return success();
}

// y = α·op(a)·op(b) + β·c. Every product is one gemm with transpose flags (no transposes):
//   da = α·g·op(b)ᵀ (or its transpose when trans_a), db = α·op(a)ᵀ·g (or its transpose).
COLOSSAL_VJP(GemmOp) {
  Location loc = getLoc();
  Value a = getA(), bm = getB(), g = resultGrads[0];
  // The products take the cotangent in the operands' element type (an f32 result of bf16
  // operands); c's gradient is the cotangent itself.
  Value gab = toElementTypeOf(b, loc, g, a);
  bool ta = getTransA(), tb = getTransB();
  double alpha = getAlpha().convertToDouble(), beta = getBeta().convertToDouble();
  if (needed[0])
    og[0] = ta ? gemmV(b, loc, bm, gab, tb, true, alpha) : gemmV(b, loc, gab, bm, false, !tb, alpha);
  if (needed[1])
    og[1] = tb ? gemmV(b, loc, gab, a, true, ta, alpha) : gemmV(b, loc, a, gab, !ta, false, alpha);
  if (getC() && needed[2]) {
    Value dc = reduceToShape(b, loc, g, rankedType(getC()));
    og[2] = beta == 1.0 ? dc : mulV(b, loc, dc, elt(b, loc, dc, beta));
  }
  return success();
}

/// The `colossal.param` arguments `v` is computed from (through any ops), in argument order.
static SmallVector<std::string> paramsFeeding(Value v) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Value, 16> seen;
  std::map<unsigned, std::string> found;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(x)) {
      auto fn = dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
      if (fn)
        if (auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kParamAttr))
          found[arg.getArgNumber()] = name.str();
      continue;
    }
    if (Operation *def = x.getDefiningOp())
      work.append(def->operand_begin(), def->operand_end());
  }
  SmallVector<std::string> names;
  for (auto &[i, name] : found)
    names.push_back(name);
  return names;
}

COLOSSAL_VJP(AttentionOp) {
  if (getMask() && needed[3]) {
    // Name what makes the mask trainable, so the user can freeze it (an exported causal -inf
    // table is an initializer, hence a parameter, DESIGN.md "Parameters").
    std::string names;
    for (const std::string &n : paramsFeeding(getMask()))
      names += (names.empty() ? "'" : ", '") + n + "'";
    return emitOpError("has no gradient with respect to its mask, which is computed from the "
                       "parameter(s) ")
           << names << "; list them in train.frozen to train the model with the mask fixed";
  }
  auto grad = AttentionGradOp::create(b, getLoc(), getQ(), getK(), getV(), getMask(), getResult(),
                                      resultGrads[0], getScaleAttr(), getCausalAttr());
  og[0] = grad.getDq();
  og[1] = grad.getDk();
  og[2] = grad.getDv();
  return success();
}

COLOSSAL_VJP(ReshapeOp) {
  og[0] = ReshapeOp::create(b, getLoc(), getX().getType(), resultGrads[0]);
  return success();
}

COLOSSAL_VJP(TransposeOp) {
  auto perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = int64_t(i);
  og[0] = TransposeOp::create(b, getLoc(), resultGrads[0], b.getDenseI64ArrayAttr(inverse));
  return success();
}

// The embedding backward: scatter-add into zeros of the table's shape.
COLOSSAL_VJP(GatherOp) {
  og[0] = GatherGradOp::create(b, getLoc(), getData().getType(), getIndices(), resultGrads[0],
                               getAxisAttr());
  return success();
}

COLOSSAL_VJP(SliceOp) {
  og[0] = SliceGradOp::create(b, getLoc(), getX().getType(), resultGrads[0], getStartsAttr(),
                              getStepsAttr());
  return success();
}

// Each input gets its window of g along the axis.
COLOSSAL_VJP(ConcatOp) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  int64_t axis = getAxis(), offset = 0;
  for (auto [i, in] : llvm::enumerate(getInputs())) {
    auto t = rankedType(in);
    if (needed[i]) {
      SmallVector<int64_t> starts(t.getRank(), 0), limits(rankedType(g).getShape()),
          steps(t.getRank(), 1);
      starts[axis] = offset;
      limits[axis] = offset + t.getDimSize(axis);
      og[i] = SliceOp::create(b, loc, t, g, b.getDenseI64ArrayAttr(starts),
                              b.getDenseI64ArrayAttr(limits), b.getDenseI64ArrayAttr(steps));
    }
    offset += t.getDimSize(axis);
  }
  return success();
}

// The pieces' cotangents concatenate back; a piece that does not reach the loss contributes zeros.
COLOSSAL_VJP(SplitOp) {
  SmallVector<Value> pieces;
  for (auto [r, g] : llvm::zip(getResults(), resultGrads))
    pieces.push_back(g ? g : splatConstant(b, getLoc(), rankedType(r), 0.0));
  og[0] = ConcatOp::create(b, getLoc(), getX().getType(), pieces, getAxisAttr());
  return success();
}

COLOSSAL_VJP(ExpandOp) {
  og[0] = reduceToShape(b, getLoc(), resultGrads[0], rankedType(getX()));
  return success();
}

// Trilu is a fixed 0/1 mask: its own adjoint.
COLOSSAL_VJP(TriluOp) {
  og[0] = TriluOp::create(b, getLoc(), getType(), resultGrads[0], getUpperAttr(), getKAttr());
  return success();
}

#undef COLOSSAL_VJP

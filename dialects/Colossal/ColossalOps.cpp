//===- ColossalOps.cpp - type inference, verifiers and folders -----------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"

#include <cmath>

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

//===- ColossalIndexingOps.cpp - reductions, indexing, data movement -----===//
//
// Type inference, verifiers and constant folders of the ops declared in ColossalIndexingOps.td.
// Semantics follow the ONNX operator spec (https://onnx.ai/onnx/operators/); folders evaluate in
// the widened HostTensor domain of ConstantEval.h.
//===----------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"
#include "dialects/Colossal/VJP.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

using namespace mlir;
using namespace colossal;

namespace {

RankedTensorType rankedOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

std::string dims(ArrayRef<int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "x" : "") + std::to_string(s[i]);
  return r + "]";
}

bool isIndexType(Type t) {
  auto it = llvm::dyn_cast<IntegerType>(t);
  return it && (it.getWidth() == 32 || it.getWidth() == 64) && !it.isUnsigned();
}

/// Shape after reducing `axes` (sorted, unique, in range; checked here).
LogicalResult reducedShape(std::optional<Location> loc, RankedTensorType t, ArrayRef<int64_t> axes,
                           bool keepdims, SmallVectorImpl<int64_t> &shape) {
  if (axes.empty())
    return emitOptionalError(loc, "axes must not be empty");
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] < 0 || axes[i] >= t.getRank() || (i && axes[i] <= axes[i - 1]))
      return emitOptionalError(loc, "axes must be sorted, unique and in [0, ", t.getRank(), ")");
  for (int64_t d = 0; d < t.getRank(); ++d) {
    if (!llvm::is_contained(axes, d))
      shape.push_back(t.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  return success();
}

/// Row-major strides of a static shape.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

constexpr llvm::StringLiteral kReduceKinds[] = {"sum", "mean", "max", "min", "prod",
                                               "sum_square", "l1", "l2", "log_sum", "log_sum_exp"};
constexpr llvm::StringLiteral kScatterReductions[] = {"none", "add", "mul", "max", "min"};
constexpr llvm::StringLiteral kPadModes[] = {"constant", "reflect", "edge", "wrap"};

template <size_t N>
LogicalResult verifyOneOf(Operation *op, StringRef what, StringRef value,
                          const llvm::StringLiteral (&allowed)[N]) {
  for (StringRef a : allowed)
    if (a == value)
      return success();
  std::string list;
  for (StringRef a : allowed)
    list += (list.empty() ? "" : ", ") + a.str();
  return op->emitOpError() << what << " must be one of " << list << "; got '" << value << "'";
}

} // namespace

//===----------------------------------------------------------------------===//
// ReduceOp
//===----------------------------------------------------------------------===//

LogicalResult ReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto t = rankedOf(adaptor.getX());
  SmallVector<int64_t> shape;
  if (failed(reducedShape(loc, t, adaptor.getAxes(), adaptor.getKeepdims(), shape)))
    return failure();
  inferred.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

LogicalResult ReduceOp::verify() {
  if (failed(verifyOneOf(*this, "kind", getKind(), kReduceKinds)))
    return failure();
  StringRef k = getKind();
  bool floatOnly = k == "l2" || k == "log_sum" || k == "log_sum_exp";
  if (floatOnly && !llvm::isa<FloatType>(getX().getType().getElementType()))
    return emitOpError("kind '") << k << "' needs a floating-point input";
  return success();
}

OpFoldResult ReduceOp::fold(FoldAdaptor a) {
  auto in = HostTensor::from(a.getX());
  if (!in)
    return {};
  auto type = llvm::cast<RankedTensorType>(getType());
  auto inShape = in->type.getShape();
  auto axes = getAxes();
  StringRef kind = getKind();
  int64_t outN = type.getNumElements(), count = 1;
  for (int64_t ax : axes)
    count *= inShape[ax];
  // Output element of each input element: drop (or zero) the reduced coordinates.
  auto outStrides = stridesOf(type.getShape());
  auto outIndexOf = [&](ArrayRef<int64_t> idx) {
    int64_t o = 0;
    for (int64_t d = 0, od = 0; d < int64_t(idx.size()); ++d) {
      bool reduced = llvm::is_contained(axes, d);
      if (reduced && !getKeepdims())
        continue;
      o += (reduced ? 0 : idx[d]) * outStrides[od++];
    }
    return o;
  };
  HostTensor out = HostTensor::zeros(type);
  SmallVector<int64_t> idx;
  if (in->isFloat()) {
    bool isMin = kind == "min", isMax = kind == "max" || kind == "log_sum_exp";
    double init = kind == "prod" ? 1.0 : isMin ? INFINITY : isMax ? -INFINITY : 0.0;
    std::vector<double> acc(outN, init), mx;
    if (kind == "log_sum_exp") { // max pass first: m + log(Σ e^(x−m))
      for (int64_t k = 0; k < in->numel(); ++k) {
        unflatten(k, inShape, idx);
        double &m = acc[outIndexOf(idx)];
        m = std::fmax(m, in->f[k]);
      }
      mx = acc;
      std::fill(acc.begin(), acc.end(), 0.0);
    }
    for (int64_t k = 0; k < in->numel(); ++k) {
      unflatten(k, inShape, idx);
      int64_t o = outIndexOf(idx);
      double v = in->f[k], &r = acc[o];
      if (kind == "sum" || kind == "mean" || kind == "log_sum") r += v;
      else if (kind == "max") r = (v > r || std::isnan(v)) ? v : r;
      else if (kind == "min") r = (v < r || std::isnan(v)) ? v : r;
      else if (kind == "prod") r *= v;
      else if (kind == "sum_square" || kind == "l2") r += v * v;
      else if (kind == "l1") r += std::fabs(v);
      else r += std::isinf(mx[o]) ? 0.0 : std::exp(v - mx[o]);
    }
    for (int64_t o = 0; o < outN; ++o) {
      double r = acc[o];
      if (kind == "mean") r /= double(count);
      else if (kind == "l2") r = std::sqrt(r);
      else if (kind == "log_sum") r = std::log(r);
      else if (kind == "log_sum_exp") r = std::isinf(mx[o]) ? mx[o] : mx[o] + std::log(r);
      out.f[o] = r;
    }
    return out.toAttr();
  }
  if (kind == "l2" || kind == "log_sum" || kind == "log_sum_exp")
    return {};
  int64_t init = kind == "prod" ? 1
                 : kind == "min" ? std::numeric_limits<int64_t>::max()
                 : kind == "max" ? std::numeric_limits<int64_t>::min()
                                 : 0;
  std::vector<int64_t> acc(outN, init);
  for (int64_t k = 0; k < in->numel(); ++k) {
    unflatten(k, inShape, idx);
    int64_t v = in->i[k], &r = acc[outIndexOf(idx)];
    if (kind == "sum" || kind == "mean") r += v;
    else if (kind == "max") r = std::max(r, v);
    else if (kind == "min") r = std::min(r, v);
    else if (kind == "prod") r *= v;
    else if (kind == "sum_square") r += v * v;
    else r += v < 0 ? -v : v;
  }
  for (int64_t o = 0; o < outN; ++o)
    out.i[o] = kind == "mean" ? (count ? acc[o] / count : 0) : acc[o];
  return out.toAttr();
}

//===----------------------------------------------------------------------===//
// ArgMaxOp / ArgMinOp
//===----------------------------------------------------------------------===//

static LogicalResult inferArgReduce(MLIRContext *ctx, std::optional<Location> loc, Value x,
                                    int64_t axis, bool keepdims, SmallVectorImpl<Type> &inferred) {
  auto t = rankedOf(x);
  if (axis < 0 || axis >= t.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range for rank ", t.getRank());
  if (t.getDimSize(axis) == 0)
    return emitOptionalError(loc, "cannot take the arg-extremum of an empty dim");
  SmallVector<int64_t> shape;
  if (failed(reducedShape(loc, t, {axis}, keepdims, shape)))
    return failure();
  inferred.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  return success();
}

/// Index of the extremum along `axis` for every output element.
static OpFoldResult foldArgReduce(Operation *op, Attribute operand, int64_t axis, bool last,
                                  bool isMax) {
  auto in = HostTensor::from(operand);
  if (!in)
    return {};
  auto type = llvm::cast<RankedTensorType>(op->getResult(0).getType());
  int64_t outer = 1, n = in->type.getDimSize(axis), inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= in->type.getDimSize(d);
  for (int64_t d = axis + 1; d < in->type.getRank(); ++d)
    inner *= in->type.getDimSize(d);
  HostTensor out = HostTensor::zeros(type);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      double bv = in->asDouble(o * n * inner + j);
      for (int64_t k = 1; k < n; ++k) {
        double v = in->asDouble((o * n + k) * inner + j);
        // A NaN wins for both (NumPy): the first one, or the last with select_last_index.
        bool better;
        if (std::isnan(bv))
          better = last && std::isnan(v);
        else if (std::isnan(v))
          better = true;
        else
          better = isMax ? (v > bv || (last && v == bv)) : (v < bv || (last && v == bv));
        if (better) {
          best = k;
          bv = v;
        }
      }
      out.i[o * inner + j] = best;
    }
  return out.toAttr();
}

LogicalResult ArgMaxOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  return inferArgReduce(ctx, loc, adaptor.getX(), adaptor.getAxis(), adaptor.getKeepdims(),
                        inferred);
}
LogicalResult ArgMinOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  return inferArgReduce(ctx, loc, adaptor.getX(), adaptor.getAxis(), adaptor.getKeepdims(),
                        inferred);
}
OpFoldResult ArgMaxOp::fold(FoldAdaptor a) {
  return foldArgReduce(*this, a.getX(), getAxis(), getSelectLastIndex(), /*isMax=*/true);
}
OpFoldResult ArgMinOp::fold(FoldAdaptor a) {
  return foldArgReduce(*this, a.getX(), getAxis(), getSelectLastIndex(), /*isMax=*/false);
}

//===----------------------------------------------------------------------===//
// CumSumOp
//===----------------------------------------------------------------------===//

LogicalResult CumSumOp::verify() {
  int64_t rank = getX().getType().getRank();
  if (getAxis() < 0 || getAxis() >= rank)
    return emitOpError("axis ") << getAxis() << " out of range for rank " << rank;
  return success();
}

OpFoldResult CumSumOp::fold(FoldAdaptor a) {
  auto in = HostTensor::from(a.getX());
  if (!in)
    return {};
  int64_t axis = getAxis(), outer = 1, n = in->type.getDimSize(axis), inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= in->type.getDimSize(d);
  for (int64_t d = axis + 1; d < in->type.getRank(); ++d)
    inner *= in->type.getDimSize(d);
  HostTensor out = HostTensor::zeros(in->type);
  bool excl = getExclusive(), rev = getReverse();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double fs = 0;
      int64_t is = 0;
      for (int64_t step = 0; step < n; ++step) {
        int64_t k = rev ? n - 1 - step : step, e = (o * n + k) * inner + j;
        if (in->isFloat()) {
          double v = in->f[e];
          out.f[e] = excl ? fs : fs + v;
          fs += v;
        } else {
          int64_t v = in->i[e];
          out.i[e] = excl ? is : is + v;
          is += v;
        }
      }
    }
  return out.toAttr();
}

//===----------------------------------------------------------------------===//
// GatherElementsOp / GatherNDOp
//===----------------------------------------------------------------------===//

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &inferred) {
  auto data = rankedOf(adaptor.getData()), idx = rankedOf(adaptor.getIndices());
  int64_t axis = adaptor.getAxis();
  if (!isIndexType(idx.getElementType()))
    return emitOptionalError(loc, "indices must be i32 or i64");
  if (data.getRank() != idx.getRank() || data.getRank() == 0)
    return emitOptionalError(loc, "data ", dims(data.getShape()), " and indices ",
                             dims(idx.getShape()), " must have the same rank >= 1");
  if (axis < 0 || axis >= data.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range for rank ", data.getRank());
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (d != axis && idx.getDimSize(d) > data.getDimSize(d))
      return emitOptionalError(loc, "indices dim ", d, " (", idx.getDimSize(d),
                               ") exceeds the data dim (", data.getDimSize(d), ")");
  inferred.push_back(RankedTensorType::get(idx.getShape(), data.getElementType()));
  return success();
}

OpFoldResult GatherElementsOp::fold(FoldAdaptor a) {
  auto data = HostTensor::from(a.getData()), indices = HostTensor::from(a.getIndices());
  if (!data || !indices)
    return {};
  int64_t axis = getAxis(), n = data->type.getDimSize(axis);
  for (int64_t i : indices->i)
    if (i < -n || i >= n)
      return {}; // the runtime reports it with the instruction's location
  auto ds = stridesOf(data->type.getShape());
  auto type = llvm::cast<RankedTensorType>(getType());
  return evalPermute(type, *data, [&](ArrayRef<int64_t> idx) {
           int64_t flat = 0;
           auto is = stridesOf(type.getShape());
           for (size_t d = 0; d < idx.size(); ++d)
             flat += idx[d] * is[d];
           int64_t sel = indices->i[flat];
           if (sel < 0)
             sel += n;
           int64_t off = 0;
           for (size_t d = 0; d < idx.size(); ++d)
             off += (int64_t(d) == axis ? sel : idx[d]) * ds[d];
           return off;
         }).toAttr();
}

LogicalResult GatherNDOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto data = rankedOf(adaptor.getData()), idx = rankedOf(adaptor.getIndices());
  int64_t b = adaptor.getBatchDims(), r = data.getRank(), q = idx.getRank();
  if (!isIndexType(idx.getElementType()))
    return emitOptionalError(loc, "indices must be i32 or i64");
  if (q < 1 || r < 1)
    return emitOptionalError(loc, "data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(q, r))
    return emitOptionalError(loc, "batch_dims ", b, " must be in [0, min(rank(data), rank(indices)))");
  for (int64_t d = 0; d < b; ++d)
    if (data.getDimSize(d) != idx.getDimSize(d))
      return emitOptionalError(loc, "batch dim ", d, " differs: data ", dims(data.getShape()),
                               ", indices ", dims(idx.getShape()));
  int64_t m = idx.getShape().back();
  if (m < 1 || m > r - b)
    return emitOptionalError(loc, "the last dim of indices (", m, ") must be in [1, ", r - b, "]");
  SmallVector<int64_t> shape(idx.getShape().drop_back());
  llvm::append_range(shape, data.getShape().drop_front(b + m));
  inferred.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

OpFoldResult GatherNDOp::fold(FoldAdaptor a) {
  auto data = HostTensor::from(a.getData()), indices = HostTensor::from(a.getIndices());
  auto type = llvm::cast<RankedTensorType>(getType());
  if (!data || !indices || type.getNumElements() > kMaxFoldElements)
    return {};
  ArrayRef<int64_t> ds = data->type.getShape(), is = indices->type.getShape();
  int64_t b = getBatchDims(), m = is.back(), q = is.size();
  for (int64_t k = 0; k < indices->numel(); ++k) {
    int64_t n = ds[b + k % m];
    if (indices->i[k] < -n || indices->i[k] >= n)
      return {}; // the runtime reports it with the instruction's location
  }
  auto dStrides = stridesOf(ds), iStrides = stridesOf(is);
  return evalPermute(type, *data, [&](ArrayRef<int64_t> idx) {
           // idx = [index-tuple position (q-1 dims) ..., slice position ...]; its first b dims
           // are the batch dims of data too.
           int64_t tuple = 0, off = 0;
           for (int64_t d = 0; d < q - 1; ++d)
             tuple += idx[d] * iStrides[d];
           for (int64_t d = 0; d < b; ++d)
             off += idx[d] * dStrides[d];
           for (int64_t j = 0; j < m; ++j) {
             int64_t sel = indices->i[tuple + j];
             off += (sel < 0 ? sel + ds[b + j] : sel) * dStrides[b + j];
           }
           for (int64_t d = b + m; d < int64_t(ds.size()); ++d)
             off += idx[q - 1 + d - b - m] * dStrides[d];
           return off;
         }).toAttr();
}

//===----------------------------------------------------------------------===//
// ScatterElementsOp / ScatterNDOp
//===----------------------------------------------------------------------===//

LogicalResult ScatterElementsOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                                  Adaptor adaptor,
                                                  SmallVectorImpl<Type> &inferred) {
  inferred.push_back(adaptor.getData().getType());
  return success();
}

LogicalResult ScatterElementsOp::verify() {
  auto data = getData().getType(), idx = getIndices().getType(), upd = getUpdates().getType();
  if (failed(verifyOneOf(*this, "reduction", getReduction(), kScatterReductions)))
    return failure();
  if (!isIndexType(idx.getElementType()))
    return emitOpError("indices must be i32 or i64");
  if (idx.getShape() != upd.getShape())
    return emitOpError("indices ") << dims(idx.getShape()) << " and updates "
                                   << dims(upd.getShape()) << " differ in shape";
  if (upd.getElementType() != data.getElementType())
    return emitOpError("updates and data differ in element type");
  if (data.getRank() != idx.getRank() || data.getRank() == 0)
    return emitOpError("data and indices must have the same rank >= 1");
  if (getAxis() < 0 || getAxis() >= data.getRank())
    return emitOpError("axis ") << getAxis() << " out of range for rank " << data.getRank();
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (d != getAxis() && idx.getDimSize(d) > data.getDimSize(d))
      return emitOpError("indices dim ") << d << " exceeds the data dim";
  return success();
}

LogicalResult ScatterNDOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  inferred.push_back(adaptor.getData().getType());
  return success();
}

OpFoldResult ScatterNDOp::fold(FoldAdaptor a) {
  auto data = HostTensor::from(a.getData()), indices = HostTensor::from(a.getIndices()),
       updates = HostTensor::from(a.getUpdates());
  if (!data || !indices || !updates)
    return {};
  ArrayRef<int64_t> ds = data->type.getShape();
  int64_t m = indices->type.getShape().back();
  int64_t slice = 1; // elements per index tuple: D[m..r)
  for (int64_t d = m; d < int64_t(ds.size()); ++d)
    slice *= ds[d];
  auto dStrides = stridesOf(ds);
  StringRef reduction = getReduction();
  HostTensor out = *data;
  for (int64_t k = 0; k * m < indices->numel(); ++k) {
    int64_t base = 0;
    for (int64_t j = 0; j < m; ++j) {
      int64_t sel = indices->i[k * m + j], n = ds[j];
      if (sel < -n || sel >= n)
        return {}; // the runtime reports it with the instruction's location
      base += (sel < 0 ? sel + n : sel) * dStrides[j];
    }
    for (int64_t e = 0; e < slice; ++e) {
      auto combine = [&](auto &dst, auto value) {
        using V = std::decay_t<decltype(value)>;
        V &x = dst[base + e];
        x = reduction == "add"   ? x + value
            : reduction == "mul" ? x * value
            : reduction == "max" ? std::max(x, value)
            : reduction == "min" ? std::min(x, value)
                                 : value;
      };
      if (out.isFloat())
        combine(out.f, updates->f[k * slice + e]);
      else
        combine(out.i, updates->i[k * slice + e]);
    }
  }
  return out.toAttr();
}

LogicalResult ScatterNDOp::verify() {
  auto data = getData().getType(), idx = getIndices().getType(), upd = getUpdates().getType();
  if (failed(verifyOneOf(*this, "reduction", getReduction(), kScatterReductions)))
    return failure();
  if (!isIndexType(idx.getElementType()))
    return emitOpError("indices must be i32 or i64");
  if (idx.getRank() < 1 || data.getRank() < 1)
    return emitOpError("data and indices must have rank >= 1");
  int64_t m = idx.getShape().back();
  if (m < 1 || m > data.getRank())
    return emitOpError("the last dim of indices (") << m << ") must be in [1, " << data.getRank()
                                                    << "]";
  SmallVector<int64_t> want(idx.getShape().drop_back());
  llvm::append_range(want, data.getShape().drop_front(m));
  if (upd.getShape() != ArrayRef<int64_t>(want))
    return emitOpError("updates shape ") << dims(upd.getShape()) << ", expected " << dims(want);
  if (upd.getElementType() != data.getElementType())
    return emitOpError("updates and data differ in element type");
  return success();
}

//===----------------------------------------------------------------------===//
// OneHotOp
//===----------------------------------------------------------------------===//

LogicalResult OneHotOp::verify() {
  auto idx = getIndices().getType(), vals = getValues().getType();
  auto res = llvm::cast<RankedTensorType>(getType());
  if (!isIndexType(idx.getElementType()))
    return emitOpError("indices must be i32 or i64");
  if (vals.getRank() != 1 || vals.getDimSize(0) != 2)
    return emitOpError("values must be [off, on]: tensor<2xT>");
  if (res.getElementType() != vals.getElementType())
    return emitOpError("result element type must be the values' element type");
  if (res.getRank() != idx.getRank() + 1)
    return emitOpError("result rank must be the indices' rank + 1");
  int64_t axis = getAxis();
  if (axis < 0 || axis >= res.getRank())
    return emitOpError("axis ") << axis << " out of range for result rank " << res.getRank();
  for (int64_t d = 0, k = 0; d < res.getRank(); ++d) {
    if (d == axis)
      continue;
    if (res.getDimSize(d) != idx.getDimSize(k++))
      return emitOpError("result shape ") << dims(res.getShape()) << " is not indices "
                                          << dims(idx.getShape()) << " with a depth dim at "
                                          << axis;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// TopKOp
//===----------------------------------------------------------------------===//

LogicalResult TopKOp::verify() {
  auto x = getX().getType();
  auto vals = llvm::cast<RankedTensorType>(getValues().getType()),
       idx = llvm::cast<RankedTensorType>(getIndices().getType());
  int64_t axis = getAxis();
  if (axis < 0 || axis >= x.getRank())
    return emitOpError("axis ") << axis << " out of range for rank " << x.getRank();
  if (vals.getElementType() != x.getElementType())
    return emitOpError("values must keep the input's element type");
  if (!idx.getElementType().isInteger(64))
    return emitOpError("indices must be i64");
  if (vals.getShape() != idx.getShape())
    return emitOpError("values and indices differ in shape");
  if (vals.getRank() != x.getRank())
    return emitOpError("results must keep the input's rank");
  for (int64_t d = 0; d < x.getRank(); ++d) {
    if (d == axis ? vals.getDimSize(d) > x.getDimSize(d) : vals.getDimSize(d) != x.getDimSize(d))
      return emitOpError("result shape ") << dims(vals.getShape()) << " is not "
                                          << dims(x.getShape()) << " with k <= "
                                          << x.getDimSize(axis) << " at axis " << axis;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// PadOp
//===----------------------------------------------------------------------===//

LogicalResult PadOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  auto t = rankedOf(adaptor.getX());
  auto pads = adaptor.getPads();
  int64_t r = t.getRank();
  if (int64_t(pads.size()) != 2 * r)
    return emitOptionalError(loc, "pads has ", pads.size(), " entries for rank ", r,
                             " (needs 2 * rank)");
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < r; ++d) {
    int64_t n = t.getDimSize(d) + pads[d] + pads[d + r];
    if (n < 0)
      return emitOptionalError(loc, "pads crop dim ", d, " of size ", t.getDimSize(d),
                               " below zero");
    shape.push_back(n);
  }
  inferred.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

LogicalResult PadOp::verify() {
  if (failed(verifyOneOf(*this, "mode", getMode(), kPadModes)))
    return failure();
  auto t = getX().getType();
  if (Value v = getValue()) {
    auto vt = rankedOf(v);
    if (vt.getNumElements() != 1 || vt.getElementType() != t.getElementType())
      return emitOpError("value must be one element of the input's element type");
  }
  if (getMode() == "constant")
    return success();
  auto pads = getPads();
  for (int64_t d = 0; d < t.getRank(); ++d) {
    bool grows = pads[d] > 0 || pads[d + t.getRank()] > 0;
    if (grows && t.getDimSize(d) == 0)
      return emitOpError("mode '") << getMode() << "' cannot pad the empty dim " << d;
  }
  return success();
}

LogicalResult PadGradOp::verify() {
  if (failed(verifyOneOf(*this, "mode", getMode(), kPadModes)))
    return failure();
  auto dy = getDy().getType(), x = getType();
  if (!llvm::isa<FloatType>(dy.getElementType()) || x.getElementType() != dy.getElementType() ||
      x.getRank() != dy.getRank())
    return emitOpError("dy and the result must have one float element type and rank");
  int64_t r = x.getRank();
  auto pads = getPads();
  if (int64_t(pads.size()) != 2 * r)
    return emitOpError("pads has ") << pads.size() << " entries for rank " << r
                                    << " (needs 2 * rank)";
  for (int64_t d = 0; d < r; ++d)
    if (x.getDimSize(d) + pads[d] + pads[d + r] != dy.getDimSize(d))
      return emitOpError("dy of shape ") << dims(dy.getShape()) << " is not the result "
                                         << dims(x.getShape()) << " padded by these pads";
  return success();
}

// Vector-Jacobian product of pad (VJPOpInterface): every output position that copies an input
// element sends its cotangent back to that element (pad_grad). The constant `value` gets none.
LogicalResult PadOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                              SmallVectorImpl<Value> &og) {
  if (getValue() && needed[1])
    return emitOpError("has no gradient with respect to its padding value");
  if (needed[0])
    og[0] = PadGradOp::create(b, getLoc(), getX().getType(), resultGrads[0], getPadsAttr(),
                              getModeAttr());
  return success();
}

//===----------------------------------------------------------------------===//
// Vector-Jacobian products of cumsum, gather_elements and the scatters (VJPOpInterface)
//===----------------------------------------------------------------------===//

// y_j = Σ_{i ∈ W(j)} x_i with W(j) the prefix (suffix with `reverse`) before or at j. Its
// transpose sums dy over the j whose window holds i: the suffix (prefix) after or at i, with the
// same exclusivity.
LogicalResult CumSumOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool>,
                                 SmallVectorImpl<Value> &og) {
  og[0] = CumSumOp::create(b, getLoc(), resultGrads[0], getAxisAttr(), getExclusiveAttr(),
                           b.getBoolAttr(!getReverse()));
  return success();
}

/// A scatter_elements `add` of `g` into zeros shaped like `like`, at `indices` along `axis`: the
/// cotangent of an op that read `like`'s elements at those positions.
static Value scatterAddIntoZeros(OpBuilder &b, Location loc, Value like, Value indices, Value g,
                                 IntegerAttr axis) {
  Value zeros = splatConstant(b, loc, rankedOf(like), 0.0);
  return ScatterElementsOp::create(b, loc, zeros, indices, g, axis, b.getStringAttr("add"));
}

// Every output element reads one data element: its cotangent goes back there, and elements read
// several times sum their cotangents (torch.gather's backward, a scatter_add).
LogicalResult GatherElementsOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                         ArrayRef<bool> needed, SmallVectorImpl<Value> &og) {
  if (needed[0])
    og[0] = scatterAddIntoZeros(b, getLoc(), getData(), getIndices(), resultGrads[0], getAxisAttr());
  return success();
}

// GatherND reads each addressed slice; its cotangent goes back there, summing where a slice is
// read twice (scatter_nd add into zeros). With batch_dims the index tuples address inside each
// batch, which scatter_nd cannot write: not covered.
LogicalResult GatherNDOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                                   SmallVectorImpl<Value> &og) {
  if (!needed[0])
    return success();
  if (getBatchDims() != 0)
    return emitOpError("with batch_dims ") << getBatchDims()
           << " has no gradient yet (only batch_dims 0: a scatter_nd of the cotangent)";
  Location loc = getLoc();
  Value zeros = splatConstant(b, loc, rankedOf(getData()), 0.0);
  og[0] = ScatterNDOp::create(b, loc, zeros, getIndices(), resultGrads[0], b.getStringAttr("add"));
  return success();
}

// Each selected value came from one position of x along `axis` (distinct within a row): its
// cotangent goes back there (torch.topk's backward, an index_put into zeros).
LogicalResult TopKOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                               SmallVectorImpl<Value> &og) {
  if (needed[0] && resultGrads[0])
    og[0] = scatterAddIntoZeros(b, getLoc(), getX(), getIndices(), resultGrads[0], getAxisAttr());
  return success();
}

namespace {

/// How a scatter's VJP addresses its operands: `gather(t)` reads a data-shaped t at every update
/// position (updates' shape), `scatter(base, v, reduction)` writes an updates-shaped v into a
/// copy of a data-shaped base, with the scatter's own indices (and axis).
struct ScatterAccess {
  llvm::function_ref<Value(Value)> gather;
  llvm::function_ref<Value(Value, Value, StringRef)> scatter;
};

/// Operands data (0), indices (1), updates (2); `out` the forward result, `g` its cotangent.
/// Formulas as torch's scatter, scatter_add and scatter_reduce(include_self=True) backward
/// (torch/csrc/autograd/FunctionsManual.cpp), with j the data position update i writes:
///   none  ddata = g with zeros where an update was written   dupd_i = g_j
///   add   ddata = g                                          dupd_i = g_j
///   mul   ddata = g·Π_{i→j} upd_i                            dupd_i = g_j·data_j·Π_{i'→j, i'≠i} upd_i'
///         (the product of the others without dividing by a zero: zero updates are counted and
///         replaced by 1, as torch does)
///   max, min  the cotangent is shared evenly by data_j and the updates that equal out_j.
void scatterVJP(OpBuilder &b, Location loc, StringRef reduction, Value data, Value updates,
                Value out, Value g, ArrayRef<bool> needed, SmallVectorImpl<Value> &og,
                const ScatterAccess &at) {
  Type elt = rankedOf(data).getElementType();
  auto c = [&](double v) { return scalarConstant(b, loc, elt, v); };
  auto dataConst = [&](double v) { return splatConstant(b, loc, rankedOf(data), v); };
  auto mul = [&](Value p, Value q) -> Value { return MulOp::create(b, loc, p, q); };
  auto select = [&](Value cond, Value p, Value q) -> Value {
    return WhereOp::create(b, loc, cond, p, q);
  };
  auto equal = [&](Value p, Value q) -> Value { return EqualOp::create(b, loc, p, q); };
  auto indicator = [&](Value cond) { return select(cond, c(1), c(0)); };

  if (reduction == "none" || reduction == "add") {
    if (needed[0])
      og[0] = reduction == "add"
                  ? g
                  : at.scatter(g, splatConstant(b, loc, rankedOf(updates), 0.0), "none");
    if (needed[2])
      og[2] = at.gather(g);
    return;
  }
  if (reduction == "mul") {
    if (needed[0])
      og[0] = mul(g, at.scatter(dataConst(1), updates, "mul"));
    if (needed[2]) {
      Value isZero = equal(updates, c(0));
      Value safe = select(isZero, c(1), updates);
      Value nonzeroProduct = at.scatter(dataConst(1), safe, "mul");
      Value zerosAt = at.gather(at.scatter(dataConst(0), indicator(isZero), "add"));
      Value gdp = at.gather(mul(g, mul(data, nonzeroProduct)));
      Value ifNonzero = select(equal(zerosAt, c(0)), DivOp::create(b, loc, gdp, safe), c(0));
      Value ifZero = select(equal(zerosAt, c(1)), gdp, c(0));
      og[2] = select(isZero, ifZero, ifNonzero);
    }
    return;
  }
  // max / min
  Value dataWins = equal(data, out);
  Value updWins = equal(updates, at.gather(out));
  Value ties = AddOp::create(b, loc, indicator(dataWins),
                             at.scatter(dataConst(0), indicator(updWins), "add"));
  Value share = DivOp::create(b, loc, g, ties);
  if (needed[0])
    og[0] = select(dataWins, share, c(0));
  if (needed[2])
    og[2] = select(updWins, at.gather(share), c(0));
}

/// The first data position (row-major offset) two index entries write, or nullopt when the
/// indices are not a constant or all positions differ. `target(k, idx)` gives entry k's offset.
template <typename TargetFn>
std::optional<SmallVector<int64_t>> duplicateTarget(Value indices, RankedTensorType data,
                                                    int64_t entries, TargetFn target) {
  Attribute attr;
  if (!matchPattern(indices, m_Constant(&attr)))
    return std::nullopt;
  auto idx = HostTensor::from(attr);
  if (!idx)
    return std::nullopt;
  llvm::DenseSet<int64_t> seen;
  for (int64_t k = 0; k < entries; ++k) {
    std::optional<int64_t> off = target(k, *idx);
    if (!off)
      return std::nullopt; // out of range: the runtime reports it
    if (!seen.insert(*off).second) {
      SmallVector<int64_t> pos;
      unflatten(*off, data.getShape(), pos);
      return pos;
    }
  }
  return std::nullopt;
}

LogicalResult duplicateNoneError(Operation *op, ArrayRef<int64_t> pos) {
  std::string at;
  for (int64_t p : pos)
    at += (at.empty() ? "" : ", ") + std::to_string(p);
  return op->emitOpError("with reduction 'none' writes data position [")
         << at << "] from more than one update (duplicate indices, undefined in ONNX), so "
         << "its updates have no gradient; use distinct indices or a reduction such as 'add'";
}

} // namespace

LogicalResult ScatterElementsOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                          ArrayRef<bool> needed, SmallVectorImpl<Value> &og) {
  Location loc = getLoc();
  auto data = rankedOf(getData());
  auto idxType = rankedOf(getIndices());
  int64_t axis = getAxis(), n = data.getDimSize(axis);
  if (getReduction() == "none" && needed[2]) {
    auto dStrides = stridesOf(data.getShape());
    SmallVector<int64_t> pos;
    auto dup = duplicateTarget(getIndices(), data, idxType.getNumElements(),
                               [&](int64_t k, const HostTensor &idx) -> std::optional<int64_t> {
                                 int64_t v = idx.i[k];
                                 if (v < -n || v >= n)
                                   return std::nullopt;
                                 unflatten(k, idxType.getShape(), pos);
                                 pos[axis] = v < 0 ? v + n : v;
                                 int64_t off = 0;
                                 for (size_t d = 0; d < pos.size(); ++d)
                                   off += pos[d] * dStrides[d];
                                 return off;
                               });
    if (dup)
      return duplicateNoneError(*this, *dup);
  }
  auto gather = [&](Value t) -> Value {
    return GatherElementsOp::create(b, loc, t, getIndices(), getAxisAttr());
  };
  auto scatter = [&](Value base, Value v, StringRef red) -> Value {
    return ScatterElementsOp::create(b, loc, base, getIndices(), v, getAxisAttr(),
                                     b.getStringAttr(red));
  };
  scatterVJP(b, loc, getReduction(), getData(), getUpdates(), getResult(), resultGrads[0], needed,
             og, ScatterAccess{gather, scatter});
  return success();
}

LogicalResult ScatterNDOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &og) {
  Location loc = getLoc();
  auto data = rankedOf(getData());
  auto idxType = rankedOf(getIndices());
  int64_t m = idxType.getShape().back();
  if (getReduction() == "none" && needed[2]) {
    // Index tuple k writes the slice at data[tuple, :...]; its first element stands for it.
    auto dStrides = stridesOf(data.getShape());
    auto dup = duplicateTarget(getIndices(), data, m ? idxType.getNumElements() / m : 0,
                               [&](int64_t k, const HostTensor &idx) -> std::optional<int64_t> {
                                 int64_t off = 0;
                                 for (int64_t j = 0; j < m; ++j) {
                                   int64_t v = idx.i[k * m + j], n = data.getDimSize(j);
                                   if (v < -n || v >= n)
                                     return std::nullopt;
                                   off += (v < 0 ? v + n : v) * dStrides[j];
                                 }
                                 return off;
                               });
    if (dup)
      return duplicateNoneError(*this, *dup);
  }
  auto gather = [&](Value t) -> Value {
    return GatherNDOp::create(b, loc, t, getIndices(), b.getI64IntegerAttr(0));
  };
  auto scatter = [&](Value base, Value v, StringRef red) -> Value {
    return ScatterNDOp::create(b, loc, base, getIndices(), v, b.getStringAttr(red));
  };
  scatterVJP(b, loc, getReduction(), getData(), getUpdates(), getResult(), resultGrads[0], needed,
             og, ScatterAccess{gather, scatter});
  return success();
}

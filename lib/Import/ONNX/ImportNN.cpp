//===- ImportNN.cpp - ONNX neural-network layers, losses and quantization --===//
//
// Conv, ConvTranspose, ConvInteger, the pools, Resize/Upsample, the losses and the quantization
// operators, for every attribute form of opsets 7..21 (https://onnx.ai/onnx/operators/).
//
// Ops with a kernel of their own import to the ops of ColossalNNOps.td. The normalizations
// (BatchNormalization, InstanceNormalization, GroupNormalization, LpNormalization,
// MeanVarianceNormalization), the global pools and SoftmaxCrossEntropyLoss are decomposed here into
// reductions and elementwise ops (log_softmax + nll_loss for the loss): their math is a handful of
// reductions, and the decomposition keeps the kernel set (and later the VJP set) small.
// QLinearMatMul and QLinearConv are an integer op followed by a float rescale and quantize_linear.
//===----------------------------------------------------------------------===//
#include "ImporterImpl.h"

#include <cmath>

using namespace mlir;

namespace colossal::onnx_import {
namespace {

using Ctx = NodeContext;


LogicalResult requireFloatInput(Ctx &c, size_t i) {
  if (!llvm::isa<FloatType>(c.typeOf(i).getElementType()))
    return c.error("input " + Twine(i) + " has element type " + typeStr(c.typeOf(i).getElementType()) +
                   "; only floating-point types are supported here");
  return success();
}

/// A scalar constant of element type `et` (float or integer).
Value scalar(Ctx &c, Type et, double v) {
  auto t = RankedTensorType::get({}, et);
  if (llvm::isa<FloatType>(et))
    return c.constant(DenseElementsAttr::get(t, c.b.getFloatAttr(et, v)));
  return c.constant(DenseElementsAttr::get(t, c.b.getIntegerAttr(et, int64_t(v))));
}

/// Like NodeContext::make for ops with several results: infers every result type.
template <typename OpTy, typename... Args>
FailureOr<SmallVector<Value>> makeInferred(Ctx &c, Args &&...args) {
  OperationState state(c.loc, OpTy::getOperationName());
  OpTy::build(c.b, state, TypeRange{}, args...);
  SmallVector<Type> types;
  std::string diag;
  {
    ScopedDiagnosticHandler handler(c.ctx(), [&](Diagnostic &d) {
      if (diag.empty())
        diag = d.str();
      return success();
    });
    if (failed(OpTy::inferReturnTypes(c.ctx(), c.loc, state.operands,
                                      state.attributes.getDictionary(c.ctx()),
                                      state.getRawProperties(), state.regions, types)))
      return FailureOr<SmallVector<Value>>(c.error(diag.empty() ? "invalid operands" : diag));
  }
  return c.makeTyped<OpTy>(TypeRange(types), std::forward<Args>(args)...);
}

template <typename OpTy> FailureOr<Value> bin(Ctx &c, Value a, Value b) {
  return c.make<OpTy>(a, b);
}

template <typename OpTy> FailureOr<Value> un(Ctx &c, Value a) {
  return c.makeTyped1<OpTy>(a.getType(), a);
}

/// Casts `v` to element type `et` (no-op when it already has it).
FailureOr<Value> castTo(Ctx &c, Value v, Type et) {
  auto t = llvm::cast<RankedTensorType>(v.getType());
  if (t.getElementType() == et)
    return v;
  return c.makeTyped1<CastOp>(t.clone(et), v);
}

/// Reshapes a per-channel vector [C] to [C, 1, ..., 1] so it broadcasts against [N, C, D...].
FailureOr<Value> perChannel(Ctx &c, Value v, int64_t rank) {
  auto t = llvm::cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape{t.getNumElements()};
  shape.append(std::max<int64_t>(rank - 2, 0), 1);
  return c.reshape(v, shape);
}

SmallVector<int64_t> range(int64_t begin, int64_t end) {
  SmallVector<int64_t> r;
  for (int64_t i = begin; i < end; ++i)
    r.push_back(i);
  return r;
}

template <typename OpTy>
FailureOr<Value> reduce(Ctx &c, Value x, ArrayRef<int64_t> axes, bool keepdims = true) {
  return c.make<OpTy>(x, c.b.getDenseI64ArrayAttr(axes), c.b.getBoolAttr(keepdims));
}

/// (x − mean) / sqrt(var + eps) over `axes` (biased variance, two passes), optionally also
/// returning the mean and variance (keepdims).
FailureOr<Value> normalize(Ctx &c, Value x, ArrayRef<int64_t> axes, double eps,
                           Value *meanOut = nullptr, Value *varOut = nullptr) {
  Type et = llvm::cast<RankedTensorType>(x.getType()).getElementType();
  auto mean = reduce<ReduceMeanOp>(c, x, axes);
  if (failed(mean))
    return failure();
  auto centred = bin<SubOp>(c, x, *mean);
  if (failed(centred))
    return failure();
  auto sq = bin<MulOp>(c, *centred, *centred);
  if (failed(sq))
    return failure();
  auto var = reduce<ReduceMeanOp>(c, *sq, axes);
  if (failed(var))
    return failure();
  auto veps = bin<AddOp>(c, *var, scalar(c, et, eps));
  if (failed(veps))
    return failure();
  auto sd = un<SqrtOp>(c, *veps);
  if (failed(sd))
    return failure();
  if (meanOut)
    *meanOut = *mean;
  if (varOut)
    *varOut = *var;
  return bin<DivOp>(c, *centred, *sd);
}

//===----------------------------------------------------------------------===//
// Window attributes (conv and pools)
//===----------------------------------------------------------------------===//

struct Window {
  SmallVector<int64_t> kernel, strides, pads, dilations;
};

/// Reads strides, dilations, pads and auto_pad for `n` spatial dims of `x` with kernel `kernel`.
/// SAME_UPPER/SAME_LOWER pad so that O = ceil(D / stride), the odd cell at the end (UPPER) or the
/// Attribute `name` as exactly `count` ints, or `count` copies of `dflt` when absent.
LogicalResult readIntsAttr(Ctx &c, StringRef name, int64_t count, int64_t dflt,
                           SmallVectorImpl<int64_t> &out) {
  if (auto v = c.attrInts(name)) {
    if (int64_t(v->size()) != count)
      return c.error("attribute '" + name + "' has " + Twine(v->size()) + " entries, expected " +
                     Twine(count));
    out.assign(v->begin(), v->end());
  } else {
    out.assign(count, dflt);
  }
  return success();
}

/// beginning (LOWER); VALID pads nothing.
FailureOr<Window> readWindow(Ctx &c, RankedTensorType x, ArrayRef<int64_t> kernel,
                             bool hasDilations = true) {
  int64_t n = x.getRank() - 2;
  Window w;
  w.kernel.assign(kernel.begin(), kernel.end());
  auto ints = [&](StringRef name, int64_t count, int64_t dflt, SmallVectorImpl<int64_t> &out) {
    return readIntsAttr(c, name, count, dflt, out);
  };
  if (failed(ints("strides", n, 1, w.strides)) || failed(ints("pads", 2 * n, 0, w.pads)))
    return failure();
  if (hasDilations) {
    if (failed(ints("dilations", n, 1, w.dilations)))
      return failure();
  } else {
    if (c.attr("dilations"))
      return c.error("attribute 'dilations' is not defined before this opset");
    w.dilations.assign(n, 1);
  }
  for (int64_t i = 0; i < n; ++i)
    if (w.strides[i] < 1 || w.dilations[i] < 1 || w.kernel[i] < 1)
      return c.error("kernel sizes, strides and dilations must be positive");
  std::string autoPad = c.attrString("auto_pad", "NOTSET");
  if (autoPad == "VALID") {
    w.pads.assign(2 * n, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (int64_t i = 0; i < n; ++i) {
      int64_t in = x.getDimSize(2 + i), s = w.strides[i];
      int64_t out = (in + s - 1) / s;
      int64_t total =
          std::max<int64_t>(0, (out - 1) * s + (w.kernel[i] - 1) * w.dilations[i] + 1 - in);
      int64_t small = total / 2, large = total - small;
      w.pads[i] = autoPad == "SAME_UPPER" ? small : large;
      w.pads[n + i] = autoPad == "SAME_UPPER" ? large : small;
    }
  } else if (autoPad != "NOTSET") {
    return c.error("unknown auto_pad '" + autoPad + "'");
  }
  for (int64_t p : w.pads)
    if (p < 0)
      return c.error("negative pads are not supported");
  return w;
}

/// kernel_shape from the attribute, checked against the weight's spatial dims when both exist.
FailureOr<SmallVector<int64_t>> kernelShape(Ctx &c, RankedTensorType w, int64_t n) {
  SmallVector<int64_t> k(w.getShape().drop_front(2));
  if (auto a = c.attrInts("kernel_shape")) {
    if (int64_t(a->size()) != n || ArrayRef<int64_t>(*a) != ArrayRef<int64_t>(k))
      return FailureOr<SmallVector<int64_t>>(
          c.error("kernel_shape does not match the weight's spatial dims"));
  }
  return k;
}

LogicalResult checkSpatialRank(Ctx &c, RankedTensorType x) {
  if (x.getRank() < 3 || x.getRank() > 5)
    return c.error("input must be [N, C, D1..Dn] with 1 to 3 spatial dims; rank " +
                   Twine(x.getRank()) + " is not supported");
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

LogicalResult importConv(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0), w = c.typeOf(1);
  if (failed(checkSpatialRank(c, x)))
    return failure();
  if (w.getRank() != x.getRank())
    return c.error("weight rank differs from the input's");
  auto k = kernelShape(c, w, x.getRank() - 2);
  if (failed(k))
    return failure();
  auto win = readWindow(c, x, *k);
  if (failed(win))
    return failure();
  return setOut(c, c.make<ConvOp>(c.in[0], c.in[1], c.has(2) ? c.in[2] : Value(),
                                  c.b.getDenseI64ArrayAttr(win->strides),
                                  c.b.getDenseI64ArrayAttr(win->pads),
                                  c.b.getDenseI64ArrayAttr(win->dilations),
                                  c.b.getI64IntegerAttr(c.attrInt("group", 1)),
                                  /*activation=*/StringAttr(), /*activation_alpha=*/FloatAttr(),
                                  /*activation_beta=*/FloatAttr(), /*output_scale=*/FloatAttr(),
                                  /*output_shift=*/FloatAttr()));
}

LogicalResult importConvTranspose(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0), w = c.typeOf(1);
  if (failed(checkSpatialRank(c, x)))
    return failure();
  if (w.getRank() != x.getRank())
    return c.error("weight rank differs from the input's");
  int64_t n = x.getRank() - 2;
  auto k = kernelShape(c, w, n);
  if (failed(k))
    return failure();
  // Strides, dilations and explicit pads; auto_pad and output_shape are resolved below.
  Window win;
  win.kernel = *k;
  auto ints = [&](StringRef name, int64_t count, int64_t dflt, SmallVectorImpl<int64_t> &out) {
    return readIntsAttr(c, name, count, dflt, out);
  };
  SmallVector<int64_t> outPad;
  if (failed(ints("strides", n, 1, win.strides)) || failed(ints("pads", 2 * n, 0, win.pads)) ||
      failed(ints("dilations", n, 1, win.dilations)) ||
      failed(ints("output_padding", n, 0, outPad)))
    return failure();
  std::string autoPad = c.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" &&
      autoPad != "SAME_LOWER")
    return c.error("unknown auto_pad '" + autoPad + "'");
  std::optional<SmallVector<int64_t>> outShape = c.attrInts("output_shape");
  if (outShape) {
    if (int64_t(outShape->size()) == n + 2)
      outShape->erase(outShape->begin(), outShape->begin() + 2);
    if (int64_t(outShape->size()) != n)
      return c.error("output_shape must have " + Twine(n) + " entries");
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    outShape = SmallVector<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      outShape->push_back(x.getDimSize(2 + i) * win.strides[i]);
  }
  if (autoPad == "VALID" && !outShape)
    win.pads.assign(2 * n, 0);
  if (outShape) {
    // total = full output − requested output, split as the spec says (the odd cell at the
    // beginning unless SAME_UPPER); a requested output larger than the full one grows the end.
    for (int64_t i = 0; i < n; ++i) {
      int64_t full = win.strides[i] * (x.getDimSize(2 + i) - 1) + outPad[i] +
                     (win.kernel[i] - 1) * win.dilations[i] + 1;
      int64_t total = full - (*outShape)[i];
      if (total < 0) {
        win.pads[i] = win.pads[n + i] = 0;
        outPad[i] -= total;
        continue;
      }
      int64_t half = total / 2;
      win.pads[i] = autoPad == "SAME_UPPER" ? half : total - half;
      win.pads[n + i] = total - win.pads[i];
    }
  }
  for (int64_t p : win.pads)
    if (p < 0)
      return c.error("negative pads are not supported");
  return setOut(c, c.make<ConvTransposeOp>(
                       c.in[0], c.in[1], c.has(2) ? c.in[2] : Value(),
                       c.b.getDenseI64ArrayAttr(win.strides), c.b.getDenseI64ArrayAttr(win.pads),
                       c.b.getDenseI64ArrayAttr(win.dilations), c.b.getDenseI64ArrayAttr(outPad),
                       c.b.getI64IntegerAttr(c.attrInt("group", 1)), /*activation=*/StringAttr(),
                       /*activation_alpha=*/FloatAttr(), /*activation_beta=*/FloatAttr(),
                       /*output_scale=*/FloatAttr(), /*output_shift=*/FloatAttr()));
}

/// Zero point input `i`, or a zero scalar of `et` when absent.
Value zeroPointOr(Ctx &c, size_t i, Type et) { return c.has(i) ? c.in[i] : scalar(c, et, 0); }

LogicalResult requireQuant(Ctx &c, size_t i) {
  auto it = llvm::dyn_cast<IntegerType>(c.typeOf(i).getElementType());
  if (!it || it.getWidth() != 8)
    return c.error("input " + Twine(i) + " has element type " + typeStr(c.typeOf(i).getElementType()) +
                   "; expected uint8 or int8");
  return success();
}

FailureOr<Value> convInteger(Ctx &c, Value x, Value w, Value xzp, Value wzp) {
  auto xt = llvm::cast<RankedTensorType>(x.getType()), wt = llvm::cast<RankedTensorType>(w.getType());
  if (failed(checkSpatialRank(c, xt)))
    return failure();
  if (wt.getRank() != xt.getRank())
    return FailureOr<Value>(c.error("weight rank differs from the input's"));
  auto k = kernelShape(c, wt, xt.getRank() - 2);
  if (failed(k))
    return failure();
  auto win = readWindow(c, xt, *k);
  if (failed(win))
    return failure();
  return c.make<ConvIntegerOp>(x, w, xzp, wzp, c.b.getDenseI64ArrayAttr(win->strides),
                               c.b.getDenseI64ArrayAttr(win->pads),
                               c.b.getDenseI64ArrayAttr(win->dilations),
                               c.b.getI64IntegerAttr(c.attrInt("group", 1)));
}

LogicalResult importConvInteger(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireQuant(c, 0)) || failed(requireQuant(c, 1)))
    return failure();
  return setOut(c, convInteger(c, c.in[0], c.in[1], zeroPointOr(c, 2, c.typeOf(0).getElementType()),
                               zeroPointOr(c, 3, c.typeOf(1).getElementType())));
}

/// MatMulInteger on operands of rank >= 1 (1-D operands are promoted like MatMul's).
FailureOr<Value> matmulInteger(Ctx &c, Value a, Value b, Value azp, Value bzp) {
  auto at = llvm::cast<RankedTensorType>(a.getType()), bt = llvm::cast<RankedTensorType>(b.getType());
  if (at.getRank() == 0 || bt.getRank() == 0)
    return FailureOr<Value>(c.error("operands must have rank >= 1"));
  bool aVec = at.getRank() == 1, bVec = bt.getRank() == 1;
  if (aVec) {
    auto r = c.reshape(a, {1, at.getDimSize(0)});
    if (failed(r))
      return failure();
    a = *r;
  }
  if (bVec) {
    auto r = c.reshape(b, {bt.getDimSize(0), 1});
    if (failed(r))
      return failure();
    b = *r;
  }
  // A per-row a_zero_point [M] or per-column b_zero_point [N] keeps its shape; scalars become [].
  auto mm = c.make<MatMulIntegerOp>(a, b, azp, bzp);
  if (failed(mm) || (!aVec && !bVec))
    return mm;
  SmallVector<int64_t> shape(llvm::cast<RankedTensorType>(mm->getType()).getShape());
  if (bVec)
    shape.pop_back();
  if (aVec)
    shape.erase(shape.end() - (bVec ? 1 : 2));
  return c.reshape(*mm, shape);
}

LogicalResult importMatMulInteger(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireQuant(c, 0)) || failed(requireQuant(c, 1)))
    return failure();
  return setOut(c, matmulInteger(c, c.in[0], c.in[1],
                                 zeroPointOr(c, 2, c.typeOf(0).getElementType()),
                                 zeroPointOr(c, 3, c.typeOf(1).getElementType())));
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

LogicalResult importPool(Ctx &c, StringRef kind) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto x = c.typeOf(0);
  if (failed(checkSpatialRank(c, x)))
    return failure();
  if (kind != "max" && failed(requireFloatInput(c, 0)))
    return failure();
  auto k = c.attrInts("kernel_shape");
  if (!k)
    return c.error("missing required attribute 'kernel_shape'");
  if (int64_t(k->size()) != x.getRank() - 2)
    return c.error("kernel_shape has " + Twine(k->size()) + " entries for " +
                   Twine(x.getRank() - 2) + " spatial dims");
  // dilations: MaxPool from opset 10, AveragePool from 19, LpPool from 18.
  int64_t dilSince = kind == "max" ? 10 : kind == "avg" ? 19 : 18;
  auto win = readWindow(c, x, *k, c.opset >= dilSince);
  if (failed(win))
    return failure();
  // A pad as large as the (dilated) window would make windows that see only padding.
  for (size_t i = 0; i < k->size(); ++i) {
    int64_t extent = ((*k)[i] - 1) * win->dilations[i] + 1;
    if (win->pads[i] >= extent || win->pads[k->size() + i] >= extent)
      return c.error("pads must be smaller than the kernel extent (" + Twine(extent) +
                     ") in spatial dim " + Twine(i));
  }
  bool ceilMode = c.attrInt("ceil_mode", 0) != 0;
  auto ka = c.b.getDenseI64ArrayAttr(win->kernel), sa = c.b.getDenseI64ArrayAttr(win->strides),
       pa = c.b.getDenseI64ArrayAttr(win->pads), da = c.b.getDenseI64ArrayAttr(win->dilations);
  auto ca = c.b.getBoolAttr(ceilMode);
  if (kind == "max" && c.outputUsed(1)) {
    auto r = makeInferred<MaxPoolWithIndicesOp>(c, c.in[0], ka, sa, pa, da, ca,
                                                c.b.getI64IntegerAttr(c.attrInt("storage_order", 0)));
    if (failed(r))
      return failure();
    c.out.append(r->begin(), r->end());
    return success();
  }
  return setOut(c, c.make<PoolOp>(c.in[0], c.b.getStringAttr(kind), ka, sa, pa, da, ca,
                                  c.b.getBoolAttr(c.attrInt("count_include_pad", 0) != 0),
                                  c.b.getI64IntegerAttr(c.attrInt("p", 2))));
}

/// GlobalAveragePool, GlobalMaxPool, GlobalLpPool: a reduction over every spatial dim (keepdims).
LogicalResult importGlobalPool(Ctx &c, StringRef kind) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto x = c.typeOf(0);
  if (x.getRank() < 3)
    return c.error("input must be [N, C, D1..Dn]");
  if (failed(requireFloatInput(c, 0)))
    return failure();
  auto axes = range(2, x.getRank());
  if (kind == "avg")
    return setOut(c, reduce<ReduceMeanOp>(c, c.in[0], axes));
  if (kind == "max")
    return setOut(c, reduce<ReduceMaxOp>(c, c.in[0], axes));
  // (Σ |x|^p)^(1/p); before opset 2 p was a float, since then an int.
  double p = double(c.attrInt("p", 2));
  Type et = x.getElementType();
  auto ax = un<AbsOp>(c, c.in[0]);
  if (failed(ax))
    return failure();
  auto powp = bin<PowOp>(c, *ax, scalar(c, et, p));
  if (failed(powp))
    return failure();
  auto s = reduce<ReduceSumOp>(c, *powp, axes);
  if (failed(s))
    return failure();
  return setOut(c, bin<PowOp>(c, *s, scalar(c, et, 1.0 / p)));
}

LogicalResult importMaxUnpool(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto x = c.typeOf(0);
  if (failed(checkSpatialRank(c, x)))
    return failure();
  auto k = c.attrInts("kernel_shape");
  if (!k || int64_t(k->size()) != x.getRank() - 2)
    return c.error("kernel_shape must have one entry per spatial dim");
  auto win = readWindow(c, x, *k, /*hasDilations=*/false);
  if (failed(win))
    return failure();
  int64_t n = x.getRank() - 2;
  SmallVector<int64_t> defaultShape{x.getDimSize(0), x.getDimSize(1)};
  for (int64_t i = 0; i < n; ++i)
    defaultShape.push_back((x.getDimSize(2 + i) - 1) * win->strides[i] + (*k)[i] - win->pads[i] -
                           win->pads[n + i]);
  SmallVector<int64_t> shape = defaultShape;
  if (c.has(2)) {
    auto s = c.constInts(2, "output_shape");
    if (failed(s))
      return failure();
    shape = *s;
    if (shape.size() != size_t(x.getRank()))
      return c.error("output_shape must have " + Twine(x.getRank()) + " entries");
    for (int64_t d = 0; d < x.getRank(); ++d)
      if (shape[d] < defaultShape[d])
        return c.error("output_shape is smaller than the unpooled shape");
  }
  Value idx = c.in[1];
  auto i64 = castTo(c, idx, c.b.getI64Type());
  if (failed(i64))
    return failure();
  return setOut(c, c.makeTyped1<MaxUnpoolOp>(RankedTensorType::get(shape, x.getElementType()),
                                             c.in[0], *i64,
                                             c.b.getDenseI64ArrayAttr(defaultShape)));
}

//===----------------------------------------------------------------------===//
// Normalization (decomposed)
//===----------------------------------------------------------------------===//

LogicalResult importBatchNorm(Ctx &c) {
  if (failed(c.requireInputs(5)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0);
  if (x.getRank() < 2)
    return c.error("input must be [N, C, ...]");
  Type et = x.getElementType();
  int64_t rank = x.getRank();
  if (c.opset < 7 && c.attrInt("is_test", 0) == 0)
    return c.error("is_test = 0 (training) is not supported");
  if (c.opset < 9 && c.attrInt("spatial", 1) == 0)
    return c.error("spatial = 0 (per-activation statistics) is not supported");
  double eps = c.attrFloat("epsilon", 1e-5f);
  bool training = c.opset >= 14 && c.attrInt("training_mode", 0) != 0;
  if (!training && c.opset < 14) {
    for (size_t i = 1; i < c.numOutputs(); ++i)
      if (c.outputUsed(i))
        return c.error("training outputs (mean, var, saved_mean, saved_var) are not supported");
  }
  SmallVector<Value> p; // scale, bias, mean, var as [C, 1, ..., 1] of x's type
  for (size_t i = 1; i < 5; ++i) {
    if (c.typeOf(i).getNumElements() != x.getDimSize(1))
      return c.error("input " + Twine(i) + " must have " + Twine(x.getDimSize(1)) + " elements");
    auto v = castTo(c, c.in[i], et);
    if (failed(v))
      return failure();
    auto r = perChannel(c, *v, rank);
    if (failed(r))
      return failure();
    p.push_back(*r);
  }
  SmallVector<int64_t> axes{0};
  llvm::append_range(axes, range(2, rank));
  Value normalized;
  Value batchMean, batchVar;
  if (training) {
    auto nrm = normalize(c, c.in[0], axes, eps, &batchMean, &batchVar);
    if (failed(nrm))
      return failure();
    normalized = *nrm;
  } else {
    auto centred = bin<SubOp>(c, c.in[0], p[2]);
    if (failed(centred))
      return failure();
    auto veps = bin<AddOp>(c, p[3], scalar(c, et, eps));
    if (failed(veps))
      return failure();
    auto sd = un<SqrtOp>(c, *veps);
    if (failed(sd))
      return failure();
    auto nrm = bin<DivOp>(c, *centred, *sd);
    if (failed(nrm))
      return failure();
    normalized = *nrm;
  }
  auto scaled = bin<MulOp>(c, normalized, p[0]);
  if (failed(scaled))
    return failure();
  if (failed(setOut(c, bin<AddOp>(c, *scaled, p[1]))))
    return failure();
  if (!training)
    return success();
  // running = input · momentum + batch · (1 − momentum), shaped like the inputs.
  double momentum = c.attrFloat("momentum", 0.9f);
  if (c.runningStatsAreBuffers) {
    // Train mode: the buffers follow torch.nn.BatchNorm2d, whose momentum m is the complement of
    // ONNX's (torch exports 1 − m; ONNX's default 0.9 is torch's 0.1): running ← (1 − m)·running
    // + m·batch, the variance unbiased (·n/(n − 1), n the elements per channel of the batch).
    // The attribute is a float32 (torch's 0.1 arrives as 0.9f = 0.89999997...): m is the shortest
    // decimal whose complement rounds to it, so torch's momentum comes back exactly.
    double m = 1.0 - momentum;
    for (int digits = 1; digits <= 9; ++digits) {
      const double scale = std::pow(10.0, digits), nice = std::round(m * scale) / scale;
      if (static_cast<float>(1.0 - nice) == static_cast<float>(momentum)) {
        m = nice;
        break;
      }
    }
    const int64_t n = x.getNumElements() / x.getDimSize(1);
    for (int k = 0; k < 2; ++k) {
      RankedTensorType st = c.typeOf(3 + k);
      auto flat = c.reshape(k == 0 ? batchMean : batchVar, st.getShape());
      if (failed(flat))
        return failure();
      auto batch = castTo(c, *flat, st.getElementType());
      if (failed(batch))
        return failure();
      double w = k == 0 || n < 2 ? m : m * double(n) / double(n - 1);
      auto a = bin<MulOp>(c, c.in[3 + k], scalar(c, st.getElementType(), 1.0 - m));
      auto bt = bin<MulOp>(c, *batch, scalar(c, st.getElementType(), w));
      if (failed(a) || failed(bt))
        return failure();
      auto next = bin<AddOp>(c, *a, *bt);
      if (failed(next))
        return failure();
      UpdateBufferOp::create(c.b, c.loc, c.in[3 + k], *next);
    }
  }
  for (int k = 0; k < 2; ++k) {
    if (!c.outputUsed(1 + k)) {
      c.out.push_back(Value());
      continue;
    }
    Value batch = k == 0 ? batchMean : batchVar;
    auto flat = c.reshape(batch, c.typeOf(3 + k).getShape());
    if (failed(flat))
      return failure();
    auto cast = castTo(c, *flat, c.typeOf(3 + k).getElementType());
    if (failed(cast))
      return failure();
    Type pt = c.typeOf(3 + k).getElementType();
    auto a = bin<MulOp>(c, c.in[3 + k], scalar(c, pt, momentum));
    auto b = bin<MulOp>(c, *cast, scalar(c, pt, 1.0 - momentum));
    if (failed(a) || failed(b))
      return failure();
    if (failed(setOut(c, bin<AddOp>(c, *a, *b))))
      return failure();
  }
  return success();
}

LogicalResult importInstanceNorm(Ctx &c) {
  if (failed(c.requireInputs(3)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0);
  if (x.getRank() < 3)
    return c.error("input must be [N, C, D1..Dn]");
  Type et = x.getElementType();
  auto nrm = normalize(c, c.in[0], range(2, x.getRank()), c.attrFloat("epsilon", 1e-5f));
  if (failed(nrm))
    return failure();
  SmallVector<Value> p;
  for (size_t i = 1; i < 3; ++i) {
    if (c.typeOf(i).getNumElements() != x.getDimSize(1))
      return c.error("input " + Twine(i) + " must have " + Twine(x.getDimSize(1)) + " elements");
    auto v = castTo(c, c.in[i], et);
    if (failed(v))
      return failure();
    auto r = perChannel(c, *v, x.getRank());
    if (failed(r))
      return failure();
    p.push_back(*r);
  }
  auto scaled = bin<MulOp>(c, *nrm, p[0]);
  if (failed(scaled))
    return failure();
  return setOut(c, bin<AddOp>(c, *scaled, p[1]));
}

LogicalResult importGroupNorm(Ctx &c) {
  if (failed(c.requireInputs(3)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0);
  if (x.getRank() < 2)
    return c.error("input must be [N, C, ...]");
  const auto *g = c.attr("num_groups");
  if (!g)
    return c.error("missing required attribute 'num_groups'");
  int64_t groups = g->i(), C = x.getDimSize(1);
  if (groups < 1 || C % groups != 0)
    return c.error("num_groups " + Twine(groups) + " must divide the " + Twine(C) + " channels");
  Type et = x.getElementType();
  // Opset 18: scale and bias per group; opset 21: per channel.
  int64_t perParam = c.opset >= 21 ? C : groups;
  for (size_t i = 1; i < 3; ++i)
    if (c.typeOf(i).getNumElements() != perParam)
      return c.error("input " + Twine(i) + " must have " + Twine(perParam) + " elements");
  auto grouped = c.reshape(c.in[0], {x.getDimSize(0), groups, x.getNumElements() /
                                                               std::max<int64_t>(1, x.getDimSize(0) * groups)});
  if (failed(grouped))
    return failure();
  auto nrm = normalize(c, *grouped, {2}, c.attrFloat("epsilon", 1e-5f));
  if (failed(nrm))
    return failure();
  Value y = *nrm;
  int64_t paramRank = 3;
  if (c.opset >= 21) {
    auto back = c.reshape(y, x.getShape());
    if (failed(back))
      return failure();
    y = *back;
    paramRank = x.getRank();
  }
  for (size_t i = 1; i < 3; ++i) {
    auto v = castTo(c, c.in[i], et);
    if (failed(v))
      return failure();
    auto r = perChannel(c, *v, paramRank);
    if (failed(r))
      return failure();
    auto next = i == 1 ? bin<MulOp>(c, y, *r) : bin<AddOp>(c, y, *r);
    if (failed(next))
      return failure();
    y = *next;
  }
  return setOut(c, c.reshape(y, x.getShape()));
}

LogicalResult importLpNorm(Ctx &c) {
  if (failed(c.requireInputs(1)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0);
  auto axis = c.normAxis(c.attrInt("axis", -1), x.getRank());
  if (failed(axis))
    return failure();
  int64_t p = c.attrInt("p", 2);
  if (p != 1 && p != 2)
    return c.error("p must be 1 or 2, got " + Twine(p));
  FailureOr<Value> norm = failure();
  if (p == 1) {
    auto a = un<AbsOp>(c, c.in[0]);
    if (failed(a))
      return failure();
    norm = reduce<ReduceSumOp>(c, *a, {*axis});
  } else {
    auto sq = bin<MulOp>(c, c.in[0], c.in[0]);
    if (failed(sq))
      return failure();
    auto s = reduce<ReduceSumOp>(c, *sq, {*axis});
    if (failed(s))
      return failure();
    norm = un<SqrtOp>(c, *s);
  }
  if (failed(norm))
    return failure();
  return setOut(c, bin<DivOp>(c, c.in[0], *norm));
}

LogicalResult importMeanVarianceNorm(Ctx &c) {
  if (failed(c.requireInputs(1)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0);
  SmallVector<int64_t> axes;
  if (auto a = c.attrInts("axes")) {
    for (int64_t v : *a) {
      auto n = c.normAxis(v, x.getRank(), "axes entry");
      if (failed(n))
        return failure();
      if (llvm::is_contained(axes, *n))
        return c.error("axes entry " + Twine(v) + " is repeated");
      axes.push_back(*n);
    }
    llvm::sort(axes);
  } else {
    if (x.getRank() != 4)
      return c.error("the default axes [0, 2, 3] need a rank-4 input");
    axes = {0, 2, 3};
  }
  // (x − mean) / (sqrt(var) + 1e-9), the ONNX function body's epsilon.
  Type et = x.getElementType();
  auto mean = reduce<ReduceMeanOp>(c, c.in[0], axes);
  if (failed(mean))
    return failure();
  auto centred = bin<SubOp>(c, c.in[0], *mean);
  if (failed(centred))
    return failure();
  auto sq = bin<MulOp>(c, *centred, *centred);
  if (failed(sq))
    return failure();
  auto var = reduce<ReduceMeanOp>(c, *sq, axes);
  if (failed(var))
    return failure();
  auto sd = un<SqrtOp>(c, *var);
  if (failed(sd))
    return failure();
  auto den = bin<AddOp>(c, *sd, scalar(c, et, 1e-9));
  if (failed(den))
    return failure();
  return setOut(c, bin<DivOp>(c, *centred, *den));
}

//===----------------------------------------------------------------------===//
// Resize and Upsample
//===----------------------------------------------------------------------===//

/// The float values of constant input `i` (f16/f32/f64), or failure.
FailureOr<SmallVector<double>> constFloats(Ctx &c, size_t i, StringRef what) {
  auto t = c.constInput(i, what);
  if (failed(t))
    return failure();
  if (!t->isFloat())
    return FailureOr<SmallVector<double>>(c.error(what + " must be a float tensor"));
  return SmallVector<double>(t->f.begin(), t->f.end());
}

/// Whether input `i` is absent or an empty tensor (opset 11 passes "" or [] for unused inputs).
bool absentOrEmpty(Ctx &c, size_t i) { return !c.has(i) || c.typeOf(i).getNumElements() == 0; }

LogicalResult importResize(Ctx &c) {
  if (failed(c.requireInputs(1)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0);
  int64_t rank = x.getRank();
  bool upsample = c.node.op_type() == "Upsample";
  bool legacy = upsample || c.opset < 11; // Upsample and Resize-10: (X, scales), asymmetric
  std::string mode = c.attrString("mode", "nearest");
  if (mode == "bilinear" || mode == "trilinear")
    mode = "linear"; // Upsample-7's names
  if (mode != "nearest" && mode != "linear" && (legacy || mode != "cubic"))
    return c.error("mode '" + mode + "' is not supported");
  std::string ctm = legacy ? "asymmetric"
                           : c.attrString("coordinate_transformation_mode", "half_pixel");
  std::string nearestMode = legacy ? "floor" : c.attrString("nearest_mode", "round_prefer_floor");
  if (c.attrInt("antialias", 0) != 0)
    return c.error("antialias = 1 is not supported");

  // Which dims the scales/sizes address (opset 18 'axes'; all dims otherwise).
  SmallVector<int64_t> axes = range(0, rank);
  if (!legacy && c.opset >= 18) {
    if (auto a = c.attrInts("axes")) {
      axes.clear();
      for (int64_t v : *a) {
        auto n = c.normAxis(v, rank, "axes entry");
        if (failed(n))
          return failure();
        if (llvm::is_contained(axes, *n))
          return c.error("axes entry " + Twine(v) + " is repeated");
        axes.push_back(*n);
      }
    }
  }
  SmallVector<double> roi;
  if (ctm == "tf_crop_and_resize") {
    if (absentOrEmpty(c, 1))
      return c.error("tf_crop_and_resize needs a roi input");
    auto r = constFloats(c, 1, "roi");
    if (failed(r))
      return failure();
    if (r->size() != 2 * axes.size())
      return c.error("roi must have " + Twine(2 * axes.size()) + " entries");
    roi.assign(rank, 0.0);
    roi.append(rank, 1.0);
    for (size_t k = 0; k < axes.size(); ++k) {
      roi[axes[k]] = (*r)[k];
      roi[rank + axes[k]] = (*r)[axes.size() + k];
    }
  }

  SmallVector<double> scales(rank, 1.0);
  SmallVector<int64_t> outShape(x.getShape());
  size_t scalesIdx = legacy ? 1 : 2, sizesIdx = 3;
  if (upsample && c.opset < 9) {
    auto s = c.attr("scales");
    if (!s)
      return c.error("missing required attribute 'scales'");
    scales.assign(s->floats().begin(), s->floats().end());
    if (int64_t(scales.size()) != rank)
      return c.error("scales must have " + Twine(rank) + " entries");
  } else if (!absentOrEmpty(c, scalesIdx)) {
    if (!legacy && !absentOrEmpty(c, sizesIdx))
      return c.error("only one of scales and sizes may be given");
    auto s = constFloats(c, scalesIdx, "scales");
    if (failed(s))
      return failure();
    if (s->size() != axes.size())
      return c.error("scales must have " + Twine(axes.size()) + " entries");
    for (size_t k = 0; k < axes.size(); ++k)
      scales[axes[k]] = (*s)[k];
  } else if (!legacy && !absentOrEmpty(c, sizesIdx)) {
    auto s = c.constInts(sizesIdx, "sizes");
    if (failed(s))
      return failure();
    if (s->size() != axes.size())
      return c.error("sizes must have " + Twine(axes.size()) + " entries");
    std::string policy = c.opset >= 18 ? c.attrString("keep_aspect_ratio_policy", "stretch")
                                       : std::string("stretch");
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      return c.error("unknown keep_aspect_ratio_policy '" + policy + "'");
    double common = policy == "not_larger" ? INFINITY : 0.0;
    for (size_t k = 0; k < axes.size(); ++k) {
      if ((*s)[k] < 1)
        return c.error("sizes must be positive");
      double r = double((*s)[k]) / double(x.getDimSize(axes[k]));
      common = policy == "not_larger" ? std::min(common, r) : std::max(common, r);
      scales[axes[k]] = r;
      outShape[axes[k]] = (*s)[k];
    }
    if (policy != "stretch")
      for (int64_t a : axes) {
        scales[a] = common;
        outShape[a] = int64_t(std::floor(common * double(x.getDimSize(a)) + 0.5));
      }
  } else {
    return c.error("one of scales and sizes is required");
  }
  bool fromScales = llvm::equal(outShape, x.getShape()) &&
                    llvm::any_of(scales, [](double s) { return s != 1.0; });
  for (int64_t d = 0; d < rank; ++d) {
    if (!(scales[d] > 0))
      return c.error("scales must be positive");
    if (fromScales || (upsample && c.opset < 9)) {
      double len = double(x.getDimSize(d)) * scales[d];
      if (ctm == "tf_crop_and_resize")
        len *= roi[rank + d] - roi[d];
      outShape[d] = int64_t(std::floor(len));
    }
    if (outShape[d] < 1)
      return c.error("dim " + Twine(d) + " would resize to " + Twine(outShape[d]));
  }
  if (llvm::equal(outShape, x.getShape()) && llvm::all_of(scales, [](double s) { return s == 1.0; }) &&
      ctm != "tf_crop_and_resize") {
    c.out.push_back(c.in[0]);
    return success();
  }
  return setOut(c, c.makeTyped1<ResizeOp>(
                       x.clone(outShape), c.in[0], c.b.getStringAttr(mode), c.b.getStringAttr(ctm),
                       c.b.getStringAttr(nearestMode),
                       c.b.getF32FloatAttr(c.attrFloat("cubic_coeff_a", -0.75f)),
                       c.b.getBoolAttr(c.attrInt("exclude_outside", 0) != 0),
                       c.b.getF32FloatAttr(c.attrFloat("extrapolation_value", 0.0f)),
                       c.b.getDenseF64ArrayAttr(scales), c.b.getDenseF64ArrayAttr(roi)));
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

FailureOr<Value> nllLoss(Ctx &c, Value logProb, Value target, Value weight) {
  std::string reduction = c.attrString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return FailureOr<Value>(c.error("reduction must be none, sum or mean, got '" + reduction + "'"));
  IntegerAttr ignore;
  if (const auto *a = c.attr("ignore_index"))
    ignore = c.b.getI64IntegerAttr(a->i());
  return c.make<NllLossOp>(logProb, target, weight, c.b.getStringAttr(reduction), ignore);
}

LogicalResult importNllLoss(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireFloatInput(c, 0)))
    return failure();
  return setOut(c, nllLoss(c, c.in[0], c.in[1], c.has(2) ? c.in[2] : Value()));
}

LogicalResult importSoftmaxCrossEntropy(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0);
  if (x.getRank() < 2)
    return c.error("scores must be [N, C, d1..dk]");
  auto logProb = c.makeTyped1<LogSoftmaxOp>(x, c.in[0], c.b.getI64IntegerAttr(1));
  if (failed(logProb))
    return failure();
  if (failed(setOut(c, nllLoss(c, *logProb, c.in[1], c.has(2) ? c.in[2] : Value()))))
    return failure();
  if (c.outputUsed(1))
    c.out.push_back(*logProb);
  return success();
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

/// The quantization axis: per-tensor before opset 13; `axis` (default 1) after.
FailureOr<int64_t> quantAxis(Ctx &c, RankedTensorType x, RankedTensorType scale) {
  if (scale.getNumElements() == 1 || x.getRank() == 0)
    return int64_t(0);
  if (c.opset < 13)
    return FailureOr<int64_t>(c.error("per-axis scales need opset 13"));
  if (c.attrInt("block_size", 0) != 0)
    return FailureOr<int64_t>(c.error("blocked quantization (block_size) is not supported"));
  return c.normAxis(c.attrInt("axis", 1), x.getRank());
}

/// Scalars and [1] tensors of a quantization parameter become [] so kernels see one shape.
FailureOr<Value> quantParam(Ctx &c, Value v) {
  auto t = llvm::cast<RankedTensorType>(v.getType());
  if (t.getNumElements() == 1 && t.getRank() != 0)
    return c.reshape(v, {});
  return v;
}

LogicalResult importQuantizeLinear(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireFloatInput(c, 0)))
    return failure();
  auto x = c.typeOf(0), st = c.typeOf(1);
  Type out = c.has(2) ? c.typeOf(2).getElementType()
                      : Type(IntegerType::get(c.ctx(), 8, IntegerType::Unsigned));
  if (const auto *od = c.attr("output_dtype"); od && od->i() != 0) {
    Type want = elementTypeFor(od->i(), c.ctx());
    if (!want || (c.has(2) && want != out))
      return c.error("output_dtype " + onnxTypeName(od->i()) + " is not supported here");
    out = want;
  }
  auto it = llvm::dyn_cast<IntegerType>(out);
  if (!it || it.getWidth() != 8)
    return c.error("quantizing to " + typeStr(out) + " is not supported (uint8 and int8 are)");
  auto axis = quantAxis(c, x, st);
  if (failed(axis))
    return failure();
  auto scale = castTo(c, c.in[1], x.getElementType());
  if (failed(scale))
    return failure();
  auto s = quantParam(c, *scale);
  auto zp = quantParam(c, c.has(2) ? c.in[2] : scalar(c, out, 0));
  if (failed(s) || failed(zp))
    return failure();
  return setOut(c, c.make<QuantizeLinearOp>(c.in[0], *s, *zp, c.b.getI64IntegerAttr(*axis)));
}

LogicalResult importDequantizeLinear(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto x = c.typeOf(0), st = c.typeOf(1);
  auto it = llvm::dyn_cast<IntegerType>(x.getElementType());
  if (!it || !(it.getWidth() == 8 || (it.getWidth() == 32 && it.isSignless())))
    return c.error("dequantizing " + typeStr(x.getElementType()) +
                   " is not supported (uint8, int8 and int32 are)");
  if (!llvm::isa<FloatType>(st.getElementType()))
    return c.error("x_scale must be float");
  auto axis = quantAxis(c, x, st);
  if (failed(axis))
    return failure();
  auto s = quantParam(c, c.in[1]);
  auto zp = quantParam(c, zeroPointOr(c, 2, x.getElementType()));
  if (failed(s) || failed(zp))
    return failure();
  return setOut(c, c.make<DequantizeLinearOp>(c.in[0], *s, *zp, c.b.getI64IntegerAttr(*axis)));
}

LogicalResult importDynamicQuantizeLinear(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  if (!c.typeOf(0).getElementType().isF32())
    return c.error("x must be float32");
  auto r = c.makeTyped<DynamicQuantizeLinearOp>(
      TypeRange{c.typeOf(0).clone(IntegerType::get(c.ctx(), 8, IntegerType::Unsigned)),
                RankedTensorType::get({}, c.b.getF32Type()),
                RankedTensorType::get({}, IntegerType::get(c.ctx(), 8, IntegerType::Unsigned))},
      c.in[0]);
  if (failed(r))
    return failure();
  c.out.append(r->begin(), r->end());
  return success();
}

/// acc (i32) · (a_scale · b_scale [per channel]) → quantize_linear(y_scale, y_zero_point).
FailureOr<Value> requantize(Ctx &c, Value acc, Value inScale, Value wScale, Value yScale,
                            Value yZp, int64_t channelAxis) {
  auto at = llvm::cast<RankedTensorType>(acc.getType());
  Type f32 = c.b.getF32Type();
  auto accF = castTo(c, acc, f32);
  auto sa = castTo(c, inScale, f32), sb = castTo(c, wScale, f32), sy = castTo(c, yScale, f32);
  if (failed(accF) || failed(sa) || failed(sb) || failed(sy))
    return failure();
  auto flat = [&](Value v) -> FailureOr<Value> {
    auto t = llvm::cast<RankedTensorType>(v.getType());
    if (t.getNumElements() == 1)
      return c.reshape(v, {});
    // Per output channel: [M] against [.., M, ..] at channelAxis.
    SmallVector<int64_t> shape{t.getNumElements()};
    shape.append(at.getRank() - 1 - channelAxis, 1);
    return c.reshape(v, shape);
  };
  auto fa = flat(*sa), fb = flat(*sb);
  if (failed(fa) || failed(fb))
    return failure();
  auto s = bin<MulOp>(c, *fa, *fb);
  if (failed(s))
    return failure();
  auto y = bin<MulOp>(c, *accF, *s);
  if (failed(y))
    return failure();
  auto ys = quantParam(c, *sy), yz = quantParam(c, yZp);
  if (failed(ys) || failed(yz))
    return failure();
  if (llvm::cast<RankedTensorType>((*ys).getType()).getNumElements() != 1)
    return FailureOr<Value>(c.error("y_scale must be a scalar"));
  return c.make<QuantizeLinearOp>(*y, *ys, *yz, c.b.getI64IntegerAttr(0));
}

LogicalResult importQLinearMatMul(Ctx &c) {
  if (failed(c.requireInputs(8)) || failed(requireQuant(c, 0)) || failed(requireQuant(c, 3)))
    return failure();
  auto azp = quantParam(c, c.in[2]), bzp = quantParam(c, c.in[5]);
  if (failed(azp) || failed(bzp))
    return failure();
  auto acc = matmulInteger(c, c.in[0], c.in[3], *azp, *bzp);
  if (failed(acc))
    return failure();
  int64_t r = llvm::cast<RankedTensorType>(acc->getType()).getRank();
  return setOut(c, requantize(c, *acc, c.in[1], c.in[4], c.in[6], c.in[7], std::max<int64_t>(r - 1, 0)));
}

LogicalResult importQLinearConv(Ctx &c) {
  if (failed(c.requireInputs(8)) || failed(requireQuant(c, 0)) || failed(requireQuant(c, 3)))
    return failure();
  auto xzp = quantParam(c, c.in[2]), wzp = quantParam(c, c.in[5]);
  if (failed(xzp) || failed(wzp))
    return failure();
  auto acc = convInteger(c, c.in[0], c.in[3], *xzp, *wzp);
  if (failed(acc))
    return failure();
  Value sum = *acc;
  if (c.has(8)) { // bias: i32 [M], already in the accumulator's scale
    auto b = perChannel(c, c.in[8], llvm::cast<RankedTensorType>(sum.getType()).getRank());
    if (failed(b))
      return failure();
    auto castB = castTo(c, *b, c.b.getI32Type());
    if (failed(castB))
      return failure();
    auto accF = castTo(c, sum, c.b.getF32Type()), bF = castTo(c, *castB, c.b.getF32Type());
    if (failed(accF) || failed(bF))
      return failure();
    auto s = bin<AddOp>(c, *accF, *bF);
    if (failed(s))
      return failure();
    sum = *s;
  }
  return setOut(c, requantize(c, sum, c.in[1], c.in[4], c.in[6], c.in[7], 1));
}

} // namespace

void registerNNImporters(ImporterTable &table) {
  static const std::pair<const char *, OpImporter> nn[] = {
      {"Conv", importConv},
      {"ConvTranspose", importConvTranspose},
      {"ConvInteger", importConvInteger},
      {"MatMulInteger", importMatMulInteger},
      {"QLinearMatMul", importQLinearMatMul},
      {"QLinearConv", importQLinearConv},
      {"MaxPool", [](Ctx &c) { return importPool(c, "max"); }},
      {"AveragePool", [](Ctx &c) { return importPool(c, "avg"); }},
      {"LpPool", [](Ctx &c) { return importPool(c, "lp"); }},
      {"GlobalAveragePool", [](Ctx &c) { return importGlobalPool(c, "avg"); }},
      {"GlobalMaxPool", [](Ctx &c) { return importGlobalPool(c, "max"); }},
      {"GlobalLpPool", [](Ctx &c) { return importGlobalPool(c, "lp"); }},
      {"MaxUnpool", importMaxUnpool},
      {"BatchNormalization", importBatchNorm},
      {"InstanceNormalization", importInstanceNorm},
      {"GroupNormalization", importGroupNorm},
      {"LpNormalization", importLpNorm},
      {"MeanVarianceNormalization", importMeanVarianceNorm},
      {"Resize", importResize},
      {"Upsample", importResize},
      {"NegativeLogLikelihoodLoss", importNllLoss},
      {"SoftmaxCrossEntropyLoss", importSoftmaxCrossEntropy},
      {"QuantizeLinear", importQuantizeLinear},
      {"DequantizeLinear", importDequantizeLinear},
      {"DynamicQuantizeLinear", importDynamicQuantizeLinear},
  };
  for (const auto &[name, fn] : nn)
    table[name] = fn;
}

} // namespace colossal::onnx_import

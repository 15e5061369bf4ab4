//===- ColossalNNOps.cpp - type inference and verifiers of the NN ops ------===//
//
// Convolution, pooling, resize, losses and quantization (ColossalNNOps.td). The ODS-generated
// definitions of these ops are emitted by ColossalOps.cpp with the rest of the dialect; this file
// holds only their hand-written C++.
//===----------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"
#include "dialects/Colossal/VJP.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace colossal;

namespace {


/// Checks x is [N, C, D1..Dn] with 1 <= n <= 3 and the spatial attributes have n (pads 2n)
/// entries: strides and dilations >= 1, pads >= 0, kernel sizes >= 1.
LogicalResult checkWindow(std::optional<Location> loc, RankedTensorType x,
                          ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                          ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations) {
  int64_t n = x.getRank() - 2;
  if (n < 1 || n > 3)
    return emitOptionalError(loc, "input must be [N, C, D1..Dn] with 1 to 3 spatial dims, got ",
                             shapeStr(x.getShape()));
  if (int64_t(kernel.size()) != n || int64_t(strides.size()) != n ||
      int64_t(dilations.size()) != n || int64_t(pads.size()) != 2 * n)
    return emitOptionalError(loc, "kernel, strides and dilations need ", n,
                             " entries and pads ", 2 * n, " for ", n, " spatial dims");
  for (int64_t i = 0; i < n; ++i) {
    if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1)
      return emitOptionalError(loc, "kernel sizes, strides and dilations must be positive");
    if (pads[i] < 0 || pads[n + i] < 0)
      return emitOptionalError(loc, "pads must be non-negative");
  }
  return success();
}

/// Output size of a window sweep over one spatial dim; < 1 means the window does not fit.
int64_t windowOutput(int64_t in, int64_t k, int64_t stride, int64_t padBegin, int64_t padEnd,
                     int64_t dilation, bool ceilMode) {
  int64_t span = in + padBegin + padEnd - dilation * (k - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  // ceil_mode: the last window must start inside the input or its begin padding.
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

LogicalResult inferWindowShape(std::optional<Location> loc, RankedTensorType x, int64_t channels,
                               ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                               ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations, bool ceilMode,
                               SmallVectorImpl<int64_t> &shape) {
  if (failed(checkWindow(loc, x, kernel, strides, pads, dilations)))
    return failure();
  int64_t n = x.getRank() - 2;
  shape.assign({x.getDimSize(0), channels});
  for (int64_t i = 0; i < n; ++i) {
    int64_t o = windowOutput(x.getDimSize(2 + i), kernel[i], strides[i], pads[i], pads[n + i],
                             dilations[i], ceilMode);
    if (o < 1)
      return emitOptionalError(loc, "window of size ", kernel[i], " (dilation ", dilations[i],
                               ") does not fit spatial dim ", i, " of size ", x.getDimSize(2 + i),
                               " with its padding");
    shape.push_back(o);
  }
  return success();
}

/// The shared part of conv and conv_integer: w is [M, C/group, K...].
LogicalResult inferConvShape(std::optional<Location> loc, RankedTensorType x, RankedTensorType w,
                             ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                             ArrayRef<int64_t> dilations, int64_t group,
                             SmallVectorImpl<int64_t> &shape) {
  if (w.getRank() != x.getRank())
    return emitOptionalError(loc, "weight ", shapeStr(w.getShape()), " and input ",
                             shapeStr(x.getShape()), " differ in rank");
  if (x.getRank() < 3)
    return emitOptionalError(loc, "input must be [N, C, D1..Dn], got ", shapeStr(x.getShape()));
  int64_t c = x.getDimSize(1), m = w.getDimSize(0);
  if (group < 1 || c % group != 0 || m % group != 0)
    return emitOptionalError(loc, "group ", group, " must divide the input channels (", c,
                             ") and the output channels (", m, ")");
  if (w.getDimSize(1) * group != c)
    return emitOptionalError(loc, "weight has ", w.getDimSize(1), " channels per group; input has ",
                             c, " channels in ", group, " groups");
  return inferWindowShape(loc, x, m, w.getShape().drop_front(2), strides, pads, dilations,
                          /*ceilMode=*/false, shape);
}

/// bias: [m] of the operands' element type; with `f32WithLowPrecision` also f32 for bf16/f16
/// operands (conv computed in f32, colossal-auto-mixed-precision).
LogicalResult checkBias(std::optional<Location> loc, Value bias, int64_t m, Type elt,
                        bool f32WithLowPrecision = false) {
  if (!bias)
    return success();
  auto b = rankedType(bias);
  bool f32Bias = f32WithLowPrecision && (elt.isBF16() || elt.isF16()) && b.getElementType().isF32();
  if (b.getRank() != 1 || b.getDimSize(0) != m || (b.getElementType() != elt && !f32Bias))
    return emitOptionalError(loc, "bias must be [", m, "] of ", elt, ", got ", b);
  return success();
}

bool isQuantType(Type t) {
  auto it = llvm::dyn_cast<IntegerType>(t);
  return it && it.getWidth() == 8 && !it.isSigned();
}

/// A zero point of `elt`: a scalar, [1], or (when perAxis > 0) [perAxis].
LogicalResult checkZeroPoint(std::optional<Location> loc, Value zp, Type elt, int64_t perAxis,
                             StringRef what) {
  auto t = rankedType(zp);
  if (t.getElementType() != elt)
    return emitOptionalError(loc, what, " must have element type ", elt, ", got ",
                             t.getElementType());
  int64_t n = t.getNumElements();
  if (t.getRank() > 1 || (n != 1 && (perAxis <= 0 || n != perAxis)))
    return emitOptionalError(loc, what, " must be a scalar, [1]",
                             perAxis > 0 ? " or [" + std::to_string(perAxis) + "]" : std::string(),
                             ", got ", shapeStr(t.getShape()));
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

LogicalResult ConvOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX()), w = rankedType(adaptor.getW());
  if (!llvm::isa<FloatType>(x.getElementType()) || x.getElementType() != w.getElementType())
    return emitOptionalError(loc, "x and w must have the same float element type");
  SmallVector<int64_t> shape;
  if (failed(inferConvShape(loc, x, w, adaptor.getStrides(), adaptor.getPads(),
                            adaptor.getDilations(), adaptor.getGroup(), shape)) ||
      failed(checkBias(loc, adaptor.getBias(), w.getDimSize(0), x.getElementType(),
                       /*f32WithLowPrecision=*/true)))
    return failure();
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

namespace {
/// The fused epilogue of conv and conv_transpose (`activation` and its parameters).
LogicalResult verifyEpilogue(Operation *op, std::optional<StringRef> act, std::optional<APFloat> alpha,
                             std::optional<APFloat> beta) {
  if (!act) {
    if (alpha || beta)
      return op->emitOpError("activation_alpha and activation_beta need an activation");
    return success();
  }
  if (!llvm::is_contained({"relu", "clip", "hard_sigmoid", "hard_swish", "sigmoid"}, *act))
    return op->emitOpError("unknown activation '")
           << *act << "' (relu, clip, hard_sigmoid, hard_swish or sigmoid)";
  bool params = *act == "clip" || *act == "hard_sigmoid";
  if (params != (alpha.has_value() && beta.has_value()) || (!params && (alpha || beta)))
    return op->emitOpError("activation '")
           << *act << "' " << (params ? "needs" : "takes no") << " activation_alpha and activation_beta";
  if (*act == "clip" && !(alpha->convertToDouble() <= beta->convertToDouble()))
    return op->emitOpError("clip activation needs activation_alpha <= activation_beta");
  return success();
}
} // namespace

bool ConvOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return lowPrecisionResultsCompatible(l, r);
}

LogicalResult ConvOp::verify() {
  return verifyEpilogue(*this, getActivation(), getActivationAlpha(), getActivationBeta());
}

LogicalResult ConvTransposeOp::verify() {
  return verifyEpilogue(*this, getActivation(), getActivationAlpha(), getActivationBeta());
}

LogicalResult ConvIntegerOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX()), w = rankedType(adaptor.getW());
  if (!isQuantType(x.getElementType()) || !isQuantType(w.getElementType()))
    return emitOptionalError(loc, "x and w must be ui8 or i8");
  SmallVector<int64_t> shape;
  if (failed(inferConvShape(loc, x, w, adaptor.getStrides(), adaptor.getPads(),
                            adaptor.getDilations(), adaptor.getGroup(), shape)) ||
      failed(checkZeroPoint(loc, adaptor.getXZeroPoint(), x.getElementType(), 0,
                            "x_zero_point")) ||
      failed(checkZeroPoint(loc, adaptor.getWZeroPoint(), w.getElementType(), w.getDimSize(0),
                            "w_zero_point")))
    return failure();
  inferred.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 32)));
  return success();
}

LogicalResult ConvTransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX()), w = rankedType(adaptor.getW());
  if (!llvm::isa<FloatType>(x.getElementType()) || x.getElementType() != w.getElementType())
    return emitOptionalError(loc, "x and w must have the same float element type");
  if (w.getRank() != x.getRank() || x.getRank() < 3)
    return emitOptionalError(loc, "x and w must both be [N, C, D1..Dn], got ",
                             shapeStr(x.getShape()), " and ", shapeStr(w.getShape()));
  int64_t group = adaptor.getGroup(), c = x.getDimSize(1);
  if (group < 1 || c % group != 0 || w.getDimSize(0) != c)
    return emitOptionalError(loc, "weight ", shapeStr(w.getShape()), " does not fit ", c,
                             " input channels in ", group, " groups");
  int64_t m = w.getDimSize(1) * group;
  auto strides = adaptor.getStrides(), pads = adaptor.getPads(),
       dilations = adaptor.getDilations(), outPad = adaptor.getOutputPadding();
  if (failed(checkWindow(loc, x, w.getShape().drop_front(2), strides, pads, dilations)) ||
      failed(checkBias(loc, adaptor.getBias(), m, x.getElementType())))
    return failure();
  int64_t n = x.getRank() - 2;
  if (int64_t(outPad.size()) != n)
    return emitOptionalError(loc, "output_padding needs ", n, " entries");
  SmallVector<int64_t> shape{x.getDimSize(0), m};
  for (int64_t i = 0; i < n; ++i) {
    if (outPad[i] < 0)
      return emitOptionalError(loc, "output_padding must be non-negative");
    int64_t o = strides[i] * (x.getDimSize(2 + i) - 1) + outPad[i] +
                dilations[i] * (w.getDimSize(2 + i) - 1) + 1 - pads[i] - pads[n + i];
    if (o < 1)
      return emitOptionalError(loc, "spatial dim ", i, " of the result would be ", o);
    shape.push_back(o);
  }
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

LogicalResult MatMulIntegerOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  auto a = rankedType(adaptor.getA()), b = rankedType(adaptor.getB());
  if (!isQuantType(a.getElementType()) || !isQuantType(b.getElementType()))
    return emitOptionalError(loc, "a and b must be ui8 or i8");
  if (a.getRank() < 2 || b.getRank() < 2)
    return emitOptionalError(loc, "operands must have rank >= 2");
  int64_t m = a.getDimSize(a.getRank() - 2), k = a.getShape().back(),
          n = b.getShape().back();
  if (b.getDimSize(b.getRank() - 2) != k)
    return emitOptionalError(loc, "contracting dims differ: ", shapeStr(a.getShape()), " x ",
                             shapeStr(b.getShape()));
  auto ab = a.getShape().drop_back(2), bb = b.getShape().drop_back(2);
  size_t rank = std::max(ab.size(), bb.size());
  SmallVector<int64_t> shape(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - ab.size() ? 1 : ab[i - (rank - ab.size())];
    int64_t db = i < rank - bb.size() ? 1 : bb[i - (rank - bb.size())];
    if (da != db && da != 1 && db != 1)
      return emitOptionalError(loc, "batch dims do not broadcast: ", shapeStr(a.getShape()),
                               " x ", shapeStr(b.getShape()));
    shape[i] = da == 1 ? db : da;
  }
  if (failed(checkZeroPoint(loc, adaptor.getAZeroPoint(), a.getElementType(), m,
                            "a_zero_point")) ||
      failed(checkZeroPoint(loc, adaptor.getBZeroPoint(), b.getElementType(), n,
                            "b_zero_point")))
    return failure();
  shape.push_back(m);
  shape.push_back(n);
  inferred.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 32)));
  return success();
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

LogicalResult PoolOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX());
  StringRef kind = adaptor.getKind();
  if (kind != "max" && kind != "avg" && kind != "lp")
    return emitOptionalError(loc, "kind must be \"max\", \"avg\" or \"lp\", got \"", kind, "\"");
  if (kind != "max" && !llvm::isa<FloatType>(x.getElementType()))
    return emitOptionalError(loc, kind, " pooling needs a float input");
  if (kind == "lp" && adaptor.getP() < 1)
    return emitOptionalError(loc, "p must be positive");
  SmallVector<int64_t> shape;
  if (x.getRank() < 3)
    return emitOptionalError(loc, "input must be [N, C, D1..Dn], got ", shapeStr(x.getShape()));
  if (failed(inferWindowShape(loc, x, x.getDimSize(1), adaptor.getKernelShape(),
                              adaptor.getStrides(), adaptor.getPads(), adaptor.getDilations(),
                              adaptor.getCeilMode(), shape)))
    return failure();
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

LogicalResult MaxPoolWithIndicesOp::inferReturnTypes(MLIRContext *ctx,
                                                     std::optional<Location> loc,
                                                     Adaptor adaptor,
                                                     SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX());
  if (adaptor.getStorageOrder() != 0 && adaptor.getStorageOrder() != 1)
    return emitOptionalError(loc, "storage_order must be 0 or 1");
  SmallVector<int64_t> shape;
  if (x.getRank() < 3)
    return emitOptionalError(loc, "input must be [N, C, D1..Dn], got ", shapeStr(x.getShape()));
  if (failed(inferWindowShape(loc, x, x.getDimSize(1), adaptor.getKernelShape(),
                              adaptor.getStrides(), adaptor.getPads(), adaptor.getDilations(),
                              adaptor.getCeilMode(), shape)))
    return failure();
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  inferred.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult MaxUnpoolOp::verify() {
  auto x = getX().getType(), idx = getIndices().getType(), r = getType();
  if (idx.getShape() != x.getShape() || !idx.getElementType().isInteger(64))
    return emitOpError("indices must be i64 with the shape of x");
  if (r.getElementType() != x.getElementType() || r.getRank() != x.getRank() || r.getRank() < 3 ||
      r.getDimSize(0) != x.getDimSize(0) || r.getDimSize(1) != x.getDimSize(1))
    return emitOpError("result must be [N, C, ...] of x's element type");
  auto is = getIndexShape();
  if (int64_t(is.size()) != r.getRank())
    return emitOpError("index_shape must have one entry per result dim");
  for (int64_t d = 0; d < r.getRank(); ++d)
    if (is[d] < 1 || is[d] > r.getDimSize(d))
      return emitOpError("index_shape ") << shapeStr(is) << " must fit in the result "
                                         << shapeStr(r.getShape());
  return success();
}

//===----------------------------------------------------------------------===//
// Resize
//===----------------------------------------------------------------------===//

namespace {
/// The checks resize and resize_grad share: x [D...] (the forward input) and r [O...] (its
/// result), one float element type and rank, and the interpolation attributes.
LogicalResult verifyResizeAttrs(Operation *op, RankedTensorType x, RankedTensorType r,
                                ArrayRef<double> scales, StringRef mode, StringRef ctm,
                                StringRef nm, ArrayRef<double> roi) {
  if (!llvm::isa<FloatType>(x.getElementType()) || r.getElementType() != x.getElementType())
    return op->emitOpError("input and result must have the same float element type");
  if (r.getRank() != x.getRank())
    return op->emitOpError("result rank ") << r.getRank() << " differs from the input's "
                                           << x.getRank();
  for (int64_t d : r.getShape())
    if (d < 1)
      return op->emitOpError("result dims must be positive, got ") << shapeStr(r.getShape());
  if (int64_t(scales.size()) != x.getRank())
    return op->emitOpError("scales needs one entry per dim");
  for (double s : scales)
    if (!(s > 0))
      return op->emitOpError("scales must be positive");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return op->emitOpError("mode must be nearest, linear or cubic, got \"") << mode << "\"";
  if (!llvm::is_contained({"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                           "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                           "tf_crop_and_resize"},
                          ctm))
    return op->emitOpError("unknown coordinate_transformation_mode \"") << ctm << "\"";
  if (!llvm::is_contained({"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}, nm))
    return op->emitOpError("unknown nearest_mode \"") << nm << "\"";
  if (ctm == "tf_crop_and_resize" && int64_t(roi.size()) != 2 * x.getRank())
    return op->emitOpError("tf_crop_and_resize needs a roi of ") << 2 * x.getRank() << " entries";
  return success();
}
} // namespace

LogicalResult ResizeOp::verify() {
  return verifyResizeAttrs(*this, getX().getType(), getType(), getScales(), getMode(),
                           getCoordinateTransformationMode(), getNearestMode(), getRoi());
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

LogicalResult NllLossOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto in = rankedType(adaptor.getInput()), target = rankedType(adaptor.getTarget());
  StringRef reduction = adaptor.getReduction();
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return emitOptionalError(loc, "reduction must be none, sum or mean, got \"", reduction, "\"");
  if (!llvm::isa<FloatType>(in.getElementType()))
    return emitOptionalError(loc, "input must be float");
  auto te = llvm::dyn_cast<IntegerType>(target.getElementType());
  if (!te || !te.isSignless() || (te.getWidth() != 64 && te.getWidth() != 32))
    return emitOptionalError(loc, "target must be i64 or i32");
  if (in.getRank() < 2)
    return emitOptionalError(loc, "input must be [N, C, d1..dk]");
  SmallVector<int64_t> shape{in.getDimSize(0)};
  llvm::append_range(shape, in.getShape().drop_front(2));
  if (target.getShape() != ArrayRef<int64_t>(shape))
    return emitOptionalError(loc, "target shape ", shapeStr(target.getShape()),
                             " must be the input's without the class dim: ", shapeStr(shape));
  if (Value w = adaptor.getWeight()) {
    auto wt = rankedType(w);
    if (wt.getRank() != 1 || wt.getDimSize(0) != in.getDimSize(1) ||
        wt.getElementType() != in.getElementType())
      return emitOptionalError(loc, "weight must be [", in.getDimSize(1), "] of the input's type");
  }
  if (reduction != "none")
    shape.clear();
  inferred.push_back(RankedTensorType::get(shape, in.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

static LogicalResult checkQuantParams(std::optional<Location> loc, RankedTensorType x,
                                      Value scale, Value zp, Type zpElt, int64_t axis) {
  if (x.getRank() > 0 && (axis < 0 || axis >= x.getRank()))
    return emitOptionalError(loc, "axis ", axis, " out of range for rank ", x.getRank());
  int64_t perAxis = x.getRank() > 0 ? x.getDimSize(axis) : 1;
  auto st = rankedType(scale);
  if (!llvm::isa<FloatType>(st.getElementType()))
    return emitOptionalError(loc, "scale must be float");
  int64_t n = st.getNumElements();
  if (st.getRank() > 1 || (n != 1 && n != perAxis))
    return emitOptionalError(loc, "scale must be a scalar, [1] or [", perAxis, "], got ",
                             shapeStr(st.getShape()));
  if (failed(checkZeroPoint(loc, zp, zpElt, perAxis, "zero_point")))
    return failure();
  if (rankedType(zp).getNumElements() != n)
    return emitOptionalError(loc, "scale and zero_point differ in size");
  return success();
}

LogicalResult QuantizeLinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX());
  Type q = rankedType(adaptor.getZeroPoint()).getElementType();
  if (!llvm::isa<FloatType>(x.getElementType()))
    return emitOptionalError(loc, "x must be float");
  if (!isQuantType(q))
    return emitOptionalError(loc, "zero_point must be ui8 or i8, got ", q);
  if (failed(checkQuantParams(loc, x, adaptor.getScale(), adaptor.getZeroPoint(), q,
                              adaptor.getAxis())))
    return failure();
  inferred.push_back(x.clone(q));
  return success();
}

LogicalResult DequantizeLinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX());
  auto xe = llvm::dyn_cast<IntegerType>(x.getElementType());
  if (!xe || !(isQuantType(xe) || (xe.getWidth() == 32 && xe.isSignless())))
    return emitOptionalError(loc, "x must be ui8, i8 or i32");
  if (failed(checkQuantParams(loc, x, adaptor.getScale(), adaptor.getZeroPoint(), xe,
                              adaptor.getAxis())))
    return failure();
  inferred.push_back(x.clone(rankedType(adaptor.getScale()).getElementType()));
  return success();
}

LogicalResult DynamicQuantizeLinearOp::inferReturnTypes(MLIRContext *ctx,
                                                        std::optional<Location> loc,
                                                        Adaptor adaptor,
                                                        SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX());
  if (!x.getElementType().isF32())
    return emitOptionalError(loc, "x must be f32");
  auto u8 = IntegerType::get(ctx, 8, IntegerType::Unsigned);
  inferred.push_back(x.clone(u8));
  inferred.push_back(RankedTensorType::get({}, x.getElementType()));
  inferred.push_back(RankedTensorType::get({}, u8));
  return success();
}

//===----------------------------------------------------------------------===//
// Vector-Jacobian product of nll_loss (VJPOpInterface)
//===----------------------------------------------------------------------===//

// loss[n, d] = −w[t]·input[n, t, d] (t = target[n, d]), so ∂/∂input is −w[t]·onehot(t) along the
// class dim, times g (reduction "none"), g ("sum") or g / Σ w[t] ("mean"). Ignored targets are
// moved out of [0, C) before one_hot, which gives them an all-zero row. Built from existing ops:
// equal, where, gather (of the class weights), reduce_sum, one_hot, mul. The weight gets no
// gradient (as in PyTorch's nll_loss).
LogicalResult NllLossOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                                  SmallVectorImpl<Value> &og) {
  if (getWeight() && needed[2])
    return emitOpError("has no gradient with respect to its class weights");
  if (!needed[0])
    return success();
  Location loc = getLoc();
  Value g = resultGrads[0], target = getTarget();
  auto in = rankedType(getInput()), tt = rankedType(target);
  Type elt = in.getElementType();
  int64_t classes = in.getDimSize(1);
  auto c = [&](double v) { return scalarConstant(b, loc, elt, v); };
  auto idx = [&](int64_t v) { return scalarConstant(b, loc, tt.getElementType(), double(v)); };

  Value ignored, oneHotTarget = target, gatherTarget = target;
  if (auto ii = getIgnoreIndex()) {
    ignored = EqualOp::create(b, loc, target, idx(int64_t(*ii)));
    oneHotTarget = WhereOp::create(b, loc, ignored, idx(classes), target);
    gatherTarget = WhereOp::create(b, loc, ignored, idx(0), target);
  }
  Value weightOfTarget; // w[t], 0 where ignored: [N, d...]
  if (Value w = getWeight()) {
    weightOfTarget = GatherOp::create(b, loc, w, gatherTarget, b.getI64IntegerAttr(0));
    if (ignored)
      weightOfTarget = WhereOp::create(b, loc, ignored, c(0), weightOfTarget);
  }
  Value coef = NegOp::create(b, loc, g.getType(), g);
  if (getReduction() == "mean") {
    SmallVector<int64_t> all = llvm::to_vector(llvm::seq<int64_t>(0, tt.getRank()));
    Value denom;
    auto sumAll = [&](Value v) -> Value {
      return ReduceSumOp::create(b, loc, v, b.getDenseI64ArrayAttr(all), b.getBoolAttr(false));
    };
    if (weightOfTarget)
      denom = sumAll(weightOfTarget);
    else if (ignored)
      denom = sumAll(WhereOp::create(b, loc, ignored, c(0), c(1)));
    else
      denom = c(double(tt.getNumElements()));
    coef = DivOp::create(b, loc, coef, denom);
  }
  if (weightOfTarget)
    coef = MulOp::create(b, loc, coef, weightOfTarget);
  // [N, d...] → [N, 1, d...] to broadcast along the class dim.
  if (rankedType(coef).getRank() > 0) {
    SmallVector<int64_t> shape(tt.getShape());
    shape.insert(shape.begin() + 1, 1);
    coef = ReshapeOp::create(b, loc, RankedTensorType::get(shape, elt), coef);
  }
  auto valuesType = RankedTensorType::get({2}, elt);
  Attribute offOn[] = {b.getFloatAttr(elt, 0.0), b.getFloatAttr(elt, 1.0)};
  Value values = ConstantOp::create(b, loc, DenseElementsAttr::get(valuesType, ArrayRef<Attribute>(offOn)));
  Value oneHot = OneHotOp::create(b, loc, in, oneHotTarget, values, b.getI64IntegerAttr(1));
  og[0] = MulOp::create(b, loc, oneHot, coef);
  return success();
}

//===----------------------------------------------------------------------===//
// Backward ops of the family (ColossalGradOps.td): verified against the forward's shape rules
//===----------------------------------------------------------------------===//

LogicalResult ConvGradWeightOp::verify() {
  auto x = getX().getType(), dy = getDy().getType(), w = getType();
  if (!llvm::isa<FloatType>(x.getElementType()) || dy.getElementType() != x.getElementType() ||
      w.getElementType() != x.getElementType())
    return emitOpError("x, dy and the result must have one float element type");
  SmallVector<int64_t> shape;
  if (failed(inferConvShape(getLoc(), x, w, getStrides(), getPads(), getDilations(), getGroup(),
                            shape)))
    return failure();
  if (dy.getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("dy of shape ") << shapeStr(dy.getShape()) << " is not the result "
                                       << shapeStr(shape) << " of a conv of x with this weight";
  return success();
}

LogicalResult PoolGradOp::verify() {
  auto x = getX().getType(), dy = getDy().getType();
  if (getKind() != "max" && getKind() != "avg" && getKind() != "lp")
    return emitOpError("kind must be \"max\", \"avg\" or \"lp\", got \"") << getKind() << "\"";
  if (getKind() == "lp" && getP() < 1)
    return emitOpError("p must be positive");
  if (!llvm::isa<FloatType>(x.getElementType()) || dy.getElementType() != x.getElementType() ||
      getType() != x)
    return emitOpError("x, dy and the result must have one float element type, the result x's type");
  if (x.getRank() < 3)
    return emitOpError("input must be [N, C, D1..Dn], got ") << shapeStr(x.getShape());
  SmallVector<int64_t> shape;
  if (failed(inferWindowShape(getLoc(), x, x.getDimSize(1), getKernelShape(), getStrides(),
                              getPads(), getDilations(), getCeilMode(), shape)))
    return failure();
  if (dy.getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("dy of shape ") << shapeStr(dy.getShape()) << " is not the pooled shape "
                                       << shapeStr(shape) << " of x";
  return success();
}

LogicalResult ResizeGradOp::verify() {
  return verifyResizeAttrs(*this, getType(), getDy().getType(), getScales(), getMode(),
                           getCoordinateTransformationMode(), getNearestMode(), getRoi());
}

//===----------------------------------------------------------------------===//
// Vector-Jacobian products of conv, conv_transpose, pool and resize (VJPOpInterface)
//===----------------------------------------------------------------------===//

namespace {

/// v converted to element type `e` (v itself when it has it).
Value withElementType(OpBuilder &b, Location loc, Value v, Type e) {
  auto t = rankedType(v);
  return t.getElementType() == e ? v : Value(CastOp::create(b, loc, t.clone(e), v));
}

/// Σ of dy over every dim but the channels: the bias gradient of conv and conv_transpose.
Value biasGrad(OpBuilder &b, Location loc, Value dy, Value bias) {
  SmallVector<int64_t> axes{0};
  for (int64_t d = 2; d < rankedType(dy).getRank(); ++d)
    axes.push_back(d);
  return ReduceSumOp::create(b, loc, rankedType(bias), dy, b.getDenseI64ArrayAttr(axes),
                             b.getBoolAttr(false));
}

LogicalResult noEpilogue(Operation *op, bool fused) {
  if (fused)
    return op->emitOpError("has a fused epilogue (activation or output scale/shift, an inference "
                           "fusion) and no VJP");
  return success();
}

} // namespace

// y = conv(x, w) + bias. dx is conv's adjoint, conv_transpose(dy, w) with the same window, its
// output_padding restoring the rows the floor of the output-size rule dropped; dw is the
// backward-weights contraction conv_grad_weight(x, dy); dbias = Σ dy over batch and space.
// bf16/f16 x and w (colossal-auto-mixed-precision's f32 result) are widened: the gradients are
// computed in f32 and cast back to the operands' types.
LogicalResult ConvOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                               SmallVectorImpl<Value> &og) {
  if (failed(noEpilogue(*this, getActivation() || getOutputScale() || getOutputShift())))
    return failure();
  Location loc = getLoc();
  Value g = resultGrads[0];
  Type e = rankedType(g).getElementType();
  Value x = withElementType(b, loc, getX(), e), w = withElementType(b, loc, getW(), e);
  auto xt = rankedType(getX()), wt = rankedType(getW()), yt = rankedType(g);
  auto strides = getStrides(), pads = getPads(), dil = getDilations();
  int64_t n = xt.getRank() - 2;
  if (needed[0]) {
    SmallVector<int64_t> outPad(n);
    for (int64_t i = 0; i < n; ++i)
      outPad[i] = xt.getDimSize(2 + i) + pads[i] + pads[n + i] -
                  dil[i] * (wt.getDimSize(2 + i) - 1) - 1 - strides[i] * (yt.getDimSize(2 + i) - 1);
    Value dx = ConvTransposeOp::create(b, loc, g, w, Value(), getStridesAttr(), getPadsAttr(),
                                       getDilationsAttr(), b.getDenseI64ArrayAttr(outPad),
                                       getGroupAttr(), StringAttr(), FloatAttr(), FloatAttr(),
                                       FloatAttr(), FloatAttr());
    og[0] = withElementType(b, loc, dx, xt.getElementType());
  }
  if (needed[1]) {
    Value dw = ConvGradWeightOp::create(b, loc, wt.clone(e), x, g, getStridesAttr(), getPadsAttr(),
                                        getDilationsAttr(), getGroupAttr());
    og[1] = withElementType(b, loc, dw, wt.getElementType());
  }
  if (getBias() && needed[2])
    og[2] = biasGrad(b, loc, g, getBias());
  return success();
}

// y = conv_transpose(x, w) + bias is the adjoint of conv(·, w) with the same window, so
// dx = conv(dy, w) and dw = conv_grad_weight with the roles of x and dy exchanged (the forward
// conv runs from y's space to x's). An output_padding of a stride or more adds rows that conv's
// output-size rule cannot give back: no VJP then.
LogicalResult ConvTransposeOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                        ArrayRef<bool> needed, SmallVectorImpl<Value> &og) {
  if (failed(noEpilogue(*this, getActivation() || getOutputScale() || getOutputShift())))
    return failure();
  for (auto [p, s] : llvm::zip(getOutputPadding(), getStrides()))
    if (p >= s)
      return emitOpError("output_padding ") << p << " is not below its stride " << s
                                            << "; no VJP";
  Location loc = getLoc();
  Value g = resultGrads[0];
  if (needed[0])
    og[0] = ConvOp::create(b, loc, g, getW(), Value(), getStridesAttr(), getPadsAttr(),
                           getDilationsAttr(), getGroupAttr(), StringAttr(), FloatAttr(),
                           FloatAttr(), FloatAttr(), FloatAttr());
  if (needed[1])
    og[1] = ConvGradWeightOp::create(b, loc, getW().getType(), g, getX(), getStridesAttr(),
                                     getPadsAttr(), getDilationsAttr(), getGroupAttr());
  if (getBias() && needed[2])
    og[2] = biasGrad(b, loc, g, getBias());
  return success();
}

// Each window's cotangent goes back through pool_grad (max: to the window's maximum; avg: spread
// over it; lp: by the norm's derivative).
LogicalResult PoolOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                               SmallVectorImpl<Value> &og) {
  (void)needed;
  og[0] = PoolGradOp::create(b, getLoc(), getX().getType(), getX(), resultGrads[0], getKindAttr(),
                             getKernelShapeAttr(), getStridesAttr(), getPadsAttr(),
                             getDilationsAttr(), getCeilModeAttr(), getCountIncludePadAttr(),
                             getPAttr());
  return success();
}

// The values' cotangent goes back as max pooling's (the same maxima, ties to the first); the
// indices are integers.
LogicalResult MaxPoolWithIndicesOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                             ArrayRef<bool> needed, SmallVectorImpl<Value> &og) {
  (void)needed;
  if (!resultGrads[0])
    return success();
  og[0] = PoolGradOp::create(b, getLoc(), getX().getType(), getX(), resultGrads[0],
                             b.getStringAttr("max"), getKernelShapeAttr(), getStridesAttr(),
                             getPadsAttr(), getDilationsAttr(), getCeilModeAttr(),
                             b.getBoolAttr(false), b.getI64IntegerAttr(2));
  return success();
}

// y[index_shape position indices[j]] = x[j]: dx[j] reads dy there. dy's `index_shape` corner
// (a slice when the output is larger), flattened, is gathered at the flat indices.
LogicalResult MaxUnpoolOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                                    SmallVectorImpl<Value> &og) {
  if (!needed[0])
    return success();
  Location loc = getLoc();
  Value g = resultGrads[0];
  auto gt = rankedType(g);
  auto is = getIndexShape();
  if (ArrayRef<int64_t>(gt.getShape()) != is) {
    SmallVector<int64_t> zeros(is.size(), 0), ones(is.size(), 1);
    g = SliceOp::create(b, loc, RankedTensorType::get(is, gt.getElementType()), g,
                        b.getDenseI64ArrayAttr(zeros), b.getDenseI64ArrayAttr(is),
                        b.getDenseI64ArrayAttr(ones));
  }
  int64_t total = 1;
  for (int64_t d : is)
    total *= d;
  Value flat = ReshapeOp::create(b, loc, RankedTensorType::get({total}, gt.getElementType()), g);
  og[0] = GatherOp::create(b, loc, flat, getIndices(), b.getI64IntegerAttr(0));
  return success();
}

// Resize is linear in x: its VJP is the transpose of the same interpolation.
LogicalResult ResizeOp::buildVJP(OpBuilder &b, ValueRange resultGrads, ArrayRef<bool> needed,
                                 SmallVectorImpl<Value> &og) {
  (void)needed;
  og[0] = ResizeGradOp::create(b, getLoc(), getX().getType(), resultGrads[0], getModeAttr(),
                               getCoordinateTransformationModeAttr(), getNearestModeAttr(),
                               getCubicCoeffAAttr(), getExcludeOutsideAttr(), getScalesAttr(),
                               getRoiAttr());
  return success();
}

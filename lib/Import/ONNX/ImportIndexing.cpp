//===- ImportIndexing.cpp - reductions, indexing and data movement importers ---===//
//
// ONNX ops of the `indexing` family, every attribute form of opsets 7..21
// (https://onnx.ai/onnx/operators/):
//   ReduceMin/Prod/L1/L2/LogSum/LogSumExp/SumSquare → colossal.reduce {kind}
//   ArgMax/ArgMin, CumSum, GatherElements, GatherND, Scatter/ScatterElements, ScatterND, OneHot,
//   TopK, Pad → their colossal ops
//   Hardmax → argmax + one_hot; Tile → reshape + expand + reshape; DepthToSpace/SpaceToDepth →
//   reshape + transpose + reshape; Einsum → diagonal gathers, reduce_sum, transpose, reshape,
//   batched matmul; EyeLike → a constant; Compress with a constant condition → gather.
//   NonZero and Unique fold when their input is a constant.
// Whatever makes an output shape depend on runtime values (NonZero/Unique/Compress of a
// non-constant, TopK's k, Tile's repeats, Pad's pads, OneHot's depth) must be a compile-time
// constant; otherwise the node fails with a diagnostic naming the operand.
//===----------------------------------------------------------------------===//
#include "ImporterImpl.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <map>
#include <numeric>

using namespace mlir;

namespace colossal::onnx_import {
namespace {

using Ctx = NodeContext;


RankedTensorType withShape(RankedTensorType t, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, t.getElementType());
}

Value constI64(Ctx &c, ArrayRef<int64_t> values, ArrayRef<int64_t> shape) {
  return c.constant(
      DenseElementsAttr::get(RankedTensorType::get(shape, c.b.getI64Type()), values));
}

/// `v` converted to `elt` (no-op when it already is).
FailureOr<Value> castTo(Ctx &c, Value v, Type elt) {
  auto t = llvm::cast<RankedTensorType>(v.getType());
  if (t.getElementType() == elt)
    return v;
  return c.makeTyped1<CastOp>(t.clone(elt), v);
}

/// Indices as i32 or i64 (other integer and float types are converted to i64, as ONNX OneHot
/// requires and the other index-taking ops allow).
FailureOr<Value> indexOperand(Ctx &c, size_t i) {
  Type et = c.typeOf(i).getElementType();
  auto it = llvm::dyn_cast<IntegerType>(et);
  if (it && !it.isUnsigned() && (it.getWidth() == 32 || it.getWidth() == 64))
    return c.in[i];
  if (!it && !llvm::isa<FloatType>(et))
    return FailureOr<Value>(c.error("indices of type " + typeStr(et) + " are not supported"));
  return castTo(c, c.in[i], c.b.getI64Type());
}

/// A scalar (rank 0 or one element) constant input as an integer.
FailureOr<int64_t> constScalar(Ctx &c, size_t i, StringRef what) {
  auto t = c.constInput(i, what);
  if (failed(t))
    return failure();
  if (t->numel() != 1)
    return FailureOr<int64_t>(c.error(what + " must hold exactly one value, got " +
                                      Twine(t->numel())));
  return t->isFloat() ? int64_t(t->f[0]) : t->i[0];
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// ONNX ReduceX with `kind` (colossal.reduce). Axes are an attribute before opset 18, an
/// optional input from 18 on; empty axes reduce everything unless noop_with_empty_axes.
LogicalResult importReduceKind(Ctx &c, StringRef kind) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  bool keepdims = c.attrInt("keepdims", 1) != 0;
  bool floatOnly = kind == "l2" || kind == "log_sum" || kind == "log_sum_exp";
  if (floatOnly && !llvm::isa<FloatType>(t.getElementType()))
    return c.error("input of type " + typeStr(t.getElementType()) +
                   " is not supported (floating-point only)");
  if (!llvm::isa<FloatType, IntegerType>(t.getElementType()) || t.getElementType().isInteger(1))
    return c.error("input of type " + typeStr(t.getElementType()) + " is not supported");
  auto axesOr = axesOperand(c, 18, /*required=*/false);
  if (failed(axesOr))
    return failure();
  SmallVector<int64_t> axes = std::move(*axesOr);
  auto make = [&](Value x, ArrayRef<int64_t> ax, bool keep) {
    return c.make<ReduceOp>(x, c.b.getDenseI64ArrayAttr(ax), c.b.getBoolAttr(keep),
                            c.b.getStringAttr(kind));
  };
  // A reduction over one unit dim applies the kind's elementwise part (|x|, x², log x, ...):
  // that is what a rank-0 input and noop_with_empty_axes need.
  auto unitReduce = [&]() -> LogicalResult {
    SmallVector<int64_t> shape(t.getShape());
    shape.push_back(1);
    auto r = c.reshape(c.in[0], shape);
    if (failed(r))
      return failure();
    return setOut(c, make(*r, {t.getRank()}, false));
  };
  if (axes.empty()) {
    if (c.attrInt("noop_with_empty_axes", 0) || t.getRank() == 0)
      return unitReduce();
    for (int64_t d = 0; d < t.getRank(); ++d)
      axes.push_back(d);
  }
  SmallVector<int64_t> norm;
  for (int64_t a : axes) {
    auto n = c.normAxis(a, t.getRank(), "axes entry");
    if (failed(n))
      return failure();
    if (llvm::is_contained(norm, *n))
      return c.error("axes entry " + Twine(a) + " is repeated");
    norm.push_back(*n);
  }
  llvm::sort(norm);
  return setOut(c, make(c.in[0], norm, keepdims));
}

template <typename OpTy> LogicalResult importArgReduce(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() == 0)
    return c.error("input must have rank >= 1");
  if (!llvm::isa<FloatType, IntegerType>(t.getElementType()))
    return c.error("input of type " + typeStr(t.getElementType()) + " is not supported");
  auto axis = c.normAxis(c.attrInt("axis", 0), t.getRank());
  if (failed(axis))
    return failure();
  return setOut(c, c.make<OpTy>(c.in[0], c.b.getI64IntegerAttr(*axis),
                                c.b.getBoolAttr(c.attrInt("keepdims", 1) != 0),
                                c.b.getBoolAttr(c.attrInt("select_last_index", 0) != 0)));
}

LogicalResult importCumSum(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() == 0)
    return c.error("input must have rank >= 1");
  auto axisV = constScalar(c, 1, "axis");
  if (failed(axisV))
    return failure();
  auto axis = c.normAxis(*axisV, t.getRank());
  if (failed(axis))
    return failure();
  return setOut(c, c.makeTyped1<CumSumOp>(t, c.in[0], c.b.getI64IntegerAttr(*axis),
                                          c.b.getBoolAttr(c.attrInt("exclusive", 0) != 0),
                                          c.b.getBoolAttr(c.attrInt("reverse", 0) != 0)));
}

/// Hardmax = one_hot(argmax(x, axis), [0, 1], axis): 1 at the first maximum along `axis`.
/// Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])].
LogicalResult importHardmax(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  int64_t rank = t.getRank();
  if (rank == 0)
    return c.error("input must have rank >= 1");
  if (!llvm::isa<FloatType>(t.getElementType()))
    return c.error("input of type " + typeStr(t.getElementType()) + " is not supported");
  auto axis = c.normAxis(c.attrInt("axis", c.opset < 13 ? 1 : -1), rank);
  if (failed(axis))
    return failure();
  Value x = c.in[0];
  int64_t ax = *axis;
  if (c.opset < 13 && ax != rank - 1) {
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < ax ? outer : inner) *= t.getDimSize(d);
    auto flat = c.reshape(x, {outer, inner});
    if (failed(flat))
      return failure();
    x = *flat;
    ax = 1;
  }
  auto xt = llvm::cast<RankedTensorType>(x.getType());
  if (xt.getDimSize(ax) == 0) {
    c.out.push_back(c.in[0]);
    return success();
  }
  auto arg = c.make<ArgMaxOp>(x, c.b.getI64IntegerAttr(ax), c.b.getBoolAttr(false),
                              c.b.getBoolAttr(false));
  if (failed(arg))
    return failure();
  HostTensor vals = HostTensor::zeros(RankedTensorType::get({2}, t.getElementType()));
  vals.f = {0.0, 1.0};
  auto oh = c.makeTyped1<OneHotOp>(xt, *arg, c.constant(vals.toAttr()), c.b.getI64IntegerAttr(ax));
  if (failed(oh))
    return failure();
  return setOut(c, c.reshape(*oh, t.getShape()));
}

//===----------------------------------------------------------------------===//
// Gathers and scatters
//===----------------------------------------------------------------------===//

LogicalResult importGatherElements(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto axis = c.normAxis(c.attrInt("axis", 0), c.typeOf(0).getRank());
  if (failed(axis))
    return failure();
  auto idx = indexOperand(c, 1);
  if (failed(idx))
    return failure();
  return setOut(c, c.make<GatherElementsOp>(c.in[0], *idx, c.b.getI64IntegerAttr(*axis)));
}

LogicalResult importGatherND(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto idx = indexOperand(c, 1);
  if (failed(idx))
    return failure();
  return setOut(c, c.make<GatherNDOp>(c.in[0], *idx,
                                      c.b.getI64IntegerAttr(c.attrInt("batch_dims", 0))));
}

FailureOr<std::string> scatterReduction(Ctx &c) {
  std::string r = c.attrString("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    return FailureOr<std::string>(
        c.error("attribute 'reduction' must be none, add, mul, max or min, got '" + r + "'"));
  return r;
}

LogicalResult importScatterElements(Ctx &c) {
  if (failed(c.requireInputs(3)))
    return failure();
  auto axis = c.normAxis(c.attrInt("axis", 0), c.typeOf(0).getRank());
  auto red = scatterReduction(c);
  auto idx = indexOperand(c, 1);
  if (failed(axis) || failed(red) || failed(idx))
    return failure();
  return setOut(c, c.make<ScatterElementsOp>(c.in[0], *idx, c.in[2], c.b.getI64IntegerAttr(*axis),
                                             c.b.getStringAttr(*red)));
}

LogicalResult importScatterND(Ctx &c) {
  if (failed(c.requireInputs(3)))
    return failure();
  auto red = scatterReduction(c);
  auto idx = indexOperand(c, 1);
  if (failed(red) || failed(idx))
    return failure();
  return setOut(c, c.make<ScatterNDOp>(c.in[0], *idx, c.in[2], c.b.getStringAttr(*red)));
}

LogicalResult importOneHot(Ctx &c) {
  if (failed(c.requireInputs(3)))
    return failure();
  auto depth = constScalar(c, 1, "depth");
  if (failed(depth))
    return failure();
  if (*depth < 1)
    return c.error("depth must be positive, got " + Twine(*depth));
  auto it = c.typeOf(0);
  auto axis = c.normAxis(c.attrInt("axis", -1), it.getRank() + 1);
  auto idx = indexOperand(c, 0);
  if (failed(axis) || failed(idx))
    return failure();
  auto vt = c.typeOf(2);
  if (vt.getNumElements() != 2)
    return c.error("values must hold exactly two elements [off, on]");
  auto vals = c.reshape(c.in[2], {2});
  if (failed(vals))
    return failure();
  SmallVector<int64_t> shape(it.getShape());
  shape.insert(shape.begin() + *axis, *depth);
  return setOut(c, c.makeTyped1<OneHotOp>(withShape(vt, shape), *idx, *vals,
                                          c.b.getI64IntegerAttr(*axis)));
}

LogicalResult importTopK(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() == 0)
    return c.error("input must have rank >= 1");
  int64_t k;
  if (c.opset < 10) {
    const auto *a = c.attr("k");
    if (!a)
      return c.error("missing required attribute 'k'");
    k = a->i();
  } else {
    if (failed(c.requireInputs(2)))
      return failure();
    auto kv = constScalar(c, 1, "k");
    if (failed(kv))
      return failure();
    k = *kv;
  }
  auto axis = c.normAxis(c.attrInt("axis", -1), t.getRank());
  if (failed(axis))
    return failure();
  if (k < 0 || k > t.getDimSize(*axis))
    return c.error("k = " + Twine(k) + " is outside [0, " + Twine(t.getDimSize(*axis)) + "]");
  SmallVector<int64_t> shape(t.getShape());
  shape[*axis] = k;
  auto r = c.makeTyped<TopKOp>(
      TypeRange{withShape(t, shape), RankedTensorType::get(shape, c.b.getI64Type())}, c.in[0],
      c.b.getI64IntegerAttr(*axis), c.b.getBoolAttr(c.attrInt("largest", 1) != 0),
      c.b.getBoolAttr(c.attrInt("sorted", 1) != 0));
  if (failed(r))
    return failure();
  c.out.append(r->begin(), r->end());
  return success();
}

//===----------------------------------------------------------------------===//
// Padding and re-layouts
//===----------------------------------------------------------------------===//

LogicalResult importPad(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  int64_t r = t.getRank();
  std::string mode = c.attrString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && !(mode == "wrap" && c.opset >= 19))
    return c.error("attribute 'mode' must be constant, reflect, edge" +
                   std::string(c.opset >= 19 ? " or wrap" : "") + ", got '" + mode + "'");
  SmallVector<int64_t> pads;
  Value value;
  if (c.opset < 11) {
    auto p = c.attrInts(c.opset < 2 ? "paddings" : "pads");
    if (!p)
      return c.error("missing required attribute 'pads'");
    pads = *p;
    float v = c.attrFloat("value", 0.0f);
    if (v != 0.0f) {
      HostTensor h = HostTensor::zeros(RankedTensorType::get({}, t.getElementType()));
      if (h.isFloat())
        h.f[0] = v;
      else
        h.i[0] = int64_t(v);
      value = c.constant(h.toAttr());
    }
  } else {
    if (failed(c.requireInputs(2)))
      return failure();
    auto p = c.constInts(1, "pads");
    if (failed(p))
      return failure();
    pads = *p;
    if (c.has(2) && mode == "constant") {
      if (c.typeOf(2).getNumElements() != 1)
        return c.error("constant_value must hold exactly one element");
      if (c.typeOf(2).getElementType() != t.getElementType())
        return c.error("constant_value's type differs from the input's");
      auto v = c.reshape(c.in[2], {});
      if (failed(v))
        return failure();
      value = *v;
    }
  }
  // Opset 18: `axes` selects the dims that `pads` covers.
  if (c.opset >= 18 && c.has(3)) {
    auto axes = c.constInts(3, "axes");
    if (failed(axes))
      return failure();
    if (pads.size() != 2 * axes->size())
      return c.error("pads has " + Twine(pads.size()) + " entries for " + Twine(axes->size()) +
                     " axes");
    SmallVector<int64_t> full(2 * r, 0);
    for (size_t i = 0; i < axes->size(); ++i) {
      auto a = c.normAxis((*axes)[i], r, "axes entry");
      if (failed(a))
        return failure();
      full[*a] = pads[i];
      full[*a + r] = pads[i + axes->size()];
    }
    pads = full;
  }
  if (int64_t(pads.size()) != 2 * r)
    return c.error("pads has " + Twine(pads.size()) + " entries for rank " + Twine(r));
  if (llvm::all_of(pads, [](int64_t p) { return p == 0; })) {
    c.out.push_back(c.in[0]);
    return success();
  }
  return setOut(c, c.make<PadOp>(c.in[0], value, c.b.getDenseI64ArrayAttr(pads),
                                 c.b.getStringAttr(mode)));
}

/// Tile: x [d0..] → reshape [1, d0, 1, d1, ...] → expand [r0, d0, r1, d1, ...] → reshape
/// [r0·d0, ...]; dims repeated once keep no unit dim.
LogicalResult importTile(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto t = c.typeOf(0);
  auto reps = c.constInts(1, "repeats");
  if (failed(reps))
    return failure();
  if (int64_t(reps->size()) != t.getRank())
    return c.error("repeats has " + Twine(reps->size()) + " entries for rank " +
                   Twine(t.getRank()));
  SmallVector<int64_t> split, expanded, result;
  for (int64_t d = 0; d < t.getRank(); ++d) {
    int64_t rp = (*reps)[d], n = t.getDimSize(d);
    if (rp < 0)
      return c.error("repeats entry " + Twine(rp) + " is negative");
    if (rp != 1) {
      split.push_back(1);
      expanded.push_back(rp);
    }
    split.push_back(n);
    expanded.push_back(n);
    result.push_back(rp * n);
  }
  if (split.size() == size_t(t.getRank())) {
    c.out.push_back(c.in[0]);
    return success();
  }
  auto r = c.reshape(c.in[0], split);
  if (failed(r))
    return failure();
  auto e = c.makeTyped1<ExpandOp>(withShape(t, expanded), *r);
  if (failed(e))
    return failure();
  return setOut(c, c.reshape(*e, result));
}

/// reshape → transpose → reshape.
LogicalResult relayout(Ctx &c, Value x, ArrayRef<int64_t> split, ArrayRef<int64_t> perm,
                       ArrayRef<int64_t> result) {
  auto r = c.reshape(x, split);
  if (failed(r))
    return failure();
  auto tr = c.make<TransposeOp>(*r, c.b.getDenseI64ArrayAttr(perm));
  if (failed(tr))
    return failure();
  return setOut(c, c.reshape(*tr, result));
}

LogicalResult importDepthToSpace(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() != 4)
    return c.error("input must be 4-D [N, C, H, W]");
  int64_t b = c.attrInt("blocksize", 0);
  int64_t n = t.getDimSize(0), ch = t.getDimSize(1), h = t.getDimSize(2), w = t.getDimSize(3);
  if (b <= 0 || ch % (b * b) != 0)
    return c.error("blocksize " + Twine(b) + " must be positive and its square divide C = " +
                   Twine(ch));
  std::string mode = c.attrString("mode", "DCR");
  int64_t oc = ch / (b * b);
  if (mode == "DCR")
    return relayout(c, c.in[0], {n, b, b, oc, h, w}, {0, 3, 4, 1, 5, 2}, {n, oc, h * b, w * b});
  if (mode == "CRD")
    return relayout(c, c.in[0], {n, oc, b, b, h, w}, {0, 1, 4, 2, 5, 3}, {n, oc, h * b, w * b});
  return c.error("attribute 'mode' must be DCR or CRD, got '" + mode + "'");
}

LogicalResult importSpaceToDepth(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() != 4)
    return c.error("input must be 4-D [N, C, H, W]");
  int64_t b = c.attrInt("blocksize", 0);
  int64_t n = t.getDimSize(0), ch = t.getDimSize(1), h = t.getDimSize(2), w = t.getDimSize(3);
  if (b <= 0 || h % b != 0 || w % b != 0)
    return c.error("blocksize " + Twine(b) + " must be positive and divide H = " + Twine(h) +
                   " and W = " + Twine(w));
  return relayout(c, c.in[0], {n, ch, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4},
                  {n, ch * b * b, h / b, w / b});
}

LogicalResult importEyeLike(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() != 2)
    return c.error("input must be 2-D");
  Type et = t.getElementType();
  if (const auto *a = c.attr("dtype")) {
    et = elementTypeFor(a->i(), c.ctx());
    if (!et)
      return c.error("dtype " + onnxTypeName(a->i()) + " is not supported");
  }
  int64_t k = c.attrInt("k", 0), rows = t.getDimSize(0), cols = t.getDimSize(1);
  if (t.getNumElements() > kMaxFoldElements)
    return c.error("EyeLike of " + Twine(t.getNumElements()) +
                   " elements is too large to build at compile time");
  HostTensor out = HostTensor::zeros(RankedTensorType::get(t.getShape(), et));
  for (int64_t i = 0; i < rows; ++i) {
    int64_t j = i + k;
    if (j < 0 || j >= cols)
      continue;
    if (out.isFloat())
      out.f[i * cols + j] = 1.0;
    else
      out.i[i * cols + j] = 1;
  }
  c.out.push_back(c.constant(out.toAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Ops whose output shape depends on values: static only when those values are constants
//===----------------------------------------------------------------------===//

/// The constant value of input `i`, or an error saying that `op`'s output shape depends on it.
FailureOr<HostTensor> valueDependentInput(Ctx &c, size_t i, StringRef what) {
  Attribute value;
  if (!c.has(i) || !matchPattern(c.in[i], m_Constant(&value)))
    return FailureOr<HostTensor>(c.error(
        "input " + Twine(i) + " (" + what + ", '" + (c.has(i) ? c.node.input(i) : "") +
        "') must be a compile-time constant: " + c.node.op_type() +
        "'s output shape depends on its values and dynamic output shapes are not supported" +
        (c.has(i) ? "; " + c.dependence(c.in[i]) : std::string())));
  auto h = HostTensor::from(value);
  if (!h)
    return FailureOr<HostTensor>(c.error("input " + Twine(i) + " (" + what +
                                         ") is too large to evaluate"));
  return *h;
}

LogicalResult importCompress(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto cond = valueDependentInput(c, 1, "condition");
  if (failed(cond))
    return failure();
  if (cond->type.getRank() != 1)
    return c.error("condition must be 1-D");
  auto t = c.typeOf(0);
  Value x = c.in[0];
  int64_t axis = 0;
  if (const auto *a = c.attr("axis")) {
    auto n = c.normAxis(a->i(), t.getRank());
    if (failed(n))
      return failure();
    axis = *n;
  } else {
    auto flat = c.reshape(x, {t.getNumElements()});
    if (failed(flat))
      return failure();
    x = *flat;
  }
  int64_t n = llvm::cast<RankedTensorType>(x.getType()).getDimSize(axis);
  if (cond->numel() > n)
    return c.error("condition has " + Twine(cond->numel()) + " entries for a dim of size " +
                   Twine(n));
  SmallVector<int64_t> picked;
  for (int64_t k = 0; k < cond->numel(); ++k)
    if (cond->asInt(k) != 0)
      picked.push_back(k);
  return setOut(c, c.make<GatherOp>(x, constI64(c, picked, {int64_t(picked.size())}),
                                    c.b.getI64IntegerAttr(axis)));
}

LogicalResult importNonZero(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto x = valueDependentInput(c, 0, "X");
  if (failed(x))
    return failure();
  auto shape = x->type.getShape();
  int64_t rank = shape.size();
  SmallVector<SmallVector<int64_t>> coords(std::max<int64_t>(rank, 1));
  SmallVector<int64_t> idx;
  int64_t nnz = 0;
  for (int64_t k = 0; k < x->numel(); ++k) {
    if (x->asDouble(k) == 0.0)
      continue;
    unflatten(k, shape, idx);
    for (int64_t d = 0; d < rank; ++d)
      coords[d].push_back(idx[d]);
    ++nnz;
  }
  // A scalar input yields [1, nnz] of zeros (ONNX treats it as rank 1).
  int64_t rows = std::max<int64_t>(rank, 1);
  SmallVector<int64_t> flat;
  for (int64_t d = 0; d < rows; ++d)
    for (int64_t j = 0; j < nnz; ++j)
      flat.push_back(rank ? coords[d][j] : 0);
  c.out.push_back(constI64(c, flat, {rows, nnz}));
  return success();
}

/// Unique of a constant: slices along `axis` (or elements when absent), sorted or in order of
/// first occurrence; outputs Y, indices, inverse_indices, counts.
LogicalResult importUnique(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto x = valueDependentInput(c, 0, "X");
  if (failed(x))
    return failure();
  bool sorted = c.attrInt("sorted", 1) != 0;
  HostTensor in = *x;
  int64_t axis = 0;
  if (const auto *a = c.attr("axis")) {
    auto n = c.normAxis(a->i(), in.type.getRank());
    if (failed(n))
      return failure();
    axis = *n;
  } else {
    in.type = RankedTensorType::get({in.numel()}, in.type.getElementType());
  }
  auto shape = in.type.getShape();
  int64_t outer = 1, n = shape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (int64_t d = axis + 1; d < int64_t(shape.size()); ++d)
    inner *= shape[d];
  // Slice s as a vector of doubles (exact for the integer and float types we import).
  auto slice = [&](int64_t s) {
    std::vector<double> v;
    v.reserve(outer * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j)
        v.push_back(in.asDouble((o * n + s) * inner + j));
    return v;
  };
  std::vector<std::vector<double>> slices;
  for (int64_t s = 0; s < n; ++s)
    slices.push_back(slice(s));
  std::vector<int64_t> first, inverse(n), counts; // per unique: first index, count
  std::vector<int64_t> order;                      // unique ids in output order
  std::map<std::vector<double>, int64_t> seen;
  for (int64_t s = 0; s < n; ++s) {
    auto [it, inserted] = seen.try_emplace(slices[s], int64_t(first.size()));
    if (inserted) {
      first.push_back(s);
      counts.push_back(0);
    }
    inverse[s] = it->second;
    ++counts[it->second];
  }
  int64_t u = first.size();
  order.resize(u);
  std::iota(order.begin(), order.end(), 0);
  if (sorted)
    llvm::stable_sort(order, [&](int64_t a, int64_t b) { return slices[first[a]] < slices[first[b]]; });
  std::vector<int64_t> rank(u);
  for (int64_t p = 0; p < u; ++p)
    rank[order[p]] = p;
  SmallVector<int64_t> yShape(shape);
  yShape[axis] = u;
  HostTensor y = HostTensor::zeros(RankedTensorType::get(yShape, in.type.getElementType()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < u; ++p)
      for (int64_t j = 0; j < inner; ++j) {
        int64_t src = (o * n + first[order[p]]) * inner + j, dst = (o * u + p) * inner + j;
        if (y.isFloat())
          y.f[dst] = in.f[src];
        else
          y.i[dst] = in.i[src];
      }
  SmallVector<int64_t> idxOut, inv, cnt;
  for (int64_t p = 0; p < u; ++p) {
    idxOut.push_back(first[order[p]]);
    cnt.push_back(counts[order[p]]);
  }
  for (int64_t s = 0; s < n; ++s)
    inv.push_back(rank[inverse[s]]);
  c.out.push_back(c.constant(y.toAttr()));
  c.out.push_back(constI64(c, idxOut, {u}));
  c.out.push_back(constI64(c, inv, {n}));
  c.out.push_back(constI64(c, cnt, {u}));
  return success();
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

/// An operand during the Einsum lowering: a value and one label per dim.
struct Labeled {
  Value v;
  SmallVector<int> labels;
  ArrayRef<int64_t> shape() const { return llvm::cast<RankedTensorType>(v.getType()).getShape(); }
};

/// Parses one operand term ("ij", "...ij", "b...") into labels; the ellipsis becomes labels
/// -1, -2, ... numbered from the right so that broadcast ellipsis dims align.
FailureOr<SmallVector<int>> parseTerm(Ctx &c, StringRef term, int64_t rank, int64_t &ellipsisRank) {
  SmallVector<int> labels;
  size_t dots = term.find("...");
  StringRef before = dots == StringRef::npos ? term : term.take_front(dots);
  StringRef after = dots == StringRef::npos ? StringRef() : term.drop_front(dots + 3);
  auto letters = [&](StringRef s) -> LogicalResult {
    for (char ch : s) {
      if (!llvm::isAlpha(ch))
        return c.error("equation term '" + term + "' has an invalid character '" + Twine(ch) + "'");
      labels.push_back(ch);
    }
    return success();
  };
  if (failed(letters(before)))
    return failure();
  int64_t named = before.size() + after.size();
  if (dots != StringRef::npos) {
    int64_t e = rank - named;
    if (e < 0)
      return FailureOr<SmallVector<int>>(
          c.error("equation term '" + term + "' has more labels than the operand's rank"));
    ellipsisRank = std::max(ellipsisRank, e);
    for (int64_t k = e; k >= 1; --k)
      labels.push_back(-int(k));
  }
  if (failed(letters(after)))
    return failure();
  if (int64_t(labels.size()) != rank)
    return FailureOr<SmallVector<int>>(c.error("equation term '" + term + "' has " +
                                               Twine(labels.size()) + " labels for rank " +
                                               Twine(rank)));
  return labels;
}

/// Takes diagonals until no label repeats: dims i < j with one label become one dim.
LogicalResult einsumDiagonals(Ctx &c, Labeled &op) {
  for (;;) {
    int i = -1, j = -1;
    for (size_t a = 0; a < op.labels.size() && i < 0; ++a)
      for (size_t b = a + 1; b < op.labels.size(); ++b)
        if (op.labels[a] == op.labels[b]) {
          i = a;
          j = b;
          break;
        }
    if (i < 0)
      return success();
    auto shape = op.shape();
    int64_t n = shape[i];
    if (shape[j] != n)
      return c.error("label repeated on dims of sizes " + Twine(n) + " and " + Twine(shape[j]));
    // Move i and j last, flatten them to n·n and gather the n diagonal positions k·(n+1).
    SmallVector<int64_t> perm, tshape;
    SmallVector<int> labels;
    for (int64_t d = 0; d < int64_t(shape.size()); ++d)
      if (d != i && d != j) {
        perm.push_back(d);
        tshape.push_back(shape[d]);
        labels.push_back(op.labels[d]);
      }
    perm.push_back(i);
    perm.push_back(j);
    auto tr = c.make<TransposeOp>(op.v, c.b.getDenseI64ArrayAttr(perm));
    if (failed(tr))
      return failure();
    SmallVector<int64_t> flat(tshape);
    flat.push_back(n * n);
    auto r = c.reshape(*tr, flat);
    if (failed(r))
      return failure();
    SmallVector<int64_t> diag;
    for (int64_t k = 0; k < n; ++k)
      diag.push_back(k * (n + 1));
    auto g = c.make<GatherOp>(*r, constI64(c, diag, {n}), c.b.getI64IntegerAttr(flat.size() - 1));
    if (failed(g))
      return failure();
    labels.push_back(op.labels[i]);
    op.v = *g;
    op.labels = labels;
  }
}

/// Sums out the dims whose labels `keep` rejects.
LogicalResult einsumSumOut(Ctx &c, Labeled &op, llvm::function_ref<bool(int)> keep) {
  SmallVector<int64_t> axes;
  SmallVector<int> labels;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (keep(op.labels[d]))
      labels.push_back(op.labels[d]);
    else
      axes.push_back(d);
  }
  if (axes.empty())
    return success();
  auto r = c.make<ReduceSumOp>(op.v, c.b.getDenseI64ArrayAttr(axes), c.b.getBoolAttr(false));
  if (failed(r))
    return failure();
  op.v = *r;
  op.labels = labels;
  return success();
}

/// Transposes `op` so that its labels read `order` (a permutation of them).
LogicalResult einsumPermute(Ctx &c, Labeled &op, ArrayRef<int> order) {
  SmallVector<int64_t> perm;
  for (int l : order)
    perm.push_back(llvm::find(op.labels, l) - op.labels.begin());
  auto tr = c.make<TransposeOp>(op.v, c.b.getDenseI64ArrayAttr(perm));
  if (failed(tr))
    return failure();
  op.v = *tr;
  op.labels.assign(order.begin(), order.end());
  return success();
}

/// a·b contracted over the labels both share and `needed` rejects, as one batched matmul:
/// a → [batch, aOnly, contract] → [B, M, K], b → [batch, contract, bOnly] → [B, K, N].
FailureOr<Labeled> einsumPair(Ctx &c, Labeled a, Labeled b, llvm::function_ref<bool(int)> needed) {
  SmallVector<int> batch, aOnly, bOnly, contract;
  std::map<int, int64_t> size;
  for (size_t d = 0; d < a.labels.size(); ++d)
    size[a.labels[d]] = a.shape()[d];
  for (size_t d = 0; d < b.labels.size(); ++d) {
    int l = b.labels[d];
    int64_t n = b.shape()[d];
    if (size.count(l) && size[l] != n && size[l] != 1 && n != 1)
      return FailureOr<Labeled>(c.error("label sizes " + Twine(size[l]) + " and " + Twine(n) +
                                        " do not match"));
    size[l] = size.count(l) ? std::max(size[l], n) : n;
  }
  for (int l : a.labels) {
    if (!llvm::is_contained(b.labels, l))
      aOnly.push_back(l);
    else if (needed(l))
      batch.push_back(l);
    else
      contract.push_back(l);
  }
  for (int l : b.labels)
    if (!llvm::is_contained(a.labels, l))
      bOnly.push_back(l);
  auto prod = [&](ArrayRef<int> ls) {
    int64_t p = 1;
    for (int l : ls)
      p *= size[l];
    return p;
  };
  // Lay out each side, broadcasting size-1 (ellipsis) dims of batch and contracted labels.
  auto prepare = [&](Labeled &op, ArrayRef<int> first, ArrayRef<int> second,
                     ArrayRef<int> third) -> FailureOr<Value> {
    SmallVector<int> order(first);
    order.append(second.begin(), second.end());
    order.append(third.begin(), third.end());
    if (failed(einsumPermute(c, op, order)))
      return failure();
    SmallVector<int64_t> full;
    for (int l : order)
      full.push_back(size[l]);
    Value v = op.v;
    if (op.shape() != ArrayRef<int64_t>(full)) {
      auto e = c.makeTyped1<ExpandOp>(withShape(llvm::cast<RankedTensorType>(v.getType()), full), v);
      if (failed(e))
        return failure();
      v = *e;
    }
    return c.reshape(v, {prod(first), prod(second), prod(third)});
  };
  auto av = prepare(a, batch, aOnly, contract);
  if (failed(av))
    return failure();
  auto bv = prepare(b, batch, contract, bOnly);
  if (failed(bv))
    return failure();
  auto mm = c.make<MatMulOp>(*av, *bv);
  if (failed(mm))
    return failure();
  Labeled out;
  out.labels.append(batch.begin(), batch.end());
  out.labels.append(aOnly.begin(), aOnly.end());
  out.labels.append(bOnly.begin(), bOnly.end());
  SmallVector<int64_t> shape;
  for (int l : out.labels)
    shape.push_back(size[l]);
  auto r = c.reshape(*mm, shape);
  if (failed(r))
    return failure();
  out.v = *r;
  return out;
}

LogicalResult importEinsum(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  std::string eq;
  for (char ch : c.attrString("equation", ""))
    if (!std::isspace(static_cast<unsigned char>(ch)))
      eq.push_back(ch);
  if (eq.empty())
    return c.error("missing required attribute 'equation'");
  StringRef lhs = eq, rhs;
  bool explicitOut = false;
  if (size_t arrow = lhs.find("->"); arrow != StringRef::npos) {
    rhs = lhs.drop_front(arrow + 2);
    lhs = lhs.take_front(arrow);
    explicitOut = true;
  }
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  if (terms.size() != c.in.size())
    return c.error("equation has " + Twine(terms.size()) + " operand terms for " +
                   Twine(c.in.size()) + " inputs");
  Type et = c.typeOf(0).getElementType();
  int64_t ellipsisRank = 0;
  SmallVector<Labeled> ops;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (c.typeOf(i).getElementType() != et)
      return c.error("inputs differ in element type");
    auto labels = parseTerm(c, terms[i], c.typeOf(i).getRank(), ellipsisRank);
    if (failed(labels))
      return failure();
    ops.push_back({c.in[i], *labels});
  }
  SmallVector<int> outLabels;
  if (explicitOut) {
    // The output's rank: its letters plus the broadcast rank of the inputs' ellipses.
    int64_t letters = llvm::count_if(rhs, [](char ch) { return llvm::isAlpha(ch); });
    auto parsed = parseTerm(c, rhs, letters + (rhs.contains("...") ? ellipsisRank : 0),
                            ellipsisRank);
    if (failed(parsed))
      return failure();
    outLabels = *parsed;
  } else {
    // Implicit output: the ellipsis dims, then the labels used exactly once, alphabetically.
    for (int64_t k = ellipsisRank; k >= 1; --k)
      outLabels.push_back(-int(k));
    std::map<int, int> uses;
    for (auto &op : ops)
      for (int l : op.labels)
        ++uses[l];
    for (auto [l, n] : uses)
      if (l > 0 && n == 1)
        outLabels.push_back(l);
  }
  for (int l : outLabels)
    if (llvm::none_of(ops, [&](const Labeled &op) { return llvm::is_contained(op.labels, l); }))
      return c.error("output label '" + Twine(char(l)) + "' appears in no input");
  // Per operand: diagonals, then sum out labels no one else needs.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (failed(einsumDiagonals(c, ops[i])))
      return failure();
    auto keep = [&](int l) {
      if (llvm::is_contained(outLabels, l))
        return true;
      for (size_t j = 0; j < ops.size(); ++j)
        if (j != i && llvm::is_contained(ops[j].labels, l))
          return true;
      return false;
    };
    if (failed(einsumSumOut(c, ops[i], keep)))
      return failure();
  }
  // Left to right: contract each operand into the running result.
  Labeled acc = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    auto needed = [&](int l) {
      if (llvm::is_contained(outLabels, l))
        return true;
      for (size_t j = i + 1; j < ops.size(); ++j)
        if (llvm::is_contained(ops[j].labels, l))
          return true;
      return false;
    };
    auto r = einsumPair(c, acc, ops[i], needed);
    if (failed(r))
      return failure();
    acc = *r;
  }
  if (failed(einsumSumOut(c, acc, [&](int l) { return llvm::is_contained(outLabels, l); })))
    return failure();
  if (acc.labels.size() != outLabels.size())
    return c.error("output term repeats a label");
  if (failed(einsumPermute(c, acc, outLabels)))
    return failure();
  c.out.push_back(acc.v);
  return success();
}

} // namespace

void registerIndexingImporters(ImporterTable &table) {
  static const std::pair<const char *, OpImporter> ops[] = {
      {"ReduceMin", [](Ctx &c) { return importReduceKind(c, "min"); }},
      {"ReduceProd", [](Ctx &c) { return importReduceKind(c, "prod"); }},
      {"ReduceL1", [](Ctx &c) { return importReduceKind(c, "l1"); }},
      {"ReduceL2", [](Ctx &c) { return importReduceKind(c, "l2"); }},
      {"ReduceLogSum", [](Ctx &c) { return importReduceKind(c, "log_sum"); }},
      {"ReduceLogSumExp", [](Ctx &c) { return importReduceKind(c, "log_sum_exp"); }},
      {"ReduceSumSquare", [](Ctx &c) { return importReduceKind(c, "sum_square"); }},
      {"ArgMax", importArgReduce<ArgMaxOp>},
      {"ArgMin", importArgReduce<ArgMinOp>},
      {"CumSum", importCumSum},
      {"Hardmax", importHardmax},
      {"GatherElements", importGatherElements},
      {"GatherND", importGatherND},
      {"Scatter", importScatterElements},
      {"ScatterElements", importScatterElements},
      {"ScatterND", importScatterND},
      {"OneHot", importOneHot},
      {"TopK", importTopK},
      {"Pad", importPad},
      {"Tile", importTile},
      {"DepthToSpace", importDepthToSpace},
      {"SpaceToDepth", importSpaceToDepth},
      {"EyeLike", importEyeLike},
      {"Compress", importCompress},
      {"NonZero", importNonZero},
      {"Unique", importUnique},
      {"Einsum", importEinsum},
  };
  for (const auto &[name, fn] : ops)
    table[name] = fn;
}

} // namespace colossal::onnx_import

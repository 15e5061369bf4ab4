//===- OpImporters.cpp - one function per ONNX operator ------------------===//
//
// Each importer reads the node's inputs and attributes as the ONNX operator spec defines them for
// the node's opset (https://onnx.ai/onnx/operators/), including the older attribute forms (axes,
// split, starts/ends as attributes before they became inputs), normalizes negative axes, and
// emits colossal ops. Operands that decide shapes must be compile-time constants.
//===----------------------------------------------------------------------===//
#include "ImporterImpl.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace colossal::onnx_import {
namespace {

using Ctx = NodeContext;

RankedTensorType withShape(RankedTensorType t, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, t.getElementType());
}

LogicalResult requireFloat(Ctx &c, size_t i) {
  if (!llvm::isa<FloatType>(c.typeOf(i).getElementType()))
    return c.error("input " + Twine(i) + " has element type " +
                   typeStr(c.typeOf(i).getElementType()) +
                   "; only floating-point types are supported here");
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// The initializer (a weight or a Constant node) that `v` reads through data movement alone —
/// reshape, transpose, slice, gather's table, expand, cast —, or an empty string when `v` is
/// computed from the inputs. Names a position table in a broadcast error.
std::string tableOrigin(const Ctx &c, Value v) {
  for (int hops = 0; hops < 16 && v; ++hops) {
    if (auto arg = llvm::dyn_cast<BlockArgument>(v)) {
      // A parameter (an initializer) or a graph input: both are named by their location.
      auto loc = llvm::dyn_cast<NameLoc>(arg.getLoc());
      return loc && isInitializerName(c.graph, loc.getName().strref()) ? loc.getName().str() : "";
    }
    Operation *op = v.getDefiningOp();
    if (!op)
      return "";
    if (auto cst = llvm::dyn_cast<ConstantOp>(op)) {
      if (auto loc = llvm::dyn_cast<NameLoc>(cst.getLoc()))
        return loc.getName().str();
      return "a constant";
    }
    if (!llvm::isa<ReshapeOp, TransposeOp, SliceOp, GatherOp, ExpandOp, CastOp>(op))
      return "";
    v = op->getOperand(0);
  }
  return "";
}

/// Elementwise binary ops broadcast their operands (ONNX broadcasting). When they do not, and one
/// side is read from an initializer, the error says so: the usual cause is an input longer than a
/// table the model was exported with (learned positions, RoPE's cos/sin), which otherwise only
/// surfaces as a shape clash deep inside the graph.
template <typename OpTy> LogicalResult binary(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto a = llvm::dyn_cast<RankedTensorType>(c.in[0].getType()), b = llvm::dyn_cast<RankedTensorType>(c.in[1].getType());
  SmallVector<int64_t> shape;
  if (a && b && !colossal::broadcastShapes(a.getShape(), b.getShape(), shape)) {
    const int64_t rank = std::max(a.getRank(), b.getRank());
    auto dimOf = [&](RankedTensorType t, int64_t i) { return i < rank - t.getRank() ? 1 : t.getDimSize(i - (rank - t.getRank())); };
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t da = dimOf(a, i), db = dimOf(b, i);
      if (da == db || da == 1 || db == 1)
        continue;
      for (int side = 0; side < 2; ++side) {
        std::string table = tableOrigin(c, c.in[side]);
        if (table.empty() || !tableOrigin(c, c.in[1 - side]).empty())
          continue;
        const int64_t held = side ? db : da, asked = side ? da : db;
        return c.error("shapes " + shapeStr(a.getShape()) + " and " + shapeStr(b.getShape()) +
                       " do not broadcast: dim " + Twine(i) + " is " + Twine(asked) + " here and " + Twine(held) +
                       " in '" + table + "', a table of the model's weights or constants — if " + Twine(asked) +
                       " is a sequence length, the model holds tables for at most " + Twine(held) +
                       " positions (compile with inputs that fit)");
      }
      break;
    }
  }
  return setOut(c, c.make<OpTy>(c.in[0], c.in[1]));
}

/// Sum/Min/Max/Mean take one or more inputs.
template <typename OpTy> LogicalResult variadic(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  Value acc = c.in[0];
  for (size_t i = 1; i < c.in.size(); ++i) {
    auto r = c.make<OpTy>(acc, c.in[i]);
    if (failed(r))
      return failure();
    acc = *r;
  }
  c.out.push_back(acc);
  return success();
}

LogicalResult importPow(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  Value exp = c.in[1];
  auto bt = c.typeOf(0), et = c.typeOf(1);
  if (!llvm::isa<FloatType>(bt.getElementType()) && llvm::isa<FloatType>(et.getElementType())) {
    // Integer base, float exponent: the power is taken in f64 and truncated to the base's type.
    Type f64 = c.b.getF64Type();
    auto base = c.makeTyped1<CastOp>(bt.clone(f64), c.in[0]);
    auto e64 = c.makeTyped1<CastOp>(et.clone(f64), exp);
    if (failed(base) || failed(e64))
      return failure();
    auto p = c.make<PowOp>(*base, *e64);
    if (failed(p))
      return failure();
    return setOut(c, c.makeTyped1<CastOp>(llvm::cast<RankedTensorType>(p->getType()).clone(
                                              bt.getElementType()),
                                          *p));
  }
  if (bt.getElementType() != et.getElementType()) {
    auto cast = c.makeTyped1<CastOp>(withShape(et, et.getShape()).clone(bt.getElementType()), exp);
    if (failed(cast))
      return failure();
    exp = *cast;
  }
  return setOut(c, c.make<PowOp>(c.in[0], exp));
}

template <typename OpTy> LogicalResult unary(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  return setOut(c, c.makeTyped1<OpTy>(c.typeOf(0), c.in[0]));
}

template <typename OpTy> LogicalResult unaryFloat(Ctx &c) {
  if (failed(c.requireInputs(1)) || failed(requireFloat(c, 0)))
    return failure();
  return setOut(c, c.makeTyped1<OpTy>(c.typeOf(0), c.in[0]));
}

LogicalResult importGelu(Ctx &c) {
  if (failed(c.requireInputs(1)) || failed(requireFloat(c, 0)))
    return failure();
  std::string approx = c.attrString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return c.error("attribute 'approximate' must be 'none' or 'tanh', got '" + approx + "'");
  return setOut(c, c.makeTyped1<GeluOp>(c.typeOf(0), c.in[0], c.b.getStringAttr(approx)));
}

LogicalResult importIdentity(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  c.out.push_back(c.in[0]);
  return success();
}

LogicalResult importDropout(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  // Inference: identity. opset >= 12 may pass training_mode as input 2; it must be false.
  if (c.has(2)) {
    auto mode = c.constInput(2, "training_mode");
    if (failed(mode))
      return failure();
    bool training = mode->numel() && mode->asInt(0) != 0;
    // In training mode only ratio 0 is deterministic (and then Dropout is the identity).
    double ratio = 0.5;
    if (training && c.has(1)) {
      auto r = c.constInput(1, "ratio");
      if (failed(r))
        return failure();
      ratio = r->numel() ? r->asDouble(0) : 0.5;
    }
    if (training && ratio != 0.0)
      return c.error("training_mode = true with a nonzero ratio (random masks) is not supported");
  }
  c.out.push_back(c.in[0]);
  if (c.outputUsed(1)) {
    auto t = c.typeOf(0);
    c.out.push_back(c.constant(DenseElementsAttr::get(
        RankedTensorType::get(t.getShape(), c.b.getI1Type()), true)));
  }
  return success();
}

LogicalResult importCast(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  const auto *to = c.attr("to");
  if (!to)
    return c.error("missing required attribute 'to'");
  Type et = elementTypeFor(to->i(), c.ctx());
  if (!et)
    return c.error("cast to unsupported data type " + onnxTypeName(to->i()));
  auto t = c.typeOf(0);
  if (t.getElementType() == et) {
    c.out.push_back(c.in[0]);
    return success();
  }
  return setOut(c, c.makeTyped1<CastOp>(t.clone(et), c.in[0]));
}

LogicalResult importWhere(Ctx &c) {
  if (failed(c.requireInputs(3)))
    return failure();
  return setOut(c, c.make<WhereOp>(c.in[0], c.in[1], c.in[2]));
}

LogicalResult importNot(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  if (!t.getElementType().isInteger(1))
    return c.error("Not expects a bool input");
  Value f = c.constant(DenseElementsAttr::get(RankedTensorType::get({}, c.b.getI1Type()), false));
  return setOut(c, c.make<EqualOp>(c.in[0], f));
}

//===----------------------------------------------------------------------===//
// Softmax, normalization
//===----------------------------------------------------------------------===//

template <typename OpTy> LogicalResult importSoftmax(Ctx &c) {
  if (failed(c.requireInputs(1)) || failed(requireFloat(c, 0)))
    return failure();
  auto t = c.typeOf(0);
  int64_t rank = t.getRank();
  if (rank == 0)
    return c.error("input must have rank >= 1");
  auto axis = c.normAxis(c.attrInt("axis", c.opset < 13 ? 1 : -1), rank);
  if (failed(axis))
    return failure();
  if (c.opset >= 13 || *axis == rank - 1)
    return setOut(c, c.makeTyped1<OpTy>(t, c.in[0], c.b.getI64IntegerAttr(*axis)));
  // Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])].
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < *axis ? outer : inner) *= t.getDimSize(d);
  auto flat = c.reshape(c.in[0], {outer, inner});
  if (failed(flat))
    return failure();
  auto sm = c.makeTyped1<OpTy>(withShape(t, {outer, inner}), *flat, c.b.getI64IntegerAttr(1));
  if (failed(sm))
    return failure();
  return setOut(c, c.reshape(*sm, t.getShape()));
}

LogicalResult importLayerNorm(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireFloat(c, 0)))
    return failure();
  auto t = c.typeOf(0);
  auto axis = c.normAxis(c.attrInt("axis", -1), t.getRank());
  if (failed(axis))
    return failure();
  float eps = c.attrFloat("epsilon", 1e-5f);
  // The optional Mean and InvStdDev outputs (shape x.shape[:axis] + [1]...) are computed from
  // primitives; the normalized output still uses the fused op.
  Value mean, invStdDev;
  if (c.outputUsed(1) || c.outputUsed(2)) {
    SmallVector<int64_t> axes;
    for (int64_t d = *axis; d < t.getRank(); ++d)
      axes.push_back(d);
    auto axesAttr = c.b.getDenseI64ArrayAttr(axes);
    auto m = c.make<ReduceMeanOp>(c.in[0], axesAttr, c.b.getBoolAttr(true));
    if (failed(m))
      return failure();
    auto d = c.make<SubOp>(c.in[0], *m);
    if (failed(d))
      return failure();
    auto sq = c.make<MulOp>(*d, *d);
    if (failed(sq))
      return failure();
    auto var = c.make<ReduceMeanOp>(*sq, axesAttr, c.b.getBoolAttr(true));
    if (failed(var))
      return failure();
    auto epsV = c.constant(DenseElementsAttr::get(RankedTensorType::get({}, t.getElementType()),
                                                  c.b.getFloatAttr(t.getElementType(), eps)));
    auto ve = c.make<AddOp>(*var, epsV);
    if (failed(ve))
      return failure();
    auto sd = c.makeTyped1<SqrtOp>(ve->getType(), *ve);
    if (failed(sd))
      return failure();
    auto inv = c.makeTyped1<ReciprocalOp>(sd->getType(), *sd);
    if (failed(inv))
      return failure();
    mean = *m;
    invStdDev = *inv;
    // stash_type 1 (the default) keeps the statistics in float32.
    if (c.attrInt("stash_type", 1) == 1 && !t.getElementType().isF32()) {
      auto f32 = [&](Value v) -> FailureOr<Value> {
        auto vt = llvm::cast<RankedTensorType>(v.getType());
        return c.makeTyped1<CastOp>(vt.clone(c.b.getF32Type()), v);
      };
      auto m32 = f32(mean), i32 = f32(invStdDev);
      if (failed(m32) || failed(i32))
        return failure();
      mean = *m32;
      invStdDev = *i32;
    }
  }
  // Scale and bias may be given with fewer leading dims; reshape them to x.shape[axis:].
  SmallVector<int64_t> normShape(t.getShape().drop_front(*axis));
  auto norm = [&](size_t i) -> FailureOr<Value> {
    if (c.typeOf(i).getNumElements() != t.getNumElements() / std::max<int64_t>(1, [&] {
          int64_t o = 1;
          for (int64_t d = 0; d < *axis; ++d)
            o *= t.getDimSize(d);
          return o;
        }()))
      return FailureOr<Value>(c.error("scale/bias shape does not match the normalized shape"));
    return c.reshape(c.in[i], normShape);
  };
  auto scale = norm(1);
  if (failed(scale))
    return failure();
  Value bias;
  if (c.has(2)) {
    auto bv = norm(2);
    if (failed(bv))
      return failure();
    bias = *bv;
  }
  if (failed(setOut(c, c.make<LayerNormOp>(c.in[0], *scale, bias, c.b.getI64IntegerAttr(*axis),
                                            c.b.getF32FloatAttr(eps)))))
    return failure();
  if (mean) {
    c.out.push_back(mean);
    c.out.push_back(invStdDev);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//


template <typename OpTy> LogicalResult importReduce(Ctx &c, int64_t axesInputOpset) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  bool keepdims = c.attrInt("keepdims", 1) != 0;
  auto axes = axesOperand(c, axesInputOpset, /*required=*/false);
  if (failed(axes))
    return failure();
  if (axes->empty()) {
    if (c.attrInt("noop_with_empty_axes", 0)) {
      c.out.push_back(c.in[0]);
      return success();
    }
    axes = SmallVector<int64_t>();
    for (int64_t d = 0; d < t.getRank(); ++d)
      axes->push_back(d);
  }
  SmallVector<int64_t> norm;
  for (int64_t a : *axes) {
    auto n = c.normAxis(a, t.getRank(), "axes entry");
    if (failed(n))
      return failure();
    if (llvm::is_contained(norm, *n))
      return c.error("axes entry " + Twine(a) + " is repeated");
    norm.push_back(*n);
  }
  llvm::sort(norm);
  if (t.getRank() == 0) {
    c.out.push_back(c.in[0]);
    return success();
  }
  return setOut(c, c.make<OpTy>(c.in[0], c.b.getDenseI64ArrayAttr(norm),
                                c.b.getBoolAttr(keepdims)));
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

LogicalResult importMatMul(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireFloat(c, 0)))
    return failure();
  Value a = c.in[0], bv = c.in[1];
  auto at = c.typeOf(0), bt = c.typeOf(1);
  if (at.getRank() == 0 || bt.getRank() == 0)
    return c.error("MatMul operands must have rank >= 1");
  bool aVec = at.getRank() == 1, bVec = bt.getRank() == 1;
  if (aVec) {
    auto r = c.reshape(a, {1, at.getDimSize(0)});
    if (failed(r))
      return failure();
    a = *r;
  }
  if (bVec) {
    auto r = c.reshape(bv, {bt.getDimSize(0), 1});
    if (failed(r))
      return failure();
    bv = *r;
  }
  auto mm = c.make<MatMulOp>(a, bv);
  if (failed(mm))
    return failure();
  if (!aVec && !bVec)
    return setOut(c, mm);
  auto rt = llvm::cast<RankedTensorType>(mm->getType());
  SmallVector<int64_t> shape(rt.getShape());
  if (bVec)
    shape.pop_back();
  if (aVec)
    shape.erase(shape.end() - (bVec ? 1 : 2));
  return setOut(c, c.reshape(*mm, shape));
}

LogicalResult importGemm(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireFloat(c, 0)))
    return failure();
  return setOut(c, c.make<GemmOp>(c.in[0], c.in[1], c.has(2) ? c.in[2] : Value(),
                                  c.b.getBoolAttr(c.attrInt("transA", 0) != 0),
                                  c.b.getBoolAttr(c.attrInt("transB", 0) != 0),
                                  c.b.getF32FloatAttr(c.attrFloat("alpha", 1.0f)),
                                  c.b.getF32FloatAttr(c.attrFloat("beta", 1.0f))));
}

//===----------------------------------------------------------------------===//
// Shapes and data movement
//===----------------------------------------------------------------------===//

LogicalResult importShape(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto shape = c.typeOf(0).getShape();
  int64_t rank = shape.size();
  int64_t start = c.attrInt("start", 0), end = c.attrInt("end", rank);
  auto clampIdx = [&](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  start = clampIdx(start);
  end = clampIdx(end);
  SmallVector<int64_t> dims;
  for (int64_t d = start; d < end; ++d)
    dims.push_back(shape[d]);
  c.out.push_back(c.constant(DenseElementsAttr::get(
      RankedTensorType::get({int64_t(dims.size())}, c.b.getI64Type()), ArrayRef<int64_t>(dims))));
  return success();
}

LogicalResult importSize(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  c.out.push_back(c.constant(DenseElementsAttr::get(RankedTensorType::get({}, c.b.getI64Type()),
                                                    c.typeOf(0).getNumElements())));
  return success();
}

LogicalResult importConstant(Ctx &c) {
  auto makeF = [&](ArrayRef<float> v, ArrayRef<int64_t> shape) {
    c.out.push_back(c.constant(
        DenseElementsAttr::get(RankedTensorType::get(shape, c.b.getF32Type()), v)));
    return success();
  };
  auto makeI = [&](ArrayRef<int64_t> v, ArrayRef<int64_t> shape) {
    c.out.push_back(c.constant(
        DenseElementsAttr::get(RankedTensorType::get(shape, c.b.getI64Type()), v)));
    return success();
  };
  if (const auto *a = c.attr("value")) {
    auto attr = importTensor(c.graph, a->t(), "node '" + c.node.name() + "' attribute 'value'");
    if (failed(attr))
      return c.error("invalid 'value' tensor");
    c.out.push_back(c.constant(*attr));
    return success();
  }
  if (const auto *a = c.attr("value_float"))
    return makeF({a->f()}, {});
  if (const auto *a = c.attr("value_floats"))
    return makeF(SmallVector<float>(a->floats().begin(), a->floats().end()),
                 {int64_t(a->floats_size())});
  if (const auto *a = c.attr("value_int"))
    return makeI({a->i()}, {});
  if (const auto *a = c.attr("value_ints"))
    return makeI(SmallVector<int64_t>(a->ints().begin(), a->ints().end()),
                 {int64_t(a->ints_size())});
  if (c.attr("sparse_value"))
    return c.error("attribute 'sparse_value' is not supported");
  if (c.attr("value_string") || c.attr("value_strings"))
    return c.error("string constants are not supported");
  return c.error("no value attribute");
}

LogicalResult importConstantOfShape(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto shape = c.constInts(0, "shape");
  if (failed(shape))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return c.error("shape has a negative dimension " + Twine(d));
  if (failed(c.checkElementCount(*shape, "the shape")))
    return failure();
  DenseElementsAttr value;
  if (const auto *a = c.attr("value")) {
    auto attr = importTensor(c.graph, a->t(), "attribute 'value'");
    if (failed(attr))
      return c.error("invalid 'value' tensor");
    if (attr->getNumElements() != 1)
      return c.error("attribute 'value' must hold exactly one element");
    value = *attr;
  } else {
    value = DenseElementsAttr::get(RankedTensorType::get({1}, c.b.getF32Type()), 0.0f);
  }
  auto type = RankedTensorType::get(*shape, value.getElementType());
  c.out.push_back(c.constant(DenseElementsAttr::get(type, value.getSplatValue<Attribute>())));
  return success();
}

LogicalResult importRange(Ctx &c) {
  if (failed(c.requireInputs(3)))
    return failure();
  auto start = c.constInput(0, "start"), limit = c.constInput(1, "limit"),
       delta = c.constInput(2, "delta");
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  for (auto [what, v] : {std::pair{"start", &*start}, {"limit", &*limit}, {"delta", &*delta}})
    if (v->numel() != 1)
      return c.error(Twine(what) + " must be a scalar, got " + Twine(v->numel()) + " elements");
  if (c.typeOf(1).getElementType() != c.typeOf(0).getElementType() ||
      c.typeOf(2).getElementType() != c.typeOf(0).getElementType())
    return c.error("start, limit and delta must have the same type");
  auto et = c.typeOf(0).getElementType();
  if (start->isFloat()) {
    double s = start->f[0], l = limit->f[0], d = delta->f[0];
    if (d == 0)
      return c.error("delta is zero");
    int64_t n = std::max<int64_t>(0, int64_t(std::ceil((l - s) / d)));
    if (n > kMaxFoldElements)
      return c.error("Range of " + Twine(n) + " elements is too large to evaluate at compile time");
    HostTensor out = HostTensor::zeros(RankedTensorType::get({n}, et));
    for (int64_t k = 0; k < n; ++k)
      out.f[k] = s + k * d;
    c.out.push_back(c.constant(out.toAttr()));
    return success();
  }
  int64_t s = start->i[0], l = limit->i[0], d = delta->i[0];
  if (d == 0)
    return c.error("delta is zero");
  int64_t n = std::max<int64_t>(0, d > 0 ? (l - s + d - 1) / d : (s - l - d - 1) / (-d));
  if (n > kMaxFoldElements)
    return c.error("Range of " + Twine(n) + " elements is too large to evaluate at compile time");
  HostTensor out = HostTensor::zeros(RankedTensorType::get({n}, et));
  for (int64_t k = 0; k < n; ++k)
    out.i[k] = s + k * d;
  c.out.push_back(c.constant(out.toAttr()));
  return success();
}

LogicalResult importReshape(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  SmallVector<int64_t> target;
  if (c.opset < 5 || !c.has(1)) {
    auto s = c.attrInts("shape");
    if (!s)
      return c.error("missing shape");
    target = *s;
  } else {
    auto s = c.constInts(1, "shape");
    if (failed(s))
      return failure();
    target = *s;
  }
  auto t = c.typeOf(0);
  bool allowZero = c.attrInt("allowzero", 0) != 0;
  int64_t known = 1, inferAt = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowZero) {
      if (int64_t(i) >= t.getRank())
        return c.error("shape entry " + Twine(i) + " is 0 but the input has rank " +
                       Twine(t.getRank()));
      target[i] = t.getDimSize(i);
    }
    if (target[i] == -1) {
      if (inferAt >= 0)
        return c.error("shape has more than one -1");
      inferAt = i;
    } else if (target[i] < 0) {
      return c.error("shape entry " + Twine(target[i]) + " is invalid");
    } else {
      known *= target[i];
    }
  }
  if (inferAt >= 0) {
    if (known == 0 || t.getNumElements() % known != 0)
      return c.error("cannot infer the -1 dimension: " + Twine(t.getNumElements()) +
                     " elements do not divide by " + Twine(known));
    target[inferAt] = t.getNumElements() / known;
  }
  return setOut(c, c.reshape(c.in[0], target));
}

LogicalResult importFlatten(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  int64_t rank = t.getRank();
  int64_t axis = c.attrInt("axis", 1);
  if (axis < -rank || axis > rank)
    return c.error("axis " + Twine(axis) + " out of range for rank " + Twine(rank));
  if (axis < 0)
    axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < axis ? outer : inner) *= t.getDimSize(d);
  return setOut(c, c.reshape(c.in[0], {outer, inner}));
}


LogicalResult importSqueeze(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto axes = axesOperand(c, 13, false);
  if (failed(axes))
    return failure();
  auto t = c.typeOf(0);
  SmallVector<bool> drop(t.getRank(), false);
  if (axes->empty()) {
    for (int64_t d = 0; d < t.getRank(); ++d)
      drop[d] = t.getDimSize(d) == 1;
  }
  for (int64_t a : *axes) {
    auto n = c.normAxis(a, t.getRank(), "axes entry");
    if (failed(n))
      return failure();
    if (t.getDimSize(*n) != 1)
      return c.error("cannot squeeze dim " + Twine(*n) + " of size " + Twine(t.getDimSize(*n)));
    drop[*n] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < t.getRank(); ++d)
    if (!drop[d])
      shape.push_back(t.getDimSize(d));
  return setOut(c, c.reshape(c.in[0], shape));
}

LogicalResult importUnsqueeze(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto axes = axesOperand(c, 13, true);
  if (failed(axes))
    return failure();
  auto t = c.typeOf(0);
  int64_t outRank = t.getRank() + axes->size();
  SmallVector<bool> inserted(outRank, false);
  for (int64_t a : *axes) {
    auto n = c.normAxis(a, outRank, "axes entry");
    if (failed(n))
      return failure();
    if (inserted[*n])
      return c.error("axes entry " + Twine(a) + " is repeated");
    inserted[*n] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0, k = 0; d < outRank; ++d)
    shape.push_back(inserted[d] ? 1 : t.getDimSize(k++));
  return setOut(c, c.reshape(c.in[0], shape));
}

LogicalResult importTranspose(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  SmallVector<int64_t> perm;
  if (auto p = c.attrInts("perm"))
    perm = *p;
  else
    for (int64_t d = t.getRank() - 1; d >= 0; --d)
      perm.push_back(d);
  return setOut(c, c.make<TransposeOp>(c.in[0], c.b.getDenseI64ArrayAttr(perm)));
}

LogicalResult importGather(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto axis = c.normAxis(c.attrInt("axis", 0), c.typeOf(0).getRank());
  if (failed(axis))
    return failure();
  // Constant out-of-range indices are a compile-time error.
  Attribute idx;
  if (matchPattern(c.in[1], m_Constant(&idx)))
    if (auto h = HostTensor::from(idx)) {
      int64_t n = c.typeOf(0).getDimSize(*axis);
      for (int64_t i : h->i)
        if (i < -n || i >= n)
          return c.error("index " + Twine(i) + " is out of range for dim " + Twine(*axis) +
                         " of size " + Twine(n));
    }
  return setOut(c, c.make<GatherOp>(c.in[0], c.in[1], c.b.getI64IntegerAttr(*axis)));
}

LogicalResult importSlice(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  int64_t rank = t.getRank();
  SmallVector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    auto s = c.attrInts("starts"), e = c.attrInts("ends");
    if (!s || !e)
      return c.error("missing starts or ends");
    starts = *s;
    ends = *e;
    if (auto a = c.attrInts("axes"))
      axes = *a;
  } else {
    if (failed(c.requireInputs(3)))
      return failure();
    auto s = c.constInts(1, "starts"), e = c.constInts(2, "ends");
    if (failed(s) || failed(e))
      return failure();
    starts = *s;
    ends = *e;
    if (c.has(3)) {
      auto a = c.constInts(3, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
    if (c.has(4)) {
      auto st = c.constInts(4, "steps");
      if (failed(st))
        return failure();
      steps = *st;
    }
  }
  if (starts.size() != ends.size())
    return c.error("starts and ends differ in length");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return c.error("starts, ends, axes and steps differ in length");
  SmallVector<int64_t> st(rank, 0), li(t.getShape()), sp(rank, 1);
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto a = c.normAxis(axes[i], rank, "axes entry");
    if (failed(a))
      return failure();
    if (seen[*a])
      return c.error("axes entry " + Twine(axes[i]) + " is repeated");
    seen[*a] = true;
    int64_t n = t.getDimSize(*a), step = steps[i];
    if (step == 0)
      return c.error("step is zero");
    int64_t s = starts[i], e = ends[i];
    if (s < 0)
      s += n;
    if (e < 0)
      e += n;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      e = std::max(e, s);
    } else {
      s = std::clamp<int64_t>(s, 0, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
      e = std::min(e, s);
    }
    st[*a] = s;
    li[*a] = e;
    sp[*a] = step;
  }
  return setOut(c, c.make<SliceOp>(c.in[0], c.b.getDenseI64ArrayAttr(st),
                                   c.b.getDenseI64ArrayAttr(li), c.b.getDenseI64ArrayAttr(sp)));
}

LogicalResult importConcat(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  const auto *axisAttr = c.attr("axis");
  if (!axisAttr)
    return c.error("missing required attribute 'axis'");
  auto axis = c.normAxis(axisAttr->i(), c.typeOf(0).getRank());
  if (failed(axis))
    return failure();
  SmallVector<Value> inputs;
  for (Value v : c.in)
    if (v && llvm::cast<RankedTensorType>(v.getType()).getNumElements() != 0)
      inputs.push_back(v);
  if (inputs.empty())
    inputs.push_back(c.in[0]);
  return setOut(c, c.make<ConcatOp>(ValueRange(inputs), c.b.getI64IntegerAttr(*axis)));
}

LogicalResult importSplit(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto t = c.typeOf(0);
  auto axis = c.normAxis(c.attrInt("axis", 0), t.getRank());
  if (failed(axis))
    return failure();
  int64_t n = t.getDimSize(*axis);
  SmallVector<int64_t> sizes;
  if (c.opset >= 13 && c.has(1)) {
    auto s = c.constInts(1, "split");
    if (failed(s))
      return failure();
    sizes = *s;
  } else if (auto s = c.attrInts("split"); s && c.opset < 13) {
    sizes = *s;
  } else {
    int64_t parts = c.opset >= 18 && c.attr("num_outputs") ? c.attrInt("num_outputs", 1)
                                                           : int64_t(c.numOutputs());
    if (parts <= 0)
      return c.error("number of outputs must be positive");
    int64_t chunk = (n + parts - 1) / parts;
    for (int64_t p = 0; p < parts; ++p)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, n - p * chunk)));
  }
  if (int64_t(sizes.size()) != int64_t(c.numOutputs()))
    return c.error("split gives " + Twine(sizes.size()) + " parts for " +
                   Twine(c.numOutputs()) + " outputs");
  SmallVector<Type> types;
  for (int64_t s : sizes) {
    SmallVector<int64_t> shape(t.getShape());
    shape[*axis] = s;
    types.push_back(withShape(t, shape));
  }
  auto r = c.makeTyped<SplitOp>(TypeRange(types), c.in[0], c.b.getI64IntegerAttr(*axis));
  if (failed(r))
    return failure();
  c.out.append(r->begin(), r->end());
  return success();
}

LogicalResult importExpand(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  auto shape = c.constInts(1, "shape");
  if (failed(shape))
    return failure();
  auto t = c.typeOf(0);
  // ONNX Expand is bidirectional: the result is the broadcast of both shapes.
  auto in = t.getShape();
  size_t rank = std::max(in.size(), shape->size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t a = i < rank - in.size() ? 1 : in[i - (rank - in.size())];
    int64_t b = i < rank - shape->size() ? 1 : (*shape)[i - (rank - shape->size())];
    if (a != b && a != 1 && b != 1)
      return c.error("cannot expand dim " + Twine(i) + " of size " + Twine(a) + " to " + Twine(b));
    out[i] = a == 1 ? b : a;
  }
  if (rank > in.size()) {
    SmallVector<int64_t> padded(rank - in.size(), 1);
    padded.append(in.begin(), in.end());
    auto r = c.reshape(c.in[0], padded);
    if (failed(r))
      return failure();
    return setOut(c, c.makeTyped1<ExpandOp>(withShape(t, out), *r));
  }
  return setOut(c, c.makeTyped1<ExpandOp>(withShape(t, out), c.in[0]));
}

LogicalResult importTrilu(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  if (c.typeOf(0).getRank() < 2)
    return c.error("input must have rank >= 2");
  int64_t k = 0;
  if (c.has(1)) {
    auto kv = c.constInts(1, "k");
    if (failed(kv))
      return failure();
    k = kv->empty() ? 0 : (*kv)[0];
  }
  return setOut(c, c.makeTyped1<TriluOp>(c.typeOf(0), c.in[0],
                                         c.b.getBoolAttr(c.attrInt("upper", 1) != 0),
                                         c.b.getI64IntegerAttr(k)));
}

} // namespace

void registerCoreImporters(ImporterTable &table) {
  static const std::pair<const char *, OpImporter> core[] = {
      {"Add", binary<AddOp>},
      {"Sub", binary<SubOp>},
      {"Mul", binary<MulOp>},
      {"Div", binary<DivOp>},
      {"Pow", importPow},
      {"Equal", binary<EqualOp>},
      {"Less", binary<LessOp>},
      {"Greater", binary<GreaterOp>},
      {"Min", variadic<MinOp>},
      {"Max", variadic<MaxOp>},
      {"Sum", variadic<AddOp>},
      {"Where", importWhere},
      {"Not", importNot},
      {"Neg", unary<NegOp>},
      {"Abs", unary<AbsOp>},
      {"Sqrt", unaryFloat<SqrtOp>},
      {"Reciprocal", unaryFloat<ReciprocalOp>},
      {"Exp", unaryFloat<ExpOp>},
      {"Log", unaryFloat<LogOp>},
      {"Erf", unaryFloat<ErfOp>},
      {"Tanh", unaryFloat<TanhOp>},
      {"Sigmoid", unaryFloat<SigmoidOp>},
      {"Relu", unary<ReluOp>},
      {"Gelu", importGelu},
      {"Cast", importCast},
      {"Identity", importIdentity},
      {"Dropout", importDropout},
      {"Softmax", importSoftmax<SoftmaxOp>},
      {"LogSoftmax", importSoftmax<LogSoftmaxOp>},
      {"LayerNormalization", importLayerNorm},
      {"ReduceMean", [](Ctx &c) { return importReduce<ReduceMeanOp>(c, 18); }},
      {"ReduceSum", [](Ctx &c) { return importReduce<ReduceSumOp>(c, 13); }},
      {"ReduceMax", [](Ctx &c) { return importReduce<ReduceMaxOp>(c, 18); }},
      {"MatMul", importMatMul},
      {"Gemm", importGemm},
      {"Shape", importShape},
      {"Size", importSize},
      {"Constant", importConstant},
      {"ConstantOfShape", importConstantOfShape},
      {"Range", importRange},
      {"Reshape", importReshape},
      {"Flatten", importFlatten},
      {"Squeeze", importSqueeze},
      {"Unsqueeze", importUnsqueeze},
      {"Transpose", importTranspose},
      {"Gather", importGather},
      {"Slice", importSlice},
      {"Concat", importConcat},
      {"Split", importSplit},
      {"Expand", importExpand},
      {"Trilu", importTrilu},
  };
  for (const auto &[name, fn] : core)
    table[name] = fn;
}

const ImporterTable &opImporters() {
  static const ImporterTable table = [] {
    ImporterTable t;
    // One registration function per op family (files Import<Family>.cpp).
    registerCoreImporters(t);
    registerNNImporters(t);
    registerIndexingImporters(t);
    registerElementwiseImporters(t);
    registerMiscImporters(t);
    return t;
  }();
  return table;
}

int64_t oldestOpset(StringRef opType) {
  // Operator versions whose semantics equal every later version up to the one implemented
  // (https://onnx.ai/onnx/operators/, "Changelog"): later versions only added types.
  static const llvm::StringMap<int64_t> since = {
      {"Elu", 6},         {"HardSigmoid", 6}, {"Selu", 6},     {"LeakyRelu", 6},
      {"Relu", 6},        {"Sigmoid", 6},     {"Tanh", 6},     {"Exp", 6},
      {"Log", 6},         {"Sqrt", 6},        {"Neg", 6},      {"Abs", 6},
      {"Reciprocal", 6},  {"Floor", 6},       {"Ceil", 6},     {"InstanceNormalization", 6},
      {"Not", 1},         {"Softplus", 1},    {"Softsign", 1}, {"GlobalAveragePool", 1},
      {"GlobalMaxPool", 1}, {"Identity", 1},  {"Transpose", 1}, {"Shape", 1},
      {"Size", 1},        {"ReduceLogSum", 1}, {"ReduceMean", 1}, {"ReduceSum", 1},
      {"ReduceMax", 1},   {"ReduceMin", 1},   {"ReduceProd", 1}, {"ReduceL1", 1},
      {"ReduceL2", 1},    {"ReduceLogSumExp", 1}, {"ReduceSumSquare", 1}, {"ArgMax", 1},
      {"ArgMin", 1},      {"Softmax", 1},     {"LogSoftmax", 1}, {"Hardmax", 1},
      {"Constant", 1},    {"Squeeze", 1},     {"Unsqueeze", 1}, {"Flatten", 1},
      {"Gather", 1},      {"Concat", 4},      {"Split", 2},    {"Slice", 1},
      {"Reshape", 5},     {"Tile", 6},        {"MatMul", 1},   {"Cast", 6},
      {"LpNormalization", 1}, {"GlobalLpPool", 2}, {"Xor", 7},
      {"Conv", 1},        {"ConvTranspose", 1}, {"MaxPool", 1}, {"AveragePool", 1},
      {"LpPool", 2},      {"BatchNormalization", 6},
  };
  auto it = since.find(opType);
  return it == since.end() ? 7 : it->second;
}

bool foldsInitializers(StringRef opType) {
  // Data movement and comparisons: with constant operands they fold, so a float initializer they
  // read (a registered buffer such as a causal-mask table or RoPE cos/sin) is taken as a constant.
  static const llvm::StringSet<> ops = {"Shape",  "Slice",   "Equal",     "Less",    "Greater",
                                        "Where",  "Cast",    "Reshape",   "Squeeze", "Unsqueeze",
                                        "Expand", "Concat",  "Transpose", "Not",     "Trilu",
                                        "Flatten", "ConstantOfShape", "Range", "Size",
                                        "NonZero", "Unique", "Compress",
                                        "Resize", "Upsample"};
  return ops.contains(opType);
}

} // namespace colossal::onnx_import

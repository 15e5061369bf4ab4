//===- ImportMisc.cpp - recurrent layers, control flow, signal, optimizers ---===//
//
// The "misc" family of ONNX operators (https://onnx.ai/onnx/operators/). Most of them are lowered
// to the core ops at import, because their structure is static once shapes are known:
//
//   RNN, GRU, LSTM   unrolled over the (static) sequence: one matmul for the input projection of
//                    all steps, then per step a matmul with the recurrent weights and elementwise
//                    gates. Sequence lengths must be constants; masks keep finished sequences.
//   If, Loop, Scan   If with a constant condition imports the chosen branch inline, any other
//                    condition both branches and a where per output; Loop with a constant trip
//                    count and a condition that folds is unrolled; Scan is unrolled over its
//                    static sequence length (at most kMaxUnroll iterations).
//   DFT, STFT        a matmul with a constant DFT matrix (STFT frames are a constant gather).
//   *Window, MelWeightMatrix   compile-time constants.
//   LRN              the window sum over channels is a matmul with a constant band matrix.
//   Adagrad, Adam, Momentum (ai.onnx.preview.training)   elementwise update formulas.
//
// Det, ReverseSequence, GridSample and RoiAlign have ops and kernels of their own
// (ColossalMiscOps.td).
//===----------------------------------------------------------------------===//
#include "ImporterImpl.h"

#include <cmath>

using namespace mlir;

namespace colossal::onnx_import {
namespace {

using Ctx = NodeContext;

/// Unrolled control flow and recurrences stop here, with a diagnostic.
constexpr int64_t kMaxUnroll = 1024;


/// Builds core ops through NodeContext (inference, verification, folding). The first failure is
/// recorded in the context; after it every helper returns a null Value, so sequences of calls
/// need one check at the end (`ok()`).
class Emit {
public:
  explicit Emit(Ctx &c) : c(c) {}
  Ctx &c;

  bool ok() const { return !bad; }
  LogicalResult result() const { return bad ? failure() : success(); }
  Value fail() {
    bad = true;
    return Value();
  }
  Value take(FailureOr<Value> r) { return failed(r) ? fail() : *r; }
  static RankedTensorType type(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

  Value constant(RankedTensorType t, ArrayRef<double> values) {
    HostTensor h;
    h.type = t;
    if (llvm::isa<FloatType>(t.getElementType()))
      h.f.assign(values.begin(), values.end());
    else
      for (double v : values)
        h.i.push_back(int64_t(v));
    return c.constant(h.toAttr());
  }
  Value scalar(double v, Type et) { return constant(RankedTensorType::get({}, et), {v}); }
  Value zeros(ArrayRef<int64_t> shape, Type et) {
    auto t = RankedTensorType::get(shape, et);
    return c.constant(HostTensor::zeros(t).toAttr());
  }
  Value i64s(ArrayRef<int64_t> v) {
    return c.constant(DenseElementsAttr::get(
        RankedTensorType::get({int64_t(v.size())}, c.b.getI64Type()), v));
  }

  template <typename OpTy> Value bin(Value a, Value b) {
    if (!a || !b)
      return fail();
    return take(c.make<OpTy>(a, b));
  }
  Value add(Value a, Value b) { return bin<AddOp>(a, b); }
  Value sub(Value a, Value b) { return bin<SubOp>(a, b); }
  Value mul(Value a, Value b) { return bin<MulOp>(a, b); }
  Value div(Value a, Value b) { return bin<DivOp>(a, b); }
  template <typename OpTy> Value un(Value a) {
    if (!a)
      return fail();
    return take(c.makeTyped1<OpTy>(a.getType(), a));
  }
  Value matmul(Value a, Value b) { return bin<MatMulOp>(a, b); }
  Value where(Value cond, Value a, Value b) {
    if (!cond || !a || !b)
      return fail();
    return take(c.make<WhereOp>(cond, a, b));
  }
  Value cast(Value a, Type et) {
    if (!a)
      return fail();
    if (type(a).getElementType() == et)
      return a;
    return take(c.makeTyped1<CastOp>(type(a).clone(et), a));
  }
  Value reshape(Value a, ArrayRef<int64_t> shape) {
    if (!a)
      return fail();
    return take(c.reshape(a, shape));
  }
  Value transpose(Value a, ArrayRef<int64_t> perm) {
    if (!a)
      return fail();
    return take(c.make<TransposeOp>(a, c.b.getDenseI64ArrayAttr(perm)));
  }
  /// a[..., start:end, ...] along `axis`.
  Value slice(Value a, int64_t axis, int64_t start, int64_t end) {
    if (!a)
      return fail();
    auto t = type(a);
    SmallVector<int64_t> st(t.getRank(), 0), li(t.getShape()), sp(t.getRank(), 1);
    if (start == 0 && end == t.getDimSize(axis))
      return a;
    st[axis] = start;
    li[axis] = end;
    return take(c.make<SliceOp>(a, c.b.getDenseI64ArrayAttr(st), c.b.getDenseI64ArrayAttr(li),
                                c.b.getDenseI64ArrayAttr(sp)));
  }
  /// a[..., index, ...]: `axis` removed.
  Value at(Value a, int64_t axis, int64_t index) {
    Value s = slice(a, axis, index, index + 1);
    if (!s)
      return fail();
    SmallVector<int64_t> shape(type(s).getShape());
    shape.erase(shape.begin() + axis);
    return reshape(s, shape);
  }
  /// `a` with a dim of 1 inserted at `axis`.
  Value unsqueeze(Value a, int64_t axis) {
    if (!a)
      return fail();
    SmallVector<int64_t> shape(type(a).getShape());
    shape.insert(shape.begin() + axis, 1);
    return reshape(a, shape);
  }
  Value concat(ArrayRef<Value> vs, int64_t axis) {
    for (Value v : vs)
      if (!v)
        return fail();
    if (vs.size() == 1)
      return vs[0];
    return take(c.make<ConcatOp>(ValueRange(vs), c.b.getI64IntegerAttr(axis)));
  }
  /// Stacks equal-shaped values along a new dim `axis`.
  Value stack(ArrayRef<Value> vs, int64_t axis) {
    SmallVector<Value> parts;
    for (Value v : vs)
      parts.push_back(unsqueeze(v, axis));
    return concat(parts, axis);
  }
  /// min(max(x, lo), hi).
  Value clamp(Value x, double lo, double hi) {
    if (!x)
      return fail();
    Type et = type(x).getElementType();
    return bin<MinOp>(bin<MaxOp>(x, scalar(lo, et)), scalar(hi, et));
  }

private:
  bool bad = false;
};

LogicalResult setOut(Ctx &c, Value v) {
  if (!v)
    return failure();
  c.out.push_back(v);
  return success();
}

LogicalResult requireF32(Ctx &c, size_t i) {
  if (!c.typeOf(i).getElementType().isF32())
    return c.error("input " + Twine(i) + " has element type " +
                   typeStr(c.typeOf(i).getElementType()) + "; only float32 is supported");
  return success();
}

/// A scalar (or one-element) integer input that must be a compile-time constant.
FailureOr<int64_t> constScalarInt(Ctx &c, size_t i, StringRef what) {
  auto v = c.constInput(i, what);
  if (failed(v))
    return failure();
  if (v->numel() != 1)
    return FailureOr<int64_t>(c.error(what + " must hold one value"));
  return v->asInt(0);
}

FailureOr<double> constScalar(Ctx &c, size_t i, StringRef what) {
  auto v = c.constInput(i, what);
  if (failed(v))
    return failure();
  if (v->numel() != 1)
    return FailureOr<double>(c.error(what + " must hold one value"));
  return v->asDouble(0);
}

//===----------------------------------------------------------------------===//
// RNN, GRU, LSTM
//===----------------------------------------------------------------------===//

enum class Cell { RNN, GRU, LSTM };

/// One activation of a recurrent cell (ONNX's list: Relu, Tanh, Sigmoid, Affine, LeakyRelu,
/// ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus).
struct Activation {
  std::string name; // lower case
  double alpha = 0, beta = 0;
};

Value applyActivation(Emit &e, const Activation &a, Value x) {
  if (!x)
    return e.fail();
  Type et = Emit::type(x).getElementType();
  auto s = [&](double v) { return e.scalar(v, et); };
  const std::string &n = a.name;
  if (n == "sigmoid")
    return e.un<SigmoidOp>(x);
  if (n == "tanh")
    return e.un<TanhOp>(x);
  if (n == "relu")
    return e.un<ReluOp>(x);
  if (n == "affine")
    return e.add(e.mul(x, s(a.alpha)), s(a.beta));
  if (n == "leakyrelu") // relu(x) - alpha * relu(-x)
    return e.sub(e.un<ReluOp>(x), e.mul(e.un<ReluOp>(e.un<NegOp>(x)), s(a.alpha)));
  if (n == "thresholdedrelu")
    return e.where(e.bin<GreaterOp>(x, s(a.alpha)), x, s(0));
  if (n == "scaledtanh")
    return e.mul(e.un<TanhOp>(e.mul(x, s(a.beta))), s(a.alpha));
  if (n == "hardsigmoid")
    return e.clamp(e.add(e.mul(x, s(a.alpha)), s(a.beta)), 0.0, 1.0);
  if (n == "elu")
    return e.where(e.bin<LessOp>(x, s(0)), e.mul(e.sub(e.un<ExpOp>(x), s(1)), s(a.alpha)), x);
  if (n == "softsign")
    return e.div(x, e.add(e.un<AbsOp>(x), s(1)));
  if (n == "softplus")
    return e.un<LogOp>(e.add(e.un<ExpOp>(x), s(1)));
  return e.fail();
}

/// Reads `activations`, `activation_alpha`, `activation_beta`: per direction, `perDir`
/// functions. Alphas and betas are consumed in order by the functions that take them; a function
/// past the end of the lists gets its default (onnxruntime's convention).
FailureOr<SmallVector<Activation>> readActivations(Ctx &c, ArrayRef<const char *> defaults,
                                                   int64_t numDirections) {
  SmallVector<std::string> names;
  if (const auto *a = c.attr("activations"))
    for (const auto &s : a->strings())
      names.push_back(StringRef(s).lower());
  size_t perDir = defaults.size();
  if (names.empty())
    for (int64_t d = 0; d < numDirections; ++d)
      for (const char *n : defaults)
        names.push_back(StringRef(n).lower());
  if (names.size() == perDir && numDirections == 2)
    names.append(SmallVector<std::string>(names)); // one list for both directions
  if (names.size() != perDir * numDirections)
    return FailureOr<SmallVector<Activation>>(
        c.error("'activations' has " + Twine(names.size()) + " entries, expected " +
                Twine(perDir * numDirections)));
  SmallVector<float> alphas, betas;
  if (const auto *a = c.attr("activation_alpha"))
    alphas.assign(a->floats().begin(), a->floats().end());
  if (const auto *a = c.attr("activation_beta"))
    betas.assign(a->floats().begin(), a->floats().end());
  size_t ai = 0, bi = 0;
  SmallVector<Activation> acts;
  for (const std::string &n : names) {
    Activation act{n};
    auto alpha = [&](double dflt) { act.alpha = ai < alphas.size() ? alphas[ai++] : dflt; };
    auto beta = [&](double dflt) { act.beta = bi < betas.size() ? betas[bi++] : dflt; };
    if (n == "affine" || n == "scaledtanh") {
      alpha(1.0);
      beta(n == "affine" ? 0.0 : 1.0);
    } else if (n == "leakyrelu") {
      alpha(0.01);
    } else if (n == "thresholdedrelu" || n == "elu") {
      alpha(1.0);
    } else if (n == "hardsigmoid") {
      alpha(0.2);
      beta(0.5);
    } else if (n != "sigmoid" && n != "tanh" && n != "relu" && n != "softsign" &&
               n != "softplus") {
      return FailureOr<SmallVector<Activation>>(
          c.error("activation '" + n + "' is not supported"));
    }
    acts.push_back(act);
  }
  return acts;
}

LogicalResult importRecurrent(Ctx &c, Cell cell) {
  if (failed(c.requireInputs(3)) || failed(requireF32(c, 0)))
    return failure();
  Emit e(c);
  const int64_t gates = cell == Cell::RNN ? 1 : cell == Cell::GRU ? 3 : 4;
  auto wt = c.typeOf(1), rt = c.typeOf(2);
  if (c.typeOf(0).getRank() != 3 || wt.getRank() != 3 || rt.getRank() != 3)
    return c.error("X, W and R must have rank 3");
  const int64_t H = rt.getDimSize(2);
  if (const auto *hs = c.attr("hidden_size"); hs && hs->i() != H)
    return c.error("hidden_size " + Twine(hs->i()) + " does not match R's last dim " + Twine(H));
  std::string direction = c.attrString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return c.error("direction must be forward, reverse or bidirectional, got '" + direction + "'");
  const int64_t D = direction == "bidirectional" ? 2 : 1;
  const int64_t layout = c.opset >= 14 ? c.attrInt("layout", 0) : 0;
  if (layout != 0 && layout != 1)
    return c.error("layout must be 0 or 1");
  Value X = c.in[0];
  if (layout == 1)
    X = e.transpose(X, {1, 0, 2});
  if (!X)
    return failure();
  const int64_t T = Emit::type(X).getDimSize(0), B = Emit::type(X).getDimSize(1),
                I = Emit::type(X).getDimSize(2);
  if (wt.getDimSize(0) != D || wt.getDimSize(1) != gates * H || wt.getDimSize(2) != I ||
      rt.getDimSize(0) != D || rt.getDimSize(1) != gates * H)
    return c.error("W must be [" + Twine(D) + ", " + Twine(gates * H) + ", " + Twine(I) +
                   "] and R [" + Twine(D) + ", " + Twine(gates * H) + ", " + Twine(H) + "]");
  if (T > kMaxUnroll)
    return c.error("sequence length " + Twine(T) + " exceeds the unroll limit " +
                   Twine(kMaxUnroll));
  Type et = c.typeOf(0).getElementType();
  std::optional<double> clip;
  if (const auto *a = c.attr("clip"))
    clip = a->f();
  static const char *rnnActs[] = {"Tanh"}, *gruActs[] = {"Sigmoid", "Tanh"},
                    *lstmActs[] = {"Sigmoid", "Tanh", "Tanh"};
  ArrayRef<const char *> defaults = cell == Cell::RNN   ? ArrayRef<const char *>(rnnActs)
                                    : cell == Cell::GRU ? ArrayRef<const char *>(gruActs)
                                                        : ArrayRef<const char *>(lstmActs);
  auto acts = readActivations(c, defaults, D);
  if (failed(acts))
    return failure();
  const bool inputForget = cell == Cell::LSTM && c.attrInt("input_forget", 0) != 0;
  const bool linearBeforeReset = cell == Cell::GRU && c.attrInt("linear_before_reset", 0) != 0;

  // Sequence lengths: constants; uniform (all T) needs no masking.
  SmallVector<int64_t> lens(B, T);
  if (c.has(4)) {
    auto l = c.constInts(4, "sequence_lens");
    if (failed(l))
      return failure();
    if (int64_t(l->size()) != B)
      return c.error("sequence_lens has " + Twine(l->size()) + " entries for batch " + Twine(B));
    for (int64_t v : *l)
      if (v < 0 || v > T)
        return c.error("sequence_lens entry " + Twine(v) + " is outside [0, " + Twine(T) + "]");
    lens.assign(l->begin(), l->end());
  }
  const bool uniform = llvm::all_of(lens, [&](int64_t v) { return v == T; });

  // Initial states [D, B, H] (layout 1: [B, D, H]).
  auto initial = [&](size_t i) -> Value {
    if (!c.has(i))
      return e.zeros({D, B, H}, et);
    auto t = c.typeOf(i);
    SmallVector<int64_t> want = layout ? SmallVector<int64_t>{B, D, H} : SmallVector<int64_t>{D, B, H};
    if (t.getShape() != ArrayRef<int64_t>(want)) {
      (void)c.error("initial state input " + Twine(i) + " must have shape [" + Twine(want[0]) +
                    ", " + Twine(want[1]) + ", " + Twine(want[2]) + "]");
      return e.fail();
    }
    return layout ? e.transpose(c.in[i], {1, 0, 2}) : c.in[i];
  };
  Value h0 = initial(5);
  Value c0 = cell == Cell::LSTM ? initial(6) : Value();
  if (!h0 || (cell == Cell::LSTM && !c0))
    return failure();
  if (c.has(3) && c.typeOf(3).getShape() != ArrayRef<int64_t>{D, 2 * gates * H})
    return c.error("B must have shape [" + Twine(D) + ", " + Twine(2 * gates * H) + "]");
  if (cell == Cell::LSTM && c.has(7) && c.typeOf(7).getShape() != ArrayRef<int64_t>{D, 3 * H})
    return c.error("P must have shape [" + Twine(D) + ", " + Twine(3 * H) + "]");

  Value lensConst = e.i64s(lens);
  auto gate = [&](Value pre, const Activation &a) {
    return applyActivation(e, a, clip ? e.clamp(pre, -*clip, *clip) : pre);
  };
  SmallVector<Value> ys, yhs, ycs;
  for (int64_t d = 0; d < D; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    ArrayRef<Activation> act = ArrayRef<Activation>(*acts).slice(d * defaults.size(),
                                                                 defaults.size());
    Value WT = e.transpose(e.at(c.in[1], 0, d), {1, 0}); // [I, G*H]
    Value RT = e.transpose(e.at(c.in[2], 0, d), {1, 0}); // [H, G*H]
    // Input projection of every step at once: [T*B, I] x [I, G*H].
    Value xw = e.matmul(e.reshape(X, {T * B, I}), WT);
    Value rbh; // GRU with linear_before_reset: the recurrent bias of the h gate stays inside
    if (c.has(3)) {
      Value bd = e.at(c.in[3], 0, d);
      Value wb = e.slice(bd, 0, 0, gates * H), rb = e.slice(bd, 0, gates * H, 2 * gates * H);
      Value bias;
      if (linearBeforeReset) {
        rbh = e.slice(rb, 0, 2 * H, 3 * H);
        bias = e.add(wb, e.concat({e.slice(rb, 0, 0, 2 * H), e.zeros({H}, et)}, 0));
      } else {
        bias = e.add(wb, rb);
      }
      xw = e.add(xw, bias);
    }
    xw = e.reshape(xw, {T, B, gates * H});
    // Reverse with unequal lengths: reverse each sequence's valid prefix, run forward, and
    // reverse the outputs back.
    const bool reverseSeqs = reverse && !uniform;
    if (reverseSeqs)
      xw = e.take(c.make<ReverseSequenceOp>(xw, lensConst, c.b.getI64IntegerAttr(1),
                                            c.b.getI64IntegerAttr(0)));
    Value RzrT, RhT;
    if (cell == Cell::GRU) {
      RzrT = e.slice(RT, 1, 0, 2 * H);
      RhT = e.slice(RT, 1, 2 * H, 3 * H);
    }
    Value pi, po, pf;
    if (cell == Cell::LSTM && c.has(7)) {
      Value pd = e.at(c.in[7], 0, d);
      pi = e.slice(pd, 0, 0, H);
      po = e.slice(pd, 0, H, 2 * H);
      pf = e.slice(pd, 0, 2 * H, 3 * H);
    }
    Value h = e.at(h0, 0, d), cs = cell == Cell::LSTM ? e.at(c0, 0, d) : Value();
    Value zero = e.scalar(0, et), one = e.scalar(1, et);
    SmallVector<Value> steps(T);
    for (int64_t s = 0; s < T && e.ok(); ++s) {
      const int64_t t = reverse && !reverseSeqs ? T - 1 - s : s;
      Value xt = e.at(xw, 0, t); // [B, G*H]
      Value hn, cn;
      switch (cell) {
      case Cell::RNN:
        hn = gate(e.add(xt, e.matmul(h, RT)), act[0]);
        break;
      case Cell::GRU: {
        Value zr = e.add(e.slice(xt, 1, 0, 2 * H), e.matmul(h, RzrT));
        Value z = gate(e.slice(zr, 1, 0, H), act[0]);
        Value r = gate(e.slice(zr, 1, H, 2 * H), act[0]);
        Value xh = e.slice(xt, 1, 2 * H, 3 * H), pre;
        if (linearBeforeReset) {
          Value hr = e.matmul(h, RhT);
          if (rbh)
            hr = e.add(hr, rbh);
          pre = e.add(xh, e.mul(r, hr));
        } else {
          pre = e.add(xh, e.matmul(e.mul(r, h), RhT));
        }
        Value ht = gate(pre, act[1]);
        hn = e.add(ht, e.mul(z, e.sub(h, ht))); // (1 - z) * ht + z * h
        break;
      }
      case Cell::LSTM: {
        Value pre = e.add(xt, e.matmul(h, RT)); // gates i, o, f, c
        Value i = e.slice(pre, 1, 0, H), o = e.slice(pre, 1, H, 2 * H),
              f = e.slice(pre, 1, 2 * H, 3 * H), g = e.slice(pre, 1, 3 * H, 4 * H);
        if (pi) {
          i = e.add(i, e.mul(pi, cs));
          f = e.add(f, e.mul(pf, cs));
        }
        i = gate(i, act[0]);
        f = inputForget ? e.sub(one, i) : gate(f, act[0]);
        g = gate(g, act[1]);
        cn = e.add(e.mul(f, cs), e.mul(i, g));
        if (po)
          o = e.add(o, e.mul(po, cn));
        o = gate(o, act[0]);
        hn = e.mul(o, applyActivation(e, act[2], cn));
        break;
      }
      }
      // Batch entries whose sequence has ended keep their state and output zeros.
      SmallVector<double> live;
      for (int64_t b = 0; b < B; ++b)
        live.push_back(s < lens[b]);
      if (llvm::all_of(live, [](double v) { return v != 0; })) {
        steps[t] = hn;
        h = hn;
        cs = cn;
      } else {
        Value mask = e.constant(RankedTensorType::get({B, 1}, c.b.getI1Type()), live);
        steps[t] = e.where(mask, hn, zero);
        h = e.where(mask, hn, h);
        if (cn)
          cs = e.where(mask, cn, cs);
      }
    }
    if (!e.ok())
      return failure();
    if (c.outputUsed(0)) {
      Value y = e.stack(steps, 0); // [T, B, H]
      if (reverseSeqs)
        y = e.take(c.make<ReverseSequenceOp>(y, lensConst, c.b.getI64IntegerAttr(1),
                                             c.b.getI64IntegerAttr(0)));
      ys.push_back(e.unsqueeze(y, 1)); // [T, 1, B, H]
    }
    yhs.push_back(e.unsqueeze(h, 0));
    if (cs)
      ycs.push_back(e.unsqueeze(cs, 0));
  }
  Value Y, Yh = e.concat(yhs, 0), Yc;
  if (c.outputUsed(0))
    Y = e.concat(ys, 1); // [T, D, B, H]
  if (cell == Cell::LSTM)
    Yc = e.concat(ycs, 0);
  if (layout == 1) {
    if (Y)
      Y = e.transpose(Y, {2, 0, 1, 3}); // [B, T, D, H]
    Yh = e.transpose(Yh, {1, 0, 2});    // [B, D, H]
    if (Yc)
      Yc = e.transpose(Yc, {1, 0, 2});
  }
  if (!e.ok())
    return failure();
  c.out.push_back(Y);
  c.out.push_back(Yh);
  if (cell == Cell::LSTM)
    c.out.push_back(Yc);
  return success();
}

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

const onnx::GraphProto *graphAttr(Ctx &c, StringRef name) {
  const auto *a = c.attr(name);
  if (!a || !a->has_g()) {
    (void)c.error("missing graph attribute '" + name + "'");
    return nullptr;
  }
  return &a->g();
}

/// Imports one branch of an If; an error unless it has as many outputs as the node.
FailureOr<SmallVector<Value>> importBranch(Ctx &c, StringRef which) {
  const onnx::GraphProto *branch = graphAttr(c, which);
  if (!branch)
    return failure();
  auto outs = importSubgraph(c.graph, *branch, {});
  if (failed(outs))
    return failure();
  if (int64_t(outs->size()) != int64_t(c.numOutputs()))
    return FailureOr<SmallVector<Value>>(c.error(which + " has " + Twine(outs->size()) +
                                                 " outputs, the node " + Twine(c.numOutputs())));
  return outs;
}

/// If with a condition that does not fold (computed from model inputs): both branches are
/// imported inline and output k is where(cond, then_k, else_k), cond reshaped to rank 0 so that
/// it broadcasts. Needs equal types (shape and dtype) for each pair of branch outputs; otherwise
/// an error naming the output and what the condition depends on. Both branches run; ONNX ops
/// have no side effects, and the select takes each element from the chosen branch only, so the
/// result is exactly the chosen branch's (a NaN or inf of the other branch does not leak).
LogicalResult importDataDependentIf(Ctx &c) {
  // A branch that cannot be imported: say why it was imported at all (the error above names the
  // node inside it), and how to import only the taken branch.
  auto branchFailed = [&](StringRef branch) {
    llvm::errs() << "note: node '" << c.node.name() << "' (If): the error above is in its "
                 << branch << "; the condition is not a compile-time constant, so both branches "
                 << "are imported; " << c.dependence(c.in[0]) << "\n";
    return failure();
  };
  auto thenOuts = importBranch(c, "then_branch");
  if (failed(thenOuts))
    return branchFailed("then_branch");
  auto elseOuts = importBranch(c, "else_branch");
  if (failed(elseOuts))
    return branchFailed("else_branch");
  Emit e(c);
  Value cond = e.reshape(c.in[0], {});
  for (auto [k, t, f] : llvm::enumerate(*thenOuts, *elseOuts)) {
    if (t.getType() != f.getType())
      return c.error("the condition is not a compile-time constant and output " + Twine(k) +
                     (c.outputUsed(k) ? " ('" + c.node.output(k) + "')" : std::string()) +
                     " differs between the branches (then " + typeStr(t.getType()) + ", else " +
                     typeStr(f.getType()) +
                     "); a data-dependent If needs branch outputs of equal shapes and types; " +
                     c.dependence(c.in[0]));
    c.out.push_back(t == f ? t : e.where(cond, t, f));
  }
  return e.result();
}

/// If (ONNX spec "If"): a constant condition imports only the chosen branch; any other
/// condition selects between both branches (importDataDependentIf). cond: bool, one element.
LogicalResult importIf(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  if (c.typeOf(0).getNumElements() != 1)
    return c.error("cond must hold one value, it has shape " + typeStr(c.typeOf(0)));
  Attribute value;
  if (!matchPattern(c.in[0], m_Constant(&value)))
    return importDataDependentIf(c);
  auto cond = c.constInput(0, "cond");
  if (failed(cond))
    return failure();
  auto outs = importBranch(c, cond->asInt(0) ? "then_branch" : "else_branch");
  if (failed(outs))
    return failure();
  c.out.append(outs->begin(), outs->end());
  return success();
}

LogicalResult importLoop(Ctx &c) {
  const onnx::GraphProto *body = graphAttr(c, "body");
  if (!body)
    return failure();
  std::optional<int64_t> tripCount;
  if (c.has(0)) {
    auto m = constScalarInt(c, 0, "M (trip count)");
    if (failed(m))
      return failure();
    tripCount = *m;
  }
  bool cond = true;
  if (c.has(1)) {
    auto v = constScalarInt(c, 1, "cond");
    if (failed(v))
      return failure();
    cond = *v != 0;
  }
  if (!tripCount && !c.has(1))
    return c.error("Loop without a trip count or condition never ends");
  if (tripCount && *tripCount > kMaxUnroll)
    return c.error("trip count " + Twine(*tripCount) + " exceeds the unroll limit " +
                   Twine(kMaxUnroll));
  const int64_t numCarried = int64_t(c.in.size()) - 2;
  if (numCarried < 0 || body->input_size() != numCarried + 2 ||
      body->output_size() < numCarried + 1)
    return c.error("the body must take (iteration, cond, " + Twine(std::max<int64_t>(numCarried, 0)) +
                   " carried values) and return (cond, carried values, scan outputs)");
  for (int64_t k = 0; k < numCarried; ++k)
    if (!c.has(2 + k))
      return c.error("loop-carried input " + Twine(2 + k) + " is missing");
  const int64_t numScans = body->output_size() - 1 - numCarried;
  SmallVector<Value> carried(c.in.begin() + 2, c.in.end());
  SmallVector<SmallVector<Value>> scans(numScans);
  Emit e(c);
  for (int64_t i = 0; (!tripCount || i < *tripCount) && cond; ++i) {
    if (i >= kMaxUnroll)
      return c.error("the loop runs past the unroll limit " + Twine(kMaxUnroll));
    SmallVector<Value> args{e.constant(RankedTensorType::get({}, c.b.getI64Type()), {double(i)}),
                            e.constant(RankedTensorType::get({}, c.b.getI1Type()), {1.0})};
    args.append(carried);
    auto outs = importSubgraph(c.graph, *body, args);
    if (failed(outs))
      return failure();
    Attribute condAttr;
    if (!matchPattern((*outs)[0], m_Constant(&condAttr)))
      return c.error("the loop's condition output does not fold to a constant (a data-dependent "
                     "loop is not supported)");
    auto h = HostTensor::from(condAttr);
    if (!h || h->numel() != 1)
      return c.error("the loop's condition output must hold one value");
    cond = h->asInt(0) != 0;
    carried.assign(outs->begin() + 1, outs->begin() + 1 + numCarried);
    for (int64_t k = 0; k < numScans; ++k)
      scans[k].push_back((*outs)[1 + numCarried + k]);
  }
  c.out.append(carried.begin(), carried.end());
  for (int64_t k = 0; k < numScans; ++k) {
    if (scans[k].empty())
      return c.error("scan output " + Twine(k) + " of a loop that runs no iteration has no "
                     "known shape");
    if (failed(setOut(c, e.stack(scans[k], 0))))
      return failure();
  }
  return success();
}

LogicalResult importScan(Ctx &c) {
  const onnx::GraphProto *body = graphAttr(c, "body");
  if (!body)
    return failure();
  const auto *nsi = c.attr("num_scan_inputs");
  if (!nsi)
    return c.error("missing required attribute 'num_scan_inputs'");
  const int64_t M = nsi->i();
  // Opset 8: input 0 is the optional sequence_lens and every tensor has a leading batch dim.
  const bool batched = c.opset < 9;
  const int64_t first = batched ? 1 : 0;
  const int64_t N = int64_t(c.in.size()) - first - M;
  if (M < 1 || N < 0)
    return c.error("num_scan_inputs " + Twine(M) + " does not fit the " + Twine(c.in.size()) +
                   " inputs");
  if (body->input_size() != N + M || body->output_size() < N)
    return c.error("the body must take " + Twine(N + M) + " inputs and return at least " +
                   Twine(N) + " outputs");
  const int64_t K = body->output_size() - N;
  for (int64_t k = first; k < int64_t(c.in.size()); ++k)
    if (!c.has(k))
      return c.error("input " + Twine(k) + " is missing");
  auto ints = [&](StringRef name, int64_t n) {
    SmallVector<int64_t> v(n, 0);
    if (auto a = c.attrInts(name))
      v = *a;
    return v;
  };
  SmallVector<int64_t> inAxes = ints("scan_input_axes", M),
                       inDirs = ints(batched ? "directions" : "scan_input_directions", M),
                       outAxes = ints("scan_output_axes", K),
                       outDirs = ints("scan_output_directions", K);
  if (int64_t(inAxes.size()) != M || int64_t(inDirs.size()) != M ||
      int64_t(outAxes.size()) != K || int64_t(outDirs.size()) != K)
    return c.error("scan axes and directions need one entry per scan input / output");
  Emit e(c);
  // Per batch entry (opset 8) or once: the states and scan inputs seen by the body.
  const int64_t batch = batched ? c.typeOf(first).getDimSize(0) : 1;
  int64_t T = -1;
  for (int64_t j = 0; j < M; ++j) {
    auto t = c.typeOf(first + N + j);
    int64_t rank = t.getRank() - (batched ? 1 : 0);
    auto axis = c.normAxis(inAxes[j], rank, "scan_input_axes entry");
    if (failed(axis))
      return failure();
    inAxes[j] = *axis;
    int64_t len = t.getDimSize(*axis + (batched ? 1 : 0));
    if (T >= 0 && len != T)
      return c.error("scan inputs differ in sequence length (" + Twine(T) + " and " +
                     Twine(len) + ")");
    T = len;
  }
  if (T * batch > kMaxUnroll)
    return c.error("the scan runs " + Twine(T * batch) + " iterations, past the unroll limit " +
                   Twine(kMaxUnroll));
  if (batched && c.has(0)) {
    auto lens = c.constInts(0, "sequence_lens");
    if (failed(lens))
      return failure();
    for (int64_t l : *lens)
      if (l != T)
        return c.error("sequence_lens shorter than the scan inputs are not supported");
  }
  SmallVector<SmallVector<Value>> finalStates(N), scanResults(K);
  for (int64_t b = 0; b < batch; ++b) {
    SmallVector<Value> states, ins;
    for (int64_t k = 0; k < N; ++k)
      states.push_back(batched ? e.at(c.in[first + k], 0, b) : c.in[first + k]);
    for (int64_t j = 0; j < M; ++j)
      ins.push_back(batched ? e.at(c.in[first + N + j], 0, b) : c.in[first + N + j]);
    SmallVector<SmallVector<Value>> pieces(K, SmallVector<Value>(T));
    for (int64_t t = 0; t < T; ++t) {
      SmallVector<Value> args(states);
      for (int64_t j = 0; j < M; ++j)
        args.push_back(e.at(ins[j], inAxes[j], inDirs[j] ? T - 1 - t : t));
      if (!e.ok())
        return failure();
      auto outs = importSubgraph(c.graph, *body, args);
      if (failed(outs))
        return failure();
      states.assign(outs->begin(), outs->begin() + N);
      for (int64_t k = 0; k < K; ++k)
        pieces[k][outDirs[k] ? T - 1 - t : t] = (*outs)[N + k];
    }
    for (int64_t k = 0; k < N; ++k)
      finalStates[k].push_back(states[k]);
    for (int64_t k = 0; k < K; ++k) {
      if (T == 0)
        return c.error("a scan over an empty sequence is not supported");
      int64_t rank = Emit::type(pieces[k][0]).getRank() + 1;
      auto axis = c.normAxis(outAxes[k], rank, "scan_output_axes entry");
      if (failed(axis))
        return failure();
      scanResults[k].push_back(e.stack(pieces[k], *axis));
    }
  }
  for (int64_t k = 0; k < N; ++k)
    c.out.push_back(batched ? e.stack(finalStates[k], 0) : finalStates[k][0]);
  for (int64_t k = 0; k < K; ++k)
    c.out.push_back(batched ? e.stack(scanResults[k], 0) : scanResults[k][0]);
  return e.result();
}

//===----------------------------------------------------------------------===//
// Signal processing
//===----------------------------------------------------------------------===//

/// DFT of `x` [..., N (at axis), ..., C] (C = 1 real, 2 complex) at length L (zero-padded or
/// truncated) → [..., K (at axis), ..., 2], K = onesided ? L/2 + 1 : L: one matmul of
/// [M, C·L] by the constant DFT matrix [C·L, 2K]. The inverse uses e^{+iθ} and scales by 1/L.
Value dft(Emit &e, Value x, int64_t axis, int64_t L, bool onesided, bool inverse) {
  Ctx &c = e.c;
  auto t = Emit::type(x);
  const int64_t r = t.getRank(), C = t.getDimSize(r - 1), N = t.getDimSize(axis);
  Type et = t.getElementType();
  if (C != 1 && C != 2) {
    (void)c.error("the last dim must be 1 (real) or 2 (complex), got " + Twine(C));
    return e.fail();
  }
  if (L < 1) {
    (void)c.error("dft_length must be positive");
    return e.fail();
  }
  const int64_t K = onesided ? L / 2 + 1 : L;
  if (C * L * 2 * K > kMaxFoldElements) {
    (void)c.error("DFT of length " + Twine(L) + " is too long for the dense DFT matrix");
    return e.fail();
  }
  // [others..., C, N]
  SmallVector<int64_t> perm, others;
  for (int64_t dd = 0; dd < r - 1; ++dd)
    if (dd != axis)
      perm.push_back(dd);
  int64_t M = 1;
  for (int64_t dd : perm) {
    others.push_back(t.getDimSize(dd));
    M *= t.getDimSize(dd);
  }
  perm.push_back(r - 1);
  perm.push_back(axis);
  Value xt = e.transpose(x, perm);
  if (L < N) {
    xt = e.slice(xt, r - 1, 0, L);
  } else if (L > N) {
    SmallVector<int64_t> padShape(others);
    padShape.append({C, L - N});
    xt = e.concat({xt, e.zeros(padShape, et)}, r - 1);
  }
  Value xm = e.reshape(xt, {M, C * L});
  std::vector<double> mat(C * L * 2 * K);
  const double scale = inverse ? 1.0 / double(L) : 1.0, sign = inverse ? 1.0 : -1.0;
  for (int64_t ci = 0; ci < C; ++ci)
    for (int64_t n = 0; n < L; ++n)
      for (int64_t k = 0; k < K; ++k) {
        double theta = 2.0 * M_PI * double((k * n) % L) / double(L);
        double cs = std::cos(theta) * scale, sn = sign * std::sin(theta) * scale;
        double *row = &mat[(ci * L + n) * 2 * K];
        // (xr + i·xi)(cos + i·sn): real = xr·cos − xi·sn, imag = xr·sn + xi·cos.
        row[k] = ci == 0 ? cs : -sn;
        row[K + k] = ci == 0 ? sn : cs;
      }
  Value w = e.constant(RankedTensorType::get({C * L, 2 * K}, et), mat);
  Value y = e.matmul(xm, w); // [M, 2K]
  SmallVector<int64_t> shape(others);
  shape.append({2, K});
  y = e.reshape(y, shape); // [others..., 2, K]
  SmallVector<int64_t> back;
  for (int64_t dd = 0, o = 0; dd < r; ++dd)
    back.push_back(dd == axis ? r - 1 : dd == r - 1 ? r - 2 : o++);
  return e.transpose(y, back);
}

LogicalResult importDFT(Ctx &c) {
  if (failed(c.requireInputs(1)) || failed(requireF32(c, 0)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() < 2)
    return c.error("input must have rank >= 2 ([..., signal, 1 or 2])");
  int64_t axisValue = c.attrInt("axis", 1);
  if (c.opset >= 20) {
    axisValue = -2;
    if (c.has(2)) {
      auto a = constScalarInt(c, 2, "axis");
      if (failed(a))
        return failure();
      axisValue = *a;
    }
  }
  auto axis = c.normAxis(axisValue, t.getRank());
  if (failed(axis))
    return failure();
  if (*axis == t.getRank() - 1)
    return c.error("axis must not be the last (real/imaginary) dim");
  int64_t L = t.getDimSize(*axis);
  if (c.has(1)) {
    auto l = constScalarInt(c, 1, "dft_length");
    if (failed(l))
      return failure();
    L = *l;
  }
  Emit e(c);
  return setOut(c, dft(e, c.in[0], *axis, L, c.attrInt("onesided", 0) != 0,
                       c.attrInt("inverse", 0) != 0));
}

LogicalResult importSTFT(Ctx &c) {
  if (failed(c.requireInputs(2)) || failed(requireF32(c, 0)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() != 3)
    return c.error("signal must be [batch, length, 1 or 2]");
  auto step = constScalarInt(c, 1, "frame_step");
  if (failed(step))
    return failure();
  if (*step < 1)
    return c.error("frame_step must be positive");
  int64_t L = -1;
  if (c.has(3)) {
    auto l = constScalarInt(c, 3, "frame_length");
    if (failed(l))
      return failure();
    L = *l;
  }
  if (c.has(2)) {
    auto wt = c.typeOf(2);
    if (wt.getRank() != 1 || wt.getElementType() != t.getElementType())
      return c.error("window must be a 1-D tensor of the signal's element type");
    if (L >= 0 && L != wt.getDimSize(0))
      return c.error("window length " + Twine(wt.getDimSize(0)) + " differs from frame_length " +
                     Twine(L));
    L = wt.getDimSize(0);
  }
  if (L < 1)
    return c.error("STFT needs a window or a positive frame_length");
  const int64_t S = t.getDimSize(1);
  if (S < L)
    return c.error("the signal (" + Twine(S) + " samples) is shorter than one frame (" + Twine(L) +
                   ")");
  const int64_t frames = 1 + (S - L) / *step;
  SmallVector<int64_t> idx;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t l = 0; l < L; ++l)
      idx.push_back(f * *step + l);
  Emit e(c);
  Value indices = c.constant(DenseElementsAttr::get(
      RankedTensorType::get({frames, L}, c.b.getI64Type()), ArrayRef<int64_t>(idx)));
  Value framed = e.take(c.make<GatherOp>(c.in[0], indices, c.b.getI64IntegerAttr(1)));
  if (c.has(2))
    framed = e.mul(framed, e.reshape(c.in[2], {L, 1})); // [batch, frames, L, C]
  return setOut(c, dft(e, framed, 2, L, c.attrInt("onesided", 1) != 0, false));
}

enum class Window { Hann, Hamming, Blackman };

LogicalResult importWindow(Ctx &c, Window kind) {
  if (failed(c.requireInputs(1)))
    return failure();
  auto size = constScalarInt(c, 0, "size");
  if (failed(size))
    return failure();
  if (*size < 0 || *size > kMaxFoldElements)
    return c.error("window size " + Twine(*size) + " is out of range");
  Type et = elementTypeFor(c.attrInt("output_datatype", onnx::TensorProto::FLOAT), c.ctx());
  if (!et)
    return c.error("unsupported output_datatype " +
                   onnxTypeName(c.attrInt("output_datatype", 1)));
  const int64_t n = *size;
  // Periodic windows have period N (for spectral analysis), symmetric ones N − 1.
  const double period = c.attrInt("periodic", 1) ? double(n) : double(std::max<int64_t>(n - 1, 1));
  std::vector<double> v(n);
  for (int64_t k = 0; k < n; ++k) {
    double x = 2.0 * M_PI * double(k) / period;
    switch (kind) {
    case Window::Hann:
      v[k] = 0.5 - 0.5 * std::cos(x);
      break;
    case Window::Hamming:
      v[k] = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(x);
      break;
    case Window::Blackman:
      v[k] = 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2.0 * x);
      break;
    }
  }
  Emit e(c);
  return setOut(c, e.constant(RankedTensorType::get({n}, et), v));
}

/// Triangular mel filters (mel(f) = 2595·log10(1 + f/700)) with peak 1, over the onesided DFT bins
/// [dft_length/2 + 1, num_mel_bins]; band edges are snapped to DFT bins as ONNX's reference does.
LogicalResult importMelWeightMatrix(Ctx &c) {
  if (failed(c.requireInputs(5)))
    return failure();
  auto bins = constScalarInt(c, 0, "num_mel_bins"), len = constScalarInt(c, 1, "dft_length"),
       rate = constScalarInt(c, 2, "sample_rate");
  auto lo = constScalar(c, 3, "lower_edge_hertz"), hi = constScalar(c, 4, "upper_edge_hertz");
  if (failed(bins) || failed(len) || failed(rate) || failed(lo) || failed(hi))
    return failure();
  if (*bins < 1 || *len < 1 || *rate < 1)
    return c.error("num_mel_bins, dft_length and sample_rate must be positive");
  Type et = elementTypeFor(c.attrInt("output_datatype", onnx::TensorProto::FLOAT), c.ctx());
  if (!et)
    return c.error("unsupported output_datatype " +
                   onnxTypeName(c.attrInt("output_datatype", 1)));
  const int64_t spec = *len / 2 + 1, nb = *bins;
  if (spec * nb > kMaxFoldElements)
    return c.error("the mel weight matrix is too large");
  auto mel = [](double f) { return 2595.0 * std::log10(1.0 + f / 700.0); };
  const double lowMel = mel(*lo), step = (mel(*hi) - lowMel) / double(nb + 2);
  SmallVector<int64_t> edge(nb + 2);
  for (int64_t i = 0; i < nb + 2; ++i) {
    double hz = 700.0 * (std::pow(10.0, (double(i) * step + lowMel) / 2595.0) - 1.0);
    edge[i] = int64_t(std::floor(double(*len + 1) * hz / double(*rate)));
  }
  std::vector<double> w(spec * nb, 0.0);
  auto set = [&](int64_t j, int64_t i, double v) {
    if (j >= 0 && j < spec)
      w[j * nb + i] = v;
  };
  for (int64_t i = 0; i < nb; ++i) {
    int64_t left = edge[i], center = edge[i + 1], right = edge[i + 2];
    if (center == left)
      set(center, i, 1.0);
    else
      for (int64_t j = left; j <= center; ++j)
        set(j, i, double(j - left) / double(center - left));
    if (right > center)
      for (int64_t j = center; j < right; ++j)
        set(j, i, double(right - j) / double(right - center));
  }
  Emit e(c);
  return setOut(c, e.constant(RankedTensorType::get({spec, nb}, et), w));
}

//===----------------------------------------------------------------------===//
// Det, LRN, ReverseSequence, GridSample, RoiAlign
//===----------------------------------------------------------------------===//

LogicalResult importDet(Ctx &c) {
  if (failed(c.requireInputs(1)))
    return failure();
  Emit e(c);
  return setOut(c, e.take(c.make<DetOp>(c.in[0])));
}

/// y = x / (bias + alpha/size · Σ_{window over channels} x²)^beta; the window sum is a matmul
/// with a constant [C, C] band matrix (ONNX LRN; Krizhevsky et al. 2012).
LogicalResult importLRN(Ctx &c) {
  if (failed(c.requireInputs(1)) || failed(requireF32(c, 0)))
    return failure();
  auto t = c.typeOf(0);
  if (t.getRank() < 3)
    return c.error("input must be [N, C, D1, ...]");
  const auto *sizeAttr = c.attr("size");
  if (!sizeAttr || sizeAttr->i() < 1)
    return c.error("attribute 'size' must be a positive integer");
  const int64_t size = sizeAttr->i(), N = t.getDimSize(0), C = t.getDimSize(1);
  const double alpha = c.attrFloat("alpha", 1e-4f), beta = c.attrFloat("beta", 0.75f),
               bias = c.attrFloat("bias", 1.0f);
  int64_t rest = t.getNumElements() / std::max<int64_t>(N * C, 1);
  const int64_t below = (size - 1) / 2, above = size - 1 - below;
  std::vector<double> band(C * C, 0.0);
  for (int64_t o = 0; o < C; ++o)
    for (int64_t i = std::max<int64_t>(0, o - below); i <= std::min(C - 1, o + above); ++i)
      band[o * C + i] = 1.0;
  Emit e(c);
  Type et = t.getElementType();
  Value sq = e.reshape(e.mul(c.in[0], c.in[0]), {N, C, rest});
  Value sum = e.matmul(e.constant(RankedTensorType::get({1, C, C}, et), band), sq);
  sum = e.reshape(sum, t.getShape());
  Value den = e.bin<PowOp>(e.add(e.mul(sum, e.scalar(alpha / double(size), et)),
                                 e.scalar(bias, et)),
                           e.scalar(beta, et));
  return setOut(c, e.div(c.in[0], den));
}

LogicalResult importReverseSequence(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  Emit e(c);
  return setOut(c, e.take(c.make<ReverseSequenceOp>(
                       c.in[0], c.in[1], c.b.getI64IntegerAttr(c.attrInt("batch_axis", 1)),
                       c.b.getI64IntegerAttr(c.attrInt("time_axis", 0)))));
}

LogicalResult importGridSample(Ctx &c) {
  if (failed(c.requireInputs(2)))
    return failure();
  if (c.typeOf(0).getRank() != 4)
    return c.error("only 4-D input [N, C, H, W] is supported, got rank " +
                   Twine(c.typeOf(0).getRank()));
  // Opset 20 renamed the modes: linear = bilinear, cubic = bicubic.
  std::string mode = c.attrString("mode", c.opset >= 20 ? "linear" : "bilinear");
  if (mode == "linear")
    mode = "bilinear";
  else if (mode == "cubic")
    mode = "bicubic";
  std::string pad = c.attrString("padding_mode", "zeros");
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return c.error("mode '" + mode + "' is not supported");
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    return c.error("padding_mode '" + pad + "' is not supported");
  Emit e(c);
  return setOut(c, e.take(c.make<GridSampleOp>(c.in[0], c.in[1], c.b.getStringAttr(mode),
                                               c.b.getStringAttr(pad),
                                               c.b.getBoolAttr(c.attrInt("align_corners", 0)))));
}

LogicalResult importRoiAlign(Ctx &c) {
  if (failed(c.requireInputs(3)))
    return failure();
  std::string mode = c.attrString("mode", "avg");
  if (mode != "avg" && mode != "max")
    return c.error("mode '" + mode + "' is not supported");
  // Opset 10 has no coordinate_transformation_mode: its behaviour is "output_half_pixel".
  std::string ctm = c.opset >= 16 ? c.attrString("coordinate_transformation_mode", "half_pixel")
                                  : "output_half_pixel";
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    return c.error("coordinate_transformation_mode '" + ctm + "' is not supported");
  Emit e(c);
  return setOut(c, e.take(c.make<RoiAlignOp>(
                       c.in[0], c.in[1], c.in[2], c.b.getStringAttr(mode),
                       c.b.getI64IntegerAttr(c.attrInt("output_height", 1)),
                       c.b.getI64IntegerAttr(c.attrInt("output_width", 1)),
                       c.b.getI64IntegerAttr(c.attrInt("sampling_ratio", 0)),
                       c.b.getF32FloatAttr(c.attrFloat("spatial_scale", 1.0f)),
                       c.b.getBoolAttr(ctm == "half_pixel"))));
}

//===----------------------------------------------------------------------===//
// ai.onnx.preview.training optimizers
//===----------------------------------------------------------------------===//

/// The gradient with the L2 regularization term: norm·X + G (G alone when norm is 0).
Value regularized(Emit &e, Value X, Value G, double norm) {
  return norm == 0 ? G : e.add(e.mul(X, e.scalar(norm, Emit::type(X).getElementType())), G);
}

/// Inputs (R, T, then `groups` lists of n tensors each): n, or an error.
FailureOr<int64_t> optimizerArity(Ctx &c, int64_t groups) {
  int64_t rest = int64_t(c.in.size()) - 2;
  if (rest < groups || rest % groups != 0 || int64_t(c.numOutputs()) != rest / groups * (groups - 1))
    return FailureOr<int64_t>(c.error("expects R, T and " + Twine(groups) +
                                      " equally long lists of tensors"));
  for (size_t i = 0; i < c.in.size(); ++i)
    if (!c.has(i))
      return FailureOr<int64_t>(c.error("input " + Twine(i) + " is missing"));
  for (size_t i = 2; i < c.in.size(); ++i)
    if (!c.typeOf(i).getElementType().isF32())
      return FailureOr<int64_t>(c.error("only float32 tensors are supported"));
  if (!c.typeOf(0).getElementType().isF32() || c.typeOf(0).getNumElements() != 1 ||
      c.typeOf(1).getNumElements() != 1)
    return FailureOr<int64_t>(c.error("R must be a float32 scalar and T an integer scalar"));
  return rest / groups;
}

/// Adagrad: r = R / (1 + T·decay); g = norm·X + G; H' = H + g²; X' = X − r·g / (√H' + ε).
LogicalResult importAdagrad(Ctx &c) {
  auto n = optimizerArity(c, 3);
  if (failed(n))
    return failure();
  Emit e(c);
  Type f32 = c.b.getF32Type();
  auto s = [&](double v) { return e.scalar(v, f32); };
  Value R = e.reshape(c.in[0], {}), T = e.cast(e.reshape(c.in[1], {}), f32);
  Value r = e.div(R, e.add(s(1), e.mul(T, s(c.attrFloat("decay_factor", 0.0f)))));
  SmallVector<Value> xs, hs;
  for (int64_t k = 0; k < *n; ++k) {
    Value X = c.in[2 + k], G = c.in[2 + *n + k], H = c.in[2 + 2 * *n + k];
    Value g = regularized(e, X, G, c.attrFloat("norm_coefficient", 0.0f));
    Value h = e.add(H, e.mul(g, g));
    Value adaptive = e.add(e.un<SqrtOp>(h), s(c.attrFloat("epsilon", 1e-6f)));
    xs.push_back(e.sub(X, e.div(e.mul(g, r), adaptive)));
    hs.push_back(h);
  }
  if (!e.ok())
    return failure();
  c.out.append(xs);
  c.out.append(hs);
  return success();
}

/// Momentum (standard or Nesterov): g = norm·X + G; β' = T > 0 ? β : 1; V' = α·V + β'·g;
/// standard X' = X − R·V', nesterov X' = X − R·(g + α·V').
LogicalResult importMomentum(Ctx &c) {
  auto n = optimizerArity(c, 3);
  if (failed(n))
    return failure();
  for (const char *name : {"alpha", "beta", "mode", "norm_coefficient"})
    if (!c.attr(name))
      return c.error("missing required attribute '" + Twine(name) + "'");
  std::string mode = c.attrString("mode", "standard");
  if (mode != "standard" && mode != "nesterov")
    return c.error("mode must be standard or nesterov, got '" + mode + "'");
  Emit e(c);
  Type f32 = c.b.getF32Type();
  auto s = [&](double v) { return e.scalar(v, f32); };
  Value R = e.reshape(c.in[0], {});
  Value T = e.reshape(c.in[1], {});
  Type tt = Emit::type(c.in[1]).getElementType();
  const double alpha = c.attrFloat("alpha", 0), beta = c.attrFloat("beta", 0),
               norm = c.attrFloat("norm_coefficient", 0);
  Value betaAdj = e.where(e.bin<GreaterOp>(T, e.scalar(0, tt)), s(beta), s(1));
  SmallVector<Value> xs, vs;
  for (int64_t k = 0; k < *n; ++k) {
    Value X = c.in[2 + k], G = c.in[2 + *n + k], V = c.in[2 + 2 * *n + k];
    Value g = regularized(e, X, G, norm);
    Value v = e.add(e.mul(V, s(alpha)), e.mul(g, betaAdj));
    Value step = mode == "nesterov" ? e.add(g, e.mul(v, s(alpha))) : v;
    xs.push_back(e.sub(X, e.mul(step, R)));
    vs.push_back(v);
  }
  if (!e.ok())
    return failure();
  c.out.append(xs);
  c.out.append(vs);
  return success();
}

/// Adam (Kingma & Ba 2015, ONNX's form): g = norm·X + G; V' = α·V + (1−α)·g;
/// H' = β·H + (1−β)·g²; R' = T > 0 ? R·√(1−β^T)/(1−α^T) : R; X' = (1 − post)·(X − R'·V'/(√H' + ε)).
LogicalResult importAdam(Ctx &c) {
  auto n = optimizerArity(c, 4);
  if (failed(n))
    return failure();
  Emit e(c);
  Type f32 = c.b.getF32Type();
  auto s = [&](double v) { return e.scalar(v, f32); };
  const double alpha = c.attrFloat("alpha", 0.9f), beta = c.attrFloat("beta", 0.999f),
               eps = c.attrFloat("epsilon", 1e-6f), norm = c.attrFloat("norm_coefficient", 0.0f),
               post = c.attrFloat("norm_coefficient_post", 0.0f);
  Value R = e.reshape(c.in[0], {});
  Value Ti = e.reshape(c.in[1], {});
  Value T = e.cast(Ti, f32);
  Type tt = Emit::type(c.in[1]).getElementType();
  Value corrected =
      e.div(e.mul(R, e.un<SqrtOp>(e.sub(s(1), e.bin<PowOp>(s(beta), T)))),
            e.sub(s(1), e.bin<PowOp>(s(alpha), T)));
  Value r = e.where(e.bin<GreaterOp>(Ti, e.scalar(0, tt)), corrected, R);
  SmallVector<Value> xs, vs, hs;
  for (int64_t k = 0; k < *n; ++k) {
    Value X = c.in[2 + k], G = c.in[2 + *n + k], V = c.in[2 + 2 * *n + k],
          H = c.in[2 + 3 * *n + k];
    Value g = regularized(e, X, G, norm);
    Value v = e.add(e.mul(V, s(alpha)), e.mul(g, s(1 - alpha)));
    Value h = e.add(e.mul(H, s(beta)), e.mul(e.mul(g, g), s(1 - beta)));
    Value x = e.sub(X, e.mul(r, e.div(v, e.add(e.un<SqrtOp>(h), s(eps)))));
    xs.push_back(post != 0 ? e.mul(x, s(1 - post)) : x);
    vs.push_back(v);
    hs.push_back(h);
  }
  if (!e.ok())
    return failure();
  c.out.append(xs);
  c.out.append(vs);
  c.out.append(hs);
  return success();
}

} // namespace

void registerMiscImporters(ImporterTable &table) {
  static const std::pair<const char *, OpImporter> misc[] = {
      {"RNN", [](Ctx &c) { return importRecurrent(c, Cell::RNN); }},
      {"GRU", [](Ctx &c) { return importRecurrent(c, Cell::GRU); }},
      {"LSTM", [](Ctx &c) { return importRecurrent(c, Cell::LSTM); }},
      {"If", importIf},
      {"Loop", importLoop},
      {"Scan", importScan},
      {"DFT", importDFT},
      {"STFT", importSTFT},
      {"HannWindow", [](Ctx &c) { return importWindow(c, Window::Hann); }},
      {"HammingWindow", [](Ctx &c) { return importWindow(c, Window::Hamming); }},
      {"BlackmanWindow", [](Ctx &c) { return importWindow(c, Window::Blackman); }},
      {"MelWeightMatrix", importMelWeightMatrix},
      {"Det", importDet},
      {"LRN", importLRN},
      {"ReverseSequence", importReverseSequence},
      {"GridSample", importGridSample},
      {"RoiAlign", importRoiAlign},
      {"ai.onnx.preview.training.Adagrad", importAdagrad},
      {"ai.onnx.preview.training.Adam", importAdam},
      {"ai.onnx.preview.training.Momentum", importMomentum},
  };
  for (const auto &[name, fn] : misc)
    table[name] = fn;
}

} // namespace colossal::onnx_import

//===- elementwise.cpp - Elementwise CPU kernels: arithmetic, compare, where, unary ----------===//
//
// add sub mul div pow min max (f32, i64), equal less greater (-> bool; inputs f32, i64, bool),
// where (f32, i64, bool), unary neg sqrt reciprocal exp log erf tanh sigmoid relu silu abs (f32;
// neg abs relu also i64) and gelu (f32). Semantics: docs/plan.md; broadcasting is NumPy's.
// All are in-place safe: element i of the output is written after element i of each input is read,
// and every input is either read at index i (same shape) or broadcast from an input the output
// cannot alias (a smaller buffer).
//
// Fast paths: the broadcast layout collapses same-shape operands to one contiguous run and a
// trailing-vector operand to rows with inner stride 1/0; the inner loops are specialised on those
// strides so the compiler vectorizes them, and rows (or chunks of one run) are split over threads.
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "FastMath.h"

#include <cmath>
#include <cstdint>

namespace colossal::runtime::cpu {
namespace {

// ---------------------------------------------------------------- binary arithmetic
struct Add { template <typename T> static T f(T a, T b) { return a + b; } };
struct Sub { template <typename T> static T f(T a, T b) { return a - b; } };
struct Mul { template <typename T> static T f(T a, T b) { return a * b; } };
struct Div {
  static float f(float a, float b) { return a / b; }
  // Truncates toward zero (C++ semantics); x/0 and INT64_MIN/-1 give 0 instead of trapping.
  static int64_t f(int64_t a, int64_t b) {
    return (b == 0 || (b == -1 && a == INT64_MIN)) ? 0 : a / b;
  }
};
struct Pow {
  static float f(float a, float b) { return std::pow(a, b); }
  static int64_t f(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    int64_t r = 1;
    while (b) {
      if (b & 1) r = static_cast<int64_t>(static_cast<uint64_t>(r) * static_cast<uint64_t>(a));
      a = static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(a));
      b >>= 1;
    }
    return r;
  }
};
// NaN propagates (ONNX Min/Max follow numpy.minimum/maximum).
struct Min { template <typename T> static T f(T a, T b) { return (a < b || a != a) ? a : b; } };
struct Max { template <typename T> static T f(T a, T b) { return (a > b || a != a) ? a : b; } };
struct Equal { template <typename T> static uint8_t f(T a, T b) { return a == b; } };
struct Less { template <typename T> static uint8_t f(T a, T b) { return a < b; } };
struct Greater { template <typename T> static uint8_t f(T a, T b) { return a > b; } };

/// y[i] = Op(a[i*SA], b[i*SB]) for compile-time strides 0/1 (vectorizable).
template <typename Op, typename TIn, typename TOut, int SA, int SB>
void binaryRun(TOut *y, const TIn *a, const TIn *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op::f(a[i * SA], b[i * SB]);
}

template <typename Op, typename TIn, typename TOut> llvm::Error runBinary(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  llvm::ArrayRef<int64_t> shapes[2] = {A.shape, B.shape};
  BroadcastLayout l = makeBroadcastLayout(Y.shape, shapes);
  const TIn *a = A.as<const TIn>(), *b = B.as<const TIn>();
  TOut *y = Y.as<TOut>();
  forEachBroadcastRow(l, [&](int64_t yo, const int64_t *offs, int64_t n, const int64_t *st) {
    const TIn *pa = a + offs[0], *pb = b + offs[1];
    TOut *py = y + yo;
    if (st[0] && st[1]) binaryRun<Op, TIn, TOut, 1, 1>(py, pa, pb, n);
    else if (st[0]) binaryRun<Op, TIn, TOut, 1, 0>(py, pa, pb, n);
    else if (st[1]) binaryRun<Op, TIn, TOut, 0, 1>(py, pa, pb, n);
    else binaryRun<Op, TIn, TOut, 0, 0>(py, pa, pb, n);
  });
  return llvm::Error::success();
}

llvm::Error verifyBinary(const KernelCall &c) {
  if (c.inputs[0].dtype != c.outputs[0].dtype || c.inputs[1].dtype != c.outputs[0].dtype)
    return kernelError("operands must all be " + dtypeName(c.outputs[0].dtype).str() + ", got " +
                       dtypeName(c.inputs[0].dtype) + " and " + dtypeName(c.inputs[1].dtype));
  return verifyBroadcastTo(c.inputs, c.outputs[0].shape);
}

llvm::Error verifyCompare(const KernelCall &c) {
  if (c.inputs[0].dtype != c.inputs[1].dtype)
    return kernelError("operands have different dtypes " + dtypeName(c.inputs[0].dtype).str() +
                       " and " + dtypeName(c.inputs[1].dtype));
  DType d = c.inputs[0].dtype;
  if (d != DType::F32 && d != DType::I64 && d != DType::Bool && d != DType::I32)
    return kernelError("compare of dtype " + dtypeName(d) + " is not implemented");
  return verifyBroadcastTo(c.inputs, c.outputs[0].shape);
}

template <typename Op> llvm::Error runCompare(const KernelCall &c) {
  switch (c.inputs[0].dtype) {
  case DType::F32: return runBinary<Op, float, uint8_t>(c);
  case DType::I64: return runBinary<Op, int64_t, uint8_t>(c);
  case DType::I32: return runBinary<Op, int32_t, uint8_t>(c);
  default: return runBinary<Op, uint8_t, uint8_t>(c);
  }
}

// ---------------------------------------------------------------- where
template <typename T> llvm::Error runWhere(const KernelCall &c) {
  const TensorRef &C = c.inputs[0], &X = c.inputs[1], &Yi = c.inputs[2], &O = c.outputs[0];
  llvm::ArrayRef<int64_t> shapes[3] = {C.shape, X.shape, Yi.shape};
  BroadcastLayout l = makeBroadcastLayout(O.shape, shapes);
  const uint8_t *cond = C.as<const uint8_t>();
  const T *x = X.as<const T>(), *y = Yi.as<const T>();
  T *out = O.as<T>();
  forEachBroadcastRow(l, [&](int64_t oo, const int64_t *offs, int64_t n, const int64_t *st) {
    const uint8_t *pc = cond + offs[0];
    const T *px = x + offs[1], *py = y + offs[2];
    T *po = out + oo;
    if (st[0] && st[1] && st[2]) {
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i] ? px[i] : py[i];
    } else {
      int64_t s0 = st[0], s1 = st[1], s2 = st[2];
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i * s0] ? px[i * s1] : py[i * s2];
    }
  });
  return llvm::Error::success();
}

llvm::Error verifyWhere(const KernelCall &c) {
  if (llvm::Error e = verifyDType(c.inputs[0], DType::Bool, "condition")) return e;
  if (c.inputs[1].dtype != c.outputs[0].dtype || c.inputs[2].dtype != c.outputs[0].dtype)
    return kernelError("x and y must be " + dtypeName(c.outputs[0].dtype).str());
  return verifyBroadcastTo(c.inputs, c.outputs[0].shape);
}

// ---------------------------------------------------------------- unary
struct Neg { template <typename T> static T f(T x) { return -x; } };
struct Abs { template <typename T> static T f(T x) { return x < 0 ? -x : x; } };
struct Relu { template <typename T> static T f(T x) { return x > 0 ? x : T(0); } };
struct Sqrt { static float f(float x) { return std::sqrt(x); } };
struct Reciprocal { static float f(float x) { return 1.0f / x; } };
struct Exp { static float f(float x) { return fastExp(x); } };
struct Log { static float f(float x) { return std::log(x); } };
struct Erf { static float f(float x) { return fastErf(x); } };
struct Tanh { static float f(float x) { return fastTanh(x); } };
struct Sigmoid { static float f(float x) { return fastSigmoid(x); } };
struct Silu { static float f(float x) { return x * fastSigmoid(x); } };
struct GeluErf {
  static float f(float x) { return 0.5f * x * (1.0f + fastErf(x * 0.70710678118654752f)); }
};
struct GeluTanh {
  static float f(float x) {
    return 0.5f * x * (1.0f + fastTanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  }
};

template <typename Op, typename T> void unaryLoop(const TensorRef &X, const TensorRef &Y) {
  const T *x = X.as<const T>();
  T *y = Y.as<T>();
  parallelFor(Y.numel(), 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = Op::f(x[i]);
  });
}

template <typename Op, typename T> llvm::Error runUnary(const KernelCall &c) {
  unaryLoop<Op, T>(c.inputs[0], c.outputs[0]);
  return llvm::Error::success();
}

llvm::Error verifyUnary(const KernelCall &c) {
  if (c.inputs[0].dtype != c.outputs[0].dtype)
    return kernelError("input dtype " + dtypeName(c.inputs[0].dtype).str() + " differs from output " +
                       dtypeName(c.outputs[0].dtype).str());
  return verifySameShape(c.inputs[0], c.outputs[0], "input and output");
}

llvm::Error verifyGelu(const KernelCall &c) {
  if (llvm::Error e = verifyUnary(c)) return e;
  std::string a = c.attrString("approximate", "none");
  if (a != "none" && a != "tanh") return kernelError("approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
  return llvm::Error::success();
}

llvm::Error runGelu(const KernelCall &c) {
  if (c.attrString("approximate", "none") == "tanh") unaryLoop<GeluTanh, float>(c.inputs[0], c.outputs[0]);
  else unaryLoop<GeluErf, float>(c.inputs[0], c.outputs[0]);
  return llvm::Error::success();
}

// ---------------------------------------------------------------- registration
void addKernel(KernelRegistry &r, const char *op, DType dtype, int nIn,
               llvm::Error (*verify)(const KernelCall &), llvm::Error (*run)(const KernelCall &),
               std::vector<AttrSpec> attrs = {}) {
  KernelDesc d;
  d.op = op;
  d.dtype = dtype;
  d.minInputs = d.maxInputs = nIn;
  d.verify = verify;
  d.run = run;
  d.attrs = std::move(attrs);
  r.add(std::move(d));
}

}  // namespace

void registerElementwiseKernels(KernelRegistry &r) {
#define BIN(name, Op)                                                                      \
  addKernel(r, name, DType::F32, 2, verifyBinary, runBinary<Op, float, float>);            \
  addKernel(r, name, DType::I64, 2, verifyBinary, runBinary<Op, int64_t, int64_t>);
  BIN("add", Add) BIN("sub", Sub) BIN("mul", Mul) BIN("div", Div) BIN("pow", Pow)
  BIN("min", Min) BIN("max", Max)
#undef BIN
  addKernel(r, "equal", DType::Bool, 2, verifyCompare, runCompare<Equal>);
  addKernel(r, "less", DType::Bool, 2, verifyCompare, runCompare<Less>);
  addKernel(r, "greater", DType::Bool, 2, verifyCompare, runCompare<Greater>);
  addKernel(r, "where", DType::F32, 3, verifyWhere, runWhere<float>);
  addKernel(r, "where", DType::I64, 3, verifyWhere, runWhere<int64_t>);
  addKernel(r, "where", DType::Bool, 3, verifyWhere, runWhere<uint8_t>);
#define UN(name, Op) addKernel(r, name, DType::F32, 1, verifyUnary, runUnary<Op, float>);
  UN("neg", Neg) UN("sqrt", Sqrt) UN("reciprocal", Reciprocal) UN("exp", Exp) UN("log", Log)
  UN("erf", Erf) UN("tanh", Tanh) UN("sigmoid", Sigmoid) UN("relu", Relu) UN("silu", Silu)
  UN("abs", Abs)
#undef UN
  addKernel(r, "neg", DType::I64, 1, verifyUnary, runUnary<Neg, int64_t>);
  addKernel(r, "abs", DType::I64, 1, verifyUnary, runUnary<Abs, int64_t>);
  addKernel(r, "relu", DType::I64, 1, verifyUnary, runUnary<Relu, int64_t>);
  addKernel(r, "gelu", DType::F32, 1, verifyGelu, runGelu, {{"approximate", AttrKind::String}});
}

}  // namespace colossal::runtime::cpu

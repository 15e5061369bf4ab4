//===- elementwise.cpp - Elementwise CPU kernels: arithmetic, compare, where, unary ----------===//
//
// add sub mul div pow min max (every numeric dtype: f32, f64, f16, i64, i32, i16, i8, u8, u16, u32,
// u64; unsigned ones compare, divide and wrap as unsigned),
// equal less greater (-> bool; inputs any numeric dtype or bool), where (every dtype: it moves
// bytes), unary neg abs relu (every numeric dtype), sqrt reciprocal exp log erf tanh sigmoid silu
// gelu (f32, f64, f16). f16 computes in f32 (Elementwise.h). Semantics: docs/plan.md;
// broadcasting is NumPy's.
// All are in-place safe: element i of the output is written after element i of each input is read,
// and every input is either read at index i (same shape) or broadcast from an input the output
// cannot alias (a smaller buffer).
//
// Fast paths: the broadcast layout collapses same-shape operands to one contiguous run and a
// trailing-vector operand to rows with inner stride 1/0; the inner loops are specialised on those
// strides so the compiler vectorizes them, and rows (or chunks of one run) are split over threads.
// float32 exp/erf/tanh/sigmoid use the vectorizable FastMath.h forms; f64 uses libm.
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "Activations.h"
#include "Elementwise.h"
#include "FastMath.h"

#include <cmath>
#include <cstdint>

namespace colossal::runtime::cpu {
namespace {

// ---------------------------------------------------------------- binary arithmetic
struct Add { template <typename T> static T f(T a, T b) { return a + b; } };
struct Sub { template <typename T> static T f(T a, T b) { return a - b; } };
struct Mul {
  // u16 * u16 promotes to int, which the product can overflow: multiply as uint32 instead.
  template <typename T> static T f(T a, T b) {
    if constexpr (std::is_same_v<T, uint16_t>) return static_cast<T>(uint32_t(a) * b);
    else return a * b;
  }
};
struct Div {
  // Integers truncate toward zero (C++ semantics); x/0 and MIN/-1 give 0 instead of trapping.
  template <typename T> static T f(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return a / b;
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
      return static_cast<T>(a / b);
    }
  }
};
struct Pow {
  template <typename T> static T f(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(a, b);
    } else {
      using U = std::make_unsigned_t<T>;
      if constexpr (std::is_signed_v<T>)
        if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
      // Modular products in uint64 (narrow unsigned types would promote to int and overflow it).
      uint64_t r = 1, x = static_cast<U>(a);
      for (U e = static_cast<U>(b); e; e >>= 1) {
        if (e & 1) r *= x;
        x *= x;
      }
      return static_cast<T>(static_cast<U>(r));
    }
  }
};
// NaN propagates (ONNX Min/Max follow numpy.minimum/maximum).
struct Min { template <typename T> static T f(T a, T b) { return (a < b || a != a) ? a : b; } };
struct Max { template <typename T> static T f(T a, T b) { return (a > b || a != a) ? a : b; } };
struct Equal { template <typename T> static uint8_t f(T a, T b) { return a == b; } };
struct Less { template <typename T> static uint8_t f(T a, T b) { return a < b; } };
struct Greater { template <typename T> static uint8_t f(T a, T b) { return a > b; } };

template <typename Op, typename S> llvm::Error runBinary(const KernelCall &c) {
  broadcastBinary<Op, S, S>(c);
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
  if (d == DType::BF16 || !visitDType(d, [](auto *) {}))
    return kernelError("compare of dtype " + dtypeName(d) + " is not implemented");
  return verifyBroadcastTo(c.inputs, c.outputs[0].shape);
}

template <typename Op> llvm::Error runCompare(const KernelCall &c) {
  visitDType(c.inputs[0].dtype, [&](auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_same_v<S, BF16>) broadcastBinary<Op, S, uint8_t>(c);
  });
  return llvm::Error::success();
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
struct Neg { template <typename T> static T f(T x) { return static_cast<T>(-x); } };
struct Abs { template <typename T> static T f(T x) { return x < 0 ? static_cast<T>(-x) : x; } };
struct Sqrt { template <typename T> static T f(T x) { return std::sqrt(x); } };
struct Reciprocal { template <typename T> static T f(T x) { return T(1) / x; } };
// float uses the vectorizable FastMath.h forms; double the C library.
struct Exp {
  static float f(float x) { return fastExp(x); }
  static double f(double x) { return std::exp(x); }
};
struct Log { template <typename T> static T f(T x) { return std::log(x); } };
struct Erf {
  static float f(float x) { return fastErf(x); }
  static double f(double x) { return std::erf(x); }
};
struct Sigmoid {
  static float f(float x) { return fastSigmoid(x); }
  static double f(double x) { return 1.0 / (1.0 + std::exp(-x)); }
};
struct Silu { template <typename T> static T f(T x) { return x * Sigmoid::f(x); } };
template <typename Op, typename S> llvm::Error runUnary(const KernelCall &c) {
  mapUnary<Op, S>(c.inputs[0], c.outputs[0]);
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

template <typename S> llvm::Error runGelu(const KernelCall &c) {
  if (c.attrString("approximate", "none") == "tanh") mapUnary<GeluTanh, S>(c.inputs[0], c.outputs[0]);
  else mapUnary<GeluErf, S>(c.inputs[0], c.outputs[0]);
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
#define BIN(D, S)                                                                          \
  addKernel(r, "add", DType::D, 2, verifyBinary, runBinary<Add, S>);                       \
  addKernel(r, "sub", DType::D, 2, verifyBinary, runBinary<Sub, S>);                       \
  addKernel(r, "mul", DType::D, 2, verifyBinary, runBinary<Mul, S>);                       \
  addKernel(r, "div", DType::D, 2, verifyBinary, runBinary<Div, S>);                       \
  addKernel(r, "pow", DType::D, 2, verifyBinary, runBinary<Pow, S>);                       \
  addKernel(r, "min", DType::D, 2, verifyBinary, runBinary<Min, S>);                       \
  addKernel(r, "max", DType::D, 2, verifyBinary, runBinary<Max, S>);                       \
  addKernel(r, "neg", DType::D, 1, verifyUnary, runUnary<Neg, S>);                         \
  addKernel(r, "abs", DType::D, 1, verifyUnary, runUnary<Abs, S>);                         \
  addKernel(r, "relu", DType::D, 1, verifyUnary, runUnary<Relu, S>);
  COLOSSAL_NUMERIC_DTYPES(BIN)
#undef BIN
  addKernel(r, "equal", DType::Bool, 2, verifyCompare, runCompare<Equal>);
  addKernel(r, "less", DType::Bool, 2, verifyCompare, runCompare<Less>);
  addKernel(r, "greater", DType::Bool, 2, verifyCompare, runCompare<Greater>);
  // where moves bytes: one instantiation per element size.
  for (int v = 1; v <= kLastDType; ++v) {
    DType d = static_cast<DType>(v);
    switch (dtypeSize(d)) {
    case 1: addKernel(r, "where", d, 3, verifyWhere, runWhere<uint8_t>); break;
    case 2: addKernel(r, "where", d, 3, verifyWhere, runWhere<uint16_t>); break;
    case 4: addKernel(r, "where", d, 3, verifyWhere, runWhere<uint32_t>); break;
    case 8: addKernel(r, "where", d, 3, verifyWhere, runWhere<uint64_t>); break;
    default: break;
    }
  }
#define UN(D, S)                                                                            \
  addKernel(r, "sqrt", DType::D, 1, verifyUnary, runUnary<Sqrt, S>);                        \
  addKernel(r, "reciprocal", DType::D, 1, verifyUnary, runUnary<Reciprocal, S>);            \
  addKernel(r, "exp", DType::D, 1, verifyUnary, runUnary<Exp, S>);                          \
  addKernel(r, "log", DType::D, 1, verifyUnary, runUnary<Log, S>);                          \
  addKernel(r, "erf", DType::D, 1, verifyUnary, runUnary<Erf, S>);                          \
  addKernel(r, "tanh", DType::D, 1, verifyUnary, runUnary<Tanh, S>);                        \
  addKernel(r, "sigmoid", DType::D, 1, verifyUnary, runUnary<Sigmoid, S>);                  \
  addKernel(r, "silu", DType::D, 1, verifyUnary, runUnary<Silu, S>);                        \
  addKernel(r, "gelu", DType::D, 1, verifyGelu, runGelu<S>, {{"approximate", AttrKind::String}});
  COLOSSAL_FLOAT_DTYPES(UN)
#undef UN
}

}  // namespace colossal::runtime::cpu

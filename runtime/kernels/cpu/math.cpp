//===- math.cpp - table-driven elementwise CPU kernels: unary and binary --------------------===//
//
// `unary` (attrs `fn`, `alpha`, `beta`) and `binary` (attr `fn`, NumPy broadcasting): the long tail
// of ONNX elementwise functions, one row per `fn` in the tables below, the same rows as the
// compiler's dialects/Colossal/ElementwiseFns.h (semantics in docs/plan.md). A row names the
// dtypes it accepts; the kernel is keyed by the output dtype, so a predicate (is_nan, less_equal,
// ...) is found under bool and dispatches on its input's dtype. f16 and bf16 compute in f32.
// Both are in-place safe (the memory planner only aliases buffers of equal dtype and size).
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "Elementwise.h"

#include <cmath>
#include <limits>

namespace colossal::runtime::cpu {
namespace {

enum Domain : unsigned { kFloat = 1, kInt = 2, kBool = 4 };

unsigned domainOf(DType d) {
  switch (d) {
  case DType::F32: case DType::F64: case DType::F16: case DType::BF16: return kFloat;
  case DType::I64: case DType::I32: case DType::I16: case DType::I8: case DType::U8: return kInt;
  case DType::Bool: return kBool;
  default: return 0;
  }
}

// ---------------------------------------------------------------- unary functions
// Fn::f(x, alpha, beta) on the compute type T (float or double; integers for the int rows).
template <typename T> T softplus(T x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
#define UFN(Name, expr)                                                                       \
  struct Name {                                                                               \
    template <typename T> static auto f(T x, T alpha, T beta) {                               \
      (void)alpha; (void)beta;                                                                \
      return expr;                                                                            \
    }                                                                                         \
  };
UFN(Cos, std::cos(x))
UFN(Sin, std::sin(x))
UFN(Tan, std::tan(x))
UFN(Acos, std::acos(x))
UFN(Asin, std::asin(x))
UFN(Atan, std::atan(x))
UFN(Cosh, std::cosh(x))
UFN(Sinh, std::sinh(x))
UFN(Acosh, std::acosh(x))
UFN(Asinh, std::asinh(x))
UFN(Atanh, std::atanh(x))
UFN(Ceil, std::ceil(x))
UFN(Floor, std::floor(x))
UFN(Round, std::nearbyint(x))  // the default rounding mode: halves to even
UFN(Sign, x > 0 ? T(1) : x < 0 ? T(-1) : x)
UFN(Softplus, softplus(x))
UFN(Softsign, x / (T(1) + std::fabs(x)))
UFN(Mish, x * std::tanh(softplus(x)))
UFN(HardSwish, x * std::fmax(T(0), std::fmin(T(1), x / T(6) + T(0.5))))
UFN(Elu, x >= 0 ? x : alpha * std::expm1(x))
UFN(Celu, std::fmax(T(0), x) + std::fmin(T(0), alpha * std::expm1(x / alpha)))
UFN(Selu, beta * (x > 0 ? x : alpha * std::expm1(x)))
UFN(LeakyRelu, x >= 0 ? x : alpha * x)
UFN(ThresholdedRelu, x > alpha ? x : T(0))
UFN(HardSigmoid, std::fmax(T(0), std::fmin(T(1), alpha * x + beta)))
UFN(Shrink, x < -alpha ? x + beta : x > alpha ? x - beta : T(0))  // alpha = lambd, beta = bias
UFN(BitwiseNot, static_cast<T>(~x))
UFN(IsNaN, uint8_t(std::isnan(x)))
UFN(IsInf, uint8_t(std::isinf(x)))
UFN(IsPosInf, uint8_t(std::isinf(x) && x > 0))
UFN(IsNegInf, uint8_t(std::isinf(x) && x < 0))
#undef UFN

/// y = Fn(x) with x stored as S; the result is stored as S, or as bool when Fn yields uint8_t.
template <typename Fn, typename S> void unaryFnLoop(const KernelCall &c) {
  using T = typename Elem<S>::C;
  const S *x = c.inputs[0].as<const S>();
  T alpha = static_cast<T>(c.attrFloat("alpha", 0)), beta = static_cast<T>(c.attrFloat("beta", 0));
  using R = decltype(Fn::f(T(), T(), T()));
  if constexpr (std::is_same_v<R, uint8_t>) {
    uint8_t *y = c.outputs[0].as<uint8_t>();
    parallelFor(c.outputs[0].numel(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = Fn::f(Elem<S>::load(x[i]), alpha, beta);
    });
  } else {
    S *y = c.outputs[0].as<S>();
    parallelFor(c.outputs[0].numel(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        y[i] = Elem<S>::store(static_cast<T>(Fn::f(Elem<S>::load(x[i]), alpha, beta)));
    });
  }
}

/// Dispatches on the input dtype (verifyUnaryFn checked it is in the row's domain D).
template <typename Fn, unsigned D> void runUnaryRow(const KernelCall &c) {
  visitDType(c.inputs[0].dtype, [&](auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    constexpr bool isFloat = std::is_floating_point_v<typename Elem<S>::C>;
    if constexpr ((isFloat && (D & kFloat)) || (!isFloat && (D & kInt))) unaryFnLoop<Fn, S>(c);
  });
}

struct UnaryRow {
  const char *name;
  unsigned domain;
  bool boolResult;
  int numParams;
  void (*run)(const KernelCall &);
};

#define ROW(name, Fn, D, boolResult, params) {name, D, boolResult, params, runUnaryRow<Fn, D>}
const UnaryRow kUnaryRows[] = {
    ROW("cos", Cos, kFloat, false, 0),
    ROW("sin", Sin, kFloat, false, 0),
    ROW("tan", Tan, kFloat, false, 0),
    ROW("acos", Acos, kFloat, false, 0),
    ROW("asin", Asin, kFloat, false, 0),
    ROW("atan", Atan, kFloat, false, 0),
    ROW("cosh", Cosh, kFloat, false, 0),
    ROW("sinh", Sinh, kFloat, false, 0),
    ROW("acosh", Acosh, kFloat, false, 0),
    ROW("asinh", Asinh, kFloat, false, 0),
    ROW("atanh", Atanh, kFloat, false, 0),
    ROW("ceil", Ceil, kFloat, false, 0),
    ROW("floor", Floor, kFloat, false, 0),
    ROW("round", Round, kFloat, false, 0),
    ROW("sign", Sign, kFloat | kInt, false, 0),
    ROW("softplus", Softplus, kFloat, false, 0),
    ROW("softsign", Softsign, kFloat, false, 0),
    ROW("mish", Mish, kFloat, false, 0),
    ROW("hard_swish", HardSwish, kFloat, false, 0),
    ROW("elu", Elu, kFloat, false, 1),
    ROW("celu", Celu, kFloat, false, 1),
    ROW("selu", Selu, kFloat, false, 2),
    ROW("leaky_relu", LeakyRelu, kFloat, false, 1),
    ROW("thresholded_relu", ThresholdedRelu, kFloat, false, 1),
    ROW("hard_sigmoid", HardSigmoid, kFloat, false, 2),
    ROW("shrink", Shrink, kFloat, false, 2),
    ROW("bitwise_not", BitwiseNot, kInt, false, 0),
    ROW("is_nan", IsNaN, kFloat, true, 0),
    ROW("is_inf", IsInf, kFloat, true, 0),
    ROW("is_pos_inf", IsPosInf, kFloat, true, 0),
    ROW("is_neg_inf", IsNegInf, kFloat, true, 0),
};
#undef ROW

const UnaryRow *findUnary(llvm::StringRef fn) {
  for (const UnaryRow &r : kUnaryRows)
    if (fn == r.name) return &r;
  return nullptr;
}

llvm::Error verifyUnaryFn(const KernelCall &c) {
  std::string fn = c.attrString("fn", "");
  const UnaryRow *row = findUnary(fn);
  if (!row) return kernelError("unknown unary function '" + fn + "'");
  DType in = c.inputs[0].dtype, out = c.outputs[0].dtype;
  if (!(domainOf(in) & row->domain))
    return kernelError("unary '" + fn + "' of dtype " + dtypeName(in) + " is not implemented");
  DType want = row->boolResult ? DType::Bool : in;
  if (out != want)
    return kernelError("unary '" + fn + "' of " + dtypeName(in) + " must yield " +
                       dtypeName(want) + ", not " + dtypeName(out));
  if ((row->numParams >= 1) != c.hasAttr("alpha") || (row->numParams >= 2) != c.hasAttr("beta"))
    return kernelError("unary '" + fn + "' takes " + llvm::Twine(row->numParams) +
                       " of the attributes alpha, beta");
  return verifySameShape(c.inputs[0], c.outputs[0], "input and output");
}

llvm::Error runUnaryFn(const KernelCall &c) {
  findUnary(c.attrString("fn", ""))->run(c);
  return llvm::Error::success();
}

// ---------------------------------------------------------------- binary functions
template <typename T> T floorMod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return 0;
      T r = static_cast<T>(a % b);
      return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
    } else {
      return static_cast<T>(a % b);
    }
  }
}
template <typename T> T truncMod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fmod(a, b);
  } else {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<T>)
      if (b == -1) return 0;
    return static_cast<T>(a % b);
  }
}
template <typename T> T shiftLeft(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return (b < 0 || uint64_t(b) >= sizeof(T) * 8) ? T(0) : static_cast<T>(static_cast<U>(a) << b);
}
template <typename T> T shiftRight(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return (b < 0 || uint64_t(b) >= sizeof(T) * 8) ? T(0) : static_cast<T>(static_cast<U>(a) >> b);
}

#define BFN(Name, expr)                                                                       \
  struct Name {                                                                               \
    template <typename T> static auto f(T a, T b) { return expr; }                            \
  };
BFN(Mod, floorMod(a, b))
BFN(FMod, truncMod(a, b))
BFN(And, uint8_t((a != 0) & (b != 0)))
BFN(Or, uint8_t((a != 0) | (b != 0)))
BFN(Xor, uint8_t((a != 0) ^ (b != 0)))
BFN(BitAnd, static_cast<T>(a & b))
BFN(BitOr, static_cast<T>(a | b))
BFN(BitXor, static_cast<T>(a ^ b))
BFN(ShiftLeft, shiftLeft(a, b))
BFN(ShiftRight, shiftRight(a, b))
BFN(PRelu, a < 0 ? static_cast<T>(a * b) : a)
BFN(LessEqual, uint8_t(a <= b))
BFN(GreaterEqual, uint8_t(a >= b))
#undef BFN

template <typename Fn, unsigned D> void runBinaryRow(const KernelCall &c) {
  DType in = c.inputs[0].dtype;
  visitDType(in, [&](auto *tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    using T = typename Elem<S>::C;
    constexpr bool isFloat = std::is_floating_point_v<T>;
    if constexpr ((isFloat && (D & kFloat)) || (!isFloat && (D & (kInt | kBool)))) {
      using R = decltype(Fn::f(T(), T()));
      if constexpr (std::is_same_v<R, uint8_t>) {
        broadcastBinary<Fn, S, uint8_t>(c);
      } else {
        struct Cast {
          static T f(T a, T b) { return static_cast<T>(Fn::f(a, b)); }
        };
        broadcastBinary<Cast, S, S>(c);
      }
    }
  });
}

struct BinaryRow {
  const char *name;
  unsigned domain;
  bool boolResult;
  void (*run)(const KernelCall &);
};

#define ROW(name, Fn, D, boolResult) {name, D, boolResult, runBinaryRow<Fn, D>}
const BinaryRow kBinaryRows[] = {
    ROW("mod", Mod, kFloat | kInt, false),
    ROW("fmod", FMod, kFloat | kInt, false),
    ROW("and", And, kBool, false),
    ROW("or", Or, kBool, false),
    ROW("xor", Xor, kBool, false),
    ROW("bitwise_and", BitAnd, kInt, false),
    ROW("bitwise_or", BitOr, kInt, false),
    ROW("bitwise_xor", BitXor, kInt, false),
    ROW("shift_left", ShiftLeft, kInt, false),
    ROW("shift_right", ShiftRight, kInt, false),
    ROW("prelu", PRelu, kFloat | kInt, false),
    ROW("less_equal", LessEqual, kFloat | kInt, true),
    ROW("greater_equal", GreaterEqual, kFloat | kInt, true),
};
#undef ROW

const BinaryRow *findBinary(llvm::StringRef fn) {
  for (const BinaryRow &r : kBinaryRows)
    if (fn == r.name) return &r;
  return nullptr;
}

llvm::Error verifyBinaryFn(const KernelCall &c) {
  std::string fn = c.attrString("fn", "");
  const BinaryRow *row = findBinary(fn);
  if (!row) return kernelError("unknown binary function '" + fn + "'");
  DType a = c.inputs[0].dtype, b = c.inputs[1].dtype, out = c.outputs[0].dtype;
  if (a != b)
    return kernelError("binary '" + fn + "' operands have different dtypes " +
                       dtypeName(a).str() + " and " + dtypeName(b));
  if (!(domainOf(a) & row->domain))
    return kernelError("binary '" + fn + "' of dtype " + dtypeName(a) + " is not implemented");
  DType want = row->boolResult ? DType::Bool : a;
  if (out != want)
    return kernelError("binary '" + fn + "' of " + dtypeName(a) + " must yield " +
                       dtypeName(want) + ", not " + dtypeName(out));
  return verifyBroadcastTo(c.inputs, c.outputs[0].shape);
}

llvm::Error runBinaryFn(const KernelCall &c) {
  findBinary(c.attrString("fn", ""))->run(c);
  return llvm::Error::success();
}

}  // namespace

void registerMathKernels(KernelRegistry &r) {
  for (int v = 1; v <= 10; ++v) {
    DType d = static_cast<DType>(v);
    if (!domainOf(d)) continue;
    KernelDesc u;
    u.op = "unary";
    u.dtype = d;
    u.verify = verifyUnaryFn;
    u.run = runUnaryFn;
    u.attrs = {{"fn", AttrKind::String}, {"alpha", AttrKind::Float}, {"beta", AttrKind::Float}};
    r.add(u);
    KernelDesc b;
    b.op = "binary";
    b.dtype = d;
    b.minInputs = b.maxInputs = 2;
    b.verify = verifyBinaryFn;
    b.run = runBinaryFn;
    b.attrs = {{"fn", AttrKind::String}};
    r.add(b);
  }
}

}  // namespace colossal::runtime::cpu

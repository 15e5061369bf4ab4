//===- Elementwise.h - dtype-generic elementwise loops of the CPU kernels -------*- C++ -*-===//
//
// Storage vs compute types: every dtype is stored as one C++ type and computed in another
// (Elem<S>::C): f16 and bf16 compute in float, every other dtype in itself, so one functor
// `Op::f(C, C)` serves all dtypes and the float32 loop compiles exactly as a hand-written one.
// Broadcast loops are specialised on inner strides 0/1 (vectorizable) and split over threads by
// forEachBroadcastRow. Internal to runtime/kernels/cpu.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_ELEMENTWISE_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_ELEMENTWISE_H

#include "CpuCommon.h"
#include "Half.h"

#include <cstdint>
#include <type_traits>

namespace colossal::runtime::cpu {

/// Storage of the 16-bit float dtypes (raw bits).
struct F16 { uint16_t bits; };
struct BF16 { uint16_t bits; };

template <typename S> struct Elem {
  using C = S;
  static C load(S v) { return v; }
  static S store(C v) { return v; }
};
template <> struct Elem<F16> {
  using C = float;
  static float load(F16 v) { return halfToFloat(v.bits); }
  static F16 store(float v) { return F16{floatToHalf(v)}; }
};
template <> struct Elem<BF16> {
  using C = float;
  static float load(BF16 v) { return bfloat16ToFloat(v.bits); }
  static BF16 store(float v) { return BF16{floatToBfloat16(v)}; }
};

/// The storage type of each dtype, for registration tables: X(DTYPE, STORAGE).
#define COLOSSAL_FLOAT_DTYPES(X) X(F32, float) X(F64, double) X(F16, F16)
#define COLOSSAL_INT_DTYPES(X)                                                                  \
  X(I64, int64_t) X(I32, int32_t) X(I16, int16_t) X(I8, int8_t) X(U8, uint8_t)                \
  X(U16, uint16_t) X(U32, uint32_t) X(U64, uint64_t)
#define COLOSSAL_NUMERIC_DTYPES(X) COLOSSAL_FLOAT_DTYPES(X) COLOSSAL_INT_DTYPES(X)

/// Calls f(S*) with a null pointer of dtype `d`'s storage type (bool as uint8_t); false when the
/// dtype has no storage type here.
template <typename F> bool visitDType(DType d, F &&f) {
  switch (d) {
#define COLOSSAL_VISIT(D, S)                                                                    \
  case DType::D: f(static_cast<S *>(nullptr)); return true;
    COLOSSAL_NUMERIC_DTYPES(COLOSSAL_VISIT)
#undef COLOSSAL_VISIT
  case DType::BF16: f(static_cast<BF16 *>(nullptr)); return true;
  case DType::Bool: f(static_cast<uint8_t *>(nullptr)); return true;
  default: return false;
  }
}

/// The element loops below are flattened (every call in them inlined): a call per element keeps
/// a loop scalar, and GCC's inliner gives up on Op::f's helpers (fastExp) in the single-thread path
/// of a large translation unit (elementwise.cpp: silu measured ~8 ns an element before).
#define COLOSSAL_ELEMENT_LOOP __attribute__((flatten))

/// y[i] = Op(a[i*SA], b[i*SB]) for compile-time strides 0/1 (vectorizable).
template <typename Op, typename S, typename SOut, int SA, int SB>
COLOSSAL_ELEMENT_LOOP void binaryRun(SOut *y, const S *a, const S *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = Elem<SOut>::store(Op::f(Elem<S>::load(a[i * SA]), Elem<S>::load(b[i * SB])));
}

/// Y = Op(A, B) with NumPy broadcasting; A and B stored as S, Y as SOut.
template <typename Op, typename S, typename SOut> void broadcastBinary(const KernelCall &c) {
  const TensorRef &A = c.inputs[0], &B = c.inputs[1], &Y = c.outputs[0];
  llvm::ArrayRef<int64_t> shapes[2] = {A.shape, B.shape};
  BroadcastLayout l = makeBroadcastLayout(Y.shape, shapes);
  const S *a = A.as<const S>(), *b = B.as<const S>();
  SOut *y = Y.as<SOut>();
  forEachBroadcastRow(l, [&](int64_t yo, const int64_t *offs, int64_t n, const int64_t *st) {
    const S *pa = a + offs[0], *pb = b + offs[1];
    SOut *py = y + yo;
    if (st[0] && st[1]) binaryRun<Op, S, SOut, 1, 1>(py, pa, pb, n);
    else if (st[0]) binaryRun<Op, S, SOut, 1, 0>(py, pa, pb, n);
    else if (st[1]) binaryRun<Op, S, SOut, 0, 1>(py, pa, pb, n);
    else binaryRun<Op, S, SOut, 0, 0>(py, pa, pb, n);
  });
}

/// y[i] = Op(x[i]) for i in [0, n).
template <typename Op, typename S, typename SOut>
COLOSSAL_ELEMENT_LOOP void unaryRun(SOut *y, const S *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Elem<SOut>::store(Op::f(Elem<S>::load(x[i])));
}

/// y[i] = Op(x[i]) over contiguous tensors, split over threads.
template <typename Op, typename S, typename SOut = S>
void mapUnary(const TensorRef &X, const TensorRef &Y) {
  const S *x = X.as<const S>();
  SOut *y = Y.as<SOut>();
  parallelFor(Y.numel(), 1 << 14, [&](int64_t b, int64_t e) { unaryRun<Op, S, SOut>(y + b, x + b, e - b); });
}

#undef COLOSSAL_ELEMENT_LOOP

}  // namespace colossal::runtime::cpu

#endif

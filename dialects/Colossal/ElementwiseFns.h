//===- ElementwiseFns.h - the function tables of colossal.unary / colossal.binary --*- C++ -*-===//
//
// One row per `fn`: the element types it accepts, whether it yields bool, which parameters it
// takes, and its value on widened host scalars (double for floats, int64 for integers and i1),
// which the folders use. The runtime's kernels (runtime/kernels/cpu/math.cpp) implement the same
// rows; docs/plan.md lists them.
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_ELEMENTWISEFNS_H
#define COLOSSAL_DIALECTS_COLOSSAL_ELEMENTWISEFNS_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace colossal {

/// Element types a function accepts (a bit set).
enum ElementDomain : unsigned {
  kFloatDomain = 1, // f16, bf16, f32, f64
  kIntDomain = 2,   // signless and unsigned integers wider than 1 bit
  kBoolDomain = 4,  // i1
};

struct UnaryFnInfo {
  llvm::StringLiteral name;
  unsigned domain;
  bool boolResult;
  int numParams; // 0: neither alpha nor beta; 1: alpha; 2: alpha and beta
  double (*evalFloat)(double x, double alpha, double beta);
  int64_t (*evalInt)(int64_t x); // null when the function has no integer form
};

struct BinaryFnInfo {
  llvm::StringLiteral name;
  unsigned domain;
  bool boolResult;
  double (*evalFloat)(double a, double b);      // null: no float form
  int64_t (*evalInt)(int64_t a, int64_t b, unsigned bitWidth); // integers and i1
};

/// The row named `fn`, or null.
const UnaryFnInfo *lookupUnaryFn(llvm::StringRef fn);
const BinaryFnInfo *lookupBinaryFn(llvm::StringRef fn);

} // namespace colossal

#endif

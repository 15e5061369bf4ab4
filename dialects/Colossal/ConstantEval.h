//===- ConstantEval.h - compile-time evaluation of colossal ops ---*- C++ -*-===//
//
// The folders of the colossal dialect evaluate ops whose operands are all constants. This is what
// turns an imported model's shape arithmetic (Shape → Gather → Concat → Reshape, ConstantOfShape,
// Range, Equal/Where on constants) into plain constants once the spec binds every dimension.
//
// Values are held widened — integers (and i1) as int64, floats as double — and narrowed back to
// the result's element type, so an f32 result is the correctly rounded f32 of the double result.
// Unsigned integers are zero-extended, so ui8/ui16/ui32 compare, divide and shift as unsigned, and
// narrowing wraps modulo 2^bits. A ui64 constant holding a value above INT64_MAX is not read
// (HostTensor::from gives nullopt): ops on it are evaluated by the runtime, not folded.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_CONSTANTEVAL_H
#define COLOSSAL_DIALECTS_COLOSSAL_CONSTANTEVAL_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"
#include <functional>
#include <string>
#include <optional>
#include <vector>

namespace colossal {

/// A constant tensor on the host, widened for evaluation.
struct HostTensor {
  mlir::RankedTensorType type;
  std::vector<double> f;   // float element types
  std::vector<int64_t> i;  // integer and i1 element types

  bool isFloat() const { return llvm::isa<mlir::FloatType>(type.getElementType()); }
  int64_t numel() const { return type.getNumElements(); }
  double asDouble(int64_t k) const { return isFloat() ? f[k] : double(i[k]); }
  int64_t asInt(int64_t k) const { return isFloat() ? int64_t(f[k]) : i[k]; }

  /// Reads a DenseElementsAttr (or a dense resource); nullopt for anything else or when the
  /// tensor has more than kMaxFoldElements elements.
  static std::optional<HostTensor> from(mlir::Attribute attr);
  /// An empty tensor of `type`, values zero.
  static HostTensor zeros(mlir::RankedTensorType type);
  /// Narrows back to `type`'s element type.
  mlir::DenseElementsAttr toAttr() const;
};

/// Constants larger than this are not folded (folding is for shape arithmetic and small masks).
inline constexpr int64_t kMaxFoldElements = int64_t(1) << 22;

/// Row-major strides of `shape` as seen from a broadcast result of shape `out`: 0 where a dim is 1
/// (or absent on the left).
std::vector<int64_t> broadcastStrides(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> out);

/// Elementwise op over broadcast operands. `fn` and `in` receive widened values.
HostTensor evalBroadcast(mlir::RankedTensorType resultType, llvm::ArrayRef<const HostTensor *> ins,
                         const std::function<double(llvm::ArrayRef<double>)> &ffn,
                         const std::function<int64_t(llvm::ArrayRef<int64_t>)> &ifn,
                         bool computeInFloat);

/// Gathers `src` into a tensor of `resultType` where result element k reads source element
/// index(k); used by transpose, slice, gather, expand, concat.
HostTensor evalPermute(mlir::RankedTensorType resultType, const HostTensor &src,
                       const std::function<int64_t(llvm::ArrayRef<int64_t>)> &sourceIndex);

/// NumPy broadcast of two static shapes into `out`; false when they are incompatible.
bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                     llvm::SmallVectorImpl<int64_t> &out);

/// "[2x3x4]", for diagnostics.
std::string shapeStr(llvm::ArrayRef<int64_t> shape);

/// The ranked tensor type of `v` (every colossal operand is one).
inline mlir::RankedTensorType rankedType(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

/// Multi-index of flat index `k` in `shape`.
void unflatten(int64_t k, llvm::ArrayRef<int64_t> shape, llvm::SmallVectorImpl<int64_t> &idx);

} // namespace colossal

#endif

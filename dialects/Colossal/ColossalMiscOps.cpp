//===- ColossalMiscOps.cpp - type inference and verifiers of the misc ops ---===//
//
// det, reverse_sequence, grid_sample, roi_align (ColossalMiscOps.td). The ODS-generated
// definitions are emitted by ColossalOps.cpp with the rest of the dialect; this file holds only
// their hand-written C++.
//===----------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace colossal;

namespace {


bool isIndexType(Type t) { return t.isInteger(64) || t.isInteger(32); }

} // namespace

LogicalResult DetOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  auto t = rankedType(adaptor.getX());
  if (!llvm::isa<FloatType>(t.getElementType()))
    return emitOptionalError(loc, "det needs a floating-point input");
  if (t.getRank() < 2 || t.getDimSize(t.getRank() - 1) != t.getDimSize(t.getRank() - 2))
    return emitOptionalError(loc, "det needs [..., M, M] square matrices, got ",
                             shapeStr(t.getShape()));
  inferred.push_back(RankedTensorType::get(t.getShape().drop_back(2), t.getElementType()));
  return success();
}

LogicalResult ReverseSequenceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                  Adaptor adaptor,
                                                  SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX());
  auto lens = rankedType(adaptor.getSequenceLens());
  int64_t batch = int64_t(adaptor.getBatchAxis()), time = int64_t(adaptor.getTimeAxis());
  if (x.getRank() < 2)
    return emitOptionalError(loc, "reverse_sequence needs an input of rank >= 2");
  if ((batch != 0 && batch != 1) || (time != 0 && time != 1) || batch == time)
    return emitOptionalError(loc, "batch_axis and time_axis must be 0 and 1 in some order");
  if (lens.getRank() != 1 || lens.getDimSize(0) != x.getDimSize(batch) ||
      !isIndexType(lens.getElementType()))
    return emitOptionalError(loc, "sequence_lens must be i64 or i32 of shape [",
                             x.getDimSize(batch), "], got ", shapeStr(lens.getShape()));
  inferred.push_back(x);
  return success();
}

LogicalResult GridSampleOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX()), grid = rankedType(adaptor.getGrid());
  if (x.getRank() != 4 || grid.getRank() != 4 || grid.getDimSize(3) != 2 ||
      grid.getDimSize(0) != x.getDimSize(0))
    return emitOptionalError(loc, "grid_sample needs x [N, C, H, W] and grid [N, Ho, Wo, 2], got ",
                             shapeStr(x.getShape()), " and ", shapeStr(grid.getShape()));
  if (!llvm::isa<FloatType>(x.getElementType()) || grid.getElementType() != x.getElementType())
    return emitOptionalError(loc, "x and grid must have the same floating-point element type");
  inferred.push_back(RankedTensorType::get(
      {x.getDimSize(0), x.getDimSize(1), grid.getDimSize(1), grid.getDimSize(2)},
      x.getElementType()));
  return success();
}

LogicalResult GridSampleOp::verify() {
  StringRef mode = getMode(), pad = getPaddingMode();
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return emitOpError("mode must be bilinear, nearest or bicubic, got '") << mode << "'";
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    return emitOpError("padding_mode must be zeros, border or reflection, got '") << pad << "'";
  return success();
}

LogicalResult RoiAlignOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto x = rankedType(adaptor.getX()), rois = rankedType(adaptor.getRois());
  auto idx = rankedType(adaptor.getBatchIndices());
  if (x.getRank() != 4 || !llvm::isa<FloatType>(x.getElementType()))
    return emitOptionalError(loc, "roi_align needs a floating-point x [N, C, H, W], got ",
                             shapeStr(x.getShape()));
  if (rois.getRank() != 2 || rois.getDimSize(1) != 4 || rois.getElementType() != x.getElementType())
    return emitOptionalError(loc, "rois must be [R, 4] of x's element type, got ",
                             shapeStr(rois.getShape()));
  if (idx.getRank() != 1 || idx.getDimSize(0) != rois.getDimSize(0) ||
      !isIndexType(idx.getElementType()))
    return emitOptionalError(loc, "batch_indices must be i64 or i32 of shape [",
                             rois.getDimSize(0), "], got ", shapeStr(idx.getShape()));
  const int64_t oh = int64_t(adaptor.getOutputHeight()), ow = int64_t(adaptor.getOutputWidth());
  if (oh < 1 || ow < 1)
    return emitOptionalError(loc, "output_height and output_width must be positive");
  inferred.push_back(
      RankedTensorType::get({rois.getDimSize(0), x.getDimSize(1), oh, ow}, x.getElementType()));
  return success();
}

LogicalResult RoiAlignOp::verify() {
  if (getMode() != "avg" && getMode() != "max")
    return emitOpError("mode must be avg or max, got '") << getMode() << "'";
  if (int64_t(getSamplingRatio()) < 0)
    return emitOpError("sampling_ratio must be >= 0");
  return success();
}

//===- ColossalMiscOps.td - determinant, sequence reversal, sampling ops ---===//
//
// The operators of the ONNX "misc" family that need a kernel of their own: everything else of
// that family (recurrent layers, control flow, DFT/STFT, windows, LRN, training optimizers) is
// lowered by the importer to the core ops (lib/Import/ONNX/ImportMisc.cpp).
// Included by ColossalOps.td; the C++ lives in ColossalMiscOps.cpp.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_MISC_OPS_TD
#define COLOSSAL_MISC_OPS_TD

def Colossal_DetOp : Colossal_Op<"det", [InferTypeOpAdaptor]> {
  let summary = "Determinant of square matrices (ONNX Det)";
  let description = [{
    `x`: tensor<...xMxMxT> (T float) → tensor<...xT>: the determinant of each trailing M×M matrix,
    by LU factorization with partial pivoting. A singular matrix gives 0.
  }];
  let arguments = (ins AnyRankedTensor:$x);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Colossal_ReverseSequenceOp : Colossal_Op<"reverse_sequence", [InferTypeOpAdaptor]> {
  let summary = "Reverse the first sequence_lens[b] steps of each batch entry (ONNX ReverseSequence)";
  let description = [{
    `x`: tensor<...xT> of rank ≥ 2, `sequence_lens`: tensor<B x i64|i32> with B = x.shape[batch_axis].
    `batch_axis`, `time_axis` ∈ {0, 1}, distinct. For batch b, steps t < sequence_lens[b] read step
    sequence_lens[b] − 1 − t; later steps are copied. Result: x's type. A length outside
    [0, x.shape[time_axis]] is a run-time error.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$sequence_lens, I64Attr:$batch_axis,
                   I64Attr:$time_axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Colossal_GridSampleOp : Colossal_Op<"grid_sample", [InferTypeOpAdaptor, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise({0, 1})">.body;
  let summary = "Sample an image at grid locations (ONNX GridSample-16, PyTorch grid_sample)";
  let description = [{
    `x`: tensor<NxCxHxWxT>, `grid`: tensor<NxHoxWox2xT> of normalized (x, y) coordinates in
    [−1, 1] → tensor<NxCxHoxWoxT>. `mode`: "bilinear" | "nearest" (round half to even) |
    "bicubic" (A = −0.75); `padding_mode`: "zeros" | "border" | "reflection"; `align_corners`:
    whether −1 and 1 name the centres (true) or the outer edges (false) of the corner pixels.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$grid, StrAttr:$mode,
                   StrAttr:$padding_mode, BoolAttr:$align_corners);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Colossal_RoiAlignOp : Colossal_Op<"roi_align", [InferTypeOpAdaptor]> {
  let summary = "Region-of-interest align (He et al. 2017, Mask R-CNN; ONNX RoiAlign)";
  let description = [{
    `x`: tensor<NxCxHxWxT>, `rois`: tensor<Rx4xT> as (x1, y1, x2, y2) in input coordinates times
    1/spatial_scale, `batch_indices`: tensor<R x i64|i32> → tensor<RxCxOHxOWxT>. Each output bin
    averages (`mode` "avg") or takes the maximum (`mode` "max") of sampling_ratio² bilinear samples
    (sampling_ratio 0: ceil(roi size / output size) per axis). `half_pixel`: shift the roi by −0.5
    pixel (coordinate_transformation_mode "half_pixel", opset 16's default) and allow rois smaller
    than one pixel.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$rois, AnyRankedTensor:$batch_indices,
                   StrAttr:$mode, I64Attr:$output_height, I64Attr:$output_width,
                   I64Attr:$sampling_ratio, F32Attr:$spatial_scale, BoolAttr:$half_pixel);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // COLOSSAL_MISC_OPS_TD

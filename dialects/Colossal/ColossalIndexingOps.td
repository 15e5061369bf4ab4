//===- ColossalIndexingOps.td - reductions, indexing, data movement -----------===//
//
// Ops of the `indexing` family: the ONNX reductions beyond sum/mean/max, arg-reductions, CumSum,
// and the index-driven data movement ops (GatherElements, GatherND, ScatterElements, ScatterND,
// OneHot, TopK, Pad). Ops that are pure re-layouts (Tile, DepthToSpace, SpaceToDepth, Einsum,
// EyeLike, Compress with a constant condition, Hardmax) have no op of their own: the importer
// lowers them to reshape/transpose/expand/gather/matmul/reduce (lib/Import/ONNX/ImportIndexing.cpp).
//
// Long tails are attribute-driven: one `reduce` op with a `kind` string (like upstream
// linalg.elementwise's kind) instead of one op per ONNX ReduceX, and one `reduction` string on
// the scatters. Semantics source: the ONNX operator spec, https://onnx.ai/onnx/operators/.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_INDEXING_OPS_TD
#define COLOSSAL_INDEXING_OPS_TD

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

def ColossalIndexing_ReduceOp : Colossal_Op<"reduce", [InferTypeOpAdaptor]> {
  let summary = "Reduction of one `kind` over `axes` (ONNX ReduceMin/Prod/L1/L2/LogSum/LogSumExp/SumSquare)";
  let description = [{
    `x`: tensor<D...xT>, `axes` sorted, unique, non-negative and non-empty. With `keepdims` the
    reduced dims stay as 1, else they are removed. `kind` is one of
      sum, mean, max, min, prod        plain reductions (ints and floats)
      sum_square   Σ x²                l1   Σ |x|          l2   sqrt(Σ x²)
      log_sum      log(Σ x)            log_sum_exp   log(Σ eˣ), computed as m + log(Σ e^(x−m))
    Floats accumulate in at least f32 (f16) or their own precision; integers in i64. Reducing an
    empty extent yields the ONNX identities (sum 0, prod 1, min +inf / max −inf, log_sum −inf).
    ONNX ReduceSum/Mean/Max keep their own ops (`reduce_sum`, ...) that the fusion passes match;
    this op carries the long tail. Folds when `x` is a constant.
  }];
  let arguments = (ins AnyRankedTensor:$x, DenseI64ArrayAttr:$axes, BoolAttr:$keepdims,
                   StrAttr:$kind);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

class ColossalIndexing_ArgReduceOp<string mnemonic, string which>
    : Colossal_Op<mnemonic, [InferTypeOpAdaptor]> {
  let summary = "Index (i64) of the " # which # " along `axis` (ONNX Arg" # which # ")";
  let description = [{
    `x`: tensor<D...xT> (ints or floats), `axis` in [0, rank). Result: tensor of i64 with
    dim `axis` set to 1 (`keepdims`) or removed. Ties resolve to the first occurrence, or to the
    last with `select_last_index`. A NaN wins over every number for both (NumPy's argmax and
    argmin return the first NaN). Folds when `x` is a constant.
  }];
  let arguments = (ins AnyRankedTensor:$x, I64Attr:$axis, BoolAttr:$keepdims,
                   BoolAttr:$select_last_index);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}
def ColossalIndexing_ArgMaxOp : ColossalIndexing_ArgReduceOp<"argmax", "Max">;
def ColossalIndexing_ArgMinOp : ColossalIndexing_ArgReduceOp<"argmin", "Min">;

def ColossalIndexing_CumSumOp : Colossal_Op<"cumsum", [SameOperandsAndResultType, VJP]> {
  let summary = "Cumulative sum along `axis` (ONNX CumSum)";
  let description = [{
    y[..., j, ...] = Σ x[..., i, ...] over i ≤ j (i < j with `exclusive`; i ≥ j, resp. i > j, with
    `reverse`). `axis` in [0, rank). Ints and floats. Folds when `x` is a constant. VJP: the
    transposed sum, a cumsum of dy with the same `exclusive` and the opposite `reverse`.
  }];
  let arguments = (ins AnyRankedTensor:$x, I64Attr:$axis, BoolAttr:$exclusive, BoolAttr:$reverse);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Index-driven data movement
//===----------------------------------------------------------------------===//

def ColossalIndexing_GatherElementsOp : Colossal_Op<"gather_elements", [InferTypeOpAdaptor, VJP]> {
  let summary = "ONNX GatherElements: y[i...] = data[i... with dim `axis` replaced by indices[i...]]";
  let description = [{
    `data`: tensor<D...xT>, `indices`: tensor<I...xi64|i32> of the same rank, I[d] ≤ D[d] for
    d ≠ axis. Result: tensor<I...xT>. Negative indices count from the end; an index out of range
    is a runtime error naming the instruction. Folds when both operands are constants. VJP:
    scatter_elements `add` of dy into zeros of data's shape (repeated indices add up).
  }];
  let arguments = (ins AnyRankedTensor:$data, AnyRankedTensor:$indices, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def ColossalIndexing_GatherNDOp : Colossal_Op<"gather_nd", [InferTypeOpAdaptor, VJP]> {
  let summary = "ONNX GatherND: slices of `data` addressed by the last dim of `indices`";
  let description = [{
    `data`: tensor<D...xT> (rank r), `indices`: tensor<I...xi64|i32> (rank q) with
    I[q−1] = m ≤ r − b, where b = `batch_dims` and the first b dims of data and indices agree.
    Result: tensor<I[0..q−1) ++ D[b+m..r)>; each index tuple picks the slice
    data[batch..., idx[0], ..., idx[m−1], :...]. Negative indices count from the end. Folds when
    both operands are constants (and every index is in range). VJP (batch_dims 0): scatter_nd
    add of the cotangent into zeros of data's shape, so slices read twice sum.
  }];
  let arguments = (ins AnyRankedTensor:$data, AnyRankedTensor:$indices, I64Attr:$batch_dims);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def ColossalIndexing_ScatterElementsOp : Colossal_Op<"scatter_elements", [InferTypeOpAdaptor, VJP]> {
  let summary = "ONNX ScatterElements (and Scatter): write `updates` into a copy of `data`";
  let description = [{
    `data`: tensor<D...xT>, `indices`: tensor<I...xi64|i32> and `updates`: tensor<I...xT>, all of
    one rank. out = data; then for every index i of `indices`, with j = i but j[axis] =
    indices[i]: out[j] = updates[i] (`reduction` none; the last write wins), or combined with
    add, mul, max or min. Result: data's type. VJP (as torch.scatter / scatter_reduce with
    include_self): see `scatterVJP` in ColossalIndexingOps.cpp; `none` with constant duplicate
    indices (undefined in ONNX) has none.
  }];
  let arguments = (ins AnyRankedTensor:$data, AnyRankedTensor:$indices, AnyRankedTensor:$updates,
                   I64Attr:$axis, StrAttr:$reduction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def ColossalIndexing_ScatterNDOp : Colossal_Op<"scatter_nd", [InferTypeOpAdaptor, VJP]> {
  let summary = "ONNX ScatterND: write slices of `updates` at index tuples into a copy of `data`";
  let description = [{
    `data`: tensor<D...xT> (rank r), `indices`: tensor<I...xi64|i32> (rank q, I[q−1] = m ≤ r),
    `updates`: tensor<I[0..q−1) ++ D[m..r) x T>. out = data; then for every index tuple k,
    out[indices[k], :...] = updates[k, :...] (`reduction` none), or combined with add, mul, max
    or min, in index order. Result: data's type. Folds when all three operands are constants
    (and every index is in range): torch writes `shape[i] = n` on a shape tensor this way.
    VJP: scatter_elements' with gather_nd and scatter_nd in place of gather_elements and
    scatter_elements.
  }];
  let arguments = (ins AnyRankedTensor:$data, AnyRankedTensor:$indices, AnyRankedTensor:$updates,
                   StrAttr:$reduction);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def ColossalIndexing_OneHotOp : Colossal_Op<"one_hot"> {
  let summary = "ONNX OneHot: values[1] where the new dim `axis` equals the index, values[0] elsewhere";
  let description = [{
    `indices`: tensor<I...xi64|i32>, `values`: tensor<2xT> ([off, on]). Result: tensor<O...xT>,
    O = I with the depth inserted at `axis` (in [0, rank(O))). Negative indices count from the
    end (index + depth); an index outside [−depth, depth) gives a row of `off`.
  }];
  let arguments = (ins AnyRankedTensor:$indices, AnyRankedTensor:$values, I64Attr:$axis);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def ColossalIndexing_TopKOp : Colossal_Op<"topk", [VJP]> {
  let summary = "ONNX TopK: the k largest (or smallest) elements along `axis` and their indices";
  let description = [{
    `x`: tensor<D...xT>. Results: values tensor<D' x T> and indices tensor<D' x i64> where D' = D
    with D[axis] replaced by k (0 ≤ k ≤ D[axis]); k is the results' size along `axis`. With
    `sorted` the results are ordered (descending for `largest`, else ascending); equal values
    keep the lower index first. NaN ranks above every number. VJP: the values' cotangent goes
    back to the positions the indices name (scatter_elements add into zeros along `axis`, as
    torch.topk's backward); the indices get none.
  }];
  let arguments = (ins AnyRankedTensor:$x, I64Attr:$axis, BoolAttr:$largest, BoolAttr:$sorted);
  let results = (outs AnyRankedTensor:$values, AnyRankedTensor:$indices);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($values) `,` type($indices)";
  let hasVerifier = 1;
}

def ColossalIndexing_PadOp : Colossal_Op<"pad", [InferTypeOpAdaptor, VJP, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"getPads().size() % 2 == 0 && !getPads().empty() && getPads()[0] == 0 && getPads()[getPads().size() / 2] == 0 ? std::optional<ShardingRule>(ShardingRule::rowWise()) : std::nullopt">.body;
  let summary = "ONNX Pad: constant, reflect, edge or wrap padding (negative pads crop)";
  let description = [{
    `x`: tensor<D...xT>, `pads` = [b0, ..., b(r−1), e0, ..., e(r−1)] (ONNX order), result dim
    d = D[d] + b_d + e_d ≥ 0. `mode`: constant (the scalar `value`, 0 when absent), reflect
    (mirror without repeating the edge), edge (repeat the edge), wrap (periodic). Reflect needs
    D[d] ≥ 2 on padded dims and edge/wrap D[d] ≥ 1. VJP: pad_grad (none for `value`).
  }];
  let arguments = (ins AnyRankedTensor:$x, Optional<AnyRankedTensor>:$value,
                   DenseI64ArrayAttr:$pads, StrAttr:$mode);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // COLOSSAL_INDEXING_OPS_TD

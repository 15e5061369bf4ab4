//===- ColossalParallelOps.td - the mesh, collectives and mesh queries (SPMD) ---===//
//
// `colossal.mesh` names the device mesh of a module; the collectives are the ops the SPMD
// partitioner and the data-parallel passes (passes/Parallel, docs/parallelism.md) insert into a
// per-rank program. The value-semantic collectives: every rank of the group named by `axes`
// executes the same op in the same program order (SPMD), so they stay Pure (CSE/DCE act alike on
// every rank). `all_reduce_in_place` writes persistent state (gradients) and is not Pure.
// `axes` lists axes of the module's mesh; group ranks are row-major over them in the order listed
// (docs/parallelism.md "Mesh and rank layout").
// Each lowers one to one onto the plan instruction of the same name (docs/plan.md "Collective
// instructions"). The C++ (verifiers) lives in ColossalParallelOps.cpp.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_PARALLEL_OPS_TD
#define COLOSSAL_PARALLEL_OPS_TD

include "mlir/IR/SymbolInterfaces.td"

def Colossal_MeshOp : Op<Colossal_Dialect, "mesh", [Symbol]> {
  let summary = "The device mesh: named axes in rank-layout order, their sizes and roles";
  let description = [{
    `axes`: the axis names ([A-Za-z_][A-Za-z0-9_]*, unique), `shape`: their sizes (>= 1), `roles`:
    what each axis does, one of `data` (data parallelism: the batch is split over it and the
    gradients are summed over it), `tensor` (Megatron 1D tensor parallelism), `pipeline`,
    `grid_row`, `grid_col`, `grid_depth` (2D/2.5D/3D tensor-parallel grids). Ranks are laid out
    row-major over the axes in order, the last fastest (Megatron's pp, dp, tp order keeps tp
    inside a node). Passes find axes by role (`axesWithRole`), never by name; a module holds at
    most one mesh, and collectives name its axes. Shardy's `sdy.mesh` is the model.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$axes, DenseI64ArrayAttr:$shape,
                   StrArrayAttr:$roles);
  let assemblyFormat = "$sym_name `axes` `=` $axes `shape` `=` $shape `roles` `=` $roles attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The indices of the axes with `role`, in mesh order.
    ::llvm::SmallVector<int> axesWithRole(::colossal::AxisRole role);
    /// The number of ranks (the product of `shape`).
    int64_t numRanks();
  }];
}

class Colossal_CollectiveOp<string mnemonic, list<Trait> traits = []> : Colossal_Op<mnemonic, traits> {
  let hasVerifier = 1;
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($y)";
}

def Colossal_AllReduceOp : Colossal_CollectiveOp<"all_reduce",
    [DeclareOpInterfaceMethods<Colossal_VJPOpInterface>]> {
  let summary = "y = reduction over the group of x (sum, max, min)";
  let description = [{
    `x`: tensor<S x T> → tensor<S x T>. float16/bfloat16 are reduced in float32 and rounded once.
    Its VJP (reduction sum, every rank using y): dx = the all_reduce of dy over the same axes,
    as a training-mode batch norm under data parallelism differentiates its global statistics
    (colossal-split-batch).
  }];
  let arguments = (ins AnyRankedTensor:$x, StrArrayAttr:$axes,
                   DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
  let results = (outs AnyRankedTensor:$y);
}

def Colossal_AllGatherOp : Colossal_CollectiveOp<"all_gather"> {
  let summary = "The group's x concatenated along `dim` in group-rank order";
  let description = [{
    `x`: tensor<S x T> → S with S[dim] multiplied by the group size P.
  }];
  let arguments = (ins AnyRankedTensor:$x, StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$y);
}

def Colossal_ReduceScatterOp : Colossal_CollectiveOp<"reduce_scatter"> {
  let summary = "Reduce over the group, then group rank r keeps slice r of `dim`";
  let description = [{
    `x`: tensor<S x T> with S[dim] divisible by the group size P → S with S[dim] / P.
  }];
  let arguments = (ins AnyRankedTensor:$x, StrArrayAttr:$axes, I64Attr:$dim,
                   DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
  let results = (outs AnyRankedTensor:$y);
}

def Colossal_BroadcastOp : Colossal_CollectiveOp<"broadcast"> {
  let summary = "y = x of group rank `root` (SUMMA's panel broadcasts)";
  let description = [{
    `x`: tensor<S x T> → tensor<S x T>: every rank of the group over `axes` receives the `x` of
    group rank `root` (0 ≤ root < group size).
  }];
  let arguments = (ins AnyRankedTensor:$x, StrArrayAttr:$axes, I64Attr:$root);
  let results = (outs AnyRankedTensor:$y);
}

def Colossal_ShardSliceOp : Colossal_CollectiveOp<"shard_slice"> {
  let summary = "Group rank r keeps slice r of `dim` (local; no communication)";
  let description = [{
    `x`: tensor<S x T> with S[dim] divisible by the group size P → S with S[dim] / P: the
    elements [r·S[dim]/P, (r+1)·S[dim]/P) of `dim`, r = this rank's index in the group over
    `axes`. The inverse of all_gather on a replicated value (upstream shard's `all_slice`).
  }];
  let arguments = (ins AnyRankedTensor:$x, StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$y);
  // Redundant collectives: shard_slice(all_gather(x)) over the same axes and dim is x; a
  // shard_slice of an all_reduce (sum, only use) over the same axes is one reduce_scatter.
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Colossal_AllReduceInPlaceOp : Op<Colossal_Dialect, "all_reduce_in_place"> {
  let summary = "Each operand ← its reduction over the group, in place (a gradient bucket)";
  let description = [{
    `xs`: one or more `colossal.state` / `colossal.param` arguments of one float element type,
    each replaced by its sum (max, min) over the ranks of the group over `axes`; several operands
    are one collective on their concatenation (PyTorch DDP's gradient bucket). Inserted by
    colossal-data-parallel (one per gradient) and fused by colossal-bucket-gradients; lowers to
    one plan `all_reduce` whose outputs are its inputs.
  }];
  let arguments = (ins Arg<Variadic<AnyRankedTensor>, "states, written in place",
                           [MemRead, MemWrite]>:$xs,
                   StrArrayAttr:$axes, DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
  let assemblyFormat = "$xs attr-dict `:` type($xs)";
  let hasVerifier = 1;
}

// ZeRO (colossal-zero, docs/parallelism.md "ZeRO"): a tensor split by dim-0 chunks over the data
// axes, rank r holding chunk r (rows [r·n/P, (r+1)·n/P) of dim 0, contiguous in memory).

def Colossal_ShardViewOp : Op<Colossal_Dialect, "shard_view"> {
  let summary = "This rank's dim-0 chunk of a state, as a view that an update op writes in place";
  let description = [{
    `x`: a `colossal.state` / `colossal.param` argument tensor<n x S x T> with n divisible by the
    group size P over `axes` → tensor<n/P x S x T>: rows [r·n/P, (r+1)·n/P) of `x`, r this rank's
    index in the group, sharing `x`'s bytes (no copy): an update op that writes the view writes
    those rows of the state. ZeRO stages 1 and 2 update each rank's chunk of a full parameter
    this way before `all_gather_in_place` shares the chunks. Not pure: it names memory, so it is
    never merged or moved.
  }];
  let arguments = (ins Arg<AnyRankedTensor, "state", [MemRead]>:$x, StrArrayAttr:$axes);
  let results = (outs AnyRankedTensor:$y);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($y)";
  let hasVerifier = 1;
}

def Colossal_AllGatherInPlaceOp : Op<Colossal_Dialect, "all_gather_in_place"> {
  let summary = "Each operand's dim-0 chunks, one per rank, gathered onto every rank in place";
  let description = [{
    `xs`: one or more `colossal.state` / `colossal.param` arguments, dim 0 divisible by the group
    size P over `axes`. Before: rank r's chunk r of each operand is current (its `shard_view` was
    updated). After: every chunk holds the value of the rank that owns it. Several operands are
    one collective (ZeRO's parameter all-gather bucket); Ψ elements gathered move (P−1)/P·Ψ per
    rank (counted Ψ, as the ZeRO paper does).
  }];
  let arguments = (ins Arg<Variadic<AnyRankedTensor>, "states, written in place",
                           [MemRead, MemWrite]>:$xs,
                   StrArrayAttr:$axes);
  let assemblyFormat = "$xs attr-dict `:` type($xs)";
  let hasVerifier = 1;
}

def Colossal_ReduceScatterInPlaceOp : Op<Colossal_Dialect, "reduce_scatter_in_place"> {
  let summary = "Each operand's chunk r ← its sum over the group; the other chunks ← 0";
  let description = [{
    `xs`: one or more float `colossal.state` arguments (gradient accumulators), dim 0 divisible by
    the group size P over `axes`. Rank r's chunk r of each operand becomes the sum over the group
    of that chunk; every other chunk is zeroed (what it held now lives in its owner's chunk), so
    once the optimizer has consumed and zeroed chunk r the whole accumulator is zero for the next
    step. ZeRO stage 1's gradient reduce-scatter; several operands are one collective.
  }];
  let arguments = (ins Arg<Variadic<AnyRankedTensor>, "states, written in place",
                           [MemRead, MemWrite]>:$xs,
                   StrArrayAttr:$axes);
  let assemblyFormat = "$xs attr-dict `:` type($xs)";
  let hasVerifier = 1;
}

def Colossal_AxisIndexOp : Colossal_Op<"axis_index"> {
  let summary = "This rank's index in the group over `axes` (tensor<i64>, a scalar)";
  let description = [{
    → tensor<i64>: r in [0, P), row-major over `axes` in the order listed. Used by vocab-parallel
    embedding and cross-entropy to offset indices into the local shard of the vocabulary.
  }];
  let arguments = (ins StrArrayAttr:$axes);
  let results = (outs AnyRankedTensor:$index);
  let hasVerifier = 1;
  let assemblyFormat = "attr-dict `:` type($index)";
}

#endif // COLOSSAL_PARALLEL_OPS_TD

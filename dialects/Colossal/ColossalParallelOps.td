//===- ColossalParallelOps.td - collectives and mesh queries (SPMD) ------------===//
//
// The ops the SPMD partitioner (passes/Parallel, docs/parallelism.md "Tensor parallelism")
// inserts into a per-rank program. Each is value-semantic: every rank of the group named by
// `axes` executes the same op in the same program order (SPMD), so they stay Pure (CSE/DCE act
// alike on every rank). `axes` lists mesh axes of the module's `colossal.mesh_axes`; group ranks
// are row-major over them in the order listed (docs/parallelism.md "Mesh and rank layout").
// Each lowers one to one onto the plan instruction of the same name (docs/plan.md "Collective
// instructions"). The C++ (verifiers) lives in ColossalParallelOps.cpp.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_PARALLEL_OPS_TD
#define COLOSSAL_PARALLEL_OPS_TD

class Colossal_CollectiveOp<string mnemonic> : Colossal_Op<mnemonic> {
  let hasVerifier = 1;
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($y)";
}

def Colossal_AllReduceOp : Colossal_CollectiveOp<"all_reduce"> {
  let summary = "y = reduction over the group of x (sum, max, min)";
  let description = [{
    `x`: tensor<S x T> → tensor<S x T>. float16/bfloat16 are reduced in float32 and rounded once.
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

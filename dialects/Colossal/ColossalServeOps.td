//===- ColossalServeOps.td - the paged KV cache of serving ------------------===//
//
// The ops colossal-generate turns a decoder's attention into (docs/serving.md "Compiler"): append
// this step's keys and values into a paged cache through a slot mapping, and attend over the
// cached blocks through a block table. The batch is ragged: T token rows of S sequences, one after
// the other, sequence i owning rows [query_start_loc[i], query_start_loc[i + 1]). The cache of one
// layer is two `colossal.state` arguments k_cache [NB, Hkv, BS, D] and v_cache [NB, Hkv, BS, Dv]:
// NB blocks of BS token slots, slot s at block s / BS, offset s % BS. Included by ColossalOps.td;
// the C++ lives in ColossalServeOps.cpp; the kernels are runtime/kernels/cpu/paged_attention.cpp.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_SERVE_OPS_TD
#define COLOSSAL_SERVE_OPS_TD

def Colossal_KvAppendOp : Op<Colossal_Dialect, "kv_append", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise({2, 3, 4})">.body;
  let summary = "Write this step's keys and values into the paged KV cache (in place)";
  let description = [{
    k_cache [NB, Hkv, BS, D] and v_cache [NB, Hkv, BS, Dv] (f32 `colossal.state` arguments,
    written in place), k [T, Hkv, D], v [T, Hkv, Dv] (f32), slot_mapping [T] i32: token row t
    goes to slot slot_mapping[t]; −1 marks a padding row, which is skipped. A slot outside
    [−1, NB·BS) is a run-time error. No results: an update op, lowered as one instruction whose
    outputs are the two caches.
  }];
  let arguments = (ins Colossal_StateOperand<"keys of the cache, written in place">:$k_cache,
                   Colossal_StateOperand<"values of the cache, written in place">:$v_cache,
                   AnyRankedTensor:$k, AnyRankedTensor:$v, AnyRankedTensor:$slot_mapping);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
  let hasVerifier = 1;
}

def Colossal_PagedAttentionOp : Op<Colossal_Dialect, "paged_attention", [InferTypeOpAdaptor, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::rowWise({0})">.body;
  let summary = "Causal attention of a ragged batch over a paged KV cache (GQA)";
  let description = [{
    q [T, Hq, D] f32; k_cache [NB, Hkv, BS, D], v_cache [NB, Hkv, BS, Dv] (the caches kv_append
    wrote this step); block_tables [S, MB], context_lens [S], query_start_loc [S + 1], all i32.
    Result y [T, Hq, Dv] f32. Sequence i owns rows [query_start_loc[i], query_start_loc[i + 1]),
    its queries at positions [ctx − q_len, ctx) with ctx = context_lens[i]; row at position p
    attends to positions [0, p], position j read from block block_tables[i][j / BS] at offset
    j % BS; query head h reads kv head h / (Hq / Hkv). Rows past query_start_loc[S] are padding
    and come out zero. y = softmax(q·kᵀ·scale)·v (Vaswani et al. 2017, §3.2.1; paging as in Kwon
    et al. 2023, SOSP'23). It reads the caches (a memory read of the states, so it is not Pure and
    stays after the kv_append that writes them).
  }];
  let arguments = (ins AnyRankedTensor:$q, Arg<AnyRankedTensor, "keys of the cache", [MemRead]>:$k_cache,
                   Arg<AnyRankedTensor, "values of the cache", [MemRead]>:$v_cache,
                   AnyRankedTensor:$block_tables, AnyRankedTensor:$context_lens,
                   AnyRankedTensor:$query_start_loc, F32Attr:$scale);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif

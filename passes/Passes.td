#ifndef COLOSSAL_PASSES_TD
#define COLOSSAL_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Fusion: recognise the decomposed forms torch.onnx exports and replace them by one fused op.
// Every rewrite computes the same mathematical function as the ops it replaces; a chain that does
// not match exactly (exponent, axes, constants, shapes) is left alone. Run after canonicalize, so
// that shape arithmetic and masks are constants:
//   func.func(canonicalize, colossal-fuse-norms, colossal-fuse-activations,
//             colossal-fuse-attention, canonicalize, cse)
//===----------------------------------------------------------------------===//

def FuseNorms : Pass<"colossal-fuse-norms", "mlir::func::FuncOp"> {
  let summary = "Rewrite decomposed LayerNorm and RMSNorm into colossal.layer_norm / rms_norm";
  let description = [{
    torch.onnx emits LayerNorm (opset < 17) as
    `m = ReduceMean(x); d = Sub(x, m); v = ReduceMean(Pow(d, 2)); n = Div(d, Sqrt(Add(v, eps)))`
    followed by `Mul(n, weight)` and `Add(., bias)`, and Llama's RMSNorm as
    `n = Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2)), eps))))` followed by `Mul(weight, n)`.
    The division may also be a multiplication by `Reciprocal` or by `Div(1, .)`, the square a
    `Mul(d, d)`, and binary operands come in either order.

    The pass checks that both means reduce the same trailing axes with `keepdims`, that the
    exponent is exactly 2, that `eps` is a scalar constant, and that weight and bias have the
    normalized shape. The normalization becomes `colossal.layer_norm` / `colossal.rms_norm` with a
    constant ones scale; a following multiplication by a tensor of the normalized shape replaces
    that scale, and a following addition of one becomes the LayerNorm bias.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def FuseConvEpilogue : Pass<"colossal-fuse-conv-epilogue", "mlir::func::FuncOp"> {
  let summary = "Fold per-channel affine ops (inference batch norm) and an activation into conv";
  let description = [{
    For an f32 `colossal.conv` whose result flows, one user at a time, through a chain of
    add/sub/mul/div with constants that vary at most along the channel dim (an inference-mode
    BatchNormalization as the importer decomposes it: `(y − mean) / √(var + ε) · γ + β`, or any
    other per-channel scale and shift), folds the chain into new constant weights and bias:
    `w'[m] = s[m]·w[m]`, `b'[m] = s[m]·b[m] + t[m]` (needs w and bias as constants or parameters
    with their values, i.e. an inference plan). Then moves a following activation into the conv's
    `activation` attribute: `relu` (also `max(y, 0)`), `clip` (`min(max(y, lo), hi)`, ReLU6),
    `hard_sigmoid`, `sigmoid`, and `hard_swish` (the `hard_swish` unary, `y · clip(y + 3, 0, 6) / 6`
    with the 1/6 anywhere, or `y · hard_sigmoid(y, 1/6, 1/2)`), and after that activation a chain
    of add/sub/mul/div with scalar constants into `output_scale`/`output_shift`. Intermediate
    results must have no other users. Runs only in inference pipelines: a conv with an activation has no VJP, and a
    trained model's batch norm is not a constant affine map.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def FuseActivations : Pass<"colossal-fuse-activations", "mlir::func::FuncOp"> {
  let summary = "Rewrite decomposed GELU and SiLU into colossal.gelu / colossal.silu";
  let description = [{
    Matches, with the factors of the outer products in any order and association:
    - GELU, erf form (torch.nn.GELU): `0.5 · x · (1 + Erf(x / √2))`, the division also as a
      multiplication by 1/√2 → `colossal.gelu {approximate = "none"}`;
    - GELU, tanh form (GPT-2, `approximate="tanh"`):
      `0.5 · x · (1 + Tanh(√(2/π) · (x + 0.044715 · x³)))`, the cube as `Pow(x, 3)`, `x·x·x` or
      `x·(x·x)` → `colossal.gelu {approximate = "tanh"}`;
    - SiLU / swish: `x · Sigmoid(x)` → `colossal.silu`.
    Constants are scalars that match the exact value to a relative 1e-6 (or the precision of
    their element type, when that is coarser).
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def FuseMatmulEpilogue : Pass<"colossal-fuse-matmul-epilogue", "mlir::func::FuncOp"> {
  let summary = "Fold a matmul's bias add, activation and residual add into colossal.linear";
  let description = [{
    Rewrites f32 `matmul(x, w) → add(·, bias) → [gelu | relu] → [add(·, residual)]`, w a 2-D
    weight and bias of N elements (only unit dims before the last), into one `colossal.linear`.
    Each link after the bias joins only when the value before it has no other reader. Serving
    matmuls (`colossal.batch_invariant`) stay unfused. Runs last in the pipeline, on the per-rank
    programs (colossal.linear has no VJP and no sharding rule).
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def FuseAttention : Pass<"colossal-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Rewrite scaled dot-product attention into colossal.attention";
  let description = [{
    Matches `MatMul(Softmax(S, axis = last), v)` where S is built from
    `MatMul(q, Transpose(k))`, rank 4:
    - scaling by scalar constants, as `Div` or `Mul` of the scores or of q and/or k before the
      product (torch's SDPA export multiplies both by √scale); the factors multiply into `scale`;
    - at most one causal mask: a CONSTANT additive mask (0 kept, -inf or near the lowest float
      masked) or a constant `Where(keep, S, -inf/lowest)` condition whose pattern is exactly
      "key j visible from query i iff j ≤ i + Tk − Tq" → `causal = true`, no mask operand;
    - at most one other mask: `Add(S, m)` with any other m (an input, a constant of another
      pattern) → additive mask operand; `Where(keep, S, -inf/lowest)` with another condition →
      i1 keep-mask operand.
    k is recovered un-transposed (a Transpose producing kᵀ is composed away). Grouped-query
    attention: when both k and v are Llama's `repeat_kv` (Reshape [B,Hkv,T,D] → [B,Hkv,1,T,D],
    Expand to [B,Hkv,n,T,D], Reshape to [B,Hkv·n,T,D]), the un-repeated tensors feed the fused
    op, whose query head h reads kv head h / n exactly as the repeat does.
    Only fires when the softmax has no other user and every shape agrees; otherwise the ops stay.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

//===----------------------------------------------------------------------===//
// Autodiff (passes/Autodiff, docs/training.md)
//===----------------------------------------------------------------------===//

def TestGradients : Pass<"colossal-test-gradients", "mlir::ModuleOp"> {
  let summary = "Append ∂loss/∂param results to every function with one scalar float result";
  let description = [{
    A test harness for the autodiff driver (buildGradients) and the ops' VJPs that needs no
    training runtime. On every `func.func` whose only result is a float tensor with one element
    (the loss), builds ∂loss/∂p with seed 1 for every float argument `p` marked `colossal.param`
    and appends each as an extra result named `colossal.output = "grad:<param name>"`, in argument
    order. The plan then has the gradients among its ordinary outputs, so `colossal-run` computes
    them. Functions of any other signature are left alone. Fails naming the op and its ONNX node
    when an op between a parameter and the loss has no VJP.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

//===----------------------------------------------------------------------===//
// Training (docs/training.md "Compiler pipeline"): from the imported @forward, build @eval,
// @train_step and @optimizer_step, in this order:
//   colossal-append-loss, colossal-autodiff, colossal-optimizer
// Each pass also records what the plan's TrainConfig needs in the module's `colossal.train`
// dictionary (docs/training.md "Module attribute colossal.train").
//===----------------------------------------------------------------------===//

def AppendLoss : Pass<"colossal-append-loss", "mlir::ModuleOp"> {
  let summary = "Append the training loss: build @eval and the basis of @train_step";
  let description = [{
    Starts from `@forward_microbatch` when the module has it (the model imported at
    B / grad_accum rows), else from `@forward`, and clones it into `@eval` and `@train_step`,
    each returning one `loss` tensor<f32> (result attribute `colossal.output = "loss"`); ops that
    do not reach the loss are dropped. `@forward` stays unchanged; `@forward_microbatch` is erased.

    `kind=cross_entropy`: `logits` names a float32 output [..., C] of the model, which must have
    exactly one input left (the token ids, int64 or int32 [B, T]). The pass creates the int64
    input `labels` with the logits' shape minus the class dim (it must equal the token input's
    shape), reshapes logits to [N, C] and labels to [N] and appends `colossal.cross_entropy`
    (mean over the rows whose label is not `ignore-index`).
    `kind=output`: the model computes its own loss: `output` names its one-element f32 output and
    `labels` its int64 labels input; the model must have exactly two inputs (tokens, labels).
    `logits`, when given, names an output whose last dim is the vocabulary size.

    `data-inputs` (the spec's `train.inputs`, docs/training.md "Data for models that are not
    token models"): the inputs the training loop fills from `.npy` arrays or a seeded RNG instead
    of `--data`'s tokens. Then every unbound input of the model must be one of them, and each of
    them an input of the model or (cross_entropy) the labels input the pass creates; no token
    input is chosen and the shape rules above do not apply. `kind=output` needs no `labels` and no
    `logits` then (a model computing its own loss from, say, data, noise and a timestep).
    `colossal.train` gets `data_inputs` (the names) and `global_batch` (dim 0 of each, which must
    agree in @forward).

    Errors: no @forward, logits/output not an output of the model, a labels name that clashes with
    an input (cross_entropy) or names no input (output), any other number of unbound inputs,
    shapes or element types that do not fit; with `data-inputs`, a model input without a source
    or a source naming no input.
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"cross_entropy\"",
           "cross_entropy (append the loss) or output (the model computes it)">,
    Option<"logits", "logits", "std::string", /*default=*/"\"\"",
           "the logits output [..., C]">,
    Option<"labels", "labels", "std::string", /*default=*/"\"labels\"",
           "the int64 labels input (created by the pass for cross_entropy)">,
    Option<"output", "output", "std::string", /*default=*/"\"\"",
           "kind=output: the model's scalar loss output">,
    Option<"ignoreIndex", "ignore-index", "int64_t", /*default=*/"-100",
           "label value whose rows do not count (torch's ignore_index)">,
    ListOption<"dataInputs", "data-inputs", "std::string",
               "inputs fed from train.inputs (npy arrays, RNG draws) instead of token data">,
  ];
  let dependentDialects = ["colossal::ColossalDialect", "mlir::func::FuncDialect"];
}

def Autodiff : Pass<"colossal-autodiff", "mlir::ModuleOp"> {
  let summary = "Differentiate @train_step's loss and accumulate the gradients";
  let description = [{
    The trainable parameters are the float `colossal.param` arguments of `@train_step` that reach
    its loss, minus those matched by a `frozen` regex (POSIX extended, matched against the whole
    parameter name or the whole ONNX node name of any op consuming it in `@forward`). For each,
    `@train_step` gets a gradient accumulator argument (`colossal.state = "<p>.grad"`, the
    parameter's type) and a `colossal.accumulate_grad %acc, %dp {scale = 1/grad-accum}` of the
    gradient built by the autodiff driver (passes/Autodiff/Autodiff.h: reverse walk from the loss,
    seed 1, each op's VJPOpInterface).

    Rebatching: @train_step must take global_batch / grad-accum rows of the token input
    (colossal-append-loss builds it from the microbatch import); anything else is an error.
    Errors: no @train_step, a frozen regex that matches no parameter, a global batch not divisible
    by grad-accum, no trainable parameter reaching the loss, an op on a path from a trainable
    parameter to the loss without a VJP (named with its ONNX node).
  }];
  let options = [
    ListOption<"frozen", "frozen", "std::string",
               "regexes: parameters that are not trained">,
    Option<"lossScaleInitial", "loss-scale-initial", "::colossal::Real", /*default=*/"0",
           "dynamic loss scaling (precision.loss_scale): the first scale; 0 = off. On, the "
           "backward pass is seeded by a new @train_step input `loss_scale` (f32 []) instead of 1">,
    Option<"lossScaleGrowthFactor", "loss-scale-growth-factor", "::colossal::Real", /*default=*/"2",
           "the scale's factor after growth-interval steps without a non-finite gradient (> 1)">,
    Option<"lossScaleBackoffFactor", "loss-scale-backoff-factor", "::colossal::Real", /*default=*/"0.5",
           "the scale's factor after a step with a non-finite gradient (in (0, 1))">,
    Option<"lossScaleGrowthInterval", "loss-scale-growth-interval", "int64_t", /*default=*/"2000",
           "clean steps before the scale grows (>= 1)">,
    Option<"lossScaleMin", "loss-scale-min", "::colossal::Real", /*default=*/"1",
           "the smallest scale; backing off below it is an error at run time (in (0, initial])">,
    Option<"gradAccum", "grad-accum", "int64_t", /*default=*/"1",
           "microbatches per optimizer step">,
  ];
  let dependentDialects = ["colossal::ColossalDialect", "mlir::func::FuncDialect"];
}

def Optimizer : Pass<"colossal-optimizer", "mlir::ModuleOp"> {
  let summary = "Build @optimizer_step: global gradient norm and one update per parameter";
  let description = [{
    For the trainable parameters (those with a `<p>.grad` accumulator in @train_step), builds
    `@optimizer_step(params, grads, optimizer state, lr: tensor<f32>, step: tensor<i64>)
    -> grad_norm: tensor<f32>`: `colossal.global_norm` over all gradients, then one
    `colossal.<kind>_update` per parameter with PyTorch 1.13's semantics (docs/training.md).
    Optimizer state arguments are `colossal.state = "<p>.exp_avg"`, `"<p>.exp_avg_sq"` (adam,
    adamw) or `"<p>.momentum_buffer"` (sgd with momentum ≠ 0), zero-initialized.
    Parameters matched by a `no-decay` regex (as `frozen`) get weight_decay 0. The learning-rate
    schedule options are only recorded for the runtime, which computes `lr` each step.
    Errors: no @train_step, a hyperparameter PyTorch would reject, a no-decay regex that matches
    no parameter.
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"adamw\"", "sgd, adam or adamw">,
    Option<"lr", "lr", "::colossal::Real", /*default=*/"0", "base learning rate (> 0, required)">,
    Option<"beta1", "beta1", "::colossal::Real", /*default=*/"0.9", "adam(w): first-moment decay">,
    Option<"beta2", "beta2", "::colossal::Real", /*default=*/"0.999", "adam(w): second-moment decay">,
    Option<"eps", "eps", "::colossal::Real", /*default=*/"1e-8", "adam(w): added after the square root">,
    Option<"weightDecay", "weight-decay", "::colossal::Real", /*default=*/"0",
           "weight decay (decoupled for adamw, L2 for adam and sgd)">,
    Option<"momentum", "momentum", "::colossal::Real", /*default=*/"0", "sgd: momentum">,
    Option<"dampening", "dampening", "::colossal::Real", /*default=*/"0", "sgd: dampening">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false", "sgd: Nesterov momentum">,
    ListOption<"noDecay", "no-decay", "std::string",
               "regexes: parameters without weight decay">,
    Option<"maxGradNorm", "max-grad-norm", "::colossal::Real", /*default=*/"0",
           "global-norm clipping threshold (0: off)">,
    Option<"lrSchedule", "lr-schedule", "std::string", /*default=*/"\"constant\"",
           "constant or cosine (linear warm-up, then cosine decay to min-lr)">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0", "cosine: warm-up steps">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"0",
           "cosine: step at which lr reaches min-lr">,
    Option<"minLr", "min-lr", "::colossal::Real", /*default=*/"0", "cosine: final learning rate">,
  ];
  let dependentDialects = ["colossal::ColossalDialect", "mlir::func::FuncDialect"];
}

//===----------------------------------------------------------------------===//
// Precision (docs/training.md "Mixed precision")
//===----------------------------------------------------------------------===//

def AutoMixedPrecision : Pass<"colossal-auto-mixed-precision", "mlir::func::FuncOp"> {
  let summary = "Run matmul, gemm, conv and attention on bf16 copies of their operands, f32 results";
  let description = [{
    Mixed precision as torch.autocast splits it for bf16: every `colossal.matmul` and
    `colossal.gemm` whose operands and result are f32 gets `colossal.cast`s to bf16 of its two
    factors (gemm's addend c stays f32) and keeps its f32 result, so the products are exact and
    summed in f32 (fp32 accumulation) with no rounding of the result; `colossal.conv` likewise
    (x and w; the bias stays f32); `colossal.attention` gets bf16 q, k and v (the mask is left
    alone) and keeps its f32 result. Softmax, norms, losses,
    reductions and elementwise ops stay f32. Function arguments (parameters) are not
    retyped: a contraction reads a cast of the f32 parameter, so master weights and optimizer
    state stay f32. `@optimizer_step` is left alone.

    Runs before colossal-autodiff (spec `precision.compute: bf16`): the contractions' VJPs then
    read the bf16 copies (the activations saved for backward are bf16), take the cotangent in
    bf16, `attention_grad` reads bf16 q, k, v with the f32 output and cotangent and returns bf16
    dq, dk, dv, and each cast's VJP returns an f32 gradient, which the accumulators sum in f32.
    `compute=fp16` does the same with f16 copies (spec `precision.compute: fp16`, whose gradients
    the runtime's loss scaler guards: colossal-autodiff's loss-scale options).
  }];
  let options = [
    Option<"compute", "compute", "std::string", /*default=*/"\"bf16\"",
           "the low-precision type: bf16 or fp16">,
  ];
  let dependentDialects = ["colossal::ColossalDialect"];
}

//===----------------------------------------------------------------------===//
// Distribution (docs/parallelism.md): the mesh, the batch split, tensor parallelism, and the
// data-parallel gradient reduction, each visible in the IR:
//   colossal-define-mesh, ..., colossal-split-batch, (loss, autodiff, optimizer),
//   colossal-spmd-partition, colossal-data-parallel, func.func(colossal-bucket-gradients)
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Parallelism (passes/Parallel, docs/parallelism.md "Tensor parallelism")
//===----------------------------------------------------------------------===//

def DefineMesh : Pass<"colossal-define-mesh", "mlir::ModuleOp"> {
  let summary = "Define the module's device mesh (`colossal.mesh @mesh`) with named axes and roles";
  let description = [{
    Adds `colossal.mesh @mesh axes = [...] shape = [...] roles = [...]` at the top of the module
    from `axes` (NAME=SIZE:ROLE entries in rank-layout order, the last fastest; ROLE one of data,
    tensor, pipeline, grid_row, grid_col, grid_depth). Every later pass finds the axes it works
    on by role. A module that already has the same mesh is left alone; a different one is an
    error naming both.
  }];
  let options = [
    ListOption<"axes", "axes", "std::string", "mesh axes in rank-layout order, NAME=SIZE:ROLE">,
  ];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def SplitBatch : Pass<"colossal-split-batch", "mlir::ModuleOp"> {
  let summary = "Split the batch dim of @forward into the per-rank, per-microbatch program";
  let description = [{
    Data parallelism and gradient accumulation as a transformation of one static program
    (docs/parallelism.md "Data parallelism"): every model input (`colossal.input`) of `@forward`,
    imported at the global batch B, is split along dim 0 into `dp` · `grad-accum` equal row
    blocks, and the SPMD partitioner's rules carry that split through the program, so the
    result is the program of one block of B / (dp · grad-accum) rows. Reshape targets, masks
    and other shapes folded at the global batch are rewritten by the same rules that serve
    tensor parallelism, so a model exported with a fixed batch splits exactly as a dynamic one.

    `into = forward` rewrites `@forward` itself (inference: each dp rank runs B / dp rows);
    any other name leaves `@forward` whole and adds the split clone under that name
    (train mode: `@forward_microbatch`, from which colossal-append-loss builds @train_step and
    @eval). A constant with a batch dim is sliced when its row blocks are equal.

    `dp` is the product of the sizes of the mesh's `data` axes (1 without a mesh).

    Training under dp alone (grad-accum 1, into a microbatch program): a row block's sum or mean
    over the rows that reaches an op through reshapes and constant scalings (a training-mode
    batch norm's statistics) becomes an `all_reduce` over the data axes (a mean's divided by
    dp): the global batch's statistics on every rank, as SyncBatchNorm.

    Errors: an input without a batch dim, a batch that dp · grad-accum does not divide, and an
    op whose rows depend on other rows of the batch (the split would need an all_gather or an
    all_reduce across row blocks, other than the exception above), each naming the input or
    node, dp and grad_accum.
  }];
  let options = [
    Option<"gradAccum", "grad-accum", "int64_t", /*default=*/"1",
           "microbatches per optimizer step (train.grad_accum)">,
    Option<"into", "into", "std::string", /*default=*/"\"microbatch\"",
           "the split program's role: `microbatch` (a new program beside @forward) or `forward` "
           "(rewrites the forward program in place)">,
    Option<"accumKey", "accum-key", "std::string", /*default=*/"\"train.grad_accum\"",
           "the spec key of grad-accum, for messages (parallel.pipeline.microbatches under pp)">,
  ];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def Generate : Pass<"colossal-generate", "mlir::ModuleOp"> {
  let summary = "Turn a decoder's @forward into the serving programs over a paged KV cache";
  let description = [{
    Mode generate (docs/serving.md "Compiler"). `@forward` is the model imported as one sequence
    of T positions (input_ids [1, T]) after colossal-fuse-attention. Every `colossal.attention`
    (causal, no mask) becomes `colossal.kv_append` into the layer's cache (two `colossal.state`
    arguments `kv.<l>.k` [NB, Hkv, BS, D] and `kv.<l>.v`) and `colossal.paged_attention` through
    the block table; the SPMD partitioner then cuts the T token rows into steps of N rows for N
    = 1, 2, 4, ... up to max-batch-tokens rounded up to a power of two (T must be a multiple of
    twice that), and a table the step needs whole along the rows (RoPE tables, position
    embeddings, constants folded at T) becomes its gather at the step's `positions`. Each
    `@generate_<N>` (colossal.program = "generate", colossal.tokens = N) takes `tokens`,
    `positions`, `slot_mapping` [N], `block_tables` [max-batch-seqs, ⌈max-seq-len /
    block-size⌉], `context_lens` [max-batch-seqs] and `query_start_loc` [max-batch-seqs + 1]
    (i32 but the tokens, which keep the model's dtype) and returns `logits` [N, V]. An input
    named position_ids is fed the positions. `@forward` is erased; the module's
    `colossal.generate` records the configuration.

    kv-blocks 0 is `auto`: budget-bytes minus the weights' bytes divided by the bytes of one
    block (all layers, keys and values) when a budget is given, else max-batch-seqs ×
    ⌈max-seq-len / block-size⌉.

    Errors (naming the node or input): an input other than the token ids and position_ids; an
    output that is not logits [1, T, V] f32; an attention with a mask operand or not causal;
    an op that mixes token positions outside the recognised attention (the partitioner would
    need a collective across the token rows); T below max-seq-len or not a multiple of twice
    the largest step; a cache that cannot hold one sequence of max-seq-len tokens.
  }];
  let options = [
    Option<"maxSeqLen", "max-seq-len", "int64_t", /*default=*/"512", "generate.max_seq_len">,
    Option<"blockSize", "block-size", "int64_t", /*default=*/"16", "generate.block_size">,
    Option<"kvBlocks", "kv-blocks", "int64_t", /*default=*/"0", "generate.kv_blocks (0: auto)">,
    Option<"maxBatchSeqs", "max-batch-seqs", "int64_t", /*default=*/"16", "generate.max_batch_seqs">,
    Option<"maxBatchTokens", "max-batch-tokens", "int64_t", /*default=*/"512", "generate.max_batch_tokens">,
    Option<"budgetBytes", "budget-bytes", "uint64_t", /*default=*/"0",
           "memory.budget_mb in bytes, for kv-blocks auto (0: none)">,
  ];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def SpmdPartition : Pass<"colossal-spmd-partition", "mlir::ModuleOp"> {
  let summary = "Shard parameters over the mesh and rewrite every function into its per-rank program";
  let description = [{
    Strategy (Megatron-LM 1D tensor parallelism found on the graph, or 2D/2.5D/3D grids), then
    sharding propagation op by op with collectives inserted where a value's sharding must change
    (all_reduce / reduce_scatter of partial sums, all_gather, shard_slice). Function arguments
    holding split parameters, states and weights get local types and `colossal.sharding`. The
    mesh is the module's `colossal.mesh` (colossal-define-mesh): 1d splits over its `tensor`
    axes, the grids over `grid_row`, `grid_col` and `grid_depth`; `data` axes are left to
    colossal-split-batch and colossal-data-parallel.
  }];
  let options = [
    Option<"style", "style", "std::string", /*default=*/"\"1d\"", "1d, 2d, 2.5d or 3d">,
    Option<"sequenceParallel", "sequence-parallel", "bool", /*default=*/"false",
           "Megatron sequence parallelism: norm and residual regions split along the sequence">,
    ListOption<"hints", "hints", "std::string",
           "per-parameter shardings, REGEX=DIMS each (DIMS: per dim '-' or axes joined by '*', separated by '/'; split at the last '=')">,
    Option<"stage", "stage", "std::string", /*default=*/"\"partition\"",
           "how far to go (lit tests show each step): strategy (parameters annotated, "
           "nothing rewritten), propagate (every op annotated with its results' shardings, "
           "nothing rewritten) or partition (the per-rank program)">,
  ];
  let dependentDialects = ["colossal::ColossalDialect", "mlir::func::FuncDialect"];
}

def DataParallel : Pass<"colossal-data-parallel", "mlir::ModuleOp"> {
  let summary = "Sum the gradients over the mesh's data axes at the start of @optimizer_step";
  let description = [{
    Data parallelism's gradient reduction (PyTorch DDP; docs/parallelism.md "Data parallelism"):
    each data-parallel rank's accumulators hold 1/(dp · grad_accum) · Σ of its microbatch
    gradients (colossal-autodiff), so their sum over the data axes is the gradient of the mean
    loss of the global batch. Inserts one `colossal.all_reduce_in_place` (sum over the mesh's
    `data` axes) per gradient the optimizer reads (the `g` operands of the update ops and the
    global norm's operands, in argument order) at the start of `@optimizer_step`, before the
    global norm and the updates. No-op when the mesh has no data axis larger than 1.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def Zero : Pass<"colossal-zero", "mlir::ModuleOp"> {
  let summary = "ZeRO stages 1-3: partition optimizer state, gradients and parameters over the data axes";
  let description = [{
    Rajbhandari et al. 2020 (docs/parallelism.md "ZeRO"), in place of colossal-data-parallel. A
    partitioned tensor is split into dim-0 chunks over the mesh's `data` axes (group size P; its
    `#colossal.sharding` gains them as dim 0's minor axes); a parameter whose local dim 0 is not
    divisible by P, or is a multi-block dim, keeps plain data parallelism's all_reduce.
    `stage=1`: `exp_avg`/`exp_avg_sq`/`momentum_buffer` are chunks; @optimizer_step starts with
    `reduce_scatter_in_place` of the gradients, updates `shard_view`s of the parameter and
    gradient, and ends with `all_gather_in_place` of the parameters. `stage=2`: also the
    gradient accumulators are chunks, filled in @train_step by a `reduce_scatter` of each
    microbatch's gradient. `stage=3`: also the parameters are chunks; each op of every program
    that reads one reads its own `all_gather` of it (freed after that op), and the update
    writes the chunk. The global norm sums the chunks' squared norms over the data axes.
    No-op for stage 0 or a mesh without a data axis larger than 1.
  }];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"1", "ZeRO stage: 0 (off), 1, 2 or 3">,
  ];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def BucketGradients : Pass<"colossal-bucket-gradients", "mlir::func::FuncOp"> {
  let summary = "Fuse consecutive in-place collectives into gradient (and ZeRO parameter) buckets";
  let description = [{
    PyTorch DDP's gradient buckets: consecutive `colossal.all_reduce_in_place` ops (and ZeRO's
    `reduce_scatter_in_place` / `all_gather_in_place`) of one kind over the same
    axes with the same reduction and element type become one op over all their operands (one
    collective on their concatenation) while the bucket stays within `bucket-cap-mb` MiB
    (2^20 bytes) and no operand repeats; a tensor larger than the cap is a bucket of its own.
    `bucket-cap-mb=0` keeps one collective per tensor. Fusing changes no number: each element
    is reduced over the same ranks.
  }];
  let options = [
    Option<"bucketCapMb", "bucket-cap-mb", "::colossal::Real", /*default=*/"25",
           "largest bucket in MiB (the spec's zero.bucket_mb); 0: one collective per tensor">,
  ];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def Recompute : Pass<"colossal-recompute", "mlir::func::FuncOp"> {
  let summary = "Activation recompute in @train_step: forward values saved for backward are recomputed there instead";
  let description = [{
    Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost") and Megatron-LM's
    activation recomputation (Korthikanti et al. 2022), as a rewrite of @train_step
    (docs/training.md "Activation recompute"). The forward part is the backward slice of the
    `loss` output; the rest is the backward part. A *unit* is a set of forward ops; recomputing
    it clones the unit's ops whose results the backward part reads (and the recomputed ops they
    need) right before the first backward op that reads one, and makes the backward part read
    the clones, so the originals die at their last forward use. Only Pure ops are cloned
    (collectives included: every rank clones the same ones); constants, arguments and values
    computed from parameters only are never recomputed.
    Units come from the forward part's *cuts* (gaps where one value, besides long-lived side
    inputs such as rotary tables, carries everything forward: the residual stream between
    sub-blocks) and the *repeated blocks* (the shortest run of consecutive segments whose op
    signature repeats most: a transformer layer, a residual block).
      `mode=full`: every repeated block is a unit (its input and output stay saved); without
                   a repeated block, every segment but the last is one.
      `mode=selective`: Megatron's selective recompute: each attention op (and the layout ops
                   after it) and each softmax is a unit.
      `mode=auto`: segments are candidate units; greedily add the one that lowers the
                   estimated peak of live activation bytes most per recomputed FLOP until the
                   estimate is at most `budget-bytes` (else the choice with the lowest estimate).
                   The driver (colossal-opt) checks the planned arena and tightens the target.
    The result is recorded on @train_step as `colossal.recompute` = {mode, units, ops, flops,
    forward_flops} (flops: 2·M·N·K per contraction, 4·B·H·Sq·Sk·D per attention, halved when
    causal, one per output element otherwise). Running CSE afterwards would undo it.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"full\"", "full | selective | auto">,
    Option<"budgetBytes", "budget-bytes", "uint64_t", /*default=*/"0",
           "auto: the activation bytes (arena) to stay within">,
  ];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def AssignPipelineStages : Pass<"colossal-assign-pipeline-stages", "mlir::ModuleOp"> {
  let summary = "Cut @train_step's forward ops into contiguous pipeline stages (colossal.stage)";
  let description = [{
    Pipeline parallelism, first half (docs/parallelism.md "Pipeline parallelism"). Runs on
    @train_step after colossal-append-loss and before colossal-autodiff: the ops of the forward
    program and loss, in block order (a topological order), are cut into `stages` contiguous
    runs and each op gets `colossal.stage = s` (i64). Autodiff gives every op of an op's VJP the
    op's stage, so colossal-split-pipeline-stages can cut the finished step.
      `cuts` empty: the cost model's split. An op costs its forward FLOPs
                    (passes/Memory/CostModel.h) times 3 (forward, input gradient and weight
                    gradient) plus 5 FLOPs per byte it and its backward move (operands and results
                    twice, a parameter's gradient written and accumulated), and each stage pays
                    for the cuts at its two ends: 2 × 5 FLOPs per byte crossing the cut (the
                    values sent or received, and their gradients the other way); the split
                    minimises the slowest stage's cost, which with
                    m microbatches minimises Σ stage time + (m−1)·max stage time (Alpa's
                    objective; Σ is the same for every contiguous split).
      `cuts` given: one POSIX regex per cut, matched against the ONNX node names (the ops'
                    NameLoc); the cut is after the last op of the last matching node.
    Errors: fewer ops than stages, a regex that matches no node, cuts out of order or not
    `stages` − 1 of them. Records the split on the module as `colossal.pipeline` = {stages,
    microbatches, schedule, stage_cost, cut_bytes, stage_ops}.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"2", "the number of stages (mesh pp x virtual-stages)">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"1",
           "stages per pipeline rank (interleaved): stage s runs on rank s mod (stages / virtual-stages)">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1", "microbatches per step">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"", "gpipe | 1f1b">,
    ListOption<"cuts", "cuts", "std::string", "regexes of the nodes to cut after">,
  ];
  let dependentDialects = ["colossal::ColossalDialect"];
}

def SplitPipelineStages : Pass<"colossal-split-pipeline-stages", "mlir::ModuleOp"> {
  let summary = "Split @train_step and @optimizer_step into per-stage programs";
  let description = [{
    Pipeline parallelism, second half (docs/parallelism.md "Pipeline parallelism"). Runs after
    the optimizer. Every op of @train_step has a stage (its `colossal.stage`, else its users'
    or operands' stage; constants are cloned where used) and a phase: forward (the backward
    slice of the loss) or backward. Each (stage, phase) becomes a program
    `@stage<s>_forward` / `@stage<s>_backward` (roles stage_forward / stage_backward, with
    `colossal.stage`; with V stages per rank, stage s runs on pipeline rank s mod P) whose inputs are the train_step arguments it reads and, for values another
    program computes, inputs named `pp.<k>` that the producer outputs under the same name: the
    activations sent forward and their gradients sent back between stages, and the residuals a
    stage's backward reads from its own forward. @optimizer_step becomes `@stage<r>_optimizer`
    per pipeline rank r, updating the parameters of that rank's stages, with the global gradient norm summed over the
    stages (a partial norm per stage in f64, an all_reduce over the pipeline axis).
    @train_step, @optimizer_step and @eval stay for one-rank use of the plan.
    A parameter read on several stages (tied weights: an embedding and LM head) is updated on
    the stage of its gradient accumulator (the earliest: autodiff sums the contributions there,
    the later stages' sent to it per microbatch); the runtime then sends the updated value to
    the other stages. Errors: a state written on two stages, a value flowing against the
    pipeline's direction.
  }];
  let dependentDialects = ["colossal::ColossalDialect", "mlir::func::FuncDialect"];
}

def ChainGlobalNorm : Pass<"colossal-chain-global-norm", "mlir::func::FuncOp"> {
  let summary = "Split each many-gradient global_norm into a chain reading one gradient per op";
  let description = [{
    For offload (docs/training.md "Offload"): `global_norm g0, ..., gN` becomes
    `s0 = global_norm {partial} g0`, `sk = global_norm {partial} s(k-1), gk`, ...,
    `n = global_norm s(N-1), gN`: the partial ops carry the f64 running sum of squares, so each
    instruction reads one gradient (one chunk resident at a time) and `n` is bit-equal.
  }];
  let dependentDialects = ["colossal::ColossalDialect"];
}

#endif

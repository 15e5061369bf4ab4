//===- ColossalTrainOps.td - loss, gradient accumulation and optimizer ops ---===//
//
// The ops the training passes append (docs/training.md "Compiler pipeline"): the cross-entropy
// loss and its gradient, gradient accumulation, the global gradient norm and the optimizer
// updates. Included by ColossalOps.td; the C++ lives in ColossalTrainOps.cpp. Operands and
// attributes are those of the plan rows in docs/plan.md "Training instructions".
//
// The update ops are the only colossal ops with side effects: they write some operands in place
// and have no results. Each written operand must be an argument of the enclosing function marked
// `colossal.param` or `colossal.state` (a persistent tensor of the plan), never an SSA temporary.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_TRAIN_OPS_TD
#define COLOSSAL_TRAIN_OPS_TD

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def Colossal_CrossEntropyOp : Colossal_Op<"cross_entropy",
    [InferTypeOpAdaptor, DeclareOpInterfaceMethods<Colossal_VJPOpInterface>, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::CrossEntropy)">.body;
  let summary = "Mean softmax cross-entropy over rows (torch.nn.functional.cross_entropy)";
  let description = [{
    `logits`: tensor<NxCxf32>, `labels`: tensor<Nxi64> → tensor<f32>:
    mean over the rows n whose label ≠ `ignore_index` of
    `logsumexp(logits[n, :]) − logits[n, labels[n]]` (PyTorch's `reduction="mean"`; NaN when every
    row is ignored, as PyTorch). A label outside [0, C) that is not ignored is a run-time error.
    Its VJP is `colossal.cross_entropy_grad`.
  }];
  let arguments = (ins AnyRankedTensor:$logits, AnyRankedTensor:$labels,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs AnyRankedTensor:$loss);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Colossal_CrossEntropyGradOp : Colossal_Op<"cross_entropy_grad", [InferTypeOpAdaptor, Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::CrossEntropy)">.body;
  let summary = "∂loss/∂logits of colossal.cross_entropy";
  let description = [{
    `logits`: tensor<NxCxf32>, `labels`: tensor<Nxi64>, `dloss`: tensor<f32> → tensor<NxCxf32>:
    row n is `(softmax(logits[n]) − onehot(labels[n])) · dloss / count` where count is the number
    of rows not ignored; rows whose label is `ignore_index` are zero. (Differentiating the mean of
    `logsumexp(z) − z_y`: ∂/∂z = softmax(z) − onehot(y).)
  }];
  let arguments = (ins AnyRankedTensor:$logits, AnyRankedTensor:$labels, AnyRankedTensor:$dloss,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs AnyRankedTensor:$dlogits);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Gradient norm (pure)
//===----------------------------------------------------------------------===//

def Colossal_GlobalNormOp : Colossal_Op<"global_norm", [InferTypeOpAdaptor]> {
  let summary = "Euclidean norm of all gradients together (torch.nn.utils.clip_grad_norm_)";
  let description = [{
    `grads`: one or more float tensors of any shapes → tensor<f32>: `sqrt(Σᵢ Σ gᵢ²)`, accumulated
    in f64 in operand order. A leading tensor<f64> operand is a running sum to continue (the
    squares are added to it in the same order), and with `partial` the result is that tensor<f64>
    sum, not its square root: a chain of partial norms over one gradient each computes exactly
    the norm of all of them (colossal-chain-global-norm, for offload).
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$grads, UnitAttr:$partial);
  let results = (outs AnyRankedTensor:$norm);
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

//===----------------------------------------------------------------------===//
// Update ops: write their state operands in place, no results
//===----------------------------------------------------------------------===//

class Colossal_UpdateOp<string mnemonic, list<Trait> traits = []>
    : Op<Colossal_Dialect, mnemonic, traits> {
  let hasVerifier = 1;
  let assemblyFormat = "operands attr-dict `:` type(operands)";
}

// A state operand: read, then written in place (a state argument, or a colossal.shard_view of one).
class Colossal_StateOperand<string desc> : Arg<AnyRankedTensor, desc, [MemRead, MemWrite]>;

def Colossal_AccumulateGradOp : Colossal_UpdateOp<"accumulate_grad", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::AccumulateGrad)">.body;
  let summary = "acc += scale · g (gradient accumulation over microbatches)";
  let description = [{
    `acc`: a `colossal.state` argument (the accumulator `<p>.grad`), `g`: the microbatch's gradient,
    same type (float). `scale` is 1/grad_accum, so after grad_accum microbatches `acc` holds the
    gradient of the mean of the microbatch losses.
  }];
  let arguments = (ins Colossal_StateOperand<"the accumulator, written in place">:$acc, AnyRankedTensor:$g,
                   DefaultValuedAttr<F64Attr, "1.0">:$scale);
}

def Colossal_UpdateBufferOp : Colossal_UpdateOp<"update_buffer", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::AccumulateGrad)">.body;
  let summary = "buf ← value (a buffer's new value: BatchNorm's running statistics)";
  let description = [{
    `buf`: a `colossal.param` argument that is not trained (a buffer, as torch calls
    `running_mean` / `running_var`), `value`: its new value, same float type. The importer emits
    one per running statistic of a training-mode BatchNormalization in train mode (the value
    `(1 − m)·running + m·batch_stat` of torch.nn.BatchNorm2d); colossal-append-loss keeps it in
    @train_step only, so the statistics follow the training steps and a checkpoint or exported
    model holds them.
  }];
  let arguments = (ins Colossal_StateOperand<"the buffer, written in place">:$buf, AnyRankedTensor:$value);
}

def Colossal_AdamWUpdateOp : Colossal_UpdateOp<"adamw_update", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::OptimizerUpdate)">.body;
  let summary = "One torch.optim.AdamW step on one parameter (Loshchilov & Hutter 2019)";
  let description = [{
    `p` (the parameter), `g` (its accumulated gradient), `m`, `v` (`exp_avg`, `exp_avg_sq`): same
    float type, all written in place; `lr`: tensor<f32>, `step`: tensor<i64> (t, from 1),
    `grad_norm`: tensor<f32> (the global norm). With `max_grad_norm > 0` the gradient is first
    scaled by `min(1, max_grad_norm / (grad_norm + 1e-6))`; then
    `p ← p·(1 − lr·wd)`, `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`,
    `p ← p − lr/(1−β₁ᵗ) · m / (√v/√(1−β₂ᵗ) + eps)`, and `g ← 0` (docs/training.md).
  }];
  let arguments = (ins Colossal_StateOperand<"parameter">:$p, Colossal_StateOperand<"gradient, zeroed">:$g,
                   Colossal_StateOperand<"exp_avg">:$m, Colossal_StateOperand<"exp_avg_sq">:$v,
                   AnyRankedTensor:$lr, AnyRankedTensor:$step, AnyRankedTensor:$grad_norm,
                   F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay,
                   F64Attr:$max_grad_norm);
}

def Colossal_AdamUpdateOp : Colossal_UpdateOp<"adam_update", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::OptimizerUpdate)">.body;
  let summary = "One torch.optim.Adam step on one parameter (Kingma & Ba 2015)";
  let description = [{
    As `adamw_update`, but weight decay is L2 regularization added to the gradient
    (`g ← g + wd·p`) instead of decoupled decay.
  }];
  let arguments = (ins Colossal_StateOperand<"parameter">:$p, Colossal_StateOperand<"gradient, zeroed">:$g,
                   Colossal_StateOperand<"exp_avg">:$m, Colossal_StateOperand<"exp_avg_sq">:$v,
                   AnyRankedTensor:$lr, AnyRankedTensor:$step, AnyRankedTensor:$grad_norm,
                   F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay,
                   F64Attr:$max_grad_norm);
}

def Colossal_SgdUpdateOp : Colossal_UpdateOp<"sgd_update", [Sharded]> {
  let extraClassDefinition = ShardingRuleIs<"ShardingRule::of(ShardingRule::Kind::OptimizerUpdate)">.body;
  let summary = "One torch.optim.SGD step on one parameter (momentum, dampening, Nesterov)";
  let description = [{
    `p`, `g`, `buf` (`momentum_buffer`, present exactly when momentum ≠ 0): same float type,
    written in place; `lr`, `step`, `grad_norm` as `adamw_update`. After optional clipping:
    `g ← g + wd·p`; with momentum μ: `buf ← g` at t = 1, else `buf ← μ·buf + (1−dampening)·g`, then
    `g ← g + μ·buf` (nesterov) or `g ← buf`; `p ← p − lr·g`; the stored gradient is zeroed.
    Nesterov needs momentum > 0 and dampening 0 (as PyTorch).
  }];
  let arguments = (ins Colossal_StateOperand<"parameter">:$p, Colossal_StateOperand<"gradient, zeroed">:$g,
                   Arg<Optional<AnyRankedTensor>, "momentum_buffer", [MemRead, MemWrite]>:$buf,
                   AnyRankedTensor:$lr, AnyRankedTensor:$step, AnyRankedTensor:$grad_norm,
                   F64Attr:$momentum, F64Attr:$dampening, F64Attr:$weight_decay,
                   F64Attr:$max_grad_norm, BoolAttr:$nesterov);
}

#endif // COLOSSAL_TRAIN_OPS_TD

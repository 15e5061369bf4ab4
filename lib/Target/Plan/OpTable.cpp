//===- OpTable.cpp - the colossal -> plan instruction table (docs/plan.md) ------------------===//
#include "OpTable.h"

#include "llvm/ADT/StringMap.h"

namespace colossal {

namespace {
using Kind = OpLowering::Kind;
using llvm::StringLiteral;

constexpr StringLiteral kAxis[] = {"axis"};
constexpr StringLiteral kNorm[] = {"axis", "epsilon"};
constexpr StringLiteral kGelu[] = {"approximate"};
constexpr StringLiteral kReduce[] = {"axes", "keepdims"};
constexpr StringLiteral kGemm[] = {"trans_a", "trans_b", "alpha", "beta"};
constexpr StringLiteral kTranspose[] = {"perm"};
constexpr StringLiteral kSlice[] = {"starts", "steps"}; // `limits` is implied by the result shape
constexpr StringLiteral kTrilu[] = {"upper", "k"};
constexpr StringLiteral kAttention[] = {"scale", "causal"};
constexpr StringLiteral kLinear[] = {"activation"};
constexpr StringLiteral kScale[] = {"scale"};
constexpr StringLiteral kConv[] = {"strides", "pads", "dilations", "group"};
constexpr StringLiteral kConvFused[] = {"strides",         "pads",          "dilations",
                                        "group",           "activation",    "activation_alpha",
                                        "activation_beta", "output_scale",  "output_shift"};
constexpr StringLiteral kConvTranspose[] = {"strides",          "pads",            "dilations",
                                            "output_padding",   "group",           "activation",
                                            "activation_alpha", "activation_beta", "output_scale",
                                            "output_shift"};
constexpr StringLiteral kPool[] = {"kind", "kernel_shape", "strides", "pads", "dilations",
                                   "ceil_mode", "count_include_pad", "p"};
constexpr StringLiteral kMaxPoolIdx[] = {"kernel_shape", "strides", "pads", "dilations",
                                         "ceil_mode", "storage_order"};
constexpr StringLiteral kResize[] = {"mode", "coordinate_transformation_mode", "nearest_mode",
                                     "cubic_coeff_a", "exclude_outside", "extrapolation_value",
                                     "scales", "roi"};
constexpr StringLiteral kMaxUnpool[] = {"index_shape"};
constexpr StringLiteral kNllLoss[] = {"reduction", "ignore_index"};
// indexing family (docs/plan.md)
constexpr StringLiteral kReduceKind[] = {"axes", "keepdims", "kind"};
constexpr StringLiteral kArgReduce[] = {"axis", "keepdims", "select_last_index"};
constexpr StringLiteral kCumSum[] = {"axis", "exclusive", "reverse"};
constexpr StringLiteral kGatherND[] = {"batch_dims"};
constexpr StringLiteral kScatterElements[] = {"axis", "reduction"};
constexpr StringLiteral kScatterND[] = {"reduction"};
constexpr StringLiteral kTopK[] = {"axis", "largest", "sorted"};
constexpr StringLiteral kPad[] = {"pads", "mode"};
constexpr StringLiteral kUnaryFn[] = {"fn", "alpha", "beta"};
constexpr StringLiteral kBinaryFn[] = {"fn"};
constexpr StringLiteral kReverseSequence[] = {"batch_axis", "time_axis"};
constexpr StringLiteral kGridSample[] = {"mode", "padding_mode", "align_corners"};
// training (docs/plan.md "Training instructions")
constexpr StringLiteral kIgnoreIndex[] = {"ignore_index"};
constexpr StringLiteral kAccumulateGrad[] = {"scale"};
constexpr StringLiteral kAdam[] = {"beta1", "beta2", "eps", "weight_decay", "max_grad_norm"};
constexpr StringLiteral kSgd[] = {"momentum", "dampening", "nesterov", "weight_decay",
                                  "max_grad_norm"};
// collectives (docs/plan.md "Collective instructions"; dialects/Colossal/ColossalParallelOps.td):
// `axes` (a list of mesh axis names) becomes one string joined with "," (PlanCollector.cpp).
constexpr StringLiteral kAllReduce[] = {"axes", "reduction"};
constexpr StringLiteral kAxesDim[] = {"axes", "dim"};
constexpr StringLiteral kReduceScatter[] = {"axes", "dim", "reduction"};
constexpr StringLiteral kAxes[] = {"axes"};
constexpr StringLiteral kBroadcast[] = {"axes", "root"};
constexpr StringLiteral kRoiAlign[] = {"mode",           "output_height", "output_width",
                                       "sampling_ratio", "spatial_scale", "half_pixel"};

// training: backward ops (dialects/Colossal/ColossalGradOps.td, docs/plan.md "Training instructions")
constexpr StringLiteral kUnaryGrad[] = {"fn", "alpha"};
constexpr StringLiteral kPoolGrad[] = {"kind", "kernel_shape", "strides", "pads", "dilations",
                                       "ceil_mode", "count_include_pad", "p"};
constexpr StringLiteral kResizeGrad[] = {"mode", "coordinate_transformation_mode", "nearest_mode",
                                         "cubic_coeff_a", "exclude_outside", "scales", "roi"};

#define KERNEL(name, inplace, attrs) {"colossal." name, Kind::Kernel, name, inplace, attrs}

const OpLowering kTable[] = {
    {"colossal.constant", Kind::Constant, "", false, {}},
    {"colossal.reshape", Kind::Alias, "", false, {}},
    {"colossal.cast", Kind::Kernel, "cast", false, {}, /*copyWhenSameType=*/true},

    KERNEL("add", true, {}),
    KERNEL("sub", true, {}),
    KERNEL("mul", true, {}),
    KERNEL("div", true, {}),
    KERNEL("pow", true, {}),
    KERNEL("min", true, {}),
    KERNEL("max", true, {}),
    KERNEL("equal", false, {}),
    KERNEL("less", false, {}),
    KERNEL("greater", false, {}),
    KERNEL("where", false, {}),

    KERNEL("neg", true, {}),
    KERNEL("abs", true, {}),
    KERNEL("sqrt", true, {}),
    KERNEL("reciprocal", true, {}),
    KERNEL("exp", true, {}),
    KERNEL("log", true, {}),
    KERNEL("erf", true, {}),
    KERNEL("tanh", true, {}),
    KERNEL("sigmoid", true, {}),
    KERNEL("relu", true, {}),
    KERNEL("silu", true, {}),
    KERNEL("gelu", true, kGelu),

    KERNEL("softmax", true, kAxis),
    KERNEL("log_softmax", true, kAxis),
    KERNEL("layer_norm", false, kNorm),
    KERNEL("rms_norm", false, kNorm),

    KERNEL("reduce_sum", false, kReduce),
    KERNEL("reduce_mean", false, kReduce),
    KERNEL("reduce_max", false, kReduce),

    KERNEL("matmul", false, {}),
    KERNEL("gemm", false, kGemm),
    KERNEL("linear", false, kLinear),
    KERNEL("attention", false, kAttention),

    KERNEL("transpose", false, kTranspose),
    KERNEL("gather", false, kAxis),
    KERNEL("slice", false, kSlice),
    KERNEL("concat", false, kAxis),
    KERNEL("split", false, kAxis),
    KERNEL("expand", false, {}),
    KERNEL("trilu", false, kTrilu),

    KERNEL("conv", false, kConvFused),
    KERNEL("conv_transpose", false, kConvTranspose),
    KERNEL("conv_integer", false, kConv),
    KERNEL("matmul_integer", false, {}),
    KERNEL("pool", false, kPool),
    KERNEL("max_pool_with_indices", false, kMaxPoolIdx),
    KERNEL("max_unpool", false, kMaxUnpool),
    KERNEL("resize", false, kResize),
    KERNEL("nll_loss", false, kNllLoss),
    KERNEL("quantize_linear", false, kAxis),
    KERNEL("dequantize_linear", false, kAxis),
    KERNEL("dynamic_quantize_linear", false, {}),
    // indexing family
    KERNEL("reduce", false, kReduceKind),
    KERNEL("argmax", false, kArgReduce),
    KERNEL("argmin", false, kArgReduce),
    KERNEL("cumsum", false, kCumSum),
    KERNEL("gather_elements", false, kAxis),
    KERNEL("gather_nd", false, kGatherND),
    KERNEL("scatter_elements", false, kScatterElements),
    KERNEL("scatter_nd", false, kScatterND),
    KERNEL("one_hot", false, kAxis),
    KERNEL("topk", false, kTopK),
    KERNEL("pad", false, kPad),
    // Table-driven elementwise functions (dialects/Colossal/ElementwiseFns.h).
    KERNEL("unary", true, kUnaryFn),
    KERNEL("binary", true, kBinaryFn),

    // Misc family (runtime/kernels/cpu/misc.cpp).
    KERNEL("det", false, {}),
    KERNEL("reverse_sequence", false, kReverseSequence),
    KERNEL("grid_sample", false, kGridSample),
    KERNEL("roi_align", false, kRoiAlign),

    // Training (docs/training.md): the loss, the gradient norm, and the update ops, which write
    // every operand but the last `readOnlyTail` in place (acc; p, g, m, v; p, g, [buf]).
    KERNEL("cross_entropy", false, kIgnoreIndex),
    KERNEL("cross_entropy_grad", false, kIgnoreIndex),
    KERNEL("global_norm", false, {}),
    {"colossal.accumulate_grad", Kind::Update, "accumulate_grad", false, kAccumulateGrad, false, 1},
    {"colossal.update_buffer", Kind::Update, "update_buffer", false, {}, false, 1},
    {"colossal.adamw_update", Kind::Update, "adamw_update", false, kAdam, false, 3},
    {"colossal.adam_update", Kind::Update, "adam_update", false, kAdam, false, 3},
    {"colossal.sgd_update", Kind::Update, "sgd_update", false, kSgd, false, 3},

    // Serving (docs/serving.md "KV-cache kernels"): kv_append writes the two caches in place from
    // k, v and the slot mapping; paged_attention reads them.
    {"colossal.kv_append", Kind::Update, "kv_append", false, {}, false, 3},
    KERNEL("paged_attention", false, kScale),

    // Training: backward ops emitted by autodiff (runtime/kernels/cpu/grad.cpp). In-place safety
    // for `dy` is not claimed: the planner only reuses the first input's bytes.
    KERNEL("softmax_grad", false, kAxis),
    KERNEL("log_softmax_grad", false, kAxis),
    KERNEL("layer_norm_grad", false, kNorm),
    KERNEL("rms_norm_grad", false, kNorm),
    KERNEL("unary_grad", false, kUnaryGrad),
    KERNEL("attention_grad", false, kAttention),
    KERNEL("gather_grad", false, kAxis),
    KERNEL("slice_grad", false, kSlice),
    // The CNN family's (conv.cpp, pool.cpp, indexing.cpp, resize.cpp, beside their forwards).
    KERNEL("conv_grad_weight", false, kConv),
    KERNEL("pool_grad", false, kPoolGrad),
    KERNEL("pad_grad", false, kPad),
    KERNEL("resize_grad", false, kResizeGrad),

    // Collectives and mesh queries of the per-rank program (docs/parallelism.md "Tensor
    // parallelism"): one instruction each, of the same name. all_reduce may write its input's
    // bytes (the communicator reduces in place); the others change the shape.
    KERNEL("all_reduce", true, kAllReduce),
    // A gradient bucket (colossal-data-parallel, colossal-bucket-gradients): one all_reduce
    // instruction whose outputs are its inputs, the STATE buffers it reduces in place.
    {"colossal.all_reduce_in_place", Kind::Update, "all_reduce", false, kAllReduce, false, 0},
    // ZeRO (colossal-zero): a state's dim-0 chunk as a view (no instruction), and the in-place
    // collectives over those chunks, whose outputs are their inputs.
    {"colossal.shard_view", Kind::ChunkView, "", false, {}, false, 0},
    {"colossal.all_gather_in_place", Kind::Update, "all_gather_in_place", false, kAxes, false, 0},
    {"colossal.reduce_scatter_in_place", Kind::Update, "reduce_scatter_in_place", false, kAxes, false, 0},
    KERNEL("all_gather", false, kAxesDim),
    KERNEL("reduce_scatter", false, kReduceScatter),
    KERNEL("shard_slice", false, kAxesDim),
    KERNEL("axis_index", false, kAxes),
    KERNEL("broadcast", true, kBroadcast),
};
#undef KERNEL
} // namespace

llvm::ArrayRef<OpLowering> opLowerings() { return kTable; }

const OpLowering *lookupOpLowering(llvm::StringRef opName) {
  static const llvm::StringMap<const OpLowering *> index = [] {
    llvm::StringMap<const OpLowering *> map;
    for (const OpLowering &row : kTable)
      map[row.op] = &row;
    return map;
  }();
  auto it = index.find(opName);
  return it == index.end() ? nullptr : it->second;
}

} // namespace colossal

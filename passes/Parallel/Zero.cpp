//===- Zero.cpp - colossal-zero: ZeRO stages 1, 2 and 3 over the data axes -----------===//
//
// Passes.td "Zero"; docs/parallelism.md "ZeRO". Rajbhandari et al. 2020 partition the model
// states of data parallelism over its ranks: stage 1 the optimizer state, stage 2 also the
// gradients, stage 3 also the parameters. Here a partitioned tensor is split into dim-0 chunks
// over the mesh's data axes (group size P), rank r holding chunk r: its `#colossal.sharding`
// gains the data axes as the minor axes of dim 0, so checkpoints, the state store and the report
// see an ordinary sharded tensor with its global shape.
//
// A parameter is partitioned when dim 0 of its local (after tensor parallelism) shape is
// divisible by P and is not a multi-block dim; any other parameter (a scalar, a 3-row bias on
// 2 ranks) keeps plain data parallelism's all_reduce and full update.
//
//   stage 1  @optimizer_step: reduce_scatter_in_place(g) (chunk r summed, the rest zeroed),
//            update(shard_view(p), shard_view(g), m_r, v_r), all_gather_in_place(p)
//   stage 2  @train_step: accumulate_grad(g_r, reduce_scatter(dL/dp)); @optimizer_step:
//            update(shard_view(p), g_r, m_r, v_r), all_gather_in_place(p)
//   stage 3  every program: all_gather(p_r) before each op that reads the parameter (its own
//            gather, freed after that op by the memory planner); @train_step as stage 2;
//            @optimizer_step: update(p_r, g_r, m_r, v_r)
//
// The global gradient norm sums the chunks' squared norms over the data axes. With P = 2 every
// reduced element is a + b as in plain data parallelism and the updates are elementwise, so the
// losses and parameters are bit-equal to it (clipping aside, whose norm is summed in another
// order).
//===----------------------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "dialects/Colossal/Programs.h"
#include "passes/Training/TrainUtils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/MapVector.h"

namespace colossal {
#define GEN_PASS_DEF_ZERO
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;

namespace {

/// One trainable parameter as @optimizer_step sees it.
struct Param {
  std::string name;
  Operation *update = nullptr; // its adamw/adam/sgd update
  BlockArgument p, g;          // @optimizer_step arguments
  SmallVector<BlockArgument, 2> states; // exp_avg, exp_avg_sq / momentum_buffer
  bool partitioned = false;
  int64_t dim = 0;               // the split dim: 0, or (stage 3) the first other one P divides
  RankedTensorType whole, chunk; // the local type and its chunk
};

/// Argument `i`'s sharding with the data axes appended to dim `dim`'s axes (the chunk is minor
/// to any tensor-parallel split of that dim).
ShardingAttr chunkSharding(func::FuncOp fn, unsigned i, int64_t dim, MeshOp mesh,
                           ArrayRef<StringAttr> data) {
  MLIRContext *ctx = fn.getContext();
  auto type = cast<RankedTensorType>(fn.getArgument(i).getType());
  SmallVector<DimShardingAttr> dims;
  SmallVector<StringAttr> partial;
  if (auto s = fn.getArgAttrOfType<ShardingAttr>(i, kShardingAttr)) {
    dims.assign(s.getDims().begin(), s.getDims().end());
    partial.assign(s.getPartial().begin(), s.getPartial().end());
  } else {
    dims.assign(type.getRank(), DimShardingAttr::get(ctx, {}, 1));
  }
  SmallVector<StringAttr> axes(dims[dim].getAxes().begin(), dims[dim].getAxes().end());
  axes.append(data.begin(), data.end());
  dims[dim] = DimShardingAttr::get(ctx, axes, 1);
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(ctx, mesh.getSymName()), dims, partial);
}

/// Gives argument `i` of `fn` parameter `q`'s chunk type and sharding.
void partitionArgument(func::FuncOp fn, unsigned i, const Param &q, MeshOp mesh,
                       ArrayRef<StringAttr> data) {
  fn.setArgAttr(i, kShardingAttr, chunkSharding(fn, i, q.dim, mesh, data));
  fn.getArgument(i).setType(q.chunk);
}

void refreshFunctionType(func::FuncOp fn) {
  fn.setType(FunctionType::get(fn.getContext(), fn.getBody().front().getArgumentTypes(),
                               fn.getFunctionType().getResults()));
}

/// The argument of `fn` marked `attr` = `name`, or a null argument.
BlockArgument argumentNamed(func::FuncOp fn, StringRef attr, StringRef name) {
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (auto a = fn.getArgAttrOfType<StringAttr>(i, attr); a && a.getValue() == name)
      return fn.getArgument(i);
  return {};
}

/// The module's data axes and the programs the pass rewrites.
struct ZeroContext {
  MeshOp mesh;
  SmallVector<StringAttr> data; // the mesh's data axes, in mesh order
  ArrayAttr axes;               // the same, as the collectives' attribute
  int64_t groupSize = 1;        // P: the product of their sizes
  int64_t stage = 0;
  func::FuncOp train, step;     // @train_step, @optimizer_step
  SmallVector<func::FuncOp> programs; // every program (stage 3 gathers in each)
};

/// The parameters @optimizer_step updates, in update order, each marked partitioned when its local
/// dim 0 divides into P chunks (and is one block). Errors name the update op.
FailureOr<SmallVector<Param>> collectParams(ZeroContext &z) {
  func::FuncOp step = z.step;
  auto stepArg = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner() == &step.getBody().front() ? arg : BlockArgument();
  };
  SmallVector<Param> params;
  WalkResult walk = step.walk([&](Operation *op) {
    if (!isa<AdamWUpdateOp, AdamUpdateOp, SgdUpdateOp>(op))
      return WalkResult::advance();
    Param q;
    q.update = op;
    q.p = stepArg(op->getOperand(0));
    q.g = stepArg(op->getOperand(1));
    if (auto sgd = dyn_cast<SgdUpdateOp>(op)) {
      if (sgd.getBuf())
        q.states.push_back(stepArg(sgd.getBuf()));
    } else {
      q.states = {stepArg(op->getOperand(2)), stepArg(op->getOperand(3))};
    }
    if (!q.p || !q.g || llvm::any_of(q.states, [](BlockArgument a) { return !a; })) {
      op->emitError("colossal-zero: the update's parameter, gradient and optimizer state must be "
                    "arguments of @")
          << step.getSymName();
      return WalkResult::interrupt();
    }
    auto name = step.getArgAttrOfType<StringAttr>(q.p.getArgNumber(), kParamAttr);
    if (!name) {
      op->emitError("colossal-zero: the updated tensor is not a ") << kParamAttr << " argument";
      return WalkResult::interrupt();
    }
    q.name = name.str();
    q.whole = cast<RankedTensorType>(q.p.getType());
    auto sharding = step.getArgAttrOfType<ShardingAttr>(q.p.getArgNumber(), kShardingAttr);
    auto splits = [&](int64_t d) {
      bool oneBlock = !sharding || sharding.getDims().empty() || sharding.getDims()[d].getBlocks() <= 1;
      return q.whole.getDimSize(d) > 0 && q.whole.getDimSize(d) % z.groupSize == 0 && oneBlock;
    };
    // Dim 0 keeps chunks contiguous, which stages 1 and 2 need (the update writes a view of the
    // full parameter). Stage 3 updates the chunk itself, so another dim will do (GPT-2's
    // 50257-row embedding splits by its columns).
    for (int64_t d = 0; d < q.whole.getRank() && !q.partitioned; ++d)
      if ((d == 0 || z.stage == 3) && splits(d)) {
        q.partitioned = true;
        q.dim = d;
      }
    if (q.partitioned) {
      SmallVector<int64_t> shape(q.whole.getShape());
      shape[q.dim] /= z.groupSize;
      q.chunk = RankedTensorType::get(shape, q.whole.getElementType());
    }
    params.push_back(std::move(q));
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  if (params.empty())
    return step.emitError("colossal-zero: @optimizer_step updates no parameter");
  return params;
}

/// The gradients' sum over the data axes. Stage 1 reduce-scatters the full accumulators at the
/// start of @optimizer_step; stages 2 and 3 reduce-scatter each microbatch's gradient in
/// @train_step into an accumulator that is a chunk. A parameter that is not partitioned keeps
/// plain data parallelism's all_reduce.
LogicalResult partitionGradients(ZeroContext &z, ArrayRef<Param> params, int64_t stage) {
  MLIRContext *ctx = z.step.getContext();
  OpBuilder b = OpBuilder::atBlockBegin(&z.step.getBody().front());
  for (const Param &q : params) {
    Location loc = NameLoc::get(StringAttr::get(ctx, q.name + ".grad"), z.step.getLoc());
    if (!q.partitioned) {
      AllReduceInPlaceOp::create(b, loc, ValueRange{q.g}, z.axes, b.getStringAttr("sum"));
      continue;
    }
    if (stage == 1) {
      ReduceScatterInPlaceOp::create(b, loc, ValueRange{q.g}, z.axes);
      continue;
    }
    BlockArgument acc = argumentNamed(z.train, kStateAttr, q.name + ".grad");
    if (!acc)
      return z.train.emitError("colossal-zero: @")
             << z.train.getSymName() << " has no accumulator '" << q.name << ".grad'";
    for (OpOperand &use : llvm::make_early_inc_range(acc.getUses())) {
      auto accumulate = dyn_cast<AccumulateGradOp>(use.getOwner());
      if (!accumulate || use.getOperandNumber() != 0)
        return use.getOwner()->emitError("colossal-zero: the accumulator '")
               << q.name << ".grad' is used by an op other than accumulate_grad";
      OpBuilder at(accumulate);
      Value chunk = ReduceScatterOp::create(at, accumulate.getLoc(), q.chunk, accumulate.getG(), z.axes,
                                            at.getI64IntegerAttr(q.dim), at.getStringAttr("sum"));
      accumulate.getGMutable().assign(chunk);
    }
    partitionArgument(z.train, acc.getArgNumber(), q, z.mesh, z.data);
    partitionArgument(z.step, q.g.getArgNumber(), q, z.mesh, z.data);
  }
  return success();
}

/// The global norm over chunks: sqrt(Σ_whole ‖g‖² + all_reduce_data(Σ_chunks ‖g_r‖²)).
void rewriteGlobalNorms(ZeroContext &z, MutableArrayRef<Param> params, int64_t stage) {
  SmallVector<GlobalNormOp> norms;
  z.step.walk([&](GlobalNormOp n) { norms.push_back(n); });
  llvm::DenseMap<Value, Param *> byGrad;
  for (Param &q : params)
    byGrad[q.g] = &q;
  for (GlobalNormOp norm : norms) {
    OpBuilder b(norm);
    Location loc = norm.getLoc();
    SmallVector<Value> whole, chunks;
    for (Value g : norm.getGrads()) {
      Param *q = byGrad.lookup(g);
      if (!q || !q->partitioned)
        whole.push_back(g);
      else
        chunks.push_back(stage == 1 ? ShardViewOp::create(b, loc, q->chunk, g, z.axes).getResult() : g);
    }
    if (chunks.empty())
      continue;
    auto scalar = cast<RankedTensorType>(norm.getNorm().getType());
    Value n = GlobalNormOp::create(b, loc, scalar, chunks);
    Value total = AllReduceOp::create(b, loc, scalar, MulOp::create(b, loc, n, n), z.axes,
                                      b.getStringAttr("sum"));
    if (!whole.empty()) {
      Value w = GlobalNormOp::create(b, loc, scalar, whole);
      total = AddOp::create(b, loc, MulOp::create(b, loc, w, w), total);
    }
    norm.getNorm().replaceAllUsesWith(SqrtOp::create(b, loc, scalar, total).getResult());
    norm.erase();
  }
}

/// Each rank updates its chunk of a partitioned parameter with its chunks of the gradient and of
/// the optimizer state (views of the full tensors under stages 1 and 2).
void rewriteUpdates(ZeroContext &z, ArrayRef<Param> params, int64_t stage) {
  for (const Param &q : params) {
    if (!q.partitioned)
      continue;
    OpBuilder b(q.update);
    Location loc = q.update->getLoc();
    Value p = stage == 3 ? Value(q.p) : ShardViewOp::create(b, loc, q.chunk, q.p, z.axes).getResult();
    Value g = stage == 1 ? ShardViewOp::create(b, loc, q.chunk, q.g, z.axes).getResult() : Value(q.g);
    q.update->setOperand(0, p);
    q.update->setOperand(1, g);
    for (BlockArgument s : q.states)
      partitionArgument(z.step, s.getArgNumber(), q, z.mesh, z.data);
  }
}

/// Stages 1 and 2: the updated chunks, gathered into the full parameters before the step returns.
void gatherUpdatedParams(ZeroContext &z, ArrayRef<Param> params) {
  MLIRContext *ctx = z.step.getContext();
  OpBuilder b(z.step.getBody().front().getTerminator());
  for (const Param &q : params)
    if (q.partitioned)
      AllGatherInPlaceOp::create(b, NameLoc::get(StringAttr::get(ctx, q.name), z.step.getLoc()),
                                 ValueRange{q.p}, z.axes);
}

/// Stage 3: the parameters are chunks in every program; each op that reads one reads its own
/// all_gather of it, placed just before the op (the update writes the chunk itself).
void gatherBeforeEachUse(ZeroContext &z, ArrayRef<Param> params) {
  MLIRContext *ctx = z.step.getContext();
  for (const Param &q : params) {
    if (!q.partitioned)
      continue;
    for (func::FuncOp fn : z.programs) {
      BlockArgument arg = fn == z.step ? q.p : argumentNamed(fn, kParamAttr, q.name);
      if (!arg)
        continue;
      llvm::MapVector<Operation *, SmallVector<unsigned, 2>> readers;
      for (OpOperand &use : arg.getUses())
        if (use.getOwner() != q.update)
          readers[use.getOwner()].push_back(use.getOperandNumber());
      for (auto &[reader, operands] : readers) {
        OpBuilder at(reader);
        Value full = AllGatherOp::create(at, NameLoc::get(StringAttr::get(ctx, q.name), reader->getLoc()),
                                         q.whole, arg, z.axes, at.getI64IntegerAttr(q.dim));
        for (unsigned i : operands)
          reader->setOperand(i, full);
      }
      partitionArgument(fn, arg.getArgNumber(), q, z.mesh, z.data);
    }
  }
}

struct ZeroPass : colossal::impl::ZeroBase<ZeroPass> {
  using ZeroBase::ZeroBase;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    if (stage < 0 || stage > 3)
      return module.emitError("colossal-zero: stage must be 0, 1, 2 or 3, got ") << int64_t(stage);
    ZeroContext z;
    z.stage = stage;
    z.mesh = lookupMesh(module);
    if (stage == 0 || !z.mesh)
      return success();
    SmallVector<Attribute> dataAttrs;
    for (int i : z.mesh.axesWithRole(AxisRole::Data)) {
      z.data.push_back(cast<StringAttr>(z.mesh.getAxes()[i]));
      dataAttrs.push_back(z.mesh.getAxes()[i]);
      z.groupSize *= z.mesh.getShape()[i];
    }
    if (z.groupSize == 1)
      return success();
    z.axes = ArrayAttr::get(module.getContext(), dataAttrs);
    z.step = lookupProgram(module, ProgramRole::OptimizerStep);
    z.train = lookupProgram(module, ProgramRole::TrainStep);
    if (!z.step || !z.train)
      return module.emitError("colossal-zero needs @train_step and @optimizer_step (run "
                              "colossal-optimizer first)");
    for (auto fn : module.getOps<func::FuncOp>())
      if (programRole(fn))
        z.programs.push_back(fn);

    FailureOr<SmallVector<Param>> params = collectParams(z);
    if (failed(params))
      return failure();
    // A parameter left whole is said, never silent (docs/parallelism.md "ZeRO").
    SmallVector<std::string> whole;
    int64_t wholeElements = 0, elements = 0;
    for (const Param &q : *params) {
      elements += q.whole.getNumElements();
      if (!q.partitioned) {
        whole.push_back(q.name);
        wholeElements += q.whole.getNumElements();
      }
    }
    if (!whole.empty()) {
      std::string names;
      for (size_t i = 0; i < whole.size() && i < 8; ++i)
        names += (i ? ", " : "") + whole[i];
      if (whole.size() > 8)
        names += ", ... (" + std::to_string(whole.size() - 8) + " more)";
      module.emitWarning("colossal-zero: stage ")
          << int64_t(stage) << ": " << whole.size() << " of " << params->size()
          << " parameters stay whole on every rank (" << wholeElements << " of " << elements
          << " local elements), because "
          << (stage == 3 ? "no dim of theirs divides into " : "their dim 0 does not divide into ")
          << z.groupSize << " chunks"
          << (stage == 3 ? "" : " (stages 1 and 2 split dim 0 only; stage 3 splits another dim too)")
          << ": " << names;
    }
    training::updateTrainConfig(module, {NamedAttribute(StringAttr::get(module.getContext(), "zero_stage"),
                                              IntegerAttr::get(IntegerType::get(module.getContext(), 64),
                                                               int64_t(stage)))});
    if (failed(partitionGradients(z, *params, stage)))
      return failure();
    rewriteGlobalNorms(z, *params, stage);
    rewriteUpdates(z, *params, stage);
    if (stage < 3)
      gatherUpdatedParams(z, *params);
    else
      gatherBeforeEachUse(z, *params);
    for (func::FuncOp fn : z.programs)
      refreshFunctionType(fn);
    return success();
  }
};

} // namespace

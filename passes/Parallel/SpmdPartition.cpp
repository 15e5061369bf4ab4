//===- SpmdPartition.cpp - colossal-spmd-partition: one program → per-rank programs ---===//
//
// docs/parallelism.md "Tensor parallelism". Two phases over the module:
//
// 1. Strategy: parameters get shardings. Hints from the spec first; then the walk of the primary
//    function (@train_step, else @forward) decides each remaining parameter at its first use by
//    the rule of the op that reads it (Megatron-LM's choice, Shoeybi et al. 2019 §3, found on the
//    graph rather than by module names): a matmul weight whose input is not split on K is
//    column-parallel (its columns over `tp`; k blocks when the product feeds a k-way equal split,
//    a fused QKV), one whose input is split on K is row-parallel; a gather table read with token
//    ids is vocab-parallel; everything else is replicated.
// 2. Partitioning: every function is rewritten, op by op in program order, into the per-rank
//    program. Each op's rule maps its operands' shardings to the shardings it needs and those of
//    its results (the GSPMD recipe, Xu et al. 2021); an operand whose sharding differs is
//    resharded with collectives (all_reduce or reduce_scatter for a partial sum, all_gather for a
//    split that must go, shard_slice — no communication — for a split that must appear). Result
//    types become local shapes. Function results are made whole.
//
// Data parallelism (the mesh's `data` axes) is not handled here: colossal-split-batch splits the
// batch and colossal-data-parallel sums the gradients.
//===----------------------------------------------------------------------------------===//
#include "passes/Parallel/Partitioner.h"
#include "dialects/Colossal/Programs.h"
#include "passes/Passes.h"

#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringExtras.h"

namespace colossal {
#define GEN_PASS_DEF_SPMDPARTITION
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::spmd;

namespace {

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct SpmdPartitionPass : colossal::impl::SpmdPartitionBase<SpmdPartitionPass> {
  using SpmdPartitionBase::SpmdPartitionBase;

  LogicalResult parseOptions(Mesh &mesh, Strategy &strategy, ModuleOp module) {
    MeshOp meshOp = lookupMesh(module);
    if (!meshOp)
      return module.emitError("colossal-spmd-partition needs the module's colossal.mesh (run "
                              "colossal-define-mesh first)");
    mesh = Mesh::of(meshOp);
    auto axes = [&](AxisRole role) { return Axes(meshOp.axesWithRole(role)); };
    strategy.style = style;
    strategy.sequenceParallel = sequenceParallel;
    if (style == "1d") {
      strategy.tp = axes(AxisRole::Tensor);
      if (strategy.tp.size() > 1)
        return module.emitError("colossal-spmd-partition: style 1d splits over one tensor axis; "
                                "the mesh has ")
               << strategy.tp.size();
    } else if (style == "2d" || style == "2.5d" || style == "3d") {
      strategy.row = axes(AxisRole::GridRow);
      strategy.col = axes(AxisRole::GridCol);
      strategy.depth = axes(AxisRole::GridDepth);
      if (strategy.row.size() != 1 || strategy.col.size() != 1 ||
          strategy.depth.size() != (style == "2d" ? 0u : 1u))
        return module.emitError("colossal-spmd-partition: style ")
               << style << " needs one grid_row and one grid_col axis"
               << (style == "2d" ? "" : " and one grid_depth axis") << " on the mesh";
      // ColossalAI's layouts: activations [batch over row (2.5d: depth x row; 3d: depth),
      // hidden over col], weights [K over row, N over col] (3d: alternating row/col).
      if (style == "2d")
        strategy.batch = strategy.row;
      else if (style == "2.5d")
        strategy.batch = {strategy.depth[0], strategy.row[0]};
      else
        strategy.batch = strategy.depth;
    } else {
      return module.emitError("colossal-spmd-partition: style must be 1d, 2d, 2.5d or 3d, got '")
             << style << "'";
    }
    // Hints: REGEX=DIMS entries (split at the last '=', so a regex may hold '=' and ';'), DIMS one
    // entry per dim separated by '/', '-' for whole and axes joined by '*'.
    for (StringRef hint : hints) {
      if (hint.trim().empty())
        continue;
      auto [pattern, dimsText] = hint.rsplit('=');
      auto h = std::make_unique<Strategy::Hint>();
      h->pattern = pattern.str();
      h->regex = llvm::Regex(("^(" + pattern + ")$").str());
      std::string err;
      if (!h->regex.isValid(err))
        return module.emitError("parallel.tensor.hints: '")
               << pattern << "' is not a regex: " << err;
      for (StringRef dim : llvm::split(dimsText, '/')) {
        Axes axes;
        dim = dim.trim();
        if (dim != "-" && dim != "")
          for (StringRef a : llvm::split(dim, '*')) {
            int idx = mesh.find(a.trim());
            if (idx < 0)
              return module.emitError("parallel.tensor.hints: '")
                     << pattern << "': '" << a << "' is not a mesh axis";
            for (const Axes &d : h->dims)
              if (llvm::is_contained(d, idx))
                return module.emitError("parallel.tensor.hints: '")
                       << pattern << "' names mesh axis '" << a.trim() << "' twice";
            if (llvm::is_contained(axes, idx))
              return module.emitError("parallel.tensor.hints: '")
                     << pattern << "' names mesh axis '" << a.trim() << "' twice";
            axes.push_back(idx);
          }
        h->dims.push_back(axes);
      }
      strategy.hints.push_back(std::move(h));
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    Mesh mesh;
    Strategy strategy;
    if (failed(parseOptions(mesh, strategy, module)))
      return signalPassFailure();
    // Data axes are the batch split's (colossal-split-batch); nothing to do without another.
    SmallVector<int> dataAxes = lookupMesh(module).axesWithRole(AxisRole::Data);
    bool anySplit = false;
    for (size_t i = 0; i < mesh.sizes.size(); ++i)
      anySplit |= mesh.sizes[i] > 1 && !llvm::is_contained(dataAxes, static_cast<int>(i));
    if (!anySplit)
      return;

    // Phase 1: hints, then the primary function's walk decides the remaining parameters.
    llvm::StringMap<Sharding> decided;
    func::FuncOp primary = lookupProgram(module, ProgramRole::TrainStep);
    if (!primary)
      primary = lookupProgram(module, ProgramRole::Forward);
    // Mode generate: the step programs differ only in their token count; any one decides.
    if (!primary)
      primary = lookupProgram(module, ProgramRole::Generate);
    if (!primary) {
      module.emitError("colossal-spmd-partition: the module has neither a train_step, a forward "
                       "nor a generate program");
      return signalPassFailure();
    }
    for (unsigned i = 0; i < primary.getNumArguments(); ++i) {
      auto name = primary.getArgAttrOfType<StringAttr>(i, kParamAttr);
      if (!name)
        continue;
      auto shape = cast<RankedTensorType>(primary.getArgument(i).getType()).getShape();
      // DESIGN.md: a regex matches the parameter's name or the name of a node that reads it
      // (torch renames transposed weights `onnx::MatMul_N`; the consumer keeps the module path).
      SmallVector<std::string> names = {name.getValue().str()};
      for (Operation *user : primary.getArgument(i).getUsers())
        if (auto loc = dyn_cast<NameLoc>(user->getLoc()))
          names.push_back(loc.getName().str());
      const Strategy::Hint *matched = nullptr;
      for (auto &h : strategy.hints) {
        if (llvm::none_of(names, [&](const std::string &n) { return h->regex.match(n); }))
          continue;
        if (matched) {
          module.emitError("parallel.tensor.hints: parameter '")
              << name.getValue() << "' matches both '" << matched->pattern << "' and '"
              << h->pattern << "'; make the regexes exclusive";
          return signalPassFailure();
        }
        matched = h.get();
        h->used = true;
        if (h->dims.size() != shape.size()) {
          module.emitError("parallel.tensor.hints: '")
              << h->pattern << "' gives " << h->dims.size() << " dims but parameter '"
              << name.getValue() << "' has shape " << shapeStr(shape);
          return signalPassFailure();
        }
        Sharding s = Sharding::replicated(shape.size());
        s.dims.assign(h->dims.begin(), h->dims.end());
        if (!divides(shape, s, mesh)) {
          module.emitError("parallel.tensor.hints: '")
              << h->pattern << "' splits parameter '" << name.getValue() << "' " << shapeStr(shape)
              << " as " << s.str(mesh) << ", which does not divide its shape";
          return signalPassFailure();
        }
        decided[name.getValue()] = s;
      }
    }
    for (auto &h : strategy.hints)
      if (!h->used) {
        module.emitError("parallel.tensor.hints: '")
            << h->pattern << "' matches no parameter of the model";
        return signalPassFailure();
      }
    {
      auto clone = cast<func::FuncOp>(primary->clone());
      Partitioner deciding(mesh, strategy, decided, /*deciding=*/true);
      LogicalResult ok = deciding.run(clone);
      clone->erase();
      if (failed(ok))
        return signalPassFailure();
    }
    if (stage != "strategy" && stage != "propagate" && stage != "partition") {
      module.emitError(
          "colossal-spmd-partition: stage must be strategy, propagate or partition, got '")
          << stage << "'";
      return signalPassFailure();
    }
    if (stage != "partition") {
      for (auto f : module.getOps<func::FuncOp>()) {
        // Parameters (and their states) with their shardings; the program stays whole.
        for (unsigned i = 0; i < f.getNumArguments(); ++i) {
          auto name = f.getArgAttrOfType<StringAttr>(i, kParamAttr);
          if (!name || !decided.count(name.getValue()))
            continue;
          f.setArgAttr(i, kShardingAttr, decided[name.getValue()].toAttr(mesh));
        }
        if (stage == "strategy")
          continue;
        std::vector<Attribute> trace;
        auto clone = cast<func::FuncOp>(f->clone());
        Partitioner p(mesh, strategy, decided, /*deciding=*/false);
        p.setTrace(&trace);
        LogicalResult ok = p.run(clone);
        clone->erase();
        if (failed(ok))
          return signalPassFailure();
        size_t i = 0;
        for (Operation &op : f.getBody().front().without_terminator())
          if (i < trace.size())
            op.setAttr(kShardingAttr, trace[i++]);
      }
      return;
    }
    // Phase 2: partition every function with the decided shardings.
    for (auto f : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      Partitioner partitioner(mesh, strategy, decided, /*deciding=*/false);
      if (failed(partitioner.run(f)))
        return signalPassFailure();
    }
  }
};

} // namespace

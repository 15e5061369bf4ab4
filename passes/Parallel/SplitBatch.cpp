//===- SplitBatch.cpp - colossal-split-batch: one row block of the global batch ---===//
//
// Passes.td "SplitBatch"; docs/parallelism.md "Data parallelism". The model is imported once, at
// the global batch B (the spec's `inputs`, or the batch the model fixes). Data parallelism (dp
// ranks) and gradient accumulation (grad_accum microbatches) both run a program of B / (dp ·
// grad_accum) rows; this pass derives it from @forward with the SPMD partitioner: every input is
// split along dim 0 over a mesh axis of dp · grad_accum row blocks and each op's sharding rule
// carries the split (reshape groups, broadcasting, attention's batch dim, ...). A rule that would
// have to communicate across row blocks means the model mixes rows of its batch, which a row
// block cannot compute alone: that is the error. A constant with a batch dim (a mask or position
// table folded at B) is resliced when its row blocks are equal; otherwise it is an error too.
//===----------------------------------------------------------------------------------===//
#include "passes/Parallel/Partitioner.h"
#include "dialects/Colossal/Programs.h"
#include "passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace colossal {
#define GEN_PASS_DEF_SPLITBATCH
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::spmd;

namespace {

/// The mesh axis of row blocks. It lives only inside this pass: every collective over it is
/// either folded (constants) or reported, so the name never reaches the output IR.
constexpr llvm::StringLiteral kRowBlockAxis = "row_blocks";

struct SplitBatchPass : colossal::impl::SplitBatchBase<SplitBatchPass> {
  using SplitBatchBase::SplitBatchBase;

  int64_t dp = 1; // the product of the mesh's data axes
  SmallVector<Attribute> dataAxes; // their names
  /// Training under data parallelism alone (no grad_accum): a sum over the rows of the batch (a
  /// training-mode batch norm's statistics) becomes an all_reduce over the data axes, so every
  /// rank computes the statistics of the global batch (SyncBatchNorm); the autodiff
  /// differentiates it (the all_reduce of the cotangent).
  bool syncSums = false;

  /// The factors that split the batch, for messages: "dp=2 x train.grad_accum=3", "dp=2" or
  /// "train.grad_accum=3".
  std::string ways() const {
    std::string s;
    if (dp > 1 || gradAccum == 1)
      s = "dp=" + std::to_string(dp);
    if (gradAccum > 1)
      s += (s.empty() ? "" : " x ") + std::string(accumKey) + "=" + std::to_string(gradAccum);
    return s;
  }

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  /// The reduce_sum or reduce_mean whose row-block partial `v` is, through reshapes and scalings
  /// by constants (a batch norm's statistics and the running-statistic updates made of them), or
  /// null.
  static Operation *rowReduction(Value v) {
    Operation *op = v.getDefiningOp();
    while (op && !isa<colossal::ReduceSumOp, colossal::ReduceMeanOp>(op)) {
      if (auto reshape = dyn_cast<colossal::ReshapeOp>(op)) {
        op = reshape.getX().getDefiningOp();
        continue;
      }
      if (!isa<colossal::MulOp, colossal::DivOp>(op))
        return nullptr;
      auto isConstant = [](Value x) { return isa_and_nonnull<colossal::ConstantOp>(x.getDefiningOp()); };
      Value lhs = op->getOperand(0), rhs = op->getOperand(1);
      if (isConstant(rhs))
        op = lhs.getDefiningOp();
      else if (isa<colossal::MulOp>(op) && isConstant(lhs))
        op = rhs.getDefiningOp();
      else
        return nullptr;
    }
    return op;
  }

  LogicalResult checkInputs(func::FuncOp f, int64_t blocks) {
    // Input errors name the model file (the importer records it on the module).
    std::string file;
    if (auto source = getOperation()->getAttrOfType<StringAttr>(kSourceAttr))
      file = source.str() + ": ";
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto name = f.getArgAttrOfType<StringAttr>(i, kInputAttr);
      if (!name)
        continue;
      auto type = tensorType(f.getArgument(i));
      if (type.getRank() == 0)
        return f.emitError() << file << "input '" << name.getValue()
                             << "' is a scalar: it has no batch dim (dim 0) to split over "
                             << ways();
      if (type.getDimSize(0) % blocks != 0)
        return f.emitError() << file << "input '" << name.getValue() << "': the batch (dim 0 = "
                             << type.getDimSize(0) << ") is not divisible by " << ways()
                             << (dp > 1 && gradAccum > 1 ? " = " + std::to_string(blocks) : "")
                             << " row blocks";
    }
    return success();
  }

  /// Folds the row-block slices of constants; any other op over the row-block axis is an error.
  LogicalResult finish(func::FuncOp f, int64_t blocks) {
    WalkResult walk = f.walk([&](Operation *op) -> WalkResult {
      if (!isCollectiveOver(op, kRowBlockAxis))
        return WalkResult::advance();
      if (auto sum = dyn_cast<colossal::AllReduceOp>(op); sum && syncSums && sum.getReduction() == "sum") {
        // A row block's sum adds up over the ranks; its mean (of B/dp rows) is a dp-th of the
        // global batch's mean.
        Operation *producer = rowReduction(sum.getX());
        const bool mean = isa_and_nonnull<colossal::ReduceMeanOp>(producer);
        if (mean || isa_and_nonnull<colossal::ReduceSumOp>(producer)) {
          sum.setAxesAttr(ArrayAttr::get(op->getContext(), dataAxes));
          if (mean) {
            OpBuilder b(op->getContext());
            b.setInsertionPointAfter(op);
            auto et = tensorType(sum.getY()).getElementType();
            Value scale = colossal::ConstantOp::create(
                b, op->getLoc(),
                cast<ElementsAttr>(DenseElementsAttr::get(RankedTensorType::get({}, et),
                                                          b.getFloatAttr(et, 1.0 / double(dp)))));
            Value scaled = colossal::MulOp::create(b, op->getLoc(), sum.getY(), scale);
            sum.getY().replaceAllUsesExcept(scaled, scaled.getDefiningOp());
          }
          return WalkResult::advance();
        }
      }
      if (auto slice = dyn_cast<colossal::ShardSliceOp>(op)) {
        // A broadcast along the batch (Expand of [1, ...] to [B, ...]) is the same broadcast to
        // the row block's rows.
        if (shrinkBroadcastCut(slice))
          return WalkResult::advance();
        auto cst = slice.getX().getDefiningOp<colossal::ConstantOp>();
        if (ElementsAttr dense = cst ? cst.getValue() : ElementsAttr()) {
          auto local = cast<RankedTensorType>(slice.getType());
          if (auto block = equalRowBlock(dense, slice.getDim(), blocks, local)) {
            OpBuilder b(slice);
            Value v = colossal::ConstantOp::create(b, slice.getLoc(), cast<ElementsAttr>(*block));
            slice.replaceAllUsesWith(v);
            slice.erase();
            return WalkResult::advance();
          }
          op->emitError() << "a constant with the batch dim (" << tensorType(slice.getX())
                          << ") differs between row blocks, so the model cannot be split over "
                          << ways();
          return WalkResult::interrupt();
        }
      }
      // Blame the op that needs the whole batch (the consumer of a gather), or the one that
      // summed over rows (the producer of a partial sum).
      Operation *blame = collectiveBlame(op);
      if (blame == op && !isa<colossal::AllReduceOp, colossal::ReduceScatterOp>(op) &&
          op->getNumResults() == 1 && !op->getResult(0).use_empty()) {
        // A model output whose rows are not along dim 0: the runs' outputs are gathered there.
        OpOperand &use = *op->getResult(0).getUses().begin();
        auto name = f.getResultAttrOfType<StringAttr>(use.getOperandNumber(), kOutputAttr);
        auto source = getOperation()->getAttrOfType<StringAttr>(kSourceAttr);
        f.emitError() << (source ? source.str() + ": " : std::string()) << "output '"
                      << (name ? name.getValue() : StringRef("?"))
                      << "' does not keep the batch in dim 0 (its rows would need "
                      << op->getName().stripDialect()
                      << " across row blocks), so the model cannot be split over " << ways()
                      << "; run it with dp=1 and " << std::string(accumKey) << "=1";
        return WalkResult::interrupt();
      }
      blame->emitError() << "this op mixes rows of the batch (splitting it would need "
                         << op->getName().stripDialect()
                         << " across row blocks), so the model cannot be split over " << ways()
                         << "; run it with dp=1 and " << std::string(accumKey) << "=1";
      return WalkResult::interrupt();
    });
    if (walk.wasInterrupted())
      return failure();
    // The whole-batch expands and constants the row block no longer reads.
    eraseDeadOps(f);
    return success();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    if (gradAccum < 1)
      return module.emitError() << "colossal-split-batch: grad-accum must be >= 1, got "
                                << gradAccum;
    dp = 1;
    dataAxes.clear();
    if (MeshOp mesh = lookupMesh(module))
      for (int i : mesh.axesWithRole(AxisRole::Data)) {
        dp *= mesh.getShape()[i];
        dataAxes.push_back(mesh.getAxes()[i]);
      }
    auto forward = lookupProgram(module, ProgramRole::Forward);
    if (!forward)
      return module.emitError("colossal-split-batch needs the forward program (the imported model)");
    std::optional<ProgramRole> role = parseProgramRole(into);
    if (role != ProgramRole::Microbatch && role != ProgramRole::Forward)
      return module.emitError() << "colossal-split-batch: into must be microbatch or forward, got '"
                                << into << "'";
    const int64_t blocks = dp * gradAccum;
    syncSums = role == ProgramRole::Microbatch && gradAccum == 1 && dp > 1;
    func::FuncOp target = forward;
    if (role == ProgramRole::Microbatch) {
      if (lookupProgram(module, ProgramRole::Microbatch) ||
          module.lookupSymbol(programSymbol(ProgramRole::Microbatch)))
        return module.emitError() << "colossal-split-batch: the module already has a microbatch program";
      target = cast<func::FuncOp>(forward->clone());
      target.setName(programSymbol(ProgramRole::Microbatch));
      setProgramRole(target, ProgramRole::Microbatch);
      module.push_back(target);
    }
    if (blocks == 1)
      return success();
    if (failed(checkInputs(target, blocks)))
      return failure();

    Mesh mesh;
    mesh.context = module.getContext();
    mesh.symbol = kRowBlockAxis.str();
    mesh.names.push_back(kRowBlockAxis.str());
    mesh.sizes.push_back(blocks);
    Strategy strategy;
    strategy.localBatch = {0};
    for (unsigned i = 0; i < target.getNumArguments(); ++i)
      if (target.getArgAttr(i, kInputAttr)) {
        strategy.localBatchRows = tensorType(target.getArgument(i)).getDimSize(0);
        break;
      }
    strategy.localPartialResults = role == ProgramRole::Microbatch;
    strategy.noRuleAdvice = "it has no row-wise rule, so the model cannot be split over " + ways() +
                            "; run it with dp=1 and " + std::string(accumKey) + "=1";
    llvm::StringMap<Sharding> decided; // every parameter replicated
    SmallVector<Type> globalResults(target.getResultTypes());
    Partitioner partitioner(mesh, strategy, decided, /*deciding=*/false);
    if (failed(partitioner.run(target)))
      return failure();
    // Inference: the runtime concatenates every output's dim 0 over the data-parallel ranks, so
    // an output that the row blocks do not split (it does not depend on the batch rows: every
    // rank computes all of it) would come back repeated. That is an error, not a wrong shape.
    if (role == ProgramRole::Forward)
      for (auto [i, global] : llvm::enumerate(globalResults)) {
        auto before = cast<RankedTensorType>(global);
        auto after = cast<RankedTensorType>(target.getResultTypes()[i]);
        if (before.getRank() >= 1 && after.getDimSize(0) * blocks == before.getDimSize(0))
          continue;
        auto name = target.getResultAttrOfType<StringAttr>(i, kOutputAttr);
        auto source = module->getAttrOfType<StringAttr>(kSourceAttr);
        return target.emitError()
               << (source ? source.str() + ": " : std::string()) << "output '"
               << (name ? name.getValue() : StringRef("?")) << "' (" << before
               << ") does not depend on the batch rows: under " << ways()
               << " every rank would compute all of it, and a data-parallel plan concatenates "
                  "each output's dim 0 (the batch) over the ranks; make it an output with the "
                  "batch in dim 0, or run the model with dp=1";
      }
    return finish(target, blocks);
  }
};

} // namespace

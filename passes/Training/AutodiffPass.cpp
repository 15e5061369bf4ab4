//===- AutodiffPass.cpp - colossal-autodiff: gradients and accumulators in @train_step ---===//
//
// docs/training.md "Compiler pipeline". Chooses the trainable parameters, asks the autodiff
// driver (passes/Autodiff/Autodiff.h) for their gradients, and accumulates each into its
// `<p>.grad` state with scale 1/grad_accum.
//===------------------------------------------------------------------------------------===//
#include "passes/Autodiff/Autodiff.h"
#include "dialects/Colossal/Programs.h"
#include "passes/Passes.h"
#include "passes/Training/TrainUtils.h"

#include "dialects/Colossal/VJP.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace colossal {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::training;

namespace {

/// The values `loss` depends on (its backward slice, block arguments included).
llvm::DenseSet<Value> valuesReaching(Value loss) {
  llvm::DenseSet<Value> seen;
  SmallVector<Value> work = {loss};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (Operation *def = v.getDefiningOp())
      for (Value operand : def->getOperands())
        work.push_back(operand);
  }
  return seen;
}

/// "no trainable parameter reaches the loss (P parameters, F frozen)", and why: the importer's
/// record of the weight-like tensors it kept as constants (kConstantWeightsAttr), the first few of
/// them named with their reason.
LogicalResult noTrainableParameter(ModuleOp module, unsigned numParams, size_t numFrozen) {
  InFlightDiagnostic diag = module.emitError()
                            << "no trainable parameter reaches the loss (" << numParams
                            << " parameters, " << numFrozen << " frozen)";
  auto constants = module->getAttrOfType<ArrayAttr>(kConstantWeightsAttr);
  if (!constants)
    return diag;
  SmallVector<DictionaryAttr> floats;
  for (Attribute a : constants) {
    auto row = llvm::dyn_cast<DictionaryAttr>(a);
    auto type = row ? row.getAs<TypeAttr>("type") : TypeAttr();
    if (type && llvm::isa<FloatType>(llvm::cast<ShapedType>(type.getValue()).getElementType()))
      floats.push_back(row);
  }
  if (floats.empty()) {
    diag << "; the model has no float initializer or Constant that a node reads as a weight";
    return diag;
  }
  diag << "; " << floats.size() << " float tensors stay constants";
  for (size_t i = 0; i < floats.size() && i < 3; ++i)
    diag << (i ? ", " : ": ") << "'" << floats[i].getAs<StringAttr>("name").getValue() << "' ("
         << floats[i].getAs<StringAttr>("why").getValue() << ")";
  if (floats.size() > 3)
    diag << ", ...";
  diag << " (docs/training.md \"Which initializers train\"; --report lists them all)";
  return diag;
}

struct AutodiffPass : colossal::impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    auto trainStep = lookupProgram(module, ProgramRole::TrainStep);
    if (!trainStep)
      return module.emitError("colossal-autodiff needs @train_step (run colossal-append-loss "
                              "first)");
    auto forward = lookupProgram(module, ProgramRole::Forward);
    int64_t gradAccum = this->gradAccum;
    if (gradAccum < 1)
      return module.emitError() << "colossal-autodiff: grad-accum must be >= 1, got " << gradAccum;

    // Rebatching: @train_step takes B / grad_accum rows (colossal-append-loss built it from the
    // microbatch import).
    DictionaryAttr config = trainConfig(module);
    auto tokens = config.getAs<StringAttr>("tokens_input");
    auto globalBatch = config.getAs<IntegerAttr>("global_batch");
    if (!tokens || !globalBatch)
      return module.emitError("colossal-autodiff: the module's colossal.train lacks tokens_input "
                              "or global_batch (run colossal-append-loss first)");
    int64_t batch = globalBatch.getInt();
    if (batch % gradAccum != 0)
      return module.emitError() << "the global batch " << batch
                                << " is not divisible by train.grad_accum " << gradAccum;
    // train.inputs: the rows of the first data input (colossal-append-loss checked they agree).
    if (tokens.getValue().empty())
      if (auto data = config.getAs<ArrayAttr>("data_inputs"); data && !data.empty())
        tokens = llvm::dyn_cast<StringAttr>(data[0]);
    if (!tokens)
      return module.emitError("colossal-autodiff: data_inputs must be an array of strings");
    auto tokensArg = findArg(trainStep, kInputAttr, tokens.getValue());
    if (!tokensArg)
      return module.emitError() << "@train_step has no input '" << tokens.getValue() << "'";
    int64_t rows =
        llvm::cast<RankedTensorType>(trainStep.getArgument(*tokensArg).getType()).getDimSize(0);
    if (rows * gradAccum != batch)
      return module.emitError()
             << "@train_step takes " << rows << " rows of '" << tokens.getValue()
             << "', but a global batch of " << batch << " in " << gradAccum
             << " microbatches needs " << batch / gradAccum
             << " (run colossal-split-batch before colossal-append-loss to build the microbatch "
                "program @" << programSymbol(ProgramRole::Microbatch) << ", as colossal-opt does in train mode)";

    Block &body = trainStep.getBody().front();
    Operation *ret = body.getTerminator();
    if (ret->getNumOperands() != 1 ||
        llvm::cast<RankedTensorType>(ret->getOperand(0).getType()).getRank() != 0)
      return module.emitError("colossal-autodiff: @train_step must return the scalar loss alone");
    Value loss = ret->getOperand(0);

    // Trainable: float parameters that reach the loss, minus `frozen`.
    auto frozenPatterns = ParamPatterns::compile(module, "train.frozen", frozen);
    if (failed(frozenPatterns))
      return failure();
    llvm::DenseSet<Value> reaching = valuesReaching(loss);
    SmallVector<unsigned> trainable;
    SmallVector<Attribute> trainableNames, frozenNames;
    unsigned numParams = 0, lastParam = 0;
    for (unsigned i = 0; i < trainStep.getNumArguments(); ++i) {
      StringRef name = argMarker(trainStep, i, kParamAttr);
      if (name.empty())
        continue;
      ++numParams;
      lastParam = i;
      bool isFrozen = frozenPatterns->matches(forward, name);
      auto type = llvm::cast<RankedTensorType>(trainStep.getArgument(i).getType());
      if (isFrozen)
        frozenNames.push_back(StringAttr::get(ctx, name));
      else if (llvm::isa<FloatType>(type.getElementType()) &&
               reaching.contains(trainStep.getArgument(i))) {
        trainable.push_back(i);
        trainableNames.push_back(StringAttr::get(ctx, name));
      }
    }
    if (failed(frozenPatterns->checkAllUsed(module)))
      return failure();
    if (trainable.empty())
      return noTrainableParameter(module, numParams, frozenNames.size());

    // One accumulator argument per trainable parameter, right after the last parameter.
    SmallVector<Value> params;
    for (unsigned i : trainable)
      params.push_back(trainStep.getArgument(i));
    SmallVector<unsigned> where(trainable.size(), lastParam + 1);
    SmallVector<Type> types;
    SmallVector<DictionaryAttr> attrs;
    SmallVector<Location> locs;
    for (auto [i, name] : llvm::zip(trainable, trainableNames)) {
      std::string state = (llvm::cast<StringAttr>(name).getValue() + ".grad").str();
      types.push_back(trainStep.getArgument(i).getType());
      attrs.push_back(DictionaryAttr::get(
          ctx, {NamedAttribute(StringAttr::get(ctx, kStateAttr), StringAttr::get(ctx, state))}));
      locs.push_back(NameLoc::get(StringAttr::get(ctx, state)));
    }
    if (failed(trainStep.insertArguments(where, types, attrs, locs)))
      return module.emitError("colossal-autodiff: cannot add the gradient accumulators");

    OpBuilder b(ret);
    Location loc = NameLoc::get(StringAttr::get(ctx, "loss"), module.getLoc());
    Value seed;
    if (lossScaleInitial > 0) {
      // Dynamic loss scaling: the backward pass starts from d(scale·loss)/dloss = scale, an
      // input the runtime sets each step (docs/training.md "Loss scaling").
      double initial = lossScaleInitial, growth = lossScaleGrowthFactor;
      double backoff = lossScaleBackoffFactor, minimum = lossScaleMin;
      if (!(growth > 1) || !(backoff > 0 && backoff < 1) || lossScaleGrowthInterval < 1 ||
          !(minimum > 0 && minimum <= initial))
        return module.emitError("colossal-autodiff: loss scaling needs growth-factor > 1, "
                                "backoff-factor in (0, 1), growth-interval >= 1 and "
                                "0 < min <= initial; got ")
               << growth << ", " << backoff << ", " << int64_t(lossScaleGrowthInterval) << ", "
               << minimum << " (initial " << initial << ")";
      auto scalarF32 = RankedTensorType::get({}, Float32Type::get(ctx));
      if (loss.getType() != scalarF32)
        return module.emitError("colossal-autodiff: loss scaling needs a tensor<f32> loss, got ")
               << loss.getType();
      unsigned at = trainStep.getNumArguments();
      if (failed(trainStep.insertArgument(
              at, scalarF32,
              DictionaryAttr::get(ctx, {NamedAttribute(StringAttr::get(ctx, kInputAttr),
                                                       StringAttr::get(ctx, "loss_scale"))}),
              NameLoc::get(StringAttr::get(ctx, "loss_scale")))))
        return module.emitError("colossal-autodiff: cannot add the loss_scale input");
      seed = trainStep.getArgument(at);
      updateTrainConfig(module,
                        {b.getNamedAttr("loss_scale_initial", b.getF64FloatAttr(initial)),
                         b.getNamedAttr("loss_scale_growth_factor", b.getF64FloatAttr(growth)),
                         b.getNamedAttr("loss_scale_backoff_factor", b.getF64FloatAttr(backoff)),
                         b.getNamedAttr("loss_scale_growth_interval",
                                        b.getI64IntegerAttr(lossScaleGrowthInterval)),
                         b.getNamedAttr("loss_scale_min", b.getF64FloatAttr(minimum))});
    } else {
      seed = splatConstant(b, loc, llvm::cast<RankedTensorType>(loss.getType()), 1.0);
    }
    auto grads = buildGradients(trainStep, loss, seed, params);
    if (failed(grads))
      return failure();
    // Each gradient is accumulated right after it is computed, so its arena bytes are free for
    // the rest of the backward pass (otherwise every weight gradient is live at once at the end).
    // Nothing else in @train_step reads an accumulator, so the position is free to choose.
    FloatAttr scale = b.getF64FloatAttr(1.0 / double(gradAccum));
    for (size_t k = 0; k < params.size(); ++k) {
      Value acc = trainStep.getArgument(lastParam + 1 + k);
      Value grad = (*grads)[k];
      Operation *def = grad.getDefiningOp();
      if (def && def->getBlock() == ret->getBlock())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPoint(ret);
      auto accumulate = AccumulateGradOp::create(b, locs[k], acc, grad, scale);
      if (def && def->hasAttr(kStageAttr))
        accumulate->setAttr(kStageAttr, def->getAttr(kStageAttr));
    }

    updateTrainConfig(module, {b.getNamedAttr("grad_accum", b.getI64IntegerAttr(gradAccum)),
                               b.getNamedAttr("trainable", b.getArrayAttr(trainableNames)),
                               b.getNamedAttr("frozen", b.getArrayAttr(frozenNames))});
    return success();
  }
};

} // namespace

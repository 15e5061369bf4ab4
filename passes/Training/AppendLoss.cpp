//===- AppendLoss.cpp - colossal-append-loss: @eval and the basis of @train_step ---===//
//
// docs/training.md "Compiler pipeline". The model function (the microbatch import when there is
// one) is cloned twice; each clone returns the loss alone. The token input, labels, vocabulary
// size, global batch and sequence length go into the module's `colossal.train` dictionary.
//===------------------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/Training/TrainUtils.h"

#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"
#include "dialects/Colossal/Programs.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/StringExtras.h"

namespace colossal {
#define GEN_PASS_DEF_APPENDLOSS
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::training;

namespace {

std::string outputNames(func::FuncOp fn) {
  SmallVector<std::string> names;
  for (unsigned i = 0; i < fn.getNumResults(); ++i)
    if (auto s = fn.getResultAttrOfType<StringAttr>(i, kOutputAttr))
      names.push_back("'" + s.getValue().str() + "'");
  return llvm::join(names, ", ");
}

/// Erases the colossal.update_buffer ops of `fn` and the ops only they used.
void eraseBufferUpdates(func::FuncOp fn) {
  SmallVector<Operation *> worklist;
  fn.walk([&](UpdateBufferOp op) { worklist.push_back(op); });
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    SmallVector<Operation *> defs;
    for (Value v : op->getOperands())
      if (Operation *d = v.getDefiningOp())
        defs.push_back(d);
    op->erase();
    for (Operation *d : defs)
      if (isOpTriviallyDead(d) && !llvm::is_contained(worklist, d))
        worklist.push_back(d);
  }
}

struct AppendLossPass : colossal::impl::AppendLossBase<AppendLossPass> {
  using AppendLossBase::AppendLossBase;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    auto forward = lookupProgram(module, ProgramRole::Forward);
    if (!forward)
      return module.emitError("colossal-append-loss needs the forward program (the imported model)");
    for (ProgramRole role : {ProgramRole::Eval, ProgramRole::TrainStep})
      if (lookupProgram(module, role) || module.lookupSymbol(programSymbol(role)))
        return module.emitError() << "colossal-append-loss: the module already has a "
                                  << programRoleName(role) << " program";
    if (kind != "cross_entropy" && kind != "output")
      return module.emitError() << "colossal-append-loss: kind must be cross_entropy or output, "
                                   "got '" << kind << "'";
    auto micro = lookupProgram(module, ProgramRole::Microbatch);
    func::FuncOp basis = micro ? micro : forward;

    // The model's unbound inputs (the `values` bindings are constants by now).
    SmallVector<unsigned> inputs;
    SmallVector<std::string> inputNames;
    for (unsigned i = 0; i < basis.getNumArguments(); ++i)
      if (StringRef n = argMarker(basis, i, kInputAttr); !n.empty()) {
        inputs.push_back(i);
        inputNames.push_back("'" + n.str() + "'");
      }
    auto results = basis.getBody().front().getTerminator()->getOperands();

    std::optional<unsigned> tokens, labelsArg, logitsResult, lossResult;
    RankedTensorType labelsType;
    const bool dataMode = !dataInputs.empty();
    if (dataMode) {
      if (failed(checkDataInputs(module, basis, inputs, inputNames, results, logitsResult,
                                 lossResult, labelsType)))
        return failure();
    } else if (kind == "cross_entropy") {
      if (failed(findLogits(module, basis, /*required=*/true, logitsResult)))
        return failure();
      if (inputs.size() != 1)
        return module.emitError()
               << "training with cross_entropy needs a model with exactly one input left after "
                  "the spec's values (the token ids [B, T]); it has "
               << inputs.size() << (inputs.empty() ? "" : ": ") << llvm::join(inputNames, ", ")
               << (inputs.size() > 1 ? "; bind the others with the spec's values" : "");
      tokens = inputs[0];
      if (failed(labelsForLogits(module, basis, results, *logitsResult, labelsType)))
        return failure();
    } else {
      if (failed(findLossOutput(module, basis, results, lossResult)))
        return failure();
      labelsArg = findArg(basis, kInputAttr, labels);
      if (!labelsArg)
        return module.emitError() << "train.loss.labels: '" << labels
                                  << "' is not an input of the model (inputs: "
                                  << llvm::join(inputNames, ", ") << ")";
      labelsType = llvm::cast<RankedTensorType>(basis.getArgument(*labelsArg).getType());
      if (!labelsType.getElementType().isInteger(64))
        return module.emitError() << "train.loss.labels: '" << labels
                                  << "' must be int64, got " << labelsType;
      if (inputs.size() != 2)
        return module.emitError()
               << "training with kind output needs a model with exactly two inputs left after "
                  "the spec's values (token ids and labels); it has "
               << inputs.size() << ": " << llvm::join(inputNames, ", ");
      tokens = inputs[0] == *labelsArg ? inputs[1] : inputs[0];
      if (failed(findLogits(module, basis, /*required=*/false, logitsResult)))
        return failure();
    }

    NamedAttrList config;
    config.append(b0(ctx).getNamedAttr("loss", StringAttr::get(ctx, kind)));
    if (dataMode) {
      // train.inputs: the batch is dim 0 of every data input @forward has (the labels the pass
      // creates are not among them).
      int64_t batch = -1;
      for (const std::string &name : dataInputs) {
        auto arg = findArg(forward, kInputAttr, name);
        if (!arg)
          continue;
        auto t = llvm::cast<RankedTensorType>(forward.getArgument(*arg).getType());
        if (t.getRank() < 1)
          return module.emitError() << "train.inputs: input '" << name
                                    << "' is a scalar; every data input has the batch as dim 0";
        if (batch >= 0 && t.getDimSize(0) != batch)
          return module.emitError() << "train.inputs: input '" << name << "' has batch (dim 0) "
                                    << t.getDimSize(0) << " but the others " << batch
                                    << "; every data input takes the same rows";
        batch = t.getDimSize(0);
      }
      if (batch < 0)
        return module.emitError("train.inputs: none of the data inputs is an input of @forward");
      SmallVector<Attribute> names;
      for (const std::string &name : dataInputs)
        names.push_back(StringAttr::get(ctx, name));
      config.append("data_inputs", ArrayAttr::get(ctx, names));
      config.append("tokens_input", StringAttr::get(ctx, ""));
      config.append("labels_input", StringAttr::get(ctx, kind == "cross_entropy" ? std::string(labels) : std::string()));
      config.append("global_batch", b0(ctx).getI64IntegerAttr(batch));
      if (logitsResult) {
        config.append("logits_output", StringAttr::get(ctx, logits));
        auto fwdLogits = findOutput(forward, logits);
        if (!fwdLogits)
          return module.emitError() << "@forward has no output '" << logits << "'";
        config.append("vocab_size",
                      b0(ctx).getI64IntegerAttr(
                          llvm::cast<RankedTensorType>(forward.getResultTypes()[*fwdLogits])
                              .getShape()
                              .back()));
      }
      config.append("ignore_index", b0(ctx).getI64IntegerAttr(int64_t(ignoreIndex)));
      return buildPrograms(module, forward, basis, micro, logitsResult, lossResult, labelsType,
                           config);
    }

    // The token input: [b, T] int ids, which the training loop fills from --data.
    StringRef tokensName = argMarker(basis, *tokens, kInputAttr);
    auto tokensType = llvm::cast<RankedTensorType>(basis.getArgument(*tokens).getType());
    if (tokensType.getRank() != 2 ||
        !(tokensType.getElementType().isInteger(64) || tokensType.getElementType().isInteger(32)))
      return module.emitError() << "the token input '" << tokensName
                                << "' must be int64 or int32 [B, T], got " << tokensType;
    if (labelsType.getShape() != tokensType.getShape())
      return module.emitError() << "the labels " << shapeStr(labelsType.getShape())
                                << (kind == "cross_entropy" ? " (the logits' shape without the "
                                                              "class dim)"
                                                            : "")
                                << " must have the token input's shape "
                                << shapeStr(tokensType.getShape())
                                << ": the training loop fills both from --data";
    auto forwardTokens = findArg(forward, kInputAttr, tokensName);
    if (!forwardTokens)
      return module.emitError() << "@forward has no input '" << tokensName << "'";
    auto globalType = llvm::cast<RankedTensorType>(forward.getArgument(*forwardTokens).getType());
    int64_t vocab = 0;
    if (logitsResult) {
      auto fwdLogits = findOutput(forward, logits);
      if (!fwdLogits)
        return module.emitError() << "@forward has no output '" << logits << "'";
      vocab = llvm::cast<RankedTensorType>(forward.getResultTypes()[*fwdLogits]).getShape().back();
    } else {
      // The plan needs the logits output (the vocabulary the training loop checks --data's ids
      // against, and what sample and export read), whatever computes the loss.
      return module.emitError()
             << "train.loss: kind output needs logits as well: name the model's logits output "
                "with train.loss.logits (the training loop checks the token ids against its "
                "last dim, the vocabulary; sample reads it)";
    }

    config.append("tokens_input", StringAttr::get(ctx, tokensName));
    config.append("labels_input", StringAttr::get(ctx, labels));
    config.append("logits_output", StringAttr::get(ctx, logitsResult ? logits : std::string()));
    config.append("vocab_size", b0(ctx).getI64IntegerAttr(vocab));
    config.append("global_batch", b0(ctx).getI64IntegerAttr(globalType.getDimSize(0)));
    config.append("seq_len", b0(ctx).getI64IntegerAttr(globalType.getDimSize(1)));
    config.append("ignore_index", b0(ctx).getI64IntegerAttr(int64_t(ignoreIndex)));
    return buildPrograms(module, forward, basis, micro, logitsResult, lossResult, labelsType,
                         config);
  }

  static Builder b0(MLIRContext *ctx) { return Builder(ctx); }

  /// train.loss.logits: the output `logits` of `basis` (required: kind cross_entropy).
  LogicalResult findLogits(ModuleOp module, func::FuncOp basis, bool required,
                           std::optional<unsigned> &logitsResult) {
    if (logits.empty()) {
      if (required)
        return module.emitError("colossal-append-loss: kind=cross_entropy needs logits=NAME");
      return success();
    }
    logitsResult = findOutput(basis, logits);
    if (!logitsResult)
      return module.emitError() << "train.loss.logits: '" << logits
                                << "' is not an output of the model (outputs: "
                                << outputNames(basis) << ")";
    return success();
  }

  /// cross_entropy: the labels input the pass creates (not a model input), int64 of the logits'
  /// shape without the class dim; the logits f32 [..., C], rank >= 2.
  LogicalResult labelsForLogits(ModuleOp module, func::FuncOp basis, ValueRange results,
                                unsigned logitsResult, RankedTensorType &labelsType) {
    if (findArg(basis, kInputAttr, labels))
      return module.emitError() << "train.loss.labels: '" << labels
                                << "' is already an input of the model; the compiler creates "
                                   "the labels input, choose another name";
    auto lt = llvm::dyn_cast<RankedTensorType>(results[logitsResult].getType());
    if (!lt || lt.getRank() < 2 || !lt.getElementType().isF32())
      return module.emitError() << "train.loss.logits: '" << logits
                                << "' must be f32 [..., C] of rank >= 2, got "
                                << results[logitsResult].getType();
    labelsType = RankedTensorType::get(lt.getShape().drop_back(), IntegerType::get(module.getContext(), 64));
    return success();
  }

  /// kind output: the model's scalar f32 output `output`, the loss.
  LogicalResult findLossOutput(ModuleOp module, func::FuncOp basis, ValueRange results,
                               std::optional<unsigned> &lossResult) {
    if (output.empty())
      return module.emitError("colossal-append-loss: kind=output needs output=NAME");
    lossResult = findOutput(basis, output);
    if (!lossResult)
      return module.emitError() << "train.loss.output: '" << output
                                << "' is not an output of the model (outputs: "
                                << outputNames(basis) << ")";
    auto lossType = llvm::cast<RankedTensorType>(results[*lossResult].getType());
    if (!lossType.getElementType().isF32() || lossType.getNumElements() != 1)
      return module.emitError() << "train.loss.output: '" << output
                                << "' must be a scalar f32 loss, got " << lossType;
    return success();
  }

  /// train.inputs: every unbound input of `basis` has a source, every source names an input (or
  /// the labels the pass creates for cross_entropy); finds the logits / loss output.
  LogicalResult checkDataInputs(ModuleOp module, func::FuncOp basis, ArrayRef<unsigned> inputs,
                                ArrayRef<std::string> inputNames, ValueRange results,
                                std::optional<unsigned> &logitsResult,
                                std::optional<unsigned> &lossResult,
                                RankedTensorType &labelsType) {
    const bool created = kind == "cross_entropy";
    std::string sources;
    for (const std::string &name : dataInputs)
      sources += (sources.empty() ? "'" : ", '") + name + "'";
    for (auto [i, n] : llvm::zip(inputs, inputNames)) {
      StringRef name = argMarker(basis, i, kInputAttr);
      if (!llvm::is_contained(dataInputs, name.str()))
        return module.emitError() << "train.inputs: input '" << name
                                  << "' of the model has no source (give it npy, normal or "
                                     "uniform_int, or bind it with the spec's values; sources: "
                                  << sources << ")";
    }
    for (const std::string &name : dataInputs) {
      if (findArg(basis, kInputAttr, name))
        continue;
      if (created && name == std::string(labels))
        continue;
      return module.emitError() << "train.inputs: '" << name << "' is not an input of the model "
                                << "(inputs: " << llvm::join(inputNames, ", ")
                                << (created ? ", and the labels '" + labels + "' of the loss" : "")
                                << ")";
    }
    if (created) {
      if (failed(findLogits(module, basis, /*required=*/true, logitsResult)))
        return failure();
      if (!llvm::is_contained(dataInputs, std::string(labels)) && !findArg(basis, kInputAttr, labels))
        return module.emitError() << "train.inputs: the labels '" << labels
                                  << "' of the cross_entropy loss have no source (give them npy)";
      return labelsForLogits(module, basis, results, *logitsResult, labelsType);
    }
    if (failed(findLossOutput(module, basis, results, lossResult)))
      return failure();
    return findLogits(module, basis, /*required=*/false, logitsResult);
  }

  /// @eval (the model and the loss) and @train_step (its copy), `colossal.train` = `config`.
  LogicalResult buildPrograms(ModuleOp module, func::FuncOp forward, func::FuncOp basis,
                              func::FuncOp micro, std::optional<unsigned> logitsResult,
                              std::optional<unsigned> lossResult, RankedTensorType labelsType,
                              NamedAttrList &config) {
    MLIRContext *ctx = module.getContext();
    // @eval: the model and the loss; @train_step starts as its copy.
    OpBuilder b(ctx);
    b.setInsertionPointAfter(forward);
    auto eval = llvm::cast<func::FuncOp>(b.clone(*basis));
    eval.setName(programSymbol(ProgramRole::Eval));
    setProgramRole(eval, ProgramRole::Eval);
    Block &body = eval.getBody().front();
    Operation *ret = body.getTerminator();
    Location loc = NameLoc::get(StringAttr::get(ctx, "loss"), module.getLoc());
    Value loss;
    b.setInsertionPoint(ret);
    if (kind == "cross_entropy") {
      NamedAttribute marker(StringAttr::get(ctx, kInputAttr), StringAttr::get(ctx, labels));
      if (failed(eval.insertArgument(eval.getNumArguments(), labelsType,
                                     DictionaryAttr::get(ctx, {marker}),
                                     NameLoc::get(StringAttr::get(ctx, labels)))))
        return module.emitError("colossal-append-loss: cannot add the labels argument");
      Value logitsValue = ret->getOperand(*logitsResult);
      auto lt = llvm::cast<RankedTensorType>(logitsValue.getType());
      int64_t classes = lt.getShape().back(), rows = labelsType.getNumElements();
      Value flatLogits = logitsValue, flatLabels = body.getArguments().back();
      if (lt.getRank() != 2)
        flatLogits = ReshapeOp::create(b, loc, RankedTensorType::get({rows, classes}, lt.getElementType()),
                                       logitsValue);
      if (labelsType.getRank() != 1)
        flatLabels = ReshapeOp::create(b, loc, RankedTensorType::get({rows}, labelsType.getElementType()),
                                       flatLabels);
      loss = CrossEntropyOp::create(b, loc, RankedTensorType::get({}, b.getF32Type()), flatLogits,
                                    flatLabels, b.getI64IntegerAttr(ignoreIndex));
    } else {
      loss = ret->getOperand(*lossResult);
      if (llvm::cast<RankedTensorType>(loss.getType()).getRank() != 0)
        loss = ReshapeOp::create(b, loc, RankedTensorType::get({}, b.getF32Type()), loss);
    }
    func::ReturnOp::create(b, ret->getLoc(), loss);
    ret->erase();
    eval.setType(FunctionType::get(ctx, body.getArgumentTypes(), {loss.getType()}));
    NamedAttribute lossMarker(StringAttr::get(ctx, kOutputAttr), StringAttr::get(ctx, "loss"));
    eval.setAllResultAttrs(ArrayRef<DictionaryAttr>{DictionaryAttr::get(ctx, {lossMarker})});
    eraseDeadOps(eval);

    b.setInsertionPointAfter(eval);
    auto trainStep = llvm::cast<func::FuncOp>(b.clone(*eval));
    trainStep.setName(programSymbol(ProgramRole::TrainStep));
    setProgramRole(trainStep, ProgramRole::TrainStep);
    if (micro)
      micro.erase();
    // Buffers (BatchNorm's running statistics) are updated by the training steps alone:
    // evaluating or running the model leaves them as they are.
    eraseBufferUpdates(eval);
    eraseBufferUpdates(forward);

    updateTrainConfig(module, config.getAttrs());
    return success();
  }
};

} // namespace

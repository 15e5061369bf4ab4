//===- AppendLoss.cpp - colossal-append-loss: @eval and the basis of @train_step ---===//
//
// docs/training.md "Compiler pipeline". The model function (the microbatch import when there is
// one) is cloned twice; each clone returns the loss alone. The token input, labels, vocabulary
// size, global batch and sequence length go into the module's `colossal.train` dictionary.
//===------------------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/Training/TrainUtils.h"

#include "dialects/Colossal/ConstantEval.h"
#include "dialects/Colossal/Programs.h"

#include "mlir/IR/Builders.h"
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
    if (kind == "cross_entropy") {
      if (logits.empty())
        return module.emitError("colossal-append-loss: kind=cross_entropy needs logits=NAME");
      logitsResult = findOutput(basis, logits);
      if (!logitsResult)
        return module.emitError() << "train.loss.logits: '" << logits
                                  << "' is not an output of the model (outputs: "
                                  << outputNames(basis) << ")";
      if (inputs.size() != 1)
        return module.emitError()
               << "training with cross_entropy needs a model with exactly one input left after "
                  "the spec's values (the token ids [B, T]); it has "
               << inputs.size() << (inputs.empty() ? "" : ": ") << llvm::join(inputNames, ", ")
               << (inputs.size() > 1 ? "; bind the others with the spec's values" : "");
      tokens = inputs[0];
      if (findArg(basis, kInputAttr, labels))
        return module.emitError() << "train.loss.labels: '" << labels
                                  << "' is already an input of the model; the compiler creates "
                                     "the labels input, choose another name";
      auto lt = llvm::dyn_cast<RankedTensorType>(results[*logitsResult].getType());
      if (!lt || lt.getRank() < 2 || !lt.getElementType().isF32())
        return module.emitError() << "train.loss.logits: '" << logits
                                  << "' must be f32 [..., C] of rank >= 2, got "
                                  << results[*logitsResult].getType();
      labelsType = RankedTensorType::get(lt.getShape().drop_back(), IntegerType::get(ctx, 64));
    } else {
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
      if (!logits.empty()) {
        logitsResult = findOutput(basis, logits);
        if (!logitsResult)
          return module.emitError() << "train.loss.logits: '" << logits
                                    << "' is not an output of the model (outputs: "
                                    << outputNames(basis) << ")";
      }
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

    updateTrainConfig(
        module,
        {b.getNamedAttr("loss", b.getStringAttr(kind)),
         b.getNamedAttr("tokens_input", b.getStringAttr(tokensName)),
         b.getNamedAttr("labels_input", b.getStringAttr(labels)),
         b.getNamedAttr("logits_output", b.getStringAttr(logitsResult ? logits : std::string())),
         b.getNamedAttr("vocab_size", b.getI64IntegerAttr(vocab)),
         b.getNamedAttr("global_batch", b.getI64IntegerAttr(globalType.getDimSize(0))),
         b.getNamedAttr("seq_len", b.getI64IntegerAttr(globalType.getDimSize(1))),
         b.getNamedAttr("ignore_index", b.getI64IntegerAttr(int64_t(ignoreIndex)))});
    return success();
  }
};

} // namespace

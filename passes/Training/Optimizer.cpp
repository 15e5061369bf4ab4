//===- Optimizer.cpp - colossal-optimizer: @optimizer_step ------------------------===//
//
// docs/training.md "Compiler pipeline" and "Optimizer semantics". One update op per trainable
// parameter after the global gradient norm; the hyperparameters are the ops' attributes, the
// learning-rate schedule is recorded in `colossal.train` for the runtime.
//===------------------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "dialects/Colossal/Programs.h"
#include "passes/Training/TrainUtils.h"

#include "mlir/IR/Builders.h"

#include <cmath>

namespace colossal {
#define GEN_PASS_DEF_OPTIMIZER
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::training;

namespace {

struct OptimizerPass : colossal::impl::OptimizerBase<OptimizerPass> {
  using OptimizerBase::OptimizerBase;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  /// The checks torch.optim makes in its constructors, plus the schedule's.
  LogicalResult checkOptions(ModuleOp module) {
    auto bad = [&]() { return module.emitError() << "colossal-optimizer: "; };
    double lr = this->lr, beta1 = this->beta1, beta2 = this->beta2, eps = this->eps;
    double wd = weightDecay, momentum = this->momentum, dampening = this->dampening;
    double clip = maxGradNorm, minLr = this->minLr;
    if (kind != "sgd" && kind != "adam" && kind != "adamw")
      return bad() << "kind must be sgd, adam or adamw, got '" << kind << "'";
    if (!(lr > 0) || !std::isfinite(lr))
      return bad() << "lr must be a finite number > 0, got " << lr;
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
      return bad() << "beta1 and beta2 must be in [0, 1), got " << beta1 << ", " << beta2;
    if (!(eps >= 0))
      return bad() << "eps must be >= 0, got " << eps;
    if (!(wd >= 0))
      return bad() << "weight-decay must be >= 0, got " << wd;
    if (!(momentum >= 0))
      return bad() << "momentum must be >= 0, got " << momentum;
    if (!(dampening >= 0 && dampening <= 1))
      return bad() << "dampening must be in [0, 1], got " << dampening;
    if (nesterov && (kind != "sgd" || momentum <= 0 || dampening != 0))
      return bad() << "nesterov needs kind=sgd, momentum > 0 and dampening 0";
    if (kind != "sgd" && (momentum != 0 || dampening != 0))
      return bad() << "momentum and dampening apply to sgd only";
    if (!(clip >= 0))
      return bad() << "max-grad-norm must be >= 0 (0: no clipping), got " << clip;
    if (lrSchedule != "constant" && lrSchedule != "cosine")
      return bad() << "lr-schedule must be constant or cosine, got '" << lrSchedule << "'";
    if (warmupSteps < 0 || totalSteps < 0 || (lrSchedule == "cosine" && totalSteps < warmupSteps))
      return bad() << "the cosine schedule needs 0 <= warmup-steps <= total-steps, got "
                   << int64_t(warmupSteps) << " and " << int64_t(totalSteps);
    if (!(minLr >= 0 && minLr <= lr))
      return bad() << "min-lr must be in [0, lr], got " << minLr;
    return success();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    if (failed(checkOptions(module)))
      return failure();
    auto trainStep = lookupProgram(module, ProgramRole::TrainStep);
    if (!trainStep)
      return module.emitError("colossal-optimizer needs @train_step (run colossal-append-loss "
                              "and colossal-autodiff first)");
    if (lookupProgram(module, ProgramRole::OptimizerStep) ||
        module.lookupSymbol(programSymbol(ProgramRole::OptimizerStep)))
      return module.emitError("colossal-optimizer: the module already has an optimizer_step program");
    auto forward = lookupProgram(module, ProgramRole::Forward);

    // The trainable parameters: those with a `<p>.grad` accumulator in @train_step.
    struct Param {
      std::string name;
      RankedTensorType type;
      DictionaryAttr attrs; // colossal.param, colossal.value, colossal.source as in @train_step
    };
    SmallVector<Param> params;
    auto noDecayPatterns = ParamPatterns::compile(module, "train.no_decay", noDecay);
    if (failed(noDecayPatterns))
      return failure();
    SmallVector<bool> decays;
    for (unsigned i = 0; i < trainStep.getNumArguments(); ++i) {
      StringRef name = argMarker(trainStep, i, kParamAttr);
      if (!name.empty()) {
        // Every parameter counts for no_decay's "matches nothing" check, frozen ones too.
        bool noDecayHere = noDecayPatterns->matches(forward, name);
        if (auto acc = findArg(trainStep, kStateAttr, (name + ".grad").str())) {
          params.push_back({name.str(),
                            llvm::cast<RankedTensorType>(trainStep.getArgument(i).getType()),
                            trainStep.getArgAttrDict(i)});
          decays.push_back(!noDecayHere);
        }
      }
    }
    if (failed(noDecayPatterns->checkAllUsed(module)))
      return failure();
    if (params.empty())
      return module.emitError("colossal-optimizer: @train_step has no gradient accumulators "
                              "(run colossal-autodiff first)");

    // Arguments: params, grads, optimizer state, lr, step.
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    SmallVector<Location> argLocs;
    auto marker = [&](StringRef attr, const Twine &value) {
      return DictionaryAttr::get(
          ctx, {NamedAttribute(StringAttr::get(ctx, attr), StringAttr::get(ctx, value))});
    };
    auto add = [&](Type t, DictionaryAttr attrs, const Twine &name) {
      argTypes.push_back(t);
      argAttrs.push_back(attrs);
      argLocs.push_back(NameLoc::get(StringAttr::get(ctx, name)));
    };
    for (const Param &p : params)
      add(p.type, p.attrs, p.name);
    for (const Param &p : params)
      add(p.type, marker(kStateAttr, p.name + ".grad"), p.name + ".grad");
    SmallVector<StringRef> stateSuffixes;
    if (kind == "sgd") {
      if (momentum != 0)
        stateSuffixes.push_back(".momentum_buffer");
    } else {
      stateSuffixes = {".exp_avg", ".exp_avg_sq"};
    }
    for (const Param &p : params)
      for (StringRef suffix : stateSuffixes)
        add(p.type, marker(kStateAttr, p.name + suffix), p.name + suffix);
    auto f32 = RankedTensorType::get({}, Float32Type::get(ctx));
    auto i64 = RankedTensorType::get({}, IntegerType::get(ctx, 64));
    add(f32, marker(kInputAttr, "lr"), "lr");
    add(i64, marker(kInputAttr, "step"), "step");

    OpBuilder b(ctx);
    b.setInsertionPointAfter(trainStep);
    auto fn = func::FuncOp::create(b, module.getLoc(), programSymbol(ProgramRole::OptimizerStep),
                                   FunctionType::get(ctx, argTypes, {f32}));
    setProgramRole(fn, ProgramRole::OptimizerStep);
    fn.setAllArgAttrs(argAttrs);
    fn.setAllResultAttrs(ArrayRef<DictionaryAttr>{marker(kOutputAttr, "grad_norm")});
    Block *body = fn.addEntryBlock();
    for (auto [arg, loc] : llvm::zip(body->getArguments(), argLocs))
      arg.setLoc(loc);
    b.setInsertionPointToStart(body);

    size_t n = params.size(), perParam = stateSuffixes.size();
    auto param = [&](size_t k) { return body->getArgument(k); };
    auto grad = [&](size_t k) { return body->getArgument(n + k); };
    auto state = [&](size_t k, size_t j) { return body->getArgument(2 * n + k * perParam + j); };
    Value lrArg = body->getArgument(body->getNumArguments() - 2);
    Value stepArg = body->getArgument(body->getNumArguments() - 1);

    SmallVector<Value> grads;
    for (size_t k = 0; k < n; ++k)
      grads.push_back(grad(k));
    Location normLoc = NameLoc::get(StringAttr::get(ctx, "grad_norm"), module.getLoc());
    Value norm = GlobalNormOp::create(b, normLoc, f32, grads);
    for (size_t k = 0; k < n; ++k) {
      Location loc = NameLoc::get(StringAttr::get(ctx, params[k].name), module.getLoc());
      FloatAttr wd = b.getF64FloatAttr(decays[k] ? weightDecay : 0.0);
      FloatAttr clip = b.getF64FloatAttr(maxGradNorm);
      if (kind == "sgd") {
        Value buf = perParam ? state(k, 0) : Value();
        SgdUpdateOp::create(b, loc, param(k), grad(k), buf, lrArg, stepArg, norm,
                            b.getF64FloatAttr(momentum), b.getF64FloatAttr(dampening), wd, clip,
                            b.getBoolAttr(nesterov));
      } else if (kind == "adam") {
        AdamUpdateOp::create(b, loc, param(k), grad(k), state(k, 0), state(k, 1), lrArg, stepArg,
                             norm, b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
                             b.getF64FloatAttr(eps), wd, clip);
      } else {
        AdamWUpdateOp::create(b, loc, param(k), grad(k), state(k, 0), state(k, 1), lrArg, stepArg,
                              norm, b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
                              b.getF64FloatAttr(eps), wd, clip);
      }
    }
    func::ReturnOp::create(b, module.getLoc(), norm);

    updateTrainConfig(module,
                      {b.getNamedAttr("optimizer", b.getStringAttr(kind)),
                       b.getNamedAttr("lr", b.getF64FloatAttr(lr)),
                       b.getNamedAttr("lr_schedule", b.getStringAttr(lrSchedule)),
                       b.getNamedAttr("warmup_steps", b.getI64IntegerAttr(warmupSteps)),
                       b.getNamedAttr("total_steps", b.getI64IntegerAttr(totalSteps)),
                       b.getNamedAttr("min_lr", b.getF64FloatAttr(minLr)),
                       b.getNamedAttr("grad_clip", b.getF64FloatAttr(maxGradNorm))});
    return success();
  }
};

} // namespace

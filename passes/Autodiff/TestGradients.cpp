//===- TestGradients.cpp - gradients as extra function results -----------------------===//
//
// colossal-test-gradients (Passes.td): the loss function's parameters' gradients become outputs,
// so the gradient checks (test/gradcheck) run on an ordinary inference plan.
//===---------------------------------------------------------------------------------===//
#include "passes/Autodiff/Autodiff.h"
#include "passes/Passes.h"

#include "dialects/Colossal/VJP.h"

namespace colossal {
#define GEN_PASS_DEF_TESTGRADIENTS
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;

namespace {

LogicalResult appendGradients(func::FuncOp func) {
  auto fnType = func.getFunctionType();
  if (fnType.getNumResults() != 1 || func.isExternal())
    return success();
  auto lossType = llvm::dyn_cast<RankedTensorType>(fnType.getResult(0));
  if (!lossType || !llvm::isa<FloatType>(lossType.getElementType()) ||
      lossType.getNumElements() != 1)
    return success();

  Block &body = func.getBody().front();
  auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> params;
  SmallVector<StringAttr> names;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, kParamAttr);
    auto t = llvm::dyn_cast<RankedTensorType>(func.getArgument(i).getType());
    if (!name || !t || !llvm::isa<FloatType>(t.getElementType()))
      continue;
    params.push_back(func.getArgument(i));
    names.push_back(name);
  }
  if (params.empty())
    return success();

  OpBuilder b(ret);
  Value loss = ret.getOperand(0);
  Value seed = splatConstant(b, func.getLoc(), lossType, 1.0);
  auto grads = buildGradients(func, loss, seed, params);
  if (failed(grads))
    return failure();

  SmallVector<Value> results(ret.getOperands());
  results.append(grads->begin(), grads->end());
  ret->setOperands(results);
  SmallVector<Type> resultTypes(fnType.getResults());
  SmallVector<Attribute> resultAttrs{func.getResultAttrDict(0)
                                         ? Attribute(func.getResultAttrDict(0))
                                         : Attribute(b.getDictionaryAttr({}))};
  for (auto [g, name] : llvm::zip(*grads, names)) {
    resultTypes.push_back(g.getType());
    resultAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(kOutputAttr, b.getStringAttr("grad:" + name.getValue()))}));
  }
  func.setFunctionType(FunctionType::get(func.getContext(), fnType.getInputs(), resultTypes));
  func.setAllResultAttrs(resultAttrs);
  return success();
}

struct TestGradientsPass : colossal::impl::TestGradientsBase<TestGradientsPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(appendGradients(func)))
        return signalPassFailure();
  }
};

} // namespace

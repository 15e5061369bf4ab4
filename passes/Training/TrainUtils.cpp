//===- TrainUtils.cpp - shared helpers of the training passes -------------===//
#include "passes/Training/TrainUtils.h"

#include "dialects/Colossal/ColossalDialect.h"

#include "mlir/IR/Location.h"
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace colossal::training {

StringRef argMarker(func::FuncOp fn, unsigned i, StringRef attr) {
  if (auto s = fn.getArgAttrOfType<StringAttr>(i, attr))
    return s.getValue();
  return "";
}

std::optional<unsigned> findArg(func::FuncOp fn, StringRef attr, StringRef name) {
  for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i)
    if (auto s = fn.getArgAttrOfType<StringAttr>(i, attr); s && s.getValue() == name)
      return i;
  return std::nullopt;
}

std::optional<unsigned> findOutput(func::FuncOp fn, StringRef name) {
  for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
    if (auto s = fn.getResultAttrOfType<StringAttr>(i, kOutputAttr); s && s.getValue() == name)
      return i;
  return std::nullopt;
}

DictionaryAttr trainConfig(ModuleOp module) {
  if (auto d = module->getAttrOfType<DictionaryAttr>(kTrainAttr))
    return d;
  return DictionaryAttr::get(module.getContext());
}

void updateTrainConfig(ModuleOp module, ArrayRef<NamedAttribute> entries) {
  NamedAttrList merged(trainConfig(module));
  for (const NamedAttribute &e : entries)
    merged.set(e.getName(), e.getValue());
  module->setAttr(kTrainAttr, merged.getDictionary(module.getContext()));
}

void eraseDeadOps(func::FuncOp fn) {
  SmallVector<Operation *> ops;
  for (Operation &op : fn.getBody().front().without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (isOpTriviallyDead(op))
      op->erase();
}

FailureOr<ParamPatterns> ParamPatterns::compile(ModuleOp module, StringRef option,
                                                ArrayRef<std::string> patterns) {
  ParamPatterns p;
  p.option = option.str();
  for (const std::string &source : patterns) {
    auto re = std::make_shared<llvm::Regex>("^(" + source + ")$");
    std::string why;
    if (!re->isValid(why)) {
      module.emitError() << option << " regex '" << source << "' is invalid: " << why;
      return failure();
    }
    p.sources.push_back(source);
    p.regexes.push_back(std::move(re));
  }
  p.used.assign(p.regexes.size(), false);
  return p;
}

bool ParamPatterns::matches(func::FuncOp forward, StringRef name) {
  std::vector<std::string> names = {name.str()};
  if (forward)
    if (auto arg = findArg(forward, kParamAttr, name))
      for (Operation *user : forward.getArgument(*arg).getUsers())
        user->getLoc()->walk([&](Location loc) {
          if (auto n = llvm::dyn_cast<NameLoc>(loc))
            names.push_back(n.getName().str());
          return WalkResult::advance();
        });
  bool any = false;
  for (size_t i = 0; i < regexes.size(); ++i)
    for (const std::string &n : names)
      if (regexes[i]->match(n)) {
        used[i] = true;
        any = true;
        break;
      }
  return any;
}

LogicalResult ParamPatterns::checkAllUsed(ModuleOp module) const {
  for (size_t i = 0; i < used.size(); ++i)
    if (!used[i])
      return module.emitError() << option << " regex '" << sources[i]
                                << "' matches no parameter (nor any node consuming one); "
                                   "regexes match whole names";
  return success();
}

} // namespace colossal::training

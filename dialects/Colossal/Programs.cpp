//===- Programs.cpp - program roles (ColossalDialect.h, Programs.h) --------===//
#include "dialects/Colossal/Programs.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace colossal {

namespace {
constexpr ProgramRole kRoles[] = {ProgramRole::Forward, ProgramRole::Microbatch,
                                  ProgramRole::Eval, ProgramRole::TrainStep,
                                  ProgramRole::OptimizerStep, ProgramRole::StageForward,
                                  ProgramRole::StageBackward, ProgramRole::StageOptimizer,
                                  ProgramRole::StageBackwardWeight, ProgramRole::Generate};
} // namespace

llvm::StringRef programRoleName(ProgramRole role) {
  switch (role) {
  case ProgramRole::Forward: return "forward";
  case ProgramRole::Microbatch: return "microbatch";
  case ProgramRole::Eval: return "eval";
  case ProgramRole::TrainStep: return "train_step";
  case ProgramRole::OptimizerStep: return "optimizer_step";
  case ProgramRole::StageForward: return "stage_forward";
  case ProgramRole::StageBackward: return "stage_backward";
  case ProgramRole::StageOptimizer: return "stage_optimizer";
  case ProgramRole::StageBackwardWeight: return "stage_backward_weight";
  case ProgramRole::Generate: return "generate";
  }
  llvm_unreachable("ProgramRole");
}

std::optional<ProgramRole> parseProgramRole(llvm::StringRef name) {
  for (ProgramRole r : kRoles)
    if (programRoleName(r) == name)
      return r;
  return std::nullopt;
}

llvm::StringRef programSymbol(ProgramRole role) {
  return role == ProgramRole::Microbatch ? "forward_microbatch" : programRoleName(role);
}

func::FuncOp lookupProgram(ModuleOp module, ProgramRole role) {
  func::FuncOp bySymbol;
  for (func::FuncOp f : module.getOps<func::FuncOp>()) {
    if (auto stated = f->getAttrOfType<StringAttr>(kProgramAttr)) {
      if (parseProgramRole(stated.getValue()) == role)
        return f;
    } else if (f.getSymName() == programSymbol(role)) {
      bySymbol = f;
    }
  }
  return bySymbol;
}

std::optional<ProgramRole> programRole(func::FuncOp f) {
  if (auto stated = f->getAttrOfType<StringAttr>(kProgramAttr))
    return parseProgramRole(stated.getValue());
  for (ProgramRole r : kRoles)
    if (f.getSymName() == programSymbol(r))
      return r;
  return std::nullopt;
}

void setProgramRole(func::FuncOp f, ProgramRole role) {
  f->setAttr(kProgramAttr, StringAttr::get(f->getContext(), programRoleName(role)));
}

} // namespace colossal

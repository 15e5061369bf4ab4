//===- ColossalDialect.cpp - the colossal dialect ------------------------===//
#include "dialects/Colossal/ColossalDialect.h"
#include "dialects/Colossal/ColossalOps.h"

using namespace mlir;
using namespace colossal;

#include "dialects/Colossal/ColossalDialect.cpp.inc"

void ColossalDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Colossal/ColossalOps.cpp.inc"
      >();
}

Operation *ColossalDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                                Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

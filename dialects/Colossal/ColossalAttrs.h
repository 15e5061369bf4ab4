//===- ColossalAttrs.h - attributes of the colossal dialect -------*- C++ -*-===//
//
// ColossalAttrs.td: `#colossal.sharding` and its dims.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_DIALECTS_COLOSSAL_COLOSSALATTRS_H
#define COLOSSAL_DIALECTS_COLOSSAL_COLOSSALATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"

#define GET_ATTRDEF_CLASSES
#include "dialects/Colossal/ColossalAttrs.h.inc"

#endif

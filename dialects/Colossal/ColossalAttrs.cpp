//===- ColossalAttrs.cpp - #colossal.sharding: syntax and verifier ---------===//
//
// ColossalAttrs.td. Syntax:
//   #colossal.sharding<@mesh, [{"tp"}, {}, {"dp", "tp"}/3], partial = {"tp"}>
// The checks against the mesh and the value's type are the dialect's (ColossalDialect.cpp).
//===----------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalAttrs.h"
#include "dialects/Colossal/ColossalDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace colossal;

#define GET_ATTRDEF_CLASSES
#include "dialects/Colossal/ColossalAttrs.cpp.inc"

void ColossalDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Colossal/ColossalAttrs.cpp.inc"
      >();
}

namespace {
/// `{"a", "b"}`: a braced list of axis names.
ParseResult parseAxisList(AsmParser &parser, SmallVectorImpl<StringAttr> &axes) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Braces, [&]() -> ParseResult {
    std::string name;
    if (parser.parseString(&name))
      return failure();
    axes.push_back(StringAttr::get(parser.getContext(), name));
    return success();
  });
}

void printAxisList(AsmPrinter &printer, ArrayRef<StringAttr> axes) {
  printer << "{";
  llvm::interleaveComma(axes, printer, [&](StringAttr a) { printer.printString(a.getValue()); });
  printer << "}";
}

/// An axis named twice over `lists` (a dim's axes, another dim's, the partial set): its name.
std::optional<StringRef> repeatedAxis(ArrayRef<ArrayRef<StringAttr>> lists) {
  llvm::SmallPtrSet<Attribute, 8> seen;
  for (ArrayRef<StringAttr> list : lists)
    for (StringAttr a : list)
      if (!seen.insert(a).second)
        return a.getValue();
  return std::nullopt;
}
} // namespace

//===----------------------------------------------------------------------===//
// DimShardingAttr
//===----------------------------------------------------------------------===//

void DimShardingAttr::printBare(AsmPrinter &printer) const {
  printAxisList(printer, getAxes());
  if (getBlocks() != 1)
    printer << "/" << getBlocks();
}

Attribute DimShardingAttr::parseBare(AsmParser &parser) {
  SmallVector<StringAttr> axes;
  int64_t blocks = 1;
  SMLoc loc = parser.getCurrentLocation();
  if (parseAxisList(parser, axes))
    return {};
  if (succeeded(parser.parseOptionalSlash()) && parser.parseInteger(blocks))
    return {};
  return parser.getChecked<DimShardingAttr>(loc, parser.getContext(), axes, blocks);
}

Attribute DimShardingAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  Attribute attr = parseBare(parser);
  if (!attr || parser.parseGreater())
    return {};
  return attr;
}

void DimShardingAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printBare(printer);
  printer << ">";
}

LogicalResult DimShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                      ArrayRef<StringAttr> axes, int64_t blocks) {
  if (blocks < 1)
    return emitError() << "a dim's block count must be >= 1; got " << blocks;
  if (blocks > 1 && axes.empty())
    return emitError() << "a whole dim has no blocks; got {}/" << blocks;
  if (std::optional<StringRef> a = repeatedAxis({axes}))
    return emitError() << "a dim names mesh axis '" << *a << "' twice";
  return success();
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

bool ShardingAttr::isSplit() const {
  return llvm::any_of(getDims(), [](DimShardingAttr d) { return !d.getAxes().empty(); });
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  FlatSymbolRefAttr mesh;
  SmallVector<DimShardingAttr> dims;
  SmallVector<StringAttr> partial;
  if (parser.parseLess() || parser.parseAttribute(mesh) || parser.parseComma())
    return {};
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
        auto dim = llvm::dyn_cast_or_null<DimShardingAttr>(DimShardingAttr::parseBare(parser));
        if (!dim)
          return failure();
        dims.push_back(dim);
        return success();
      }))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("partial") || parser.parseEqual() || parseAxisList(parser, partial))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ShardingAttr>(loc, parser.getContext(), mesh, dims, partial);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printAttributeWithoutType(getMesh());
  printer << ", [";
  llvm::interleaveComma(getDims(), printer, [&](DimShardingAttr d) { d.printBare(printer); });
  printer << "]";
  if (!getPartial().empty()) {
    printer << ", partial = ";
    printAxisList(printer, getPartial());
  }
  printer << ">";
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   FlatSymbolRefAttr mesh, ArrayRef<DimShardingAttr> dims,
                                   ArrayRef<StringAttr> partial) {
  if (!mesh)
    return emitError() << "a sharding names its mesh (@mesh)";
  SmallVector<ArrayRef<StringAttr>> lists;
  for (DimShardingAttr d : dims)
    lists.push_back(d.getAxes());
  lists.push_back(partial);
  if (std::optional<StringRef> a = repeatedAxis(lists))
    return emitError() << "a sharding names mesh axis '" << *a << "' twice";
  return success();
}

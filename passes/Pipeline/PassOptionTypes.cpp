//===- PassOptionTypes.cpp - Real pass options (PassOptionTypes.h) ---------===//
#include "passes/Pipeline/PassOptionTypes.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"

#include <cstdio>
#include <cstdlib>

namespace colossal {

llvm::raw_ostream &operator<<(llvm::raw_ostream &os, Real r) {
  // The fewest significant digits (up to 17) that read back to the same double.
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, r.value);
    if (std::strtod(text, nullptr) == r.value)
      break;
  }
  return os << text;
}

} // namespace colossal

namespace llvm::cl {

bool parser<colossal::Real>::parse(Option &o, StringRef, StringRef arg, colossal::Real &value) {
  double v;
  if (!to_float(arg, v))
    return o.error("'" + arg + "' value invalid for a number argument");
  value = v;
  return false;
}

void parser<colossal::Real>::printOptionDiff(const Option &o, colossal::Real value,
                                             const OptionValue<colossal::Real> &,
                                             size_t globalWidth) const {
  printOptionName(o, globalWidth);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << value;
  outs() << "= " << text << "\n";
}

} // namespace llvm::cl

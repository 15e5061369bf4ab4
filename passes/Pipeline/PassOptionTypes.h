//===- PassOptionTypes.h - pass option types that print exactly ---*- C++ -*-===//
//
// llvm::cl prints a double option with 6 digits (1.234568e-04), so a pipeline printed by
// --dump-pass-pipeline would read back other numbers than it ran with. A `Real` option prints the
// shortest text that reads back to the same double ("%.17g" trimmed: 1.2345678e-04, 0.001).
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_PASSES_PASSOPTIONTYPES_H
#define COLOSSAL_PASSES_PASSOPTIONTYPES_H

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace colossal {

/// A real-valued pass option (Passes.td `"::colossal::Real"`): a double that prints exactly.
struct Real {
  double value = 0;
  Real() = default;
  Real(double v) : value(v) {}
  operator double() const { return value; }
};

/// The shortest decimal text that reads back to `r` exactly.
llvm::raw_ostream &operator<<(llvm::raw_ostream &os, Real r);

} // namespace colossal

namespace llvm::cl {
/// Parses a Real as llvm::cl parses a double; prints it exactly.
template <> class parser<colossal::Real> : public basic_parser<colossal::Real> {
public:
  parser(Option &o) : basic_parser(o) {}
  /// Returns true (and reports on `o`) when `arg` is not a number.
  bool parse(Option &o, StringRef argName, StringRef arg, colossal::Real &value);
  StringRef getValueName() const override { return "number"; }
  void printOptionDiff(const Option &o, colossal::Real value, const OptionValue<colossal::Real> &,
                       size_t globalWidth) const;
  /// For PassOptions' printing when the value has no stream operator (it has one).
  static void print(raw_ostream &os, colossal::Real value) { colossal::operator<<(os, value); }
};
} // namespace llvm::cl

#endif

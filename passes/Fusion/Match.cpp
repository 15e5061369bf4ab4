//===- Match.cpp - helpers shared by the fusion patterns ------------------===//
#include "passes/Fusion/Match.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"

#include <cmath>

using namespace mlir;

namespace colossal::match {

std::optional<double> splatFloat(Value v) {
  Attribute attr;
  if (!v || !matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  if (!type || !llvm::isa<FloatType>(type.getElementType()))
    return std::nullopt;
  if (auto dense = llvm::dyn_cast<DenseFPElementsAttr>(attr); dense && dense.isSplat())
    return dense.getSplatValue<APFloat>().convertToDouble();
  auto host = HostTensor::from(attr);
  if (!host || host->numel() == 0)
    return std::nullopt;
  for (double x : host->f)
    if (!(x == host->f[0]) && !(std::isnan(x) && std::isnan(host->f[0])))
      return std::nullopt;
  return host->f[0];
}

static double relativeTolerance(Type t) {
  auto ft = llvm::dyn_cast<FloatType>(getElementTypeOrSelf(t));
  if (!ft)
    return 1e-6;
  unsigned precision = llvm::APFloat::semanticsPrecision(ft.getFloatSemantics());
  return std::max(1e-6, std::ldexp(1.0, 1 - int(precision)));
}

bool isConstantNear(Value v, double expected) {
  auto got = splatFloat(v);
  return got && std::fabs(*got - expected) <= relativeTolerance(v.getType()) * std::fabs(expected);
}

bool isConstantExactly(Value v, double expected) {
  auto got = splatFloat(v);
  return got && *got == expected;
}

double lowestFinite(Type t) {
  auto ft = llvm::cast<FloatType>(getElementTypeOrSelf(t));
  return llvm::APFloat::getLargest(ft.getFloatSemantics(), /*Negative=*/true).convertToDouble();
}

bool isMaskingFill(Value fill) {
  auto got = splatFloat(fill);
  return got && (std::isinf(*got) ? *got < 0 : *got <= 0.5 * lowestFinite(fill.getType()));
}

bool eitherOrder(Operation *binary, function_ref<bool(Value, Value)> fn) {
  if (!binary || binary->getNumOperands() != 2)
    return false;
  Value a = binary->getOperand(0), b = binary->getOperand(1);
  return fn(a, b) || fn(b, a);
}

std::optional<int64_t> trailingAxis(ArrayRef<int64_t> axes, int64_t rank) {
  if (axes.empty() || int64_t(axes.size()) > rank)
    return std::nullopt;
  int64_t first = rank - int64_t(axes.size());
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != first + int64_t(i))
      return std::nullopt;
  return first;
}

Value peelScalarFactor(Value v, double &factor) {
  Operation *op = v.getDefiningOp();
  if (auto div = llvm::dyn_cast_or_null<DivOp>(op)) {
    auto c = splatFloat(div.getRhs());
    if (c && *c != 0 && div.getLhs().getType() == div.getType()) {
      factor = 1.0 / *c;
      return div.getLhs();
    }
    return {};
  }
  Value other;
  if (auto mul = llvm::dyn_cast_or_null<MulOp>(op))
    eitherOrder(mul, [&](Value a, Value c) {
      auto value = splatFloat(c);
      if (!value || a.getType() != mul.getType())
        return false;
      factor = *value;
      other = a;
      return true;
    });
  return other;
}

} // namespace colossal::match

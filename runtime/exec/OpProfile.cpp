//===- OpProfile.cpp - per-op-kind time of the executor's instructions -------------===//
#include "colossal/runtime/OpProfile.h"

#include "colossal/runtime/Kernel.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace colossal::runtime {

namespace {
std::unique_ptr<OpProfile> &instance() {
  static std::unique_ptr<OpProfile> profile;
  return profile;
}
std::once_flag enabled;
}  // namespace

OpProfile *OpProfile::active() { return instance().get(); }

void OpProfile::enable() {
  std::call_once(enabled, [] { instance() = std::make_unique<OpProfile>(); });
}

void OpProfile::add(llvm::StringRef op, double seconds, double flops) {
  std::lock_guard<std::mutex> lock(mutex_);
  Row &r = rows_[op.str()];
  ++r.calls;
  r.seconds += seconds;
  r.flops += flops;
}

void OpProfile::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  rows_.clear();
}

double OpProfile::flopsOf(llvm::StringRef op, const KernelCall &c) {
  auto numel = [](const TensorRef &t) {
    double n = 1;
    for (int64_t d : t.shape) n *= static_cast<double>(d);
    return n;
  };
  if ((op == "matmul" || op == "linear") && !c.inputs.empty() && c.inputs[0].rank() >= 1 && !c.outputs.empty())
    return 2 * numel(c.outputs[0]) * static_cast<double>(c.inputs[0].shape.back());
  if (op == "gemm" && !c.inputs.empty() && c.inputs[0].rank() == 2 && !c.outputs.empty())
    return 2 * numel(c.outputs[0]) *
           static_cast<double>(c.attrInt("trans_a", 0) ? c.inputs[0].shape[0] : c.inputs[0].shape[1]);
  // q [B, Hq, Tq, D], k [B, Hkv, Tk, D]: q·kᵀ and P·v, 2·Tq·Tk·D each per head (D = Dv); the
  // backward recomputes q·kᵀ and forms dP, dV, dQ and dK: five such products.
  if ((op == "attention" || op == "attention_grad") && c.inputs.size() >= 2 && c.inputs[1].rank() == 4) {
    const double f = (op == "attention" ? 4 : 10) * numel(c.inputs[0]) * static_cast<double>(c.inputs[1].shape[2]);
    return c.attrInt("causal", 0) ? f / 2 : f;
  }
  return 0;
}

void OpProfile::print(llvm::raw_ostream &os, llvm::StringRef title) const {
  std::lock_guard<std::mutex> lock(mutex_);
  os << title << "\n";
  if (rows_.empty()) {
    os << "  (no instruction ran)\n";
    return;
  }
  std::vector<std::pair<std::string, Row>> rows(rows_.begin(), rows_.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  int64_t calls = 0;
  for (const auto &r : rows) {
    total += r.second.seconds;
    calls += r.second.calls;
  }
  os << llvm::format("  %-22s %8s %11s %7s %11s %9s\n", "op", "calls", "total ms", "share", "mean us", "GFLOP/s");
  for (const auto &[name, r] : rows) {
    os << llvm::format("  %-22s %8lld %11.3f %6.1f%% %11.1f ", name.c_str(), static_cast<long long>(r.calls),
                       r.seconds * 1e3, total > 0 ? 100 * r.seconds / total : 0.0, r.seconds * 1e6 / r.calls);
    if (r.flops > 0 && r.seconds > 0) os << llvm::format("%9.1f", r.flops / r.seconds / 1e9);
    else os << llvm::format("%9s", "-");
    os << "\n";
  }
  os << llvm::format("  %-22s %8lld %11.3f %6.1f%%\n", "all", static_cast<long long>(calls), total * 1e3, 100.0);
}

}  // namespace colossal::runtime

//===- PlanReport.cpp - the human-readable memory plan summary -------------------------------===//
#include "PlanReport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>

namespace colossal {

std::string formatBytes(uint64_t bytes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (bytes < 1024)
    os << bytes << " B";
  else if (bytes < (1ull << 20))
    os << llvm::format("%.1f KiB", bytes / 1024.0);
  else if (bytes < (1ull << 30))
    os << llvm::format("%.2f MiB", bytes / double(1ull << 20));
  else
    os << llvm::format("%.2f GiB", bytes / double(1ull << 30));
  return s;
}

namespace {
std::string timeName(uint32_t t, uint32_t endTime) {
  if (t == 0)
    return "in";
  if (t >= endTime)
    return "out";
  return std::to_string(t - 1);
}

/// Prints rows as columns padded to their widest cell; `rightAligned[c]` for numbers.
void printTable(llvm::ArrayRef<std::vector<std::string>> rows, llvm::ArrayRef<bool> rightAligned,
                llvm::raw_ostream &os) {
  std::vector<size_t> width(rightAligned.size(), 0);
  for (const auto &row : rows)
    for (size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  for (const auto &row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      std::string pad(width[c] - row[c].size(), ' ');
      line += "  ";
      line += rightAligned[c] ? pad + row[c] : row[c] + pad;
    }
    os << llvm::StringRef(line).rtrim() << "\n";
  }
}
} // namespace

void printPlanReport(const PlanSummary &s, llvm::raw_ostream &os) {
  os << "plan " << s.planPath;
  if (!s.weightsFile.empty())
    os << " (weights " << s.weightsFile << ")";
  os << "\n";
  printTable(
      {
          {"instructions", std::to_string(s.numInstructions), ""},
          {"buffers", std::to_string(s.numBuffers),
           std::to_string(s.buffers.size()) + " arena storages, " +
               std::to_string(s.numInPlace) + " in-place, " + std::to_string(s.numAliases) +
               " zero-copy aliases"},
          {"peak arena", formatBytes(s.arenaBytes), std::to_string(s.arenaBytes) + " bytes"},
          {"weights", formatBytes(s.weightBytes),
           std::to_string(s.weightBytes) + " bytes in " + std::to_string(s.numWeights) +
               " tensors"},
      },
      {false, true, false}, os);

  if (s.buffers.empty())
    return;
  std::vector<const ReportBuffer *> sorted;
  for (const ReportBuffer &b : s.buffers)
    sorted.push_back(&b);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ReportBuffer *a, const ReportBuffer *b) {
    if (a->bytes != b->bytes)
      return a->bytes > b->bytes;
    return a->offset < b->offset;
  });
  sorted.resize(std::min<size_t>(sorted.size(), 10));
  os << "largest arena buffers (live range in instruction indices):\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"name", "shape", "dtype", "size", "offset", "live", "shared"});
  for (const ReportBuffer *b : sorted) {
    std::string shape = "[";
    for (size_t i = 0; i < b->shape.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(b->shape[i]);
    shape += "]";
    rows.push_back({b->name, shape, b->dtype, formatBytes(b->bytes), std::to_string(b->offset),
                    timeName(b->start, s.endTime) + ".." + timeName(b->end, s.endTime),
                    b->shared ? "+" + std::to_string(b->shared) : ""});
  }
  printTable(rows, {false, false, false, true, true, false, false}, os);
}

} // namespace colossal

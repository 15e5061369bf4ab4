//===- PlanReport.cpp - the human-readable memory plan summary -------------------------------===//
#include "PlanReport.h"

#include "llvm/Support/FormatVariadic.h"

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

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// The 10 largest arena storages of `p`.
void printLargestBuffers(const ProgramSummary &p, llvm::StringRef title, llvm::raw_ostream &os) {
  if (p.buffers.empty())
    return;
  std::vector<const ReportBuffer *> sorted;
  for (const ReportBuffer &b : p.buffers)
    sorted.push_back(&b);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ReportBuffer *a, const ReportBuffer *b) {
    if (a->bytes != b->bytes)
      return a->bytes > b->bytes;
    return a->offset < b->offset;
  });
  sorted.resize(std::min<size_t>(sorted.size(), 10));
  os << title << " (live range in instruction indices):\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"name", "shape", "dtype", "size", "offset", "live", "shared"});
  for (const ReportBuffer *b : sorted)
    rows.push_back({b->name, shapeString(b->shape), b->dtype, formatBytes(b->bytes),
                    std::to_string(b->offset),
                    timeName(b->start, p.endTime) + ".." + timeName(b->end, p.endTime),
                    b->shared ? "+" + std::to_string(b->shared) : ""});
  printTable(rows, {false, false, false, true, true, false, false}, os);
}

std::string bytesCell(uint64_t bytes) { return std::to_string(bytes) + " bytes"; }

void printTrainReport(const PlanSummary &summary, llvm::raw_ostream &os) {
  // Buffers (BatchNorm's running statistics) are states the steps write but no one trains.
  PlanSummary s = summary;
  std::vector<ReportParam> buffers;
  llvm::erase_if(s.params, [&](const ReportParam &p) {
    if (p.buffer)
      buffers.push_back(p);
    return p.buffer;
  });
  uint64_t total = 0;
  for (const ReportParam &p : s.params)
    total += p.count;
  os << "trainable parameters: " << s.params.size() << " tensors, " << total << " elements\n";
  std::vector<std::vector<std::string>> rows;
  bool split = llvm::any_of(s.params, [](const ReportParam &p) { return !p.split.empty(); });
  if (split) { // tensor parallelism: global shapes, how each is split, each rank's shard
    rows.push_back({"name", "shape", "count", "split", "per rank"});
    for (const ReportParam &p : s.params)
      rows.push_back({p.name, shapeString(p.shape), std::to_string(p.count),
                      p.split.empty() ? "whole" : p.split, shapeString(p.localShape)});
    rows.push_back({"total", "", std::to_string(total), "", ""});
    printTable(rows, {false, false, true, false, false}, os);
  } else {
    rows.push_back({"name", "shape", "count"});
    for (const ReportParam &p : s.params)
      rows.push_back({p.name, shapeString(p.shape), std::to_string(p.count)});
    rows.push_back({"total", "", std::to_string(total)});
    printTable(rows, {false, false, true}, os);
  }
  if (!buffers.empty()) {
    os << "buffers (updated by train_step, not trained): " << buffers.size() << " (";
    llvm::interleave(buffers, os, [&](const ReportParam &p) { os << p.name << " " << shapeString(p.shape); }, ", ");
    os << ")\n";
  }
  if (!s.frozen.empty()) {
    os << "frozen parameters (read-only weights): " << s.frozen.size() << " (";
    llvm::interleave(s.frozen, os, ", ");
    os << ")\n";
  }
  if (!s.notTrained.empty()) {
    os << "not trained: " << s.notTrained.size() << " tensors (docs/training.md \"Which "
       << "initializers train\")\n";
    rows.clear();
    rows.push_back({"name", "shape", "why"});
    for (const ReportNotTrained &c : s.notTrained)
      rows.push_back({c.name, shapeString(c.shape), c.why});
    printTable(rows, {false, false, false}, os);
  }

  os << "programs (they run one at a time in one arena):\n";
  rows.clear();
  rows.push_back({"program", "instructions", "buffers", "arena", ""});
  const ProgramSummary *largest = nullptr;
  for (const ProgramSummary &p : s.programs) {
    rows.push_back({p.name, std::to_string(p.numInstructions), std::to_string(p.numBuffers),
                    formatBytes(p.arenaBytes), bytesCell(p.arenaBytes)});
    if (!largest || p.arenaBytes > largest->arenaBytes)
      largest = &p;
  }
  printTable(rows, {false, true, true, true, false}, os);

  uint64_t arena = largest ? largest->arenaBytes : 0;
  uint64_t peak = s.paramBytes + s.gradBytes + s.optimizerBytes + s.readOnlyWeightBytes + arena;
  if (!s.offload.mode.empty())
    peak = s.peakBytes;
  os << "memory:\n";
  printTable(
      {
          {"params", formatBytes(s.paramBytes), bytesCell(s.paramBytes)},
          {"grads", formatBytes(s.gradBytes), bytesCell(s.gradBytes)},
          {"optimizer state", formatBytes(s.optimizerBytes), bytesCell(s.optimizerBytes)},
          {"read-only weights", formatBytes(s.readOnlyWeightBytes),
           bytesCell(s.readOnlyWeightBytes) + " in " + std::to_string(s.numReadOnlyWeights) +
               " tensors (frozen parameters, constants)"},
          {"activations", formatBytes(arena),
           bytesCell(arena) + (largest ? " (largest arena: " + largest->name + ")" : "")},
          {"peak total", formatBytes(peak),
           bytesCell(peak) + (s.offload.mode.empty()
                                  ? " (params + grads + optimizer state + read-only weights + activations)"
                                  : " (states kept in memory + read-only weights + activations + the most "
                                    "offloaded bytes resident at once)")},
      },
      {false, true, false}, os);
  if (!s.offload.mode.empty()) {
    const ReportOffload &o = s.offload;
    os << "offload: " << o.mode << ", " << formatBytes(o.offloadedBytes) << " in " << o.chunks
       << " chunks in " << o.dir << "/rank-R.bin; at most " << formatBytes(o.residentPeakBytes)
       << " of them resident at once; per step " << formatBytes(o.readPerStep) << " read, "
       << formatBytes(o.writtenPerStep) << " written back\n";
  }
  if (s.budgetBytes)
    os << "memory budget: " << formatBytes(s.budgetBytes) << " per rank (" << s.budgetBytes
       << " bytes); the plan needs " << formatBytes(peak) << "\n";
  if (s.minimumBudgetBytes)
    os << "smallest budget with recompute: " << formatBytes(s.minimumBudgetBytes) << " ("
       << s.minimumBudgetBytes << " bytes)\n";
  if (!s.recompute.mode.empty()) {
    const ReportRecompute &r = s.recompute;
    os << "recompute: " << r.mode << ", " << r.units << " units, " << r.ops
       << " ops recomputed in the backward part of train_step, "
       << llvm::formatv("{0:f2}", double(r.flops) / 1e6) << " MFLOP per microbatch (";
    os << llvm::formatv("{0:f2}", r.forwardFlops ? double(r.flops) / double(r.forwardFlops) : 0.0)
       << " of a forward)\n";
  }
  if (largest)
    printLargestBuffers(*largest, "largest arena buffers of " + largest->name, os);
}
} // namespace

void printPlanReport(const PlanSummary &s, llvm::raw_ostream &os) {
  os << "plan " << s.planPath;
  if (!s.weightsFile.empty())
    os << " (weights " << s.weightsFile << ")";
  os << "\n";
  if (s.train)
    return printTrainReport(s, os);
  ProgramSummary empty;
  const ProgramSummary &p = s.programs.empty() ? empty : s.programs.front();
  printTable(
      {
          {"instructions", std::to_string(p.numInstructions), ""},
          {"buffers", std::to_string(p.numBuffers),
           std::to_string(p.buffers.size()) + " arena storages, " +
               std::to_string(p.numInPlace) + " in-place, " + std::to_string(p.numAliases) +
               " zero-copy aliases"},
          {"peak arena", formatBytes(p.arenaBytes), std::to_string(p.arenaBytes) + " bytes"},
          {"weights", formatBytes(s.weightBytes),
           std::to_string(s.weightBytes) + " bytes in " + std::to_string(s.numWeights) +
               " tensors"},
      },
      {false, true, false}, os);
  printLargestBuffers(p, "largest arena buffers", os);
}

} // namespace colossal

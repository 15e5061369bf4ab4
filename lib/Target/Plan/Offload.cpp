//===- Offload.cpp - which persistent tensors live in the slower tier, and when they move ---===//
#include "Offload.h"

#include "colossal/runtime/DType.h"

#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <map>
#include <set>

namespace colossal {

namespace {

uint64_t stateBytes(const plan::StateTensor &st) {
  uint64_t count = 1;
  for (int64_t d : st.shape())
    count *= static_cast<uint64_t>(d);
  return count * runtime::dtypeSize(static_cast<runtime::DType>(st.dtype()));
}

uint64_t alignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/// State name -> chunk index, and the chunks.
struct Chunking {
  llvm::StringMap<uint32_t> chunkOf;
  std::vector<plan::Offload::Chunk> chunks;
  uint64_t residentStateBytes = 0;
};

Chunking chunkStates(const CollectedModule &module, llvm::StringRef mode) {
  Chunking out;
  plan::Offload::Chunk current;
  plan::StateTensor::Role currentRole = plan::StateTensor::PARAM;
  auto flush = [&] {
    if (current.states_size() == 0)
      return;
    current.set_bytes(alignUp(current.bytes(), kTierPage));
    for (const std::string &name : current.states())
      out.chunkOf[name] = static_cast<uint32_t>(out.chunks.size());
    out.chunks.push_back(current);
    current.Clear();
  };
  for (const plan::StateTensor &st : module.states) {
    const uint64_t bytes = stateBytes(st);
    if (!isOffloaded(st, mode)) {
      out.residentStateBytes += bytes;
      continue;
    }
    const uint64_t at = alignUp(current.bytes(), 64);
    if (current.states_size() > 0 && (st.role() != currentRole || at + bytes > kChunkBytes))
      flush();
    currentRole = st.role();
    current.set_bytes(alignUp(current.bytes(), 64) + bytes);
    current.add_states(st.name());
  }
  flush();
  return out;
}

/// Per chunk, the instructions of `program` that read or write one of its states, ascending,
/// and whether each writes it.
std::map<uint32_t, std::vector<std::pair<uint32_t, bool>>> chunkUses(const CollectedProgram &program,
                                                                     const Chunking &chunking) {
  std::map<uint32_t, std::vector<std::pair<uint32_t, bool>>> uses;
  for (uint32_t i = 0; i < program.instructions.size(); ++i) {
    const PendingInstruction &inst = program.instructions[i];
    std::map<uint32_t, bool> here;
    auto note = [&](uint32_t buffer, bool write) {
      const Tensor &t = program.tensors[buffer];
      if (!t.isState)
        return;
      auto it = chunking.chunkOf.find(t.stateName);
      if (it != chunking.chunkOf.end())
        here[it->second] |= write;
    };
    for (uint32_t b : inst.inputs)
      note(b, false);
    for (uint32_t b : inst.outputs)
      note(b, true);
    for (auto [c, write] : here)
      uses[c].push_back({i, write});
  }
  return uses;
}

} // namespace

bool isOffloaded(const plan::StateTensor &st, llvm::StringRef mode) {
  if (mode == "params")
    return true;
  return mode == "optimizer" && st.role() == plan::StateTensor::OPTIMIZER;
}

std::vector<uint32_t> candidateGaps(const CollectedModule &module, llvm::StringRef mode) {
  Chunking chunking = chunkStates(module, mode);
  std::set<uint32_t> gaps{0};
  for (const CollectedProgram &program : module.programs)
    for (auto &[c, list] : chunkUses(program, chunking))
      for (size_t k = 1; k < list.size(); ++k)
        gaps.insert(list[k].first - list[k - 1].first);
  return {gaps.begin(), gaps.end()};
}

OffloadSchedule planOffload(const CollectedModule &module, llvm::StringRef mode, uint32_t gap) {
  // A residency may not end before the next one's prefetch begins.
  gap = std::max(gap, kPrefetchDistance + 1);
  Chunking chunking = chunkStates(module, mode);
  OffloadSchedule out;
  out.chunks = chunking.chunks;
  out.residentStateBytes = chunking.residentStateBytes;
  out.gap = gap;
  for (const plan::Offload::Chunk &c : out.chunks)
    out.offloadedBytes += c.bytes();
  for (const CollectedProgram &program : module.programs) {
    const uint32_t n = static_cast<uint32_t>(program.instructions.size());
    std::vector<plan::Program::TierAction> actions;
    std::vector<int64_t> delta(n + 2, 0);
    uint64_t read = 0, written = 0;
    for (auto &[c, list] : chunkUses(program, chunking)) {
      const uint64_t bytes = out.chunks[c].bytes();
      size_t k = 0;
      while (k < list.size()) {
        size_t last = k;
        bool dirty = list[k].second;
        while (last + 1 < list.size() && list[last + 1].first - list[last].first <= gap) {
          ++last;
          dirty |= list[last].second;
        }
        const uint32_t from = list[k].first >= kPrefetchDistance ? list[k].first - kPrefetchDistance : 0;
        const uint32_t to = list[last].first + 1; // evicted before this instruction
        plan::Program::TierAction fetch, evict;
        fetch.set_before(from);
        fetch.set_kind(plan::Program::TierAction::PREFETCH);
        fetch.set_chunk(c);
        evict.set_before(to);
        evict.set_kind(plan::Program::TierAction::EVICT);
        evict.set_chunk(c);
        actions.push_back(fetch);
        actions.push_back(evict);
        delta[from] += static_cast<int64_t>(bytes);
        delta[to] -= static_cast<int64_t>(bytes);
        read += bytes;
        written += dirty ? bytes : 0;
        k = last + 1;
      }
    }
    // Execution order: by position, evictions before prefetches at one position.
    std::stable_sort(actions.begin(), actions.end(), [](const auto &a, const auto &b) {
      if (a.before() != b.before())
        return a.before() < b.before();
      return a.kind() == plan::Program::TierAction::EVICT && b.kind() != plan::Program::TierAction::EVICT;
    });
    int64_t current = 0, peak = 0;
    for (int64_t d : delta)
      peak = std::max(peak, current += d);
    out.actions.push_back(std::move(actions));
    out.residentPeak.push_back(static_cast<uint64_t>(peak));
    out.bytesRead.push_back(read);
    out.bytesWritten.push_back(written);
  }
  return out;
}

OffloadSchedule chooseOffload(const CollectedModule &module, llvm::StringRef mode, uint64_t fixedBytes,
                              uint64_t budget) {
  std::vector<uint32_t> gaps = candidateGaps(module, mode);
  OffloadSchedule best = planOffload(module, mode, 0);
  if (budget == 0)
    return best;
  auto peak = [&](const OffloadSchedule &s) {
    uint64_t resident = 0;
    for (uint64_t r : s.residentPeak)
      resident = std::max(resident, r);
    return fixedBytes + s.residentStateBytes + resident;
  };
  // The resident peak grows with the gap: the largest gap that fits.
  size_t lo = 0, hi = gaps.size();
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    OffloadSchedule s = planOffload(module, mode, gaps[mid]);
    if (peak(s) <= budget) {
      best = std::move(s);
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return best;
}

} // namespace colossal

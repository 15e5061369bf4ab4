//===- MemoryPlanner.cpp - liveness, aliasing, in-place and arena offsets ------------------===//
#include "MemoryPlanner.h"

#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>

namespace colossal::memory {

namespace {
constexpr uint32_t kUndefined = std::numeric_limits<uint32_t>::max();

uint64_t aligned(uint64_t bytes) { return llvm::alignTo(bytes, kArenaAlignment); }

/// Online best-fit over time: returns the arena size, fills offsets.
uint64_t placeOnlineBestFit(llvm::MutableArrayRef<Interval> ivs) {
  std::vector<size_t> order(ivs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (ivs[a].start != ivs[b].start)
      return ivs[a].start < ivs[b].start;
    return aligned(ivs[a].bytes) > aligned(ivs[b].bytes);
  });

  std::map<uint64_t, uint64_t> freeRanges; // offset -> size; all below `top`
  uint64_t top = 0, peak = 0;
  auto release = [&](const Interval &iv) {
    uint64_t off = iv.offset, size = aligned(iv.bytes);
    auto next = freeRanges.lower_bound(off);
    if (next != freeRanges.end() && next->first == off + size) {
      size += next->second;
      next = freeRanges.erase(next);
    }
    if (next != freeRanges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        off = prev->first;
        size += prev->second;
        freeRanges.erase(prev);
      }
    }
    if (off + size == top)
      top = off; // the free range is the top of the arena: shrink instead of keeping it
    else
      freeRanges[off] = size;
  };

  using Live = std::pair<uint32_t, size_t>; // (end, interval)
  std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live;
  for (size_t i : order) {
    Interval &iv = ivs[i];
    while (!live.empty() && live.top().first < iv.start) {
      release(ivs[live.top().second]);
      live.pop();
    }
    uint64_t size = aligned(iv.bytes);
    if (size == 0) {
      iv.offset = 0;
      continue;
    }
    auto best = freeRanges.end();
    for (auto it = freeRanges.begin(); it != freeRanges.end(); ++it)
      if (it->second >= size && (best == freeRanges.end() || it->second < best->second))
        best = it;
    if (best != freeRanges.end()) {
      iv.offset = best->first;
      uint64_t rest = best->second - size;
      freeRanges.erase(best);
      if (rest)
        freeRanges[iv.offset + size] = rest;
    } else if (!freeRanges.empty() &&
               std::prev(freeRanges.end())->first + std::prev(freeRanges.end())->second == top) {
      // The highest free range touches the top: grow the arena from there.
      iv.offset = std::prev(freeRanges.end())->first;
      freeRanges.erase(std::prev(freeRanges.end()));
      top = iv.offset + size;
    } else {
      iv.offset = top;
      top += size;
    }
    peak = std::max(peak, top);
    live.push({iv.end, i});
  }
  return peak;
}

/// Offline greedy by size with best-fit gaps: returns the arena size, fills offsets.
uint64_t placeGreedyBySize(llvm::MutableArrayRef<Interval> ivs) {
  std::vector<size_t> order(ivs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (aligned(ivs[a].bytes) != aligned(ivs[b].bytes))
      return aligned(ivs[a].bytes) > aligned(ivs[b].bytes);
    return ivs[a].start < ivs[b].start;
  });
  std::vector<size_t> placed; // sorted by offset
  uint64_t peak = 0;
  std::vector<size_t> overlapping;
  for (size_t i : order) {
    Interval &iv = ivs[i];
    uint64_t size = aligned(iv.bytes);
    if (size == 0) {
      iv.offset = 0;
      continue;
    }
    overlapping.clear();
    for (size_t p : placed)
      if (ivs[p].start <= iv.end && iv.start <= ivs[p].end)
        overlapping.push_back(p);
    uint64_t cursor = 0, bestOffset = 0, bestGap = std::numeric_limits<uint64_t>::max();
    bool found = false;
    for (size_t p : overlapping) {
      if (ivs[p].offset > cursor) {
        uint64_t gap = ivs[p].offset - cursor;
        if (gap >= size && gap < bestGap) {
          bestGap = gap;
          bestOffset = cursor;
          found = true;
        }
      }
      cursor = std::max(cursor, ivs[p].offset + aligned(ivs[p].bytes));
    }
    iv.offset = found ? bestOffset : cursor;
    peak = std::max(peak, iv.offset + size);
    auto pos = std::upper_bound(placed.begin(), placed.end(), i, [&](size_t a, size_t b) {
      return ivs[a].offset < ivs[b].offset;
    });
    placed.insert(pos, i);
  }
  return peak;
}
} // namespace

uint64_t assignOffsets(llvm::MutableArrayRef<Interval> intervals) {
  std::vector<Interval> byOnline(intervals.begin(), intervals.end());
  uint64_t online = placeOnlineBestFit(byOnline);
  uint64_t bySize = placeGreedyBySize(intervals);
  if (online < bySize) {
    std::copy(byOnline.begin(), byOnline.end(), intervals.begin());
    return online;
  }
  return bySize;
}

std::optional<std::pair<size_t, size_t>> findConflict(llvm::ArrayRef<Interval> ivs,
                                                      uint64_t arenaBytes) {
  std::vector<size_t> order;
  for (size_t i = 0; i < ivs.size(); ++i) {
    if (ivs[i].offset % kArenaAlignment != 0 || ivs[i].offset + ivs[i].bytes > arenaBytes ||
        ivs[i].end < ivs[i].start)
      return std::make_pair(i, i);
    if (ivs[i].bytes)
      order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ivs[a].start < ivs[b].start; });
  // Sweep over time; the live set is kept pairwise disjoint, so checking the neighbours by offset
  // of each newcomer finds any overlap.
  std::multimap<uint64_t, size_t> live; // offset -> interval
  using End = std::pair<uint32_t, size_t>;
  std::priority_queue<End, std::vector<End>, std::greater<End>> ends;
  auto overlaps = [&](size_t a, size_t b) {
    return ivs[a].offset < ivs[b].offset + ivs[b].bytes &&
           ivs[b].offset < ivs[a].offset + ivs[a].bytes;
  };
  for (size_t i : order) {
    while (!ends.empty() && ends.top().first < ivs[i].start) {
      size_t gone = ends.top().second;
      ends.pop();
      auto range = live.equal_range(ivs[gone].offset);
      for (auto it = range.first; it != range.second; ++it)
        if (it->second == gone) {
          live.erase(it);
          break;
        }
    }
    auto next = live.lower_bound(ivs[i].offset);
    if (next != live.end() && overlaps(i, next->second))
      return std::make_pair(next->second, i);
    if (next != live.begin() && overlaps(i, std::prev(next)->second))
      return std::make_pair(std::prev(next)->second, i);
    live.emplace(ivs[i].offset, i);
    ends.push({ivs[i].end, i});
  }
  return std::nullopt;
}

MemoryPlan planMemory(llvm::ArrayRef<Value> values, llvm::ArrayRef<Step> steps,
                      llvm::ArrayRef<uint32_t> outputs) {
  MemoryPlan plan;
  plan.endTime = static_cast<uint32_t>(steps.size()) + 1;
  plan.storageOf.assign(values.size(), kUndefined);
  plan.inPlace.assign(steps.size(), false);
  std::vector<llvm::SmallVector<uint32_t, 2>> members;

  // Storage per value: aliases join their target's storage.
  for (uint32_t v = 0; v < values.size(); ++v) {
    const Value &value = values[v];
    if (value.aliasOf >= 0 && static_cast<uint32_t>(value.aliasOf) < v) {
      uint32_t s = plan.storageOf[value.aliasOf];
      plan.storageOf[v] = s;
      members[s].push_back(v);
      continue;
    }
    Storage storage;
    storage.root = v;
    storage.bytes = value.bytes;
    storage.isWeight = value.isWeight;
    storage.isState = value.isState;
    storage.hasInput = value.isInput;
    storage.start = value.isInput || value.isWeight || value.isState ? 0 : kUndefined;
    plan.storageOf[v] = static_cast<uint32_t>(plan.storages.size());
    plan.storages.push_back(storage);
    members.push_back({v});
  }

  // Liveness: definition and last use per storage (an alias's uses extend its root's life).
  for (uint32_t k = 0; k < steps.size(); ++k) {
    uint32_t t = k + 1;
    for (uint32_t in : steps[k].inputs) {
      Storage &s = plan.storages[plan.storageOf[in]];
      s.end = std::max(s.end, t);
    }
    for (uint32_t out : steps[k].outputs) {
      Storage &s = plan.storages[plan.storageOf[out]];
      s.start = std::min(s.start, t);
    }
  }
  for (uint32_t out : outputs) {
    Storage &s = plan.storages[plan.storageOf[out]];
    s.end = plan.endTime;
    s.hasOutput = true;
  }
  for (Storage &s : plan.storages) {
    if (s.start == kUndefined)
      s.start = 0; // never defined (a caller bug): treat as live from the start
    s.end = std::max(s.end, s.start);
  }

  // In-place: an in-place-safe step's output takes its first input's storage when that storage
  // dies at this step. Merged storages keep the union of their (adjacent) live intervals.
  for (uint32_t k = 0; k < steps.size(); ++k) {
    const Step &step = steps[k];
    if (!step.inPlaceSafe || step.outputs.size() != 1 || step.inputs.empty())
      continue;
    uint32_t t = k + 1;
    uint32_t si = plan.storageOf[step.inputs[0]], so = plan.storageOf[step.outputs[0]];
    Storage &in = plan.storages[si], &out = plan.storages[so];
    if (si == so || in.isWeight || out.isWeight || in.isState || out.isState || in.hasInput ||
        in.hasOutput || in.end != t ||
        out.start != t || in.bytes != out.bytes ||
        values[in.root].dtype != values[step.outputs[0]].dtype)
      continue;
    for (uint32_t v : members[so]) {
      plan.storageOf[v] = si;
      members[si].push_back(v);
    }
    members[so].clear();
    in.end = std::max(in.end, out.end);
    in.hasOutput |= out.hasOutput;
    out.merged = true;
    plan.inPlace[k] = true;
  }

  // Offsets.
  std::vector<Interval> intervals;
  std::vector<uint32_t> ids;
  for (uint32_t s = 0; s < plan.storages.size(); ++s) {
    if (!plan.isArena(s))
      continue;
    const Storage &st = plan.storages[s];
    intervals.push_back({st.bytes, st.start, st.end, 0});
    ids.push_back(s);
  }
  plan.arenaBytes = assignOffsets(intervals);
  for (size_t i = 0; i < ids.size(); ++i)
    plan.storages[ids[i]].offset = intervals[i].offset;
  return plan;
}

} // namespace colossal::memory

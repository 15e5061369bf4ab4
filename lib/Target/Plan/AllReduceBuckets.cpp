//===- AllReduceBuckets.cpp - Fuses in-place all_reduces into buckets -----------------------===//
#include "AllReduceBuckets.h"

#include "plan.pb.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace colossal {

namespace {

std::string attrString(const plan::Instruction &inst, const char *name) {
  auto it = inst.attrs().find(name);
  return it == inst.attrs().end() ? std::string() : it->second.s();
}

/// An instruction that may join a bucket: an all_reduce with one input that is its output.
bool isInPlaceAllReduce(const plan::Program &program, const plan::Instruction &inst) {
  return inst.op() == "all_reduce" && inst.inputs_size() == 1 && inst.outputs_size() == 1 &&
         inst.inputs(0) == inst.outputs(0) &&
         inst.inputs(0) < static_cast<uint32_t>(program.buffers_size());
}

/// The buffers of one bucket being built: ids, STATE names and ARENA byte ranges, to refuse a
/// buffer that aliases one already in it.
struct Members {
  std::set<uint32_t> ids;
  std::set<std::string> states;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [offset, offset + size) of ARENA buffers

  bool overlaps(const plan::Buffer &b) const {
    if (ids.count(b.id()))
      return true;
    if (b.storage() == plan::STATE)
      return states.count(b.state_name()) > 0;
    if (b.storage() == plan::ARENA)
      for (const auto &[lo, hi] : ranges)
        if (b.offset() < hi && lo < b.offset() + b.size_bytes())
          return true;
    return false;
  }
  void add(const plan::Buffer &b) {
    ids.insert(b.id());
    if (b.storage() == plan::STATE)
      states.insert(b.state_name());
    else if (b.storage() == plan::ARENA)
      ranges.emplace_back(b.offset(), b.offset() + b.size_bytes());
  }
};

} // namespace

int bucketAllReduces(plan::Program &program, uint64_t capBytes) {
  if (capBytes == 0)
    return 0;
  google::protobuf::RepeatedPtrField<plan::Instruction> out;
  const int n = program.instructions_size();
  int removed = 0;
  for (int i = 0; i < n;) {
    const plan::Instruction &first = program.instructions(i);
    if (!isInPlaceAllReduce(program, first)) {
      *out.Add() = first;
      ++i;
      continue;
    }
    const plan::Buffer &fb = program.buffers(first.inputs(0));
    const std::string axes = attrString(first, "axes"), reduction = attrString(first, "reduction");
    Members members;
    members.add(fb);
    uint64_t bytes = fb.size_bytes();
    int j = i + 1;
    for (; j < n; ++j) {
      const plan::Instruction &next = program.instructions(j);
      if (!isInPlaceAllReduce(program, next) || attrString(next, "axes") != axes ||
          attrString(next, "reduction") != reduction)
        break;
      const plan::Buffer &b = program.buffers(next.inputs(0));
      if (b.dtype() != fb.dtype() || members.overlaps(b) || bytes + b.size_bytes() > capBytes)
        break;
      members.add(b);
      bytes += b.size_bytes();
    }
    if (j - i == 1) {
      *out.Add() = first;
    } else {
      plan::Instruction *bucket = out.Add();
      *bucket = first;
      for (int k = i + 1; k < j; ++k) {
        uint32_t id = program.instructions(k).inputs(0);
        bucket->add_inputs(id);
        bucket->add_outputs(id);
      }
      bucket->set_loc("bucket of " + std::to_string(j - i) + " (" + std::to_string(bytes) +
                      " bytes): " + first.loc() + " ... " + program.instructions(j - 1).loc());
      removed += j - i - 1;
    }
    i = j;
  }
  program.mutable_instructions()->Swap(&out);
  return removed;
}

} // namespace colossal

//===- AllReduceBucketsTest.cpp - Gradient buckets in the plan (lib/Target/Plan) -------------===//
//
// bucketAllReduces() on hand-built programs: which consecutive all_reduces are fused, against the
// greedy rule written out by hand for each case (docs/parallelism.md "Gradient buckets").
//
//===----------------------------------------------------------------------------------------===//
#include "lib/Target/Plan/AllReduceBuckets.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

namespace plan = colossal::plan;

namespace {

/// A program whose buffer i is a STATE buffer "s<i>" of `bytes[i]` bytes (float32 unless `f64`).
plan::Program program(const std::vector<uint64_t> &bytes, const std::vector<bool> &f64 = {}) {
  plan::Program p;
  p.set_name("optimizer_step");
  for (size_t i = 0; i < bytes.size(); ++i) {
    plan::Buffer *b = p.add_buffers();
    b->set_id(i);
    bool wide = i < f64.size() && f64[i];
    b->set_dtype(wide ? plan::F64 : plan::F32);
    b->add_shape(bytes[i] / (wide ? 8 : 4));
    b->set_size_bytes(bytes[i]);
    b->set_storage(plan::STATE);
    b->set_state_name("s" + std::to_string(i));
  }
  return p;
}

void allReduce(plan::Program &p, uint32_t in, uint32_t out, const std::string &axes = "dp",
               const std::string &reduction = "sum") {
  plan::Instruction *inst = p.add_instructions();
  inst->set_op("all_reduce");
  inst->add_inputs(in);
  inst->add_outputs(out);
  (*inst->mutable_attrs())["axes"].set_s(axes);
  (*inst->mutable_attrs())["reduction"].set_s(reduction);
  inst->set_loc("g" + std::to_string(in));
}

/// The instructions as "op(in,in,...)" strings.
std::vector<std::string> shape(const plan::Program &p) {
  std::vector<std::string> out;
  for (const plan::Instruction &inst : p.instructions()) {
    std::string s = inst.op() + "(";
    for (int i = 0; i < inst.inputs_size(); ++i) s += (i ? "," : "") + std::to_string(inst.inputs(i));
    s += ")";
    bool inPlace = inst.inputs_size() == inst.outputs_size();
    for (int i = 0; inPlace && i < inst.inputs_size(); ++i) inPlace = inst.inputs(i) == inst.outputs(i);
    if (!inPlace) s += "->other";
    out.push_back(s);
  }
  return out;
}

TEST(AllReduceBuckets, GreedyUpToTheCap) {
  // Sizes 4, 12, 40, 8, 100 with a 60-byte cap: 4+12+40 = 56 fits, +8 = 64 does not; 8+100 does
  // not; 100 > cap alone.
  plan::Program p = program({4, 12, 40, 8, 100});
  for (uint32_t i = 0; i < 5; ++i) allReduce(p, i, i);
  EXPECT_EQ(colossal::bucketAllReduces(p, 60), 2);
  EXPECT_EQ(shape(p), (std::vector<std::string>{"all_reduce(0,1,2)", "all_reduce(3)", "all_reduce(4)"}));
  EXPECT_EQ(p.instructions(0).loc(), "bucket of 3 (56 bytes): g0 ... g2");
  EXPECT_EQ(p.instructions(0).attrs().at("axes").s(), "dp");
  EXPECT_EQ(p.instructions(0).attrs().at("reduction").s(), "sum");
  EXPECT_EQ(p.instructions(1).loc(), "g3");
  // Exactly the cap fits: 4+12+40+8 = 64.
  plan::Program q = program({4, 12, 40, 8, 100});
  for (uint32_t i = 0; i < 5; ++i) allReduce(q, i, i);
  EXPECT_EQ(colossal::bucketAllReduces(q, 64), 3);
  EXPECT_EQ(shape(q), (std::vector<std::string>{"all_reduce(0,1,2,3)", "all_reduce(4)"}));
  // A large cap: one bucket.
  plan::Program r = program({4, 12, 40, 8, 100});
  for (uint32_t i = 0; i < 5; ++i) allReduce(r, i, i);
  EXPECT_EQ(colossal::bucketAllReduces(r, 25 << 20), 4);
  EXPECT_EQ(shape(r), (std::vector<std::string>{"all_reduce(0,1,2,3,4)"}));
}

TEST(AllReduceBuckets, CapZeroChangesNothing) {
  plan::Program p = program({4, 8, 12});
  for (uint32_t i = 0; i < 3; ++i) allReduce(p, i, i);
  std::string before = p.SerializeAsString();
  EXPECT_EQ(colossal::bucketAllReduces(p, 0), 0);
  EXPECT_EQ(p.SerializeAsString(), before);
}

TEST(AllReduceBuckets, RunsBreakOnAxesReductionDtypeOtherOpsAndCopies) {
  // 0,1: dp sum | 2: tp sum | 3: dp max | 4: float64 | 5,6: dp sum | add | 7,8 | 9 -> 10 (not in
  // place) | 11, 11 again (the same buffer twice is never one bucket).
  plan::Program p = program({4, 4, 4, 4, 8, 4, 4, 4, 4, 4, 4, 4},
                            {false, false, false, false, true});
  allReduce(p, 0, 0);
  allReduce(p, 1, 1);
  allReduce(p, 2, 2, "tp");
  allReduce(p, 3, 3, "dp", "max");
  allReduce(p, 4, 4);
  allReduce(p, 5, 5);
  allReduce(p, 6, 6);
  plan::Instruction *add = p.add_instructions();
  add->set_op("add");
  add->add_inputs(5);
  add->add_inputs(6);
  add->add_outputs(7);
  allReduce(p, 7, 7);
  allReduce(p, 8, 8);
  allReduce(p, 9, 10);
  allReduce(p, 11, 11);
  allReduce(p, 11, 11);
  EXPECT_EQ(colossal::bucketAllReduces(p, 1024), 3);
  EXPECT_EQ(shape(p), (std::vector<std::string>{"all_reduce(0,1)", "all_reduce(2)", "all_reduce(3)",
                                                "all_reduce(4)", "all_reduce(5,6)", "add(5,6)->other",
                                                "all_reduce(7,8)", "all_reduce(9)->other", "all_reduce(11)",
                                                "all_reduce(11)"}));
}

TEST(AllReduceBuckets, OverlappingArenaBuffersStayApart) {
  // Arena buffers: 0 = [0, 64), 1 = [32, 96) overlaps 0, 2 = [128, 192) does not.
  plan::Program p;
  const uint64_t offsets[] = {0, 32, 128};
  for (uint32_t i = 0; i < 3; ++i) {
    plan::Buffer *b = p.add_buffers();
    b->set_id(i);
    b->set_dtype(plan::F32);
    b->add_shape(16);
    b->set_size_bytes(64);
    b->set_storage(plan::ARENA);
    b->set_offset(offsets[i]);
  }
  for (uint32_t i = 0; i < 3; ++i) allReduce(p, i, i, "tp");
  EXPECT_EQ(colossal::bucketAllReduces(p, 1024), 1);
  EXPECT_EQ(shape(p), (std::vector<std::string>{"all_reduce(0)", "all_reduce(1,2)"}));
}

}  // namespace

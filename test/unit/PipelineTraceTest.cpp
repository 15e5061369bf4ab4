//===- PipelineTraceTest.cpp - writeChromeTrace on hand-made rank events ---------------------===//
//
// The trace of two pipeline groups of two stages (pp=2 x dp=2), one step of one microbatch, with a
// third stage in group 0 whose backward also sends to stage 0 (a tied parameter's gradient): the
// JSON parses; a flow joins each send to the receive of the same direction and microbatch on each
// stage it reaches, within its group only; a rank's clock offset moves its times; the counter
// follows savedBytes; a plan without a pipeline gives null microbatch and chunk to optimizer_step;
// ranks running several stages (interleaved) get "F0.2" names and flows matched by stage.
//
//===----------------------------------------------------------------------------------------===//
#include "train/PipelineTrace.h"

#include "llvm/Support/JSON.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace colossal::runtime;
using Kind = TraceEvent::Kind;

namespace {

TraceEvent ev(Kind k, int64_t mb, int64_t stage, double start, double end, int64_t saved = -1) {
  TraceEvent e;
  e.kind = k;
  e.microbatch = mb;
  e.stage = stage;
  e.start = start;
  e.end = end;
  e.savedBytes = saved;
  return e;
}

RankTrace rank(int64_t r, int64_t stage, int64_t group, std::vector<uint32_t> fwd, std::vector<uint32_t> bwd,
               std::vector<TraceEvent> events, double offset = 0) {
  RankTrace t;
  t.rank = r;
  t.stage = stage;
  t.group = group;
  t.label = "rank " + std::to_string(r);
  if (!fwd.empty()) t.sendPeers[0][stage] = std::move(fwd);
  if (!bwd.empty()) t.sendPeers[1][stage] = std::move(bwd);
  t.events = std::move(events);
  t.clockOffset = offset;
  return t;
}

llvm::json::Array events(const std::string &text) {
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(text);
  EXPECT_TRUE(static_cast<bool>(v)) << (v ? "" : llvm::toString(v.takeError()));
  if (!v) return {};
  const llvm::json::Array *a = v->getAsObject()->getArray("traceEvents");
  EXPECT_NE(a, nullptr);
  return a ? *a : llvm::json::Array();
}

std::string write(const std::vector<RankTrace> &ranks, int64_t pipelineRanks) {
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::json::Object other;
  other["test"] = true;
  writeChromeTrace(os, ranks, pipelineRanks, /*origin=*/100.0, other);
  return out;
}

} // namespace

TEST(PipelineTrace, FlowsJoinSendsToReceivesWithinTheirGroup) {
  // Group 0: stages 0, 1, 2 on ranks 0, 1, 2 (stage 2's backward also reaches stage 0).
  // Group 1: stages 0, 1 on ranks 3, 4, rank 4's clock 0.5 s ahead.
  std::vector<RankTrace> ranks = {
      rank(0, 0, 0, {1}, {},
           {ev(Kind::Forward, 0, 0, 100.0, 100.1, 10), ev(Kind::SendForward, 0, 0, 100.1, 100.11, 10),
            ev(Kind::RecvBackward, 0, 0, 100.11, 100.5, 10), ev(Kind::Backward, 0, 0, 100.5, 100.6, 0)}),
      rank(1, 1, 0, {2}, {0},
           {ev(Kind::RecvForward, 0, 1, 100.0, 100.12, 0), ev(Kind::Forward, 0, 1, 100.12, 100.2, 20),
            ev(Kind::SendForward, 0, 1, 100.2, 100.21, 20), ev(Kind::RecvBackward, 0, 1, 100.21, 100.4, 20),
            ev(Kind::Backward, 0, 1, 100.4, 100.45, 0), ev(Kind::SendBackward, 0, 1, 100.45, 100.46, 0)}),
      rank(2, 2, 0, {}, {0, 1},
           {ev(Kind::RecvForward, 0, 2, 100.0, 100.22, 0), ev(Kind::Forward, 0, 2, 100.22, 100.3, 0),
            ev(Kind::Backward, 0, 2, 100.3, 100.35, 0), ev(Kind::SendBackward, 0, 2, 100.35, 100.36, 0)}),
      rank(3, 0, 1, {1}, {},
           {ev(Kind::Forward, 0, 0, 100.0, 100.1, 10), ev(Kind::SendForward, 0, 0, 100.1, 100.11, 10),
            ev(Kind::RecvBackward, 0, 0, 100.11, 100.5, 10), ev(Kind::Backward, 0, 0, 100.5, 100.6, 0)}),
      rank(4, 1, 1, {}, {0},
           {ev(Kind::RecvForward, 0, 1, 100.5, 100.62, 0), ev(Kind::Forward, 0, 1, 100.62, 100.7, 0),
            ev(Kind::Backward, 0, 1, 100.7, 100.8, 0), ev(Kind::SendBackward, 0, 1, 100.8, 100.81, 0)},
           /*offset=*/0.5),
  };
  llvm::json::Array all = events(write(ranks, 3));
  std::map<int64_t, std::map<std::string, const llvm::json::Object *>> flows;
  std::map<int64_t, std::vector<const llvm::json::Object *>> slices;
  std::map<int64_t, std::vector<int64_t>> counters;
  for (const llvm::json::Value &v : all) {
    const llvm::json::Object &e = *v.getAsObject();
    std::string ph = e.getString("ph")->str();
    if (ph == "s" || ph == "f") flows[*e.getInteger("id")][ph] = &e;
    if (ph == "X") slices[*e.getInteger("pid")].push_back(&e);
    if (ph == "C") counters[*e.getInteger("pid")].push_back(*e.getObject("args")->getInteger("bytes"));
  }
  // Which (send pid, receive pid) pairs the flows join, found from the slices they fall in.
  auto inside = [&](const llvm::json::Object &point) -> std::string {
    const double ts = *point.getNumber("ts");
    for (const llvm::json::Object *x : slices[*point.getInteger("pid")])
      if (*x->getNumber("ts") <= ts && ts <= *x->getNumber("ts") + *x->getNumber("dur"))
        return x->getString("name")->str();
    return "";
  };
  std::multiset<std::string> joined;
  for (auto &[id, pair] : flows) {
    ASSERT_EQ(pair.size(), 2u) << "flow " << id;
    joined.insert(std::to_string(*pair["s"]->getInteger("pid")) + inside(*pair["s"]) + "->" +
                  std::to_string(*pair["f"]->getInteger("pid")) + inside(*pair["f"]));
    EXPECT_LE(*pair["s"]->getNumber("ts"), *pair["f"]->getNumber("ts")) << "flow " << id;
    EXPECT_EQ(pair["f"]->getString("bp")->str(), "e");
  }
  EXPECT_EQ(joined, (std::multiset<std::string>{"0sendF0->1recvF0", "1sendF0->2recvF0", "1sendB0->0recvB0",
                                                "2sendB0->0recvB0", "2sendB0->1recvB0", "3sendF0->4recvF0",
                                                "4sendB0->3recvB0"}));
  // Rank 4's times are moved back by its offset: its recvF0 starts at 100.0 s, ts 0.
  EXPECT_DOUBLE_EQ(*slices[4][0]->getNumber("ts"), 0.0);
  EXPECT_DOUBLE_EQ(*slices[4][1]->getNumber("ts"), 120000.0);
  EXPECT_DOUBLE_EQ(*slices[0][1]->getNumber("dur"), 10000.0);
  // Chunk = stage / pipeline ranks; sends and receives carry bytes.
  EXPECT_EQ(*slices[2][1]->getObject("args")->getInteger("chunk"), 0);
  EXPECT_TRUE(slices[1][0]->getObject("args")->getInteger("bytes").has_value());
  EXPECT_FALSE(slices[1][1]->getObject("args")->getInteger("bytes").has_value());
  // The counter: 0 at the start, then each change.
  EXPECT_EQ(counters[0], (std::vector<int64_t>{0, 10, 0}));
  EXPECT_EQ(counters[1], (std::vector<int64_t>{0, 20, 0}));
}

TEST(PipelineTrace, PlanWithoutPipeline) {
  std::vector<RankTrace> ranks = {rank(0, 0, 0, {}, {},
                                       {ev(Kind::TrainStep, 0, 0, 100.0, 100.1), ev(Kind::TrainStep, 1, 0, 100.1, 100.2),
                                        ev(Kind::OptimizerStep, -1, 0, 100.2, 100.25)})};
  llvm::json::Array all = events(write(ranks, 1));
  std::vector<std::string> names;
  for (const llvm::json::Value &v : all) {
    const llvm::json::Object &e = *v.getAsObject();
    EXPECT_NE(e.getString("ph")->str(), "C");
    if (e.getString("ph")->str() != "X") continue;
    names.push_back(e.getString("name")->str());
    const llvm::json::Object &args = *e.getObject("args");
    if (names.back() == "optimizer_step") {
      EXPECT_EQ(args.get("microbatch")->kind(), llvm::json::Value::Null);
      EXPECT_EQ(args.get("chunk")->kind(), llvm::json::Value::Null);
    } else {
      EXPECT_EQ(*args.getInteger("microbatch"), int64_t(names.size() - 1));
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"train_step", "train_step", "optimizer_step"}));
}

TEST(PipelineTrace, RanksWithSeveralStages) {
  // Interleaved, P = 2, V = 2: rank 0 runs stages 0 and 2, rank 1 stages 1 and 3; one microbatch's
  // forward goes 0 -> 1 -> 2 -> 3, so rank 0 receives from and sends to rank 1 for stage 2.
  RankTrace r0 = rank(0, 0, 0, {}, {},
                      {ev(Kind::Forward, 0, 0, 100.0, 100.1), ev(Kind::SendForward, 0, 0, 100.1, 100.11),
                       ev(Kind::RecvForward, 0, 2, 100.11, 100.3), ev(Kind::Forward, 0, 2, 100.3, 100.4),
                       ev(Kind::SendForward, 0, 2, 100.4, 100.41)});
  r0.sendPeers[0] = {{0, {1}}, {2, {3}}};
  RankTrace r1 = rank(1, 1, 0, {}, {},
                      {ev(Kind::RecvForward, 0, 1, 100.0, 100.12), ev(Kind::Forward, 0, 1, 100.12, 100.2),
                       ev(Kind::SendForward, 0, 1, 100.2, 100.21), ev(Kind::RecvForward, 0, 3, 100.21, 100.42),
                       ev(Kind::Forward, 0, 3, 100.42, 100.5)});
  r1.sendPeers[0] = {{1, {2}}};
  llvm::json::Array all = events(write({r0, r1}, 2));
  std::vector<std::string> names;
  std::map<int64_t, std::vector<std::pair<int64_t, double>>> flows;  // id -> (pid, ts) of s, f
  for (const llvm::json::Value &v : all) {
    const llvm::json::Object &e = *v.getAsObject();
    const std::string ph = e.getString("ph")->str();
    if (ph == "X" && *e.getInteger("pid") == 0) names.push_back(e.getString("name")->str());
    if (ph == "s" || ph == "f") flows[*e.getInteger("id")].push_back({*e.getInteger("pid"), *e.getNumber("ts")});
    if (ph == "X" && e.getString("name")->str() == "F0.3")
      EXPECT_EQ(*e.getObject("args")->getInteger("chunk"), 1);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"F0.0", "sendF0.0", "recvF0.2", "F0.2", "sendF0.2"}));
  ASSERT_EQ(flows.size(), 3u);
  // Written rank by rank: 0 -> 1 (stage 0 into recvF0.1, which ends at 120 ms), 0 -> 1 (stage 2
  // into recvF0.3), 1 -> 0 (stage 1 into recvF0.2).
  std::vector<std::pair<int64_t, int64_t>> pids;
  for (auto &[id, ends] : flows) {
    ASSERT_EQ(ends.size(), 2u);
    pids.push_back({ends[0].first, ends[1].first});
    EXPECT_LE(ends[0].second, ends[1].second);
  }
  EXPECT_EQ(pids, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 1}, {1, 0}}));
  EXPECT_LT(flows[1][1].second, 120000.0);  // in recvF0.1
  EXPECT_GT(flows[2][1].second, 300000.0);  // in recvF0.3, not in recvF0.1
  EXPECT_GT(flows[3][1].second, 200000.0);  // in recvF0.2
}

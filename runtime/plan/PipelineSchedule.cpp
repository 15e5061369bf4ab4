//===- PipelineSchedule.cpp - generate, simulate and print pipeline schedules ------------===//
#include "colossal/runtime/PipelineSchedule.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

namespace colossal::runtime {

namespace {

using Action = plan::Pipeline::Action;

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

Action make(Action::Kind kind, uint32_t microbatch, uint32_t stage) {
  Action a;
  a.set_kind(kind);
  a.set_microbatch(microbatch);
  a.set_stage(stage);
  return a;
}

/// A compute action with the receive before it and the send after it (none where the
/// neighbouring stage runs on the same rank: ZB-V's turn at the last rank).
void addCompute(const plan::Pipeline &p, plan::Pipeline::RankSchedule &rank, bool forward, uint32_t mb,
                uint32_t stage) {
  const uint32_t S = p.stages(), r = rankOfStage(p, stage);
  const bool fromPrev = stage > 0 && rankOfStage(p, stage - 1) != r;
  const bool toNext = stage + 1 < S && rankOfStage(p, stage + 1) != r;
  if (forward) {
    if (fromPrev) *rank.add_actions() = make(Action::RECV_FORWARD, mb, stage);
    *rank.add_actions() = make(Action::FORWARD, mb, stage);
    if (toNext) *rank.add_actions() = make(Action::SEND_FORWARD, mb, stage);
  } else {
    if (toNext) *rank.add_actions() = make(Action::RECV_BACKWARD, mb, stage);
    *rank.add_actions() = make(Action::BACKWARD, mb, stage);
    if (fromPrev) *rank.add_actions() = make(Action::SEND_BACKWARD, mb, stage);
  }
}

/// Zero-bubble schedules (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): the backward is
/// split into B (input gradients, on the critical path) and W (weight gradients, deferred).
/// A list schedule in unit time (F = B = W = 1): at each step every free rank runs, of what its
/// inputs allow, a B (the latest stage first), else an F (the latest stage first) while fewer
/// than `limit` of its microbatch chunks are forwarded and not yet W-ed, else its oldest pending W.
/// Returns each rank's compute actions (F, B, W) in order, and the makespan.
struct ListSchedule {
  std::vector<std::vector<Action>> ranks;
  uint32_t makespan = 0;
  uint32_t spanIdle = 0;  // idle units inside the ranks' own spans (first to last compute)
};
ListSchedule listSchedule(const plan::Pipeline &p, uint32_t limit) {
  const uint32_t S = p.stages(), m = p.microbatches(), P = S / std::max<uint32_t>(1, p.virtual_stages());
  constexpr uint32_t kNever = ~0u;
  std::vector<std::vector<uint32_t>> fDone(S, std::vector<uint32_t>(m, kNever)), bDone = fDone;
  std::vector<uint32_t> nextF(S, 0), nextB(S, 0), live(P, 0), busyUntil(P, 0), left(P, 0);
  std::vector<std::vector<uint32_t>> mine(P);
  for (uint32_t s = 0; s < S; ++s) mine[rankOfStage(p, s)].push_back(s);
  for (uint32_t r = 0; r < P; ++r) left[r] = 3 * m * static_cast<uint32_t>(mine[r].size());
  std::vector<std::deque<std::pair<uint32_t, uint32_t>>> pendingW(P);  // (stage, microbatch), oldest first
  ListSchedule out;
  out.ranks.resize(P);
  std::vector<uint32_t> lastAt(P, 0);
  for (uint32_t t = 0; std::any_of(left.begin(), left.end(), [](uint32_t n) { return n > 0; }); ++t) {
    if (t > 64u * 3 * m * S + 64) break;  // cannot happen: some rank always has a W or a B to run
    for (uint32_t r = 0; r < P; ++r) {
      if (busyUntil[r] > t || left[r] == 0) continue;
      std::optional<Action> pick;
      for (auto it = mine[r].rbegin(); it != mine[r].rend() && !pick; ++it) {
        const uint32_t s = *it, k = nextB[s];
        if (k < m && fDone[s][k] <= t && (s + 1 == S || bDone[s + 1][k] <= t)) {
          bDone[s][k] = t + 1;
          ++nextB[s];
          pendingW[r].emplace_back(s, k);
          pick = make(Action::BACKWARD, k, s);
        }
      }
      for (auto it = mine[r].rbegin(); it != mine[r].rend() && !pick && live[r] < limit; ++it) {
        const uint32_t s = *it, k = nextF[s];
        if (k < m && (s == 0 || fDone[s - 1][k] <= t)) {
          fDone[s][k] = t + 1;
          ++nextF[s];
          ++live[r];
          pick = make(Action::FORWARD, k, s);
        }
      }
      if (!pick && !pendingW[r].empty()) {
        auto [s, k] = pendingW[r].front();
        pendingW[r].pop_front();
        --live[r];
        pick = make(Action::WEIGHT, k, s);
      }
      if (!pick) continue;
      if (!out.ranks[r].empty() && lastAt[r] + 1 < t) out.spanIdle += t - lastAt[r] - 1;
      out.ranks[r].push_back(*pick);
      lastAt[r] = t;
      busyUntil[r] = t + 1;
      --left[r];
      out.makespan = t + 1;
    }
  }
  return out;
}

/// Writes zb-h1's or zbv's actions into `p`: the list schedule with the smallest in-flight limit
/// (from 1F1B's P microbatches per rank, zbv's 2P chunks, up to every chunk) whose idle time per
/// rank reaches the lower bound P − 1 (the last rank's first forward cannot start earlier), else
/// the shortest. zbv also asks for no idle inside any rank's own span (ZB-V's zero bubble: the
/// only idle is the warm-up before a rank's first action and the drain after its last), taking
/// the smallest limit that gives both where one does.
void generateZeroBubble(plan::Pipeline &p) {
  const uint32_t S = p.stages(), m = p.microbatches(), V = std::max<uint32_t>(1, p.virtual_stages()), P = S / V;
  const uint32_t first = V * P, last = std::max(first, V * m);
  const uint32_t bound = 3 * m * V + P - 1;
  ListSchedule best;
  for (uint32_t limit = first; limit <= last; ++limit) {
    ListSchedule ls = listSchedule(p, limit);
    const bool complete = std::all_of(ls.ranks.begin(), ls.ranks.end(),
                                      [&](const std::vector<Action> &a) { return a.size() == 3 * m * V; });
    if (!complete) continue;
    const bool better = best.ranks.empty() || ls.makespan < best.makespan ||
                        (ls.makespan == best.makespan && ls.spanIdle < best.spanIdle && p.v_shape());
    if (better) best = std::move(ls);
    if (best.makespan == bound && (!p.v_shape() || best.spanIdle == 0)) break;
  }
  if (best.ranks.empty()) best = listSchedule(p, V * m);  // no limit: every chunk may be in flight
  p.clear_ranks();
  for (uint32_t r = 0; r < P; ++r) {
    plan::Pipeline::RankSchedule &rank = *p.add_ranks();
    for (const Action &a : best.ranks[r]) {
      if (a.kind() == Action::WEIGHT)
        *rank.add_actions() = a;
      else
        addCompute(p, rank, a.kind() == Action::FORWARD, a.microbatch(), a.stage());
    }
  }
}

} // namespace

llvm::Error generateSchedule(plan::Pipeline &p) {
  const uint32_t S = p.stages(), m = p.microbatches(), V = std::max<uint32_t>(1, p.virtual_stages());
  if (S < 1 || m < 1) return fail("pipeline schedule: stages and microbatches must be >= 1");
  if (S % V != 0) return fail("pipeline schedule: " + llvm::Twine(S) + " stages are not " + llvm::Twine(V) + " per rank");
  const uint32_t P = S / V;
  const std::string &kind = p.schedule();
  const bool zeroBubble = kind == "zb-h1" || kind == "zbv";
  if (kind != "gpipe" && kind != "1f1b" && kind != "interleaved" && !zeroBubble)
    return fail("pipeline schedule '" + kind + "' cannot be generated (implemented: gpipe, 1f1b, interleaved, zb-h1, zbv)");
  const uint32_t wantV = kind == "interleaved" ? std::max<uint32_t>(V, 2) : kind == "zbv" ? 2 : 1;
  if (V != wantV)
    return fail("pipeline schedule '" + kind + "' with " + llvm::Twine(V) +
                " stages per rank (interleaved needs >= 2, zbv 2, gpipe, 1f1b and zb-h1 1)");
  if ((kind == "zbv") != p.v_shape())
    return fail("pipeline schedule '" + kind + "': the stages are " + (p.v_shape() ? "" : "not ") +
                "placed in a V (zbv's placement: stage s < P on rank s, stage s >= P on rank 2P - 1 - s)");
  if (kind == "interleaved" && m % P != 0)
    return fail("pipeline schedule interleaved: microbatches " + llvm::Twine(m) + " must be a multiple of the " +
                llvm::Twine(P) + " pipeline ranks");
  if (zeroBubble && (p.forward_only() || !p.weight_split()))
    return fail("pipeline schedule '" + kind + "' needs the backward split into input-gradient (B) and " +
                "weight-gradient (W) programs (STAGE_BACKWARD_WEIGHT), which this plan does not have");
  if (zeroBubble) {
    generateZeroBubble(p);
    return llvm::Error::success();
  }
  p.clear_ranks();
  for (uint32_t r = 0; r < P; ++r) {
    plan::Pipeline::RankSchedule &rank = *p.add_ranks();
    if (p.forward_only()) {
      for (uint32_t k = 0; k < m; ++k) addCompute(p, rank, true, k, r);
      continue;
    }
    if (kind == "gpipe") {
      for (uint32_t k = 0; k < m; ++k) addCompute(p, rank, true, k, r);
      for (uint32_t k = 0; k < m; ++k) addCompute(p, rank, false, k, r);
      continue;
    }
    if (kind == "1f1b") {
      const uint32_t warmup = std::min(S - r - 1, m);
      uint32_t f = 0, b = 0;
      for (; f < warmup; ++f) addCompute(p, rank, true, f, r);
      while (f < m) {
        addCompute(p, rank, true, f++, r);
        addCompute(p, rank, false, b++, r);
      }
      while (b < m) addCompute(p, rank, false, b++, r);
      continue;
    }
    // Interleaved 1F1B (Narayanan et al. 2021, section 2.2): the k-th of the rank's m·V chunk
    // passes is microbatch (k / PV)·P + k mod P of chunk (k mod PV) / P (the backward passes run
    // the chunks in reverse); (P − r − 1)·2 + (V − 1)·P warm-up forwards, then one forward and one
    // backward in turn. Chunk c of rank r is stage c·P + r.
    const uint32_t total = m * V;
    auto pass = [&](uint32_t k, bool forward, uint32_t &mb, uint32_t &stage) {
      const uint32_t chunk = (k % (P * V)) / P;
      mb = (k / (P * V)) * P + k % P;
      stage = (forward ? chunk : V - 1 - chunk) * P + r;
    };
    const uint32_t warmup = std::min(total, (P - r - 1) * 2 + (V - 1) * P);
    uint32_t mb, stage;
    for (uint32_t k = 0; k < warmup; ++k) {
      pass(k, true, mb, stage);
      addCompute(p, rank, true, mb, stage);
    }
    for (uint32_t k = 0; k + warmup < total; ++k) {
      pass(k + warmup, true, mb, stage);
      addCompute(p, rank, true, mb, stage);
      pass(k, false, mb, stage);
      addCompute(p, rank, false, mb, stage);
    }
    for (uint32_t k = total - warmup; k < total; ++k) {
      pass(k, false, mb, stage);
      addCompute(p, rank, false, mb, stage);
    }
  }
  // A plan whose backward is split runs each W right after its B (and the B's send).
  if (p.weight_split())
    for (plan::Pipeline::RankSchedule &rank : *p.mutable_ranks()) {
      plan::Pipeline::RankSchedule withW;
      for (int i = 0; i < rank.actions_size(); ++i) {
        const Action &a = rank.actions(i);
        *withW.add_actions() = a;
        const bool next = i + 1 < rank.actions_size() && rank.actions(i + 1).kind() == Action::SEND_BACKWARD;
        if (a.kind() == Action::BACKWARD && !next) *withW.add_actions() = make(Action::WEIGHT, a.microbatch(), a.stage());
        if (a.kind() == Action::SEND_BACKWARD) *withW.add_actions() = make(Action::WEIGHT, a.microbatch(), a.stage());
      }
      rank = std::move(withW);
    }
  return llvm::Error::success();
}

llvm::Error parseSchedule(llvm::StringRef text, llvm::StringRef what, plan::Pipeline &p) {
  const uint32_t S = p.stages(), V = std::max<uint32_t>(1, p.virtual_stages()), P = S / std::max<uint32_t>(1, V);
  std::vector<std::optional<plan::Pipeline::RankSchedule>> ranks(P);
  llvm::SmallVector<llvm::StringRef, 64> lines;
  text.split(lines, '\n');
  for (size_t n = 0; n < lines.size(); ++n) {
    llvm::StringRef line = lines[n].trim();
    if (!line.consume_front("rank ")) continue;
    const std::string at = what.str() + ":" + std::to_string(n + 1);
    uint32_t r = 0;
    size_t colon = line.find(':');
    if (colon == llvm::StringRef::npos || line.take_while([](char c) { return c >= '0' && c <= '9'; }).getAsInteger(10, r))
      return fail(at + ": expected 'rank R (...): ACTIONS'");
    if (r >= P) return fail(at + ": rank " + llvm::Twine(r) + " out of range (the pipeline has " + llvm::Twine(P) + " ranks)");
    if (ranks[r]) return fail(at + ": rank " + llvm::Twine(r) + " is listed twice");
    ranks[r].emplace();
    llvm::SmallVector<llvm::StringRef, 64> tokens;
    line.drop_front(colon + 1).split(tokens, ' ', -1, false);
    for (llvm::StringRef tok : tokens) {
      static const std::pair<const char *, Action::Kind> kinds[] = {
          {"sendF", Action::SEND_FORWARD}, {"recvF", Action::RECV_FORWARD}, {"sendB", Action::SEND_BACKWARD},
          {"recvB", Action::RECV_BACKWARD}, {"F", Action::FORWARD},         {"B", Action::BACKWARD},
          {"W", Action::WEIGHT}};
      llvm::StringRef rest = tok;
      std::optional<Action::Kind> kind;
      for (auto &[prefix, k] : kinds)
        if (rest.consume_front(prefix)) {
          kind = k;
          break;
        }
      auto [mbText, stageText] = rest.split('.');
      uint32_t mb = 0, stage = r;
      if (!kind || mbText.getAsInteger(10, mb) || (!stageText.empty() && stageText.getAsInteger(10, stage)))
        return fail(at + ": '" + tok + "' is not an action (F3, B3, W3, sendF3, recvF3, sendB3, recvB3; F3.2 names stage 2)");
      *ranks[r]->add_actions() = make(*kind, mb, stage);
    }
  }
  p.clear_ranks();
  for (uint32_t r = 0; r < P; ++r) {
    if (!ranks[r]) return fail(what + ": no line for rank " + llvm::Twine(r) + " ('rank " + llvm::Twine(r) + ": ...')");
    *p.add_ranks() = *ranks[r];
  }
  return llvm::Error::success();
}

uint32_t rankOfStage(const plan::Pipeline &p, uint32_t stage) {
  const uint32_t P = std::max<uint32_t>(1, p.stages() / std::max<uint32_t>(1, p.virtual_stages()));
  if (p.v_shape()) return stage < P ? stage : 2 * P - 1 - stage;
  return stage % P;
}

std::string actionName(const Action &a) {
  std::string mb = std::to_string(a.microbatch());
  switch (a.kind()) {
  case Action::FORWARD: return "F" + mb;
  case Action::BACKWARD: return "B" + mb;
  case Action::WEIGHT: return "W" + mb;
  case Action::SEND_FORWARD: return "sendF" + mb;
  case Action::RECV_FORWARD: return "recvF" + mb;
  case Action::SEND_BACKWARD: return "sendB" + mb;
  case Action::RECV_BACKWARD: return "recvB" + mb;
  default: return "?" + mb;
  }
}

llvm::Expected<ScheduleStats> simulateSchedule(const plan::Pipeline &p) {
  const uint32_t S = p.stages(), m = p.microbatches(), V = std::max<uint32_t>(1, p.virtual_stages());
  const uint32_t P = S / V;
  if (S % V != 0 || p.ranks_size() != static_cast<int>(P))
    return fail("pipeline schedule: " + llvm::Twine(p.ranks_size()) + " rank lists for " + llvm::Twine(S) +
                " stages, " + llvm::Twine(V) + " per rank");
  ScheduleStats stats;
  stats.peakInFlight.assign(S, 0);
  stats.busy.assign(P, 0);
  stats.peakSavedBytes.assign(P, 0);
  stats.stagePeakSavedBytes.assign(S, 0);
  std::vector<uint64_t> liveSaved(P, 0), liveStage(S, 0);
  auto savedOf = [&](uint32_t s) -> uint64_t {
    return s < static_cast<uint32_t>(p.saved_bytes_size()) ? p.saved_bytes(s) : 0;
  };
  // Of those, what W reads (kept after B until W) when the backward is split.
  auto savedForW = [&](uint32_t s) -> uint64_t {
    return s < static_cast<uint32_t>(p.saved_weight_bytes_size()) ? p.saved_weight_bytes(s) : 0;
  };
  const bool split = p.weight_split();
  // The saved values one by one (Pipeline.saved_values): per (rank, stage) the values that start
  // at its forward, and per (rank, kind, stage) the reads that release them; per (value, mb) the
  // readers left.
  const bool exact = p.saved_values_size() > 0;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<int>> startsAt;
  std::map<std::tuple<uint32_t, int, uint32_t>, std::vector<int>> readAt;
  for (int v = 0; v < p.saved_values_size(); ++v) {
    const plan::Pipeline::SavedValue &sv = p.saved_values(v);
    startsAt[{sv.rank(), sv.start_stage()}].push_back(v);
    for (int k = 0; k < sv.reader_stages_size() && k < sv.reader_kinds_size(); ++k)
      readAt[{sv.rank(), int(sv.reader_kinds(k)), sv.reader_stages(k)}].push_back(v);
  }
  std::map<std::pair<int, uint32_t>, int> readersLeft;  // (value, microbatch) -> reads to come
  std::vector<uint64_t> liveExact(P, 0);
  // A receive or forward of `stage` on rank r for `mb`: the values that start there.
  auto startValues = [&](uint32_t r, uint32_t stage, uint32_t mb, bool received) {
    auto it = startsAt.find({r, stage});
    if (it == startsAt.end()) return;
    for (int v : it->second)
      if (p.saved_values(v).received() == received && readersLeft.emplace(std::make_pair(v, mb), p.saved_values(v).reader_stages_size()).second)
        stats.peakSavedBytes[r] = std::max(stats.peakSavedBytes[r], liveExact[r] += p.saved_values(v).bytes());
  };
  // A compute action ran: its reads release the values whose last reader it was.
  auto readValues = [&](uint32_t r, Action::Kind kind, uint32_t stage, uint32_t mb) {
    auto it = readAt.find({r, int(kind), stage});
    if (it == readAt.end()) return;
    for (int v : it->second) {
      auto left = readersLeft.find({v, mb});
      if (left != readersLeft.end() && --left->second == 0) {
        liveExact[r] -= p.saved_values(v).bytes();
        readersLeft.erase(left);
      }
    }
  };
  std::vector<double> clock(P, 0);
  std::vector<int> next(P, 0);
  std::vector<uint32_t> inFlight(S, 0);
  // (kind of the send: SEND_FORWARD / SEND_BACKWARD, microbatch, sending stage) -> time sent.
  std::map<std::tuple<int, uint32_t, uint32_t>, double> sent;
  std::set<std::tuple<int, uint32_t, uint32_t>> received;
  // (stage, microbatch) -> done: forwards, backwards, and the receives each waits for.
  std::set<std::pair<uint32_t, uint32_t>> forwarded, backwarded, weighted, gotF, gotB;
  auto where = [&](uint32_t r, int i) {
    return "rank " + std::to_string(r) + " (stage " + std::to_string(p.ranks(r).actions(i).stage()) +
           "), action #" + std::to_string(i) + " " + actionName(p.ranks(r).actions(i));
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (uint32_t r = 0; r < P; ++r) {
      const auto &list = p.ranks(r).actions();
      while (next[r] < list.size()) {
        const int i = next[r];
        const Action &a = list[i];
        const uint32_t mb = a.microbatch(), s = a.stage();
        if (s >= S)
          return fail("pipeline schedule: rank " + llvm::Twine(r) + ", action #" + llvm::Twine(i) + " " +
                      actionName(a) + " names stage " + llvm::Twine(s) + " of " + llvm::Twine(S));
        if (rankOfStage(p, s) != r)
          return fail("pipeline schedule: rank " + llvm::Twine(r) + ", action #" + llvm::Twine(i) + " " +
                      actionName(a) + " names stage " + llvm::Twine(s) + ", which runs on rank " +
                      llvm::Twine(rankOfStage(p, s)));
        if (mb >= m) return fail("pipeline schedule: " + where(r, i) + ": microbatch out of range");
        const bool first = s == 0, last = s + 1 == S;
        // A neighbour on this rank (ZB-V's turn) hands its values over without a message.
        const bool prevHere = !first && rankOfStage(p, s - 1) == r, nextHere = !last && rankOfStage(p, s + 1) == r;
        auto key = std::make_pair(s, mb);
        if (p.forward_only() && a.kind() != Action::FORWARD && a.kind() != Action::SEND_FORWARD &&
            a.kind() != Action::RECV_FORWARD)
          return fail("pipeline schedule: " + where(r, i) + ": a forward-only (inference) pipeline runs no backward");
        if (a.kind() == Action::WEIGHT) {
          if (!split)
            return fail("pipeline schedule: " + where(r, i) + ": this plan's backward is not split into B and W " +
                        "(its schedule runs B only; W needs schedule zb-h1 or zbv)");
          if (weighted.count(key)) return fail("pipeline schedule: " + where(r, i) + " runs twice");
          if (!backwarded.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs before its B" + llvm::Twine(mb));
          stats.events.push_back({r, static_cast<uint32_t>(i), clock[r], clock[r] + 1});
          clock[r] += 1;
          stats.busy[r] += 1;
          weighted.insert(key);
          readValues(r, Action::WEIGHT, s, mb);
          --inFlight[s];
          liveSaved[r] -= savedForW(s);
          liveStage[s] -= savedForW(s);
        } else if (a.kind() == Action::FORWARD || a.kind() == Action::BACKWARD) {
          const bool fwd = a.kind() == Action::FORWARD;
          if (fwd ? forwarded.count(key) : backwarded.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs twice");
          if (fwd && prevHere && !forwarded.count({s - 1, mb}))
            return fail("pipeline schedule: " + where(r, i) + " runs before F" + llvm::Twine(mb) + " of stage " +
                        llvm::Twine(s - 1) + ", which hands it its inputs on this rank");
          if (!fwd && nextHere && !backwarded.count({s + 1, mb}))
            return fail("pipeline schedule: " + where(r, i) + " runs before B" + llvm::Twine(mb) + " of stage " +
                        llvm::Twine(s + 1) + ", which hands it its output gradients on this rank");
          if (fwd && !first && !prevHere && !gotF.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs before its inputs are received (recvF" +
                        llvm::Twine(mb) + ")");
          if (!fwd && !forwarded.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs before its forward F" + llvm::Twine(mb));
          if (!fwd && !last && !nextHere && !gotB.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs before its output gradients are received (recvB" +
                        llvm::Twine(mb) + ")");
          const double cost = fwd || split ? 1 : 2;
          stats.events.push_back({r, static_cast<uint32_t>(i), clock[r], clock[r] + cost});
          clock[r] += cost;
          stats.busy[r] += cost;
          // As the runner does: what it receives without a receive action arrives first; the
          // program's inputs go once it ran, then its outputs are kept.
          if (fwd) startValues(r, s, mb, /*received=*/true);
          readValues(r, a.kind(), s, mb);
          if (fwd) startValues(r, s, mb, /*received=*/false);
          if (fwd) {
            forwarded.insert(key);
            stats.peakInFlight[s] = std::max(stats.peakInFlight[s], ++inFlight[s]);
            liveSaved[r] += savedOf(s);
            if (!exact) stats.peakSavedBytes[r] = std::max(stats.peakSavedBytes[r], liveSaved[r]);
            stats.stagePeakSavedBytes[s] = std::max(stats.stagePeakSavedBytes[s], liveStage[s] += savedOf(s));
          } else {
            backwarded.insert(key);
            if (!split) --inFlight[s];
            liveSaved[r] -= savedOf(s) - (split ? savedForW(s) : 0);
            liveStage[s] -= savedOf(s) - (split ? savedForW(s) : 0);
          }
        } else if (a.kind() == Action::SEND_FORWARD || a.kind() == Action::SEND_BACKWARD) {
          const bool fwd = a.kind() == Action::SEND_FORWARD;
          if (fwd ? last || nextHere : first || prevHere)
            return fail("pipeline schedule: " + where(r, i) + ": stage " + llvm::Twine(s) + " has no " +
                        (fwd ? "next" : "previous") + " stage on another rank to send to");
          if (!(fwd ? forwarded.count(key) : backwarded.count(key)))
            return fail("pipeline schedule: " + where(r, i) + " sends before " + (fwd ? "F" : "B") + llvm::Twine(mb) +
                        " computed it");
          if (!sent.emplace(std::make_tuple(int(a.kind()), mb, s), clock[r]).second)
            return fail("pipeline schedule: " + where(r, i) + " sends twice");
        } else if (a.kind() == Action::RECV_FORWARD || a.kind() == Action::RECV_BACKWARD) {
          const bool fwd = a.kind() == Action::RECV_FORWARD;
          if (fwd ? first || prevHere : last || nextHere)
            return fail("pipeline schedule: " + where(r, i) + ": stage " + llvm::Twine(s) + " has no " +
                        (fwd ? "previous" : "next") + " stage on another rank to receive from");
          auto from = std::make_tuple(int(fwd ? Action::SEND_FORWARD : Action::SEND_BACKWARD), mb, fwd ? s - 1 : s + 1);
          auto it = sent.find(from);
          if (it == sent.end()) break;  // waits for the peer
          if (!received.insert(from).second) return fail("pipeline schedule: " + where(r, i) + " receives twice");
          clock[r] = std::max(clock[r], it->second);
          (fwd ? gotF : gotB).insert(key);
          if (fwd) startValues(r, s, mb, /*received=*/true);
        } else {
          return fail("pipeline schedule: " + where(r, i) + ": unknown action kind " + llvm::Twine(int(a.kind())));
        }
        ++next[r];
        progress = true;
      }
    }
  }
  for (uint32_t r = 0; r < P; ++r)
    if (next[r] < p.ranks(r).actions_size()) {
      const Action &a = p.ranks(r).actions(next[r]);
      const bool fwd = a.kind() == Action::RECV_FORWARD;
      return fail("pipeline schedule deadlocks: " + where(r, next[r]) + " waits for stage " +
                  llvm::Twine(fwd ? a.stage() - 1 : a.stage() + 1) + "'s send" + (fwd ? "F" : "B") +
                  llvm::Twine(a.microbatch()) + ", which never comes before it");
    }
  for (uint32_t s = 0; s < S; ++s)
    for (uint32_t k = 0; k < m; ++k) {
      if (!forwarded.count({s, k})) return fail("pipeline schedule: stage " + llvm::Twine(s) + " never runs F" + llvm::Twine(k));
      if (!p.forward_only() && !backwarded.count({s, k})) return fail("pipeline schedule: stage " + llvm::Twine(s) + " never runs B" + llvm::Twine(k));
      if (split && !weighted.count({s, k})) return fail("pipeline schedule: stage " + llvm::Twine(s) + " never runs W" + llvm::Twine(k));
    }
  for (auto &[key, time] : sent)
    if (!received.count(key))
      return fail("pipeline schedule: stage " + llvm::Twine(std::get<2>(key)) + "'s " +
                  (std::get<0>(key) == int(Action::SEND_FORWARD) ? "sendF" : "sendB") + llvm::Twine(std::get<1>(key)) +
                  " is never received");
  stats.makespan = *std::max_element(clock.begin(), clock.end());
  double busy = 0;
  for (double b : stats.busy) busy += b;
  stats.bubble = stats.makespan > 0 ? 1.0 - busy / (P * stats.makespan) : 0;
  // Within each rank's own span: from its first compute action's start to its last one's end.
  std::vector<double> firstStart(P, -1), lastEnd(P, 0);
  for (const ScheduleStats::Event &e : stats.events) {
    if (firstStart[e.rank] < 0) firstStart[e.rank] = e.start;
    lastEnd[e.rank] = std::max(lastEnd[e.rank], e.end);
  }
  double spans = 0;
  for (uint32_t r = 0; r < P; ++r)
    if (firstStart[r] >= 0) spans += lastEnd[r] - firstStart[r];
  stats.spanBubble = spans > 0 ? 1.0 - busy / spans : 0;
  return stats;
}

std::string formatSchedule(const plan::Pipeline &p, const ScheduleStats &stats) {
  std::ostringstream os;
  os << "pipeline schedule " << p.schedule() << ": " << p.stages() << " stages, " << p.microbatches()
     << " microbatches (rank R: coordinate R on the pipeline axis; every data- and tensor-parallel group "
        "runs the same lists)\n";
  const uint32_t P = static_cast<uint32_t>(std::max(1, p.ranks_size()));
  const bool chunks = p.stages() > P;
  for (int r = 0; r < p.ranks_size(); ++r) {
    os << "rank " << r << " (stage" << (chunks ? "s" : "");
    bool firstStage = true;
    for (uint32_t s = 0; s < p.stages(); ++s)
      if (rankOfStage(p, s) == static_cast<uint32_t>(r)) {
        os << (firstStage ? " " : ", ") << s;
        firstStage = false;
      }
    os << "):";
    for (const Action &a : p.ranks(r).actions())
      os << " " << actionName(a) << (chunks ? "." + std::to_string(a.stage()) : std::string());
    os << "\n";
  }
  os.setf(std::ios::fixed);
  os.precision(4);
  os << (p.forward_only()   ? "bubble (forward 1): "
         : p.weight_split() ? "bubble (forward 1, B 1, W 1): "
                            : "bubble (forward 1, backward 2): ")
     << stats.bubble << " of " << stats.makespan
     << " time units per rank\n"
     << "idle within each rank's own span (its first to its last compute action): " << stats.spanBubble
     << "\npeak in-flight microbatches per stage:";
  for (uint32_t n : stats.peakInFlight) os << " " << n;
  os << "\n";
  return os.str();
}

} // namespace colossal::runtime

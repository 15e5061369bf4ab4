//===- PipelineSchedule.cpp - generate, simulate and print pipeline schedules ------------===//
#include "colossal/runtime/PipelineSchedule.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
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

/// A compute action with the receive before it and the send after it.
void addCompute(plan::Pipeline::RankSchedule &rank, bool forward, uint32_t mb, uint32_t stage,
                uint32_t stages) {
  const bool first = stage == 0, last = stage + 1 == stages;
  if (forward) {
    if (!first) *rank.add_actions() = make(Action::RECV_FORWARD, mb, stage);
    *rank.add_actions() = make(Action::FORWARD, mb, stage);
    if (!last) *rank.add_actions() = make(Action::SEND_FORWARD, mb, stage);
  } else {
    if (!last) *rank.add_actions() = make(Action::RECV_BACKWARD, mb, stage);
    *rank.add_actions() = make(Action::BACKWARD, mb, stage);
    if (!first) *rank.add_actions() = make(Action::SEND_BACKWARD, mb, stage);
  }
}

} // namespace

llvm::Error generateSchedule(plan::Pipeline &p) {
  const uint32_t S = p.stages(), m = p.microbatches(), V = std::max<uint32_t>(1, p.virtual_stages());
  if (S < 1 || m < 1) return fail("pipeline schedule: stages and microbatches must be >= 1");
  if (S % V != 0) return fail("pipeline schedule: " + llvm::Twine(S) + " stages are not " + llvm::Twine(V) + " per rank");
  const uint32_t P = S / V;
  const std::string &kind = p.schedule();
  if (kind != "gpipe" && kind != "1f1b" && kind != "interleaved")
    return fail("pipeline schedule '" + kind + "' cannot be generated (implemented: gpipe, 1f1b, interleaved)");
  if ((kind == "interleaved") != (V > 1))
    return fail("pipeline schedule '" + kind + "' with " + llvm::Twine(V) +
                " stages per rank (interleaved needs >= 2, gpipe and 1f1b 1)");
  if (kind == "interleaved" && m % P != 0)
    return fail("pipeline schedule interleaved: microbatches " + llvm::Twine(m) + " must be a multiple of the " +
                llvm::Twine(P) + " pipeline ranks");
  p.clear_ranks();
  for (uint32_t r = 0; r < P; ++r) {
    plan::Pipeline::RankSchedule &rank = *p.add_ranks();
    if (kind == "gpipe") {
      for (uint32_t k = 0; k < m; ++k) addCompute(rank, true, k, r, S);
      for (uint32_t k = 0; k < m; ++k) addCompute(rank, false, k, r, S);
      continue;
    }
    if (kind == "1f1b") {
      const uint32_t warmup = std::min(S - r - 1, m);
      uint32_t f = 0, b = 0;
      for (; f < warmup; ++f) addCompute(rank, true, f, r, S);
      while (f < m) {
        addCompute(rank, true, f++, r, S);
        addCompute(rank, false, b++, r, S);
      }
      while (b < m) addCompute(rank, false, b++, r, S);
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
      addCompute(rank, true, mb, stage, S);
    }
    for (uint32_t k = 0; k + warmup < total; ++k) {
      pass(k + warmup, true, mb, stage);
      addCompute(rank, true, mb, stage, S);
      pass(k, false, mb, stage);
      addCompute(rank, false, mb, stage, S);
    }
    for (uint32_t k = total - warmup; k < total; ++k) {
      pass(k, false, mb, stage);
      addCompute(rank, false, mb, stage, S);
    }
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
          {"recvB", Action::RECV_BACKWARD}, {"F", Action::FORWARD},         {"B", Action::BACKWARD}};
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
        return fail(at + ": '" + tok + "' is not an action (F3, B3, sendF3, recvF3, sendB3, recvB3; F3.2 names stage 2)");
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

std::string actionName(const Action &a) {
  std::string mb = std::to_string(a.microbatch());
  switch (a.kind()) {
  case Action::FORWARD: return "F" + mb;
  case Action::BACKWARD: return "B" + mb;
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
  std::vector<uint64_t> liveSaved(P, 0);
  auto savedOf = [&](uint32_t s) -> uint64_t {
    return s < static_cast<uint32_t>(p.saved_bytes_size()) ? p.saved_bytes(s) : 0;
  };
  std::vector<double> clock(P, 0);
  std::vector<int> next(P, 0);
  std::vector<uint32_t> inFlight(S, 0);
  // (kind of the send: SEND_FORWARD / SEND_BACKWARD, microbatch, sending stage) -> time sent.
  std::map<std::tuple<int, uint32_t, uint32_t>, double> sent;
  std::set<std::tuple<int, uint32_t, uint32_t>> received;
  // (stage, microbatch) -> done: forwards, backwards, and the receives each waits for.
  std::set<std::pair<uint32_t, uint32_t>> forwarded, backwarded, gotF, gotB;
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
        if (s >= S || s % P != r)
          return fail("pipeline schedule: " + where(r, i) + " names stage " + llvm::Twine(s) + ", which is not on rank " +
                      llvm::Twine(r));
        if (mb >= m) return fail("pipeline schedule: " + where(r, i) + ": microbatch out of range");
        const bool first = s == 0, last = s + 1 == S;
        auto key = std::make_pair(s, mb);
        if (a.kind() == Action::FORWARD || a.kind() == Action::BACKWARD) {
          const bool fwd = a.kind() == Action::FORWARD;
          if (fwd ? forwarded.count(key) : backwarded.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs twice");
          if (fwd && !first && !gotF.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs before its inputs are received (recvF" +
                        llvm::Twine(mb) + ")");
          if (!fwd && !forwarded.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs before its forward F" + llvm::Twine(mb));
          if (!fwd && !last && !gotB.count(key))
            return fail("pipeline schedule: " + where(r, i) + " runs before its output gradients are received (recvB" +
                        llvm::Twine(mb) + ")");
          const double cost = fwd ? 1 : 2;
          stats.events.push_back({r, static_cast<uint32_t>(i), clock[r], clock[r] + cost});
          clock[r] += cost;
          stats.busy[r] += cost;
          if (fwd) {
            forwarded.insert(key);
            stats.peakInFlight[s] = std::max(stats.peakInFlight[s], ++inFlight[s]);
            stats.peakSavedBytes[r] = std::max(stats.peakSavedBytes[r], liveSaved[r] += savedOf(s));
          } else {
            backwarded.insert(key);
            --inFlight[s];
            liveSaved[r] -= savedOf(s);
          }
        } else if (a.kind() == Action::SEND_FORWARD || a.kind() == Action::SEND_BACKWARD) {
          const bool fwd = a.kind() == Action::SEND_FORWARD;
          if (fwd ? last : first)
            return fail("pipeline schedule: " + where(r, i) + ": stage " + llvm::Twine(s) + " has no " +
                        (fwd ? "next" : "previous") + " stage to send to");
          if (!(fwd ? forwarded.count(key) : backwarded.count(key)))
            return fail("pipeline schedule: " + where(r, i) + " sends before " + (fwd ? "F" : "B") + llvm::Twine(mb) +
                        " computed it");
          if (!sent.emplace(std::make_tuple(int(a.kind()), mb, s), clock[r]).second)
            return fail("pipeline schedule: " + where(r, i) + " sends twice");
        } else if (a.kind() == Action::RECV_FORWARD || a.kind() == Action::RECV_BACKWARD) {
          const bool fwd = a.kind() == Action::RECV_FORWARD;
          if (fwd ? first : last)
            return fail("pipeline schedule: " + where(r, i) + ": stage " + llvm::Twine(s) + " has no " +
                        (fwd ? "previous" : "next") + " stage to receive from");
          auto from = std::make_tuple(int(fwd ? Action::SEND_FORWARD : Action::SEND_BACKWARD), mb, fwd ? s - 1 : s + 1);
          auto it = sent.find(from);
          if (it == sent.end()) break;  // waits for the peer
          if (!received.insert(from).second) return fail("pipeline schedule: " + where(r, i) + " receives twice");
          clock[r] = std::max(clock[r], it->second);
          (fwd ? gotF : gotB).insert(key);
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
      if (!backwarded.count({s, k})) return fail("pipeline schedule: stage " + llvm::Twine(s) + " never runs B" + llvm::Twine(k));
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
  return stats;
}

std::string formatSchedule(const plan::Pipeline &p, const ScheduleStats &stats) {
  std::ostringstream os;
  os << "pipeline schedule " << p.schedule() << ": " << p.stages() << " stages, " << p.microbatches()
     << " microbatches\n";
  const uint32_t P = static_cast<uint32_t>(std::max(1, p.ranks_size()));
  const bool chunks = p.stages() > P;
  for (int r = 0; r < p.ranks_size(); ++r) {
    os << "rank " << r << " (stage" << (chunks ? "s" : "");
    for (uint32_t s = r; s < p.stages(); s += P) os << (s == static_cast<uint32_t>(r) ? " " : ", ") << s;
    os << "):";
    for (const Action &a : p.ranks(r).actions())
      os << " " << actionName(a) << (chunks ? "." + std::to_string(a.stage()) : std::string());
    os << "\n";
  }
  os.setf(std::ios::fixed);
  os.precision(4);
  os << "bubble (forward 1, backward 2): " << stats.bubble << " of " << stats.makespan
     << " time units per rank\npeak in-flight microbatches per stage:";
  for (uint32_t n : stats.peakInFlight) os << " " << n;
  os << "\n";
  return os.str();
}

} // namespace colossal::runtime

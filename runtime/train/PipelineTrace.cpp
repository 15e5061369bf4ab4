//===- PipelineTrace.cpp - the job's Chrome trace (PipelineTrace.h) -------------------------===//
#include "train/PipelineTrace.h"
#include "colossal/runtime/PipelineRunner.h"

#include "colossal/runtime/Mesh.h"

#include "llvm/Support/Format.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace colossal::runtime {

namespace {

using Kind = TraceEvent::Kind;
using Action = plan::Pipeline::Action;

/// Tags of the world's point-to-point messages of tracing (nothing else sends on the world).
constexpr int kClockTag = 31000, kGatherTag = 31001;
/// Round trips per rank when measuring its clock offset.
constexpr int kClockRounds = 16;
/// Bytes of a host name as compared (the rest is cut).
constexpr int kHostBytes = 256;
/// Doubles per event when sent to rank 0.
constexpr size_t kEventFields = 8;

Kind kindOf(Action::Kind k) {
  switch (k) {
  case Action::FORWARD: return Kind::Forward;
  case Action::BACKWARD: return Kind::Backward;
  case Action::WEIGHT: return Kind::Weight;
  case Action::SEND_FORWARD: return Kind::SendForward;
  case Action::RECV_FORWARD: return Kind::RecvForward;
  case Action::SEND_BACKWARD: return Kind::SendBackward;
  case Action::RECV_BACKWARD: return Kind::RecvBackward;
  default: return Kind::Forward;  // the runner refuses other kinds before recording them
  }
}

bool isSend(Kind k) { return k == Kind::SendForward || k == Kind::SendBackward; }
bool isRecv(Kind k) { return k == Kind::RecvForward || k == Kind::RecvBackward; }
bool isForwardMessage(Kind k) { return k == Kind::SendForward || k == Kind::RecvForward; }

const char *category(Kind k) {
  if (isSend(k) || isRecv(k)) return "comm";
  return k == Kind::OptimizerStep ? "optimizer" : "compute";
}

/// Every rank's blob: [events, peer entries, then (direction, sending stage, receiving stage) per
/// entry, then kEventFields doubles per event]. Integers up to 2^53 are exact in a double.
std::vector<double> pack(const RankTrace &t) {
  std::vector<double> peers;
  for (int d = 0; d < 2; ++d)
    for (const auto &[from, to] : t.sendPeers[d])
      for (uint32_t s : to) peers.insert(peers.end(), {double(d), double(from), double(s)});
  std::vector<double> out = {double(t.events.size()), double(peers.size() / 3)};
  out.insert(out.end(), peers.begin(), peers.end());
  for (const TraceEvent &e : t.events) {
    const double fields[kEventFields] = {double(e.kind), double(e.step), double(e.microbatch), double(e.stage),
                                         e.start, e.end, double(e.bytes), double(e.savedBytes)};
    out.insert(out.end(), fields, fields + kEventFields);
  }
  return out;
}

llvm::Error unpack(const std::vector<double> &in, RankTrace &t) {
  auto bad = [&] {
    return llvm::createStringError("trace: rank " + std::to_string(t.rank) + " sent a malformed event list");
  };
  if (in.size() < 2) return bad();
  const size_t n = size_t(in[0]), peers = size_t(in[1]);
  if (in.size() != 2 + 3 * peers + n * kEventFields) return bad();
  size_t i = 2;
  for (size_t k = 0; k < peers; ++k, i += 3) {
    if (in[i] != 0 && in[i] != 1) return bad();
    t.sendPeers[int(in[i])][int64_t(in[i + 1])].push_back(uint32_t(in[i + 2]));
  }
  for (size_t k = 0; k < n; ++k, i += kEventFields) {
    const double *f = &in[i];
    t.events.push_back({Kind(int(f[0])), int64_t(f[1]), int64_t(f[2]), int64_t(f[3]), f[4], f[5], int64_t(f[6]),
                        int64_t(f[7])});
  }
  return llvm::Error::success();
}

/// Microseconds, rounded to nanoseconds, for the trace's `ts`.
double micros(double seconds) { return std::round(seconds * 1e9) / 1e3; }

/// Writes a trace's events, one JSON object per line.
class TraceWriter {
public:
  TraceWriter(llvm::raw_ostream &os, double origin, int64_t pipelineRanks, bool chunked)
      : os_(os), origin_(origin), pipelineRanks_(std::max<int64_t>(1, pipelineRanks)), chunked_(chunked) {
    os_ << "{\"traceEvents\":[\n";
  }
  /// Start and end of `e` on the common clock, in µs; the duration is taken between the rounded
  /// ends so that consecutive events never overlap.
  std::pair<double, double> span(const RankTrace &r, const TraceEvent &e) const {
    return {micros(e.start - r.clockOffset - origin_), micros(e.end - r.clockOffset - origin_)};
  }
  /// The rank's name, order and thread name.
  void metadata(const RankTrace &r) {
    event([&](llvm::json::OStream &j) {
      header(j, "M", r.rank, false);
      j.attribute("name", "process_name");
      j.attributeObject("args", [&] { j.attribute("name", r.label); });
    });
    event([&](llvm::json::OStream &j) {
      header(j, "M", r.rank, false);
      j.attribute("name", "process_sort_index");
      j.attributeObject("args", [&] { j.attribute("sort_index", r.rank); });
    });
    event([&](llvm::json::OStream &j) {
      header(j, "M", r.rank, true);
      j.attribute("name", "thread_name");
      j.attributeObject("args", [&] { j.attribute("name", "actions"); });
    });
  }
  void slice(const RankTrace &r, const TraceEvent &e) {
    auto [ts, te] = span(r, e);
    event([&](llvm::json::OStream &j) {
      header(j, "X", r.rank, true);
      j.attribute("name", traceEventName(e, chunked_));
      j.attribute("cat", category(e.kind));
      number(j, "ts", ts);
      number(j, "dur", te - ts);
      j.attributeObject("args", [&] {
        j.attribute("step", e.step);
        j.attribute("stage", e.stage);
        const bool none = e.microbatch < 0;
        j.attribute("microbatch", none ? llvm::json::Value(nullptr) : llvm::json::Value(e.microbatch));
        j.attribute("chunk", none ? llvm::json::Value(nullptr) : llvm::json::Value(e.stage / pipelineRanks_));
        if (isSend(e.kind) || isRecv(e.kind)) j.attribute("bytes", e.bytes);
        // A compute action that also sent values without a send action of its own (zbv's turn).
        else if (e.bytes > 0) j.attribute("sent_bytes", e.bytes);
      });
    });
  }
  void counter(int64_t pid, double ts, int64_t bytes) {
    event([&](llvm::json::OStream &j) {
      header(j, "C", pid, false);
      j.attribute("name", "saved activation bytes");
      number(j, "ts", ts);
      j.attributeObject("args", [&] { j.attribute("bytes", bytes); });
    });
  }
  /// A flow `name` from (fromPid, fromTs) to (toPid, toTs).
  void flow(int64_t id, const std::string &name, int64_t fromPid, double fromTs, int64_t toPid, double toTs) {
    for (bool start : {true, false})
      event([&](llvm::json::OStream &j) {
        header(j, start ? "s" : "f", start ? fromPid : toPid, true);
        if (!start) j.attribute("bp", "e");
        j.attribute("id", id);
        j.attribute("name", name);
        j.attribute("cat", "message");
        number(j, "ts", start ? fromTs : toTs);
      });
  }
  void end(const llvm::json::Object &otherData) {
    os_ << "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
    llvm::json::OStream j(os_);
    j.value(llvm::json::Value(llvm::json::Object(otherData)));
    os_ << "}\n";
  }

private:
  void event(llvm::function_ref<void(llvm::json::OStream &)> body) {
    if (!first_) os_ << ",\n";
    first_ = false;
    llvm::json::OStream j(os_);
    j.object([&] { body(j); });
  }
  static void header(llvm::json::OStream &j, const char *ph, int64_t pid, bool thread) {
    j.attribute("ph", ph);
    j.attribute("pid", pid);
    if (thread) j.attribute("tid", 0);
  }
  static void number(llvm::json::OStream &j, llvm::StringRef key, double us) {
    j.attributeBegin(key);
    j.rawValue([&](llvm::raw_ostream &os) { os << llvm::format("%.3f", us); });
    j.attributeEnd();
  }
  llvm::raw_ostream &os_;
  double origin_;
  int64_t pipelineRanks_;
  bool chunked_;
  bool first_ = true;
};

/// The slices of `r`, and its saved-activation counter (from 0) where it changes.
void writeRank(TraceWriter &w, const RankTrace &r) {
  int64_t saved = -1;
  for (const TraceEvent &e : r.events) {
    auto [ts, te] = w.span(r, e);
    if (e.savedBytes >= 0 && saved < 0) w.counter(r.rank, ts, saved = 0);
    w.slice(r, e);
    if (e.savedBytes >= 0 && e.savedBytes != saved) w.counter(r.rank, te, saved = e.savedBytes);
  }
}

/// Each send to the receive of the same direction, microbatch and step on every stage its values
/// reach, in the same pipeline group.
void writeFlows(TraceWriter &w, const std::vector<RankTrace> &ranks) {
  using Key = std::tuple<int64_t, int64_t, bool, int64_t, int64_t>;  // group, stage, forward, step, mb
  std::map<Key, std::pair<const RankTrace *, const TraceEvent *>> receives;
  for (const RankTrace &r : ranks)
    for (const TraceEvent &e : r.events)
      if (isRecv(e.kind)) receives[{r.group, e.stage, isForwardMessage(e.kind), e.step, e.microbatch}] = {&r, &e};
  int64_t id = 0;
  for (const RankTrace &r : ranks)
    for (const TraceEvent &e : r.events) {
      if (!isSend(e.kind)) continue;
      const bool fwd = isForwardMessage(e.kind);
      auto peers = r.sendPeers[fwd ? 0 : 1].find(e.stage);
      if (peers == r.sendPeers[fwd ? 0 : 1].end()) continue;
      for (uint32_t peer : peers->second) {
        auto it = receives.find({r.group, int64_t(peer), fwd, e.step, e.microbatch});
        if (it == receives.end()) continue;
        const auto [rr, re] = it->second;
        auto [ss, se] = w.span(r, e);
        auto [rs, rend] = w.span(*rr, *re);
        // From where the send starts (1 ns in, so that no slice ending there claims it: the send
        // may return after its receive completed, so its middle could be later than the arrival)
        // to inside the receive, after the send where the receive was still waiting for it.
        const double from = ss + std::min(0.001, (se - ss) / 2);
        const double to = std::round((std::clamp(from, rs, rend) + rend) / 2 * 1e3) / 1e3;
        w.flow(++id, (fwd ? "F" : "B") + std::to_string(e.microbatch), r.rank, from, rr->rank, to);
      }
    }
}

} // namespace

std::string traceEventName(const TraceEvent &e, bool chunked) {
  const std::string mb = std::to_string(e.microbatch) + (chunked ? "." + std::to_string(e.stage) : "");
  switch (e.kind) {
  case Kind::Forward: return "F" + mb;
  case Kind::Backward: return "B" + mb;
  case Kind::Weight: return "W" + mb;
  case Kind::SendForward: return "sendF" + mb;
  case Kind::RecvForward: return "recvF" + mb;
  case Kind::SendBackward: return "sendB" + mb;
  case Kind::RecvBackward: return "recvB" + mb;
  case Kind::TrainStep: return "train_step";
  case Kind::OptimizerStep: return "optimizer_step";
  }
  return "?";
}

void writeChromeTrace(llvm::raw_ostream &os, const std::vector<RankTrace> &ranks, int64_t pipelineRanks,
                      double origin, const llvm::json::Object &otherData) {
  bool chunked = false;
  for (const RankTrace &r : ranks)
    for (const TraceEvent &e : r.events) chunked |= e.microbatch >= 0 && e.stage >= pipelineRanks;
  TraceWriter w(os, origin, pipelineRanks, chunked);
  for (const RankTrace &r : ranks) w.metadata(r);
  for (const RankTrace &r : ranks) writeRank(w, r);
  writeFlows(w, ranks);
  w.end(otherData);
}

double PipelineTrace::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

llvm::Expected<std::unique_ptr<PipelineTrace>> PipelineTrace::start(const LoadedPlan &plan, CommContext *comm) {
  std::unique_ptr<PipelineTrace> t(new PipelineTrace());
  t->plan_ = &plan;
  t->comm_ = comm;
  Communicator *world = comm ? &comm->world() : nullptr;
  const int n = world ? world->size() : 1, me = world ? world->rank() : 0;
  t->local_.rank = me;
  t->offsets_.assign(n, 0);
  t->rtts_.assign(n, 0);
  t->sameHost_.assign(n, true);
  // Ranks on rank 0's machine share its steady clock (CLOCK_MONOTONIC is system-wide): offset 0.
  // Elsewhere Cristian's method: rank 0 asks, rank r answers with its clock, whose reading is
  // taken as simultaneous with the middle of rank 0's round trip. Both run everywhere (the round
  // trips are reported in the trace either way).
  char host[kHostBytes] = {};
  gethostname(host, sizeof host - 1);
  for (int r = 1; r < n; ++r) {
    if (me != 0 && me != r) continue;
    char theirHost[kHostBytes] = {};
    if (me == 0) {
      if (llvm::Error e = world->recv(theirHost, kHostBytes, DType::U8, r, kClockTag)) return std::move(e);
    } else if (llvm::Error e = world->send(host, kHostBytes, DType::U8, 0, kClockTag)) {
      return std::move(e);
    }
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k < kClockRounds; ++k) {
      if (me == 0) {
        double t0 = now(), theirs = 0;
        if (llvm::Error e = world->send(&t0, 1, DType::F64, r, kClockTag)) return std::move(e);
        if (llvm::Error e = world->recv(&theirs, 1, DType::F64, r, kClockTag)) return std::move(e);
        const double t1 = now();
        if (t1 - t0 < best) {
          best = t1 - t0;
          t->offsets_[r] = theirs - (t0 + t1) / 2;
          t->rtts_[r] = best;
        }
      } else {
        double ask = 0;
        if (llvm::Error e = world->recv(&ask, 1, DType::F64, 0, kClockTag)) return std::move(e);
        const double mine = now();
        if (llvm::Error e = world->send(&mine, 1, DType::F64, 0, kClockTag)) return std::move(e);
      }
    }
    if (me == 0) t->sameHost_[r] = std::strncmp(host, theirHost, kHostBytes) == 0;
  }
  if (world && n > 1)
    if (llvm::Error e = world->barrier()) return std::move(e);
  t->origin_ = now();
  return t;
}

void PipelineTrace::addPipelineStep(const PipelineRunner &runner, int64_t step) {
  const double epoch = std::chrono::duration<double>(runner.epoch().time_since_epoch()).count();
  for (const PipelineRunner::Event &e : runner.events()) {
    for (int d = 0; d < 2; ++d)
      if (!local_.sendPeers[d].count(e.stage)) local_.sendPeers[d][e.stage] = runner.sendPeers(e.stage, d == 0);
    local_.events.push_back({kindOf(e.kind), step, int64_t(e.microbatch), int64_t(e.stage), epoch + e.start,
                             epoch + e.end, e.bytes, e.savedBytes});
  }
}

llvm::Error PipelineTrace::finish(llvm::raw_ostream &os) {
  Communicator *world = comm_ ? &comm_->world() : nullptr;
  const int n = world ? world->size() : 1, me = world ? world->rank() : 0;
  if (me != 0) {
    std::vector<double> blob = pack(local_);
    int64_t count = static_cast<int64_t>(blob.size());
    if (llvm::Error e = world->send(&count, 1, DType::I64, 0, kGatherTag)) return e;
    return world->send(blob.data(), count, DType::F64, 0, kGatherTag);
  }
  std::vector<RankTrace> ranks(n);
  ranks[0] = std::move(local_);
  for (int r = 1; r < n; ++r) {
    int64_t count = 0;
    if (llvm::Error e = world->recv(&count, 1, DType::I64, r, kGatherTag)) return e;
    std::vector<double> blob(static_cast<size_t>(count));
    if (llvm::Error e = world->recv(blob.data(), count, DType::F64, r, kGatherTag)) return e;
    ranks[r].rank = r;
    if (llvm::Error e = unpack(blob, ranks[r])) return e;
  }
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(plan_->plan, plan_->path);
  if (!mesh) return mesh.takeError();
  int ppAxis = -1;
  for (int i = 0; i < plan_->plan.mesh_size(); ++i)
    if (plan_->plan.mesh(i).role() == plan::MeshAxis::PIPELINE) ppAxis = i;
  for (RankTrace &r : ranks) {
    r.clockOffset = sameHost_[r.rank] ? 0 : offsets_[r.rank];
    llvm::SmallVector<int64_t, 4> coords = mesh->coords(r.rank);
    std::string where;
    for (size_t i = 0; i < mesh->axes().size(); ++i) {
      if (int(i) == ppAxis || mesh->axes()[i].size <= 1) continue;
      where += ", " + mesh->axes()[i].name + " " + std::to_string(coords[i]);
    }
    if (ppAxis >= 0) {
      r.stage = coords[ppAxis];
      r.group = mesh->groupId(r.rank, {ppAxis});
      std::set<int64_t> stages;
      for (const TraceEvent &e : r.events)
        if (e.microbatch >= 0) stages.insert(e.stage);
      std::string list;
      for (int64_t s : stages) list += (list.empty() ? "" : ", ") + std::to_string(s);
      if (stages.empty()) list = std::to_string(r.stage);
      r.label = "rank " + std::to_string(r.rank) + " (stage" + (stages.size() > 1 ? "s " : " ") + list + where + ")";
    } else {
      r.group = r.rank;
      r.label = "rank " + std::to_string(r.rank) + (where.empty() ? "" : " (" + where.substr(2) + ")");
    }
  }
  llvm::json::Object other;
  other["plan"] = plan_->path;
  other["clock"] = "the steady clock of rank 0; a rank on another machine is moved onto it by an offset measured "
                   "at the start (Cristian's method, the shortest of 16 round trips: error at most half of it); ts 0 "
                   "is when tracing started on rank 0";
  llvm::json::Array applied, offsets, rtts, hosts;
  for (int r = 0; r < n; ++r) {
    applied.push_back(int64_t(std::llround(ranks[r].clockOffset * 1e9)));
    offsets.push_back(int64_t(std::llround(offsets_[r] * 1e9)));
    rtts.push_back(int64_t(std::llround(rtts_[r] * 1e9)));
    hosts.push_back(bool(sameHost_[r]));
  }
  other["clock_offset_ns"] = std::move(applied);
  other["clock_measured_offset_ns"] = std::move(offsets);
  other["clock_round_trip_ns"] = std::move(rtts);
  other["same_host_as_rank_0"] = std::move(hosts);
  int64_t pipelineRanks = 1;
  if (plan_->plan.has_pipeline()) {
    const plan::Pipeline &p = plan_->plan.pipeline();
    other["schedule"] = p.schedule();
    other["stages"] = int64_t(p.stages());
    other["microbatches"] = int64_t(p.microbatches());
    pipelineRanks = ppAxis >= 0 ? mesh->axes()[ppAxis].size : 1;
  }
  writeChromeTrace(os, ranks, pipelineRanks, origin_, other);
  os.flush();
  return llvm::Error::success();
}

} // namespace colossal::runtime

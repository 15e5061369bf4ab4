//===- Recompute.cpp - colossal-recompute: activation recompute in @train_step -------===//
//
// Passes.td "Recompute"; docs/training.md "Activation recompute". Without recompute every value
// the forward part computes and the backward part reads stays in the arena from its definition
// to its backward use, so at the start of the backward part all of them are live at once. A
// recomputed value is instead cloned (with the recomputed values it needs) right before its
// first backward reader: the original dies at its last forward use and the clone lives only
// while the backward part of its unit runs. The clones run the same kernels on the same inputs,
// so every number is bit-equal to the program without recompute.
//
// The choice of units is modelled on an abstract copy of the program (values, their bytes, reads
// and definitions in execution order), so `auto` can try many choices without touching the IR;
// the same Schedule is then applied to the IR.
//===----------------------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/Memory/CostModel.h"
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/Programs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"

#include <algorithm>
#include <limits>

namespace colossal {
#define GEN_PASS_DEF_RECOMPUTE
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;

namespace colossal {
namespace {

/// A set of forward ops recomputed together.
struct Unit {
  llvm::SmallVector<Operation *> ops; // forward order
  Operation *kept = nullptr;          // the op of the value the unit hands on (a checkpoint)
};

/// How one unit is recomputed: `clones` (forward order) are cloned before `insertBefore`, and the
/// backward readers of `redirected` read the clones.
struct Group {
  Operation *insertBefore = nullptr;
  llvm::SmallVector<Operation *> clones;
  llvm::SmallVector<Value> redirected;
  uint64_t flops = 0;
};

struct Schedule {
  std::vector<Group> groups;
  uint64_t flops = 0, ops = 0;
};

/// @train_step as the pass sees it.
class StepGraph {
public:
  explicit StepGraph(func::FuncOp fn);
  bool valid() const { return loss != nullptr; }

  llvm::SmallVector<Operation *> ops;          // block order, terminator excluded
  llvm::DenseMap<Operation *, unsigned> pos;   // index in `ops`
  llvm::DenseSet<Operation *> forward;         // the loss's backward slice
  llvm::SmallVector<Operation *> forwardOps;   // the same, in order
  llvm::DenseSet<Operation *> paramOnly;       // computed from parameters and constants only
  llvm::DenseSet<Operation *> recomputable;    // may be cloned into the backward part
  Operation *loss = nullptr;                   // the loss's defining op
  Operation *terminator = nullptr;

  /// The storage a value's bytes live in (a reshape shares its operand's), or null for values
  /// outside the arena (arguments, constants, views of persistent tensors).
  Value root(Value v) const;

  std::vector<Unit> segments() const;
  std::vector<Unit> repeatedBlocks(const std::vector<Unit> &segments) const;
  std::vector<Unit> attentionUnits() const;

  Schedule schedule(llvm::ArrayRef<const Unit *> units) const;
  uint64_t estimatePeak(const Schedule &s) const;
  void apply(const Schedule &s) const;

private:
  llvm::DenseMap<Value, Value> roots;
};

StepGraph::StepGraph(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  terminator = body.getTerminator();
  for (Operation &op : body.without_terminator()) {
    pos[&op] = ops.size();
    ops.push_back(&op);
  }
  Value lossValue;
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i)
    if (auto name = fn.getResultAttrOfType<StringAttr>(i, kOutputAttr); name && name.getValue() == "loss")
      lossValue = terminator->getOperand(i);
  if (!lossValue || !lossValue.getDefiningOp())
    return;
  loss = lossValue.getDefiningOp();
  llvm::SmallVector<Operation *> work{loss};
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!forward.insert(op).second)
      continue;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        work.push_back(def);
  }
  for (Operation *op : ops) {
    if (forward.contains(op))
      forwardOps.push_back(op);
    bool fromParams = true;
    for (Value v : op->getOperands()) {
      if (auto arg = llvm::dyn_cast<BlockArgument>(v))
        fromParams &= !fn.getArgAttr(arg.getArgNumber(), kInputAttr);
      else
        fromParams &= paramOnly.contains(v.getDefiningOp());
    }
    if (fromParams)
      paramOnly.insert(op);
    // Values computed from parameters only are kept, except gathered parameter shards (ZeRO
    // stage 3's all_gather before each use: keeping it would keep the whole parameter).
    bool pure = isPure(op) && op->getNumOperands() > 0 && op->getNumResults() > 0 &&
                llvm::all_of(op->getResultTypes(), [](Type t) { return llvm::isa<RankedTensorType>(t); });
    if (forward.contains(op) && pure && (!fromParams || llvm::isa<AllGatherOp>(op)) && op != loss)
      recomputable.insert(op);
  }
  for (Operation *op : ops)
    for (Value r : op->getResults()) {
      if (llvm::isa<ReshapeOp>(op))
        roots[r] = root(op->getOperand(0));
      else if (llvm::isa<ConstantOp, ShardViewOp>(op))
        roots[r] = Value();
      else
        roots[r] = r;
    }
}

Value StepGraph::root(Value v) const {
  if (llvm::isa<BlockArgument>(v))
    return Value();
  auto it = roots.find(v);
  return it == roots.end() ? Value() : it->second;
}

/// Cuts the forward part into segments at the gaps where exactly one arena value (besides
/// parameter-only values and long-lived side inputs) is live: the residual stream between a
/// transformer's sub-blocks. The last op of each segment's boundary value is a checkpoint.
std::vector<Unit> StepGraph::segments() const {
  const size_t n = forwardOps.size();
  std::vector<Unit> out;
  if (n == 0)
    return out;
  llvm::DenseMap<Operation *, unsigned> fpos;
  for (unsigned i = 0; i < n; ++i)
    fpos[forwardOps[i]] = i;
  // Each root's definition and last forward read, in forward indices.
  llvm::DenseMap<Value, std::pair<unsigned, unsigned>> span;
  for (unsigned i = 0; i < n; ++i) {
    Operation *op = forwardOps[i];
    for (Value r : op->getResults())
      if (Value root = this->root(r); root == r && !paramOnly.contains(op))
        span[r] = {i, i};
    for (Value v : op->getOperands())
      if (Value root = this->root(v); root && span.count(root))
        span[root].second = std::max(span[root].second, i);
  }
  std::vector<int> live(n, 0);
  std::vector<Value> single(n);
  const unsigned longLived = std::max<unsigned>(4, n / 2);
  for (auto &[value, s] : span) {
    if (s.second - s.first > longLived)
      continue;
    for (unsigned g = s.first; g < s.second; ++g) {
      ++live[g];
      single[g] = value;
    }
  }
  Unit current;
  for (unsigned i = 0; i < n; ++i) {
    current.ops.push_back(forwardOps[i]);
    if (i + 1 < n && live[i] == 1) {
      current.kept = single[i].getDefiningOp();
      out.push_back(std::move(current));
      current = Unit();
    }
  }
  out.push_back(std::move(current));
  return out;
}

/// The longest run of consecutive segments made of one repeated group of segments (op names,
/// result types and operand counts equal), e.g. a transformer layer's attention and MLP
/// sub-blocks; each repeat is one block. Empty when nothing repeats.
std::vector<Unit> StepGraph::repeatedBlocks(const std::vector<Unit> &segs) const {
  std::vector<size_t> sig;
  for (const Unit &u : segs) {
    llvm::hash_code h = llvm::hash_value(u.ops.size());
    for (Operation *op : u.ops) {
      h = llvm::hash_combine(h, op->getName().getStringRef(), op->getNumOperands());
      for (Type t : op->getResultTypes())
        h = llvm::hash_combine(h, t.getAsOpaquePointer());
    }
    sig.push_back(h);
  }
  const size_t m = sig.size();
  size_t bestCover = 0, bestStart = 0, bestPeriod = 0, bestCount = 0;
  for (size_t p = 1; 2 * p <= m; ++p)
    for (size_t a = 0; a + 2 * p <= m; ++a) {
      size_t k = 1;
      while (a + (k + 1) * p <= m &&
             std::equal(sig.begin() + a, sig.begin() + a + p, sig.begin() + a + k * p))
        ++k;
      if (k >= 2 && k * p > bestCover) {
        bestCover = k * p;
        bestStart = a;
        bestPeriod = p;
        bestCount = k;
      }
    }
  std::vector<Unit> blocks;
  for (size_t j = 0; j < bestCount; ++j) {
    Unit block;
    for (size_t s = bestStart + j * bestPeriod; s < bestStart + (j + 1) * bestPeriod; ++s) {
      block.ops.append(segs[s].ops.begin(), segs[s].ops.end());
      block.kept = segs[s].kept;
    }
    blocks.push_back(std::move(block));
  }
  return blocks;
}

/// Megatron's selective recompute: each attention op with the layout ops (transpose, reshape)
/// that only rearrange its result, and each softmax (an attention core the fusion did not fuse).
std::vector<Unit> StepGraph::attentionUnits() const {
  std::vector<Unit> out;
  for (Operation *op : forwardOps) {
    if (!recomputable.contains(op) || !llvm::isa<AttentionOp, SoftmaxOp>(op))
      continue;
    Unit u;
    llvm::DenseSet<Operation *> in{op};
    u.ops.push_back(op);
    for (Operation *next : forwardOps) {
      if (pos.lookup(next) <= pos.lookup(op) || !llvm::isa<TransposeOp, ReshapeOp>(next))
        continue;
      Operation *def = next->getOperand(0).getDefiningOp();
      if (def && in.contains(def) && recomputable.contains(next)) {
        in.insert(next);
        u.ops.push_back(next);
      }
    }
    out.push_back(std::move(u));
  }
  return out;
}

Schedule StepGraph::schedule(llvm::ArrayRef<const Unit *> units) const {
  llvm::DenseMap<Operation *, unsigned> owner; // recomputed op -> its unit
  for (unsigned u = 0; u < units.size(); ++u)
    for (Operation *op : units[u]->ops)
      if (recomputable.contains(op) && op != units[u]->kept)
        owner.try_emplace(op, u);
  Schedule out;
  for (unsigned u = 0; u < units.size(); ++u) {
    Group g;
    unsigned first = std::numeric_limits<unsigned>::max();
    llvm::SmallVector<Operation *> work;
    for (Operation *op : units[u]->ops) {
      auto it = owner.find(op);
      if (it == owner.end() || it->second != u)
        continue;
      bool read = false;
      for (Value r : op->getResults())
        for (Operation *user : r.getUsers())
          if (!forward.contains(user) && user != terminator) {
            read = true;
            first = std::min(first, pos.lookup(user));
          }
      if (!read)
        continue;
      for (Value r : op->getResults())
        g.redirected.push_back(r);
      work.push_back(op);
    }
    if (work.empty())
      continue;
    llvm::DenseSet<Operation *> closure;
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!closure.insert(op).second)
        continue;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && owner.count(def))
          work.push_back(def);
    }
    g.clones.assign(closure.begin(), closure.end());
    llvm::sort(g.clones, [&](Operation *a, Operation *b) { return pos.lookup(a) < pos.lookup(b); });
    g.insertBefore = ops[first];
    for (Operation *op : g.clones)
      g.flops += opFlops(op);
    out.flops += g.flops;
    out.ops += g.clones.size();
    out.groups.push_back(std::move(g));
  }
  return out;
}

/// The most arena bytes live at once in the program `s` would make (reshapes share their
/// operand's bytes; in-place reuse is not modelled, so this bounds from above the live set the
/// memory planner packs).
uint64_t StepGraph::estimatePeak(const Schedule &s) const {
  llvm::DenseMap<Operation *, llvm::SmallVector<unsigned, 1>> before;
  llvm::DenseMap<Value, unsigned> redirectedBy;
  for (unsigned gi = 0; gi < s.groups.size(); ++gi) {
    before[s.groups[gi].insertBefore].push_back(gi);
    for (Value v : s.groups[gi].redirected)
      redirectedBy[v] = gi;
  }
  std::vector<llvm::DenseMap<Value, int>> cloneIds(s.groups.size());
  llvm::DenseMap<Value, int> ids; // original values -> storage
  std::vector<uint64_t> bytes;
  std::vector<std::pair<unsigned, unsigned>> live; // first, last time
  unsigned t = 0;
  auto lookup = [](const llvm::DenseMap<Value, int> &m, Value v) {
    auto it = m.find(v);
    return it == m.end() ? -1 : it->second;
  };
  auto use = [&](int id) {
    if (id >= 0)
      live[id].second = std::max(live[id].second, t);
  };
  auto define = [&](llvm::DenseMap<Value, int> &m, Operation *op, auto operandId) {
    for (Value r : op->getResults()) {
      if (llvm::isa<ReshapeOp>(op)) {
        m[r] = operandId(op->getOperand(0));
      } else if (root(r)) {
        bytes.push_back(numBytes(r.getType()));
        live.push_back({t, t});
        m[r] = static_cast<int>(bytes.size() - 1);
      } else {
        m[r] = -1;
      }
    }
  };
  for (Operation *op : ops) {
    for (unsigned gi : before.lookup(op)) {
      llvm::DenseMap<Value, int> &m = cloneIds[gi];
      auto operandId = [&](Value v) {
        auto it = m.find(v);
        return it != m.end() ? it->second : lookup(ids, v);
      };
      for (Operation *c : s.groups[gi].clones) {
        ++t;
        for (Value v : c->getOperands())
          use(operandId(v));
        define(m, c, operandId);
      }
    }
    ++t;
    const bool backward = !forward.contains(op);
    auto operandId = [&](Value v) {
      if (backward)
        if (auto it = redirectedBy.find(v); it != redirectedBy.end())
          return lookup(cloneIds[it->second], v);
      return lookup(ids, v);
    };
    for (Value v : op->getOperands())
      use(operandId(v));
    define(ids, op, operandId);
  }
  ++t;
  for (Value v : terminator->getOperands())
    use(lookup(ids, v));
  std::vector<int64_t> delta(t + 2, 0);
  for (size_t i = 0; i < bytes.size(); ++i) {
    delta[live[i].first] += static_cast<int64_t>(bytes[i]);
    delta[live[i].second + 1] -= static_cast<int64_t>(bytes[i]);
  }
  int64_t current = 0, peak = 0;
  for (int64_t d : delta)
    peak = std::max(peak, current += d);
  return static_cast<uint64_t>(peak);
}

/// Marks a clone's location so traces and the plan's buffer names tell it from the original.
Location cloneLocation(Location loc) {
  if (auto name = llvm::dyn_cast<NameLoc>(loc))
    return NameLoc::get(StringAttr::get(loc.getContext(), name.getName().getValue() + " (recompute)"),
                        name.getChildLoc());
  return loc;
}

void StepGraph::apply(const Schedule &s) const {
  llvm::DenseSet<Operation *> backward;
  for (Operation *op : ops)
    if (!forward.contains(op))
      backward.insert(op);
  for (const Group &g : s.groups) {
    OpBuilder b(g.insertBefore);
    IRMapping map;
    for (Operation *op : g.clones) {
      Operation *clone = b.clone(*op, map);
      clone->setLoc(cloneLocation(op->getLoc()));
    }
    for (Value v : g.redirected)
      v.replaceUsesWithIf(map.lookup(v), [&](OpOperand &use) { return backward.contains(use.getOwner()); });
  }
}

/// Greedy choice for `auto`: add the candidate that lowers the estimate most per recomputed
/// FLOP (the smallest estimate when none lowers it) until the estimate fits `budget`; if it
/// never does, the prefix with the lowest estimate.
std::vector<const Unit *> chooseAuto(const StepGraph &graph, const std::vector<Unit> &candidates,
                                     uint64_t budget) {
  std::vector<const Unit *> chosen;
  uint64_t peak = graph.estimatePeak(graph.schedule(chosen));
  std::vector<const Unit *> best = chosen;
  uint64_t bestPeak = peak;
  std::vector<bool> used(candidates.size(), false);
  while (peak > budget) {
    int pick = -1;
    double pickScore = 0;
    uint64_t pickPeak = 0;
    for (size_t c = 0; c < candidates.size(); ++c) {
      if (used[c])
        continue;
      std::vector<const Unit *> trial = chosen;
      trial.push_back(&candidates[c]);
      Schedule s = graph.schedule(trial);
      uint64_t p = graph.estimatePeak(s);
      // Lower is better: -(bytes saved per FLOP) when it saves, else the estimate itself.
      double score = p < peak ? -double(peak - p) / double(std::max<uint64_t>(1, s.flops))
                              : double(p);
      if (pick < 0 || score < pickScore) {
        pick = static_cast<int>(c);
        pickScore = score;
        pickPeak = p;
      }
    }
    if (pick < 0)
      break;
    used[pick] = true;
    chosen.push_back(&candidates[pick]);
    peak = pickPeak;
    if (peak < bestPeak) {
      bestPeak = peak;
      best = chosen;
    }
  }
  return peak <= budget ? chosen : best;
}

struct RecomputePass : impl::RecomputeBase<RecomputePass> {
  using RecomputeBase::RecomputeBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (programRole(fn) != ProgramRole::TrainStep)
      return;
    if (mode != "full" && mode != "selective" && mode != "auto") {
      fn.emitError() << "colossal-recompute: mode must be full, selective or auto; got '" << mode << "'";
      return signalPassFailure();
    }
    StepGraph graph(fn);
    if (!graph.valid()) {
      fn.emitError() << "colossal-recompute: @" << fn.getName() << " has no 'loss' output";
      return signalPassFailure();
    }
    std::vector<Unit> segments = graph.segments();
    std::vector<Unit> units;
    if (mode == "selective") {
      units = graph.attentionUnits();
      if (units.empty())
        fn.emitWarning() << "memory.recompute selective: @" << fn.getName()
                         << " has no attention or softmax to recompute; nothing is recomputed "
                            "(full or auto recompute other ops)";
    } else if (mode == "full") {
      units = graph.repeatedBlocks(segments);
      if (units.empty() && segments.size() > 1)
        units.assign(segments.begin(), segments.end() - 1);
    } else if (segments.size() > 1) {
      units.assign(segments.begin(), segments.end() - 1);
    }
    std::vector<const Unit *> chosen;
    if (mode == "auto")
      chosen = chooseAuto(graph, units, budgetBytes);
    else
      for (const Unit &u : units)
        chosen.push_back(&u);
    Schedule s = graph.schedule(chosen);
    uint64_t forwardFlops = 0;
    for (Operation *op : graph.forwardOps)
      forwardFlops += opFlops(op);
    const uint64_t estimate = graph.estimatePeak(s);
    graph.apply(s);

    Builder b(fn.getContext());
    auto i64 = [&](uint64_t v) { return b.getI64IntegerAttr(static_cast<int64_t>(v)); };
    fn->setAttr("colossal.recompute",
                b.getDictionaryAttr({b.getNamedAttr("mode", b.getStringAttr(mode)),
                                     b.getNamedAttr("units", i64(s.groups.size())),
                                     b.getNamedAttr("ops", i64(s.ops)),
                                     b.getNamedAttr("flops", i64(s.flops)),
                                     b.getNamedAttr("forward_flops", i64(forwardFlops)),
                                     b.getNamedAttr("estimated_peak_bytes", i64(estimate))}));
  }
};

} // namespace
} // namespace colossal

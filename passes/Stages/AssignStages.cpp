//===- AssignStages.cpp - colossal-assign-pipeline-stages: cut the forward into stages ----===//
//
// Passes.td "AssignPipelineStages"; docs/parallelism.md "Pipeline parallelism". The forward ops
// of @train_step (the model and its loss, before autodiff) are cut into contiguous runs by the
// cost model or by the user's cut points, and each op is tagged with its stage. The backward
// ops autodiff builds inherit the tag of the op they differentiate.
//===------------------------------------------------------------------------------------===//
#include "passes/Memory/CostModel.h"
#include "passes/Passes.h"
#include "dialects/Colossal/Programs.h"
#include "passes/Training/TrainUtils.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Regex.h"

#include <set>

namespace colossal {
#define GEN_PASS_DEF_ASSIGNPIPELINESTAGES
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;

namespace colossal {
namespace {

/// The ONNX node an op came from (the innermost NameLoc), or "".
std::string nodeName(Location loc) {
  if (auto name = llvm::dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = llvm::dyn_cast<FusedLoc>(loc))
    for (Location l : fused.getLocations()) {
      std::string n = nodeName(l);
      if (!n.empty())
        return n;
    }
  if (auto callsite = llvm::dyn_cast<CallSiteLoc>(loc))
    return nodeName(callsite.getCallee());
  return "";
}

/// " (node names here: 'a', 'b', 'c', ...)": up to three names of `ops`' nodes, those sharing the
/// longest prefix with `pattern`'s literal start first, for a cut point that matched nothing.
std::string nameHint(llvm::ArrayRef<Operation *> ops, llvm::StringRef pattern) {
  llvm::StringRef literal = pattern.take_until([](char c) { return llvm::StringRef(".[]()*+?{}|^$\\").contains(c); });
  std::vector<std::pair<size_t, std::string>> names;  // (-shared prefix, name) in model order
  std::set<std::string> seen;
  for (Operation *op : ops) {
    std::string n = nodeName(op->getLoc());
    if (n.empty() || !seen.insert(n).second)
      continue;
    size_t shared = 0;
    while (shared < n.size() && shared < literal.size() && n[shared] == literal[shared])
      ++shared;
    names.emplace_back(shared, n);
  }
  if (names.empty())
    return " (its ops carry no ONNX node names)";
  std::stable_sort(names.begin(), names.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
  std::string out = " (node names here: ";
  for (size_t i = 0; i < std::min<size_t>(3, names.size()); ++i)
    out += (i ? ", '" : "'") + names[i].second + "'";
  return out + (names.size() > 3 ? ", ...; " : "; ") +
         "a fused op (a norm, attention, GELU) answers to the name of its last node)";
}

/// Bytes an op moves per FLOP's worth of time: one core does ~50 GFLOP/s in a contraction and
/// streams ~10 GB/s, so a byte costs about 5 FLOPs.
constexpr uint64_t kFlopsPerByte = 5;

/// The cost model's time of one forward op with its backward, in FLOP units: 3 × its FLOPs
/// (forward, input gradient, weight gradient) plus kFlopsPerByte × the bytes it and its backward
/// move: its operands and results twice (read in the forward, again in the backward with their
/// cotangents), and for each parameter operand its gradient written and accumulated. The bytes
/// are what makes a wide embedding (a gather of few FLOPs whose gradient is the whole table)
/// and a large-vocabulary loss cost what they do.
uint64_t opCost(Operation *op) {
  uint64_t bytes = 0;
  for (Value r : op->getResults())
    bytes += 2 * numBytes(r.getType());
  for (Value v : op->getOperands()) {
    bytes += 2 * numBytes(v.getType());
    if (auto arg = llvm::dyn_cast<BlockArgument>(v))
      if (auto f = llvm::dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
        if (f.getArgAttr(arg.getArgNumber(), kParamAttr))
          bytes += 2 * numBytes(v.getType());
  }
  return 3 * opFlops(op) + kFlopsPerByte * bytes;
}

/// The ends (exclusive) of `stages` contiguous runs of `cost` minimising the largest run's sum,
/// every run non-empty (cost.size() >= stages). A run [i, j) also pays `cut[i]` and `cut[j]`:
/// the cost of the messages at its two ends (cut[k]: the cut before op k; cut[0] = cut[n] = 0).
/// Binary search over the largest sum, then a greedy packing that ends each run at the furthest
/// op the limit allows (with its end's message), cutting early only to leave one op per
/// remaining stage.
std::vector<size_t> minMaxSplit(llvm::ArrayRef<uint64_t> cost, llvm::ArrayRef<uint64_t> cut, int64_t stages) {
  const size_t n = cost.size();
  auto pack = [&](uint64_t limit, std::vector<size_t> *ends) {
    size_t i = 0;
    for (int64_t s = 0; s < stages; ++s) {
      const size_t left = static_cast<size_t>(stages - s - 1);
      const uint64_t start = cut[i];
      uint64_t sum = start;
      size_t j = i, best = 0;
      if (s + 1 == stages) {
        for (; j < n; ++j)
          sum += cost[j];
        best = n;
        if (sum > limit)
          return false;
      } else {
        // The furthest end j (at least one op, leaving `left` ops) with ops + both messages
        // within the limit; the ops' sum alone only grows, so the scan stops once it is over.
        while (j < n - left && sum + cost[j] <= limit) {
          sum += cost[j++];
          if (sum + cut[j] <= limit)
            best = j;
        }
        if (best == 0)
          return false;
      }
      if (ends)
        ends->push_back(best);
      i = best;
    }
    return i == n;
  };
  uint64_t lo = 0, hi = 0;
  for (size_t k = 0; k < n; ++k) {
    lo = std::max(lo, cost[k]);
    hi += cost[k] + 2 * cut[k];
  }
  hi += 1;  // one op per stage always fits under the whole sum with every message
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (pack(mid, nullptr))
      hi = mid;
    else
      lo = mid + 1;
  }
  std::vector<size_t> ends;
  pack(lo, &ends);
  return ends;
}

struct AssignPipelineStagesPass : impl::AssignPipelineStagesBase<AssignPipelineStagesPass> {
  using AssignPipelineStagesBase::AssignPipelineStagesBase;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    // Training cuts @train_step (the model and its loss); inference the forward program.
    func::FuncOp step = lookupProgram(module, ProgramRole::TrainStep);
    if (!step)
      step = lookupProgram(module, ProgramRole::Forward);
    if (!step)
      return module.emitError("colossal-assign-pipeline-stages needs @train_step (run "
                              "colossal-append-loss first) or, for inference, @forward");
    if (stages < 2 || virtualStages < 1 || stages % virtualStages != 0)
      return module.emitError() << "colossal-assign-pipeline-stages: stages must be >= 2 and a "
                                   "multiple of virtual-stages, got "
                                << int64_t(stages) << " and " << int64_t(virtualStages);
    Block &body = step.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      if (!op.hasTrait<OpTrait::ConstantLike>())
        ops.push_back(&op);
    if (static_cast<int64_t>(ops.size()) < stages)
      return module.emitError() << "mesh pp=" << int64_t(stages / virtualStages)
                                << (virtualStages > 1 ? " x virtual_stages " + std::to_string(virtualStages) : std::string())
                                << ": more stages than the training step can be cut into (it "
                                   "has " << ops.size() << " ops)";

    // Bytes crossing the cut before op k: the values defined before it and read at or after it.
    llvm::DenseMap<Operation *, size_t> index;
    for (size_t i = 0; i < ops.size(); ++i)
      index[ops[i]] = i;
    std::vector<uint64_t> crossing(ops.size() + 1, 0);
    {
      std::vector<int64_t> delta(ops.size() + 2, 0);
      for (size_t i = 0; i < ops.size(); ++i)
        for (Value r : ops[i]->getResults()) {
          size_t last = i;
          for (Operation *user : r.getUsers())
            if (auto it = index.find(user); it != index.end())
              last = std::max(last, it->second);
          if (last > i) {  // crosses the cuts before ops i + 1 .. last
            delta[i + 1] += static_cast<int64_t>(numBytes(r.getType()));
            delta[last + 1] -= static_cast<int64_t>(numBytes(r.getType()));
          }
        }
      int64_t run = 0;
      for (size_t k = 0; k <= ops.size(); ++k)
        crossing[k] = static_cast<uint64_t>(run += delta[k]);
      crossing[0] = crossing[ops.size()] = 0;
    }
    // A cut costs each of its two stages kFlopsPerByte per byte, twice: the values one side
    // sends and the other receives, and their gradients back.
    std::vector<uint64_t> cutCost(ops.size() + 1, 0);
    for (size_t k = 0; k <= ops.size(); ++k)
      cutCost[k] = 2 * kFlopsPerByte * crossing[k];

    std::vector<size_t> ends;
    if (cuts.empty()) {
      SmallVector<uint64_t> cost;
      for (Operation *op : ops)
        cost.push_back(std::max<uint64_t>(1, opCost(op)));
      ends = minMaxSplit(cost, cutCost, stages);
    } else {
      if (static_cast<int64_t>(cuts.size()) != stages - 1)
        return module.emitError() << "parallel.pipeline.stages lists " << cuts.size()
                                  << (cuts.size() == 1 ? " cut point; " : " cut points; ") << int64_t(stages) << " stages (mesh pp"
                                  << (virtualStages > 1 ? " x virtual_stages" : "") << ") need "
                                  << int64_t(stages) - 1;
      for (const std::string &pattern : cuts) {
        llvm::Regex re("^(" + pattern + ")$");
        std::optional<size_t> last;
        for (size_t i = 0; i < ops.size(); ++i) {
          std::string node = nodeName(ops[i]->getLoc());
          if (!node.empty() && re.match(node))
            last = i;
        }
        if (!last)
          return module.emitError() << "parallel.pipeline.stages: cut point '" << pattern
                                    << "' matches no node of the training step" << nameHint(ops, pattern);
        if (*last + 1 >= ops.size())
          return module.emitError() << "parallel.pipeline.stages: cut point '" << pattern
                                    << "' is after the last op: the last stage would be empty";
        if (!ends.empty() && *last + 1 <= ends.back())
          return module.emitError() << "parallel.pipeline.stages: cut point '" << pattern
                                    << "' is not after the cut before it (cut points go in "
                                       "model order)";
        ends.push_back(*last + 1);
      }
      ends.push_back(ops.size());
    }

    // Tag, and record what the report prints: per stage ops, FLOPs and the bytes each cut
    // carries forward (values defined before it and read after it).
    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    llvm::DenseMap<Operation *, int64_t> stageOf;
    SmallVector<int64_t> stageOps(stages, 0), stageFlops(stages, 0);
    size_t begin = 0;
    for (int64_t s = 0; s < stages; ++s) {
      stageFlops[s] += static_cast<int64_t>(cutCost[begin] + cutCost[ends[s]]);
      for (size_t i = begin; i < ends[s]; ++i) {
        ops[i]->setAttr(kStageAttr, b.getI64IntegerAttr(s));
        stageOf[ops[i]] = s;
        ++stageOps[s];
        stageFlops[s] += static_cast<int64_t>(opCost(ops[i]));
      }
      begin = ends[s];
    }
    SmallVector<int64_t> cutBytes(stages - 1, 0);
    for (Operation *op : ops)
      for (Value r : op->getResults()) {
        int64_t from = stageOf[op], to = from;
        for (Operation *user : r.getUsers())
          if (auto it = stageOf.find(user); it != stageOf.end())
            to = std::max(to, it->second);
        for (int64_t c = from; c < to; ++c)
          cutBytes[c] += static_cast<int64_t>(numBytes(r.getType()));
      }
    module->setAttr(kPipelineAttr,
                    b.getDictionaryAttr({
                        b.getNamedAttr("stages", b.getI64IntegerAttr(stages)),
                        b.getNamedAttr("virtual_stages", b.getI64IntegerAttr(virtualStages)),
                        b.getNamedAttr("microbatches", b.getI64IntegerAttr(microbatches)),
                        b.getNamedAttr("schedule", b.getStringAttr(schedule)),
                        b.getNamedAttr("stage_ops", b.getDenseI64ArrayAttr(stageOps)),
                        b.getNamedAttr("stage_cost", b.getDenseI64ArrayAttr(stageFlops)),
                        b.getNamedAttr("cut_bytes", b.getDenseI64ArrayAttr(cutBytes)),
                    }));
    return success();
  }
};

} // namespace
} // namespace colossal

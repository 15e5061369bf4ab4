//===- SplitStages.cpp - colossal-split-pipeline-stages: one program per stage and phase ---===//
//
// Passes.td "SplitPipelineStages"; docs/parallelism.md "Pipeline parallelism". @train_step,
// whose ops carry their stage (colossal-assign-pipeline-stages, then autodiff), is cut into a
// forward and a backward program per stage; the values that cross from one program to another
// become outputs and inputs of the same name, which the runtime's pipeline runner moves between
// ranks (activations forward, their gradients back) or keeps (a stage's residuals). Under the
// zero-bubble schedules (zb-h1, zbv) each stage's backward is cut again: the input-gradient part
// B (what the earlier stages wait for: the backward slice of the values it hands on) and the
// weight-gradient part W (the rest: the parameter gradients and their accumulation), which the
// schedule defers (Qi et al. 2024). The optimizer step is cut by parameter.
//===--------------------------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/Programs.h"
#include "passes/Training/TrainUtils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <map>
#include <set>

namespace colossal {
#define GEN_PASS_DEF_SPLITPIPELINESTAGES
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;

namespace colossal {
namespace {

/// The program an op runs in: a stage's forward, its backward (with a split backward, the
/// input-gradient part B) or, with a split backward, its weight-gradient part W.
enum Phase { kForward = 0, kBackward = 1, kWeight = 2 };

/// Where an op of @train_step runs.
struct Place {
  int64_t stage = -1;
  Phase phase = kForward;
  bool operator==(const Place &o) const { return stage == o.stage && phase == o.phase; }
  bool operator<(const Place &o) const {
    return stage != o.stage ? stage < o.stage : phase < o.phase;
  }
};

std::string describe(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "'" << op->getName() << "' at " << op->getLoc();
  return s;
}

/// One program being built: its ops (block order), the train_step arguments it reads, the
/// values it receives from other programs and the ones it hands on.
struct Program {
  Place place;
  SmallVector<Operation *> ops;
  std::set<unsigned> args;
  llvm::MapVector<Value, std::string> inputs, outputs;
  SmallVector<std::pair<Value, std::string>> returns;  // the step's results it computes, by name
};

struct SplitPipelineStagesPass : impl::SplitPipelineStagesBase<SplitPipelineStagesPass> {
  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  /// Stages of the untagged ops (canonicalisation's and the partitioner's new ops). First in
  /// block order from their operands: a forward op runs on the latest stage of its forward
  /// operands (as soon as they are all there); a backward op on the earliest stage of its
  /// backward operands (where its cotangents meet), not before its forward operands' stages.
  /// Ops whose operands say nothing (arguments, constants), and backward ops without a backward
  /// operand, then follow their users, in reverse order: a forward op the earliest stage that
  /// reads it, a backward op the latest (not before its forward operands').
  void placeUntagged(ArrayRef<Operation *> ops, llvm::DenseMap<Operation *, Place> &place) {
    llvm::DenseMap<Operation *, int64_t> floor;  // the latest stage of a deferred op's operands
    for (Operation *op : ops) {
      Place &p = place[op];
      if (p.stage >= 0)
        continue;
      int64_t fwd = -1, bwd = -1;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          if (auto it = place.find(def); it != place.end() && it->second.stage >= 0) {
            int64_t s = it->second.stage;
            if (it->second.phase == kForward)
              fwd = std::max(fwd, s);
            else
              bwd = bwd < 0 ? s : std::min(bwd, s);
          }
      // A backward op without a gradient operand (the partitioner's shard_slice of a forward
      // value) runs where it is read: left to the second sweep, not before `fwd`.
      if (p.phase == kForward)
        p.stage = fwd;
      else if (bwd >= 0)
        p.stage = std::max(bwd, fwd);
      else
        floor[op] = fwd;
    }
    for (Operation *op : llvm::reverse(ops)) {
      Place &p = place[op];
      if (p.stage >= 0)
        continue;
      int64_t chosen = -1;
      for (Value r : op->getResults())
        for (Operation *user : r.getUsers()) {
          auto it = place.find(user);
          if (it == place.end() || it->second.stage < 0)
            continue;
          int64_t s = it->second.stage;
          chosen = chosen < 0 ? s : p.phase == kForward ? std::min(chosen, s) : std::max(chosen, s);
        }
      p.stage = std::max<int64_t>({0, chosen, floor.lookup(op)});
    }
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    auto record = module->getAttrOfType<DictionaryAttr>(kPipelineAttr);
    func::FuncOp step = lookupProgram(module, ProgramRole::TrainStep);
    func::FuncOp optimizer = lookupProgram(module, ProgramRole::OptimizerStep);
    // Inference: the forward program alone, forward stages only.
    const bool inference = !step && !optimizer;
    if (inference)
      step = lookupProgram(module, ProgramRole::Forward);
    if (!record || !step || (!inference && !optimizer))
      return module.emitError("colossal-split-pipeline-stages needs @train_step, "
                              "@optimizer_step (or, for inference, @forward) and the module's "
                              "colossal.pipeline (run colossal-assign-pipeline-stages first)");
    const int64_t stages = record.getAs<IntegerAttr>("stages").getInt();

    Block &body = step.getBody().front();
    Operation *ret = body.getTerminator();
    // What the step returns, by output name: the loss, or the model's outputs.
    SmallVector<std::pair<Value, std::string>> returned;
    for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
      auto name = step.getResultAttrOfType<StringAttr>(i, kOutputAttr);
      returned.emplace_back(ret->getOperand(i), inference && name ? name.getValue().str() : std::string("loss"));
      if (!ret->getOperand(i).getDefiningOp())
        return step.emitError() << "pipeline parallelism: output '" << returned.back().second
                                << "' is an input of the model, computed by no stage";
    }

    // Phases: the backward slice of what the step returns is the forward part.
    llvm::DenseSet<Operation *> forward;
    SmallVector<Value> work;
    for (auto &[v, name] : returned)
      work.push_back(v);
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || !forward.insert(def).second)
        continue;
      for (Value v : def->getOperands())
        work.push_back(v);
    }
    SmallVector<Operation *> ops;
    llvm::DenseMap<Operation *, Place> place;
    for (Operation &op : body.without_terminator()) {
      if (op.hasTrait<OpTrait::ConstantLike>())
        continue;
      ops.push_back(&op);
      Place p;
      p.phase = forward.contains(&op) ? kForward : kBackward;
      if (auto s = op.getAttrOfType<IntegerAttr>(kStageAttr))
        p.stage = s.getInt();
      place[&op] = p;
    }
    placeUntagged(ops, place);

    // Zero-bubble schedules: a stage's backward ops that the values it hands on (to another
    // stage) do not need are its W.
    const std::string schedule = record.getAs<StringAttr>("schedule").getValue().str();
    const bool splitWeights = !inference && (schedule == "zb-h1" || schedule == "zbv");
    if (splitWeights) {
      llvm::DenseSet<Operation *> inputSide;
      SmallVector<Operation *> pending;
      for (Operation *op : ops) {
        const Place p = place[op];
        if (p.phase != kBackward)
          continue;
        bool leaves = false;
        for (Value r : op->getResults())
          for (Operation *user : r.getUsers())
            if (auto it = place.find(user); it == place.end() ? user == ret : !(it->second == p))
              leaves = true;
        if (leaves && inputSide.insert(op).second)
          pending.push_back(op);
      }
      while (!pending.empty()) {
        Operation *op = pending.pop_back_val();
        for (Value v : op->getOperands())
          if (Operation *def = v.getDefiningOp())
            if (auto it = place.find(def); it != place.end() && it->second == place[op] &&
                                           inputSide.insert(def).second)
              pending.push_back(def);
      }
      for (Operation *op : ops)
        if (place[op].phase == kBackward && !inputSide.contains(op))
          place[op].phase = kWeight;
    }

    // Direction: forward values flow to later stages, their gradients to earlier ones.
    for (Operation *op : ops) {
      Place to = place[op];
      if (to.stage >= stages)
        return op->emitError() << "colossal-split-pipeline-stages: stage " << to.stage
                               << " of " << stages;
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || def->hasTrait<OpTrait::ConstantLike>())
          continue;
        Place from = place[def];
        // Forward values flow to the same or later stages, gradients (B) to the same or earlier
        // ones (their backward or W); a W's values stay in it.
        bool ok = from.phase == kForward    ? from.stage <= to.stage
                  : from.phase == kBackward ? to.phase != kForward && from.stage >= to.stage
                                            : to == from;
        if (!ok)
          return op->emitError() << "colossal-split-pipeline-stages: " << describe(op)
                                 << " (stage " << to.stage << ") reads a value of "
                                 << describe(def) << " (stage " << from.stage
                                 << "), against the pipeline's direction";
      }
    }

    // Programs and the values that cross between them, named in block order.
    std::map<Place, Program> programs;
    for (int64_t s = 0; s < stages; ++s)
      for (Phase ph : {kForward, kBackward, kWeight})
        if (ph == kForward || (!inference && (ph == kBackward || splitWeights)))
          programs[Place{s, ph}].place = Place{s, ph};
    unsigned counter = 0;
    for (Operation *op : ops) {
      if (!programs.count(place[op]))
        continue;  // inference: ops nothing returned needs
      Program &prog = programs[place[op]];
      prog.ops.push_back(op);
      for (Value v : op->getOperands()) {
        if (auto arg = llvm::dyn_cast<BlockArgument>(v)) {
          prog.args.insert(arg.getArgNumber());
          continue;
        }
        Operation *def = v.getDefiningOp();
        if (def->hasTrait<OpTrait::ConstantLike>() || place[def] == prog.place)
          continue;
        Program &producer = programs[place[def]];
        auto [it, fresh] = producer.outputs.try_emplace(v, "");
        if (fresh)
          it->second = "pp." + std::to_string(counter++);
        prog.inputs.try_emplace(v, it->second);
      }
    }
    for (auto &[v, name] : returned)
      programs[place[v.getDefiningOp()]].returns.emplace_back(v, name);

    // The stage that updates each parameter and state. A gradient accumulator is written on one
    // stage (a tied parameter's contributions from later stages are sent to the earliest, where
    // autodiff's cotangent sum runs, in one rank's order). A parameter read on several stages
    // (tied weights) is updated where its gradient is, and the runtime sends the updated value
    // to the other stages that read it (docs/parallelism.md "Tied parameters").
    std::map<std::string, int64_t> owner;
    std::map<std::string, std::set<int64_t>> readers;
    for (auto &[where, prog] : programs)
      for (unsigned a : prog.args) {
        if (StringRef state = training::argMarker(step, a, kStateAttr); !state.empty()) {
          auto [it, fresh] = owner.try_emplace(state.str(), where.stage);
          if (!fresh && it->second != where.stage)
            return module.emitError() << "pipeline parallelism: state '" << state
                                      << "' is written on stages " << it->second << " and "
                                      << where.stage;
        }
        if (StringRef param = training::argMarker(step, a, kParamAttr); !param.empty())
          readers[param.str()].insert(where.stage);
      }
    for (auto &[param, stagesReading] : readers) {
      auto grad = owner.find(param + ".grad");
      owner[param] = grad != owner.end() ? grad->second : *stagesReading.begin();
    }

    OpBuilder b(ctx);
    b.setInsertionPointToEnd(module.getBody());
    for (auto &[where, prog] : programs) {
      SmallVector<Type> argTypes, resultTypes;
      SmallVector<DictionaryAttr> argAttrs, resultAttrs;
      for (unsigned a : prog.args) {
        argTypes.push_back(step.getArgument(a).getType());
        argAttrs.push_back(step.getArgAttrDict(a) ? step.getArgAttrDict(a) : b.getDictionaryAttr({}));
      }
      auto named = [&](StringRef key, StringRef name) {
        return b.getDictionaryAttr({b.getNamedAttr(key, b.getStringAttr(name))});
      };
      for (auto &[v, name] : prog.inputs) {
        argTypes.push_back(v.getType());
        argAttrs.push_back(named(kInputAttr, name));
      }
      for (auto &[v, name] : prog.outputs) {
        resultTypes.push_back(v.getType());
        resultAttrs.push_back(named(kOutputAttr, name));
      }
      for (auto &[v, name] : prog.returns) {
        resultTypes.push_back(v.getType());
        resultAttrs.push_back(named(kOutputAttr, name));
      }
      static const char *const suffix[] = {"_forward", "_backward", "_backward_weight"};
      static const ProgramRole role[] = {ProgramRole::StageForward, ProgramRole::StageBackward,
                                         ProgramRole::StageBackwardWeight};
      std::string symbol = "stage" + std::to_string(where.stage) + suffix[where.phase];
      auto fn = func::FuncOp::create(b, step.getLoc(), symbol,
                                     b.getFunctionType(argTypes, resultTypes));
      setProgramRole(fn, role[where.phase]);
      fn->setAttr(kStageAttr, b.getI64IntegerAttr(where.stage));
      Block *entry = fn.addEntryBlock();
      for (unsigned i = 0; i < argAttrs.size(); ++i)
        fn.setArgAttrs(i, argAttrs[i]);
      for (unsigned i = 0; i < resultAttrs.size(); ++i)
        fn.setResultAttrs(i, resultAttrs[i]);
      IRMapping map;
      unsigned k = 0;
      for (unsigned a : prog.args)
        map.map(step.getArgument(a), entry->getArgument(k++));
      for (auto &[v, name] : prog.inputs)
        map.map(v, entry->getArgument(k++));
      OpBuilder body(ctx);
      body.setInsertionPointToEnd(entry);
      for (Operation *op : prog.ops) {
        for (Value v : op->getOperands())
          if (Operation *def = v.getDefiningOp();
              def && def->hasTrait<OpTrait::ConstantLike>() && !map.contains(v))
            body.clone(*def, map);
        Operation *clone = body.clone(*op, map);
        clone->removeAttr(kStageAttr);
      }
      SmallVector<Value> results;
      for (auto &[v, name] : prog.outputs)
        results.push_back(map.lookup(v));
      for (auto &[v, name] : prog.returns)
        results.push_back(map.lookup(v));
      func::ReturnOp::create(body, step.getLoc(), results);
    }

    // The one-rank step keeps no stage tags.
    step.walk([](Operation *op) { op->removeAttr(kStageAttr); });
    if (inference)
      return success();
    auto virtualStages = record.getAs<IntegerAttr>("virtual_stages");
    const int64_t ranks = stages / (virtualStages ? virtualStages.getInt() : 1);
    // Stage s runs on rank s mod P; zbv's V: stage s < P on rank s, the rest on 2P - 1 - s.
    auto rankOf = [ranks, vShape = schedule == "zbv"](int64_t s) {
      return vShape ? (s < ranks ? s : 2 * ranks - 1 - s) : s % ranks;
    };
    return splitOptimizer(module, optimizer, ranks, rankOf, owner);
  }

  /// `@stage<r>_optimizer` for each of the `ranks` pipeline ranks: @optimizer_step without the
  /// updates of other ranks' stages (stage s runs on rank rankOf(s)), its global norm summed
  /// over the ranks.
  LogicalResult splitOptimizer(ModuleOp module, func::FuncOp optimizer, int64_t ranks,
                               llvm::function_ref<int64_t(int64_t)> rankOf,
                               const std::map<std::string, int64_t> &owner) {
    std::string axis;
    for (auto mesh : module.getOps<MeshOp>())
      for (auto [name, role] : llvm::zip(mesh.getAxes(), mesh.getRoles()))
        if (llvm::cast<StringAttr>(role).getValue() == "pipeline")
          axis = llvm::cast<StringAttr>(name).getValue().str();
    if (axis.empty())
      return module.emitError("colossal-split-pipeline-stages: the module's colossal.mesh has no "
                              "pipeline axis (run colossal-define-mesh with pp)");
    // The stage of an optimizer-step argument, by its parameter or state name (a state
    // `<p>.<suffix>` belongs to parameter p's stage).
    auto stageOfArg = [&](func::FuncOp fn, unsigned i) -> int64_t {
      StringRef name = training::argMarker(fn, i, kParamAttr);
      if (name.empty())
        name = training::argMarker(fn, i, kStateAttr);
      while (!name.empty()) {
        if (auto it = owner.find(name.str()); it != owner.end())
          return rankOf(it->second);
        size_t dot = name.rfind('.');
        if (dot == StringRef::npos)
          break;
        name = name.take_front(dot);
      }
      return -1;
    };
    OpBuilder b(module.getContext());
    for (int64_t s = 0; s < ranks; ++s) {
      b.setInsertionPointToEnd(module.getBody());
      auto fn = llvm::cast<func::FuncOp>(b.clone(*optimizer));
      fn.setSymName("stage" + std::to_string(s) + "_optimizer");
      setProgramRole(fn, ProgramRole::StageOptimizer);
      fn->setAttr(kStageAttr, b.getI64IntegerAttr(s));
      Block &body = fn.getBody().front();
      auto argStage = [&](Value v) -> int64_t {
        auto arg = llvm::dyn_cast<BlockArgument>(v);
        return arg && arg.getOwner() == &body ? stageOfArg(fn, arg.getArgNumber()) : -1;
      };
      SmallVector<Operation *> erase;
      SmallVector<GlobalNormOp> norms;
      for (Operation &op : body.without_terminator()) {
        if (auto norm = llvm::dyn_cast<GlobalNormOp>(op)) {
          norms.push_back(norm);
          continue;
        }
        if (op.getNumResults() != 0)
          continue;
        int64_t at = -1;
        for (Value v : op.getOperands())
          if ((at = argStage(v)) >= 0)
            break;
        if (at < 0)
          return op.emitError() << "colossal-split-pipeline-stages: cannot tell which stage's "
                                   "state " << describe(&op) << " updates";
        if (at != s)
          erase.push_back(&op);
      }
      for (Operation *op : erase)
        op->erase();
      for (GlobalNormOp norm : norms) {
        SmallVector<Value> mine;
        for (Value g : norm.getGrads()) {
          int64_t at = argStage(g);
          if (at < 0)
            return norm.emitError("colossal-split-pipeline-stages: a global_norm operand is not "
                                  "a gradient state");
          if (at == s)
            mine.push_back(g);
        }
        b.setInsertionPoint(norm);
        Location loc = norm.getLoc();
        auto f64 = RankedTensorType::get({}, b.getF64Type());
        auto f32 = RankedTensorType::get({}, b.getF32Type());
        Value partial =
            mine.empty()
                ? Value(ConstantOp::create(b, loc, DenseElementsAttr::get(f64, 0.0)))
                : Value(GlobalNormOp::create(b, loc, f64, mine, /*partial=*/true));
        Value total = AllReduceOp::create(b, loc, f64, partial, b.getStrArrayAttr({axis}),
                                          b.getStringAttr("sum"));
        Value zero = ConstantOp::create(b, loc, DenseElementsAttr::get(f32, 0.0f));
        Value result = GlobalNormOp::create(b, loc, norm.getType(), ValueRange{total, zero},
                                            /*partial=*/false);
        norm.replaceAllUsesWith(result);
        norm.erase();
      }
      training::eraseDeadOps(fn);
      llvm::BitVector unused(fn.getNumArguments());
      for (unsigned i = 0; i < fn.getNumArguments(); ++i)
        if (fn.getArgument(i).use_empty() && training::argMarker(fn, i, kInputAttr).empty())
          unused.set(i);
      if (failed(fn.eraseArguments(unused)))
        return fn.emitError("colossal-split-pipeline-stages: cannot drop unused arguments");
    }
    return success();
  }
};

} // namespace
} // namespace colossal

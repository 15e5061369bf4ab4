//===- PlanEmitter.cpp - colossal dialect -> plan protobuf + safetensors weights -------------===//
//
// emitPlan() runs in four stages:
//   1. collect: walk `func.func @forward` once, turning arguments, constants and ops into tensors
//      (name, dtype, shape, storage kind, alias) and pending instructions (table-driven, OpTable.h);
//      output bindings that cannot share bytes with another binding, an input or a weight get an
//      explicit `copy`;
//   2. plan memory (MemoryPlanner.h): liveness, zero-copy aliases, in-place updates, offsets; the
//      layout is re-checked for overlaps before anything is written;
//   3. build the plan::Plan message;
//   4. write weights and plan to temporary names in the plan's folder, then rename both.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/Target/Plan.h"
#include "dialects/Colossal/ColossalDialect.h"

#include "MemoryPlanner.h"
#include "Offload.h"
#include "PlanCollector.h"
#include "PlanReport.h"
#include "TrainConfig.h"

#include "colossal/runtime/PipelineSchedule.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Safetensors.h"
#include "llvm/ADT/StringExtras.h"

#include "plan.pb.h"
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "dialects/Colossal/ColossalOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace mlir;

namespace colossal {

namespace {

/// plan.proto's Program.Role of a compiler ProgramRole. A microbatch program never reaches the
/// plan (colossal-append-loss turns it into eval and train_step).
plan::Program::Role planRole(ProgramRole role) {
  switch (role) {
  case ProgramRole::Forward: return plan::Program::FORWARD;
  case ProgramRole::Eval: return plan::Program::EVAL;
  case ProgramRole::TrainStep: return plan::Program::TRAIN_STEP;
  case ProgramRole::OptimizerStep: return plan::Program::OPTIMIZER_STEP;
  case ProgramRole::StageForward: return plan::Program::STAGE_FORWARD;
  case ProgramRole::StageBackward: return plan::Program::STAGE_BACKWARD;
  case ProgramRole::StageOptimizer: return plan::Program::STAGE_OPTIMIZER;
  case ProgramRole::StageBackwardWeight: return plan::Program::STAGE_BACKWARD_WEIGHT;
  case ProgramRole::Generate: return plan::Program::GENERATE;
  case ProgramRole::Microbatch: return plan::Program::ROLE_UNSPECIFIED;
  }
  llvm_unreachable("ProgramRole");
}

//===----------------------------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------------------------===//

/// Removes the files it holds when destroyed (clear `paths` once they are committed).
struct TemporaryFiles {
  llvm::SmallVector<std::string, 2> paths;
  ~TemporaryFiles() {
    for (const std::string &p : paths)
      llvm::sys::fs::remove(p);
  }
};

/// A fresh, empty file `<path>.tmp-XXXXXX` in `path`'s folder.
llvm::Expected<std::string> createTemporary(llvm::StringRef path, TemporaryFiles &temps) {
  llvm::SmallString<256> tmp;
  int fd = -1;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueFile(path + ".tmp-%%%%%%", fd, tmp))
    return llvm::createStringError(ec, "%s: cannot create a temporary file: %s",
                                   path.str().c_str(), ec.message().c_str());
  llvm::sys::Process::SafelyCloseFileDescriptor(fd);
  temps.paths.push_back(tmp.str().str());
  return tmp.str().str();
}

llvm::Error writeBytes(llvm::StringRef path, llvm::StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return llvm::createStringError(ec, "%s: cannot open: %s", path.str().c_str(),
                                   ec.message().c_str());
  os << bytes;
  os.close();
  if (os.has_error()) {
    ec = os.error();
    os.clear_error();
    return llvm::createStringError(ec, "%s: write failed: %s", path.str().c_str(),
                                   ec.message().c_str());
  }
  return llvm::Error::success();
}

} // namespace

//===----------------------------------------------------------------------------------------===//
// emitPlan
//===----------------------------------------------------------------------------------------===//

namespace {

/// Plans one program's memory (MemoryPlanner.h) from its tensors and instructions.
memory::MemoryPlan planProgramMemory(const CollectedProgram &collected) {
  std::vector<memory::Value> values;
  values.reserve(collected.tensors.size());
  for (const Tensor &t : collected.tensors) {
    memory::Value &v = values.emplace_back();
    v.bytes = t.type.bytes;
    v.dtype = static_cast<int>(t.type.dtype);
    v.isWeight = t.isWeight;
    v.isState = t.isState;
    v.isInput = t.isInput;
    v.aliasOf = t.aliasOf;
  }
  std::vector<memory::Step> steps;
  steps.reserve(collected.instructions.size());
  for (const PendingInstruction &inst : collected.instructions) {
    memory::Step &step = steps.emplace_back();
    step.inputs = inst.inputs;
    step.outputs.assign(inst.outputs.begin(), inst.outputs.end());
    step.inPlaceSafe = inst.inPlaceSafe;
  }
  std::vector<uint32_t> outputIds;
  for (auto &binding : collected.outputs)
    outputIds.push_back(binding.second);
  return memory::planMemory(values, steps, outputIds);
}

/// Plans one program's memory and appends it to `planMsg`; fills `summary` for the report.
LogicalResult emitProgram(const CollectedProgram &collected, plan::Plan &planMsg,
                          ProgramSummary &summary) {
  const std::vector<Tensor> &tensors = collected.tensors;
  memory::MemoryPlan memPlan = planProgramMemory(collected);

  std::vector<memory::Interval> check;
  for (uint32_t s = 0; s < memPlan.storages.size(); ++s)
    if (memPlan.isArena(s)) {
      const memory::Storage &st = memPlan.storages[s];
      check.push_back({st.bytes, st.start, st.end, st.offset});
    }
  if (auto conflict = memory::findConflict(check, memPlan.arenaBytes))
    return func::FuncOp(collected.func).emitError()
           << "internal error: the memory plan places two live buffers on the "
              "same bytes (storages "
           << conflict->first << " and " << conflict->second << ")";

  // The program message.
  plan::Program *program = planMsg.add_programs();
  program->set_name(collected.name);
  program->set_role(planRole(collected.role));
  if (collected.stage >= 0)
    program->set_stage(static_cast<int32_t>(collected.stage));
  if (auto tokens = collected.func->getAttrOfType<IntegerAttr>(kTokensAttr))
    program->set_tokens(tokens.getInt());
  program->set_device(plan::CPU);
  program->set_arena_bytes(memPlan.arenaBytes);
  for (uint32_t id = 0; id < tensors.size(); ++id) {
    const Tensor &t = tensors[id];
    plan::Buffer *buffer = program->add_buffers();
    buffer->set_id(id);
    buffer->set_name(t.name);
    buffer->set_dtype(t.type.dtype);
    for (int64_t d : t.type.shape)
      buffer->add_shape(d);
    buffer->set_size_bytes(t.type.bytes);
    if (t.isWeight) {
      buffer->set_storage(plan::WEIGHT);
      buffer->set_weight_name(t.weightName);
      if (t.sharding)
        *buffer->mutable_sharding() = *t.sharding;
    } else if (t.isState) {
      buffer->set_storage(plan::STATE);
      buffer->set_state_name(t.stateName);
      for (const std::string &axis : t.chunkAxes)
        buffer->add_state_chunk_axes(axis);
    } else {
      buffer->set_storage(plan::ARENA);
      buffer->set_offset(memPlan.storages[memPlan.storageOf[id]].offset);
    }
  }
  for (const PendingInstruction &inst : collected.instructions) {
    plan::Instruction *out = program->add_instructions();
    out->set_op(inst.kernel);
    for (uint32_t in : inst.inputs)
      out->add_inputs(in);
    for (uint32_t res : inst.outputs)
      out->add_outputs(res);
    for (const auto &[name, attr] : inst.attrs)
      (*out->mutable_attrs())[name] = attr;
    out->set_loc(inst.loc);
  }
  for (const auto &[name, id] : collected.inputs) {
    plan::Binding *b = program->add_inputs();
    b->set_name(name);
    b->set_buffer(id);
  }
  for (const auto &[name, id] : collected.outputs) {
    plan::Binding *b = program->add_outputs();
    b->set_name(name);
    b->set_buffer(id);
  }

  // The report's view of it.
  summary.name = collected.name;
  summary.arenaBytes = memPlan.arenaBytes;
  summary.numInstructions = collected.instructions.size();
  summary.numBuffers = tensors.size();
  summary.numInPlace = llvm::count(memPlan.inPlace, true);
  for (const Tensor &t : tensors)
    summary.numAliases += t.aliasOf >= 0 && !t.isWeight && !t.isState;
  std::vector<size_t> holders(memPlan.storages.size(), 0);
  for (uint32_t s : memPlan.storageOf)
    ++holders[s];
  for (uint32_t s = 0; s < memPlan.storages.size(); ++s) {
    if (!memPlan.isArena(s))
      continue;
    const memory::Storage &st = memPlan.storages[s];
    const Tensor &root = tensors[st.root];
    ReportBuffer row;
    row.name = root.name;
    row.shape = root.type.shape;
    row.dtype = runtime::dtypeName(static_cast<runtime::DType>(root.type.dtype)).str();
    row.bytes = st.bytes;
    row.offset = st.offset;
    row.start = st.start;
    row.end = st.end;
    row.shared = holders[s] - 1;
    summary.buffers.push_back(std::move(row));
  }
  summary.endTime = memPlan.endTime;
  return success();
}

/// The plan instructions that move data between ranks (docs/plan.md "Collective instructions").
/// `shard_slice` and `axis_index` name mesh axes too but communicate nothing.
bool isCommunicating(llvm::StringRef op) {
  return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" ||
         op == "all_to_all" || op == "broadcast" || op == "all_gather_in_place" ||
         op == "reduce_scatter_in_place";
}

/// One collective kind's calls in a program: input bytes, calls, and elements counted as the
/// ZeRO paper does (Rajbhandari et al. 2020 §7): all_reduce of Ψ = 2Ψ, reduce_scatter of Ψ = Ψ,
/// all_gather producing Ψ = Ψ (the in-place forms name the whole tensors, so Ψ is their size).
struct CollectiveCount {
  uint64_t bytes = 0, calls = 0, elements = 0;
};

/// The collectives of one program by "op over 'axes'" (sorted by key). The bytes of a call are
/// the size of its input buffers (the tensor each rank puts in; for all_gather that is the local
/// piece, for reduce_scatter and all_reduce the whole operand).
using CollectiveTally = std::map<std::string, CollectiveCount>;

uint64_t numElements(const plan::Buffer &b) {
  uint64_t n = 1;
  for (int64_t d : b.shape())
    n *= static_cast<uint64_t>(d);
  return n;
}

/// A state's elements in its global shape (its sharding's, else its own).
uint64_t globalElements(const plan::StateTensor &st) {
  uint64_t n = 1;
  for (int64_t d : st.has_sharding() ? st.sharding().global_shape() : st.shape())
    n *= static_cast<uint64_t>(d);
  return n;
}

/// How often `program` runs per optimizer step (train plans: train_step grad_accum/dp times per
/// rank, optimizer_step once, eval not at all) or per run (inference: forward once). Under
/// pipeline parallelism the stage programs run instead (each stage program on its own rank, the
/// forward, backward and W once per microbatch), never train_step, optimizer_step or forward.
int64_t runsPerStep(const plan::Plan &planMsg, const plan::Program &program) {
  if (planMsg.has_pipeline() && (program.role() == plan::Program::TRAIN_STEP ||
                                 program.role() == plan::Program::OPTIMIZER_STEP ||
                                 program.role() == plan::Program::FORWARD))
    return 0;
  if (planMsg.mode() != "train")
    return program.role() == plan::Program::FORWARD             ? 1
           : program.role() == plan::Program::STAGE_FORWARD ? planMsg.pipeline().microbatches()
                                                                 : 0;
  if (program.role() == plan::Program::TRAIN_STEP) {
    int64_t dp = 1;
    for (const plan::MeshAxis &a : planMsg.mesh())
      if (a.role() == plan::MeshAxis::DATA)
        dp *= a.size();
    return planMsg.train().grad_accum() / std::max<int64_t>(dp, 1);
  }
  if (program.role() == plan::Program::STAGE_FORWARD || program.role() == plan::Program::STAGE_BACKWARD ||
      program.role() == plan::Program::STAGE_BACKWARD_WEIGHT)
    return planMsg.pipeline().microbatches();
  return program.role() == plan::Program::OPTIMIZER_STEP || program.role() == plan::Program::STAGE_OPTIMIZER ? 1 : 0;
}

/// The pipeline rank that runs `program` (a stage program's rank; a stage optimizer's `stage` is
/// its rank), or -1: every rank (no pipeline, or not a stage program).
int64_t pipelineRankOf(const plan::Plan &planMsg, const plan::Program &program) {
  if (!planMsg.has_pipeline())
    return -1;
  switch (program.role()) {
  case plan::Program::STAGE_OPTIMIZER: return program.stage();
  case plan::Program::STAGE_FORWARD:
  case plan::Program::STAGE_BACKWARD:
  case plan::Program::STAGE_BACKWARD_WEIGHT:
    return runtime::rankOfStage(planMsg.pipeline(), static_cast<uint32_t>(program.stage()));
  default: return -1;
  }
}

/// The collectives one rank runs per optimizer step (or run): each program's, times its runs,
/// for the programs of pipeline rank `rank` (-1: without a pipeline, all of them).
CollectiveTally tallyPerStep(const plan::Plan &planMsg, int64_t rank);

CollectiveTally tallyCollectives(const plan::Program &program) {
  CollectiveTally tally;
  const auto buffers = static_cast<uint32_t>(program.buffers_size());
  for (const plan::Instruction &inst : program.instructions()) {
    if (!isCommunicating(inst.op()) || inst.inputs_size() < 1)
      continue;
    auto axes = inst.attrs().find("axes");
    std::string key =
        inst.op() + " over '" + (axes == inst.attrs().end() ? "" : axes->second.s()) + "'";
    CollectiveCount &c = tally[key];
    uint64_t in = 0;
    for (uint32_t id : inst.inputs())
      if (id < buffers) {
        c.bytes += program.buffers(id).size_bytes();
        in += numElements(program.buffers(id));
      }
    uint64_t out = 0;
    for (uint32_t id : inst.outputs())
      if (id < buffers)
        out += numElements(program.buffers(id));
    c.elements += inst.op() == "all_reduce" ? 2 * in : inst.op() == "all_gather" ? out : in;
    c.calls += 1;
  }
  return tally;
}

CollectiveTally tallyPerStep(const plan::Plan &planMsg, int64_t rank) {
  CollectiveTally perStep;
  for (const plan::Program &program : planMsg.programs()) {
    const int64_t at = pipelineRankOf(planMsg, program);
    if (at >= 0 && at != rank)
      continue;
    const int64_t runs = runsPerStep(planMsg, program);
    for (const auto &[key, v] : tallyCollectives(program)) {
      CollectiveCount &c = perStep[key];
      c.bytes += runs * v.bytes;
      c.calls += runs * v.calls;
      c.elements += runs * v.elements;
    }
  }
  return perStep;
}

/// The largest sum of bytes of gathered parameters alive at once in `program` (ZeRO stage 3:
/// all_gather outputs of PARAM state chunks, alive from the gather to their last reader), or 0.
uint64_t gatheredParamPeak(const plan::Program &program,
                           const std::set<std::string> &paramStates) {
  const auto buffers = static_cast<uint32_t>(program.buffers_size());
  std::map<uint32_t, std::pair<int, int>> live; // buffer -> [gathered at, last read]
  for (int i = 0; i < program.instructions_size(); ++i) {
    const plan::Instruction &inst = program.instructions(i);
    for (uint32_t id : inst.inputs())
      if (auto it = live.find(id); it != live.end())
        it->second.second = i;
    if (inst.op() == "all_gather" && inst.inputs_size() == 1 && inst.outputs_size() == 1 &&
        inst.inputs(0) < buffers && inst.outputs(0) < buffers) {
      const plan::Buffer &in = program.buffers(inst.inputs(0));
      if (in.storage() == plan::STATE && paramStates.count(in.state_name()))
        live[inst.outputs(0)] = {i, i};
    }
  }
  uint64_t peak = 0;
  for (int i = 0; i < program.instructions_size(); ++i) {
    uint64_t now = 0;
    for (const auto &[id, range] : live)
      if (range.first <= i && i <= range.second)
        now += program.buffers(id).size_bytes();
    peak = std::max(peak, now);
  }
  return peak;
}

/// `--report`'s ZeRO line (docs/parallelism.md "ZeRO"): the stage, and which trainable parameters
/// have some state split into dim-0 chunks over the data axes; those whole on every rank by name.
void printZeroSummary(const plan::Plan &planMsg, llvm::raw_ostream &os) {
  std::set<std::string> dataAxes;
  std::string axesText;
  int64_t ranks = 1;
  for (const plan::MeshAxis &a : planMsg.mesh())
    if (a.role() == plan::MeshAxis::DATA) {
      dataAxes.insert(a.name());
      axesText += (axesText.empty() ? "'" : ", '") + a.name() + "'";
      ranks *= a.size();
    }
  auto chunked = [&](const plan::StateTensor &st) {
    if (!st.has_sharding() || st.sharding().dims_size() == 0)
      return false;
    for (const plan::DimSharding &d : st.sharding().dims())
      for (const std::string &axis : d.axes())
        if (dataAxes.count(axis))
          return true;
    return false;
  };
  std::map<std::string, std::pair<bool, uint64_t>> params; // name -> (partitioned, elements)
  for (const plan::StateTensor &st : planMsg.states()) {
    if (st.role() != plan::StateTensor::PARAM)
      continue;
    params[st.name()].second = globalElements(st);
  }
  for (const plan::StateTensor &st : planMsg.states()) {
    const std::string &owner = st.role() == plan::StateTensor::PARAM ? st.name() : st.param();
    if (auto it = params.find(owner); it != params.end() && chunked(st))
      it->second.first = true;
  }
  uint64_t split = 0, total = 0, count = 0;
  std::string whole;
  for (const auto &[name, v] : params) {
    total += v.second;
    if (v.first) {
      split += v.second;
      ++count;
    } else {
      whole += (whole.empty() ? "" : ", ") + name;
    }
  }
  os << "ZeRO stage " << planMsg.train().zero_stage() << " over " << axesText << " (" << ranks
     << " ranks): " << count << " of " << params.size() << " trainable parameters partitioned ("
     << split << " of " << total << " elements); whole on every rank: "
     << (whole.empty() ? "none" : whole) << "\n";
}

/// Point-to-point traffic of a pipeline plan, per pipeline rank and optimizer step: the bytes
/// its stage programs send to stages on other ranks (forward: activations; backward: their
/// gradients), once per receiving rank and microbatch, and the messages that carry them (the
/// runtime's PipelineRunner sends one message per value and receiving rank).
struct PointToPoint {
  uint64_t forwardBytes = 0, backwardBytes = 0, messages = 0;
};
std::vector<PointToPoint> pipelinePointToPoint(const plan::Plan &planMsg) {
  const plan::Pipeline &pl = planMsg.pipeline();
  const uint32_t ranks = pl.stages() / std::max<uint32_t>(1, pl.virtual_stages());
  std::vector<PointToPoint> out(ranks);
  if (!planMsg.has_pipeline() || ranks == 0)
    return out;
  // Which ranks read each transferred value.
  std::map<std::string, std::set<uint32_t>> readers;
  for (const plan::Program &prog : planMsg.programs())
    if (prog.role() == plan::Program::STAGE_FORWARD || prog.role() == plan::Program::STAGE_BACKWARD ||
        prog.role() == plan::Program::STAGE_BACKWARD_WEIGHT)
      for (const plan::Binding &in : prog.inputs())
        if (llvm::StringRef(in.name()).starts_with("pp."))
          readers[in.name()].insert(runtime::rankOfStage(pl, static_cast<uint32_t>(prog.stage())));
  for (const plan::Program &prog : planMsg.programs()) {
    const bool forward = prog.role() == plan::Program::STAGE_FORWARD;
    if (!forward && prog.role() != plan::Program::STAGE_BACKWARD)
      continue;
    const uint32_t rank = runtime::rankOfStage(pl, static_cast<uint32_t>(prog.stage()));
    for (const plan::Binding &o : prog.outputs()) {
      auto it = readers.find(o.name());
      if (it == readers.end())
        continue;
      const uint64_t bytes = prog.buffers(static_cast<int>(o.buffer())).size_bytes();
      for (uint32_t to : it->second)
        if (to != rank) {
          (forward ? out[rank].forwardBytes : out[rank].backwardBytes) += bytes * pl.microbatches();
          out[rank].messages += pl.microbatches();
        }
    }
  }
  return out;
}

/// `--report` for a mesh (docs/parallelism.md "Report"): the mesh; a note that the memory figures
/// above are per rank (the plan's buffers and states have each rank's local shapes, replicated
/// or sharded); then, per program, the count and bytes of each collective by (op, axes) for one
/// call of the program; then the communication per optimizer step (train plans: train_step runs
/// grad_accum/dp times per rank per step, optimizer_step once; eval is not counted) or per run
/// (inference: forward once). Bytes = the size of each call's input buffer, summed.
void printCommunicationReport(const plan::Plan &planMsg, llvm::raw_ostream &os) {
  std::string mesh, roles, data;
  int64_t dp = 1, ranks = 1;
  for (const plan::MeshAxis &a : planMsg.mesh()) {
    mesh += (mesh.empty() ? "" : " x ") + a.name() + "=" + std::to_string(a.size());
    roles += (roles.empty() ? "" : ", ") + a.name() + " " +
             llvm::StringRef(plan::MeshAxis::Role_Name(a.role())).lower();
    ranks *= a.size();
    if (a.role() == plan::MeshAxis::DATA) {
      dp *= a.size();
      data += (data.empty() ? "'" : ", '") + a.name() + "'";
    }
  }
  os << "mesh: " << (mesh.empty() ? "one rank" : mesh)
     << " (per-rank figures: the plan's buffers and states hold each rank's local shapes, "
        "replicated or sharded, so the memory above is per rank)\n";
  // The axes' roles and each rank's coordinates, row-major over the axes (the last fastest).
  if (ranks > 1) {
    os << "axis roles: " << roles << "\n";
    constexpr int64_t kListed = 16;
    os << "ranks (coordinates, row-major over the axes in order, the last fastest):\n";
    for (int64_t r = 0; r < std::min(ranks, kListed); ++r) {
      os << "  rank " << r << ":";
      int64_t stride = ranks;
      for (const plan::MeshAxis &a : planMsg.mesh()) {
        stride /= a.size();
        os << " " << a.name() << "=" << (r / stride) % a.size();
      }
      os << "\n";
    }
    if (ranks > kListed)
      os << "  ... (" << ranks - kListed << " more)\n";
  }
  const bool train = planMsg.mode() == "train";
  if (train && planMsg.train().zero_stage() > 0)
    printZeroSummary(planMsg, os);
  os << "collectives per program call (bytes = each call's input buffer on one rank):\n";
  for (const plan::Program &program : planMsg.programs()) {
    CollectiveTally tally = tallyCollectives(program);
    int64_t runs = runsPerStep(planMsg, program);
    os << "  " << program.name() << " (";
    if (runs == 0)
      os << "not part of a " << (train ? "step" : "run");
    else
      os << runs << (runs == 1 ? " call" : " calls") << " per " << (train ? "step" : "run");
    if (int64_t at = pipelineRankOf(planMsg, program); at >= 0)
      os << " on pipeline rank " << at;
    os << "):" << (tally.empty() ? " none" : "") << "\n";
    for (const auto &[key, v] : tally)
      os << "    " << key << ": " << v.calls << (v.calls == 1 ? " call, " : " calls, ") << v.bytes
         << " bytes\n";
  }
  // Ψ: the trainable elements of the whole model (global shapes), for the ZeRO counts.
  uint64_t psi = 0;
  std::set<std::string> paramStates;
  for (const plan::StateTensor &st : planMsg.states()) {
    if (st.role() != plan::StateTensor::PARAM)
      continue;
    paramStates.insert(st.name());
    psi += globalElements(st);
  }
  auto psiText = [&](uint64_t elements) {
    return psi ? llvm::formatv(" = {0:F3} Ψ", static_cast<double>(elements) / static_cast<double>(psi)).str()
               : std::string();
  };
  // One rank's collectives; under a pipeline each pipeline rank runs only its stages' programs.
  const int64_t pipelineRanks =
      planMsg.has_pipeline() ? planMsg.pipeline().stages() / std::max<uint32_t>(1, planMsg.pipeline().virtual_stages()) : 0;
  for (int64_t rank = pipelineRanks ? 0 : -1; rank < pipelineRanks; ++rank) {
    os << "communication per " << (train ? "optimizer step" : "run")
       << (rank >= 0 ? " on pipeline rank " + std::to_string(rank) : std::string())
       << " (bytes of each rank's collective inputs):\n";
    uint64_t total = 0, totalElements = 0;
    bool any = false;
    for (const auto &[key, v] : tallyPerStep(planMsg, rank)) {
      if (v.calls == 0)
        continue;
      any = true;
      os << "  " << key << ": " << v.bytes << " bytes in " << v.calls << " collectives; "
         << v.elements << " elements (ZeRO count)" << psiText(v.elements) << "\n";
      total += v.bytes;
      totalElements += v.elements;
    }
    if (!any)
      os << "  none\n";
    os << "  total: " << total << " bytes; " << totalElements << " elements (ZeRO count)"
       << psiText(totalElements) << (psi ? " with Ψ = " + std::to_string(psi) + " trainable elements" : "")
       << "\n";
    if (rank < 0)
      break;
  }
  if (planMsg.has_pipeline()) {
    std::string axis;
    for (const plan::MeshAxis &a : planMsg.mesh())
      if (a.role() == plan::MeshAxis::PIPELINE)
        axis = a.name();
    os << "  point-to-point over '" << axis << "' (the pipeline's stages; not in the total above), bytes sent "
       << "per " << (train ? "optimizer step" : "run") << ":\n";
    std::vector<PointToPoint> p2p = pipelinePointToPoint(planMsg);
    for (size_t r = 0; r < p2p.size(); ++r)
      os << "    pipeline rank " << r << ": " << p2p[r].forwardBytes << " forward (activations), "
         << p2p[r].backwardBytes << " backward (gradients), in " << p2p[r].messages << " messages\n";
    // Tied parameters (read by stages on several ranks): broadcast from their owner after each
    // update (docs/parallelism.md "Tied weights").
    std::map<std::string, std::set<int64_t>> readBy;
    for (const plan::Program &program : planMsg.programs())
      if (int64_t at = pipelineRankOf(planMsg, program); at >= 0 && program.role() != plan::Program::STAGE_OPTIMIZER)
        for (const plan::Buffer &b : program.buffers())
          if (!b.state_name().empty())
            readBy[b.state_name()].insert(at);
    uint64_t tiedBytes = 0;
    std::string tiedNames;
    for (const plan::StateTensor &st : planMsg.states())
      if (st.role() == plan::StateTensor::PARAM && readBy[st.name()].size() > 1) {
        uint64_t n = runtime::dtypeSize(static_cast<runtime::DType>(st.dtype()));
        for (int64_t d : st.shape())
          n *= static_cast<uint64_t>(d);
        tiedBytes += n;
        tiedNames += (tiedNames.empty() ? "'" : ", '") + st.name() + "'";
      }
    if (tiedBytes)
      os << "  broadcast over '" << axis << "' of the tied parameters (" << tiedNames
         << ") after each update: " << tiedBytes << " bytes from the rank that updates them\n";
  }
  for (const plan::Program &program : planMsg.programs())
    if (uint64_t peak = gatheredParamPeak(program, paramStates))
      os << "  ZeRO-3 gathered parameters in " << program.name() << ": transient peak " << peak
         << " bytes (all_gather outputs alive at once; inside the arena above)\n";
  if (train && dp > 1)
    os << "  (plus the runtime's all_reduce of the step's loss over " << data << ": 8 bytes)\n";
  if (train && planMsg.has_pipeline())
    os << "  (plus the runtime's all_reduce of the step's loss over the pipeline axis and an all_gather of each "
          "pipeline rank's saved-activation peak for the metrics: a few elements, counted in the metrics' "
          "comm_elements)\n";
}

/// `--report-format=json` (docs/cli.md "Report as JSON"): the text report's figures as one JSON
/// object, for scripts. Bytes are per rank (the plan's local shapes). `memory`: the predicted
/// peak, the budget (null without one), the smallest budget recompute can meet (the peak itself
/// when none was computed), what is recomputed (null: nothing) and offloaded ("none" until
/// offload exists).
void printPlanReportJson(const PlanSummary &s, const plan::Plan &planMsg, llvm::raw_ostream &os) {
  namespace json = llvm::json;
  auto shape = [](llvm::ArrayRef<int64_t> dims) {
    json::Array a;
    for (int64_t d : dims)
      a.push_back(d);
    return a;
  };
  uint64_t arena = 0;
  std::string largest;
  json::Array programs;
  for (const ProgramSummary &p : s.programs) {
    if (largest.empty() || p.arenaBytes > arena) {
      arena = p.arenaBytes;
      largest = p.name;
    }
    programs.push_back(json::Object{{"name", p.name},
                                    {"instructions", static_cast<int64_t>(p.numInstructions)},
                                    {"buffers", static_cast<int64_t>(p.numBuffers)},
                                    {"arena_bytes", static_cast<int64_t>(p.arenaBytes)}});
  }
  const uint64_t weights = s.train ? s.readOnlyWeightBytes : s.weightBytes;
  const uint64_t peak = s.offload.mode.empty() ? s.paramBytes + s.gradBytes + s.optimizerBytes + weights + arena
                                               : s.peakBytes;
  json::Object perRank{{"params", static_cast<int64_t>(s.paramBytes)},
                       {"grads", static_cast<int64_t>(s.gradBytes)},
                       {"optimizer", static_cast<int64_t>(s.optimizerBytes)},
                       {"weights", static_cast<int64_t>(weights)},
                       {"activations", static_cast<int64_t>(arena)},
                       {"offloaded", static_cast<int64_t>(s.offload.offloadedBytes)},
                       {"peak", static_cast<int64_t>(peak)}};
  json::Array params, buffers;
  for (const ReportParam &p : s.params)
    if (p.buffer)
      buffers.push_back(json::Object{{"name", p.name}, {"shape", shape(p.shape)}});
  for (const ReportParam &p : s.params)
    if (!p.buffer)
      params.push_back(json::Object{{"name", p.name},
                                  {"shape", shape(p.shape)},
                                  {"split", p.split},
                                  {"local_shape", shape(p.localShape)}});
  json::Array mesh;
  int64_t ranks = 1;
  for (const plan::MeshAxis &a : planMsg.mesh()) {
    ranks *= a.size();
    mesh.push_back(json::Object{{"name", a.name()},
                                {"size", a.size()},
                                {"role", llvm::StringRef(plan::MeshAxis::Role_Name(a.role())).lower()}});
  }
  // Communication per optimizer step (train) or run (inference), as the text report counts it.
  const bool train = planMsg.mode() == "train";
  // Under a pipeline, one entry per collective and pipeline rank (its `pipeline_rank`).
  json::Array communication;
  const int64_t pipelineRanks =
      planMsg.has_pipeline() ? planMsg.pipeline().stages() / std::max<uint32_t>(1, planMsg.pipeline().virtual_stages()) : 0;
  for (int64_t rank = pipelineRanks ? 0 : -1; rank < pipelineRanks; ++rank) {
    for (const auto &[key, v] : tallyPerStep(planMsg, rank))
      if (v.calls) {
        json::Object entry{{"collective", key},
                           {"bytes", static_cast<int64_t>(v.bytes)},
                           {"calls", static_cast<int64_t>(v.calls)},
                           {"elements", static_cast<int64_t>(v.elements)}};
        if (rank >= 0)
          entry["pipeline_rank"] = rank;
        communication.push_back(std::move(entry));
      }
    if (rank < 0)
      break;
  }
  // Without a computed minimum (no recompute possible: inference), the plan itself is the
  // smallest one the compiler can build.
  json::Value recompute = nullptr;
  if (!s.recompute.mode.empty())
    recompute = json::Object{{"mode", s.recompute.mode},
                             {"units", static_cast<int64_t>(s.recompute.units)},
                             {"ops", static_cast<int64_t>(s.recompute.ops)},
                             {"flops", static_cast<int64_t>(s.recompute.flops)},
                             {"forward_flops", static_cast<int64_t>(s.recompute.forwardFlops)}};
  json::Object memory{
      {"predicted_peak_bytes", static_cast<int64_t>(peak)},
      {"budget_bytes", s.budgetBytes ? json::Value(static_cast<int64_t>(s.budgetBytes)) : json::Value(nullptr)},
      {"minimum_budget_bytes", static_cast<int64_t>(s.minimumBudgetBytes ? s.minimumBudgetBytes : peak)},
      {"recompute", std::move(recompute)},
      {"offload", s.offload.mode.empty()
                      ? json::Value("none")
                      : json::Value(json::Object{
                            {"mode", s.offload.mode},
                            {"dir", s.offload.dir},
                            {"chunks", static_cast<int64_t>(s.offload.chunks)},
                            {"offloaded_bytes", static_cast<int64_t>(s.offload.offloadedBytes)},
                            {"resident_peak_bytes", static_cast<int64_t>(s.offload.residentPeakBytes)},
                            {"read_bytes_per_step", static_cast<int64_t>(s.offload.readPerStep)},
                            {"written_bytes_per_step", static_cast<int64_t>(s.offload.writtenPerStep)}})}};
  json::Object out{{"plan", s.planPath},
                   {"mode", planMsg.mode()},
                   {"mesh", std::move(mesh)},
                   {"ranks", ranks},
                   {"per_rank", std::move(perRank)},
                   {"largest_arena", largest},
                   {"programs", std::move(programs)},
                   {"trainable_parameters", std::move(params)},
                   {"buffers", std::move(buffers)},
                   {"communication", std::move(communication)},
                   {"memory", std::move(memory)}};
  if (train)
    out["zero_stage"] = planMsg.train().zero_stage();
  // The pipeline (docs/parallelism.md "Pipeline parallelism"): the schedule's figures, per stage
  // its rank and saved activation bytes, per pipeline rank its peak and point-to-point bytes.
  if (planMsg.has_pipeline()) {
    const plan::Pipeline &pl = planMsg.pipeline();
    auto at = [](const auto &list, uint32_t i) -> int64_t {
      return i < static_cast<uint32_t>(list.size()) ? static_cast<int64_t>(list.Get(i)) : 0;
    };
    json::Array stages, pipelineRanks;
    for (uint32_t st = 0; st < pl.stages(); ++st)
      stages.push_back(json::Object{{"stage", static_cast<int64_t>(st)},
                                    {"rank", static_cast<int64_t>(runtime::rankOfStage(pl, st))},
                                    {"saved_bytes_per_microbatch", at(pl.saved_bytes(), st)},
                                    {"saved_weight_bytes_per_microbatch", at(pl.saved_weight_bytes(), st)},
                                    {"peak_in_flight", at(pl.peak_in_flight(), st)},
                                    {"peak_saved_bytes", at(pl.stage_peak_saved_bytes(), st)}});
    std::vector<PointToPoint> p2p = pipelinePointToPoint(planMsg);
    const bool chunked = pl.stages() > p2p.size();
    for (uint32_t r = 0; r < p2p.size(); ++r) {
      json::Array actions;  // --dump-schedule's names: "F3", "sendB0", with chunks "F3.2"
      if (r < static_cast<uint32_t>(pl.ranks_size()))
        for (const plan::Pipeline::Action &a : pl.ranks(r).actions())
          actions.push_back(runtime::actionName(a) + (chunked ? "." + std::to_string(a.stage()) : std::string()));
      pipelineRanks.push_back(json::Object{{"rank", static_cast<int64_t>(r)},
                                           {"schedule", std::move(actions)},
                                           {"peak_saved_bytes", at(pl.peak_saved_bytes(), r)},
                                           {"actions", static_cast<int64_t>(r < static_cast<uint32_t>(pl.ranks_size())
                                                                               ? pl.ranks(r).actions_size() : 0)},
                                           {"sent_forward_bytes", static_cast<int64_t>(p2p[r].forwardBytes)},
                                           {"sent_backward_bytes", static_cast<int64_t>(p2p[r].backwardBytes)},
                                           {"messages", static_cast<int64_t>(p2p[r].messages)}});
    }
    out["pipeline"] = json::Object{{"schedule", pl.schedule()},
                                   {"stages", static_cast<int64_t>(pl.stages())},
                                   {"virtual_stages", static_cast<int64_t>(std::max<uint32_t>(1, pl.virtual_stages()))},
                                   {"microbatches", static_cast<int64_t>(pl.microbatches())},
                                   {"v_shape", pl.v_shape()},
                                   {"weight_split", pl.weight_split()},
                                   {"forward_only", pl.forward_only()},
                                   {"bubble", pl.bubble()},
                                   {"span_bubble", pl.span_bubble()},
                                   {"per_stage", std::move(stages)},
                                   {"per_rank", std::move(pipelineRanks)}};
  }
  os << llvm::formatv("{0:2}", json::Value(std::move(out))) << "\n";
}

/// The plan's mesh: the module's `colossal.mesh` (names, sizes and roles, in rank-layout order);
/// none (one rank) without one. The dialect verified it.
void emitMesh(ModuleOp module, plan::Plan &planMsg) {
  MeshOp mesh = lookupMesh(module);
  if (!mesh)
    return;
  for (auto [name, size, role] : llvm::zip(mesh.getAxes(), mesh.getShape(), mesh.getRoles())) {
    plan::MeshAxis *a = planMsg.add_mesh();
    a->set_name(llvm::cast<StringAttr>(name).getValue().str());
    a->set_size(size);
    switch (*parseAxisRole(llvm::cast<StringAttr>(role).getValue())) {
    case AxisRole::Data: a->set_role(plan::MeshAxis::DATA); break;
    case AxisRole::Tensor: a->set_role(plan::MeshAxis::TENSOR); break;
    case AxisRole::Pipeline: a->set_role(plan::MeshAxis::PIPELINE); break;
    case AxisRole::GridRow: a->set_role(plan::MeshAxis::GRID_ROW); break;
    case AxisRole::GridCol: a->set_role(plan::MeshAxis::GRID_COL); break;
    case AxisRole::GridDepth: a->set_role(plan::MeshAxis::GRID_DEPTH); break;
    }
  }
}

} // namespace

/// The report's "not trained" rows: each frozen parameter (frozen by a `train.frozen` regex, not
/// a float, or not reaching the loss), then the weight-like tensors the importer kept as
/// constants (kConstantWeightsAttr) with its reason.
static std::vector<ReportNotTrained> notTrainedRows(ModuleOp module,
                                                    const CollectedModule &collected) {
  llvm::StringSet<> byRegex;
  if (auto config = module->getAttrOfType<DictionaryAttr>(kTrainAttr))
    if (auto names = config.getAs<ArrayAttr>("frozen"))
      for (Attribute a : names)
        if (auto name = llvm::dyn_cast<StringAttr>(a))
          byRegex.insert(name.getValue());
  std::vector<ReportNotTrained> rows;
  for (const std::string &name : collected.frozen) {
    ReportNotTrained row{name, {}, "does not reach the loss"};
    for (const Weight &w : collected.weights)
      if (w.name == name) {
        row.shape = w.type.shape;
        if (w.type.dtype != plan::F32 && w.type.dtype != plan::F16 && w.type.dtype != plan::BF16 &&
            w.type.dtype != plan::F64)
          row.why = "not a float parameter";
      }
    if (byRegex.contains(name))
      row.why = "frozen by train.frozen";
    rows.push_back(std::move(row));
  }
  if (auto constants = module->getAttrOfType<ArrayAttr>(kConstantWeightsAttr))
    for (Attribute a : constants) {
      auto entry = llvm::dyn_cast<DictionaryAttr>(a);
      auto name = entry ? entry.getAs<StringAttr>("name") : StringAttr();
      auto type = entry ? entry.getAs<TypeAttr>("type") : TypeAttr();
      auto why = entry ? entry.getAs<StringAttr>("why") : StringAttr();
      if (!name || !type || !why)
        continue;
      ReportNotTrained row{name.str(), {}, why.str()};
      if (auto shaped = llvm::dyn_cast<ShapedType>(type.getValue()))
        row.shape.assign(shaped.getShape().begin(), shaped.getShape().end());
      rows.push_back(std::move(row));
    }
  return rows;
}

namespace {

/// predictMemory() on a collected module; `schedule` gets the offload schedule when the options
/// offload. `plannedArena`: the largest arena when the programs' memory is already planned.
MemoryPrediction predictCollected(const CollectedModule &collected, const PlanOptions &options,
                                  OffloadSchedule *schedule, std::optional<uint64_t> plannedArena) {
  MemoryPrediction out;
  llvm::StringMap<uint64_t> local; // weight name -> this rank's bytes (its largest view)
  for (const CollectedProgram &program : collected.programs) {
    if (!plannedArena)
      out.arenaBytes = std::max(out.arenaBytes, planProgramMemory(program).arenaBytes);
    for (const Tensor &t : program.tensors)
      if (t.isWeight && !t.weightName.empty() && t.aliasOf < 0)
        local[t.weightName] = std::max(local[t.weightName], t.type.bytes);
  }
  if (plannedArena)
    out.arenaBytes = *plannedArena;
  for (const plan::StateTensor &st : collected.states) {
    uint64_t count = 1;
    for (int64_t d : st.shape())
      count *= static_cast<uint64_t>(d);
    out.stateBytes += count * runtime::dtypeSize(static_cast<runtime::DType>(st.dtype()));
  }
  llvm::StringSet<> trainable;
  for (const TrainableParam &p : collected.trainable)
    trainable.insert(p.name);
  for (const Weight &w : collected.weights)
    if (!trainable.contains(w.name))
      out.weightBytes += collected.train ? w.type.bytes : local.lookup(w.name);
  if (collected.train && options.offloadMode != "none") {
    OffloadSchedule s = chooseOffload(collected, options.offloadMode, out.weightBytes + out.arenaBytes,
                                      options.memoryBudgetBytes);
    out.stateBytes = s.residentStateBytes;
    out.offloadedBytes = s.offloadedBytes;
    for (uint64_t r : s.residentPeak)
      out.residentChunkBytes = std::max(out.residentChunkBytes, r);
    if (schedule)
      *schedule = std::move(s);
  }
  return out;
}

} // namespace

FailureOr<MemoryPrediction> predictMemory(ModuleOp module, const PlanOptions &options) {
  CollectedModule collected;
  if (failed(collectModule(module, collected)))
    return failure();
  return predictCollected(collected, options, nullptr, std::nullopt);
}

/// Plan.pipeline (docs/plan.md "Pipeline"): the split colossal-assign-pipeline-stages recorded,
/// the schedule generated and checked by the simulator, and per stage the bytes its forward
/// keeps for its backward (the outputs of STAGE_FORWARD that STAGE_BACKWARD of the same stage
/// reads). A pipeline axis of size > 1 without stage programs is an error.
/// `--report`'s pipeline section (docs/parallelism.md "Pipeline parallelism"): per stage its
/// ops, trainable parameters, cost per microbatch (forward + backward, in the cost model's FLOP units),
/// predicted time relative to the slowest stage, the bytes its cut sends forward per microbatch
/// (their gradients come back at the same size), the bytes its forward saves for its backward
/// per microbatch and the schedule's peak of them; then each pipeline rank's peak of saved
/// bytes under the schedule (its stages together) and the schedule's bubble.
static void printPipelineReport(ModuleOp module, const plan::Plan &planMsg, llvm::raw_ostream &os) {
  const plan::Pipeline &p = planMsg.pipeline();
  auto record = module->getAttrOfType<DictionaryAttr>(kPipelineAttr);
  auto array = [&](llvm::StringRef key) {
    auto a = record ? record.getAs<DenseI64ArrayAttr>(key) : DenseI64ArrayAttr();
    return a ? a.asArrayRef() : llvm::ArrayRef<int64_t>();
  };
  llvm::ArrayRef<int64_t> ops = array("stage_ops"), flops = array("stage_cost"), cuts = array("cut_bytes");
  int64_t slowest = 1;
  for (int64_t f : flops)
    slowest = std::max(slowest, f);
  std::map<std::string, uint64_t> paramCount;
  for (const plan::StateTensor &st : planMsg.states())
    if (st.role() == plan::StateTensor::PARAM) {
      uint64_t n = 1;
      for (int64_t d : st.shape())
        n *= static_cast<uint64_t>(d);
      paramCount[st.name()] = n;
    }
  os << "\nPipeline: schedule " << p.schedule() << ", " << p.stages() << " stages, " << p.microbatches()
     << " microbatches per step\n";
  os << llvm::formatv("  {0,-6} {1,6} {2,12} {3,14} {4,9} {5,12} {6,12} {7,9} {8,12}\n", "stage", "ops",
                      "parameters", "cost/mb", "time", "cut bytes", "saved/mb", "in-flight", "activations");
  for (uint32_t s = 0; s < p.stages(); ++s) {
    std::set<std::string> params;
    for (const plan::Program &prog : planMsg.programs())
      if (prog.stage() == static_cast<int32_t>(s) && prog.role() == plan::Program::STAGE_FORWARD)
        for (const plan::Buffer &b : prog.buffers())
          if (paramCount.count(b.state_name()))
            params.insert(b.state_name());
    uint64_t count = 0;
    for (const std::string &name : params)
      count += paramCount[name];
    const uint64_t saved = s < static_cast<uint32_t>(p.saved_bytes_size()) ? p.saved_bytes(s) : 0;
    const uint32_t inFlight = s < static_cast<uint32_t>(p.peak_in_flight_size()) ? p.peak_in_flight(s) : 0;
    const uint64_t peak = s < static_cast<uint32_t>(p.stage_peak_saved_bytes_size()) ? p.stage_peak_saved_bytes(s)
                                                                                     : saved * inFlight;
    os << llvm::formatv("  {0,-6} {1,6} {2,12} {3,14} {4,9:F2} {5,12} {6,12} {7,9} {8,12}\n", s,
                        s < ops.size() ? ops[s] : 0, count, s < flops.size() ? flops[s] : 0,
                        s < flops.size() ? double(flops[s]) / double(slowest) : 0.0,
                        s < cuts.size() ? std::to_string(cuts[s]) : std::string("-"), saved, inFlight, peak);
  }
  os << "  peak saved activation bytes per pipeline rank (the schedule's):";
  for (uint64_t bytes : p.peak_saved_bytes())
    os << " " << bytes;
  os << "\n";
  os << llvm::formatv("  predicted bubble ({0} time units): {1:F4}; within each rank's own span: {2:F4}\n",
                      p.weight_split() ? "forward 1, B 1, W 1" : "forward 1, backward 2", p.bubble(),
                      p.span_bubble());
}

static LogicalResult emitPipeline(ModuleOp module, plan::Plan &planMsg, const PlanOptions &options) {
  auto record = module->getAttrOfType<DictionaryAttr>(kPipelineAttr);
  if (!record) {
    if (MeshOp mesh = lookupMesh(module))
      for (int i : mesh.axesWithRole(AxisRole::Pipeline))
        if (mesh.getShape()[i] > 1)
          return mesh.emitError() << "mesh axis '" << llvm::cast<StringAttr>(mesh.getAxes()[i]).getValue()
                                  << "' is a pipeline axis of size " << mesh.getShape()[i]
                                  << " but the module has no pipeline stages (run "
                                     "colossal-assign-pipeline-stages and colossal-split-pipeline-stages)";
    return success();
  }
  plan::Pipeline *p = planMsg.mutable_pipeline();
  p->set_stages(static_cast<uint32_t>(record.getAs<IntegerAttr>("stages").getInt()));
  p->set_microbatches(static_cast<uint32_t>(record.getAs<IntegerAttr>("microbatches").getInt()));
  p->set_schedule(record.getAs<StringAttr>("schedule").getValue().str());
  auto virtualStages = record.getAs<IntegerAttr>("virtual_stages");
  p->set_virtual_stages(static_cast<uint32_t>(virtualStages ? virtualStages.getInt() : 1));
  auto hasRole = [&](plan::Program::Role role) {
    return std::any_of(planMsg.programs().begin(), planMsg.programs().end(),
                       [&](const plan::Program &prog) { return prog.role() == role; });
  };
  p->set_forward_only(!hasRole(plan::Program::STAGE_BACKWARD));
  p->set_weight_split(hasRole(plan::Program::STAGE_BACKWARD_WEIGHT));
  p->set_v_shape(p->schedule() == "zbv");
  // Saved activations: the forward values a backward program (B or W) reads, as the runtime's
  // runner keeps them. Per stage per microbatch (saved_bytes; with a split backward, what W reads
  // of it, kept after B until W: saved_weight_bytes), and one by one per rank (saved_values):
  // live from their forward (or the receiving stage's, the earliest of the rank's stages that
  // reads them) until the last of the rank's programs that read them.
  using Kind = plan::Pipeline::Action::Kind;
  std::map<std::string, uint32_t> producerStage;
  for (const plan::Program &f : planMsg.programs())
    if (f.role() == plan::Program::STAGE_FORWARD)
      for (const plan::Binding &out : f.outputs())
        producerStage[out.name()] = static_cast<uint32_t>(f.stage());
  // (rank, name) -> its readers there (kind, stage); name -> bytes per microbatch.
  std::map<std::pair<uint32_t, std::string>, std::vector<std::pair<Kind, uint32_t>>> readers;
  std::map<std::string, uint64_t> bytesOf;
  for (const plan::Program &prog : planMsg.programs()) {
    Kind kind;
    switch (prog.role()) {
    case plan::Program::STAGE_FORWARD: kind = plan::Pipeline::Action::FORWARD; break;
    case plan::Program::STAGE_BACKWARD: kind = plan::Pipeline::Action::BACKWARD; break;
    case plan::Program::STAGE_BACKWARD_WEIGHT: kind = plan::Pipeline::Action::WEIGHT; break;
    default: continue;
    }
    const uint32_t stage = static_cast<uint32_t>(prog.stage());
    if (stage >= p->stages())
      continue;
    for (const plan::Binding &in : prog.inputs())
      if (producerStage.count(in.name())) {
        readers[{runtime::rankOfStage(*p, stage), in.name()}].emplace_back(kind, stage);
        bytesOf[in.name()] = prog.buffers(static_cast<int>(in.buffer())).size_bytes();
      }
  }
  std::vector<std::set<std::string>> saved(p->stages()), savedForW(p->stages());
  for (auto &[key, list] : readers) {
    auto &[rank, name] = key;
    bool backwardReads = false;
    for (auto &[kind, stage] : list)
      if (kind != plan::Pipeline::Action::FORWARD) {
        backwardReads = true;
        saved[stage].insert(name);
        if (kind == plan::Pipeline::Action::WEIGHT)
          savedForW[stage].insert(name);
      }
    if (!backwardReads)
      continue;  // only forwards read it here: not a saved activation
    plan::Pipeline::SavedValue *v = p->add_saved_values();
    v->set_name(name);
    v->set_bytes(bytesOf[name]);
    v->set_rank(rank);
    const uint32_t producer = producerStage[name];
    v->set_received(runtime::rankOfStage(*p, producer) != rank);
    uint32_t start = producer;
    if (v->received()) {
      start = list.front().second;
      for (auto &[kind, stage] : list)
        start = std::min(start, stage);
    }
    v->set_start_stage(start);
    for (auto &[kind, stage] : list) {
      v->add_reader_kinds(kind);
      v->add_reader_stages(stage);
    }
  }
  auto total = [&](const std::set<std::string> &names) {
    uint64_t sum = 0;
    for (const std::string &name : names)
      sum += bytesOf[name];
    return sum;
  };
  for (uint32_t s = 0; s < p->stages(); ++s) {
    p->add_saved_bytes(total(saved[s]));
    if (p->weight_split())
      p->add_saved_weight_bytes(total(savedForW[s]));
  }
  if (options.scheduleFile.empty()) {
    if (llvm::Error e = runtime::generateSchedule(*p))
      return module.emitError() << llvm::toString(std::move(e));
  } else {
    auto text = llvm::MemoryBuffer::getFile(options.scheduleFile);
    if (!text)
      return module.emitError() << options.scheduleFile << ": cannot read the schedule file: "
                                << text.getError().message();
    if (llvm::Error e = runtime::parseSchedule((*text)->getBuffer(), options.scheduleFile, *p))
      return module.emitError() << llvm::toString(std::move(e));
    p->set_schedule("file (" + p->schedule() + "'s programs)");
  }
  llvm::Expected<runtime::ScheduleStats> stats = runtime::simulateSchedule(*p);
  if (!stats)
    return module.emitError() << (options.scheduleFile.empty() ? "" : options.scheduleFile + ": ")
                              << llvm::toString(stats.takeError());
  p->set_bubble(stats->bubble);
  p->set_span_bubble(stats->spanBubble);
  for (uint32_t n : stats->peakInFlight)
    p->add_peak_in_flight(n);
  for (uint64_t bytes : stats->peakSavedBytes)
    p->add_peak_saved_bytes(bytes);
  for (uint64_t bytes : stats->stagePeakSavedBytes)
    p->add_stage_peak_saved_bytes(bytes);
  return success();
}

LogicalResult emitPlan(ModuleOp module, llvm::StringRef planPath, const PlanOptions &options,
                       llvm::raw_ostream *report) {
  // 1. Collect every function the plan holds.
  CollectedModule collected;
  if (failed(collectModule(module, collected)))
    return failure();
  if (options.mode == "train" && !collected.train)
    return module.emitError() << "mode 'train' needs a train-mode module (with the "
                                 "'colossal.train' attribute the training passes set)";
  if (collected.train && options.mode != "train" && options.mode != "inference")
    return module.emitError() << "the module is a train-mode module but the plan's mode is '"
                              << options.mode << "'";

  // 2-3. Plan each program's memory and build the plan message.
  plan::Plan planMsg;
  planMsg.set_version(runtime::kPlanVersion);
  planMsg.set_producer(options.producer);
  planMsg.set_mode(collected.train ? "train" : options.mode);
  PlanSummary summary;
  for (const CollectedProgram &program : collected.programs)
    if (failed(emitProgram(program, planMsg, summary.programs.emplace_back())))
      return failure();
  for (const plan::StateTensor &st : collected.states)
    *planMsg.add_states() = st;
  // Offload (docs/training.md "Offload"): the chunks and each program's schedule.
  OffloadSchedule offload;
  uint64_t largestArena = 0;
  for (const ProgramSummary &p : summary.programs)
    largestArena = std::max(largestArena, p.arenaBytes);
  const MemoryPrediction predicted = predictCollected(collected, options, &offload, largestArena);
  if (collected.train && options.offloadMode != "none") {
    plan::Offload *o = planMsg.mutable_offload();
    o->set_mode(options.offloadMode);
    llvm::SmallString<256> dir(options.offloadDir);
    if (dir.empty()) {
      dir = llvm::sys::path::parent_path(planPath);
      llvm::sys::path::append(dir, llvm::sys::path::stem(planPath) + ".offload");
    }
    if (std::error_code ec = llvm::sys::fs::make_absolute(dir))
      return module.emitError() << dir << ": " << ec.message();
    o->set_dir(dir.str().str());
    for (const plan::Offload::Chunk &c : offload.chunks)
      *o->add_chunks() = c;
    for (size_t p = 0; p < offload.actions.size(); ++p)
      for (const plan::Program::TierAction &a : offload.actions[p])
        *planMsg.mutable_programs(static_cast<int>(p))->add_tier_actions() = a;
  }
  if (failed(emitPipeline(module, planMsg, options)))
    return failure();
  // Before anything is written: a failed command leaves no plan behind.
  if (options.dumpSchedule && !planMsg.has_pipeline())
    return module.emitError("--dump-schedule: the plan has no pipeline (set mesh pp > 1)");
  emitMesh(module, planMsg);
  if (auto gen = module->getAttrOfType<DictionaryAttr>(kGenerateAttr)) {
    planMsg.set_mode("generate");
    plan::GenerateConfig *g = planMsg.mutable_generate();
    auto get = [&](llvm::StringRef key) {
      auto v = gen.getAs<IntegerAttr>(key);
      return v ? v.getInt() : int64_t(0);
    };
    g->set_max_seq_len(get("max_seq_len"));
    g->set_block_size(get("block_size"));
    g->set_num_blocks(get("num_blocks"));
    g->set_max_batch_seqs(get("max_batch_seqs"));
    g->set_max_batch_tokens(get("max_batch_tokens"));
    g->set_max_blocks_per_seq(get("max_blocks_per_seq"));
    g->set_vocab_size(get("vocab_size"));
    g->set_layers(get("layers"));
    g->set_kv_heads(get("kv_heads"));
    g->set_head_dim(get("head_dim"));
    g->set_kv_block_bytes(static_cast<uint64_t>(get("kv_block_bytes")));
    if (auto name = gen.getAs<StringAttr>("tokens_input"))
      g->set_tokens_input(name.str());
    g->set_source_model(options.sourceModel);
  } else if (options.mode == "generate") {
    return module.emitError("mode 'generate' needs the serving programs of colossal-generate "
                            "(the module's 'colossal.generate')");
  }
  if (collected.train) {
    if (failed(collectTrainConfig(module, collected, options, *planMsg.mutable_train())))
      return failure();
  } else if (!options.sourceModel.empty()) {
    // An inference plan's TrainConfig holds only the model compiled (for `export --onnx`).
    planMsg.mutable_train()->set_source_model(options.sourceModel);
    planMsg.mutable_train()->set_source_model_hash(options.sourceModelHash);
  }

  // 4. Write weights and plan under temporary names, then rename both.
  llvm::SmallString<256> folder = llvm::sys::path::parent_path(planPath);
  llvm::SmallString<256> weightsPath = folder;
  std::string weightsFile = (llvm::sys::path::stem(planPath) + ".safetensors").str();
  llvm::sys::path::append(weightsPath, weightsFile);
  if (weightsPath == planPath)
    return module.emitError() << planPath << ": the plan cannot be named like its weights file";
  // Only regular files (or nothing) may be replaced: never a device, FIFO, socket or folder.
  for (llvm::StringRef target : {planPath, llvm::StringRef(weightsPath)}) {
    llvm::sys::fs::file_status st;
    if (!llvm::sys::fs::status(target, st) && llvm::sys::fs::exists(st) &&
        st.type() != llvm::sys::fs::file_type::regular_file)
      return module.emitError() << target
                                << ": exists and is not a regular file; refusing to replace it";
  }
  auto fail = [&](llvm::Error err) {
    return module.emitError() << llvm::toString(std::move(err));
  };

  TemporaryFiles temps;
  std::string weightsTmp;
  uint64_t weightBytes = 0;
  if (!collected.weights.empty()) {
    auto tmp = createTemporary(weightsPath, temps);
    if (!tmp)
      return fail(tmp.takeError());
    weightsTmp = *tmp;
    std::vector<runtime::NamedTensor> named;
    named.reserve(collected.weights.size());
    for (const Weight &w : collected.weights) {
      runtime::NamedTensor n;
      n.name = w.name;
      n.dtype = static_cast<runtime::DType>(w.type.dtype);
      n.shape.assign(w.type.shape.begin(), w.type.shape.end());
      n.data = w.data.data();
      n.size_bytes = w.data.size();
      weightBytes += n.size_bytes;
      named.push_back(std::move(n));
    }
    if (llvm::Error err = runtime::writeSafetensors(weightsTmp, named, {{"producer", options.producer}}))
      return fail(std::move(err));
    uint64_t size = 0;
    if (std::error_code ec = llvm::sys::fs::file_size(weightsTmp, size))
      return module.emitError() << weightsTmp << ": " << ec.message();
    auto hash = runtime::fnv1a64File(weightsTmp);
    if (!hash)
      return fail(hash.takeError());
    planMsg.set_weights_file(weightsFile);
    planMsg.set_weights_size(size);
    planMsg.set_weights_hash(*hash);
  }

  // Deterministic (map entries sorted), so one module always gives the same bytes; checksummed.
  const std::string serialized = runtime::serializePlan(planMsg);
  auto planTmp = createTemporary(planPath, temps);
  if (!planTmp)
    return fail(planTmp.takeError());
  if (llvm::Error err = writeBytes(*planTmp, serialized))
    return fail(std::move(err));

  if (!weightsTmp.empty()) {
    if (std::error_code ec = llvm::sys::fs::rename(weightsTmp, weightsPath))
      return module.emitError() << weightsPath << ": cannot rename from " << weightsTmp << ": "
                                << ec.message();
    temps.paths.front() = weightsPath.str().str(); // now ours to remove if the plan fails
  }
  if (std::error_code ec = llvm::sys::fs::rename(*planTmp, planPath))
    return module.emitError() << planPath << ": cannot rename from " << *planTmp << ": "
                              << ec.message();
  temps.paths.clear(); // both committed

  if (report) {
    summary.planPath = planPath.str();
    summary.weightsFile = planMsg.weights_file();
    summary.weightBytes = weightBytes;
    summary.numWeights = collected.weights.size();
    if (planMsg.mesh_size() > 0) {
      // Per rank: a sharded weight's buffers hold the local shard (the file holds it whole).
      llvm::StringMap<uint64_t> local;
      for (const plan::Program &prog : planMsg.programs())
        for (const plan::Buffer &buf : prog.buffers())
          if (buf.storage() == plan::WEIGHT && !buf.weight_name().empty())
            local[buf.weight_name()] = std::max(local[buf.weight_name()], buf.size_bytes());
      summary.weightBytes = 0;
      for (const auto &entry : local)
        summary.weightBytes += entry.getValue();
    }
    summary.train = collected.train;
    summary.frozen = collected.frozen;
    summary.budgetBytes = options.memoryBudgetBytes;
    summary.peakBytes = predicted.peakBytes();
    if (planMsg.has_offload()) {
      ReportOffload &o = summary.offload;
      o.mode = planMsg.offload().mode();
      o.dir = planMsg.offload().dir();
      o.chunks = offload.chunks.size();
      o.offloadedBytes = offload.offloadedBytes;
      o.residentPeakBytes = predicted.residentChunkBytes;
      for (int p = 0; p < planMsg.programs_size(); ++p) {
        const int64_t runs = runsPerStep(planMsg, planMsg.programs(p));
        o.readPerStep += runs * offload.bytesRead[p];
        o.writtenPerStep += runs * offload.bytesWritten[p];
      }
    }
    summary.minimumBudgetBytes = options.minimumBudgetBytes;
    if (func::FuncOp step = lookupProgram(module, ProgramRole::TrainStep))
      if (auto r = step->getAttrOfType<DictionaryAttr>("colossal.recompute")) {
        auto get = [&](llvm::StringRef key) {
          auto a = r.getAs<IntegerAttr>(key);
          return a ? static_cast<uint64_t>(a.getInt()) : 0;
        };
        auto mode = r.getAs<StringAttr>("mode");
        summary.recompute = {mode ? mode.str() : "", get("units"), get("ops"), get("flops"),
                             get("forward_flops")};
      }
    if (collected.train) {
      summary.notTrained = notTrainedRows(module, collected);
      llvm::StringSet<> initWeights;
      for (const TrainableParam &p : collected.trainable) {
        ReportParam row{p.name, p.type.shape, p.count, "", p.type.shape, p.buffer};
        for (const plan::StateTensor &st : collected.states) {
          if (st.role() != plan::StateTensor::PARAM || st.name() != p.name ||
              !st.has_sharding() || st.sharding().dims_size() == 0)
            continue;
          // The state holds the local shard; the sharding names the global shape.
          row.localShape.assign(st.shape().begin(), st.shape().end());
          row.shape.assign(st.sharding().global_shape().begin(),
                           st.sharding().global_shape().end());
          row.count = 1;
          for (int64_t d : row.shape)
            row.count *= static_cast<uint64_t>(d);
          row.split = "[";
          for (int i = 0; i < st.sharding().dims_size(); ++i) {
            const plan::DimSharding &dim = st.sharding().dims(i);
            row.split += i ? ", " : "";
            row.split += dim.axes_size() ? llvm::join(dim.axes().begin(), dim.axes().end(), "*") : std::string("-");
            if (dim.blocks() > 1)
              row.split += "/" + std::to_string(dim.blocks());
          }
          row.split += "]";
        }
        summary.params.push_back(row);
        initWeights.insert(p.name);
      }
      for (const plan::StateTensor &st : collected.states) {
        uint64_t count = 1;
        for (int64_t d : st.shape())
          count *= static_cast<uint64_t>(d);
        uint64_t bytes = count * runtime::dtypeSize(static_cast<runtime::DType>(st.dtype()));
        switch (st.role()) {
        case plan::StateTensor::PARAM: summary.paramBytes += bytes; break;
        case plan::StateTensor::GRAD: summary.gradBytes += bytes; break;
        default: summary.optimizerBytes += bytes; break;
        }
      }
      for (const Weight &w : collected.weights)
        if (!initWeights.contains(w.name)) {
          summary.readOnlyWeightBytes += w.type.bytes;
          ++summary.numReadOnlyWeights;
        }
    }
    if (options.reportFormat == "json") {
      printPlanReportJson(summary, planMsg, *report);
      return success();
    }
    printPlanReport(summary, *report);
    if (planMsg.mesh_size() > 0)
      printCommunicationReport(planMsg, *report);
    if (planMsg.has_pipeline())
      printPipelineReport(module, planMsg, *report);
  }
  if (options.dumpSchedule) {
    llvm::Expected<runtime::ScheduleStats> stats = runtime::simulateSchedule(planMsg.pipeline());
    if (!stats)
      return module.emitError() << llvm::toString(stats.takeError());
    llvm::outs() << runtime::formatSchedule(planMsg.pipeline(), *stats);
  }
  return success();
}

} // namespace colossal

//===- PlanLoader.cpp - Parse and validate a plan and its weights ----------------------------===//
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/PipelineSchedule.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Sharding.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/stubs/logging.h>

#include <map>
#include <set>
#include <algorithm>
#include <set>
#include <cmath>
#include <limits>

namespace colossal::runtime {

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

std::string describeBuffer(const plan::Buffer &b, size_t index) {
  std::string s = "buffer " + std::to_string(index);
  if (!b.name().empty()) s += " ('" + b.name() + "')";
  return s;
}

std::string describeInstruction(const plan::Instruction &inst, size_t index) {
  std::string s = "instruction " + std::to_string(index) + " (" + inst.op();
  if (!inst.loc().empty()) s += " at " + inst.loc();
  return s + ")";
}

/// numel * dtypeSize with overflow detection; nullopt on overflow or negative dims.
std::optional<uint64_t> byteSize(const plan::Buffer &b) {
  uint64_t n = dtypeSize(static_cast<DType>(b.dtype()));
  for (int64_t d : b.shape()) {
    if (d < 0) return std::nullopt;
    if (d && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

TensorRef viewOf(const plan::Buffer &b) {
  TensorRef t;
  t.dtype = static_cast<DType>(b.dtype());
  t.shape.assign(b.shape().begin(), b.shape().end());
  return t;
}

/// Plan.states by name (validated by validateStates before any program).
using StateMap = llvm::StringMap<const plan::StateTensor *>;

/// Update instructions write persistent state in place (docs/training.md): output i is input i.
bool isUpdateOp(llvm::StringRef op) {
  return op == "accumulate_grad" || op == "update_buffer" || op == "adamw_update" || op == "adam_update" || op == "sgd_update" ||
         op == "all_gather_in_place" || op == "reduce_scatter_in_place" || op == "kv_append";
}

/// The aliasing rule for STATE buffers: an update instruction lists the STATE buffers it writes as
/// its outputs, each the same buffer id as the input at the same position; no other instruction
/// writes a STATE buffer, except an in-place `all_reduce` of one tensor or of a bucket (data
/// parallelism reduces the gradient accumulators in place, docs/parallelism.md).
llvm::Error checkStateWrites(const plan::Program &prog, const plan::Instruction &inst,
                             const std::string &what) {
  const bool inPlaceAllReduce = inst.op() == "all_reduce" && inst.inputs_size() >= 1 &&
                                inst.inputs_size() == inst.outputs_size() &&
                                std::equal(inst.inputs().begin(), inst.inputs().end(), inst.outputs().begin());
  bool update = isUpdateOp(inst.op()) || inPlaceAllReduce;
  for (int o = 0; o < inst.outputs_size(); ++o) {
    uint32_t id = inst.outputs(o);
    const plan::Buffer &b = prog.buffers(id);
    if (!update) {
      if (b.storage() == plan::STATE)
        return fail(what + ": writes STATE buffer " + llvm::Twine(id) + " ('" + b.state_name() +
                    "'); only accumulate_grad, update_buffer, adamw_update, adam_update, sgd_update, "
                    "all_gather_in_place, reduce_scatter_in_place and kv_append may");
      continue;
    }
    if (b.storage() != plan::STATE) {
      if (inPlaceAllReduce) continue;  // an in-place all_reduce of activations (tensor parallelism)
      return fail(what + ": output " + llvm::Twine(o) + " (buffer " + llvm::Twine(id) +
                  ") is not a STATE buffer; an update writes persistent state in place");
    }
    if (o >= inst.inputs_size() || inst.inputs(o) != id)
      return fail(what + ": output " + llvm::Twine(o) + " (buffer " + llvm::Twine(id) + ", state '" +
                  b.state_name() + "') must be the same buffer as input " + llvm::Twine(o));
  }
  return llvm::Error::success();
}

llvm::StringRef roleName(int role) {
  switch (role) {
  case plan::StateTensor::PARAM: return "PARAM";
  case plan::StateTensor::GRAD: return "GRAD";
  case plan::StateTensor::OPTIMIZER: return "OPTIMIZER";
  case plan::StateTensor::KV_CACHE: return "KV_CACHE";
  default: return "invalid";
  }
}

/// Whether two shardings are the same (dims, axes, blocks with 0 read as 1, global shape).
bool sameSharding(const plan::Sharding &a, const plan::Sharding &b) {
  if (a.dims_size() != b.dims_size() ||
      !std::equal(a.global_shape().begin(), a.global_shape().end(), b.global_shape().begin(), b.global_shape().end()))
    return false;
  for (int d = 0; d < a.dims_size(); ++d) {
    const plan::DimSharding &x = a.dims(d), &y = b.dims(d);
    if (std::max<int64_t>(x.blocks(), 1) != std::max<int64_t>(y.blocks(), 1) ||
        !std::equal(x.axes().begin(), x.axes().end(), y.axes().begin(), y.axes().end()))
      return false;
  }
  return true;
}

std::string shardingText(const plan::Sharding &s) {
  std::string out = "[";
  for (int d = 0; d < s.dims_size(); ++d) {
    out += d ? ", [" : "[";
    for (int i = 0; i < s.dims(d).axes_size(); ++i) out += (i ? "," : "") + s.dims(d).axes(i);
    out += "]";
    if (s.dims(d).blocks() > 1) out += "x" + std::to_string(s.dims(d).blocks()) + " blocks";
  }
  return out + "] of " + shapeToString(std::vector<int64_t>(s.global_shape().begin(), s.global_shape().end()));
}

/// Plan.states: unique non-empty names, valid roles, dtypes and shapes; PARAM names its initial
/// weight; GRAD and OPTIMIZER name an existing PARAM (a GRAD has its dtype and shape).
llvm::Error validateStates(const plan::Plan &p, const std::string &file, const Mesh &mesh, StateMap &states) {
  for (const plan::StateTensor &st : p.states()) {
    std::string what = file + "state '" + st.name() + "'";
    if (st.name().empty()) return fail(file + "state without a name");
    if (!states.try_emplace(st.name(), &st).second) return fail(what + ": appears twice");
    if (!isValidDType(st.dtype())) return fail(what + ": invalid dtype " + llvm::Twine(st.dtype()));
    for (int64_t d : st.shape())
      if (d < 0) return fail(what + ": negative dimension in its shape");
    switch (st.role()) {
    case plan::StateTensor::PARAM:
      if (st.init_weight().empty()) return fail(what + ": PARAM without init_weight");
      break;
    case plan::StateTensor::GRAD:
    case plan::StateTensor::OPTIMIZER:
      if (st.param().empty()) return fail(what + ": " + roleName(st.role()) + " state names no param");
      break;
    case plan::StateTensor::KV_CACHE:
      if (p.mode() != "generate") return fail(what + ": a KV_CACHE state in a " + p.mode() + " plan");
      if (st.dtype() != plan::F32 || st.shape_size() != 4)
        return fail(what + ": a KV cache is f32 [blocks, kv heads, block size, head dim]");
      break;
    default:
      return fail(what + ": invalid role " + llvm::Twine(st.role()));
    }
    if (st.has_sharding()) {
      // `shape` is the local shard's (docs/parallelism.md "Sharded tensors").
      llvm::Expected<ShardLayout> layout = makeShardLayout(st.sharding(), mesh, what);
      if (!layout) return layout.takeError();
      Shape local = localShape(*layout, mesh);
      if (!std::equal(local.begin(), local.end(), st.shape().begin(), st.shape().end()))
        return fail(what + ": shape " + shapeToString(std::vector<int64_t>(st.shape().begin(), st.shape().end())) +
                    " is not the local shard " + shapeToString(local) + " of its sharding " +
                    shardingText(st.sharding()) + " on mesh " + mesh.toString());
    }
  }
  for (const plan::StateTensor &st : p.states()) {
    if (st.role() == plan::StateTensor::PARAM || st.role() == plan::StateTensor::KV_CACHE) continue;
    std::string what = file + "state '" + st.name() + "'";
    auto it = states.find(st.param());
    if (it == states.end() || it->second->role() != plan::StateTensor::PARAM)
      return fail(what + ": its param '" + st.param() + "' is not a PARAM state of the plan");
    const plan::StateTensor &param = *it->second;
    if (st.role() != plan::StateTensor::GRAD) continue;
    // The accumulator holds the gradient of the whole parameter: same dtype and global shape, and
    // the parameter's sharding, or (ZeRO stages 2 and 3, docs/parallelism.md "ZeRO") that sharding with
    // one dim split further over more axes: this rank's chunk of the parameter's local shard.
    auto globalShape = [](const plan::StateTensor &t) {
      return t.has_sharding() ? std::vector<int64_t>(t.sharding().global_shape().begin(), t.sharding().global_shape().end())
                              : std::vector<int64_t>(t.shape().begin(), t.shape().end());
    };
    if (st.dtype() != param.dtype() || globalShape(st) != globalShape(param))
      return fail(what + ": gradient accumulator must have its param's dtype and global shape (" +
                  dtypeName(static_cast<DType>(param.dtype())) + " " + shapeToString(globalShape(param)) + ")");
    auto refines = [](const plan::StateTensor &grad, const plan::StateTensor &par) {
      if (!grad.has_sharding() || grad.sharding().dims_size() == 0) return false;
      const plan::Sharding &g = grad.sharding();
      plan::Sharding base;
      if (par.has_sharding()) base = par.sharding();
      else
        for (int d = 0; d < g.dims_size(); ++d) base.add_dims();
      if (base.dims_size() != g.dims_size()) return false;
      int refined = 0;  // dims split over more axes: exactly one
      for (int d = 0; d < g.dims_size(); ++d) {
        const plan::DimSharding &a = g.dims(d), &b = base.dims(d);
        if (std::max<int64_t>(a.blocks(), 1) != std::max<int64_t>(b.blocks(), 1)) return false;
        if (std::equal(a.axes().begin(), a.axes().end(), b.axes().begin(), b.axes().end())) continue;
        if (a.axes_size() <= b.axes_size() || !std::equal(b.axes().begin(), b.axes().end(), a.axes().begin()))
          return false;
        ++refined;
      }
      return refined == 1;
    };
    const bool same = st.has_sharding() == param.has_sharding() &&
                      (!st.has_sharding() || sameSharding(st.sharding(), param.sharding()));
    if (!same && !refines(st, param))
      return fail(what + ": gradient accumulator must have its param's sharding (" +
                  (param.has_sharding() ? shardingText(param.sharding()) : std::string("replicated")) +
                  ") or that sharding with one dim split over more axes (ZeRO), has " +
                  (st.has_sharding() ? shardingText(st.sharding()) : std::string("none (replicated)")));
  }
  return llvm::Error::success();
}

/// A program's binding by name, or null.
const plan::Buffer *findBinding(const plan::Program &prog,
                                const google::protobuf::RepeatedPtrField<plan::Binding> &bindings,
                                llvm::StringRef name) {
  for (const plan::Binding &b : bindings)
    if (b.name() == name) return &prog.buffers(b.buffer());
  return nullptr;
}

const plan::Program *findStageProgram(const plan::Plan &p, plan::Program::Role role, uint32_t stage) {
  for (const plan::Program &prog : p.programs())
    if (prog.role() == role && prog.stage() == static_cast<int32_t>(stage)) return &prog;
  return nullptr;
}

const plan::Program *findProgram(const plan::Plan &p, plan::Program::Role role) {
  for (const plan::Program &prog : p.programs())
    if (prog.role() == role) return &prog;
  return nullptr;
}

/// TrainConfig of a `mode: train` plan against its programs (docs/training.md "Plan").
/// Plan.pipeline (docs/plan.md "Pipeline"): a train plan whose pipeline axis has `stages` ranks,
/// each stage's three programs, every `pp.*` input produced by another stage program under the
/// same name, dtype and shape, and a schedule the simulator accepts.
llvm::Error validatePipeline(const plan::Plan &p, const std::string &file, const Mesh &mesh) {
  const plan::Pipeline &pl = p.pipeline();
  if ((p.mode() == "train") == pl.forward_only())
    return fail(file + "a " + (pl.forward_only() ? "forward-only" : "training") + " pipeline in a " + p.mode() + " plan");
  int64_t axisSize = 0;
  for (const plan::MeshAxis &a : p.mesh())
    if (a.role() == plan::MeshAxis::PIPELINE) axisSize = a.size();
  const uint32_t V = std::max<uint32_t>(1, pl.virtual_stages());
  if (pl.stages() < 2 || pl.stages() % V != 0 || axisSize != static_cast<int64_t>(pl.stages() / V))
    return fail(file + "pipeline of " + llvm::Twine(pl.stages()) + " stages (" + llvm::Twine(pl.virtual_stages()) +
                " per rank) on a pipeline axis of " + llvm::Twine(axisSize) + " ranks (" + mesh.toString() + ")");
  auto dims = [](const plan::Buffer &b) { return std::vector<int64_t>(b.shape().begin(), b.shape().end()); };
  std::map<std::string, std::pair<const plan::Program *, const plan::Buffer *>> produced;
  for (uint32_t s = 0; s < pl.stages(); ++s)
    for (plan::Program::Role role : {plan::Program::STAGE_FORWARD, plan::Program::STAGE_BACKWARD,
                                     plan::Program::STAGE_BACKWARD_WEIGHT, plan::Program::STAGE_OPTIMIZER}) {
      if (role == plan::Program::STAGE_OPTIMIZER && s >= pl.stages() / V) continue;  // one per rank
      if (role != plan::Program::STAGE_FORWARD && pl.forward_only()) continue;
      if (role == plan::Program::STAGE_BACKWARD_WEIGHT && !pl.weight_split()) {
        if (const plan::Program *extra = findStageProgram(p, role, s))
          return fail(file + "program '" + extra->name() + "' is a stage_backward_weight program, but the plan's " +
                      "pipeline does not split the backward (Pipeline.weight_split)");
        continue;
      }
      const plan::Program *prog = findStageProgram(p, role, s);
      if (!prog)
        return fail(file + "pipeline stage " + llvm::Twine(s) + " has no " + programRoleName(role) + " program");
      for (const plan::Binding &out : prog->outputs())
        if (llvm::StringRef(out.name()).starts_with("pp."))
          produced[out.name()] = {prog, &prog->buffers(static_cast<int>(out.buffer()))};
    }
  for (const plan::Program &prog : p.programs())
    for (const plan::Binding &in : prog.inputs()) {
      if (!llvm::StringRef(in.name()).starts_with("pp.")) continue;
      auto it = produced.find(in.name());
      const plan::Buffer &b = prog.buffers(static_cast<int>(in.buffer()));
      if (it == produced.end() || it->second.first == &prog)
        return fail(file + "program '" + prog.name() + "' input '" + in.name() +
                    "': no other stage program outputs it");
      const plan::Buffer &src = *it->second.second;
      if (src.dtype() != b.dtype() || dims(src) != dims(b))
        return fail(file + "program '" + prog.name() + "' input '" + in.name() + "' is " +
                    dtypeName(static_cast<DType>(b.dtype())) + " " + shapeToString(dims(b)) + " but '" +
                    it->second.first->name() + "' outputs " + dtypeName(static_cast<DType>(src.dtype())) + " " +
                    shapeToString(dims(src)));
    }
  llvm::Expected<ScheduleStats> stats = simulateSchedule(pl);
  if (!stats) return fail(file + llvm::toString(stats.takeError()));
  return llvm::Error::success();
}

/// Mode generate (plan.proto GenerateConfig): positive sizes, the caches as the config shapes them,
/// and every GENERATE program's inputs and output as the engine fills and reads them.
llvm::Error validateGenerateConfig(const plan::Plan &p, const std::string &file) {
  if (!p.has_generate()) return fail(file + "a generate plan without its GenerateConfig");
  const plan::GenerateConfig &g = p.generate();
  const std::string what = file + "GenerateConfig: ";
  if (g.max_seq_len() < 1 || g.block_size() < 1 || g.num_blocks() < 1 || g.max_batch_seqs() < 1 ||
      g.max_batch_tokens() < 1 || g.vocab_size() < 1 || g.layers() < 0)
    return fail(what + "sizes must be >= 1");
  if (g.max_blocks_per_seq() != (g.max_seq_len() + g.block_size() - 1) / g.block_size())
    return fail(what + "max_blocks_per_seq " + llvm::Twine(g.max_blocks_per_seq()) + " is not ceil(max_seq_len / block_size)");
  if (g.num_blocks() < g.max_blocks_per_seq())
    return fail(what + llvm::Twine(g.num_blocks()) + " KV blocks cannot hold one sequence of max_seq_len " +
                llvm::Twine(g.max_seq_len()) + " (" + llvm::Twine(g.max_blocks_per_seq()) + " blocks)");
  int64_t caches = 0;
  for (const plan::StateTensor &st : p.states()) {
    if (st.role() != plan::StateTensor::KV_CACHE)
      return fail(file + "state '" + st.name() + "': a generate plan's states are its KV cache");
    if (st.shape(0) != g.num_blocks() || st.shape(2) != g.block_size())
      return fail(file + "state '" + st.name() + "': KV cache " + shapeToString(std::vector<int64_t>(st.shape().begin(), st.shape().end())) +
                  " does not have num_blocks " + llvm::Twine(g.num_blocks()) + " and block_size " + llvm::Twine(g.block_size()));
    ++caches;
  }
  if (caches != 2 * g.layers())
    return fail(what + llvm::Twine(g.layers()) + " layers but " + llvm::Twine(caches) + " KV_CACHE states (2 per layer)");
  const int64_t S = g.max_batch_seqs(), MB = g.max_blocks_per_seq();
  int64_t largest = 0;
  for (const plan::Program &prog : p.programs()) {
    const int64_t n = prog.tokens();
    largest = std::max(largest, n);
    auto shapeOf = [&](const plan::Binding &b) {
      const plan::Buffer &buf = prog.buffers(static_cast<int>(b.buffer()));
      return std::make_pair(static_cast<plan::DType>(buf.dtype()), std::vector<int64_t>(buf.shape().begin(), buf.shape().end()));
    };
    const std::map<std::string, std::vector<int64_t>> want = {
        {"tokens", {n}}, {"positions", {n}}, {"slot_mapping", {n}}, {"block_tables", {S, MB}},
        {"context_lens", {S}}, {"query_start_loc", {S + 1}}};
    if (prog.inputs_size() != static_cast<int>(want.size()))
      return fail(file + "program '" + prog.name() + "': a generate program has the inputs tokens, positions, "
                  "slot_mapping, block_tables, context_lens and query_start_loc");
    for (const plan::Binding &b : prog.inputs()) {
      auto it = want.find(b.name());
      auto [dtype, shape] = shapeOf(b);
      if (it == want.end() || shape != it->second || (b.name() != "tokens" && dtype != plan::I32) ||
          (b.name() == "tokens" && dtype != plan::I32 && dtype != plan::I64))
        return fail(file + "program '" + prog.name() + "': input '" + b.name() + "' " + shapeToString(shape) +
                    (it == want.end() ? " is not a generate input" : ", expected " + shapeToString(it->second) + " of i32"));
    }
    if (prog.outputs_size() != 1 || prog.outputs(0).name() != "logits" ||
        shapeOf(prog.outputs(0)).second != std::vector<int64_t>{n, g.vocab_size()} ||
        shapeOf(prog.outputs(0)).first != plan::F32)
      return fail(file + "program '" + prog.name() + "': a generate program's one output is logits [" +
                  llvm::Twine(n) + ", " + llvm::Twine(g.vocab_size()) + "] f32");
  }
  if (largest < g.max_batch_tokens())
    return fail(what + "max_batch_tokens " + llvm::Twine(g.max_batch_tokens()) + " but the largest generate program takes " +
                llvm::Twine(largest) + " tokens");
  return llvm::Error::success();
}

llvm::Error validateTrainConfig(const plan::Plan &p, const std::string &file) {
  if (!p.has_train()) return fail(file + "mode is 'train' but the plan has no TrainConfig");
  const plan::TrainConfig &tc = p.train();
  std::string where = file + "TrainConfig: ";
  const bool dataInputs = tc.data_inputs_size() > 0;
  if (tc.vocab_size() < (dataInputs ? 0 : 1))
    return fail(where + "vocab_size " + llvm::Twine(tc.vocab_size()) + " must be >= 1");
  if (tc.global_batch() < 1) return fail(where + "global_batch " + llvm::Twine(tc.global_batch()) + " must be >= 1");
  if (!dataInputs && tc.seq_len() < 1) return fail(where + "seq_len " + llvm::Twine(tc.seq_len()) + " must be >= 1");
  if (tc.grad_accum() < 1 || tc.global_batch() % tc.grad_accum() != 0)
    return fail(where + "grad_accum " + llvm::Twine(tc.grad_accum()) + " must be >= 1 and divide global_batch " +
                llvm::Twine(tc.global_batch()));
  if (tc.optimizer() != "sgd" && tc.optimizer() != "adam" && tc.optimizer() != "adamw")
    return fail(where + "optimizer '" + tc.optimizer() + "' (expected sgd, adam or adamw)");
  if (!std::isfinite(tc.lr()) || tc.lr() < 0) return fail(where + "lr " + std::to_string(tc.lr()) + " must be finite and >= 0");
  if (tc.lr_schedule() != "constant" && tc.lr_schedule() != "cosine")
    return fail(where + "lr_schedule '" + tc.lr_schedule() + "' (expected constant or cosine)");
  if (tc.lr_schedule() == "cosine" &&
      (tc.warmup_steps() < 0 || tc.total_steps() < 0 || !std::isfinite(tc.min_lr()) || tc.min_lr() < 0))
    return fail(where + "cosine schedule needs warmup_steps >= 0, total_steps >= 0 and a finite min_lr >= 0");
  if (!std::isfinite(tc.grad_clip()) || tc.grad_clip() < 0)
    return fail(where + "grad_clip " + std::to_string(tc.grad_clip()) + " must be finite and >= 0");
  if (!dataInputs && (tc.tokens_input().empty() || tc.labels_input().empty() || tc.logits_output().empty()))
    return fail(where + "tokens_input, labels_input and logits_output must be set");

  const int64_t B = tc.global_batch(), T = tc.seq_len(), b = B / tc.grad_accum();
  auto shapeOf = [](const plan::Buffer &buf) {
    return std::vector<int64_t>(buf.shape().begin(), buf.shape().end());
  };
  // One binding: present, of `dtype` (or, for tokens, i64 or i32) and `shape`.
  auto expectBinding = [&](const plan::Program &prog, bool input, llvm::StringRef name,
                           std::vector<DType> dtypes, std::vector<int64_t> shape) -> llvm::Error {
    std::string what = file + "program '" + prog.name() + "' " + (input ? "input" : "output") + " '" + name.str() + "'";
    const plan::Buffer *buf = findBinding(prog, input ? prog.inputs() : prog.outputs(), name);
    if (!buf) return fail(what + ": missing (named by the plan's TrainConfig, docs/training.md)");
    DType dt = static_cast<DType>(buf->dtype());
    if (std::find(dtypes.begin(), dtypes.end(), dt) == dtypes.end()) {
      std::string want;
      for (DType d : dtypes) want += (want.empty() ? "" : " or ") + dtypeName(d).str();
      return fail(what + ": dtype " + dtypeName(dt) + ", expected " + want);
    }
    if (shapeOf(*buf) != shape)
      return fail(what + ": shape " + shapeToString(shapeOf(*buf)) + ", expected " + shapeToString(shape));
    return llvm::Error::success();
  };
  const std::vector<DType> tokenTypes = {DType::I64, DType::I32};
  for (plan::Program::Role role : {plan::Program::FORWARD, plan::Program::EVAL, plan::Program::TRAIN_STEP,
                                   plan::Program::OPTIMIZER_STEP})
    if (!findProgram(p, role))
      return fail(file + "training plan has no " + programRoleName(role) + " program (docs/training.md)");

  if (!dataInputs) {
    const plan::Program &fwd = *findProgram(p, plan::Program::FORWARD);
    if (llvm::Error e = expectBinding(fwd, true, tc.tokens_input(), tokenTypes, {B, T})) return e;
    const plan::Buffer *logits = findBinding(fwd, fwd.outputs(), tc.logits_output());
    if (!logits) return fail(file + "program 'forward' output '" + tc.logits_output() + "': missing (TrainConfig.logits_output)");
    std::vector<int64_t> ls = shapeOf(*logits);
    if (logits->dtype() != plan::F32 || ls.empty() || ls.back() != tc.vocab_size() ||
        numElements(ls) != B * T * tc.vocab_size())
      return fail(file + "program 'forward' output '" + tc.logits_output() + "': " +
                  dtypeName(static_cast<DType>(logits->dtype())) + " " + shapeToString(ls) +
                  ", expected f32 [" + llvm::Twine(B) + ", " + llvm::Twine(T) + ", " + llvm::Twine(tc.vocab_size()) + "]");
    for (plan::Program::Role role : {plan::Program::EVAL, plan::Program::TRAIN_STEP}) {
      const plan::Program &prog = *findProgram(p, role);
      const std::string &name = prog.name();
      if (llvm::Error e = expectBinding(prog, true, tc.tokens_input(), tokenTypes, {b, T})) return e;
      if (llvm::Error e = expectBinding(prog, true, tc.labels_input(), {DType::I64}, {b, T})) return e;
      if (llvm::Error e = expectBinding(prog, false, "loss", {DType::F32}, {})) return e;
      const bool scaled = role == plan::Program::TRAIN_STEP && tc.loss_scale_initial() > 0;
      if (scaled)
        if (llvm::Error e = expectBinding(prog, true, "loss_scale", {DType::F32}, {})) return e;
      for (const plan::Binding &in : prog.inputs())
        if (in.name() != tc.tokens_input() && in.name() != tc.labels_input() && !(scaled && in.name() == "loss_scale"))
          return fail(file + "program '" + name + "' input '" + in.name() +
                      "': the training loop fills only the tokens and labels inputs ('" +
                      tc.tokens_input() + "', '" + tc.labels_input() + "')" +
                      (role == plan::Program::TRAIN_STEP ? " and, with dynamic loss scaling, 'loss_scale'" : ""));
    }
  } else {
    // train.inputs: train_step and eval take exactly the data inputs, [b, ...] each; a source's
    // dtype must suit it (the array's own dtype is checked against the input when training starts).
    std::set<std::string> names;
    for (const plan::DataInput &d : tc.data_inputs()) {
      std::string what = where + "data input '" + d.name() + "'";
      if (!names.insert(d.name()).second) return fail(what + " is listed twice");
      if (d.kind() == plan::DataInput::NPY && d.path().empty()) return fail(what + ": npy without a path");
      if (d.kind() == plan::DataInput::NORMAL && !(d.std() > 0 && std::isfinite(d.std()) && std::isfinite(d.mean())))
        return fail(what + ": normal needs a finite mean and std > 0");
      if (d.kind() == plan::DataInput::UNIFORM_INT && d.low() >= d.high())
        return fail(what + ": uniform_int needs low < high");
      if (d.kind() != plan::DataInput::NPY && d.kind() != plan::DataInput::NORMAL && d.kind() != plan::DataInput::UNIFORM_INT)
        return fail(what + ": invalid kind " + llvm::Twine(static_cast<int>(d.kind())));
    }
    for (plan::Program::Role role : {plan::Program::EVAL, plan::Program::TRAIN_STEP}) {
      const plan::Program &prog = *findProgram(p, role);
      if (llvm::Error e = expectBinding(prog, false, "loss", {DType::F32}, {})) return e;
      const bool scaled = role == plan::Program::TRAIN_STEP && tc.loss_scale_initial() > 0;
      if (scaled)
        if (llvm::Error e = expectBinding(prog, true, "loss_scale", {DType::F32}, {})) return e;
      for (const plan::DataInput &d : tc.data_inputs()) {
        std::string what = file + "program '" + prog.name() + "' input '" + d.name() + "'";
        const plan::Buffer *buf = findBinding(prog, prog.inputs(), d.name());
        if (!buf) return fail(what + ": missing (a data input of the plan's TrainConfig)");
        if (buf->shape_size() < 1 || buf->shape(0) != b)
          return fail(what + ": shape " + shapeToString(shapeOf(*buf)) + ", expected " + llvm::Twine(b) +
                      " rows (global_batch / grad_accum) in dim 0");
        DType dt = static_cast<DType>(buf->dtype());
        const bool isFloat = dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dt == DType::F64;
        const bool isInt = dt == DType::I64 || dt == DType::I32 || dt == DType::I16 || dt == DType::I8 || dt == DType::U8;
        if ((d.kind() == plan::DataInput::NORMAL && !isFloat) || (d.kind() == plan::DataInput::UNIFORM_INT && !isInt))
          return fail(what + ": dtype " + dtypeName(dt) + " cannot take " +
                      (d.kind() == plan::DataInput::NORMAL ? "normal draws (a float input)" : "uniform_int draws (an integer input)"));
      }
      for (const plan::Binding &in : prog.inputs())
        if (!names.count(in.name()) && !(scaled && in.name() == "loss_scale"))
          return fail(file + "program '" + prog.name() + "' input '" + in.name() +
                      "': the training loop fills only the data inputs of the plan's TrainConfig" +
                      (role == plan::Program::TRAIN_STEP ? " and, with dynamic loss scaling, 'loss_scale'" : ""));
    }
  }
  if (tc.loss_scale_initial() < 0 ||
      (tc.loss_scale_initial() > 0 &&
       !(std::isfinite(tc.loss_scale_initial()) && tc.loss_scale_growth_factor() > 1 &&
         tc.loss_scale_backoff_factor() > 0 && tc.loss_scale_backoff_factor() < 1 &&
         tc.loss_scale_growth_interval() >= 1 && tc.loss_scale_min() > 0 &&
         tc.loss_scale_min() <= tc.loss_scale_initial())))
    return fail(where + "loss scaling needs initial > 0, growth_factor > 1, backoff_factor in (0, 1), "
                "growth_interval >= 1 and 0 < min <= initial");
  const plan::Program &opt = *findProgram(p, plan::Program::OPTIMIZER_STEP);
  if (llvm::Error e = expectBinding(opt, true, "lr", {DType::F32}, {})) return e;
  if (llvm::Error e = expectBinding(opt, true, "step", {DType::I64}, {})) return e;
  if (llvm::Error e = expectBinding(opt, false, "grad_norm", {DType::F32}, {})) return e;
  for (const plan::Binding &in : opt.inputs())
    if (in.name() != "lr" && in.name() != "step")
      return fail(file + "program 'optimizer_step' input '" + in.name() + "': the training loop fills only 'lr' and 'step'");
  return llvm::Error::success();
}

llvm::Error validateProgram(const plan::Program &prog, const std::string &where,
                            const KernelRegistry &registry, const StateMap &states, const Mesh &mesh) {
  DeviceKind device = static_cast<DeviceKind>(prog.device());
  // Buffers.
  for (int i = 0; i < prog.buffers_size(); ++i) {
    const plan::Buffer &b = prog.buffers(i);
    std::string what = where + describeBuffer(b, i);
    if (b.id() != static_cast<uint32_t>(i))
      return fail(what + ": id " + llvm::Twine(b.id()) + " does not equal its index " + llvm::Twine(i));
    if (!isValidDType(b.dtype())) return fail(what + ": invalid dtype " + llvm::Twine(b.dtype()));
    std::optional<uint64_t> bytes = byteSize(b);
    if (!bytes) return fail(what + ": invalid shape " + shapeToString(std::vector<int64_t>(b.shape().begin(), b.shape().end())));
    if (*bytes != b.size_bytes())
      return fail(what + ": size_bytes " + llvm::Twine(b.size_bytes()) + " but shape " +
                  shapeToString(std::vector<int64_t>(b.shape().begin(), b.shape().end())) + " of " +
                  dtypeName(static_cast<DType>(b.dtype())) + " needs " + llvm::Twine(*bytes));
    if (b.has_sharding()) {
      if (b.storage() != plan::WEIGHT)
        return fail(what + ": only WEIGHT buffers carry a sharding (a STATE buffer's is its state's)");
      llvm::Expected<ShardLayout> layout = makeShardLayout(b.sharding(), mesh, what);
      if (!layout) return layout.takeError();
      // A reshape view of a sharded weight keeps the weight's sharding under its own local shape.
      Shape local = localShape(*layout, mesh);
      std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
      if (numElements(local) != numElements(shape))
        return fail(what + ": shape " + shapeToString(shape) + " does not hold the local shard " + shapeToString(local) +
                    " of its sharding " + shardingText(b.sharding()) + " on mesh " + mesh.toString());
    }
    switch (b.storage()) {
    case plan::ARENA:
      if (b.offset() % kArenaAlignment != 0)
        return fail(what + ": arena offset " + llvm::Twine(b.offset()) + " is not aligned to " +
                    llvm::Twine(kArenaAlignment) + " bytes");
      if (b.offset() > prog.arena_bytes() || b.size_bytes() > prog.arena_bytes() - b.offset())
        return fail(what + ": bytes [" + llvm::Twine(b.offset()) + ", " +
                    llvm::Twine(b.offset() + b.size_bytes()) + ") lie outside the arena of " +
                    llvm::Twine(prog.arena_bytes()) + " bytes");
      break;
    case plan::WEIGHT:
      if (b.weight_name().empty()) return fail(what + ": WEIGHT buffer without weight_name");
      break;
    case plan::STATE: {
      if (b.state_name().empty()) return fail(what + ": STATE buffer without state_name");
      auto it = states.find(b.state_name());
      if (it == states.end())
        return fail(what + ": state '" + b.state_name() + "' is not in the plan's states");
      const plan::StateTensor &st = *it->second;
      std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
      std::vector<int64_t> stShape(st.shape().begin(), st.shape().end());
      // A dim-0 chunk of the state (ZeRO's shard_view): 1/P of its elements.
      int64_t chunks = 1;
      if (b.state_chunk_axes_size() > 0) {
        std::string list;
        for (const std::string &a : b.state_chunk_axes()) list += (list.empty() ? "" : ",") + a;
        llvm::Expected<llvm::SmallVector<int, 4>> axes = mesh.parseAxes(list);
        if (!axes) return fail(what + ": state_chunk_axes: " + llvm::toString(axes.takeError()));
        chunks = mesh.groupSize(*axes);
        if (stShape.empty() || stShape[0] % chunks != 0)
          return fail(what + ": a chunk over " + list + " of state '" + st.name() + "' " +
                      shapeToString(stShape) + ", whose dim 0 is not divisible by the group size " +
                      llvm::Twine(chunks));
      }
      // Like WEIGHT buffers, a STATE buffer may view its tensor under another shape with the same
      // element count (a zero-copy reshape of a parameter).
      if (b.dtype() != st.dtype() || numElements(shape) * chunks != numElements(stShape))
        return fail(what + ": is " + dtypeName(static_cast<DType>(b.dtype())) + " " +
                    shapeToString(shape) + " but state '" + st.name() + "' is " +
                    dtypeName(static_cast<DType>(st.dtype())) + " " + shapeToString(stShape));
      break;
    }
    default:
      return fail(what + ": invalid storage " + llvm::Twine(b.storage()));
    }
  }
  auto checkId = [&](uint32_t id, const std::string &what) -> llvm::Error {
    if (id >= static_cast<uint32_t>(prog.buffers_size()))
      return fail(what + ": buffer id " + llvm::Twine(id) + " out of range (program has " +
                  llvm::Twine(prog.buffers_size()) + " buffers)");
    return llvm::Error::success();
  };
  // Instructions.
  for (int i = 0; i < prog.instructions_size(); ++i) {
    const plan::Instruction &inst = prog.instructions(i);
    std::string what = where + describeInstruction(inst, i);
    for (uint32_t id : inst.inputs())
      if (llvm::Error e = checkId(id, what)) return e;
    for (uint32_t id : inst.outputs()) {
      if (llvm::Error e = checkId(id, what)) return e;
      if (prog.buffers(id).storage() == plan::WEIGHT)
        return fail(what + ": writes read-only WEIGHT buffer " + llvm::Twine(id));
    }
    if (llvm::Error e = checkStateWrites(prog, inst, what)) return e;
    if (inst.stream() != 0)
      return fail(what + ": stream " + llvm::Twine(inst.stream()) + " (only stream 0 exists on " +
                  deviceKindName(device) + ")");
    for (uint32_t ev : inst.wait_events())
      if (ev >= prog.num_events()) return fail(what + ": wait event " + llvm::Twine(ev) + " out of range");
    for (uint32_t ev : inst.record_events())
      if (ev >= prog.num_events()) return fail(what + ": record event " + llvm::Twine(ev) + " out of range");
    if (!registry.knowsOp(inst.op(), device))
      return fail(what + ": unknown op '" + inst.op() + "' for device " + deviceKindName(device));
    if (inst.outputs_size() == 0) return fail(what + ": no outputs");
    DType dtype = static_cast<DType>(prog.buffers(inst.outputs(0)).dtype());
    const KernelDesc *desc = registry.find(inst.op(), dtype, device);
    if (!desc) {
      std::string have;
      for (DType d : registry.dtypesOf(inst.op(), device)) have += (have.empty() ? "" : ", ") + dtypeName(d).str();
      return fail(what + ": no " + deviceKindName(device) + " kernel for dtype " + dtypeName(dtype) +
                  " (implemented: " + have + ")");
    }
    int nIn = inst.inputs_size(), nOut = inst.outputs_size();
    if (nIn < desc->minInputs || (desc->maxInputs >= 0 && nIn > desc->maxInputs))
      return fail(what + ": " + llvm::Twine(nIn) + " inputs, expected " +
                  (desc->maxInputs < 0 ? "at least " + std::to_string(desc->minInputs)
                   : desc->minInputs == desc->maxInputs ? std::to_string(desc->minInputs)
                   : std::to_string(desc->minInputs) + " to " + std::to_string(desc->maxInputs)));
    if (nOut < desc->minOutputs || (desc->maxOutputs >= 0 && nOut > desc->maxOutputs))
      return fail(what + ": " + llvm::Twine(nOut) + " outputs, expected " +
                  (desc->maxOutputs < 0 ? "at least " + std::to_string(desc->minOutputs)
                   : desc->minOutputs == desc->maxOutputs ? std::to_string(desc->minOutputs)
                   : std::to_string(desc->minOutputs) + " to " + std::to_string(desc->maxOutputs)));
    KernelCall call;
    call.instruction = &inst;
    for (uint32_t id : inst.inputs()) call.inputs.push_back(viewOf(prog.buffers(id)));
    for (uint32_t id : inst.outputs()) call.outputs.push_back(viewOf(prog.buffers(id)));
    if (llvm::Error e = verifyAttrKinds(*desc, call)) return fail(what + ": " + llvm::toString(std::move(e)));
    if (desc->verify)
      if (llvm::Error e = desc->verify(call)) return fail(what + ": " + llvm::toString(std::move(e)));
  }
  // Bindings.
  llvm::StringSet<> names;
  for (const plan::Binding &b : prog.inputs()) {
    std::string what = where + "input '" + b.name() + "'";
    if (b.name().empty()) return fail(where + "input binding without a name");
    if (!names.insert(b.name()).second) return fail(what + ": bound twice");
    if (llvm::Error e = checkId(b.buffer(), what)) return e;
    if (prog.buffers(b.buffer()).storage() != plan::ARENA)
      return fail(what + ": bound to a buffer that is not in the arena");
  }
  names.clear();
  for (const plan::Binding &b : prog.outputs()) {
    std::string what = where + "output '" + b.name() + "'";
    if (b.name().empty()) return fail(where + "output binding without a name");
    if (!names.insert(b.name()).second) return fail(what + ": bound twice");
    if (llvm::Error e = checkId(b.buffer(), what)) return e;
  }
  return llvm::Error::success();
}

bool usesWeights(const plan::Plan &p) {
  for (const plan::StateTensor &st : p.states())
    if (st.role() == plan::StateTensor::PARAM) return true;
  for (const plan::Program &prog : p.programs())
    for (const plan::Buffer &b : prog.buffers())
      if (b.storage() == plan::WEIGHT) return true;
  return false;
}

}  // namespace

llvm::Error validatePlan(const plan::Plan &p, llvm::StringRef planPath, const KernelRegistry &registry) {
  std::string file = planPath.str() + ": ";
  if (p.version() != kPlanVersion)
    return fail(file + "plan version " + llvm::Twine(p.version()) + ", this runtime reads version " +
                llvm::Twine(kPlanVersion) + " (recompile the model with a matching colossal-opt)");
  if (p.programs_size() == 0) return fail(file + "plan has no programs");
  if (usesWeights(p) && p.weights_file().empty())
    return fail(file + "plan has WEIGHT buffers but names no weights file");
  // The mesh first: shardings are checked against it.
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(p, planPath);
  if (!mesh) return mesh.takeError();
  StateMap states;
  if (llvm::Error e = validateStates(p, file, *mesh, states)) return e;
  llvm::StringSet<> names;
  std::map<int, std::string> roles;
  for (const plan::Program &prog : p.programs()) {
    if (!names.insert(prog.name()).second)
      return fail(file + "program '" + prog.name() + "' appears twice");
    if (!plan::Program::Role_IsValid(prog.role()) || prog.role() == plan::Program::ROLE_UNSPECIFIED)
      return fail(file + "program '" + prog.name() + "' has no role (Program.role: forward, eval, "
                  "train_step or optimizer_step)");
    // A stage role is one program per stage (Program.stage), any other role one per plan.
    const bool staged = prog.role() == plan::Program::STAGE_FORWARD ||
                        prog.role() == plan::Program::STAGE_BACKWARD ||
                        prog.role() == plan::Program::STAGE_BACKWARD_WEIGHT ||
                        prog.role() == plan::Program::STAGE_OPTIMIZER;
    if (staged && (!p.has_pipeline() || prog.stage() < 0 ||
                   prog.stage() >= static_cast<int32_t>(p.pipeline().stages())))
      return fail(file + "program '" + prog.name() + "' is a " + programRoleName(prog.role()) +
                  " program of stage " + llvm::Twine(prog.stage()) + ", outside the plan's pipeline (" +
                  llvm::Twine(p.has_pipeline() ? p.pipeline().stages() : 0) + " stages)");
    // Generate programs: one per token count (Program.tokens).
    const bool generate = prog.role() == plan::Program::GENERATE;
    if (generate && (p.mode() != "generate" || prog.tokens() < 1))
      return fail(file + "program '" + prog.name() + "' is a generate program" +
                  (p.mode() != "generate" ? " in a " + p.mode() + " plan" : " without tokens"));
    if (!generate && p.mode() == "generate")
      return fail(file + "program '" + prog.name() + "': a generate plan holds generate programs only");
    const int64_t key = generate ? 16 * (prog.tokens() + 1) : staged ? 8 * (prog.stage() + 1) : 0;
    if (auto [it, fresh] = roles.try_emplace(prog.role() + key, prog.name()); !fresh)
      return fail(file + "programs '" + it->second + "' and '" + prog.name() + "' are both the " +
                  programRoleName(prog.role()) + " program");
    if (prog.device() != plan::CPU && prog.device() != plan::CUDA)
      return fail(file + "program '" + prog.name() + "': invalid device " + llvm::Twine(prog.device()));
    if (llvm::Error e = validateProgram(prog, file + "program '" + prog.name() + "': ", registry, states, *mesh))
      return e;
  }
  // One weight, one sharding: its shard is sliced once for every buffer that names it.
  llvm::StringMap<const plan::Buffer *> weightUse;
  for (const plan::Program &prog : p.programs())
    for (const plan::Buffer &b : prog.buffers()) {
      if (b.storage() != plan::WEIGHT) continue;
      auto [it, fresh] = weightUse.try_emplace(b.weight_name(), &b);
      const plan::Buffer &first = *it->second;
      if (!fresh && (first.has_sharding() != b.has_sharding() ||
                     (b.has_sharding() && !sameSharding(first.sharding(), b.sharding()))))
        return fail(file + "program '" + prog.name() + "': " + describeBuffer(b, b.id()) + ": weight '" +
                    b.weight_name() + "' is used with two shardings (" +
                    (first.has_sharding() ? shardingText(first.sharding()) : std::string("replicated")) + " and " +
                    (b.has_sharding() ? shardingText(b.sharding()) : std::string("replicated")) + ")");
    }
  if (p.mode() == "generate") {
    if (llvm::Error e = validateGenerateConfig(p, file)) return e;
  } else if (!findProgram(p, plan::Program::FORWARD)) {
    return fail(file + "plan has no forward program");
  }
  if (p.mode() == "train")
    if (llvm::Error e = validateTrainConfig(p, file)) return e;
  if (p.has_pipeline())
    if (llvm::Error e = validatePipeline(p, file, *mesh)) return e;
  // The mesh and the collectives' axes and group sizes (runtime/comm/Collectives.cpp).
  if (llvm::Error e = validateCollectives(p, planPath)) return e;
  return llvm::Error::success();
}

llvm::Error validateWeights(const plan::Plan &p, llvm::StringRef planPath, const SafetensorsFile &weights) {
  for (const plan::StateTensor &st : p.states()) {
    if (st.role() != plan::StateTensor::PARAM) continue;
    std::string what = weights.path() + ": weight '" + st.init_weight() + "' (initial value of state '" +
                       st.name() + "' of " + planPath.str() + ")";
    const SafetensorsTensor *t = weights.find(st.init_weight());
    if (!t) return fail(what + ": not in the weights file");
    DType want = static_cast<DType>(st.dtype());
    std::vector<int64_t> shape(st.shape().begin(), st.shape().end());
    if (st.has_sharding())  // the weights file holds the global tensor
      shape.assign(st.sharding().global_shape().begin(), st.sharding().global_shape().end());
    if (t->dtype != want || t->shape != shape)
      return fail(what + ": plan expects " + dtypeName(want) + " " + shapeToString(shape) +
                  ", file has " + dtypeName(t->dtype) + " " + shapeToString(t->shape));
  }
  for (const plan::Program &prog : p.programs())
    for (int i = 0; i < prog.buffers_size(); ++i) {
      const plan::Buffer &b = prog.buffers(i);
      if (b.storage() != plan::WEIGHT) continue;
      std::string what = weights.path() + ": weight '" + b.weight_name() + "' (" + planPath.str() +
                         " program '" + prog.name() + "' " + describeBuffer(b, i) + ")";
      const SafetensorsTensor *t = weights.find(b.weight_name());
      if (!t) return fail(what + ": not in the weights file");
      DType want = static_cast<DType>(b.dtype());
      std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
      if (b.has_sharding()) {  // the file holds the global tensor
        std::vector<int64_t> global(b.sharding().global_shape().begin(), b.sharding().global_shape().end());
        if (t->dtype != want || t->shape != global)
          return fail(what + ": plan expects the global " + dtypeName(want) + " " + shapeToString(global) +
                      " of a sharded weight, file has " + dtypeName(t->dtype) + " " + shapeToString(t->shape));
        continue;
      }
      // A reshaped weight (a zero-copy alias of the same bytes) may view the tensor under another
      // shape with the same element count.
      if (t->dtype != want || numElements(t->shape) != numElements(shape))
        return fail(what + ": plan expects " + dtypeName(want) + " " + shapeToString(shape) +
                    ", file has " + dtypeName(t->dtype) + " " + shapeToString(t->shape));
    }
  return llvm::Error::success();
}

llvm::StringRef programRoleName(plan::Program::Role role) {
  switch (role) {
  case plan::Program::FORWARD: return "forward";
  case plan::Program::EVAL: return "eval";
  case plan::Program::TRAIN_STEP: return "train_step";
  case plan::Program::OPTIMIZER_STEP: return "optimizer_step";
  case plan::Program::STAGE_FORWARD: return "stage_forward";
  case plan::Program::STAGE_BACKWARD: return "stage_backward";
  case plan::Program::STAGE_OPTIMIZER: return "stage_optimizer";
  case plan::Program::STAGE_BACKWARD_WEIGHT: return "stage_backward_weight";
  case plan::Program::GENERATE: return "generate";
  default: return "unspecified";
  }
}

const plan::Program *LoadedPlan::program(plan::Program::Role role) const { return findProgram(plan, role); }

const plan::Program *LoadedPlan::stageProgram(plan::Program::Role role, uint32_t stage) const {
  return findStageProgram(plan, role, stage);
}

const plan::Program *LoadedPlan::program(llvm::StringRef name) const {
  for (const plan::Program &prog : plan.programs())
    if (prog.name() == name) return &prog;
  return nullptr;
}

llvm::Expected<std::unique_ptr<LoadedPlan>> loadPlan(llvm::StringRef path, const KernelRegistry &registry) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf) return fail(path + ": cannot read plan: " + buf.getError().message());
  auto loaded = std::make_unique<LoadedPlan>();
  loaded->path = path.str();
  if ((*buf)->getBufferSize() == 0)
    return fail(path + ": the plan file is empty (an interrupted copy?)");
  // serializePlan's trailer: the FNV-1a 64 of every byte before it (a flipped byte can parse).
  const size_t planBytes = (*buf)->getBufferSize();
  const auto *bytes = reinterpret_cast<const unsigned char *>((*buf)->getBufferStart());
  const bool onnx = llvm::StringRef(path).ends_with_insensitive(".onnx");
  const std::string onnxHint =
      onnx ? "; an ONNX model is compiled into a plan first: colossal-opt MODEL.onnx --spec SPEC.yaml -o MODEL.cplan" : "";
  if (planBytes < kPlanHashTrailerBytes || bytes[planBytes - 10] != 0xF9 || bytes[planBytes - 9] != 0x03)
    return fail(path + ": not a valid plan file (no plan checksum at its end: truncated, another file, or "
                       "written by an older colossal-opt: recompile it)" + onnxHint);
  uint64_t recorded = 0;
  for (int i = 0; i < 8; ++i) recorded |= uint64_t(bytes[planBytes - 8 + i]) << (8 * i);
  const uint64_t actual = fnv1a64(bytes, planBytes - kPlanHashTrailerBytes);
  if (actual != recorded)
    return fail(path + ": the plan is corrupt: its bytes hash to " + llvm::utohexstr(actual) + ", not the " +
                llvm::utohexstr(recorded) + " recorded at its end (recompile it with colossal-opt)");
  bool parsed = false;
  if (planBytes <= static_cast<size_t>(std::numeric_limits<int>::max())) {
    // A file that is not a plan (an .onnx given by mistake) makes protobuf log its own
    // "[libprotobuf ERROR ...]" line; the error below says it once, naming the file.
    google::protobuf::LogSilencer quiet;
    parsed = loaded->plan.ParseFromArray((*buf)->getBufferStart(), static_cast<int>((*buf)->getBufferSize()));
  }
  if (!parsed) return fail(path + ": not a valid plan file (protobuf parse failed: corrupt or truncated)" + onnxHint);
  if (llvm::Error e = validatePlan(loaded->plan, path, registry)) return std::move(e);

  const plan::Plan &p = loaded->plan;
  if (p.weights_file().empty()) return loaded;
  llvm::SmallString<256> weightsPath = llvm::sys::path::parent_path(path);
  llvm::sys::path::append(weightsPath, p.weights_file());
  uint64_t size = 0;
  if (llvm::sys::fs::is_directory(weightsPath))
    return fail(weightsPath + ": is a folder, not the weights file named by " + path);
  if (std::error_code ec = llvm::sys::fs::file_size(weightsPath, size))
    return fail(weightsPath + ": cannot open weights file named by " + path + ": " + ec.message());
  if (size != p.weights_size())
    return fail(weightsPath + ": " + llvm::Twine(size) + " bytes, but " + path + " expects " +
                llvm::Twine(p.weights_size()) + " (weights file does not belong to this plan)");
  llvm::Expected<uint64_t> hash = fnv1a64File(weightsPath);
  if (!hash) return hash.takeError();
  if (*hash != p.weights_hash())
    return fail(weightsPath + ": FNV-1a hash " + llvm::utohexstr(*hash) + " differs from " +
                llvm::utohexstr(p.weights_hash()) + " recorded in " + path +
                " (weights file modified or from another compilation)");
  auto weights = SafetensorsFile::open(weightsPath);
  if (!weights) return weights.takeError();
  if (llvm::Error e = validateWeights(p, path, **weights)) return std::move(e);
  loaded->weights = std::move(*weights);
  if (llvm::Error e = selectRank(*loaded, 0)) return std::move(e);
  return loaded;
}

llvm::Error selectRank(LoadedPlan &loaded, int64_t rank) {
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(loaded.plan, loaded.path);
  if (!mesh) return mesh.takeError();
  if (rank < 0 || rank >= mesh->size())
    return fail(loaded.path + ": rank " + llvm::Twine(rank) + " is not on the plan's mesh " + mesh->toString());
  loaded.rank = rank;
  loaded.weightShards.clear();
  for (const plan::Program &prog : loaded.plan.programs())
    for (const plan::Buffer &b : prog.buffers()) {
      if (b.storage() != plan::WEIGHT || !b.has_sharding() || loaded.weightShards.count(b.weight_name())) continue;
      std::string what = loaded.path + ": weight '" + b.weight_name() + "'";
      const SafetensorsTensor *t = loaded.weights ? loaded.weights->find(b.weight_name()) : nullptr;
      if (!t) return fail(what + ": not loaded from the weights file");
      llvm::Expected<ShardLayout> layout = makeShardLayout(b.sharding(), *mesh, what);
      if (!layout) return layout.takeError();
      AlignedBuffer local(static_cast<size_t>(numElements(localShape(*layout, *mesh))) * dtypeSize(t->dtype));
      sliceShard(t->data, local.data(), dtypeSize(t->dtype), *layout, *mesh, rank);
      loaded.weightShards[b.weight_name()] = std::move(local);
    }
  return llvm::Error::success();
}

}  // namespace colossal::runtime

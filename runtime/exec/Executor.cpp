//===- Executor.cpp - Runs one program of a loaded plan -------------------------------------===//
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/OpProfile.h"

#include "colossal/runtime/StateStore.h"

#include <chrono>

namespace colossal::runtime {

/// One resolved instruction: its kernel and operand views, built once in create().
struct Executor::Step {
  const KernelDesc *kernel = nullptr;
  KernelCall call;
  int index = 0;
};

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}
}  // namespace

Executor::~Executor() {
  if (device_) {
    if (arena_ && ownsArena_) device_->deallocate(arena_);
    if (workspace_) device_->deallocate(workspace_);
  }
}

llvm::Expected<std::unique_ptr<Executor>> Executor::create(const LoadedPlan &loaded,
                                                           const KernelRegistry &registry,
                                                           Device &device,
                                                           llvm::StringRef programName) {
  return create(loaded, registry, device, programName, ExecutorOptions());
}

uint64_t maxArenaBytes(const plan::Plan &plan) {
  uint64_t bytes = 0;
  for (const plan::Program &prog : plan.programs()) bytes = std::max<uint64_t>(bytes, prog.arena_bytes());
  return bytes;
}

llvm::Expected<std::unique_ptr<Executor>> Executor::create(const LoadedPlan &loaded,
                                                           const KernelRegistry &registry,
                                                           Device &device,
                                                           llvm::StringRef programName,
                                                           const ExecutorOptions &options) {
  const plan::Program *prog =
      programName.empty() ? loaded.program(plan::Program::FORWARD) : loaded.program(programName);
  if (!prog) return fail(loaded.path + ": no program named '" + programName + "'");
  programName = prog->name();
  DeviceKind kind = static_cast<DeviceKind>(prog->device());
  if (kind != device.kind())
    return fail(loaded.path + ": program '" + programName + "' targets " + deviceKindName(kind) +
                " but runs on " + deviceKindName(device.kind()));
  std::unique_ptr<Executor> ex(new Executor());
  ex->program_ = prog;
  ex->device_ = &device;
  std::string where = loaded.path + ": program '" + programName.str() + "'";
  if (options.arena) {
    if (options.arenaBytes < prog->arena_bytes())
      return fail(where + " needs an arena of " + llvm::Twine(prog->arena_bytes()) + " bytes, given " +
                  llvm::Twine(options.arenaBytes));
    if (reinterpret_cast<uintptr_t>(options.arena) % kArenaAlignment != 0)
      return fail(where + ": the given arena is not aligned to " + llvm::Twine(kArenaAlignment) + " bytes");
    ex->arena_ = options.arena;
    ex->ownsArena_ = false;
  } else {
    llvm::Expected<void *> arena = device.allocate(prog->arena_bytes(), kArenaAlignment);
    if (!arena) return arena.takeError();
    ex->arena_ = *arena;
  }

  // Bind every buffer: arena offset, weight bytes or state tensor. WEIGHT buffers stay in the
  // mapped file (the CPU reads them in place; a CUDA device would upload them here).
  for (const plan::Buffer &b : prog->buffers()) {
    TensorRef t;
    t.dtype = static_cast<DType>(b.dtype());
    t.shape.assign(b.shape().begin(), b.shape().end());
    if (b.storage() == plan::ARENA) {
      t.data = static_cast<char *>(ex->arena_) + b.offset();
    } else if (b.storage() == plan::STATE) {
      std::string what = where + " buffer " + std::to_string(b.id()) + " (state '" + b.state_name() + "')";
      if (!options.states)
        return fail(what + ": the program has STATE buffers but runs without a state store");
      const StateEntry *st = options.states->find(b.state_name());
      if (!st) return fail(what + ": not in the state store");
      // A dim-0 chunk (ZeRO's shard_view): rows [r·n/P, (r+1)·n/P) of the state, r this rank's
      // index in the group over the chunk axes (contiguous: size_bytes at r·size_bytes).
      int64_t chunks = 1, chunk = 0;
      if (b.state_chunk_axes_size() > 0) {
        std::string list;
        for (const std::string &a : b.state_chunk_axes()) list += (list.empty() ? "" : ",") + a;
        const Mesh &mesh = options.states->mesh();
        llvm::Expected<llvm::SmallVector<int, 4>> axes = mesh.parseAxes(list);
        if (!axes) return fail(what + ": state_chunk_axes: " + llvm::toString(axes.takeError()));
        chunks = mesh.groupSize(*axes);
        chunk = mesh.groupRank(options.states->rank(), *axes);
      }
      if (st->tensor.dtype != t.dtype || st->tensor.numel() != t.numel() * chunks)
        return fail(what + ": the store holds " + dtypeName(st->tensor.dtype) + " " +
                    shapeToString(st->tensor.shape) + ", the buffer is " + dtypeName(t.dtype) + " " +
                    shapeToString(t.shape) + (chunks > 1 ? " x " + std::to_string(chunks) + " chunks" : ""));
      t.data = static_cast<char *>(st->tensor.data) + static_cast<size_t>(chunk) * t.bytes();
    } else {
      if (b.has_sharding()) {  // this rank's shard, sliced by selectRank()
        auto it = loaded.weightShards.find(b.weight_name());
        if (it == loaded.weightShards.end())
          return fail(loaded.path + ": sharded weight '" + b.weight_name() + "' has no slice for rank " +
                      llvm::Twine(loaded.rank) + " (selectRank)");
        t.data = const_cast<void *>(it->second.data());  // read-only, as the mapped weights
        ex->buffers_.push_back(std::move(t));
        continue;
      }
      const SafetensorsTensor *w = loaded.weights ? loaded.weights->find(b.weight_name()) : nullptr;
      if (!w) return fail(loaded.path + ": weight '" + b.weight_name() + "' is not loaded");
      t.data = const_cast<void *>(w->data);  // read-only: validation forbids writes to WEIGHT
    }
    ex->buffers_.push_back(std::move(t));
  }

  int threads = device.threads();
  for (int i = 0; i < prog->instructions_size(); ++i) {
    const plan::Instruction &inst = prog->instructions(i);
    Step step;
    step.index = i;
    step.call.instruction = &inst;
    step.call.indexAttrs();
    step.call.threads = threads;
    step.call.comm = options.comm;
    for (uint32_t id : inst.inputs()) {
      if (prog->buffers(id).storage() == plan::WEIGHT && step.call.inputs.size() < 64)
        step.call.constantInputs |= uint64_t(1) << step.call.inputs.size();
      step.call.inputs.push_back(ex->buffers_[id]);
    }
    for (uint32_t id : inst.outputs()) step.call.outputs.push_back(ex->buffers_[id]);
    step.kernel = registry.find(inst.op(), step.call.outputs[0].dtype, kind);
    if (!step.kernel)
      return fail(loaded.path + ": instruction " + llvm::Twine(i) + ": no kernel for '" + inst.op() + "'");
    if (step.kernel->prepare)
      if (llvm::Error e = step.kernel->prepare(step.call))
        return fail(loaded.path + ": instruction " + llvm::Twine(i) + " (" + inst.op() + "): " +
                    llvm::toString(std::move(e)));
    if (step.kernel->workspace)
      ex->workspaceBytes_ = std::max(ex->workspaceBytes_, step.kernel->workspace(step.call, threads));
    ex->steps_.push_back(std::move(step));
  }
  if (ex->workspaceBytes_) {
    llvm::Expected<void *> ws = device.allocate(ex->workspaceBytes_, kArenaAlignment);
    if (!ws) return ws.takeError();
    ex->workspace_ = *ws;
    for (Step &s : ex->steps_) {
      s.call.workspace = ex->workspace_;
      s.call.workspaceBytes = ex->workspaceBytes_;
    }
  }
  if (prog->tier_actions_size() > 0) {
    const StateStore *store = options.states;
    if (!store || !store->tier())
      return fail(where + " moves offloaded chunks but runs without the plan's offload tier");
    ex->tier_ = store->tier();
    ex->tierMoves_.resize(ex->steps_.size() + 1);
    for (const plan::Program::TierAction &a : prog->tier_actions()) {
      if (a.before() > ex->steps_.size() || a.chunk() >= store->numChunks())
        return fail(where + ": tier action before instruction " + llvm::Twine(a.before()) + " on chunk " +
                    llvm::Twine(a.chunk()) + " is out of range");
      auto [offset, bytes] = store->chunkRange(a.chunk());
      ex->tierMoves_[a.before()].push_back({offset, bytes, a.kind() == plan::Program::TierAction::PREFETCH});
    }
  }
  for (const plan::Binding &b : prog->inputs()) ex->inputs_.push_back({b.name(), ex->buffers_[b.buffer()]});
  for (const plan::Binding &b : prog->outputs()) ex->outputs_.push_back({b.name(), ex->buffers_[b.buffer()]});
  return ex;
}

llvm::Error Executor::setInput(llvm::StringRef name, DType dtype, llvm::ArrayRef<int64_t> shape,
                               const void *data) {
  for (const BindingInfo &in : inputs_) {
    if (in.name != name) continue;
    if (dtype != in.tensor.dtype)
      return fail("input '" + name + "': expected dtype " + dtypeName(in.tensor.dtype) + ", got " +
                  dtypeName(dtype));
    if (llvm::ArrayRef<int64_t>(in.tensor.shape) != shape)
      return fail("input '" + name + "': expected shape " + shapeToString(in.tensor.shape) +
                  ", got " + shapeToString(shape));
    device_->copyFromHost(in.tensor.data, data, in.tensor.bytes());
    return llvm::Error::success();
  }
  std::string known;
  for (const BindingInfo &in : inputs_) known += (known.empty() ? "" : ", ") + in.name;
  return fail("unknown input '" + name + "' (the plan's inputs: " + (known.empty() ? "none" : known) + ")");
}

void Executor::runTierMoves(size_t before) {
  for (const TierMove &m : tierMoves_[before]) {
    if (m.prefetch)
      tier_->prefetch(m.offset, m.bytes);
    else
      tier_->evict(m.offset, m.bytes);
  }
}

llvm::Error Executor::run() {
  const bool tiered = !tierMoves_.empty();
  OpProfile *profile = OpProfile::active();
  for (Step &s : steps_) {
    if (tiered) runTierMoves(s.index);
    const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    llvm::Error e = s.kernel->run(s.call);
    if (profile) {
      const std::string &op = s.call.instruction->op();
      profile->add(op, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   OpProfile::flopsOf(op, s.call));
    }
    if (e) {
      const plan::Instruction &inst = *s.call.instruction;
      return fail("instruction " + llvm::Twine(s.index) + " (" + inst.op() +
                  (inst.loc().empty() ? "" : " at " + inst.loc()) + "): " + llvm::toString(std::move(e)));
    }
  }
  if (tiered) runTierMoves(steps_.size());
  device_->synchronize();
  return llvm::Error::success();
}

llvm::Expected<TensorRef> Executor::output(llvm::StringRef name) const {
  for (const BindingInfo &out : outputs_)
    if (out.name == name) return out.tensor;
  return fail("unknown output '" + name + "'");
}

}  // namespace colossal::runtime

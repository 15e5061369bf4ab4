//===- PlanLoader.cpp - Parse and validate a plan and its weights ----------------------------===//
#include "colossal/runtime/Plan.h"

#include "colossal/runtime/Communicator.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

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

llvm::Error validateProgram(const plan::Program &prog, const std::string &where,
                            const KernelRegistry &registry) {
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
  llvm::StringSet<> names;
  for (const plan::Program &prog : p.programs()) {
    if (!names.insert(prog.name()).second)
      return fail(file + "program '" + prog.name() + "' appears twice");
    if (prog.device() != plan::CPU && prog.device() != plan::CUDA)
      return fail(file + "program '" + prog.name() + "': invalid device " + llvm::Twine(prog.device()));
    if (llvm::Error e = validateProgram(prog, file + "program '" + prog.name() + "': ", registry))
      return e;
  }
  // The mesh and the collectives' axes and group sizes (runtime/comm/Collectives.cpp).
  if (llvm::Error e = validateCollectives(p, planPath)) return e;
  return llvm::Error::success();
}

llvm::Error validateWeights(const plan::Plan &p, llvm::StringRef planPath, const SafetensorsFile &weights) {
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
      // A reshaped weight (a zero-copy alias of the same bytes) may view the tensor under another
      // shape with the same element count.
      if (t->dtype != want || numElements(t->shape) != numElements(shape))
        return fail(what + ": plan expects " + dtypeName(want) + " " + shapeToString(shape) +
                    ", file has " + dtypeName(t->dtype) + " " + shapeToString(t->shape));
    }
  return llvm::Error::success();
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
  if ((*buf)->getBufferSize() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !loaded->plan.ParseFromArray((*buf)->getBufferStart(), static_cast<int>((*buf)->getBufferSize())))
    return fail(path + ": not a valid plan file (protobuf parse failed: corrupt or truncated)");
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
  return loaded;
}

}  // namespace colossal::runtime

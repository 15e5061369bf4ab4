//===- Plan.h - Loading and validating compiled plans ---------------------------*- C++ -*-===//
//
// A plan (runtime/plan/plan.proto, docs/plan.md) is validated whole before anything runs or any
// weight is read: version, buffers, arena placement, instructions against the kernel registry
// (operand counts, shapes, dtypes, attributes), bindings; then the weights file (size, FNV-1a 64
// hash, every WEIGHT buffer's key, dtype and shape). Every failure is one llvm::Error whose message
// starts with the file it concerns.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_PLAN_H
#define COLOSSAL_RUNTIME_PLAN_H

#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/Safetensors.h"

#include "plan.pb.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>

namespace colossal::runtime {

/// The plan format version this runtime reads (plan.proto's `version`).
constexpr uint32_t kPlanVersion = 3;  // 2: MeshAxis.role; 3: Program.role
/// "forward", "eval", "train_step", "optimizer_step" (plan.proto Program.Role), for messages.
llvm::StringRef programRoleName(plan::Program::Role role);

/// Arena offsets are multiples of this.
constexpr uint64_t kArenaAlignment = 64;

/// FNV-1a 64-bit (Fowler–Noll–Vo; offset basis 0xcbf29ce484222325, prime 0x100000001b3) of `size`
/// bytes, continuing from `hash` (pass the result of a previous call to hash in pieces).
constexpr uint64_t kFnv1a64OffsetBasis = 0xcbf29ce484222325ULL;
uint64_t fnv1a64(const void *data, size_t size, uint64_t hash = kFnv1a64OffsetBasis);

/// The bytes of a plan file: `plan` serialized deterministically (map entries sorted) without
/// plan_hash, then plan_hash (field 63, fixed64: kPlanHashTrailerBytes bytes) holding the FNV-1a
/// 64 of the bytes before it. loadPlan checks it, so a flipped byte is an error, not a plan.
std::string serializePlan(const plan::Plan &plan);
constexpr size_t kPlanHashTrailerBytes = 10;  // tag 0xF9 0x03, then 8 little-endian bytes

/// FNV-1a 64 of a whole file (what plan.weights_hash holds). Error names the file if unreadable.
llvm::Expected<uint64_t> fnv1a64File(llvm::StringRef path);

/// Checks a parsed plan without touching the weights file: everything listed in the header comment
/// but the weights. `planPath` prefixes every message.
llvm::Error validatePlan(const plan::Plan &plan, llvm::StringRef planPath,
                         const KernelRegistry &registry);

/// Checks the weights file against the plan: size and hash, then each WEIGHT buffer's key, dtype
/// and shape in `weights` (a sharded one: its sharding's global_shape, as for a sharded PARAM's
/// init_weight).
llvm::Error validateWeights(const plan::Plan &plan, llvm::StringRef planPath,
                            const SafetensorsFile &weights);

/// A plan loaded from disk with its (validated, memory-mapped) weights.
struct LoadedPlan {
  std::string path;
  plan::Plan plan;
  std::unique_ptr<SafetensorsFile> weights;  // null when the plan has no WEIGHT buffers
                                             // and names no weights file
  /// The program named `name`, or nullptr.
  const plan::Program *program(llvm::StringRef name) const;
  /// The program with `role` (the loader checked there is at most one), or nullptr.
  const plan::Program *program(plan::Program::Role role) const;
  /// Pipeline parallelism: stage `stage`'s program with `role` (STAGE_*), or nullptr.
  const plan::Program *stageProgram(plan::Program::Role role, uint32_t stage) const;
  /// The world rank (of the plan's mesh) whose shards `weightShards` and the StateStore hold:
  /// 0 after loadPlan, changed by selectRank().
  int64_t rank = 0;
  /// Sharded WEIGHT tensors (Buffer.sharding, docs/parallelism.md "Sharded tensors"): this rank's
  /// local shard of each, by weight name, sliced from the global tensor of the weights file.
  llvm::StringMap<AlignedBuffer> weightShards;
};

/// Slices every sharded WEIGHT tensor of `plan` for world rank `rank` of its mesh into
/// `plan.weightShards` and sets `plan.rank` (StateStore::create slices the sharded states for it
/// too). loadPlan calls it for rank 0; a job on several ranks calls it once the rank is known,
/// before creating executors or a state store. Errors: rank outside [0, mesh size).
llvm::Error selectRank(LoadedPlan &plan, int64_t rank);

/// Reads `path`, parses it, validatePlan(), then checks the weights file named by the plan (relative
/// to the plan's folder): exists, size, FNV-1a 64 hash, opens it, validateWeights().
llvm::Expected<std::unique_ptr<LoadedPlan>> loadPlan(llvm::StringRef path,
                                                      const KernelRegistry &registry);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_PLAN_H

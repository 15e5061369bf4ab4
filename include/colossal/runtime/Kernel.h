//===- Kernel.h - Kernel interface and registry ---------------------------------*- C++ -*-===//
//
// A kernel is a function of tensor views (pointers, shapes, dtypes) and the instruction's attributes.
// Kernels are registered under (op, dtype of the first output, device); each declares its operand
// counts, a `verify` run at plan-load time (shapes, dtypes, attributes: so that a bad plan fails
// before anything runs) and a `run` with no allocation. A kernel that needs scratch memory declares
// `workspace`: the executor allocates the largest one once, next to the arena. A kernel that
// builds something once per instruction (a oneDNN primitive, weights reordered into its layout)
// declares `prepare`: the executor calls it once when it binds the instruction, before
// `workspace`, and the kernel keeps what it built in `KernelCall::state`.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNEL_H
#define COLOSSAL_RUNTIME_KERNEL_H

#include "colossal/runtime/Device.h"
#include "colossal/runtime/Tensor.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace colossal::plan {
class Instruction;
class Attr;
}

namespace colossal::runtime {

class CommContext;

/// Everything a kernel sees: its operands, attributes and scratch memory.
struct KernelCall {
  llvm::SmallVector<TensorRef, 4> inputs;
  llvm::SmallVector<TensorRef, 2> outputs;
  /// The instruction (attributes, op name, loc); may be null in tests that pass no attributes.
  const plan::Instruction *instruction = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  /// Threads the kernel may use (the device's setting).
  int threads = 1;
  /// The job's communicators (Communicator.h), for collective instructions; null when the
  /// executor was created without one (then collectives fail with an error).
  CommContext *comm = nullptr;
  /// Bit i set: input i is bound to a WEIGHT buffer (read-only, the same bytes for the executor's
  /// whole life), so `prepare` may transform it once.
  uint64_t constantInputs = 0;
  /// What `prepare` built for this instruction (null when the kernel has no prepare).
  std::shared_ptr<void> state;

  /// The instruction's attributes as a flat (name, value) table, built once by indexAttrs() (the
  /// executor calls it when it binds the instruction): the accessors below then scan a few
  /// entries instead of hashing the name into the plan's map on every run. Empty until then.
  llvm::SmallVector<std::pair<llvm::StringRef, const plan::Attr *>, 4> attrTable;
  bool attrsIndexed = false;
  void indexAttrs();

  bool isConstantInput(unsigned i) const { return i < 64 && (constantInputs >> i & 1); }
  bool hasAttr(llvm::StringRef name) const;
  /// Attribute accessors: `fallback` when absent. A present attribute of the wrong kind is an error
  /// reported by verifyAttrKinds() at load time, so run() can use these unchecked.
  int64_t attrInt(llvm::StringRef name, int64_t fallback) const;
  double attrFloat(llvm::StringRef name, double fallback) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef fallback) const;
  /// An `ints` attribute (empty when absent).
  llvm::SmallVector<int64_t, 6> attrInts(llvm::StringRef name) const;
};

/// Kinds of attribute values, to check a plan's attributes before running.
enum class AttrKind { Int, Float, String, Ints, Floats };
struct AttrSpec {
  const char *name;
  AttrKind kind;
};

/// One registered kernel implementation.
struct KernelDesc {
  std::string op;
  DType dtype = DType::F32;          // dtype of the first output
  DeviceKind device = DeviceKind::CPU;
  int minInputs = 1, maxInputs = 1;  // maxInputs = -1: variadic
  int minOutputs = 1, maxOutputs = 1;
  std::vector<AttrSpec> attrs;       // attributes it reads; others are rejected at load time
  /// Checks shapes/dtypes/attribute values; called once per instruction at load time.
  llvm::Error (*verify)(const KernelCall &) = nullptr;
  /// Builds per-instruction state into call.state, once, after verify and before workspace and
  /// run (nullptr: none). Runs when the executor binds the instruction; may allocate.
  llvm::Error (*prepare)(KernelCall &) = nullptr;
  /// Scratch bytes needed by run() with `threads` threads (nullptr: none).
  size_t (*workspace)(const KernelCall &, int threads) = nullptr;
  /// Executes the kernel. Errors are data-dependent failures only (e.g. gather index out of range).
  llvm::Error (*run)(const KernelCall &) = nullptr;
};

/// Kernels by (op, dtype, device).
class KernelRegistry {
public:
  void add(KernelDesc desc);
  /// nullptr when no kernel has this exact key.
  const KernelDesc *find(llvm::StringRef op, DType dtype, DeviceKind device) const;
  /// Any kernel with this op name on this device (for operand-count checks and messages).
  bool knowsOp(llvm::StringRef op, DeviceKind device) const;
  /// dtypes implemented for `op` on `device` (for "no kernel" messages).
  std::vector<DType> dtypesOf(llvm::StringRef op, DeviceKind device) const;
  std::vector<std::string> ops(DeviceKind device) const;

  /// The registry with every CPU kernel (built once).
  static const KernelRegistry &cpu();

private:
  std::map<std::tuple<std::string, DType, DeviceKind>, KernelDesc> kernels_;
};

/// Registers every CPU kernel family into `registry` (runtime/kernels/cpu/*.cpp).
void registerCpuKernels(KernelRegistry &registry);

/// Checks that `call`'s attributes are among `desc.attrs` with the declared kinds.
llvm::Error verifyAttrKinds(const KernelDesc &desc, const KernelCall &call);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_KERNEL_H

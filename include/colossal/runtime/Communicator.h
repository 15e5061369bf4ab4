//===- Communicator.h - Collectives over the ranks of a mesh --------------------*- C++ -*-===//
//
// A Communicator is a group of ranks that run collectives together (SPMD: every rank of the group
// calls the same collectives in the same order with the same dtypes and shapes). Buffers are
// contiguous row-major host memory. The base class does the tensor-shape work (concatenating or
// scattering along any dimension by packing into scratch memory) and hands contiguous blocks to a
// backend: MPI (runtime/comm/mpi/MpiCommunicator.cpp) or the one-rank local backend.
//
// A CommContext owns the communicators of one job: the world and one sub-communicator per group of
// mesh axes (`axes("tp")`, `axes("dp,tp")`), created on first use. It starts MPI only when the
// mesh has more than one rank or the process was launched by mpirun (docs/parallelism.md).
//
// Failures: argument errors (shapes, dims, dtypes, roots) come back as llvm::Error. A collective
// that does not complete within the context's timeout prints, on each rank that times out,
//   error: rank R: <collective> on axis '<axes>' did not complete within S s
// and ends the process (exit status 1; mpirun then ends the other ranks): a stuck job never hangs.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_COMMUNICATOR_H
#define COLOSSAL_RUNTIME_COMMUNICATOR_H

#include "colossal/runtime/DType.h"
#include "colossal/runtime/Mesh.h"
#include "colossal/runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace colossal::plan {
class Plan;
class Program;
}

namespace colossal::runtime {

class KernelRegistry;

/// Element-wise reductions of all_reduce / reduce_scatter.
enum class ReduceOp : uint8_t { Sum, Max, Min };

/// "sum", "max", "min".
llvm::StringRef reduceOpName(ReduceOp op);
/// Parses a reduction name; nullopt when unknown.
std::optional<ReduceOp> parseReduceOp(llvm::StringRef name);
/// Whether `dtype` can be reduced: every numeric dtype (f32, f64, f16, bf16, the integers); not
/// bool. f16 and bf16 are reduced in f32 and rounded once (to nearest even) at the end.
bool isReducibleDType(DType dtype);

/// What every communicator of a context shares: the job-wide settings and the world rank for
/// messages.
struct CommShared {
  int worldRank = 0;
  double timeoutSeconds = 300;
  /// Test hook (COLOSSAL_TEST_STALL_RANK): this world rank sleeps `stallSeconds` (from
  /// COLOSSAL_TEST_STALL_SECONDS) before each collective.
  int stallRank = -1;
  double stallSeconds = 3600;
};

class Communicator {
public:
  virtual ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  /// This process's index in the group, in [0, size()).
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The mesh axes the group spans as written ("tp", "dp,tp"), or "world".
  const std::string &axes() const { return axes_; }
  /// "axis 'tp'", "axes 'dp,tp'" or "all ranks": how messages name the group.
  std::string describe() const;

  /// out[i] = op over the group of in[i], for `count` elements. `in == out` is allowed (in place).
  /// Errors: dtype not reducible (isReducibleDType), count < 0.
  llvm::Error allReduce(const void *in, void *out, int64_t count, DType dtype, ReduceOp op);

  /// Concatenates every rank's `in` (shape `inShape`) along `dim`, in group-rank order:
  /// out has inShape with inShape[dim] * size() at `dim`. Errors: dim outside [0, rank).
  /// `in` and `out` must not overlap.
  llvm::Error allGather(const void *in, void *out, llvm::ArrayRef<int64_t> inShape, int64_t dim,
                        DType dtype);

  /// Reduces every rank's `in` (shape `inShape`) with `op` and scatters the result along `dim`:
  /// group rank r gets slice [r*m, (r+1)*m) of dim `dim`, m = inShape[dim] / size(). Errors: dim
  /// outside [0, rank), inShape[dim] not divisible by size(), dtype not reducible. No overlap.
  llvm::Error reduceScatter(const void *in, void *out, llvm::ArrayRef<int64_t> inShape, int64_t dim,
                            DType dtype, ReduceOp op);

  /// Splits `in` (shape `inShape`) along `splitDim` into size() equal chunks, sends chunk j to
  /// group rank j, and concatenates the chunks received along `concatDim` in source-rank order:
  /// out has inShape with splitDim / size() and then concatDim * size() (the two may be the same
  /// dim: then out has inShape's shape). Errors: dims out of range, inShape[splitDim] not
  /// divisible by size(). No overlap.
  llvm::Error allToAll(const void *in, void *out, llvm::ArrayRef<int64_t> inShape, int64_t splitDim,
                       int64_t concatDim, DType dtype);

  /// out = group rank `root`'s `in` on every rank (`in` is read on root only; `in == out` is
  /// allowed). Errors: root outside [0, size()).
  llvm::Error broadcast(const void *in, void *out, int64_t count, DType dtype, int root);

  /// Point to point (for pipeline stages): blocks until `count` elements reached / came from
  /// group rank `peer` with message `tag` (>= 0). Errors: peer out of range or this rank.
  llvm::Error send(const void *data, int64_t count, DType dtype, int peer, int tag = 0);
  llvm::Error recv(void *data, int64_t count, DType dtype, int peer, int tag = 0);
  /// Starts sending `count` elements to group rank `peer` and returns at once (pipeline stages:
  /// a stage never waits for its successor to receive). `data` must stay unchanged until
  /// waitSends() returns. Messages between two ranks with one tag arrive in the order sent.
  /// Errors: as send().
  llvm::Error isend(const void *data, int64_t count, DType dtype, int peer, int tag = 0);
  /// Returns once every isend() of this communicator has completed.
  llvm::Error waitSends();

  /// Returns once every rank of the group has called it.
  llvm::Error barrier();

protected:
  Communicator(int rank, int size, std::string axes, const CommShared &shared);

  // Backend primitives on contiguous blocks of `count` elements (count >= 0; size() >= 2: the
  // base class answers one-rank groups with copies). `what` names the collective for messages.
  virtual llvm::Error allReduceImpl(const void *in, void *out, int64_t count, DType dtype,
                                    ReduceOp op) = 0;
  /// out = [size()][count]: block r from group rank r.
  virtual llvm::Error allGatherImpl(const void *in, void *out, int64_t count, DType dtype) = 0;
  /// in = [size()][count]; out = the reduction of every rank's block rank().
  virtual llvm::Error reduceScatterImpl(const void *in, void *out, int64_t count, DType dtype,
                                        ReduceOp op) = 0;
  /// in = [size()][count]: block j goes to rank j; out = [size()][count]: block i came from rank i.
  virtual llvm::Error allToAllImpl(const void *in, void *out, int64_t count, DType dtype) = 0;
  virtual llvm::Error broadcastImpl(void *buf, int64_t count, DType dtype, int root) = 0;
  virtual llvm::Error sendImpl(const void *data, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual llvm::Error recvImpl(void *data, int64_t count, DType dtype, int peer, int tag) = 0;
  /// Non-blocking send; the base class's blocking fallback sends at once.
  virtual llvm::Error isendImpl(const void *data, int64_t count, DType dtype, int peer, int tag) {
    return sendImpl(data, count, dtype, peer, tag);
  }
  virtual llvm::Error waitSendsImpl() { return llvm::Error::success(); }
  virtual llvm::Error barrierImpl() = 0;

  /// Scratch memory of at least `bytes` in slot `slot` (0..3), kept and grown as needed: after the
  /// first step, collectives allocate nothing. Slot 0 is the base class's packing buffer.
  void *scratch(int slot, size_t bytes);

  const CommShared &shared_;

private:
  void maybeStall();
  llvm::Error checkPointToPoint(const char *what, int64_t count, int peer, int tag) const;
  int rank_, size_;
  std::string axes_;
  AlignedBuffer scratch_[4];
};

/// Wall seconds this process has spent inside Communicator collectives (all_reduce, all_gather,
/// reduce_scatter, all_to_all, broadcast, send/recv, barrier) of groups of two or more ranks,
/// summed over all communicators since the process started: packing, the backend call and the
/// wait for the slowest rank (so it includes load imbalance). One-rank groups count nothing. Read
/// by the Trainer before and after a step for the metrics' `comm_s`. Not thread-safe against
/// collectives running concurrently on other threads (the runtime issues them from one thread).
double commSecondsTotal();

/// Elements this process has put through collectives of groups of two or more ranks since it
/// started, counted as the ZeRO paper counts communication volume (Rajbhandari et al. 2020 §7:
/// an all_reduce of Ψ elements is 2Ψ, a reduce_scatter of Ψ is Ψ, an all_gather producing Ψ is
/// Ψ). Read by the Trainer before and after a step for the metrics' `comm_elements`.
struct CommElements {
  int64_t allReduce = 0, reduceScatter = 0, allGather = 0;
};
CommElements commElementsTotal();

/// Settings of a job's communication.
struct CommOptions {
  /// Seconds a collective may take before the job is aborted (colossal-run --comm-timeout).
  double timeoutSeconds = 300;
};

/// True when this process was started by mpirun / mpiexec (OpenMPI's OMPI_COMM_WORLD_SIZE, or
/// PMI_SIZE / PMIX_RANK of other launchers, is set).
bool launchedByMpirun();
/// The world rank the launcher assigned (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK); 0 without.
int launcherRank();
/// Ranks of this job on this machine (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, or srun's
/// SLURM_STEP_TASKS_PER_NODE; 1 without a launcher).
int launcherLocalSize();
/// Default kernel threads of one rank: the CPUs this process may run on, divided by the ranks on
/// this machine when the launcher did not already bind each rank to its own CPUs; at least 1.
int defaultThreadsPerRank();

/// The communicators of one job.
class CommContext {
public:
  /// Starts communication for `mesh`. Without a launcher and with a one-rank mesh: a local context
  /// (no MPI). Otherwise MPI is initialized and the world size must equal mesh.size().
  /// Errors: "the plan's mesh <mesh> has N ranks but the job has M" (M = 1 when not launched by
  /// mpirun, with a hint to use mpirun -np N or --nproc N); MPI missing from this build.
  /// The error is the same on every rank; callers print it on rank 0 only (isPrintingRank()).
  static llvm::Expected<std::unique_ptr<CommContext>> create(const Mesh &mesh,
                                                             const CommOptions &options);
  ~CommContext();

  const Mesh &mesh() const { return mesh_; }
  /// World rank of this process and the number of ranks.
  int rank() const { return shared_.worldRank; }
  int worldSize() const { return static_cast<int>(mesh_.size()); }
  /// Whether MPI was started (false for a local one-rank context).
  bool usesMpi() const { return usesMpi_; }
  double timeoutSeconds() const { return shared_.timeoutSeconds; }
  /// Changes the deadline of every blocking call from now on (the serving followers wait for
  /// the next step without one while the server is idle). seconds > 0.
  void setTimeoutSeconds(double seconds) { shared_.timeoutSeconds = seconds; }

  Communicator &world() { return *world_; }

  /// The communicator over the ranks that differ from this one only in the listed axes
  /// (comma-separated names; group ranks row-major over them in the order written). Created on
  /// first use, which is collective over the world: every rank must ask for the same groups in
  /// the same order (prepare() does so for a whole program). Errors: Mesh::parseAxes's.
  llvm::Expected<Communicator *> axes(llvm::StringRef list);

  /// Creates the groups named by the `axes` attributes of `program`'s collectives, in
  /// instruction order, so that no group is created while the program runs.
  llvm::Error prepare(const plan::Program &program);

  /// Ends the job on every rank after an error on this one: MPI_Abort(status) under MPI,
  /// exit(status) otherwise. Never returns.
  [[noreturn]] void abort(int status);

  /// Backend hooks (runtime/comm/mpi): build world and group communicators.
  struct Backend;

private:
  CommContext() = default;
  Mesh mesh_;
  CommShared shared_;
  bool usesMpi_ = false;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> world_;
  llvm::StringMap<std::unique_ptr<Communicator>> groups_;
};

/// Registers the collective instructions (all_reduce, all_gather, reduce_scatter, all_to_all,
/// broadcast; every dtype) and the local mesh queries shard_slice (every dtype: group rank r keeps
/// chunk r of `dim`) and axis_index (int64 scalar r) into `registry` (runtime/comm/Collectives.cpp,
/// docs/plan.md "Collective instructions").
void registerCollectiveKernels(KernelRegistry &registry);

/// Checks `plan`'s mesh (Mesh::fromPlan) and every collective instruction against it: its `axes`
/// name distinct axes of the mesh, and its shapes fit the size of that group (all_gather's output
/// is the group size times its input along `dim`, shard_slice's input the group size times its
/// output, axis_index writes an int64 scalar, ...). Errors start with `planPath` and name the
/// program and instruction. Called by validatePlan().
llvm::Error validateCollectives(const plan::Plan &plan, llvm::StringRef planPath);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_COMMUNICATOR_H

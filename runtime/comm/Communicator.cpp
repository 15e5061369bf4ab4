//===- Communicator.cpp - Shape logic of collectives, the local backend, axis groups ---------===//
//
// Collectives along a non-leading dimension are reduced to block collectives on contiguous memory:
// a tensor [outer, mid, inner] split or concatenated along `mid` is packed as [P][outer][mid/P or
// mid][inner] in scratch memory and unpacked after the backend call. When outer == 1 the blocks are
// already contiguous and the backend works on the caller's buffers directly.
//
//===----------------------------------------------------------------------------------------===//
#include "CommBackend.h"

#include "plan.pb.h"

#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <sched.h>
#include <unistd.h>

namespace colossal::runtime {

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

void splitAt(llvm::ArrayRef<int64_t> shape, int64_t dim, int64_t &outer, int64_t &mid, int64_t &inner) {
  outer = inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  mid = shape[dim];
  for (size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
}

/// Copies `parts` blocks of `bytes` bytes from stride `srcStride` to stride `dstStride`.
void copyBlocks(char *dst, int64_t dstStride, const char *src, int64_t srcStride, int64_t parts,
                int64_t bytes) {
  for (int64_t i = 0; i < parts; ++i) std::memcpy(dst + i * dstStride, src + i * srcStride, bytes);
}

/// One rank: every collective is the identity (handled by the base class); nothing to send to.
class LocalCommunicator final : public Communicator {
public:
  LocalCommunicator(std::string axes, const CommShared &shared)
      : Communicator(0, 1, std::move(axes), shared) {}

protected:
  llvm::Error allReduceImpl(const void *, void *, int64_t, DType, ReduceOp) override { return unreachable(); }
  llvm::Error allGatherImpl(const void *, void *, int64_t, DType) override { return unreachable(); }
  llvm::Error reduceScatterImpl(const void *, void *, int64_t, DType, ReduceOp) override { return unreachable(); }
  llvm::Error allToAllImpl(const void *, void *, int64_t, DType) override { return unreachable(); }
  llvm::Error broadcastImpl(void *, int64_t, DType, int) override { return unreachable(); }
  llvm::Error sendImpl(const void *, int64_t, DType, int, int) override { return unreachable(); }
  llvm::Error recvImpl(void *, int64_t, DType, int, int) override { return unreachable(); }
  llvm::Error barrierImpl() override { return llvm::Error::success(); }

private:
  static llvm::Error unreachable() { return fail("internal error: a one-rank group reached its backend"); }
};

double gCommSeconds = 0;
CommElements gCommElements;  // commElementsTotal()

/// Adds its lifetime to gCommSeconds when `active` (the group has two or more ranks).
struct CommTimer {
  explicit CommTimer(bool active) : active(active) {
    if (active) t0 = std::chrono::steady_clock::now();
  }
  ~CommTimer() {
    if (active) gCommSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  bool active;
  std::chrono::steady_clock::time_point t0;
};

int envInt(const char *name, int fallback) {
  const char *v = std::getenv(name);
  if (!v || !*v) return fallback;
  char *end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end && *end == 0) ? static_cast<int>(x) : fallback;
}
}  // namespace

double commSecondsTotal() { return gCommSeconds; }

CommElements commElementsTotal() { return gCommElements; }

llvm::StringRef reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Max: return "max";
  case ReduceOp::Min: return "min";
  }
  return "?";
}

std::optional<ReduceOp> parseReduceOp(llvm::StringRef name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "max") return ReduceOp::Max;
  if (name == "min") return ReduceOp::Min;
  return std::nullopt;
}

bool isReducibleDType(DType dtype) {
  return dtype != DType::Bool && dtype != DType::Invalid;
}

//===----------------------------------------------------------------------------------------===//
// Communicator
//===----------------------------------------------------------------------------------------===//

Communicator::Communicator(int rank, int size, std::string axes, const CommShared &shared)
    : shared_(shared), rank_(rank), size_(size), axes_(std::move(axes)) {}

Communicator::~Communicator() = default;

std::string Communicator::describe() const {
  if (axes_ == "world") return "all ranks";
  return (llvm::StringRef(axes_).contains(',') ? "axes '" : "axis '") + axes_ + "'";
}

void *Communicator::scratch(int slot, size_t bytes) {
  AlignedBuffer &b = scratch_[slot];
  if (b.size() < bytes) b = AlignedBuffer(bytes);
  return b.data();
}

void Communicator::maybeStall() {
  if (shared_.stallRank != shared_.worldRank) return;
  llvm::errs() << ("rank " + llvm::Twine(shared_.worldRank) + ": COLOSSAL_TEST_STALL_RANK: sleeping " +
                   std::to_string(shared_.stallSeconds) + " s before a collective on " + describe() + "\n")
                      .str();
  std::this_thread::sleep_for(std::chrono::duration<double>(shared_.stallSeconds));
}

llvm::Error Communicator::allReduce(const void *in, void *out, int64_t count, DType dtype, ReduceOp op) {
  if (!isReducibleDType(dtype)) return fail("all_reduce: cannot reduce " + dtypeName(dtype));
  if (count < 0) return fail("all_reduce: negative count");
  maybeStall();
  CommTimer timer(size_ > 1);
  if (size_ == 1) {
    if (in != out) std::memcpy(out, in, count * dtypeSize(dtype));
    return llvm::Error::success();
  }
  gCommElements.allReduce += 2 * count;
  return allReduceImpl(in, out, count, dtype, op);
}

llvm::Error Communicator::allGather(const void *in, void *out, llvm::ArrayRef<int64_t> inShape,
                                    int64_t dim, DType dtype) {
  int64_t rank = static_cast<int64_t>(inShape.size());
  if (dim < 0 || dim >= rank)
    return fail("all_gather: dim " + llvm::Twine(dim) + " is outside [0, " + llvm::Twine(rank) + ")");
  maybeStall();
  CommTimer timer(size_ > 1);
  const size_t esz = dtypeSize(dtype);
  const int64_t numel = numElements(inShape);
  if (size_ == 1) {
    std::memcpy(out, in, numel * esz);
    return llvm::Error::success();
  }
  gCommElements.allGather += numel * size_;
  int64_t outer, mid, inner;
  splitAt(inShape, dim, outer, mid, inner);
  if (outer == 1 || numel == 0) return allGatherImpl(in, out, numel, dtype);
  char *tmp = static_cast<char *>(scratch(0, size_ * numel * esz));
  if (llvm::Error e = allGatherImpl(in, tmp, numel, dtype)) return e;
  // tmp = [P][outer][mid*inner] -> out = [outer][P][mid*inner].
  const int64_t block = mid * inner * esz;
  for (int64_t r = 0; r < size_; ++r)
    copyBlocks(static_cast<char *>(out) + r * block, size_ * block, tmp + r * outer * block, block,
               outer, block);
  return llvm::Error::success();
}

llvm::Error Communicator::reduceScatter(const void *in, void *out, llvm::ArrayRef<int64_t> inShape,
                                        int64_t dim, DType dtype, ReduceOp op) {
  int64_t rank = static_cast<int64_t>(inShape.size());
  if (dim < 0 || dim >= rank)
    return fail("reduce_scatter: dim " + llvm::Twine(dim) + " is outside [0, " + llvm::Twine(rank) + ")");
  if (inShape[dim] % size_ != 0)
    return fail("reduce_scatter: dim " + llvm::Twine(dim) + " of " + shapeToString(inShape) +
                " is not divisible by the group size " + llvm::Twine(size_));
  if (!isReducibleDType(dtype)) return fail("reduce_scatter: cannot reduce " + dtypeName(dtype));
  maybeStall();
  CommTimer timer(size_ > 1);
  const size_t esz = dtypeSize(dtype);
  const int64_t numel = numElements(inShape);
  if (size_ == 1) {
    std::memcpy(out, in, numel * esz);
    return llvm::Error::success();
  }
  gCommElements.reduceScatter += numel;
  int64_t outer, mid, inner;
  splitAt(inShape, dim, outer, mid, inner);
  const int64_t chunk = numel / size_;
  if (outer == 1 || numel == 0) return reduceScatterImpl(in, out, chunk, dtype, op);
  // in = [outer][P][m*inner] -> tmp = [P][outer][m*inner].
  char *tmp = static_cast<char *>(scratch(0, numel * esz));
  const int64_t block = (mid / size_) * inner * esz;
  for (int64_t r = 0; r < size_; ++r)
    copyBlocks(tmp + r * outer * block, block, static_cast<const char *>(in) + r * block,
               size_ * block, outer, block);
  return reduceScatterImpl(tmp, out, chunk, dtype, op);
}

llvm::Error Communicator::allToAll(const void *in, void *out, llvm::ArrayRef<int64_t> inShape,
                                   int64_t splitDim, int64_t concatDim, DType dtype) {
  int64_t rank = static_cast<int64_t>(inShape.size());
  if (splitDim < 0 || splitDim >= rank || concatDim < 0 || concatDim >= rank)
    return fail("all_to_all: split dim " + llvm::Twine(splitDim) + " or concat dim " +
                llvm::Twine(concatDim) + " is outside [0, " + llvm::Twine(rank) + ")");
  if (inShape[splitDim] % size_ != 0)
    return fail("all_to_all: dim " + llvm::Twine(splitDim) + " of " + shapeToString(inShape) +
                " is not divisible by the group size " + llvm::Twine(size_));
  maybeStall();
  CommTimer timer(size_ > 1);
  const size_t esz = dtypeSize(dtype);
  const int64_t numel = numElements(inShape);
  if (size_ == 1) {
    std::memcpy(out, in, numel * esz);
    return llvm::Error::success();
  }
  const int64_t chunk = numel / size_;
  // Pack: chunk j = slice j along splitDim -> send = [P][chunk].
  int64_t outer, mid, inner;
  splitAt(inShape, splitDim, outer, mid, inner);
  const char *send = static_cast<const char *>(in);
  if (outer != 1 && numel != 0) {
    char *tmp = static_cast<char *>(scratch(0, numel * esz));
    const int64_t block = (mid / size_) * inner * esz;
    for (int64_t j = 0; j < size_; ++j)
      copyBlocks(tmp + j * outer * block, block, send + j * block, size_ * block, outer, block);
    send = tmp;
  }
  // The received chunks [P][chunk shape] are concatenated along concatDim of the chunk shape.
  Shape chunkShape(inShape.begin(), inShape.end());
  chunkShape[splitDim] /= size_;
  splitAt(chunkShape, concatDim, outer, mid, inner);
  if (outer == 1 || numel == 0) return allToAllImpl(send, out, chunk, dtype);
  char *recv = static_cast<char *>(scratch(1, numel * esz));
  if (llvm::Error e = allToAllImpl(send, recv, chunk, dtype)) return e;
  const int64_t block = mid * inner * esz;
  for (int64_t i = 0; i < size_; ++i)
    copyBlocks(static_cast<char *>(out) + i * block, size_ * block, recv + i * outer * block, block,
               outer, block);
  return llvm::Error::success();
}

llvm::Error Communicator::broadcast(const void *in, void *out, int64_t count, DType dtype, int root) {
  if (root < 0 || root >= size_)
    return fail("broadcast: root " + llvm::Twine(root) + " is outside the group of " + llvm::Twine(size_));
  if (count < 0) return fail("broadcast: negative count");
  maybeStall();
  CommTimer timer(size_ > 1);
  if (rank_ == root && in != out) std::memcpy(out, in, count * dtypeSize(dtype));
  if (size_ == 1) return llvm::Error::success();
  return broadcastImpl(out, count, dtype, root);
}

llvm::Error Communicator::send(const void *data, int64_t count, DType dtype, int peer, int tag) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    return fail("send: peer " + llvm::Twine(peer) + " is not another rank of the group of " +
                llvm::Twine(size_));
  if (tag < 0 || count < 0) return fail("send: negative tag or count");
  maybeStall();
  CommTimer timer(size_ > 1);
  return sendImpl(data, count, dtype, peer, tag);
}

llvm::Error Communicator::recv(void *data, int64_t count, DType dtype, int peer, int tag) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    return fail("recv: peer " + llvm::Twine(peer) + " is not another rank of the group of " +
                llvm::Twine(size_));
  if (tag < 0 || count < 0) return fail("recv: negative tag or count");
  maybeStall();
  CommTimer timer(size_ > 1);
  return recvImpl(data, count, dtype, peer, tag);
}

llvm::Error Communicator::isend(const void *data, int64_t count, DType dtype, int peer, int tag) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    return fail("send: peer " + llvm::Twine(peer) + " is not another rank of the group of " +
                llvm::Twine(size_));
  if (tag < 0 || count < 0) return fail("send: negative tag or count");
  maybeStall();
  CommTimer timer(size_ > 1);
  return isendImpl(data, count, dtype, peer, tag);
}

llvm::Error Communicator::waitSends() {
  CommTimer timer(size_ > 1);
  return waitSendsImpl();
}

llvm::Error Communicator::barrier() {
  maybeStall();
  CommTimer timer(size_ > 1);
  if (size_ == 1) return llvm::Error::success();
  return barrierImpl();
}

std::unique_ptr<Communicator> createLocalCommunicator(std::string axes, const CommShared &shared) {
  return std::make_unique<LocalCommunicator>(std::move(axes), shared);
}

//===----------------------------------------------------------------------------------------===//
// Launcher environment
//===----------------------------------------------------------------------------------------===//

bool launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

int launcherRank() {
  int r = envInt("OMPI_COMM_WORLD_RANK", -1);
  if (r < 0) r = envInt("PMI_RANK", -1);
  if (r < 0) r = envInt("PMIX_RANK", 0);
  return r;
}

int launcherLocalSize() {
  int n = envInt("OMPI_COMM_WORLD_LOCAL_SIZE", -1);
  if (n < 1) n = envInt("MPI_LOCALNRANKS", -1);
  // srun (docs/cluster.md): "2", "2(x3)" (2 tasks on each of 3 nodes) or "4,2" (per node, in node
  // order); the first node's count, exact for the even layouts that --ntasks-per-node gives.
  if (n < 1)
    if (const char *s = std::getenv("SLURM_STEP_TASKS_PER_NODE")) n = std::atoi(s);
  return std::max(1, n);
}

int defaultThreadsPerRank() {
  cpu_set_t set;
  int allowed = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = CPU_COUNT(&set);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (allowed <= 0) allowed = online > 0 ? static_cast<int>(online) : 1;
  // A launcher that binds ranks gives each its own CPUs already; otherwise share them.
  if (online > 0 && allowed < online) return std::max(1, allowed);
  return std::max(1, allowed / launcherLocalSize());
}

//===----------------------------------------------------------------------------------------===//
// CommContext (create() lives in CommContext.cpp, which links the MPI backend)
//===----------------------------------------------------------------------------------------===//

CommContext::Backend::~Backend() = default;

CommContext::~CommContext() {
  groups_.clear();
  world_.reset();
  backend_.reset();  // MPI_Finalize
}

llvm::Expected<Communicator *> CommContext::axes(llvm::StringRef list) {
  auto it = groups_.find(list);
  if (it != groups_.end()) return it->second.get();
  llvm::Expected<llvm::SmallVector<int, 4>> idx = mesh_.parseAxes(list);
  if (!idx) return idx.takeError();
  std::unique_ptr<Communicator> comm;
  std::string label;
  for (int a : *idx) label += (label.empty() ? "" : ",") + mesh_.axes()[a].name;
  if (!backend_) {
    comm = createLocalCommunicator(label, shared_);
  } else {
    // Everyone must have arrived before the (blocking) split: the barrier has the watchdog.
    if (llvm::Error e = backend_->barrier(shared_, "creating the group of " + label)) return std::move(e);
    auto c = backend_->split(mesh_.groupId(rank(), *idx), mesh_.groupRank(rank(), *idx), label, shared_);
    if (!c) return c.takeError();
    comm = std::move(*c);
  }
  Communicator *raw = comm.get();
  groups_[list] = std::move(comm);
  return raw;
}

llvm::Error CommContext::prepare(const plan::Program &program) {
  for (const plan::Instruction &inst : program.instructions()) {
    auto it = inst.attrs().find("axes");
    if (it == inst.attrs().end() || !it->second.has_s()) continue;
    if (llvm::Expected<Communicator *> c = axes(it->second.s()); !c) return c.takeError();
  }
  return llvm::Error::success();
}

void CommContext::abort(int status) {
  llvm::errs().flush();
  if (backend_) backend_->abort(status);
  std::exit(status);
}

}  // namespace colossal::runtime

//===- MpiCommunicator.cpp - The MPI (OpenMPI) communication backend --------------------------===//
//
// Every collective is a blocking MPI call (MPI_Allreduce, MPI_Allgather, ...: OpenMPI's tuned
// algorithms) watched by a watchdog thread. The calling thread arms the watchdog with a deadline
// before the call and disarms it after; a call still running at its deadline makes the watchdog
// print "error: rank R: <collective> on axis '<axes>' did not complete within S s" and end the
// process with status 1, and mpirun then ends every other rank. (The non-blocking calls polled
// with MPI_Test, the first design, ran a 64 MiB all_reduce 2.3x slower: libnbc's algorithms.)
//
// float16 and bfloat16 reductions convert to float32 in scratch memory, reduce in float32 and
// round once at the end (the rounding of one float32 sum, not one per hop of the algorithm).
// MPI counts are `int`: all_reduce and broadcast are split into pieces of at most 2^30 elements;
// the block collectives reject blocks above INT_MAX elements.
//
//===----------------------------------------------------------------------------------------===//
#include "comm/CommBackend.h"
#include "kernels/cpu/Half.h"

#include <mpi.h>

#include <chrono>
#include <vector>
#include <condition_variable>
#include <mutex>
#include <climits>
#include <cstdio>
#include <thread>

#include <unistd.h>

namespace colossal::runtime {

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

llvm::Error mpiError(int code, llvm::StringRef what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return fail(what + ": MPI error " + llvm::Twine(code) + (len ? ": " + std::string(text, len) : ""));
}

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
  case DType::F32: return MPI_FLOAT;
  case DType::F64: return MPI_DOUBLE;
  case DType::F16: case DType::BF16: case DType::U16: return MPI_UINT16_T;
  case DType::I64: return MPI_INT64_T;
  case DType::I32: return MPI_INT32_T;
  case DType::I16: return MPI_INT16_T;
  case DType::I8: return MPI_INT8_T;
  case DType::U8: case DType::Bool: return MPI_UINT8_T;
  case DType::U32: return MPI_UINT32_T;
  case DType::U64: return MPI_UINT64_T;
  default: return MPI_BYTE;
  }
}

MPI_Op mpiOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return MPI_SUM;
  case ReduceOp::Max: return MPI_MAX;
  case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

bool isHalf(DType d) { return d == DType::F16 || d == DType::BF16; }

void halfToF32(const void *src, float *dst, int64_t n, DType d) {
  const uint16_t *s = static_cast<const uint16_t *>(src);
  if (d == DType::BF16) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) dst[i] = cpu::bfloat16ToFloat(s[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) dst[i] = cpu::halfToFloat(s[i]);
  }
}

void f32ToHalf(const float *src, void *dst, int64_t n, DType d) {
  uint16_t *o = static_cast<uint16_t *>(dst);
  if (d == DType::BF16) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) o[i] = cpu::floatToBfloat16(src[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) o[i] = cpu::floatToHalf(src[i]);
  }
}

/// Ends the process when a blocking MPI call outlives its deadline. One thread per process, started
/// on first use and never destroyed (it may outlive main); only the executor's thread arms it.
class Watchdog {
public:
  static Watchdog &instance() {
    static Watchdog *w = new Watchdog();
    return *w;
  }
  /// `what` (a string literal) and `group` must stay valid until disarm().
  void arm(const CommShared &shared, const char *what, const std::string &group) {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = true;
    ++generation_;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(shared.timeoutSeconds));
    shared_ = &shared;
    what_ = what;
    group_ = &group;
    wake_.notify_one();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

private:
  using Clock = std::chrono::steady_clock;
  Watchdog() { std::thread([this] { loop(); }).detach(); }
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return armed_; });
      uint64_t generation = generation_;
      Clock::time_point deadline = deadline_;
      wake_.wait_until(lock, deadline, [&] { return !armed_ || generation_ != generation; });
      if (armed_ && generation_ == generation && Clock::now() >= deadline) expire();
    }
  }
  [[noreturn]] void expire() {
    char line[512];  // one write: mpirun's messages must not split the line
    int n = std::snprintf(line, sizeof line, "error: rank %d: %s on %s did not complete within %g s\n",
                          shared_->worldRank, what_, group_->c_str(), shared_->timeoutSeconds);
    if (n > 0 && write(STDERR_FILENO, line, std::min<size_t>(n, sizeof line - 1)) < 0) n = 0;
    _exit(1);  // not MPI_Abort: this thread may not call MPI (MPI_THREAD_SERIALIZED); mpirun ends the rest
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool armed_ = false;
  uint64_t generation_ = 0;
  Clock::time_point deadline_;
  const CommShared *shared_ = nullptr;
  const char *what_ = "";
  const std::string *group_ = nullptr;
};

/// Runs the blocking MPI call `call` (returns an MPI status) under the watchdog.
template <typename Call>
llvm::Error watched(const CommShared &shared, const char *what, const std::string &group, Call &&call) {
  Watchdog &w = Watchdog::instance();
  w.arm(shared, what, group);
  int rc = call();
  w.disarm();
  if (rc != MPI_SUCCESS) return mpiError(rc, (llvm::Twine(what) + " on " + group).str());
  return llvm::Error::success();
}

llvm::Error checkCount(int64_t count, llvm::StringRef what) {
  if (count > INT_MAX)
    return fail(what + ": " + llvm::Twine(count) + " elements per rank is above MPI's limit of " +
                llvm::Twine(INT_MAX));
  return llvm::Error::success();
}

/// Largest piece of an all_reduce / broadcast.
constexpr int64_t kPiece = int64_t(1) << 30;

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, std::string axes, const CommShared &shared)
      : Communicator(rank, size, std::move(axes), shared), comm_(comm), label_(describe()) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

protected:
  /// Runs a blocking MPI call under the watchdog.
  template <typename Call> llvm::Error run(const char *what, Call &&call) {
    return watched(shared_, what, label_, call);
  }

  llvm::Error allReduceImpl(const void *in, void *out, int64_t count, DType dtype, ReduceOp op) override {
    const void *src = in;
    void *dst = out;
    MPI_Datatype type = mpiType(dtype);
    size_t esz = dtypeSize(dtype);
    float *tmp = nullptr;
    if (isHalf(dtype)) {
      tmp = static_cast<float *>(scratch(1, count * sizeof(float)));
      halfToF32(in, tmp, count, dtype);
      src = dst = tmp;
      type = MPI_FLOAT;
      esz = sizeof(float);
    }
    for (int64_t off = 0; off < count; off += kPiece) {
      int n = static_cast<int>(std::min(kPiece, count - off));
      const void *s = src == dst ? MPI_IN_PLACE : static_cast<const char *>(src) + off * esz;
      void *d = static_cast<char *>(dst) + off * esz;
      if (llvm::Error e = run("all_reduce", [&] {
            return MPI_Allreduce(s, d, n, type, mpiOp(op), comm_);
          }))
        return e;
    }
    if (tmp) f32ToHalf(tmp, out, count, dtype);
    return llvm::Error::success();
  }

  llvm::Error allGatherImpl(const void *in, void *out, int64_t count, DType dtype) override {
    if (llvm::Error e = checkCount(count, "all_gather")) return e;
    MPI_Datatype type = mpiType(dtype);
    return run("all_gather", [&] {
      return MPI_Allgather(in, static_cast<int>(count), type, out, static_cast<int>(count), type, comm_);
    });
  }

  llvm::Error reduceScatterImpl(const void *in, void *out, int64_t count, DType dtype, ReduceOp op) override {
    if (llvm::Error e = checkCount(count, "reduce_scatter")) return e;
    if (!isHalf(dtype))
      return run("reduce_scatter", [&] {
        return MPI_Reduce_scatter_block(in, out, static_cast<int>(count), mpiType(dtype), mpiOp(op), comm_);
      });
    float *all = static_cast<float *>(scratch(1, size() * count * sizeof(float)));
    float *mine = static_cast<float *>(scratch(2, count * sizeof(float)));
    halfToF32(in, all, size() * count, dtype);
    if (llvm::Error e = run("reduce_scatter", [&] {
          return MPI_Reduce_scatter_block(all, mine, static_cast<int>(count), MPI_FLOAT, mpiOp(op), comm_);
        }))
      return e;
    f32ToHalf(mine, out, count, dtype);
    return llvm::Error::success();
  }

  llvm::Error allToAllImpl(const void *in, void *out, int64_t count, DType dtype) override {
    if (llvm::Error e = checkCount(count, "all_to_all")) return e;
    MPI_Datatype type = mpiType(dtype);
    return run("all_to_all", [&] {
      return MPI_Alltoall(in, static_cast<int>(count), type, out, static_cast<int>(count), type, comm_);
    });
  }

  llvm::Error broadcastImpl(void *buf, int64_t count, DType dtype, int root) override {
    MPI_Datatype type = mpiType(dtype);
    size_t esz = dtypeSize(dtype);
    for (int64_t off = 0; off < count; off += kPiece) {
      int n = static_cast<int>(std::min(kPiece, count - off));
      void *p = static_cast<char *>(buf) + off * esz;
      if (llvm::Error e = run("broadcast", [&] { return MPI_Bcast(p, n, type, root, comm_); }))
        return e;
    }
    return llvm::Error::success();
  }

  llvm::Error sendImpl(const void *data, int64_t count, DType dtype, int peer, int tag) override {
    if (llvm::Error e = checkCount(count, "send")) return e;
    return run("send", [&] {
      return MPI_Send(data, static_cast<int>(count), mpiType(dtype), peer, tag, comm_);
    });
  }

  llvm::Error recvImpl(void *data, int64_t count, DType dtype, int peer, int tag) override {
    if (llvm::Error e = checkCount(count, "recv")) return e;
    return run("recv", [&] {
      return MPI_Recv(data, static_cast<int>(count), mpiType(dtype), peer, tag, comm_, MPI_STATUS_IGNORE);
    });
  }

  llvm::Error isendImpl(const void *data, int64_t count, DType dtype, int peer, int tag) override {
    if (llvm::Error e = checkCount(count, "send")) return e;
    MPI_Request request;
    if (llvm::Error e = run("send", [&] {
          return MPI_Isend(data, static_cast<int>(count), mpiType(dtype), peer, tag, comm_, &request);
        }))
      return e;
    pending_.push_back(request);
    return llvm::Error::success();
  }

  llvm::Error waitSendsImpl() override {
    if (pending_.empty()) return llvm::Error::success();
    llvm::Error e = run("send", [&] {
      return MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    });
    pending_.clear();
    return e;
  }

  llvm::Error barrierImpl() override {
    return run("barrier", [&] { return MPI_Barrier(comm_); });
  }

private:
  MPI_Comm comm_;
  std::vector<MPI_Request> pending_;  // isend()s not yet waited for
  std::string label_;  // describe(), for the watchdog's message
};

class MpiBackend final : public CommContext::Backend {
public:
  static llvm::Expected<std::unique_ptr<MpiBackend>> start() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    std::unique_ptr<MpiBackend> b(new MpiBackend());
    b->ownsMpi_ = !initialized;  // a host program that started MPI also ends it
    if (!initialized) {
      int provided = 0;
      // Serialized: the serving engine runs its steps (and their collectives) on its own thread.
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return fail("MPI_Init failed");
      if (provided < MPI_THREAD_SERIALIZED)
        return fail("MPI_Init_thread: this MPI library gives no MPI_THREAD_SERIALIZED");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &b->size_);
    return b;
  }
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (ownsMpi_ && !finalized) MPI_Finalize();
  }
  int worldRank() const override { return rank_; }
  int worldSize() const override { return size_; }

  std::unique_ptr<Communicator> world(const CommShared &shared) override {
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    return std::make_unique<MpiCommunicator>(dup, rank_, size_, "world", shared);
  }

  llvm::Expected<std::unique_ptr<Communicator>> split(int64_t color, int64_t key, std::string axes,
                                                      const CommShared &shared) override {
    MPI_Comm c = MPI_COMM_NULL;
    int rc = MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(color), static_cast<int>(key), &c);
    if (rc != MPI_SUCCESS) return mpiError(rc, "creating the group of " + axes);
    int r = 0, n = 0;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    return std::make_unique<MpiCommunicator>(c, r, n, std::move(axes), shared);
  }

  llvm::Error barrier(const CommShared &shared, llvm::StringRef what) override {
    static const std::string allRanks = "all ranks";
    if (llvm::Error e = watched(shared, "barrier", allRanks, [&] { return MPI_Barrier(MPI_COMM_WORLD); }))
      return fail(what + ": " + llvm::toString(std::move(e)));
    return llvm::Error::success();
  }

  [[noreturn]] void abort(int status) override {
    MPI_Abort(MPI_COMM_WORLD, status);
    _exit(status);
  }

private:
  MpiBackend() = default;
  int rank_ = 0, size_ = 1;
  bool ownsMpi_ = true;
};

}  // namespace

llvm::Expected<std::unique_ptr<CommContext::Backend>> createMpiBackend() {
  auto b = MpiBackend::start();
  if (!b) return b.takeError();
  return std::unique_ptr<CommContext::Backend>(std::move(*b));
}

}  // namespace colossal::runtime

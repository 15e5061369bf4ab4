//===- FileTier.cpp - the CPU's slower tier: a file mapped shared --------------------------===//
#include "colossal/runtime/Tier.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace colossal::runtime {

Tier::~Tier() = default;

namespace {

/// MADV_POPULATE_WRITE (Linux 5.14): maps the range's pages writable in one call, reading what
/// is not cached, so the kernels that use them take no page faults.
constexpr int kPopulateWrite = 23;

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

/// Prefetches run on one I/O thread in the order they were asked for, so the thread that runs the
/// kernels never waits for them: a prefetch maps the chunk's pages ahead of use (a late one costs
/// that thread the page faults). Evictions run at once on the caller's thread. Either way every
/// access reads the file's current contents, so no order of moves and accesses changes a value.
class FileTier final : public Tier {
public:
  FileTier(std::string path, int fd, void *base, uint64_t bytes)
      : path_(std::move(path)), fd_(fd), base_(base), bytes_(bytes), worker_([this] { work(); }) {}
  ~FileTier() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    worker_.join();
    if (base_ && bytes_) munmap(base_, bytes_);
    if (fd_ >= 0) close(fd_); // the file was unlinked when mapped: this frees it
  }
  void *base() const override { return base_; }
  uint64_t bytes() const override { return bytes_; }
  void prefetch(uint64_t offset, uint64_t bytes) override {
    auto [at, n] = pages(offset, bytes);
    if (!n) return;
    prefetched_ += n;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({at, n});
    }
    wake_.notify_one();
  }
  /// Synchronous, so fast memory holds no more than the schedule says: a pending prefetch of an
  /// overlapping range is dropped, one in progress is waited for.
  void evict(uint64_t offset, uint64_t bytes) override {
    auto [at, n] = pages(offset, bytes);
    if (!n) return;
    evicted_ += n;
    const auto t0 = std::chrono::steady_clock::now();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto overlaps = [&](const Move &m) { return m.at < at + n && at < m.at + m.n; };
      queue_.erase(std::remove_if(queue_.begin(), queue_.end(), overlaps), queue_.end());
      idle_.wait(lock, [&] { return !busy_ || !overlaps(current_); });
    }
    madvise(static_cast<char *>(base_) + at, n, MADV_DONTNEED);
    evictSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double prefetchSeconds() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return prefetchSeconds_;
  }
  void drain() override {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }

private:
  struct Move {
    uint64_t at, n;
  };
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return; // stopping, nothing left
      current_ = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      char *p = static_cast<char *>(base_) + current_.at;
      const auto t0 = std::chrono::steady_clock::now();
      if (madvise(p, current_.n, kPopulateWrite) != 0)
        madvise(p, current_.n, MADV_WILLNEED); // kernels before 5.14: read-ahead only
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lock.lock();
      prefetchSeconds_ += dt;
      busy_ = false;
      idle_.notify_all();
    }
  }
  std::pair<uint64_t, uint64_t> pages(uint64_t offset, uint64_t bytes) const {
    static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    uint64_t begin = offset / page * page;
    uint64_t end = std::min(bytes_, (offset + bytes + page - 1) / page * page);
    return {begin, end > begin ? end - begin : 0};
  }
  std::string path_;
  int fd_ = -1;
  void *base_ = nullptr;
  uint64_t bytes_ = 0;
  mutable std::mutex mutex_;
  double prefetchSeconds_ = 0;
  std::condition_variable wake_, idle_;
  bool busy_ = false;
  Move current_{0, 0}; // the prefetch in progress while busy_
  std::deque<Move> queue_;
  bool stop_ = false;
  std::thread worker_; // last: starts after everything it reads
};

} // namespace

llvm::Expected<std::unique_ptr<Tier>> createFileTier(llvm::StringRef dir, int64_t rank, uint64_t bytes) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return fail(dir + ": cannot create the offload folder: " + ec.message());
  // A fresh, unique file (never one that exists: another run's tier, or a link planted there),
  // space reserved up front (a full disk is an error now, not a SIGBUS mid-run), unlinked once
  // mapped: the mapping keeps it alive and the OS removes it however the run ends.
  llvm::SmallString<256> path;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    path = dir;
    llvm::sys::path::append(path, "rank-" + std::to_string(rank) + "." + std::to_string(getpid()) + "." +
                                      std::to_string(attempt) + ".bin");
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return fail(path + ": cannot create the offload file: " + std::strerror(errno));
  auto abandon = [&](const llvm::Twine &what, int err) {
    close(fd);
    llvm::sys::fs::remove(path);
    return fail(path + ": " + what + ": " + std::strerror(err));
  };
  if (bytes) {
    if (int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)))
      return abandon("cannot reserve " + llvm::Twine(bytes) + " bytes for the offload tier" +
                         (err == ENOSPC ? " (not enough space on its disk; set memory.offload_dir to "
                                          "a folder with room)"
                                        : ""),
                     err);
  }
  void *base = nullptr;
  if (bytes) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return abandon("cannot map the offload file (" + llvm::Twine(bytes) + " bytes)", errno);
  }
  llvm::sys::fs::remove(path);
  return std::make_unique<FileTier>(path.str().str(), fd, base, bytes);
}

} // namespace colossal::runtime

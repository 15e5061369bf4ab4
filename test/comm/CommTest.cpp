//===- CommTest.cpp - Mesh layout, collective validation, one-rank runs, multi-rank CLI -------===//
//
// No MPI in this process: the rank layout and axis groups against a brute-force enumeration, the
// plan checks of collective instructions, one-rank plans (no MPI started), and colossal-run as a
// launcher: `--nproc 2` end to end (outputs against values computed here), a world size that is not
// the mesh size, a stalled rank (the watchdog's message and abort), and a rank killed with SIGKILL
// mid-collective (the job ends within 30 s, names the rank, and leaves no process behind).
//
//===----------------------------------------------------------------------------------------===//
#include "CommPlans.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Npy.h"
#include "colossal/runtime/Plan.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

#define ASSERT_OK(expr)                                                                            \
  do {                                                                                             \
    if (llvm::Error err_ = (expr)) FAIL() << llvm::toString(std::move(err_));                      \
  } while (0)

std::string errorOf(llvm::Error e) { return e ? llvm::toString(std::move(e)) : std::string(); }

Mesh makeMesh(std::vector<MeshAxis> axes) {
  llvm::Expected<Mesh> m = Mesh::create(std::move(axes));
  EXPECT_TRUE(static_cast<bool>(m));
  return m ? *m : Mesh();
}

//===----------------------------------------------------------------------------------------===//
// Rank layout and groups
//===----------------------------------------------------------------------------------------===//

TEST(MeshTest, DpTpLayout) {
  Mesh m = makeMesh({{"dp", 2}, {"tp", 2}});
  EXPECT_EQ(m.size(), 4);
  EXPECT_EQ(m.toString(), "dp=2 x tp=2");
  // rank = dp * 2 + tp: tp varies fastest.
  EXPECT_EQ(m.coords(1), (llvm::SmallVector<int64_t, 4>{0, 1}));
  EXPECT_EQ(m.coords(2), (llvm::SmallVector<int64_t, 4>{1, 0}));
  auto tp = *m.parseAxes("tp");
  auto dp = *m.parseAxes("dp");
  EXPECT_EQ(m.groupRanks(0, tp), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(m.groupRanks(3, tp), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(m.groupRanks(0, dp), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(m.groupRanks(3, dp), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(m.groupRanks(2, *m.parseAxes("dp,tp")), (std::vector<int64_t>{0, 1, 2, 3}));
  // Group ranks follow the order the axes are named in.
  EXPECT_EQ(m.groupRanks(2, *m.parseAxes("tp, dp")), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(m.groupRank(1, *m.parseAxes("tp,dp")), 2);
  EXPECT_EQ(m.groupId(3, tp), 1);
  EXPECT_EQ(m.groupId(3, dp), 1);
  EXPECT_EQ(m.groupId(2, dp), 0);
}

/// Every ordered choice of axes of a 2x3x2 mesh and a 4-axis mesh against enumeration.
TEST(MeshTest, GroupsMatchEnumeration) {
  for (std::vector<MeshAxis> axes : {std::vector<MeshAxis>{{"a", 2}, {"b", 3}, {"c", 2}},
                                     std::vector<MeshAxis>{{"pp", 2}, {"dp", 1}, {"x", 2}, {"y", 3}}}) {
    Mesh m = makeMesh(axes);
    const int n = static_cast<int>(axes.size());
    int64_t size = 1;
    for (const MeshAxis &a : axes) size *= a.size;
    ASSERT_EQ(m.size(), size);
    // Naive coordinates: mixed radix, last axis fastest.
    auto naiveCoords = [&](int64_t r) {
      std::vector<int64_t> c(n);
      for (int i = n - 1; i >= 0; --i) {
        c[i] = r % axes[i].size;
        r /= axes[i].size;
      }
      return c;
    };
    for (int64_t r = 0; r < size; ++r) {
      auto c = naiveCoords(r);
      llvm::SmallVector<int64_t, 4> got = m.coords(r);
      ASSERT_EQ(std::vector<int64_t>(got.begin(), got.end()), c);
      ASSERT_EQ(m.rankOf(c), r);
    }
    // Ordered subsets: every permutation of every non-empty subset.
    std::vector<std::vector<int>> lists;
    for (int mask = 1; mask < (1 << n); ++mask) {
      std::vector<int> sub;
      for (int i = 0; i < n; ++i)
        if (mask & (1 << i)) sub.push_back(i);
      do lists.push_back(sub);
      while (std::next_permutation(sub.begin(), sub.end()));
    }
    for (const std::vector<int> &list : lists) {
      std::string names;
      for (int a : list) names += (names.empty() ? "" : ",") + axes[a].name;
      auto parsed = m.parseAxes(names);
      ASSERT_TRUE(static_cast<bool>(parsed)) << names;
      ASSERT_EQ(std::vector<int>(parsed->begin(), parsed->end()), list);
      std::map<int64_t, std::set<int64_t>> byId;
      for (int64_t r = 0; r < size; ++r) {
        auto c = naiveCoords(r);
        // Expected members: equal coordinates outside `list`, ordered row-major over `list`.
        std::vector<std::pair<int64_t, int64_t>> members;  // (group index, rank)
        for (int64_t q = 0; q < size; ++q) {
          auto d = naiveCoords(q);
          bool same = true;
          for (int i = 0; i < n; ++i)
            if (std::find(list.begin(), list.end(), i) == list.end() && d[i] != c[i]) same = false;
          if (!same) continue;
          int64_t g = 0;
          for (int a : list) g = g * axes[a].size + d[a];
          members.push_back({g, q});
        }
        std::sort(members.begin(), members.end());
        std::vector<int64_t> want;
        for (size_t k = 0; k < members.size(); ++k) {
          ASSERT_EQ(members[k].first, static_cast<int64_t>(k));
          want.push_back(members[k].second);
        }
        ASSERT_EQ(m.groupRanks(r, *parsed), want) << names << " rank " << r;
        ASSERT_EQ(m.groupSize(*parsed), static_cast<int64_t>(want.size()));
        ASSERT_EQ(want[m.groupRank(r, *parsed)], r);
        int64_t id = m.groupId(r, *parsed);
        ASSERT_GE(id, 0);
        ASSERT_LT(id, size / m.groupSize(*parsed));
        byId[id].insert(r);
      }
      // Ranks share a group id exactly when they share a group.
      for (const auto &[id, ranks] : byId) {
        std::vector<int64_t> g = m.groupRanks(*ranks.begin(), *parsed);
        ASSERT_EQ(std::set<int64_t>(g.begin(), g.end()), ranks) << names;
      }
    }
  }
}

TEST(MeshTest, Errors) {
  Mesh m = makeMesh({{"dp", 2}, {"tp", 2}});
  EXPECT_EQ(errorOf(m.parseAxes("sp").takeError()), "unknown mesh axis 'sp' (the mesh's axes: dp, tp)");
  EXPECT_EQ(errorOf(m.parseAxes("tp,tp").takeError()), "mesh axis 'tp' is named twice in 'tp,tp'");
  EXPECT_EQ(errorOf(m.parseAxes("tp,").takeError()), "empty axis name in 'tp,'");
  EXPECT_EQ(errorOf(Mesh().parseAxes("tp").takeError()),
            "unknown mesh axis 'tp' (the mesh's axes: none: the mesh has one rank)");
  EXPECT_EQ(errorOf(Mesh::create({{"dp", 2}, {"dp", 2}}).takeError()), "mesh axis 'dp' is listed twice");
  EXPECT_EQ(errorOf(Mesh::create({{"tp", 0}}).takeError()), "mesh axis 'tp' has size 0 (must be >= 1)");
  EXPECT_EQ(errorOf(Mesh::create({{"t p", 2}}).takeError()),
            "mesh axis 0: invalid name 't p' (expected [A-Za-z_][A-Za-z0-9_]*)");
  EXPECT_EQ(errorOf(Mesh::create({{"a", 1 << 16}, {"b", 1 << 16}}).takeError()),
            "the mesh has more than 1073741824 ranks");
  EXPECT_EQ(Mesh().size(), 1);
  EXPECT_EQ(Mesh().toString(), "one rank");
}

TEST(MeshTest, FromPlanKeepsOrder) {
  plan::Plan p = makeCollectivePlan({{"tp", 2}, {"dp", 3}}, DType::F32, {2}, {});
  llvm::Expected<Mesh> m = Mesh::fromPlan(p, "m.cplan");
  ASSERT_TRUE(static_cast<bool>(m));
  EXPECT_EQ(m->toString(), "tp=2 x dp=3");
  EXPECT_EQ(m->coords(1), (llvm::SmallVector<int64_t, 4>{0, 1}));  // dp fastest here
  p.mutable_mesh(1)->set_size(-1);
  EXPECT_EQ(errorOf(Mesh::fromPlan(p, "m.cplan").takeError()),
            "m.cplan: mesh axis 'dp' has size -1 (must be >= 1)");
}

//===----------------------------------------------------------------------------------------===//
// Plan validation of collective instructions
//===----------------------------------------------------------------------------------------===//

std::string validate(const plan::Plan &p) {
  return errorOf(validatePlan(p, "c.cplan", KernelRegistry::cpu()));
}

TEST(CollectiveValidation, AcceptsWellFormed) {
  std::vector<CollectiveStep> steps = {
      {"all_reduce", "x", "ar", {4, 6}, {{"axes", "tp"}, {"reduction", "max"}}, {}},
      {"all_gather", "x", "ag", {4, 24}, {{"axes", "dp,tp"}}, {{"dim", 1}}},
      {"reduce_scatter", "x", "rs", {2, 6}, {{"axes", "dp"}}, {{"dim", 0}}},
      {"all_to_all", "x", "a2a", {8, 3}, {{"axes", "tp"}}, {{"split_dim", 1}, {"concat_dim", 0}}},
      {"broadcast", "x", "bc", {4, 6}, {{"axes", "tp,dp"}}, {{"root", 3}}},
  };
  EXPECT_EQ(validate(makeCollectivePlan({{"dp", 2}, {"tp", 2}}, DType::BF16, {4, 6}, steps)), "");
}

TEST(CollectiveValidation, Errors) {
  std::vector<MeshAxis> mesh = {{"dp", 2}, {"tp", 2}};
  auto one = [&](CollectiveStep s, DType dt = DType::F32) {
    return validate(makeCollectivePlan(mesh, dt, {4, 6}, {s}));
  };
  EXPECT_EQ(one({"all_reduce", "x", "y", {4, 6}, {{"axes", "sp"}}, {}}),
            "c.cplan: program 'forward': instruction 0 (all_reduce at /y): unknown mesh axis 'sp' "
            "(the mesh's axes: dp, tp)");
  EXPECT_EQ(one({"all_reduce", "x", "y", {4, 6}, {}, {}}),
            "c.cplan: program 'forward': instruction 0 (all_reduce at /y): missing attribute 'axes' "
            "(the mesh axes to communicate over)");
  EXPECT_EQ(one({"all_reduce", "x", "y", {4, 6}, {{"axes", "tp"}, {"reduction", "mean"}}, {}}),
            "c.cplan: program 'forward': instruction 0 (all_reduce at /y): unknown reduction 'mean' "
            "(sum, max, min)");
  EXPECT_EQ(one({"all_reduce", "x", "y", {4, 6}, {{"axes", "tp"}}, {}}, DType::Bool),
            "c.cplan: program 'forward': instruction 0 (all_reduce at /y): cannot reduce bool");
  EXPECT_EQ(one({"all_gather", "x", "y", {4, 18}, {{"axes", "tp"}}, {{"dim", 1}}}),
            "c.cplan: program 'forward': instruction 0 (all_gather at /y): input [4, 6] and output "
            "[4, 18] do not fit a group of 2 ranks along dim 1 (the output must be 2x the input)");
  EXPECT_EQ(one({"all_gather", "x", "y", {4, 13}, {{"axes", "tp"}}, {{"dim", 1}}}),
            "c.cplan: program 'forward': instruction 0 (all_gather at /y): input [4, 6] and output "
            "[4, 13] do not fit any group size along dim 1");
  EXPECT_EQ(one({"all_gather", "x", "y", {4, 12}, {{"axes", "tp"}}, {{"dim", 2}}}),
            "c.cplan: program 'forward': instruction 0 (all_gather at /y): 'dim' 2 is outside the "
            "input's dims [0, 2)");
  EXPECT_EQ(one({"reduce_scatter", "x", "y", {4, 2}, {{"axes", "dp,tp"}}, {{"dim", 1}}}),
            "c.cplan: program 'forward': instruction 0 (reduce_scatter at /y): input [4, 6] and "
            "output [4, 2] do not fit a group of 4 ranks along dim 1 (the input must be 4x the output)");
  EXPECT_EQ(one({"all_to_all", "x", "y", {4, 6}, {{"axes", "tp"}}, {{"split_dim", 1}, {"concat_dim", 0}}}),
            "c.cplan: program 'forward': instruction 0 (all_to_all at /y): input [4, 6] and output "
            "[4, 6] do not fit a group of 2 ranks (expected output [8, 3])");
  EXPECT_EQ(one({"broadcast", "x", "y", {4, 6}, {{"axes", "tp"}}, {{"root", 2}}}),
            "c.cplan: program 'forward': instruction 0 (broadcast at /y): root 2 is outside the "
            "group of 2 ranks");
  EXPECT_EQ(one({"all_reduce", "x", "y", {4, 6}, {{"axes", "tp"}}, {{"dim", 0}}}),
            "c.cplan: program 'forward': instruction 0 (all_reduce at /y): unknown attribute 'dim' "
            "for op 'all_reduce'");
  plan::Plan p = makeCollectivePlan({{"tp", 2}, {"tp", 2}}, DType::F32, {2}, {});
  EXPECT_EQ(validate(p), "c.cplan: mesh axis 'tp' is listed twice");
}

//===----------------------------------------------------------------------------------------===//
// One rank: no MPI
//===----------------------------------------------------------------------------------------===//

class TempDir : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-comm", dir)); }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }
  std::string path(const std::string &name) const {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  llvm::SmallString<128> dir;
};

using OneRank = TempDir;

TEST_F(OneRank, CollectivesAreCopiesWithoutMpi) {
  ASSERT_FALSE(launchedByMpirun());
  std::vector<CollectiveStep> steps = {
      {"all_reduce", "x", "ar", {2, 3}, {{"axes", "tp"}}, {}},
      {"all_gather", "x", "ag", {2, 3}, {{"axes", "tp"}}, {{"dim", 1}}},
      {"reduce_scatter", "x", "rs", {2, 3}, {{"axes", "tp"}}, {{"dim", 0}}},
      {"all_to_all", "x", "a2a", {2, 3}, {{"axes", "tp"}}, {{"split_dim", 1}, {"concat_dim", 0}}},
      {"broadcast", "x", "bc", {2, 3}, {{"axes", "tp"}}, {}},
  };
  ASSERT_TRUE(writePlanFile(makeCollectivePlan({{"tp", 1}}, DType::F32, {2, 3}, steps), path("p.cplan")));
  auto loaded = loadPlan(path("p.cplan"), KernelRegistry::cpu());
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  auto mesh = Mesh::fromPlan((*loaded)->plan, path("p.cplan"));
  ASSERT_TRUE(static_cast<bool>(mesh));
  auto comm = CommContext::create(*mesh, CommOptions());
  ASSERT_TRUE(static_cast<bool>(comm)) << llvm::toString(comm.takeError());
  EXPECT_FALSE((*comm)->usesMpi());
  EXPECT_EQ((*comm)->worldSize(), 1);
  std::unique_ptr<Device> device = createCpuDevice();
  ExecutorOptions options;
  options.comm = comm->get();
  auto ex = Executor::create(**loaded, KernelRegistry::cpu(), *device, "forward", options);
  ASSERT_TRUE(static_cast<bool>(ex));
  std::vector<float> x = {1, -2, 3.5, 4, 5, -6};
  ASSERT_OK((*ex)->setInput("x", DType::F32, {2, 3}, x.data()));
  ASSERT_OK((*ex)->run());
  for (const char *name : {"ar", "ag", "rs", "a2a", "bc"}) {
    auto t = (*ex)->output(name);
    ASSERT_TRUE(static_cast<bool>(t));
    EXPECT_EQ(std::vector<float>(t->as<float>(), t->as<float>() + 6), x) << name;
  }
  // Without a CommContext a collective is an error, not a crash.
  auto bare = Executor::create(**loaded, KernelRegistry::cpu(), *device, "forward");
  ASSERT_TRUE(static_cast<bool>(bare));
  ASSERT_OK((*bare)->setInput("x", DType::F32, {2, 3}, x.data()));
  EXPECT_EQ(errorOf((*bare)->run()),
            "instruction 0 (all_reduce at /ar): collective instruction without a communicator (the "
            "executor was created without a CommContext)");
}

/// shard_slice and axis_index on one rank (axes of size 1, local context, no MPI), for every
/// dtype: the slice of a one-rank group is the whole tensor (byte for byte), the index is 0.
TEST_F(OneRank, ShardSliceAndAxisIndexWithoutMpi) {
  ASSERT_FALSE(launchedByMpirun());
  for (int v = 1; v <= kLastDType; ++v) {
    const DType dt = static_cast<DType>(v);
    std::vector<CollectiveStep> steps = {
        {"shard_slice", "x", "s0", {2, 3, 4}, {{"axes", "tp"}}, {{"dim", 0}}},
        {"shard_slice", "x", "s2", {2, 3, 4}, {{"axes", "dp,tp"}}, {{"dim", 2}}},
        {"axis_index", "", "idx", {}, {{"axes", "tp,dp"}}, {}, DType::I64},
    };
    std::string file = path("s" + std::to_string(v) + ".cplan");
    ASSERT_TRUE(writePlanFile(makeCollectivePlan({{"dp", 1}, {"tp", 1}}, dt, {2, 3, 4}, steps), file));
    auto loaded = loadPlan(file, KernelRegistry::cpu());
    ASSERT_TRUE(static_cast<bool>(loaded)) << dtypeName(dt).str() << ": " << llvm::toString(loaded.takeError());
    auto comm = CommContext::create(makeMesh({{"dp", 1}, {"tp", 1}}), CommOptions());
    ASSERT_TRUE(static_cast<bool>(comm)) << llvm::toString(comm.takeError());
    ASSERT_OK((*comm)->prepare((*loaded)->plan.programs(0)));
    std::unique_ptr<Device> device = createCpuDevice();
    ExecutorOptions options;
    options.comm = comm->get();
    auto ex = Executor::create(**loaded, KernelRegistry::cpu(), *device, "forward", options);
    ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
    std::vector<uint8_t> x(24 * dtypeSize(dt));
    for (size_t i = 0; i < x.size(); ++i) x[i] = dt == DType::Bool ? i % 3 == 0 : static_cast<uint8_t>(i * 37 + 11);
    ASSERT_OK((*ex)->setInput("x", dt, {2, 3, 4}, x.data()));
    ASSERT_OK((*ex)->run());
    for (const char *name : {"s0", "s2"}) {
      auto t = (*ex)->output(name);
      ASSERT_TRUE(static_cast<bool>(t));
      const uint8_t *p = static_cast<const uint8_t *>(t->data);
      EXPECT_EQ(std::vector<uint8_t>(p, p + t->bytes()), x) << name << " " << dtypeName(dt).str();
    }
    auto idx = (*ex)->output("idx");
    ASSERT_TRUE(static_cast<bool>(idx));
    EXPECT_EQ(idx->dtype, DType::I64);
    EXPECT_EQ(idx->rank(), 0);
    EXPECT_EQ(*idx->as<int64_t>(), 0);
  }
}

TEST(CollectiveValidation, ShardSliceAndAxisIndex) {
  std::vector<MeshAxis> mesh = {{"dp", 2}, {"tp", 3}};
  auto one = [&](CollectiveStep s) { return validate(makeCollectivePlan(mesh, DType::F32, {4, 6}, {s})); };
  EXPECT_EQ(one({"shard_slice", "x", "y", {4, 2}, {{"axes", "tp"}}, {{"dim", 1}}}), "");
  EXPECT_EQ(one({"shard_slice", "x", "y", {4, 1}, {{"axes", "tp,dp"}}, {{"dim", 1}}}), "");
  EXPECT_EQ(one({"axis_index", "", "i", {}, {{"axes", "dp,tp"}}, {}, DType::I64}), "");
  EXPECT_EQ(one({"shard_slice", "x", "y", {4, 3}, {{"axes", "tp"}}, {{"dim", 1}}}),
            "c.cplan: program 'forward': instruction 0 (shard_slice at /y): input [4, 6] and output "
            "[4, 3] do not fit a group of 3 ranks along dim 1 (the input must be 3x the output)");
  EXPECT_EQ(one({"shard_slice", "x", "y", {2, 6}, {{"axes", "tp"}}, {{"dim", 0}}}),
            "c.cplan: program 'forward': instruction 0 (shard_slice at /y): input [4, 6] and output "
            "[2, 6] do not fit a group of 3 ranks along dim 0 (the input must be 3x the output)");
  EXPECT_EQ(one({"shard_slice", "x", "y", {4, 2}, {{"axes", "pp"}}, {{"dim", 1}}}),
            "c.cplan: program 'forward': instruction 0 (shard_slice at /y): unknown mesh axis 'pp' "
            "(the mesh's axes: dp, tp)");
  EXPECT_EQ(one({"shard_slice", "x", "y", {4, 2}, {}, {{"dim", 1}}}),
            "c.cplan: program 'forward': instruction 0 (shard_slice at /y): missing attribute 'axes' "
            "(the mesh axes to communicate over)");
  EXPECT_EQ(one({"shard_slice", "x", "y", {4, 2}, {{"axes", "tp"}}, {{"dim", 2}}}),
            "c.cplan: program 'forward': instruction 0 (shard_slice at /y): 'dim' 2 is outside the "
            "input's dims [0, 2)");
  EXPECT_EQ(one({"axis_index", "", "i", {}, {{"axes", "tp,sp"}}, {}, DType::I64}),
            "c.cplan: program 'forward': instruction 0 (axis_index at /i): unknown mesh axis 'sp' "
            "(the mesh's axes: dp, tp)");
  EXPECT_EQ(one({"axis_index", "", "i", {1}, {{"axes", "tp"}}, {}, DType::I64}),
            "c.cplan: program 'forward': instruction 0 (axis_index at /i): output is i64 [1]; it "
            "must be an int64 scalar []");
}

TEST(OneRankContext, MultiRankMeshWithoutLauncher) {
  ASSERT_FALSE(launchedByMpirun());
  auto comm = CommContext::create(makeMesh({{"dp", 2}, {"tp", 2}}), CommOptions());
  EXPECT_EQ(errorOf(comm.takeError()),
            "the plan's mesh (dp=2 x tp=2) has 4 ranks but the job has 1 rank; run it with "
            "'mpirun -np 4 colossal-run ...' or 'colossal-run --nproc 4 ...'");
}

//===----------------------------------------------------------------------------------------===//
// colossal-run on several ranks
//===----------------------------------------------------------------------------------------===//

#if defined(COLOSSAL_RUN_PATH) && defined(COLOSSAL_HAVE_MPI)

/// A child process (colossal-run, which becomes mpirun) with its output in a file.
struct Job {
  pid_t pid = -1;
  std::string marker;  // COLOSSAL_TEST_JOB=<marker> is in the environment of every process of the job
  std::string outPath;
};

Job spawn(const std::vector<std::string> &args, const std::vector<std::string> &env,
          const std::string &outPath) {
  static int counter = 0;
  Job job;
  job.marker = "COLOSSAL_TEST_JOB=" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  job.outPath = outPath;
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    putenv(strdup(job.marker.c_str()));
    for (const std::string &e : env) putenv(strdup(e.c_str()));
    std::vector<char *> argv;
    for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  job.pid = pid;
  return job;
}

/// Waits up to `seconds`; true with the exit status when the process ended.
bool waitExit(pid_t pid, double seconds, int &status) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string readFile(const std::string &path) {
  std::ifstream is(path);
  std::stringstream ss;
  ss << is.rdbuf();
  return ss.str();
}

/// Live processes (not zombies) whose environment holds `entry`, with their environments.
std::map<pid_t, std::vector<std::string>> processesWith(const std::string &entry) {
  std::map<pid_t, std::vector<std::string>> out;
  DIR *d = opendir("/proc");
  if (!d) return out;
  while (dirent *e = readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0 || pid == getpid()) continue;
    std::string stat = readFile("/proc/" + std::string(e->d_name) + "/stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z') continue;
    std::ifstream is("/proc/" + std::string(e->d_name) + "/environ", std::ios::binary);
    std::vector<std::string> vars;
    std::string var;
    bool has = false;
    while (std::getline(is, var, '\0')) {
      has |= var == entry;
      vars.push_back(var);
    }
    if (has) out[pid] = vars;
  }
  closedir(d);
  return out;
}

/// The pid of world rank `rank` of `job` (0 until it exists).
pid_t rankPid(const Job &job, int rank) {
  for (const auto &[pid, vars] : processesWith(job.marker))
    for (const std::string &v : vars)
      if (v == "OMPI_COMM_WORLD_RANK=" + std::to_string(rank)) {
        std::string cmd = readFile("/proc/" + std::to_string(pid) + "/cmdline");
        if (cmd.find("colossal-run") != std::string::npos) return pid;
      }
  return 0;
}

void killAll(const Job &job) {
  for (const auto &[pid, vars] : processesWith(job.marker)) kill(pid, SIGKILL);
}

class ColossalRunParallel : public TempDir {
protected:
  void SetUp() override {
    TempDir::SetUp();
    // x [4, 6]: the same input on both ranks of mesh tp=2.
    for (int i = 0; i < 24; ++i) x.push_back(0.25f * static_cast<float>(i * 7 % 11) - 1.0f);
    ASSERT_FALSE(static_cast<bool>(writeNpy(path("x.npy"), DType::F32, {4, 6}, x.data())));
    std::vector<CollectiveStep> steps = {
        {"all_reduce", "x", "ar", {4, 6}, {{"axes", "tp"}}, {}},
        {"all_gather", "x", "ag", {4, 12}, {{"axes", "tp"}}, {{"dim", 1}}},
        {"reduce_scatter", "x", "rs", {4, 3}, {{"axes", "tp"}}, {{"dim", 1}}},
        {"all_to_all", "x", "a2a", {8, 3}, {{"axes", "tp"}}, {{"split_dim", 1}, {"concat_dim", 0}}},
        {"broadcast", "x", "bc", {4, 6}, {{"axes", "tp"}}, {{"root", 1}}},
    };
    ASSERT_TRUE(writePlanFile(makeCollectivePlan({{"tp", 2}}, DType::F32, {4, 6}, steps), path("tp2.cplan")));
  }
  std::vector<std::string> runArgs(const std::vector<std::string> &extra) {
    std::vector<std::string> a = {COLOSSAL_RUN_PATH, path("tp2.cplan"), "--input", "x=" + path("x.npy"),
                                  "--threads", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::vector<float> x;
};

TEST_F(ColossalRunParallel, NprocEndToEnd) {
  Job job = spawn(runArgs({"--nproc", "2", "--output-dir", path("out")}), {}, path("log"));
  int status = 0;
  ASSERT_TRUE(waitExit(job.pid, 120, status)) << readFile(job.outPath);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << readFile(job.outPath);
  auto read = [&](const char *name) {
    auto a = readNpy(path(std::string("out/") + name + ".npy"));
    EXPECT_TRUE(static_cast<bool>(a)) << name;
    const float *p = a ? static_cast<const float *>(a->data.data()) : nullptr;
    return p ? std::vector<float>(p, p + a->data.size() / 4) : std::vector<float>();
  };
  // Both ranks hold x: the sum is 2x, the gather [x x], rank 0 (the writer) keeps columns 0..2 of
  // the reduce-scatter and receives chunk 0 (columns 0..2) from both ranks in the all-to-all.
  std::vector<float> ar, ag, rs, a2a;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) ar.push_back(2 * x[r * 6 + c]);
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 2; ++k)
      for (int c = 0; c < 6; ++c) ag.push_back(x[r * 6 + c]);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) rs.push_back(2 * x[r * 6 + c]);
  for (int k = 0; k < 2; ++k)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 3; ++c) a2a.push_back(x[r * 6 + c]);
  EXPECT_EQ(read("ar"), ar);
  EXPECT_EQ(read("ag"), ag);
  EXPECT_EQ(read("rs"), rs);
  EXPECT_EQ(read("a2a"), a2a);
  EXPECT_EQ(read("bc"), x);
  EXPECT_TRUE(processesWith(job.marker).empty());
}

TEST_F(ColossalRunParallel, WorldSizeIsNotMeshSize) {
  Job job = spawn(runArgs({"--nproc", "3"}), {}, path("log"));
  int status = 0;
  ASSERT_TRUE(waitExit(job.pid, 120, status)) << readFile(job.outPath);
  std::string out = readFile(job.outPath);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << out;
  // --nproc checks the plan before mpirun starts: one line, nothing launched.
  std::string msg = "error: " + path("tp2.cplan") +
                    ": the plan's mesh (tp=2) has 2 ranks but --nproc asks for 3 ranks; run it with --nproc 2 "
                    "(nothing was started)\n";
  EXPECT_EQ(out, msg);
  EXPECT_TRUE(processesWith(job.marker).empty());

  // Without a launcher: the same check, before MPI starts.
  Job solo = spawn(runArgs({}), {}, path("log1"));
  ASSERT_TRUE(waitExit(solo.pid, 60, status));
  EXPECT_EQ(readFile(solo.outPath),
            "error: " + path("tp2.cplan") +
                ": the plan's mesh (tp=2) has 2 ranks but the job has 1 rank; run it with 'mpirun -np 2 "
                "colossal-run ...' or 'colossal-run --nproc 2 ...'\n");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
}

TEST_F(ColossalRunParallel, StalledRankTimesOut) {
  // Rank 1 sleeps before its first collective; rank 0 waits in the all_reduce until the watchdog.
  auto t0 = std::chrono::steady_clock::now();
  Job job = spawn(runArgs({"--nproc", "2", "--comm-timeout", "2"}),
                  {"COLOSSAL_TEST_STALL_RANK=1", "COLOSSAL_TEST_STALL_SECONDS=600"}, path("log"));
  int status = 0;
  bool ended = waitExit(job.pid, 60, status);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string out = readFile(job.outPath);
  if (!ended) killAll(job);
  ASSERT_TRUE(ended) << out;
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("error: rank 0: all_reduce on axis 'tp' did not complete within 2 s\n"), std::string::npos)
      << out;
  EXPECT_GE(seconds, 2.0);
  EXPECT_LT(seconds, 30.0);
  std::printf("the job ended %.2f s after it started (timeout 2 s)\n", seconds);
  EXPECT_TRUE(processesWith(job.marker).empty()) << "processes left behind";
}

TEST_F(ColossalRunParallel, KilledRankEndsTheJob) {
  // Rank 0 stalls before the all_reduce, so rank 1 is inside it when it is killed.
  Job job = spawn(runArgs({"--nproc", "2"}),
                  {"COLOSSAL_TEST_STALL_RANK=0", "COLOSSAL_TEST_STALL_SECONDS=600"}, path("log"));
  pid_t victim = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (readFile(job.outPath).find("COLOSSAL_TEST_STALL_RANK: sleeping") != std::string::npos &&
        (victim = rankPid(job, 1)))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!victim) killAll(job);
  ASSERT_NE(victim, 0) << readFile(job.outPath);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let rank 1 enter the all_reduce
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  int status = 0;
  bool ended = waitExit(job.pid, 60, status);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string out = readFile(job.outPath);
  if (!ended) killAll(job);
  ASSERT_TRUE(ended) << out;
  EXPECT_LT(seconds, 30.0) << out;
  std::printf("the job ended %.2f s after rank 1 was killed\n", seconds);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("process rank 1 with PID"), std::string::npos) << out;
  EXPECT_NE(out.find("exited on signal 9 (Killed)"), std::string::npos) << out;
  // Nothing of the job survives (give the launcher's SIGTERM/SIGKILL a moment to land).
  auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!processesWith(job.marker).empty() && std::chrono::steady_clock::now() < settle)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(processesWith(job.marker).empty()) << "processes left behind";
  killAll(job);
}

#endif

}  // namespace

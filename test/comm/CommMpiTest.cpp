//===- CommMpiTest.cpp - Every collective on every axis group, under mpirun -------------------===//
//
// Run as `mpirun -np N colossal-comm-mpi-tests` (ctest does N = 2, 4 and 8). For each mesh whose
// size is N (N=2: tp=2; N=4: dp=2 x tp=2 and tp=4; N=8: a=2 x b=2 x c=2 and dp=2 x tp=4), for every
// ordered list of axes, every collective is checked against a naive result: each rank's input is
// a function of (world rank, element index) that every rank can compute, so each rank builds the
// expected output of its group with plain loops (sums in double, rounded once to the dtype).
// Input values are multiples of 1/64 of magnitude <= 4, so float32 sums in any order are exact
// and results must match bit for bit. float32 and bfloat16 throughout; float16, float64 and int64
// for all_reduce. The collective kernels (the plan instructions) are run as well.
//
// Failures use EXPECT (non-fatal) so that every rank keeps calling the same collectives; the
// process exit status is non-zero when any rank failed.
//
//===----------------------------------------------------------------------------------------===//
#include "CommPlans.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Plan.h"

#include "llvm/ADT/StringExtras.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int worldSize() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// -------------------------------------------------------------------- dtype helpers (naive)
uint16_t toBf16(double v) {  // round to nearest even through float (exact for our values)
  float f = static_cast<float>(v);
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
double fromBf16(uint16_t h) {
  uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t toF16(double v) {  // normal range only (|v| in [2^-14, 65504]), round to nearest even
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = std::fabs(v);
  int e;
  std::frexp(a, &e);                       // a in [2^(e-1), 2^e)
  double ulp = std::ldexp(1.0, e - 1 - 10);  // 10 fraction bits
  a = std::nearbyint(a / ulp) * ulp;       // FE_TONEAREST: ties to even
  double m = std::frexp(a, &e);            // again: rounding may carry into the next binade
  int exp = e - 1 + 15;
  uint16_t man = static_cast<uint16_t>((m * 2 - 1) * 1024);
  return static_cast<uint16_t>(sign | (exp << 10) | man);
}
double fromF16(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
  return (h & 0x8000) ? -v : v;
}

/// Tensor values as doubles, stored as `dtype`.
struct Buf {
  DType dtype;
  std::vector<char> bytes;
  Buf(DType d, int64_t n) : dtype(d), bytes(n * dtypeSize(d)) {}
  int64_t size() const { return static_cast<int64_t>(bytes.size() / dtypeSize(dtype)); }
  void set(int64_t i, double v) {
    switch (dtype) {
    case DType::F32: reinterpret_cast<float *>(bytes.data())[i] = static_cast<float>(v); break;
    case DType::F64: reinterpret_cast<double *>(bytes.data())[i] = v; break;
    case DType::I64: reinterpret_cast<int64_t *>(bytes.data())[i] = static_cast<int64_t>(v); break;
    case DType::BF16: reinterpret_cast<uint16_t *>(bytes.data())[i] = toBf16(v); break;
    case DType::F16: reinterpret_cast<uint16_t *>(bytes.data())[i] = toF16(v); break;
    default: ADD_FAILURE() << "dtype";
    }
  }
  double get(int64_t i) const {
    switch (dtype) {
    case DType::F32: return reinterpret_cast<const float *>(bytes.data())[i];
    case DType::F64: return reinterpret_cast<const double *>(bytes.data())[i];
    case DType::I64: return static_cast<double>(reinterpret_cast<const int64_t *>(bytes.data())[i]);
    case DType::BF16: return fromBf16(reinterpret_cast<const uint16_t *>(bytes.data())[i]);
    case DType::F16: return fromF16(reinterpret_cast<const uint16_t *>(bytes.data())[i]);
    default: return 0;
    }
  }
  /// The value `dtype` stores for v (the rounding the expected result gets).
  double round(double v) {
    Buf t(dtype, 1);
    t.set(0, v);
    return t.get(0);
  }
  void *data() { return bytes.data(); }
};

/// Input element `i` of world rank `r`: a multiple of 1/64 in [-4, 4] (integers for I64).
double inputValue(int r, int64_t i, DType dtype) {
  int64_t k = (r * 7919 + i * 104729 + (i * i) % 31) % 513 - 256;
  return dtype == DType::I64 ? static_cast<double>(k) : static_cast<double>(k) / 64.0;
}

Buf makeInput(int r, int64_t n, DType dtype) {
  Buf b(dtype, n);
  for (int64_t i = 0; i < n; ++i) b.set(i, inputValue(r, i, dtype));
  return b;
}

double reduce(ReduceOp op, const std::vector<double> &vals) {
  double acc = vals[0];
  for (size_t k = 1; k < vals.size(); ++k)
    acc = op == ReduceOp::Sum ? acc + vals[k] : op == ReduceOp::Max ? std::max(acc, vals[k]) : std::min(acc, vals[k]);
  return acc;
}

std::vector<int64_t> strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}
std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t> &shape) {
  std::vector<int64_t> c(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    c[d] = i % shape[d];
    i /= shape[d];
  }
  return c;
}
int64_t ravel(const std::vector<int64_t> &c, const std::vector<int64_t> &shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + c[d];
  return i;
}

/// Compares `got` with `want` element by element (exact); reports the first mismatch.
void expectEqual(const Buf &got, const std::vector<double> &want, const std::string &what) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size())) << what;
  for (int64_t i = 0; i < got.size(); ++i)
    if (got.get(i) != want[i]) {
      ADD_FAILURE() << what << ": rank " << worldRank() << " element " << i << " is " << got.get(i)
                    << ", expected " << want[i];
      return;
    }
}

/// All the meshes of this world size, and every ordered list of their axes.
std::vector<std::vector<MeshAxis>> meshesFor(int n) {
  switch (n) {
  case 2: return {{{"tp", 2}}, {{"dp", 2}, {"tp", 1}}};
  case 4: return {{{"dp", 2}, {"tp", 2}}, {{"tp", 4}}};
  case 8: return {{{"a", 2}, {"b", 2}, {"c", 2}}, {{"dp", 2}, {"tp", 4}}};
  default: return {};
  }
}

std::vector<std::string> axisLists(const std::vector<MeshAxis> &axes) {
  const int n = static_cast<int>(axes.size());
  std::vector<std::string> out;
  for (int mask = 1; mask < (1 << n); ++mask) {
    std::vector<int> sub;
    for (int i = 0; i < n; ++i)
      if (mask & (1 << i)) sub.push_back(i);
    do {
      std::string s;
      for (int a : sub) s += (s.empty() ? "" : ",") + axes[a].name;
      out.push_back(s);
    } while (std::next_permutation(sub.begin(), sub.end()));
  }
  return out;
}

/// The world ranks of this rank's group over `list`, by group rank (from the Mesh arithmetic,
/// itself tested against enumeration in CommTest).
std::vector<int64_t> groupOf(const Mesh &mesh, const std::string &list) {
  auto idx = mesh.parseAxes(list);
  EXPECT_TRUE(static_cast<bool>(idx));
  return mesh.groupRanks(worldRank(), *idx);
}

struct Fixture {
  Mesh mesh;
  std::unique_ptr<CommContext> ctx;
};

Fixture start(const std::vector<MeshAxis> &axes) {
  Fixture f;
  auto m = Mesh::create(axes);
  EXPECT_TRUE(static_cast<bool>(m));
  f.mesh = *m;
  CommOptions o;
  o.timeoutSeconds = 120;
  auto c = CommContext::create(f.mesh, o);
  if (!c) {
    ADD_FAILURE() << llvm::toString(c.takeError());
    return f;
  }
  f.ctx = std::move(*c);
  return f;
}

/// Dims divisible by the group size for scatter-like collectives.
std::vector<int64_t> scatterShape(int64_t p) { return {2 * p, 3 * p, p}; }

void checkAllReduce(Fixture &f, const std::string &list, DType dtype, ReduceOp op, int64_t n) {
  Communicator *g = *f.ctx->axes(list);
  std::vector<int64_t> ranks = groupOf(f.mesh, list);
  ASSERT_EQ(g->size(), static_cast<int>(ranks.size()));
  Buf in = makeInput(worldRank(), n, dtype), out(dtype, n);
  std::string what = "all_reduce " + reduceOpName(op).str() + " " + dtypeName(dtype).str() + " on " + list;
  if (llvm::Error e = g->allReduce(in.data(), out.data(), n, dtype, op)) ADD_FAILURE() << llvm::toString(std::move(e));
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> vals;
    for (int64_t r : ranks) vals.push_back(in.round(inputValue(static_cast<int>(r), i, dtype)));
    want[i] = in.round(reduce(op, vals));
  }
  expectEqual(out, want, what);
  // In place.
  if (llvm::Error e = g->allReduce(in.data(), in.data(), n, dtype, op)) ADD_FAILURE() << llvm::toString(std::move(e));
  expectEqual(in, want, what + " (in place)");
}

void checkAllGather(Fixture &f, const std::string &list, DType dtype, int64_t dim) {
  Communicator *g = *f.ctx->axes(list);
  std::vector<int64_t> ranks = groupOf(f.mesh, list);
  const int64_t p = static_cast<int64_t>(ranks.size());
  std::vector<int64_t> inShape = {2, 3, 5}, outShape = inShape;
  outShape[dim] *= p;
  int64_t n = 30;
  Buf in = makeInput(worldRank(), n, dtype), out(dtype, n * p);
  if (llvm::Error e = g->allGather(in.data(), out.data(), inShape, dim, dtype)) ADD_FAILURE() << llvm::toString(std::move(e));
  std::vector<double> want(n * p);
  for (int64_t o = 0; o < n * p; ++o) {
    std::vector<int64_t> c = unravel(o, outShape);
    int64_t src = c[dim] / inShape[dim];
    c[dim] %= inShape[dim];
    want[o] = in.round(inputValue(static_cast<int>(ranks[src]), ravel(c, inShape), dtype));
  }
  expectEqual(out, want, "all_gather " + dtypeName(dtype).str() + " dim " + std::to_string(dim) + " on " + list);
}

void checkReduceScatter(Fixture &f, const std::string &list, DType dtype, int64_t dim, ReduceOp op) {
  Communicator *g = *f.ctx->axes(list);
  std::vector<int64_t> ranks = groupOf(f.mesh, list);
  const int64_t p = static_cast<int64_t>(ranks.size());
  std::vector<int64_t> inShape = scatterShape(p), outShape = inShape;
  outShape[dim] /= p;
  int64_t n = inShape[0] * inShape[1] * inShape[2];
  Buf in = makeInput(worldRank(), n, dtype), out(dtype, n / p);
  if (llvm::Error e = g->reduceScatter(in.data(), out.data(), inShape, dim, dtype, op))
    ADD_FAILURE() << llvm::toString(std::move(e));
  std::vector<double> want(n / p);
  int64_t me = g->rank();
  for (int64_t o = 0; o < n / p; ++o) {
    std::vector<int64_t> c = unravel(o, outShape);
    c[dim] += me * outShape[dim];
    int64_t i = ravel(c, inShape);
    std::vector<double> vals;
    for (int64_t r : ranks) vals.push_back(in.round(inputValue(static_cast<int>(r), i, dtype)));
    want[o] = in.round(reduce(op, vals));
  }
  expectEqual(out, want,
              "reduce_scatter " + dtypeName(dtype).str() + " dim " + std::to_string(dim) + " on " + list);
}

void checkAllToAll(Fixture &f, const std::string &list, DType dtype, int64_t split, int64_t concat) {
  Communicator *g = *f.ctx->axes(list);
  std::vector<int64_t> ranks = groupOf(f.mesh, list);
  const int64_t p = static_cast<int64_t>(ranks.size());
  std::vector<int64_t> inShape = scatterShape(p), chunk = inShape;
  chunk[split] /= p;
  std::vector<int64_t> outShape = chunk;
  outShape[concat] *= p;
  int64_t n = inShape[0] * inShape[1] * inShape[2];
  Buf in = makeInput(worldRank(), n, dtype), out(dtype, n);
  if (llvm::Error e = g->allToAll(in.data(), out.data(), inShape, split, concat, dtype))
    ADD_FAILURE() << llvm::toString(std::move(e));
  // out along concat: block i came from group rank i, which sent its chunk number rank() along split.
  std::vector<double> want(n);
  int64_t me = g->rank();
  for (int64_t o = 0; o < n; ++o) {
    std::vector<int64_t> c = unravel(o, outShape);
    int64_t src = c[concat] / chunk[concat];
    c[concat] %= chunk[concat];
    c[split] += me * chunk[split];
    want[o] = in.round(inputValue(static_cast<int>(ranks[src]), ravel(c, inShape), dtype));
  }
  expectEqual(out, want, "all_to_all " + dtypeName(dtype).str() + " split " + std::to_string(split) +
                             " concat " + std::to_string(concat) + " on " + list);
}

void checkBroadcast(Fixture &f, const std::string &list, DType dtype) {
  Communicator *g = *f.ctx->axes(list);
  std::vector<int64_t> ranks = groupOf(f.mesh, list);
  for (int root = 0; root < g->size(); ++root) {
    int64_t n = 37;
    Buf in = makeInput(worldRank(), n, dtype), out(dtype, n);
    if (llvm::Error e = g->broadcast(in.data(), out.data(), n, dtype, root)) ADD_FAILURE() << llvm::toString(std::move(e));
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = in.round(inputValue(static_cast<int>(ranks[root]), i, dtype));
    expectEqual(out, want, "broadcast root " + std::to_string(root) + " on " + list);
  }
}

TEST(Collectives, EveryCollectiveOnEveryAxisGroup) {
  int n = worldSize();
  auto meshes = meshesFor(n);
  if (meshes.empty()) GTEST_SKIP() << "no mesh of " << n << " ranks in this test";
  for (const auto &axes : meshes) {
    Fixture f = start(axes);
    ASSERT_TRUE(f.ctx);
    ASSERT_TRUE(f.ctx->usesMpi());
    for (const std::string &list : axisLists(axes)) {
      for (DType dt : {DType::F32, DType::BF16}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) checkAllReduce(f, list, dt, op, 1000);
        for (int64_t dim = 0; dim < 3; ++dim) {
          checkAllGather(f, list, dt, dim);
          checkReduceScatter(f, list, dt, dim, ReduceOp::Sum);
          for (int64_t concat = 0; concat < 3; ++concat) checkAllToAll(f, list, dt, dim, concat);
        }
        checkReduceScatter(f, list, dt, 1, ReduceOp::Max);
        checkBroadcast(f, list, dt);
      }
      for (DType dt : {DType::F16, DType::F64, DType::I64}) checkAllReduce(f, list, dt, ReduceOp::Sum, 257);
    }
  }
}

/// bfloat16 sums accumulate in float32 and round once: 256 + 1 + 1 + 1 is 259 -> 260 (a tie, to
/// even), where rounding after each addition would stay at 256.
TEST(Collectives, Bf16SumRoundsOnce) {
  if (worldSize() < 4) GTEST_SKIP() << "needs 4 ranks";
  Fixture f = start({{"tp", worldSize()}});
  ASSERT_TRUE(f.ctx);
  Communicator &w = f.ctx->world();
  Buf in(DType::BF16, 1), out(DType::BF16, 1);
  in.set(0, worldRank() == 0 ? 256.0 : worldRank() < 4 ? 1.0 : 0.0);
  ASSERT_FALSE(static_cast<bool>(w.allReduce(in.data(), out.data(), 1, DType::BF16, ReduceOp::Sum)));
  EXPECT_EQ(out.get(0), 260.0);
}

/// Large buffers (several pipeline segments in MPI's algorithms; packing of a non-leading dim).
TEST(Collectives, LargeBuffers) {
  Fixture f = start({{"tp", worldSize()}});
  ASSERT_TRUE(f.ctx);
  const int64_t p = worldSize();
  checkAllReduce(f, "tp", DType::F32, ReduceOp::Sum, 3 << 20);
  checkAllReduce(f, "tp", DType::BF16, ReduceOp::Sum, 1 << 20);
  Communicator *g = *f.ctx->axes("tp");
  std::vector<int64_t> shape = {256, 64 * p, 33};
  int64_t n = shape[0] * shape[1] * shape[2];
  Buf in = makeInput(worldRank(), n, DType::BF16), out(DType::BF16, n / p);
  ASSERT_FALSE(static_cast<bool>(g->reduceScatter(in.data(), out.data(), shape, 1, DType::BF16, ReduceOp::Sum)));
  std::vector<int64_t> outShape = {256, 64, 33};
  std::vector<double> want(n / p);
  for (int64_t o = 0; o < n / p; ++o) {
    std::vector<int64_t> c = unravel(o, outShape);
    c[1] += g->rank() * 64;
    int64_t i = ravel(c, shape);
    double s = 0;
    for (int r = 0; r < p; ++r) s += in.round(inputValue(r, i, DType::BF16));
    want[o] = in.round(s);
  }
  expectEqual(out, want, "large bf16 reduce_scatter dim 1");
}

TEST(PointToPoint, SendRecvBarrier) {
  Fixture f = start({{"tp", worldSize()}});
  ASSERT_TRUE(f.ctx);
  Communicator &w = f.ctx->world();
  int me = w.rank(), p = w.size();
  // A ring: send to the next rank, receive from the previous one (even ranks send first).
  Buf mine = makeInput(me, 100, DType::F32), got(DType::F32, 100);
  int next = (me + 1) % p, prev = (me + p - 1) % p;
  auto sendIt = [&] { ASSERT_FALSE(static_cast<bool>(w.send(mine.data(), 100, DType::F32, next, 7))); };
  auto recvIt = [&] { ASSERT_FALSE(static_cast<bool>(w.recv(got.data(), 100, DType::F32, prev, 7))); };
  if (me % 2 == 0) {
    sendIt();
    recvIt();
  } else {
    recvIt();
    sendIt();
  }
  std::vector<double> want(100);
  for (int i = 0; i < 100; ++i) want[i] = inputValue(prev, i, DType::F32);
  expectEqual(got, want, "ring send/recv");
  EXPECT_FALSE(static_cast<bool>(w.barrier()));
  EXPECT_EQ(llvm::toString(w.send(mine.data(), 1, DType::F32, me)),
            "send: peer " + std::to_string(me) + " is not another rank of the group of " + std::to_string(p));
}

/// The plan instructions: a program of collectives run by the executor on every rank.
TEST(CollectiveKernels, ProgramOnDpTp) {
  if (worldSize() != 4) GTEST_SKIP() << "needs 4 ranks";
  std::vector<MeshAxis> axes = {{"dp", 2}, {"tp", 2}};
  std::vector<CollectiveStep> steps = {
      {"all_reduce", "x", "ar", {4, 6}, {{"axes", "dp"}}, {}},
      {"all_gather", "x", "ag", {4, 24}, {{"axes", "tp,dp"}}, {{"dim", 1}}},
      {"reduce_scatter", "x", "rs", {4, 3}, {{"axes", "tp"}}, {{"dim", 1}}},
      {"all_to_all", "x", "a2a", {8, 3}, {{"axes", "tp"}}, {{"split_dim", 1}, {"concat_dim", 0}}},
      {"broadcast", "x", "bc", {4, 6}, {{"axes", "dp,tp"}}, {{"root", 3}}},
  };
  plan::Plan p = makeCollectivePlan(axes, DType::BF16, {4, 6}, steps);
  LoadedPlan loaded;
  loaded.path = "collectives.cplan";
  loaded.plan = p;
  ASSERT_FALSE(static_cast<bool>(validatePlan(p, loaded.path, KernelRegistry::cpu())));
  Fixture f = start(axes);
  ASSERT_TRUE(f.ctx);
  ASSERT_FALSE(static_cast<bool>(f.ctx->prepare(p.programs(0))));
  std::unique_ptr<Device> device = createCpuDevice();
  device->setThreads(1);
  ExecutorOptions options;
  options.comm = f.ctx.get();
  auto ex = Executor::create(loaded, KernelRegistry::cpu(), *device, "forward", options);
  ASSERT_TRUE(static_cast<bool>(ex));
  const int me = worldRank();
  Buf x = makeInput(me, 24, DType::BF16);
  ASSERT_FALSE(static_cast<bool>((*ex)->setInput("x", DType::BF16, {4, 6}, x.data())));
  ASSERT_FALSE(static_cast<bool>((*ex)->run()));
  auto output = [&](const char *name) {
    TensorRef t = *(*ex)->output(name);
    Buf b(DType::BF16, t.numel());
    std::memcpy(b.data(), t.data, t.bytes());
    return b;
  };
  auto xv = [&](int r, int64_t row, int64_t col) { return x.round(inputValue(r, row * 6 + col, DType::BF16)); };
  const int dp = me / 2, tp = me % 2;
  std::vector<double> ar, ag, rs, a2a, bc;
  for (int64_t i = 0; i < 24; ++i) ar.push_back(x.round(xv(tp, i / 6, i % 6) + xv(2 + tp, i / 6, i % 6)));
  for (int64_t r = 0; r < 4; ++r)  // group "tp,dp": group rank g = tp' * 2 + dp' -> world dp' * 2 + tp'
    for (int g = 0; g < 4; ++g)
      for (int64_t c = 0; c < 6; ++c) ag.push_back(xv((g % 2) * 2 + g / 2, r, c));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 3; ++c) rs.push_back(x.round(xv(dp * 2, r, tp * 3 + c) + xv(dp * 2 + 1, r, tp * 3 + c)));
  for (int src = 0; src < 2; ++src)
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 3; ++c) a2a.push_back(xv(dp * 2 + src, r, tp * 3 + c));
  for (int64_t i = 0; i < 24; ++i) bc.push_back(xv(3, i / 6, i % 6));
  expectEqual(output("ar"), ar, "all_reduce instruction");
  expectEqual(output("ag"), ag, "all_gather instruction");
  expectEqual(output("rs"), rs, "reduce_scatter instruction");
  expectEqual(output("a2a"), a2a, "all_to_all instruction");
  expectEqual(output("bc"), bc, "broadcast instruction");
}

/// shard_slice and axis_index instructions run by the executor, for every mesh of this world size,
/// every ordered list of its axes and every dtype: each rank's output against a naive slice of its
/// own input, with r computed here from the rank's mesh coordinates (row-major over the listed
/// axes, docs/parallelism.md "Mesh and rank layout"), byte for byte.
TEST(CollectiveKernels, ShardSliceAndAxisIndex) {
  int n = worldSize();
  auto meshes = meshesFor(n);
  if (meshes.empty()) GTEST_SKIP() << "no mesh of " << n << " ranks in this test";
  const int me = worldRank();
  std::unique_ptr<Device> device = createCpuDevice();
  device->setThreads(1);
  for (const auto &axes : meshes) {
    Fixture f = start(axes);
    ASSERT_TRUE(f.ctx);
    // This rank's coordinates: world rank unravelled row-major over the mesh (last axis fastest).
    std::vector<int64_t> sizes, coords;
    for (const MeshAxis &a : axes) sizes.push_back(a.size);
    coords = unravel(me, sizes);
    for (const std::string &list : axisLists(axes)) {
      int64_t r = 0, p = 1;
      for (llvm::StringRef name : llvm::split(list, ',')) {
        size_t a = 0;
        while (axes[a].name != name) ++a;
        r = r * axes[a].size + coords[a];
        p *= axes[a].size;
      }
      const std::vector<int64_t> xShape = scatterShape(p);
      const int64_t numel = xShape[0] * xShape[1] * xShape[2];
      for (int v = 1; v <= kLastDType; ++v) {
        const DType dt = static_cast<DType>(v);
        const size_t es = dtypeSize(dt);
        std::vector<CollectiveStep> steps;
        for (int64_t dim = 0; dim < 3; ++dim) {
          std::vector<int64_t> out = xShape;
          out[dim] /= p;
          steps.push_back({"shard_slice", "x", "s" + std::to_string(dim), out, {{"axes", list}}, {{"dim", dim}}});
        }
        steps.push_back({"axis_index", "", "idx", {}, {{"axes", list}}, {}, DType::I64});
        LoadedPlan loaded;
        loaded.path = "shard.cplan";
        loaded.plan = makeCollectivePlan(axes, dt, xShape, steps);
        std::string what = list + " " + dtypeName(dt).str();
        ASSERT_FALSE(static_cast<bool>(validatePlan(loaded.plan, loaded.path, KernelRegistry::cpu()))) << what;
        ASSERT_FALSE(static_cast<bool>(f.ctx->prepare(loaded.plan.programs(0)))) << what;
        ExecutorOptions options;
        options.comm = f.ctx.get();
        auto ex = Executor::create(loaded, KernelRegistry::cpu(), *device, "forward", options);
        ASSERT_TRUE(static_cast<bool>(ex)) << what;
        // Distinct bytes per rank and element (bool: 0/1), so a wrong chunk or rank shows.
        std::vector<uint8_t> x(numel * es);
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = dt == DType::Bool ? (i * 7 + me) % 3 == 0 : static_cast<uint8_t>(i * 131 + me * 29 + 7);
        ASSERT_FALSE(static_cast<bool>((*ex)->setInput("x", dt, xShape, x.data()))) << what;
        ASSERT_FALSE(static_cast<bool>((*ex)->run())) << what;
        for (int64_t dim = 0; dim < 3; ++dim) {
          std::vector<int64_t> outShape = xShape;
          outShape[dim] /= p;
          std::vector<uint8_t> want;
          for (int64_t o = 0; o < numel / p; ++o) {
            std::vector<int64_t> c = unravel(o, outShape);
            c[dim] += r * outShape[dim];
            int64_t i = ravel(c, xShape);
            want.insert(want.end(), x.begin() + i * es, x.begin() + (i + 1) * es);
          }
          TensorRef t = *(*ex)->output("s" + std::to_string(dim));
          const uint8_t *got = static_cast<const uint8_t *>(t.data);
          EXPECT_EQ(std::vector<uint8_t>(got, got + t.bytes()), want)
              << "shard_slice dim " << dim << " on " << what << ", rank " << me << " (group rank " << r << ")";
        }
        TensorRef idx = *(*ex)->output("idx");
        EXPECT_EQ(*idx.as<int64_t>(), r) << "axis_index on " << what << ", rank " << me;
      }
    }
  }
}

/// all_reduce bandwidth (reported, not asserted): COLOSSAL_COMM_BENCH=1 prints MiB and GB/s.
TEST(Collectives, AllReduceBandwidth) {
  if (!std::getenv("COLOSSAL_COMM_BENCH")) GTEST_SKIP() << "set COLOSSAL_COMM_BENCH=1";
  Fixture f = start({{"tp", worldSize()}});
  ASSERT_TRUE(f.ctx);
  Communicator &w = f.ctx->world();
  for (int64_t mib : {1, 4, 16, 64}) {
    int64_t n = mib * (1 << 20) / 4;
    std::vector<float> buf(n, 1.0f);
    std::vector<double> times;
    for (int it = 0; it < 7; ++it) {
      ASSERT_FALSE(static_cast<bool>(w.barrier()));
      auto t0 = std::chrono::steady_clock::now();
      ASSERT_FALSE(static_cast<bool>(w.allReduce(buf.data(), buf.data(), n, DType::F32, ReduceOp::Sum)));
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    double t = times[times.size() / 2];
    // Bus bandwidth as NCCL-tests defines it for all-reduce: bytes * 2 (p - 1) / p / time.
    double p = w.size();
    if (worldRank() == 0)
      std::printf("all_reduce f32 %3lld MiB on %d ranks: median %.2f ms, algbw %.2f GB/s, busbw %.2f GB/s\n",
                  static_cast<long long>(mib), w.size(), t * 1e3, n * 4 / t / 1e9,
                  n * 4 * 2 * (p - 1) / p / t / 1e9);
  }
}

}  // namespace

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  if (worldRank() != 0) {  // one report: rank 0 prints, the others only their failures
    struct FailurePrinter : ::testing::EmptyTestEventListener {
      void OnTestPartResult(const ::testing::TestPartResult &r) override {
        if (r.failed())
          std::printf("rank %d: %s:%d: Failure\n%s\n", worldRank(), r.file_name() ? r.file_name() : "?",
                      r.line_number(), r.summary());
      }
    };
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter);
  }
  int failed = RUN_ALL_TESTS();
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return anyFailed ? 1 : 0;
}

//===- BucketMpiTest.cpp - Bucketed all_reduce instructions, under mpirun ---------------------===//
//
// Part of colossal-comm-mpi-tests (mpirun -np 2, 4, 8). A hand-built plan on mesh {dp: N} whose
// `all_reduce` instructions carry several tensors (gradient buckets, docs/plan.md "Collective
// instructions"): odd sizes (1, 15, 7, 129 elements) in one float32 bucket, a float64 bucket of
// one, a bfloat16 bucket, and a bucket whose outputs are other buffers with reduction max. Every
// output is checked bit for bit against a naive reduction over the ranks' inputs (each rank
// computes every rank's input from (rank, tensor, index)); values are multiples of 1/64 with
// |v| <= 4, so float32/float64 sums are exact in any order and bfloat16 is rounded once from the
// float32 sum. Also: validatePlan's errors for a bucket with unequal input/output counts and one
// with mixed dtypes, and one whose input i and output i differ in shape.
//
//===----------------------------------------------------------------------------------------===//
#include "CommPlans.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Plan.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <map>

using namespace colossal::runtime;
namespace plan = colossal::plan;

namespace {

int rankOf() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int sizeOf() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// Rank r's value of element i of tensor t: k/64 with k in [-256, 256].
double value(int r, int t, int64_t i) {
  return static_cast<double>((r * 131 + t * 977 + i * 53 + (i * i) % 17) % 513 - 256) / 64.0;
}

uint16_t bf16Of(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// The bytes of `v` (one element) stored as `dt`.
void store(DType dt, void *p, double v) {
  if (dt == DType::F32) *static_cast<float *>(p) = static_cast<float>(v);
  else if (dt == DType::F64) *static_cast<double *>(p) = v;
  else *static_cast<uint16_t *>(p) = bf16Of(static_cast<float>(v));
}
double load(DType dt, const void *p) {
  if (dt == DType::F32) return *static_cast<const float *>(p);
  if (dt == DType::F64) return *static_cast<const double *>(p);
  return fromBf16(*static_cast<const uint16_t *>(p));
}

struct Tensor1 {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct BucketInst {
  std::vector<std::string> in, out;
  std::string reduction;
};

/// A plan on mesh {dp: n}: ARENA buffers `tensors` (all bound as program inputs, except those only
/// written), the given all_reduce instructions over 'dp', every buffer bound as an output too.
plan::Plan makePlan(int n, const std::vector<Tensor1> &tensors, const std::vector<BucketInst> &insts,
                    const std::vector<std::string> &inputs) {
  plan::Plan p;
  p.set_version(kPlanVersion);
  p.set_producer("bucket test");
  p.set_mode("inference");
  plan::MeshAxis *m = p.add_mesh();
  m->set_name("dp");
  m->set_size(n);
  m->set_role(plan::MeshAxis::DATA);
  plan::Program &prog = *p.add_programs();
  prog.set_name("forward");
  prog.set_role(plan::Program::FORWARD);
  prog.set_device(plan::CPU);
  std::map<std::string, uint32_t> ids;
  uint64_t offset = 0;
  for (const Tensor1 &t : tensors) {
    plan::Buffer *b = prog.add_buffers();
    b->set_id(prog.buffers_size() - 1);
    b->set_name(t.name);
    b->set_dtype(static_cast<plan::DType>(t.dtype));
    for (int64_t d : t.shape) b->add_shape(d);
    b->set_storage(plan::ARENA);
    b->set_offset(offset);
    uint64_t bytes = t.numel() * dtypeSize(t.dtype);
    b->set_size_bytes(bytes);
    offset += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    ids[t.name] = b->id();
  }
  prog.set_arena_bytes(offset);
  for (const BucketInst &bi : insts) {
    plan::Instruction *inst = prog.add_instructions();
    inst->set_op("all_reduce");
    for (const std::string &s : bi.in) inst->add_inputs(ids.at(s));
    for (const std::string &s : bi.out) inst->add_outputs(ids.at(s));
    (*inst->mutable_attrs())["axes"].set_s("dp");
    (*inst->mutable_attrs())["reduction"].set_s(bi.reduction);
    inst->set_loc("bucket " + bi.in[0]);
  }
  for (const std::string &s : inputs) {
    plan::Binding *b = prog.add_inputs();
    b->set_name(s);
    b->set_buffer(ids.at(s));
  }
  for (const Tensor1 &t : tensors) {
    plan::Binding *b = prog.add_outputs();
    b->set_name(t.name);
    b->set_buffer(ids.at(t.name));
  }
  return p;
}

TEST(BucketedAllReduce, OddSizesMixedBucketsBitExact) {
  const int n = sizeOf(), me = rankOf();
  // Tensor index t (for value()) is the position in this list.
  const std::vector<Tensor1> tensors = {
      {"a", DType::F32, {1}},      {"b", DType::F32, {3, 5}}, {"c", DType::F32, {7}},
      {"d", DType::F32, {129}},    {"e", DType::F64, {2, 3}}, {"f", DType::BF16, {11}},
      {"h", DType::BF16, {3, 1}},  {"g", DType::F32, {5}},    {"k", DType::F32, {2, 2}},
      {"go", DType::F32, {5}},     {"ko", DType::F32, {2, 2}},
  };
  const std::vector<BucketInst> insts = {
      {{"a", "b", "c", "d"}, {"a", "b", "c", "d"}, "sum"},
      {{"e"}, {"e"}, "sum"},
      {{"f", "h"}, {"f", "h"}, "sum"},
      {{"g", "k"}, {"go", "ko"}, "max"},
  };
  const std::vector<std::string> inputs = {"a", "b", "c", "d", "e", "f", "h", "g", "k"};
  LoadedPlan loaded;
  loaded.path = "bucket.cplan";
  loaded.plan = makePlan(n, tensors, insts, inputs);
  ASSERT_FALSE(static_cast<bool>(validatePlan(loaded.plan, loaded.path, KernelRegistry::cpu())));
  ASSERT_FALSE(static_cast<bool>(validateCollectives(loaded.plan, loaded.path)));
  auto mesh = Mesh::create({{"dp", n}});
  ASSERT_TRUE(static_cast<bool>(mesh));
  CommOptions o;
  o.timeoutSeconds = 120;
  auto ctx = CommContext::create(*mesh, o);
  ASSERT_TRUE(static_cast<bool>(ctx)) << llvm::toString(ctx.takeError());
  ASSERT_FALSE(static_cast<bool>((*ctx)->prepare(loaded.plan.programs(0))));
  std::unique_ptr<Device> device = createCpuDevice();
  device->setThreads(1);
  ExecutorOptions options;
  options.comm = ctx->get();
  auto ex = Executor::create(loaded, KernelRegistry::cpu(), *device, "forward", options);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  std::map<std::string, int> index;
  for (size_t t = 0; t < tensors.size(); ++t) index[tensors[t].name] = static_cast<int>(t);
  for (const std::string &name : inputs) {
    const Tensor1 &t = tensors[index[name]];
    std::vector<char> bytes(t.numel() * dtypeSize(t.dtype));
    for (int64_t i = 0; i < t.numel(); ++i) store(t.dtype, bytes.data() + i * dtypeSize(t.dtype), value(me, index[name], i));
    ASSERT_FALSE(static_cast<bool>((*ex)->setInput(name, t.dtype, t.shape, bytes.data()))) << name;
  }
  // Run twice: the second run reuses the packed workspace, and its inputs are the first's outputs
  // for the in-place buckets, so reset them first.
  for (int run = 0; run < 2; ++run) {
    if (run == 1)
      for (const std::string &name : inputs) {
        const Tensor1 &t = tensors[index[name]];
        std::vector<char> bytes(t.numel() * dtypeSize(t.dtype));
        for (int64_t i = 0; i < t.numel(); ++i)
          store(t.dtype, bytes.data() + i * dtypeSize(t.dtype), value(me, index[name], i));
        ASSERT_FALSE(static_cast<bool>((*ex)->setInput(name, t.dtype, t.shape, bytes.data())));
      }
    ASSERT_FALSE(static_cast<bool>((*ex)->run()));
    for (const BucketInst &bi : insts)
      for (size_t j = 0; j < bi.in.size(); ++j) {
        const Tensor1 &src = tensors[index[bi.in[j]]];
        TensorRef got = *(*ex)->output(bi.out[j]);
        ASSERT_EQ(got.numel(), src.numel());
        for (int64_t i = 0; i < src.numel(); ++i) {
          double want = bi.reduction == "max" ? -1e300 : 0;
          for (int r = 0; r < n; ++r) {
            double v = value(r, index[bi.in[j]], i);
            want = bi.reduction == "max" ? std::max(want, v) : want + v;
          }
          std::vector<char> wantBytes(dtypeSize(src.dtype));
          store(src.dtype, wantBytes.data(), want);  // exact, or rounded once (bf16)
          const char *g = static_cast<const char *>(got.data) + i * dtypeSize(src.dtype);
          EXPECT_EQ(std::memcmp(g, wantBytes.data(), wantBytes.size()), 0)
              << "run " << run << ", " << bi.out[j] << "[" << i << "] = " << load(src.dtype, g) << ", expected "
              << want << " (rank " << me << " of " << n << ")";
        }
      }
  }
}

TEST(BucketedAllReduce, ValidationErrors) {
  const int n = sizeOf();
  const std::vector<Tensor1> tensors = {{"a", DType::F32, {3}}, {"b", DType::F32, {5}}, {"c", DType::F64, {2}}};
  auto errorOf = [&](const BucketInst &bi) {
    plan::Plan p = makePlan(n, tensors, {bi}, {"a", "b", "c"});
    llvm::Error e = validatePlan(p, "bad.cplan", KernelRegistry::cpu());
    return e ? llvm::toString(std::move(e)) : std::string();
  };
  std::string counts = errorOf({{"a", "b"}, {"a"}, "sum"});
  EXPECT_NE(counts.find("bad.cplan"), std::string::npos) << counts;
  EXPECT_NE(counts.find("2 inputs but 1 outputs"), std::string::npos) << counts;
  std::string mixed = errorOf({{"a", "c"}, {"a", "c"}, "sum"});
  EXPECT_NE(mixed.find("input 1 is f64 and output 1 f64; every tensor of a bucket must be f32"), std::string::npos) << mixed;
  std::string shapes = errorOf({{"a", "b"}, {"b", "a"}, "sum"});
  EXPECT_NE(shapes.find("input 0 [3] and output 0 [5] differ"), std::string::npos) << shapes;
}

}  // namespace

//===- UnsignedDTypesTest.cpp - u16/u32/u64 end to end in the runtime -----------------------===//
//
// The unsigned element types against naive references: npy and safetensors round trips, and the
// kernels whose results differ between signed and unsigned readings of the same bits (compare,
// divide, modulo, shifts, casts, reductions, argmax) at values above the signed maximum.
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include "colossal/runtime/Npy.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Safetensors.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstdio>
#include <cstring>
#include <limits>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

constexpr DType kUnsigned[] = {DType::U16, DType::U32, DType::U64};

TEST(UnsignedDType, Tables) {
  EXPECT_EQ(dtypeSize(DType::U16), 2u);
  EXPECT_EQ(dtypeSize(DType::U32), 4u);
  EXPECT_EQ(dtypeSize(DType::U64), 8u);
  EXPECT_EQ(dtypeName(DType::U64), "u64");
  EXPECT_EQ(npyDescr(DType::U16), "<u2");
  EXPECT_EQ(npyDescr(DType::U32), "<u4");
  EXPECT_EQ(npyDescr(DType::U64), "<u8");
  EXPECT_EQ(dtypeFromNpyDescr("<u4"), DType::U32);
  EXPECT_EQ(dtypeFromNpyDescr("=u8"), DType::U64);
  EXPECT_EQ(dtypeFromNpyDescr(">u2"), std::nullopt);
  EXPECT_EQ(dtypeFromNpyDescr("|u1"), DType::U8);
  for (DType d : kUnsigned) {
    EXPECT_TRUE(isValidDType(static_cast<int64_t>(d)));
    EXPECT_EQ(dtypeFromSafetensorsName(safetensorsDTypeName(d)), d);
  }
  EXPECT_EQ(safetensorsDTypeName(DType::U32), "U32");
  EXPECT_FALSE(isValidDType(kLastDType + 1));
}

class UnsignedFiles : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-udt", dir)); }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }
  std::string path(const std::string &name) {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  llvm::SmallString<128> dir;
};

/// A tensor of `d` whose bytes are all 0xff..-ish patterns (values above the signed maximum).
HostTensor highBits(DType d, llvm::ArrayRef<int64_t> shape) {
  HostTensor t(d, shape);
  for (size_t i = 0; i < t.buf.size(); ++i) static_cast<uint8_t *>(t.buf.data())[i] = uint8_t(0xf0 + i * 7);
  return t;
}

TEST_F(UnsignedFiles, NpyRoundTrip) {
  for (DType d : kUnsigned) {
    SCOPED_TRACE(dtypeName(d).str());
    HostTensor t = highBits(d, {2, 3});
    ASSERT_NO_ERR(writeNpy(path("u.npy"), d, t.shape, t.buf.data()));
    auto buf = llvm::MemoryBuffer::getFile(path("u.npy"));
    ASSERT_TRUE(static_cast<bool>(buf));
    EXPECT_NE((*buf)->getBuffer().find(("'descr': '" + npyDescr(d) + "'").str()), llvm::StringRef::npos);
    auto back = readNpy(path("u.npy"));
    ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(back->dtype, d);
    EXPECT_EQ(back->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(0, std::memcmp(back->data.data(), t.buf.data(), t.buf.size()));
  }
}

TEST_F(UnsignedFiles, SafetensorsRoundTrip) {
  HostTensor a = highBits(DType::U16, {3}), b = highBits(DType::U32, {2, 2}), c = highBits(DType::U64, {1});
  std::vector<NamedTensor> ts = {
      {"a", DType::U16, {3}, a.buf.data(), a.buf.size()},
      {"b", DType::U32, {2, 2}, b.buf.data(), b.buf.size()},
      {"c", DType::U64, {1}, c.buf.data(), c.buf.size()},
  };
  ASSERT_NO_ERR(writeSafetensors(path("u.safetensors"), ts, {}));
  auto buf = llvm::MemoryBuffer::getFile(path("u.safetensors"));
  ASSERT_TRUE(static_cast<bool>(buf));
  for (const char *name : {"\"U16\"", "\"U32\"", "\"U64\""})
    EXPECT_NE((*buf)->getBuffer().find(name), llvm::StringRef::npos) << name;
  auto f = SafetensorsFile::open(path("u.safetensors"));
  ASSERT_TRUE(static_cast<bool>(f)) << llvm::toString(f.takeError());
  for (const NamedTensor &t : ts) {
    SCOPED_TRACE(t.name);
    const SafetensorsTensor *r = (*f)->find(t.name);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->dtype, t.dtype);
    EXPECT_EQ(r->shape, t.shape);
    ASSERT_EQ(r->size_bytes, t.size_bytes);
    EXPECT_EQ(0, std::memcmp(r->data, t.data, t.size_bytes));
  }
}

#ifdef COLOSSAL_RUN_PATH
/// colossal-run on a hand-built plan: u32 [3] -> cast -> u64 [3] and bf16 [3] -> cast -> f32 [3].
/// The plan loader accepts the unsigned dtypes, .npy inputs and outputs carry them, and a bf16
/// input may be given as uint16 raw bits.
TEST_F(UnsignedFiles, ColossalRunCarriesUnsignedDTypes) {
  plan::Plan model;
  model.set_version(kPlanVersion);
  model.set_producer("unit test");
  model.set_mode("inference");
  plan::Program &p = *model.add_programs();
  p.set_name("forward");
  p.set_role(plan::Program::FORWARD);
  p.set_device(plan::CPU);
  p.set_arena_bytes(256);
  auto buffer = [&](const char *name, plan::DType d, uint64_t offset, uint64_t bytes) {
    plan::Buffer *b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_name(name);
    b->set_dtype(d);
    b->add_shape(3);
    b->set_storage(plan::ARENA);
    b->set_offset(offset);
    b->set_size_bytes(bytes);
  };
  buffer("x", plan::U32, 0, 12);
  buffer("y", plan::U64, 64, 24);
  buffer("h", plan::BF16, 128, 6);
  buffer("f", plan::F32, 192, 12);
  auto cast = [&](uint32_t in, uint32_t out) {
    plan::Instruction *i = p.add_instructions();
    i->set_op("cast");
    i->add_inputs(in);
    i->add_outputs(out);
  };
  cast(0, 1);
  cast(2, 3);
  auto bind = [](plan::Binding *b, const char *name, uint32_t id) { b->set_name(name), b->set_buffer(id); };
  bind(p.add_inputs(), "x", 0);
  bind(p.add_inputs(), "h", 2);
  bind(p.add_outputs(), "y", 1);
  bind(p.add_outputs(), "f", 3);
  const std::string bytes = serializePlan(model);
  {
    std::FILE *f = std::fopen(path("u.cplan").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  const uint32_t x[3] = {0xffffffffu, 0x80000000u, 7};
  const uint16_t h[3] = {0x3f80, 0xc020, 0x4049};  // 1.0, -2.5, 3.140625 as bfloat16 bits
  ASSERT_NO_ERR(writeNpy(path("x.npy"), DType::U32, {3}, x));
  ASSERT_NO_ERR(writeNpy(path("h.npy"), DType::U16, {3}, h));
  std::string cmd = std::string(COLOSSAL_RUN_PATH) + " " + path("u.cplan") + " --input x=" + path("x.npy") +
                    " --input h=" + path("h.npy") + " --output-dir " + path("out") + " 2>&1";
  FILE *pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << output;
  auto y = readNpy(path("out/y.npy"));
  auto f = readNpy(path("out/f.npy"));
  ASSERT_TRUE(static_cast<bool>(y)) << llvm::toString(y.takeError());
  ASSERT_TRUE(static_cast<bool>(f)) << llvm::toString(f.takeError());
  EXPECT_EQ(y->dtype, DType::U64);
  const uint64_t *yv = static_cast<const uint64_t *>(y->data.data());
  EXPECT_EQ(std::vector<uint64_t>(yv, yv + 3), (std::vector<uint64_t>{0xffffffffull, 0x80000000ull, 7}));
  EXPECT_EQ(f->dtype, DType::F32);
  const float *fv = static_cast<const float *>(f->data.data());
  EXPECT_EQ(std::vector<float>(fv, fv + 3), (std::vector<float>{1.0f, -2.5f, 3.140625f}));
}
#endif

template <typename T> HostTensor tensorOf(DType d, std::vector<T> v) {
  HostTensor t(d, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data<T>());
  return t;
}
template <typename T> std::vector<T> valuesOf(const HostTensor &t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

/// Arithmetic, compare, mod and shifts of T against C++'s unsigned operators, at values above
/// the signed maximum (where a signed reading of the bits would differ).
template <typename T> void checkUnsignedOps(DType d) {
  SCOPED_TRACE(dtypeName(d).str());
  const T top = std::numeric_limits<T>::max();
  std::vector<T> a = {top, T(top - 5), 7, T(top / 2 + 3), 0, 9}, b = {3, T(top / 2 + 1), 2, 5, 4, 0};
  const size_t n = a.size();
  HostTensor ta = tensorOf<T>(d, a), tb = tensorOf<T>(d, b);
  struct { const char *op; T (*ref)(T, T); } ops[] = {
      {"add", [](T x, T y) { return T(x + y); }},
      {"sub", [](T x, T y) { return T(x - y); }},
      {"mul", [](T x, T y) { return T(uint64_t(x) * uint64_t(y)); }},
      {"div", [](T x, T y) { return y == 0 ? T(0) : T(x / y); }},
      {"min", [](T x, T y) { return std::min(x, y); }},
      {"max", [](T x, T y) { return std::max(x, y); }},
  };
  for (auto &op : ops) {
    HostTensor y(d, {int64_t(n)});
    ASSERT_NO_ERR(runKernel(op.op, {&ta, &tb}, {&y}));
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(y.data<T>()[i], op.ref(a[i], b[i])) << op.op << " " << i;
  }
  HostTensor lt(DType::Bool, {int64_t(n)}), ge(DType::Bool, {int64_t(n)});
  ASSERT_NO_ERR(runKernel("less", {&ta, &tb}, {&lt}));
  ASSERT_NO_ERR(runKernel("binary", {&ta, &tb}, {&ge}, Attrs().s("fn", "greater_equal")));
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(lt.data<uint8_t>()[i], a[i] < b[i]) << i;
    EXPECT_EQ(ge.data<uint8_t>()[i], a[i] >= b[i]) << i;
  }
  // ONNX Mod (fmod = 0 and 1): for unsigned operands both are a % b.
  for (const char *fn : {"mod", "fmod"}) {
    HostTensor y(d, {int64_t(n)});
    ASSERT_NO_ERR(runKernel("binary", {&ta, &tb}, {&y}, Attrs().s("fn", fn)));
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(y.data<T>()[i], b[i] ? T(a[i] % b[i]) : T(0)) << fn << " " << i;
  }
  // BitShift: shifting out of the type gives 0; shift amounts >= the width give 0.
  const unsigned bits = sizeof(T) * 8;
  HostTensor s = tensorOf<T>(d, {1, T(bits - 1), 0, 3, 1, T(bits)});
  HostTensor l(d, {int64_t(n)}), r(d, {int64_t(n)});
  ASSERT_NO_ERR(runKernel("binary", {&ta, &s}, {&l}, Attrs().s("fn", "shift_left")));
  ASSERT_NO_ERR(runKernel("binary", {&ta, &s}, {&r}, Attrs().s("fn", "shift_right")));
  for (size_t i = 0; i < n; ++i) {
    T sh = s.data<T>()[i];
    EXPECT_EQ(l.data<T>()[i], sh >= bits ? T(0) : T(uint64_t(a[i]) << sh)) << i;
    EXPECT_EQ(r.data<T>()[i], sh >= bits ? T(0) : T(a[i] >> sh)) << i;
  }
  // Pow wraps modulo 2^bits.
  HostTensor p(d, {3});
  HostTensor pb = tensorOf<T>(d, {3, 2, T(bits)}), pa = tensorOf<T>(d, {T(top - 1), 3, 2});
  ASSERT_NO_ERR(runKernel("pow", {&pa, &pb}, {&p}));
  EXPECT_EQ(p.data<T>()[0], T(uint64_t(T(top - 1)) * uint64_t(T(top - 1)) * uint64_t(T(top - 1))));
  EXPECT_EQ(p.data<T>()[1], T(9));
  EXPECT_EQ(p.data<T>()[2], T(0));
  // Bitwise not and and.
  HostTensor nt(d, {int64_t(n)}), band(d, {int64_t(n)});
  ASSERT_NO_ERR(runKernel("unary", {&ta}, {&nt}, Attrs().s("fn", "bitwise_not")));
  ASSERT_NO_ERR(runKernel("binary", {&ta, &tb}, {&band}, Attrs().s("fn", "bitwise_and")));
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(nt.data<T>()[i], T(~a[i])) << i;
    EXPECT_EQ(band.data<T>()[i], T(a[i] & b[i])) << i;
  }
}

TEST(UnsignedKernels, ArithmeticCompareModShiftPow) {
  checkUnsignedOps<uint16_t>(DType::U16);
  checkUnsignedOps<uint32_t>(DType::U32);
  checkUnsignedOps<uint64_t>(DType::U64);
  checkUnsignedOps<uint8_t>(DType::U8);
}

TEST(UnsignedKernels, Casts) {
  // u64 above INT64_MAX to f64 and back; to i64 keeps the bits (wraps); to u16 truncates.
  const uint64_t big = (uint64_t(1) << 63) + 2048;
  HostTensor x = tensorOf<uint64_t>(DType::U64, {big, 70000, 0});
  HostTensor f(DType::F64, {3}), back(DType::U64, {3}), i(DType::I64, {3}), h(DType::U16, {3});
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&f}));
  EXPECT_EQ(f.data<double>()[0], 9223372036854777856.0);
  ASSERT_NO_ERR(runKernel("cast", {&f}, {&back}));
  EXPECT_EQ(valuesOf<uint64_t>(back), (std::vector<uint64_t>{big, 70000, 0}));
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&i}));
  EXPECT_EQ(i.data<int64_t>()[0], int64_t(big));
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&h}));
  EXPECT_EQ(valuesOf<uint16_t>(h), (std::vector<uint16_t>{2048, uint16_t(70000), 0}));
  // f32 -> u32: truncation toward zero; a negative value wraps as through i64 (NumPy on x86).
  HostTensor g = tensorOf<float>(DType::F32, {3.9f, 4e9f, -1.0f}), u(DType::U32, {3});
  ASSERT_NO_ERR(runKernel("cast", {&g}, {&u}));
  EXPECT_EQ(valuesOf<uint32_t>(u), (std::vector<uint32_t>{3, 4000000000u, 0xffffffffu}));
  // i16 -> u16 keeps the bits; u32 -> bool is x != 0; u16 -> f16.
  HostTensor s = tensorOf<int16_t>(DType::I16, {-1, 5}), su(DType::U16, {2});
  ASSERT_NO_ERR(runKernel("cast", {&s}, {&su}));
  EXPECT_EQ(valuesOf<uint16_t>(su), (std::vector<uint16_t>{65535, 5}));
  HostTensor bz(DType::Bool, {2});
  HostTensor w = tensorOf<uint32_t>(DType::U32, {0, 0x80000000u});
  ASSERT_NO_ERR(runKernel("cast", {&w}, {&bz}));
  EXPECT_EQ(valuesOf<uint8_t>(bz), (std::vector<uint8_t>{0, 1}));
}

TEST(UnsignedKernels, ReductionsArgmaxCumsumTopK) {
  const uint64_t big = ~uint64_t(0) - 1;
  HostTensor x(DType::U64, {2, 3});
  const uint64_t xs[] = {1, big, 5, 7, 3, uint64_t(1) << 63};
  std::copy(xs, xs + 6, x.data<uint64_t>());
  HostTensor mx(DType::U64, {2}), mn(DType::U64, {2}), sum(DType::U64, {2});
  ASSERT_NO_ERR(runKernel("reduce", {&x}, {&mx}, Attrs().ints("axes", {1}).i("keepdims", 0).s("kind", "max")));
  ASSERT_NO_ERR(runKernel("reduce", {&x}, {&mn}, Attrs().ints("axes", {1}).i("keepdims", 0).s("kind", "min")));
  ASSERT_NO_ERR(runKernel("reduce", {&x}, {&sum}, Attrs().ints("axes", {1}).i("keepdims", 0).s("kind", "sum")));
  EXPECT_EQ(valuesOf<uint64_t>(mx), (std::vector<uint64_t>{big, uint64_t(1) << 63}));
  EXPECT_EQ(valuesOf<uint64_t>(mn), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(valuesOf<uint64_t>(sum), (std::vector<uint64_t>{1 + big + 5, 7 + 3 + (uint64_t(1) << 63)}));
  HostTensor am(DType::I64, {2}), an(DType::I64, {2});
  ASSERT_NO_ERR(runKernel("argmax", {&x}, {&am}, Attrs().i("axis", 1).i("keepdims", 0)));
  ASSERT_NO_ERR(runKernel("argmin", {&x}, {&an}, Attrs().i("axis", 1).i("keepdims", 0)));
  EXPECT_EQ(valuesOf<int64_t>(am), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(valuesOf<int64_t>(an), (std::vector<int64_t>{0, 1}));
  HostTensor u = tensorOf<uint32_t>(DType::U32, {4000000000u, 1, 3000000000u}), cs(DType::U32, {3});
  ASSERT_NO_ERR(runKernel("cumsum", {&u}, {&cs}, Attrs().i("axis", 0)));
  EXPECT_EQ(valuesOf<uint32_t>(cs),
            (std::vector<uint32_t>{4000000000u, 4000000001u, uint32_t(7000000001ull)}));
  HostTensor tv(DType::U16, {2}), ti(DType::I64, {2});
  HostTensor h = tensorOf<uint16_t>(DType::U16, {40000, 3, 65535, 7});
  ASSERT_NO_ERR(runKernel("topk", {&h}, {&tv, &ti}, Attrs().i("axis", 0).i("largest", 1).i("sorted", 1)));
  EXPECT_EQ(valuesOf<uint16_t>(tv), (std::vector<uint16_t>{65535, 40000}));
  EXPECT_EQ(valuesOf<int64_t>(ti), (std::vector<int64_t>{2, 0}));
}

TEST(UnsignedKernels, DataMovementAndWhere) {
  HostTensor x = tensorOf<uint32_t>(DType::U32, {10, 0xfffffff0u, 30});
  HostTensor idx = tensorOf<int64_t>(DType::I64, {2, -2, 0}), g(DType::U32, {3});
  ASSERT_NO_ERR(runKernel("gather_elements", {&x, &idx}, {&g}, Attrs().i("axis", 0)));
  EXPECT_EQ(valuesOf<uint32_t>(g), (std::vector<uint32_t>{30, 0xfffffff0u, 10}));
  HostTensor c = tensorOf<uint8_t>(DType::Bool, {1, 0, 1});
  HostTensor o(DType::U32, {3}), e(DType::Bool, {3});
  ASSERT_NO_ERR(runKernel("where", {&c, &x, &g}, {&o}));
  EXPECT_EQ(valuesOf<uint32_t>(o), (std::vector<uint32_t>{10, 0xfffffff0u, 30}));
  ASSERT_NO_ERR(runKernel("equal", {&x, &g}, {&e}));
  EXPECT_EQ(valuesOf<uint8_t>(e), (std::vector<uint8_t>{0, 1, 0}));
  HostTensor cp(DType::U64, {3}), src = tensorOf<uint64_t>(DType::U64, {1, ~uint64_t(0), 3});
  ASSERT_NO_ERR(runKernel("copy", {&src}, {&cp}));
  EXPECT_EQ(valuesOf<uint64_t>(cp), valuesOf<uint64_t>(src));
}

}  // namespace

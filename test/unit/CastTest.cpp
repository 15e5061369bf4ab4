//===- CastTest.cpp - cast and copy kernels -------------------------------------------------===//
#include "TestUtil.h"

#include <cmath>

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

TEST(Cast, FloatToIntTruncatesTowardZero) {
  HostTensor x(DType::F32, {6}), y(DType::I64, {6}), z(DType::I32, {6});
  float v[] = {-2.7f, -0.5f, 0.0f, 0.9f, 3.99f, 1e6f};
  std::memcpy(x.data<float>(), v, sizeof v);
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&y}));
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&z}));
  int64_t want[] = {-2, 0, 0, 0, 3, 1000000};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(y.data<int64_t>()[i], want[i]);
    EXPECT_EQ(z.data<int32_t>()[i], want[i]);
  }
}

TEST(Cast, ToAndFromBool) {
  HostTensor x(DType::F32, {4}), b(DType::Bool, {4}), back(DType::F32, {4}), i(DType::I64, {4});
  float v[] = {0.0f, -0.0f, 0.25f, -3.0f};
  std::memcpy(x.data<float>(), v, sizeof v);
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&b}));
  uint8_t want[] = {0, 0, 1, 1};
  EXPECT_EQ(0, std::memcmp(b.data<uint8_t>(), want, 4));
  ASSERT_NO_ERR(runKernel("cast", {&b}, {&back}));
  ASSERT_NO_ERR(runKernel("cast", {&b}, {&i}));
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(back.data<float>()[k], want[k]);
    EXPECT_EQ(i.data<int64_t>()[k], want[k]);
  }
}

TEST(Cast, IntToFloat) {
  std::mt19937 rng(1);
  HostTensor x = randomI64({1000}, rng, -1000000, 1000000), y(DType::F32, {1000});
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&y}));
  for (int k = 0; k < 1000; ++k) EXPECT_EQ(y.data<float>()[k], static_cast<float>(x.data<int64_t>()[k]));
}

TEST(Cast, HalfRoundTrip) {
  // Values exactly representable in binary16 survive f32 -> f16 -> f32; others round to nearest.
  HostTensor x(DType::F32, {9}), h(DType::F16, {9}), y(DType::F32, {9});
  float v[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f /*min normal*/, 5.960464477539063e-08f /*min subnormal*/,
               1.0009765625f /*1 + 2^-10*/, 1.00048828125f /*tie: rounds to even = 1*/, 1e6f /*overflow*/};
  std::memcpy(x.data<float>(), v, sizeof v);
  ASSERT_NO_ERR(runKernel("cast", {&x}, {&h}));
  EXPECT_EQ(h.data<uint16_t>()[1], 0x3c00);
  EXPECT_EQ(h.data<uint16_t>()[3], 0x7bff);
  EXPECT_EQ(h.data<uint16_t>()[5], 0x0001);
  ASSERT_NO_ERR(runKernel("cast", {&h}, {&y}));
  float want[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 1.0009765625f, 1.0f, INFINITY};
  for (int k = 0; k < 9; ++k) EXPECT_EQ(y.data<float>()[k], want[k]) << k;
}

TEST(Cast, Copy) {
  std::mt19937 rng(2);
  for (DType d : {DType::F32, DType::I64, DType::Bool}) {
    HostTensor x(d, {3, 1000}), y(d, {3, 1000});
    for (size_t k = 0; k < x.buf.size(); ++k) static_cast<uint8_t *>(x.buf.data())[k] = rng() & 1;
    ASSERT_NO_ERR(runKernel("copy", {&x}, {&y}));
    EXPECT_EQ(0, std::memcmp(x.buf.data(), y.buf.data(), x.buf.size()));
  }
  HostTensor a(DType::F32, {3}), b(DType::I64, {3});
  EXPECT_NE(errorMessage(verifyKernel("copy", {&a}, {&b})).find("use cast"), std::string::npos);
}

}  // namespace

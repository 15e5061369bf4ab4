//===- TestUtil.h - Helpers for runtime unit tests ------------------------------*- C++ -*-===//
#ifndef COLOSSAL_TEST_UNIT_TESTUTIL_H
#define COLOSSAL_TEST_UNIT_TESTUTIL_H

#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/Tensor.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace colossal::runtime::testing {

/// An owned tensor for tests.
struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  AlignedBuffer buf;

  HostTensor() = default;
  HostTensor(DType d, llvm::ArrayRef<int64_t> s)
      : dtype(d), shape(s.begin(), s.end()), buf(numElements(s) * dtypeSize(d)) {}
  int64_t numel() const { return numElements(shape); }
  template <typename T> T *data() { return static_cast<T *>(buf.data()); }
  template <typename T> const T *data() const { return static_cast<const T *>(buf.data()); }
  TensorRef ref() { return TensorRef{dtype, shape, buf.data()}; }
};

HostTensor randomF32(llvm::ArrayRef<int64_t> shape, std::mt19937 &rng, float lo = -1, float hi = 1);
HostTensor randomI64(llvm::ArrayRef<int64_t> shape, std::mt19937 &rng, int64_t lo, int64_t hi);
HostTensor randomBool(llvm::ArrayRef<int64_t> shape, std::mt19937 &rng, double pTrue = 0.5);

/// Builds an instruction's attributes fluently.
struct Attrs {
  plan::Instruction inst;
  Attrs &i(const std::string &name, int64_t v);
  Attrs &f(const std::string &name, double v);
  Attrs &s(const std::string &name, const std::string &v);
  Attrs &ints(const std::string &name, std::vector<int64_t> v);
};

/// Looks up (op, outputs[0].dtype, CPU), checks attribute kinds and verify(), runs prepare (with
/// the inputs of bit mask `constantInputs` marked as plan weights, KernelCall::constantInputs),
/// allocates the workspace and runs the kernel. Returns the first error.
llvm::Error runKernel(const std::string &op, std::vector<HostTensor *> inputs,
                      std::vector<HostTensor *> outputs, const Attrs &attrs = Attrs(),
                      uint64_t constantInputs = 0);

/// Verification only (no run).
llvm::Error verifyKernel(const std::string &op, std::vector<HostTensor *> inputs,
                         std::vector<HostTensor *> outputs, const Attrs &attrs = Attrs());

/// Multi-index helpers for naive references.
std::vector<int64_t> unravel(int64_t index, llvm::ArrayRef<int64_t> shape);
/// Flat index into `shape` (right-aligned, size-1 dims broadcast) of an output multi-index.
int64_t broadcastIndex(llvm::ArrayRef<int64_t> outIndex, llvm::ArrayRef<int64_t> shape);

/// EXPECT that |got - want| <= atol + rtol·|want| elementwise (NaNs must match), reporting the
/// first few mismatches with their index.
void expectClose(const float *got, const float *want, int64_t n, float atol = 1e-5f, float rtol = 1e-5f);

#define ASSERT_NO_ERR(expr)                                                                     \
  do {                                                                                          \
    llvm::Error err_ = (expr);                                                                  \
    ASSERT_FALSE(static_cast<bool>(err_)) << llvm::toString(std::move(err_));                   \
  } while (0)

/// The message of an expected error ("" with a test failure when there was none).
std::string errorMessage(llvm::Error err);

}  // namespace colossal::runtime::testing

#endif

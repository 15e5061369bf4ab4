//===- PlanTest.cpp - Plan validation: each corruption gives its own clear error ------------===//
#include "TestPlans.h"

#include "colossal/runtime/Plan.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace colossal::runtime;
using namespace colossal::runtime::testing;
namespace plan = colossal::plan;

namespace {

class PlanTest : public MlpPlanTest {
protected:
  /// Writes the (modified) plan, loads it and returns the error message ("" on success).
  std::string loadError() {
    std::string p = writePlan();
    auto loaded = loadPlan(p, KernelRegistry::cpu());
    if (loaded) return "";
    return llvm::toString(loaded.takeError());
  }
  void expectError(const std::string &needle) {
    std::string msg = loadError();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
    EXPECT_TRUE(msg.find(".cplan") != std::string::npos || msg.find(".safetensors") != std::string::npos)
        << "message names no file: " << msg;
  }
  plan::Program &prog() { return *model.mutable_programs(0); }
};

TEST(Fnv, KnownVectors) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
  // Incremental hashing equals one-shot hashing.
  EXPECT_EQ(fnv1a64("bar", 3, fnv1a64("foo", 3)), fnv1a64("foobar", 6));
}

TEST_F(PlanTest, ValidPlanLoads) { EXPECT_EQ(loadError(), ""); }

TEST_F(PlanTest, VersionMismatch) {
  model.set_version(kPlanVersion + 1);
  expectError("plan version " + std::to_string(kPlanVersion + 1) + ", this runtime reads version " + std::to_string(kPlanVersion));
}

TEST_F(PlanTest, OffsetOutsideArena) {
  prog().mutable_buffers(6)->set_offset(448 + 64);
  expectError("buffer 6 ('logits'): bytes [512, 560) lie outside the arena of 512 bytes");
}

TEST_F(PlanTest, MisalignedOffset) {
  prog().mutable_buffers(6)->set_offset(390);
  expectError("is not aligned to 64 bytes");
}

TEST_F(PlanTest, BufferIdNotIndex) {
  prog().mutable_buffers(2)->set_id(5);
  expectError("buffer 2 ('fc1.bias'): id 5 does not equal its index 2");
}

TEST_F(PlanTest, SizeBytesMismatch) {
  prog().mutable_buffers(3)->set_size_bytes(100);
  expectError("size_bytes 100 but shape [4, 16] of f32 needs 256");
}

TEST_F(PlanTest, InvalidDType) {
  prog().mutable_buffers(3)->set_dtype(static_cast<plan::DType>(0));
  expectError("invalid dtype 0");
}

TEST_F(PlanTest, UnknownOp) {
  prog().mutable_instructions(2)->set_op("frobnicate");
  expectError("instruction 2 (frobnicate at /act/Relu): unknown op 'frobnicate'");
}

TEST_F(PlanTest, WrongOperandCount) {
  prog().mutable_instructions(1)->add_inputs(2);
  expectError("instruction 1 (add at /fc1/Add): 3 inputs, expected 2");
}

TEST_F(PlanTest, BufferIdOutOfRange) {
  prog().mutable_instructions(0)->set_inputs(0, 42);
  expectError("buffer id 42 out of range");
}

TEST_F(PlanTest, KernelShapeCheck) {
  prog().mutable_buffers(6)->set_shape(1, 4);
  prog().mutable_buffers(6)->set_size_bytes(64);
  prog().mutable_buffers(7)->set_offset(448);
  expectError("instruction 3 (matmul at /fc2/MatMul): output shape [4, 4], expected [4, 3]");
}

TEST_F(PlanTest, UnknownAttribute) {
  (*prog().mutable_instructions(4)->mutable_attrs())["axes"].set_i(1);
  expectError("unknown attribute 'axes' for op 'softmax'");
}

TEST_F(PlanTest, WriteToWeight) {
  prog().mutable_instructions(1)->set_outputs(0, 2);
  expectError("writes read-only WEIGHT buffer 2");
}

TEST_F(PlanTest, BadBindings) {
  prog().mutable_inputs(0)->set_buffer(1);
  expectError("input 'x': bound to a buffer that is not in the arena");
}

TEST_F(PlanTest, NoKernelForDType) {
  prog().mutable_buffers(7)->set_dtype(plan::I64);
  prog().mutable_buffers(7)->set_size_bytes(96);
  prog().set_arena_bytes(576);
  expectError("no cpu kernel for dtype i64");
}

TEST_F(PlanTest, AFlippedByteAnywhereIsACorruptPlan) {
  const std::string bytes = serializePlan(model);
  for (size_t at = 0; at < bytes.size(); at += std::max<size_t>(1, bytes.size() / 97)) {
    SCOPED_TRACE("byte " + std::to_string(at) + " of " + std::to_string(bytes.size()));
    std::string flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    {
      std::error_code ec;
      llvm::raw_fd_ostream os(path("model.cplan"), ec);
      os << flipped;
    }
    auto loaded = loadPlan(path("model.cplan"), KernelRegistry::cpu());
    ASSERT_FALSE(static_cast<bool>(loaded));
    const std::string msg = llvm::toString(loaded.takeError());
    EXPECT_TRUE(msg.find("the plan is corrupt") != std::string::npos ||
                msg.find("not a valid plan file") != std::string::npos)
        << msg;
  }
}

TEST_F(PlanTest, TruncatedPlanFile) {
  const std::string bytes = serializePlan(model);
  for (size_t cut : {size_t(1), size_t(7), bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE("truncated to " + std::to_string(bytes.size() - cut) + " bytes");
    {
      std::error_code ec;
      llvm::raw_fd_ostream os(path("model.cplan"), ec);
      os << bytes.substr(0, bytes.size() - cut);
    }
    auto loaded = loadPlan(path("model.cplan"), KernelRegistry::cpu());
    ASSERT_FALSE(static_cast<bool>(loaded));
    std::string msg = llvm::toString(loaded.takeError());
    EXPECT_NE(msg.find("model.cplan"), std::string::npos) << msg;
  }
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path("model.cplan"), ec);
    os << bytes.substr(0, bytes.size() / 2);
  }
  auto loaded = loadPlan(path("model.cplan"), KernelRegistry::cpu());
  ASSERT_FALSE(static_cast<bool>(loaded));
  EXPECT_NE(llvm::toString(loaded.takeError()).find("not a valid plan file"), std::string::npos);
}

TEST_F(PlanTest, GarbagePlanFile) {
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path("model.cplan"), ec);
    os << "\xff\xff\xff\xff garbage";
  }
  auto loaded = loadPlan(path("model.cplan"), KernelRegistry::cpu());
  ASSERT_FALSE(static_cast<bool>(loaded));
  EXPECT_NE(llvm::toString(loaded.takeError()).find("model.cplan: not a valid plan file"), std::string::npos);
}

TEST_F(PlanTest, WeightsHashMismatch) {
  writePlan();
  // Flip one byte of weight data, keeping the size.
  auto buf = llvm::MemoryBuffer::getFile(path("model.safetensors"));
  ASSERT_TRUE(static_cast<bool>(buf));
  std::string bytes = (*buf)->getBuffer().str();
  bytes[bytes.size() - 5] ^= 0x40;
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path("model.safetensors"), ec);
    os << bytes;
  }
  auto loaded = loadPlan(path("model.cplan"), KernelRegistry::cpu());
  ASSERT_FALSE(static_cast<bool>(loaded));
  std::string msg = llvm::toString(loaded.takeError());
  EXPECT_NE(msg.find("model.safetensors: FNV-1a hash"), std::string::npos) << msg;
  EXPECT_NE(msg.find("recorded in"), std::string::npos) << msg;
}

TEST_F(PlanTest, WeightsSizeMismatch) {
  model.set_weights_size(model.weights_size() + 4);
  expectError("bytes, but");
}

TEST_F(PlanTest, WeightsFileMissing) {
  model.set_weights_file("other.safetensors");
  expectError("other.safetensors: cannot open weights file named by");
}

TEST_F(PlanTest, WeightElementCountMismatch) {
  // fc1.bias's buffer (16 elements) names the 8x16 weight matrix instead.
  prog().mutable_buffers(2)->set_weight_name("fc1.weight");
  expectError("plan expects f32 [16], file has f32 [8, 16]");
}

// A weight buffer may view the stored tensor under another shape with the same element count:
// that is how the compiler's zero-copy reshapes of parameters are recorded.
TEST_F(PlanTest, WeightViewWithSameElementCountLoads) {
  // fc1.bias [16] viewed as [1, 16]: the broadcast add is unchanged.
  prog().mutable_buffers(2)->clear_shape();
  prog().mutable_buffers(2)->add_shape(1);
  prog().mutable_buffers(2)->add_shape(16);
  EXPECT_EQ(loadError(), "");
}

TEST_F(PlanTest, MissingWeightKey) {
  prog().mutable_buffers(2)->set_weight_name("fc1.b");
  expectError("weight 'fc1.b'");
  EXPECT_NE(loadError().find("not in the weights file"), std::string::npos);
}

TEST_F(PlanTest, ValidationHappensBeforeWeightsAreRead) {
  // A broken plan with a missing weights file reports the plan error, not the weights.
  model.set_weights_file("absent.safetensors");
  model.set_version(7);
  expectError("plan version 7");
}

}  // namespace

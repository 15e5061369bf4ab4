//===- SafetensorsTest.cpp - safetensors round trips and malformed files --------------------===//
#include "TestUtil.h"

#include "colossal/runtime/Safetensors.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

class SafetensorsTest : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-st", dir)); }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }
  std::string path(const std::string &name) {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  void writeRaw(const std::string &name, const std::string &header, const std::string &data) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path(name), ec);
    char len[8];
    llvm::support::endian::write64le(len, header.size());
    os.write(len, 8);
    os << header << data;
  }
  llvm::SmallString<128> dir;
};

TEST_F(SafetensorsTest, RoundTrip) {
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> ids = {7, -8, 9};
  uint8_t flags[5] = {1, 0, 1, 1, 0};
  uint16_t half[3] = {0x3c00, 0x4000, 0xc000};  // odd size: the next tensor starts misaligned
  std::vector<double> d = {3.5};
  std::vector<NamedTensor> ts = {
      {"layer.weight", DType::F32, {2, 3}, w.data(), w.size() * 4},
      {"flags", DType::Bool, {5}, flags, 5},
      {"ids", DType::I64, {3}, ids.data(), 24},
      {"half", DType::F16, {3}, half, 6},
      {"scalar", DType::F64, {}, d.data(), 8},
      {"empty", DType::F32, {0, 4}, nullptr, 0},
  };
  ASSERT_NO_ERR(writeSafetensors(path("w.safetensors"), ts, {{"format", "pt"}}));
  auto f = SafetensorsFile::open(path("w.safetensors"));
  ASSERT_TRUE(static_cast<bool>(f)) << llvm::toString(f.takeError());
  EXPECT_EQ((*f)->tensors().size(), ts.size());
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  for (const NamedTensor &t : ts) {
    SCOPED_TRACE(t.name);
    const SafetensorsTensor *r = (*f)->find(t.name);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->dtype, t.dtype);
    EXPECT_EQ(r->shape, t.shape);
    ASSERT_EQ(r->size_bytes, t.size_bytes);
    if (t.size_bytes) EXPECT_EQ(0, std::memcmp(r->data, t.data, t.size_bytes));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data) % dtypeSize(t.dtype), 0u);
  }
  EXPECT_EQ((*f)->find("absent"), nullptr);
  // Data section starts 64-byte aligned.
  auto buf = llvm::MemoryBuffer::getFile(path("w.safetensors"));
  EXPECT_EQ((8 + llvm::support::endian::read64le((*buf)->getBufferStart())) % 64, 0u);
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  float v[2] = {0, 0};
  EXPECT_NE(errorMessage(writeSafetensors(path("a"), {{"x", DType::F32, {3}, v, 8}})).find("needs 12"), std::string::npos);
  EXPECT_NE(errorMessage(writeSafetensors(path("a"), {{"x", DType::F32, {2}, v, 8}, {"x", DType::F32, {2}, v, 8}}))
                .find("duplicate"), std::string::npos);
  EXPECT_NE(errorMessage(writeSafetensors(path("a"), {{"__metadata__", DType::F32, {2}, v, 8}})).find("invalid tensor name"),
            std::string::npos);
  EXPECT_FALSE(llvm::sys::fs::exists(path("a")));
}

TEST_F(SafetensorsTest, MalformedFilesNameTheFile) {
  struct Bad { std::string name, header, data, message; };
  std::vector<Bad> cases = {
      {"json.st", "{not json", "", "malformed safetensors header"},
      {"notobj.st", "[1,2]", "", "not a JSON object"},
      {"dtype.st", R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'), "unsupported dtype 'Q7'"},
      {"size.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", std::string(4, '\0'), "needs 8"},
      {"outside.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0'), "outside the data section"},
      {"overlap.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       std::string(8, '\0'), "overlap"},
      {"offsets.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", std::string(4, '\0'), "invalid data_offsets"},
      {"shape.st", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0'), "invalid shape"},
  };
  for (const Bad &c : cases) {
    SCOPED_TRACE(c.name);
    writeRaw(c.name, c.header, c.data);
    auto f = SafetensorsFile::open(path(c.name));
    ASSERT_FALSE(static_cast<bool>(f));
    std::string msg = llvm::toString(f.takeError());
    EXPECT_NE(msg.find(c.name), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
  }
  // Header length beyond the file, and a file shorter than the length prefix.
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path("len.st"), ec);
    char len[8];
    llvm::support::endian::write64le(len, 1u << 30);
    os.write(len, 8);
    os << "{}";
  }
  auto f = SafetensorsFile::open(path("len.st"));
  ASSERT_FALSE(static_cast<bool>(f));
  EXPECT_NE(llvm::toString(f.takeError()).find("exceeds the file size"), std::string::npos);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path("tiny.st"), ec);
    os << "abc";
  }
  auto g = SafetensorsFile::open(path("tiny.st"));
  ASSERT_FALSE(static_cast<bool>(g));
  EXPECT_NE(llvm::toString(g.takeError()).find("truncated"), std::string::npos);
}

}  // namespace

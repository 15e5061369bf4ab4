//===- NpyTest.cpp - .npy round trips and malformed files -----------------------------------===//
#include "TestUtil.h"

#include "colossal/runtime/Npy.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace colossal::runtime;
using namespace colossal::runtime::testing;

namespace {

class NpyTest : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-npy", dir)); }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }
  std::string path(const std::string &name) {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  void writeRaw(const std::string &name, const std::string &bytes) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path(name), ec);
    os << bytes;
  }
  llvm::SmallString<128> dir;
};

TEST_F(NpyTest, RoundTripEveryDType) {
  for (DType d : {DType::F32, DType::F16, DType::F64, DType::I64, DType::I32, DType::I16, DType::I8, DType::U8, DType::Bool})
    for (std::vector<int64_t> shape : {std::vector<int64_t>{}, {0}, {5}, {2, 3, 4}}) {
      SCOPED_TRACE(dtypeName(d).str() + " " + shapeToString(shape));
      HostTensor t(d, shape);
      for (size_t i = 0; i < t.buf.size(); ++i) static_cast<uint8_t *>(t.buf.data())[i] = d == DType::Bool ? i % 2 : i * 37;
      ASSERT_NO_ERR(writeNpy(path("a.npy"), d, shape, t.buf.data()));
      auto back = readNpy(path("a.npy"));
      ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
      EXPECT_EQ(back->dtype, d);
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(0, std::memcmp(back->data.data(), t.buf.data(), t.buf.size()));
    }
}

TEST_F(NpyTest, HeaderIsNumpyCompatible) {
  float v[3] = {1, 2, 3};
  ASSERT_NO_ERR(writeNpy(path("v.npy"), DType::F32, {3}, v));
  auto buf = llvm::MemoryBuffer::getFile(path("v.npy"));
  ASSERT_TRUE(static_cast<bool>(buf));
  llvm::StringRef bytes = (*buf)->getBuffer();
  EXPECT_TRUE(bytes.starts_with("\x93NUMPY\x01\x00"));
  EXPECT_NE(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"), llvm::StringRef::npos);
  EXPECT_EQ((bytes.size() - 12) % 64, 0u);  // header padded to 64 bytes
}

std::string npyImage(const std::string &dict, const std::string &data, char major = 1) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += major;
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

TEST_F(NpyTest, ReadsNumpyWrittenVariants) {
  std::string data(8, '\0');
  writeRaw("ok.npy", npyImage("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", data));
  auto a = readNpy(path("ok.npy"));
  ASSERT_TRUE(static_cast<bool>(a)) << llvm::toString(a.takeError());
  EXPECT_EQ(a->dtype, DType::I32);
  writeRaw("b.npy", npyImage("{'descr': '|b1', 'fortran_order': False, 'shape': (1, 1), }", std::string(1, '\1')));
  auto b = readNpy(path("b.npy"));
  ASSERT_TRUE(static_cast<bool>(b)) << llvm::toString(b.takeError());
  EXPECT_EQ(b->dtype, DType::Bool);
}

TEST_F(NpyTest, MalformedFilesNameTheFile) {
  struct Bad { std::string name, bytes, message; };
  std::vector<Bad> cases = {
      {"magic.npy", "not numpy at all", "bad magic"},
      {"fortran.npy", npyImage("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0')), "fortran_order"},
      {"bigendian.npy", npyImage("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')), "unsupported dtype '>f4'"},
      {"complex.npy", npyImage("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')), "unsupported dtype"},
      {"short.npy", npyImage("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", std::string(8, '\0')), "truncated"},
      {"long.npy", npyImage("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0')), "unexpected bytes"},
      {"noshape.npy", npyImage("{'descr': '<f4', 'fortran_order': False, }", ""), "shape"},
      {"version.npy", npyImage("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", std::string(4, '\0'), 9), "version"},
      {"header.npy", std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18), "truncated .npy header"},
  };
  for (const Bad &c : cases) {
    SCOPED_TRACE(c.name);
    writeRaw(c.name, c.bytes);
    auto r = readNpy(path(c.name));
    ASSERT_FALSE(static_cast<bool>(r));
    std::string msg = llvm::toString(r.takeError());
    EXPECT_NE(msg.find(c.name), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
  }
  auto missing = readNpy(path("absent.npy"));
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("absent.npy: cannot read"), std::string::npos);
}

TEST_F(NpyTest, Bf16IsNotWritable) {
  uint16_t v = 0;
  EXPECT_NE(errorMessage(writeNpy(path("x.npy"), DType::BF16, {1}, &v)).find("bf16"), std::string::npos);
  EXPECT_FALSE(llvm::sys::fs::exists(path("x.npy")));
}

}  // namespace

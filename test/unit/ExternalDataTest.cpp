//===- ExternalDataTest.cpp - ONNX external data: parsing and confinement to the model -----===//
//
// runtime/ExternalData.h on files made here: the `offset`/`length` texts, the real-path rule
// (symlinks to files and folders leaving the model's folder, `..` that stays inside, the Hugging
// Face cache layout), ranges near 2^63 and non-regular files.
//
//===----------------------------------------------------------------------------------------===//
#include "TestUtil.h"

#include "colossal/runtime/ExternalData.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/stat.h>

using namespace colossal::runtime;

namespace {

class ExternalDataTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("colossal-external-data", dir));
    ASSERT_FALSE(llvm::sys::fs::create_directories(path("model/data")));
    ASSERT_FALSE(llvm::sys::fs::create_directories(path("outside")));
    write("model/w.bin", "0123456789");
    write("outside/secret.bin", "secret");
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }
  std::string path(const std::string &name) {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  void write(const std::string &name, const std::string &bytes) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path(name), ec);
    ASSERT_FALSE(ec) << name;
    os << bytes;
  }
  void link(const std::string &target, const std::string &name) {
    ASSERT_FALSE(llvm::sys::fs::create_link(target, path(name))) << name;
  }

  /// The bytes of location `loc` (offset, length) for the model `model` (relative to dir), or the
  /// error text prefixed with "error: ".
  std::string read(const std::string &loc, uint64_t offset = 0, std::optional<uint64_t> length = {},
                   const std::string &model = "model/m.onnx") {
    auto buf = readExternalData(path(model), ExternalDataRef{loc, offset, length});
    if (!buf) return "error: " + llvm::toString(buf.takeError());
    return (*buf)->getBuffer().str();
  }
  static std::string parseError(llvm::StringRef key, llvm::StringRef value) {
    auto ref = parseExternalDataRef({{"location", "w.bin"}, {key, value}});
    return ref ? "" : llvm::toString(ref.takeError());
  }

  llvm::SmallString<128> dir;
};

TEST_F(ExternalDataTest, ParsesOffsetAndLength) {
  auto ref = parseExternalDataRef({{"location", "w.bin"}, {"offset", "9223372036854775807"},
                                   {"length", "0"}, {"checksum", "ignored"}});
  ASSERT_TRUE(static_cast<bool>(ref)) << llvm::toString(ref.takeError());
  EXPECT_EQ(ref->location, "w.bin");
  EXPECT_EQ(ref->offset, 9223372036854775807ull);
  EXPECT_EQ(ref->length, std::optional<uint64_t>(0));
  EXPECT_EQ(parseError("offset", "-1"), "external data offset '-1' is negative");
  EXPECT_EQ(parseError("length", "-99999999999999999999"), "external data length '-99999999999999999999' is negative");
  EXPECT_EQ(parseError("offset", "9223372036854775808"), "external data offset '9223372036854775808' is too large (above 2^63-1)");
  EXPECT_EQ(parseError("length", "12kb"), "external data length '12kb' is not a number");
  EXPECT_EQ(parseError("length", ""), "external data length '' is not a number");
  auto none = parseExternalDataRef({{"offset", "0"}});
  ASSERT_FALSE(static_cast<bool>(none));
  EXPECT_EQ(llvm::toString(none.takeError()), "external data without a location");
}

TEST_F(ExternalDataTest, ReadsRangesInsideTheFolder) {
  EXPECT_EQ(read("w.bin"), "0123456789");
  EXPECT_EQ(read("w.bin", 2, 3), "234");
  EXPECT_EQ(read("w.bin", 10), "");
  EXPECT_EQ(read("data/../w.bin", 8), "89");
  link("w.bin", "model/alias.bin");  // a symlink that stays inside
  EXPECT_EQ(read("alias.bin", 0, 4), "0123");
  link("..", "model/data/up");  // a folder symlink that stays inside
  EXPECT_EQ(read("data/up/w.bin", 9, 1), "9");
}

TEST_F(ExternalDataTest, RefusesWhatLeavesTheFolder) {
  link("../outside/secret.bin", "model/link.bin");
  link("../outside", "model/linkdir");
  std::string outside = "outside the model's folder '";
  for (const char *loc : {"link.bin", "linkdir/secret.bin", "../outside/secret.bin", "data/../../outside/secret.bin"}) {
    std::string msg = read(loc);
    EXPECT_NE(msg.find("error: external data location '" + std::string(loc) + "' resolves to '"), std::string::npos) << msg;
    EXPECT_NE(msg.find("outside/secret.bin', " + outside), std::string::npos) << msg;
  }
  EXPECT_EQ(read(path("model/w.bin")), "error: external data location '" + path("model/w.bin") +
                                           "' must be a relative path inside the model's folder");
  std::string missing = read("absent.bin");
  EXPECT_NE(missing.find("error: cannot read external data '"), std::string::npos) << missing;
  // A missing file outside is refused as outside: nothing there is probed.
  for (const char *loc : {"../outside/absent.bin", "nowhere/../../outside/absent.bin"}) {
    std::string msg = read(loc);
    EXPECT_NE(msg.find("outside/absent.bin', " + outside), std::string::npos) << msg;
  }
}

TEST_F(ExternalDataTest, HuggingFaceCacheLayout) {
  // snapshots/rev/{m.onnx, w.bin} -> ../../blobs/{b1, b2}: the data lies beside the model's real path.
  ASSERT_FALSE(llvm::sys::fs::create_directories(path("hf/blobs")));
  ASSERT_FALSE(llvm::sys::fs::create_directories(path("hf/snapshots/rev")));
  write("hf/blobs/b1", "model bytes");
  write("hf/blobs/b2", "weights");
  link("../../blobs/b1", "hf/snapshots/rev/m.onnx");
  link("../../blobs/b2", "hf/snapshots/rev/w.bin");
  EXPECT_EQ(read("w.bin", 0, {}, "hf/snapshots/rev/m.onnx"), "weights");
  // A real model file does not widen the rule: its folder alone counts.
  write("hf/snapshots/rev/real.onnx", "model bytes");
  std::string msg = read("w.bin", 0, {}, "hf/snapshots/rev/real.onnx");
  EXPECT_NE(msg.find("resolves to '"), std::string::npos) << msg;
}

TEST_F(ExternalDataTest, RangesNearTwoToThe63) {
  const uint64_t big = 9223372036854775807ull;
  EXPECT_EQ(read("w.bin", big, 24), "error: external data range [9223372036854775807, "
                                    "9223372036854775831) exceeds 'w.bin' (10 bytes)");
  EXPECT_EQ(read("w.bin", 4, big), "error: external data range [4, 9223372036854775811) exceeds "
                                   "'w.bin' (10 bytes)");
  EXPECT_EQ(read("w.bin", big), "error: external data offset 9223372036854775807 exceeds 'w.bin' (10 bytes)");
  EXPECT_EQ(read("w.bin", 11), "error: external data offset 11 exceeds 'w.bin' (10 bytes)");
}

TEST_F(ExternalDataTest, RefusesNonRegularFiles) {
  std::string msg = read("data");
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  ASSERT_EQ(::mkfifo(path("model/fifo").c_str(), 0600), 0);
  msg = read("fifo");  // must not block
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

}  // namespace

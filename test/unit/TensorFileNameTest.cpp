//===- TensorFileNameTest.cpp - Tensor names as file names, without collisions -------------===//
#include "TestUtil.h"

#include "colossal/runtime/TensorFileName.h"

#include "llvm/ADT/StringExtras.h"

#include <set>

using namespace colossal::runtime;

namespace {

/// Decodes %XX (the inverse of the escaping, for names that were not shortened).
std::string decode(llvm::StringRef file) {
  std::string out;
  for (size_t i = 0; i < file.size(); ++i) {
    if (file[i] != '%') {
      out += file[i];
      continue;
    }
    unsigned v = 0;
    EXPECT_FALSE(file.substr(i + 1, 2).getAsInteger(16, v)) << file.str();
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

TEST(TensorFileNameTest, EscapesWhatIsNotSafe) {
  EXPECT_EQ(tensorFileName("logits", ".npy"), "logits.npy");
  EXPECT_EQ(tensorFileName("present.0.key", ".npy"), "present.0.key.npy");
  EXPECT_EQ(tensorFileName("a/b", ".npy"), "a%2Fb.npy");
  EXPECT_EQ(tensorFileName("a:b", ".npy"), "a%3Ab.npy");
  EXPECT_EQ(tensorFileName("a_b", ".npy"), "a_b.npy");
  EXPECT_EQ(tensorFileName("50%", ".npy"), "50%25.npy");
  EXPECT_EQ(tensorFileName(".", ".npy"), "%2E.npy");
  EXPECT_EQ(tensorFileName("..", ".npy"), "%2E..npy");
  EXPECT_EQ(tensorFileName(".hidden", ".npy"), "%2Ehidden.npy");
  EXPECT_EQ(tensorFileName("", ".npy"), "%.npy");
  EXPECT_EQ(tensorFileName("a b~\xc3\xa9", ".npy"), "a%20b%7E%C3%A9.npy");
  for (const char *name : {"a/b", "a:b", "50%", ".hidden", "a b~\xc3\xa9", "x\ny"})
    EXPECT_EQ(decode(llvm::StringRef(tensorFileName(name, ""))), name);
}

TEST(TensorFileNameTest, DistinctNamesGiveDistinctFiles) {
  std::vector<std::string> names = {"a/b", "a:b", "a_b", "a%2Fb", "a.b", ".ab", "ab", "", "%"};
  for (int c = 0; c < 256; ++c) names.push_back(std::string("x") + static_cast<char>(c));
  auto files = tensorFileNames(names, ".npy", "outputs");
  ASSERT_TRUE(static_cast<bool>(files)) << llvm::toString(files.takeError());
  EXPECT_EQ(std::set<std::string>(files->begin(), files->end()).size(), names.size());
}

TEST(TensorFileNameTest, LongNamesAreShortenedWithAHash) {
  std::string a(300, 'a'), b = a;
  b.back() = 'b';
  std::string fa = tensorFileName(a, ".npy"), fb = tensorFileName(b, ".npy");
  EXPECT_EQ(fa.size(), kMaxFileNameBytes);
  EXPECT_NE(fa, fb);
  EXPECT_EQ(fa.substr(0, 234), std::string(234, 'a'));
  EXPECT_EQ(fa.substr(234, 1), "~");
  EXPECT_TRUE(llvm::StringRef(fa).ends_with(".npy"));
  // Exactly at the limit: kept whole.
  std::string fits(251, 'c');
  EXPECT_EQ(tensorFileName(fits, ".npy"), fits + ".npy");
  EXPECT_EQ(tensorFileName(fits + "c", ".npy").size(), kMaxFileNameBytes);
  // An escape is never cut: whatever the position of '/', the kept prefix ends before a '%' or
  // after its two hex digits.
  for (size_t at = 225; at < 240; ++at) {
    std::string name(300, 'd');
    name[at] = '/';
    std::string f = tensorFileName(name, ".npy");
    size_t tilde = f.find('~');
    ASSERT_NE(tilde, std::string::npos) << f;
    size_t pct = f.find('%');
    EXPECT_TRUE(pct == std::string::npos || pct + 3 <= tilde) << f;
    EXPECT_LE(f.size(), kMaxFileNameBytes);
  }
}

}  // namespace

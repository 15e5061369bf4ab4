//===- StreamDetokenizerTest.cpp - Streamed text never splits a UTF-8 character -------------===//
//
// A byte tokenizer (id b = byte b, id 256 special) feeds every split of UTF-8 text, and ill-formed
// bytes, through StreamDetokenizer; the expected U+FFFD substitutions are those of The Unicode
// Standard §3.9 ("U+FFFD Substitution of Maximal Subparts", Table 3-8's example).
//
//===----------------------------------------------------------------------------------------===//
#include "TokenizerTestUtil.h"

#include "colossal/runtime/serve/StreamDetokenizer.h"

#include <gtest/gtest.h>

using namespace colossal::runtime::serve;
using namespace colossal::runtime::serve::testing;

namespace {

class ByteTokenizer final : public Tokenizer {
public:
  TokenizerFormat format() const override { return TokenizerFormat::Llama2c; }
  int32_t vocabSize() const override { return 257; }
  TokenId bosId() const override { return 256; }
  TokenId eosId() const override { return 256; }
  bool isSpecial(TokenId id) const override { return id == 256; }
  llvm::Expected<std::vector<TokenId>> encode(llvm::StringRef text, bool addBos) const override {
    std::vector<TokenId> ids;
    if (addBos) ids.push_back(256);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  void appendTokenBytes(TokenId id, bool, std::string &out) const override {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
  }
};

/// The chunks of streaming `bytes` one byte per token.
std::vector<std::string> chunks(llvm::StringRef bytes, std::string *finished = nullptr) {
  ByteTokenizer tok;
  StreamDetokenizer stream(tok, true);
  std::vector<std::string> out;
  for (unsigned char c : bytes) out.push_back(stream.push(c));
  const std::string last = stream.finish();
  if (finished) *finished = last;
  return out;
}

TEST(StreamDetokenizer, HoldsBackIncompleteCharacters) {
  std::string last;
  // "é" (2 bytes), "€" (3), "🙂" (4): nothing until the last byte of each.
  EXPECT_EQ(chunks("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x99\x82", &last),
            (std::vector<std::string>{"a", "", "\xC3\xA9", "", "", "\xE2\x82\xAC", "", "", "", "\xF0\x9F\x99\x82"}));
  EXPECT_EQ(last, "");
  // A special token in the middle of a character stands for nothing and waits with it.
  ByteTokenizer tok;
  StreamDetokenizer stream(tok);
  EXPECT_EQ(stream.push(0xF0), "");
  EXPECT_EQ(stream.push(256), "");
  EXPECT_EQ(stream.push(0x9F), "");
  EXPECT_EQ(stream.pendingBytes(), 2u);
  EXPECT_EQ(stream.push(0x99), "");
  EXPECT_EQ(stream.push(0x82), "\xF0\x9F\x99\x82");
  EXPECT_EQ(stream.pendingBytes(), 0u);
}

TEST(StreamDetokenizer, IllFormedBytesBecomeReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  std::string last;
  std::string all;
  // The Unicode Standard's Table 3-8 example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 reads
  // a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
  for (const std::string &c : chunks("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", &last)) all += c;
  EXPECT_EQ(all + last, "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d");
  // Overlong, surrogate, above U+10FFFF: each byte its own subpart.
  all.clear();
  for (const std::string &c : chunks("\xC0\xAF\xED\xA0\x80\xF4\x90\x80\x80", &last)) all += c;
  EXPECT_EQ(all + last, fffd + fffd + fffd + fffd + fffd + fffd + fffd + fffd + fffd);
  // An incomplete character at the end of the stream: one U+FFFD from finish().
  all.clear();
  for (const std::string &c : chunks("ok\xF0\x9F\x99", &last)) all += c;
  EXPECT_EQ(all, "ok");
  EXPECT_EQ(last, fffd);
}

TEST(StreamDetokenizer, EveryChunkIsValidUtf8OnTestStrings) {
  ByteTokenizer tok;
  const std::vector<std::string> strings = unicodeTestStrings(300);
  for (const std::string &s : strings) {
    StreamDetokenizer stream(tok, true);
    std::string text;
    const std::vector<TokenId> ids = *tok.encode(s, true);
    for (TokenId id : ids) {
      const std::string chunk = stream.push(id);
      ASSERT_TRUE(isValidUtf8(chunk)) << escaped(chunk);
      text += chunk;
    }
    text += stream.finish();
    ASSERT_EQ(text, s);
  }
}

}  // namespace

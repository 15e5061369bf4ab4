//===- ByteTokenizer.h - a byte-level test tokenizer -----------------------------*- C++ -*-===//
//
// The serving unit tests' tokenizer: ids 0-2 are special (1 BOS, 2 EOS), byte b is id b + 3, so
// every string round-trips. `vocab` (default 259) may be larger, to test a vocabulary the model
// does not cover.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_TEST_UNIT_BYTETOKENIZER_H
#define COLOSSAL_TEST_UNIT_BYTETOKENIZER_H

#include "colossal/runtime/serve/Tokenizer.h"

#include <string>
#include <vector>

namespace colossal::runtime::testing {

class ByteTokenizer : public serve::Tokenizer {
public:
  explicit ByteTokenizer(int32_t vocab = 259) : vocab_(vocab) {}
  serve::TokenizerFormat format() const override { return serve::TokenizerFormat::Llama2c; }
  int32_t vocabSize() const override { return vocab_; }
  serve::TokenId bosId() const override { return 1; }
  serve::TokenId eosId() const override { return 2; }
  llvm::Expected<std::vector<serve::TokenId>> encode(llvm::StringRef text, bool addBos) const override {
    std::vector<serve::TokenId> ids;
    if (addBos) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(c + 3);
    return ids;
  }
  void appendTokenBytes(serve::TokenId id, bool, std::string &out) const override {
    if (id >= 3 && id < 259) out += static_cast<char>(id - 3);
  }
  bool isSpecial(serve::TokenId id) const override { return id < 3; }

private:
  int32_t vocab_;
};

}  // namespace colossal::runtime::testing

#endif

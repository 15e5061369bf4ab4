//===- StreamDetokenizer.cpp - Token ids to text chunks that never split a character -------===//
#include "colossal/runtime/serve/StreamDetokenizer.h"

#include "Unicode.h"

namespace colossal::runtime::serve {

namespace {
constexpr llvm::StringLiteral kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// The length of the maximal subpart at the start of `bytes` that is a proper prefix of a
/// well-formed sequence but not one (at least 1).
size_t maximalSubpart(llvm::StringRef bytes) {
  for (size_t len = std::min<size_t>(bytes.size(), 3); len > 1; --len)
    if (utf8SequenceLength(bytes.take_front(len)) == -1) return len;
  return 1;
}
}  // namespace

std::string takeCompleteUtf8(std::string &bytes, bool final) {
  std::string text;
  llvm::StringRef rest = bytes;
  while (!rest.empty()) {
    const int n = utf8SequenceLength(rest);
    if (n > 0) {
      text.append(rest.data(), n);
      rest = rest.drop_front(n);
    } else if (n == -1 && !final) {
      break;  // an incomplete character: wait for its other bytes
    } else {
      text += kReplacement;
      rest = rest.drop_front(n == -1 ? rest.size() : maximalSubpart(rest));
    }
  }
  bytes.erase(0, bytes.size() - rest.size());
  return text;
}

std::string StreamDetokenizer::push(TokenId id) {
  if (tokenizer_.isSpecial(id)) return std::string();
  tokenizer_.appendTokenBytes(id, atStart_, pending_);
  atStart_ = false;
  return takeCompleteUtf8(pending_, /*final=*/false);
}

std::string StreamDetokenizer::finish() { return takeCompleteUtf8(pending_, /*final=*/true); }

}  // namespace colossal::runtime::serve

//===- StreamDetokenizer.h - Token ids to text, one token at a time -------------*- C++ -*-===//
//
// A stream of generated tokens becomes a stream of text chunks, each valid UTF-8 that never ends
// inside a character: a token's bytes may end in the middle of a character (byte tokens,
// byte-level BPE splitting an emoji across tokens), and those bytes wait for the tokens that
// complete them. Bytes that cannot begin or continue a well-formed character (The Unicode
// Standard §3.9, Table 3-7) become U+FFFD, one per maximal ill-formed subpart (§3.9 "U+FFFD
// Substitution of Maximal Subparts"); at the end of the stream, an incomplete character left over
// also becomes U+FFFD. For text the tokenizer decodes to valid UTF-8, the chunks concatenate to
// exactly Tokenizer::decode of the same ids.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_STREAMDETOKENIZER_H
#define COLOSSAL_RUNTIME_SERVE_STREAMDETOKENIZER_H

#include "colossal/runtime/serve/Tokenizer.h"

namespace colossal::runtime::serve {

class StreamDetokenizer {
public:
  /// `atSequenceStart`: the first text token pushed starts the sequence (its dummy-prefix space is
  /// dropped, as in decode); false when the tokens continue a prompt.
  explicit StreamDetokenizer(const Tokenizer &tokenizer, bool atSequenceStart = false)
      : tokenizer_(tokenizer), atStart_(atSequenceStart) {}

  /// The text that token `id` completes (possibly empty: a special token, or bytes held back).
  std::string push(TokenId id);
  /// The end of the stream: what is held back, as U+FFFD (empty when nothing is).
  std::string finish();
  /// Bytes held back (a proper prefix of a UTF-8 character).
  size_t pendingBytes() const { return pending_.size(); }

private:
  const Tokenizer &tokenizer_;
  bool atStart_;
  std::string pending_;
};

/// Whether the text of tokens generated after `prompt` starts a sequence (StreamDetokenizer's
/// `atSequenceStart`): the prompt is empty or ends at the tokenizer's BOS. So a completion's first
/// dummy-prefix space is dropped only right after BOS, as llama2.c's run.c drops it.
inline bool completionStartsSequence(const Tokenizer &tokenizer, llvm::ArrayRef<TokenId> prompt) {
  return prompt.empty() || (tokenizer.bosId() >= 0 && prompt.back() == tokenizer.bosId());
}

/// The longest prefix of `bytes` that holds only whole characters and ill-formed bytes, as text:
/// ill-formed subparts replaced by U+FFFD; an incomplete character at the end is left in `bytes`
/// (all of `bytes` is consumed when `final`, the incomplete tail then becoming one U+FFFD).
std::string takeCompleteUtf8(std::string &bytes, bool final);

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_STREAMDETOKENIZER_H

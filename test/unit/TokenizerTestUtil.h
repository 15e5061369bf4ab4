//===- TokenizerTestUtil.h - Test strings and reference runs for tokenizer tests -*- C++ -*-===//
#ifndef COLOSSAL_TEST_UNIT_TOKENIZERTESTUTIL_H
#define COLOSSAL_TEST_UNIT_TOKENIZERTESTUTIL_H

#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace colossal::runtime::serve::testing {

/// Deterministic test strings, valid UTF-8: hand-picked cases (contractions, whitespace runs,
/// emoji sequences, CJK, control characters, special-token look-alikes) followed by random
/// mixtures of ASCII words, punctuation, Unicode whitespace runs, Latin/Greek/Cyrillic/Arabic/
/// Hebrew/Devanagari/Thai letters, combining marks, CJK, kana, Hangul, full-width forms, emoji
/// with ZWJ, skin tones and flags, C0/C1 controls, numbers of other scripts and arbitrary scalar
/// values — `randomCount` of them.
std::vector<std::string> unicodeTestStrings(int randomCount = 1000);

/// Deterministic strings of arbitrary bytes: ill-formed and truncated UTF-8, lone continuation
/// bytes, 0xC0/0xF5..0xFF, NUL, mixed with text.
std::vector<std::string> byteTestStrings(int count = 200);

/// Writes the strings as (uint32 little-endian length, bytes) records, what the reference
/// scripts read.
void writeStrings(llvm::StringRef path, llvm::ArrayRef<std::string> strings);

/// Runs `program` with `args` (args[0] is the program), stdout and stderr to `logPath`; returns
/// the exit code (-1 when it could not start or ran past `timeoutSeconds`).
int runProgram(llvm::StringRef program, llvm::ArrayRef<std::string> args, llvm::StringRef logPath,
               unsigned timeoutSeconds = 300);

/// The contents of a file ("" when it cannot be read).
std::string readFile(llvm::StringRef path);

/// Lines of a reference output: each the ids before an optional tab, and the text after it.
struct ReferenceLine {
  std::vector<TokenId> ids;
  std::string rest;
};
std::vector<ReferenceLine> readReferenceLines(llvm::StringRef path);

/// A printable form of bytes for failure messages (C escapes).
std::string escaped(llvm::StringRef bytes);
std::string joinIds(llvm::ArrayRef<TokenId> ids);

/// True when `text` is valid UTF-8.
bool isValidUtf8(llvm::StringRef text);

}  // namespace colossal::runtime::serve::testing

#endif  // COLOSSAL_TEST_UNIT_TOKENIZERTESTUTIL_H

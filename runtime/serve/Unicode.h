//===- Unicode.h - UTF-8 decoding and the character classes of GPT-2's pattern -*- C++ -*-===//
#ifndef COLOSSAL_RUNTIME_SERVE_UNICODE_H
#define COLOSSAL_RUNTIME_SERVE_UNICODE_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace colossal::runtime::serve {

/// The length of the well-formed UTF-8 sequence at the start of `bytes` (1..4, The Unicode Standard §3.9,
/// Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF), 0 when it is not one, or
/// -1 when `bytes` is a proper prefix of one (more bytes may complete it).
int utf8SequenceLength(llvm::StringRef bytes);

/// Decodes the character at `bytes[pos]`. On a well-formed sequence: returns its code point and
/// sets `length`. Otherwise: returns -1 and `length` = 1 (one byte that is no character).
int32_t decodeUtf8At(llvm::StringRef bytes, size_t pos, int &length);

/// Appends the UTF-8 encoding of `codePoint` (a Unicode scalar value).
void appendUtf8(uint32_t codePoint, std::string &out);

/// General category L (letter), general category N (number), property White_Space — the
/// \p{L}, \p{N} and \s of the GPT-2 pattern, from the tables in UnicodeTables.inc.
bool isLetter(int32_t codePoint);
bool isNumber(int32_t codePoint);
bool isWhiteSpace(int32_t codePoint);

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_UNICODE_H

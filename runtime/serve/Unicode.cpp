//===- Unicode.cpp - UTF-8 decoding and character classes -----------------------------------===//
#include "Unicode.h"

#include <algorithm>
#include <iterator>

namespace colossal::runtime::serve {
namespace {

struct CodePointRange {
  int32_t first, last;
};
#include "UnicodeTables.inc"

template <size_t N> bool inRanges(const CodePointRange (&ranges)[N], int32_t cp) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                             [](int32_t v, const CodePointRange &r) { return v < r.first; });
  return it != std::begin(ranges) && cp <= std::prev(it)->last;
}

}  // namespace

int utf8SequenceLength(llvm::StringRef bytes) {
  if (bytes.empty()) return -1;
  const unsigned char b0 = bytes[0];
  if (b0 < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;       // no overlongs
    else if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    else if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else
    return 0;
  for (int i = 1; i < need; ++i) {
    if (static_cast<size_t>(i) >= bytes.size()) return -1;
    const unsigned char b = bytes[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return need;
}

int32_t decodeUtf8At(llvm::StringRef bytes, size_t pos, int &length) {
  const int n = utf8SequenceLength(bytes.substr(pos));
  if (n <= 0) {
    length = 1;
    return -1;
  }
  length = n;
  const auto *p = reinterpret_cast<const unsigned char *>(bytes.data() + pos);
  if (n == 1) return p[0];
  int32_t cp = p[0] & (0x7F >> n);
  for (int i = 1; i < n; ++i) cp = (cp << 6) | (p[i] & 0x3F);
  return cp;
}

void appendUtf8(uint32_t cp, std::string &out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool isLetter(int32_t cp) { return cp >= 0 && inRanges(kLetterRanges, cp); }
bool isNumber(int32_t cp) { return cp >= 0 && inRanges(kNumberRanges, cp); }
bool isWhiteSpace(int32_t cp) { return cp >= 0 && inRanges(kWhiteSpaceRanges, cp); }

}  // namespace colossal::runtime::serve

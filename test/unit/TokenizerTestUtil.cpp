//===- TokenizerTestUtil.cpp - Test strings and reference runs for tokenizer tests ----------===//
#include "TokenizerTestUtil.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <random>

namespace colossal::runtime::serve::testing {

namespace {

void appendUtf8(uint32_t cp, std::string &out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

/// A generator that depends only on the seed (std::mt19937's sequence is fixed by the standard;
/// the distributions are not, so they are written here).
struct Rng {
  std::mt19937 engine;
  explicit Rng(uint32_t seed) : engine(seed) {}
  uint32_t below(uint32_t n) { return engine() % n; }
  uint32_t between(uint32_t lo, uint32_t hi) { return lo + below(hi - lo + 1); }
  template <typename T> const T &pick(llvm::ArrayRef<T> items) { return items[below(items.size())]; }
};

struct Range {
  uint32_t lo, hi;
};

const char *const kWords[] = {
    "the", "a", "hello", "world", "Hello", "WORLD", "don't", "I'm", "you'll", "we've", "they're", "it's",
    "she'd", "I'M", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''", "12345", "3.14", "1,000", "x86_64",
    "foo_bar", "C++", "e-mail", "<s>", "</s>", "<unk>", "<|endoftext|>", "<0x41>", "naïve", "café", "Straße",
    "Ελληνικά", "русский", "日本語", "中文", "한국어", "עברית", "العربية", "हिन्दी", "ไทย", "🤗", "🎉🎉",
    "👨‍👩‍👧‍👦", "👍🏽", "🇫🇷", "❤️", "e\xCC\x81", "ﬁ", "½", "²", "①", "Ⅻ", "http://example.com/a?b=c",
    "tab\there", "line\nbreak", "crlf\r\n", "    indented", "trailing   ", "\xE2\x80\x8B", "\xEF\xBB\xBF",
};
const uint32_t kSpaces[] = {' ', ' ', ' ', '\t', '\n', '\r', 0x0B, 0x0C, 0x85, 0xA0, 0x1680, 0x2003, 0x2009,
                            0x200B, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF};
const Range kScripts[] = {
    {'a', 'z'},         {'A', 'Z'},         {'0', '9'},         {'!', '/'},         {':', '@'},
    {'[', '`'},         {'{', '~'},         {0xC0, 0x17F},      {0x391, 0x3C9},     {0x410, 0x44F},
    {0x5D0, 0x5EA},     {0x627, 0x64A},     {0x660, 0x669},     {0x905, 0x939},     {0x966, 0x96F},
    {0xE01, 0xE2E},     {0x300, 0x36F},     {0x4E00, 0x9FFF},   {0x3041, 0x3096},   {0x30A1, 0x30FA},
    {0xAC00, 0xD7A3},   {0xFF01, 0xFF5E},   {0x2000, 0x206F},   {0x20A0, 0x20C0},   {0x2150, 0x218B},
    {0x2460, 0x24FF},   {0x1F600, 0x1F64F}, {0x1F300, 0x1F5FF}, {0x1F900, 0x1F9FF}, {0x1F1E6, 0x1F1FF},
    {0x1F3FB, 0x1F3FF}, {0x1, 0x1F},        {0x7F, 0x9F},       {0x10000, 0x1FFFF}, {0x20000, 0x2FFFF},
};

uint32_t randomScalar(Rng &rng) {
  for (;;) {
    const uint32_t cp = rng.between(1, 0x10FFFF);
    if (cp < 0xD800 || cp > 0xDFFF) return cp;
  }
}

std::string randomText(Rng &rng) {
  std::string s;
  const uint32_t parts = rng.between(1, 24);
  for (uint32_t p = 0; p < parts; ++p) {
    switch (rng.below(10)) {
    case 0:
    case 1: s += rng.pick(llvm::ArrayRef(kWords)); break;
    case 2: {  // a whitespace run
      const uint32_t ch = rng.pick(llvm::ArrayRef(kSpaces)), n = rng.between(1, 6);
      for (uint32_t i = 0; i < n; ++i) appendUtf8(ch, s);
      break;
    }
    case 3: appendUtf8(rng.pick(llvm::ArrayRef(kSpaces)), s); break;
    case 4:  // a run of the same character (long merges)
      for (uint32_t i = 0, n = rng.between(2, 12), ch = rng.between('a', 'c'); i < n; ++i) s.push_back(char(ch));
      break;
    case 5: appendUtf8(randomScalar(rng), s); break;
    case 6: s.push_back(' '); [[fallthrough]];
    default: {  // a few characters of one script
      const Range r = rng.pick(llvm::ArrayRef(kScripts));
      for (uint32_t i = 0, n = rng.between(1, 6); i < n; ++i) appendUtf8(rng.between(r.lo, r.hi), s);
      if (rng.below(4) == 0) appendUtf8(0x200D, s);  // ZWJ
      break;
    }
    }
  }
  return s;
}

}  // namespace

std::vector<std::string> unicodeTestStrings(int randomCount) {
  std::vector<std::string> out = {
      "", " ", "  ", "\n", "\t\t", " \n ", "a", "Hello, world!", "Hello  world", "hello\n\nworld\n", "   leading",
      "trailing \t\n", "don't stop", "I'm here, you're there, it'll work", "'s's's", "x's", " 's", "!!!???...",
      "1234567890", "3.14159 2.71828", "12 345 6789", "日本語のテキストです。", "中文字符测试", "한국어 텍스트",
      "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
      "😀😃😄😁", "👨‍👩‍👧‍👦 family", "👍🏻👍🏼👍🏽👍🏾👍🏿", "🇯🇵🇺🇸🇩🇪", "❤️‍🔥", "e\xCC\x81 vs \xC3\xA9",
      "ﬁ ﬂ ﬀ", "Ａｂｃ１２３", "½ ¼ ² ³ ①", "\x01\x02\x1b[0m\x7f", std::string("a\0b\0", 4), "\xC2\x85\xC2\xA0\xE3\x80\x80",
      "\xE2\x80\xA8\xE2\x80\xA9", "\xEF\xBB\xBF" "bom", "<s>text</s>", "<|endoftext|>", "a<|endoftext|>b",
      "<unk> <0x41>", "    def f(x):\n        return x\n", "{\"json\": [1, 2, 3]}", "a\r\nb\r\n",
  };
  Rng rng(20261201);
  for (int i = 0; i < randomCount; ++i) out.push_back(randomText(rng));
  return out;
}

std::vector<std::string> byteTestStrings(int count) {
  const char *const fragments[] = {"\x80", "\xBF", "\xC0\xAF", "\xC3", "\xE2\x82", "\xF0\x9F\x98", "\xFF",
                                   "\xF5\x80\x80\x80", "\xED\xA0\x80", "\xE0\x80\x80", "\xF4\x90\x80\x80",
                                   "a", " ", "é", "🙂", "the", "\n"};
  std::vector<std::string> out;
  Rng rng(77);
  for (int i = 0; i < count; ++i) {
    std::string s;
    const uint32_t parts = rng.between(1, 16);
    for (uint32_t p = 0; p < parts; ++p) {
      if (rng.below(3) == 0) s.push_back(char(rng.below(256)));
      else s += rng.pick(llvm::ArrayRef(fragments));
    }
    out.push_back(std::move(s));
  }
  return out;
}

void writeStrings(llvm::StringRef path, llvm::ArrayRef<std::string> strings) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  for (const std::string &s : strings) {
    const uint32_t n = s.size();
    const char len[4] = {char(n), char(n >> 8), char(n >> 16), char(n >> 24)};
    os.write(len, 4);
    os << s;
  }
}

int runProgram(llvm::StringRef program, llvm::ArrayRef<std::string> args, llvm::StringRef logPath,
               unsigned timeoutSeconds) {
  std::vector<llvm::StringRef> argv(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, logPath, logPath};
  std::string err;
  const int rc = llvm::sys::ExecuteAndWait(program, argv, std::nullopt, redirects, timeoutSeconds, 0, &err);
  return rc < 0 ? -1 : rc;
}

std::string readFile(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

std::vector<ReferenceLine> readReferenceLines(llvm::StringRef path) {
  std::vector<ReferenceLine> out;
  const std::string text = readFile(path);
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).split(lines, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (llvm::StringRef line : lines) {
    auto [idsText, rest] = line.split('\t');
    ReferenceLine r;
    llvm::SmallVector<llvm::StringRef> fields;
    idsText.split(fields, ' ', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef f : fields) {
      int id = -1;
      f.getAsInteger(10, id);
      r.ids.push_back(id);
    }
    r.rest = rest.str();
    out.push_back(std::move(r));
  }
  return out;
}

std::string escaped(llvm::StringRef bytes) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << '"';
  llvm::printEscapedString(bytes, os);
  os << '"';
  return out;
}

std::string joinIds(llvm::ArrayRef<TokenId> ids) {
  std::string out;
  for (TokenId id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return "[" + out + "]";
}

bool isValidUtf8(llvm::StringRef text) {
  // The Unicode Standard §3.9, Table 3-7, written out independently of runtime/serve/Unicode.cpp.
  const std::string copy = text.str();
  for (size_t i = 0; i < copy.size();) {
    const unsigned char b = copy[i];
    const int n = b < 0x80                  ? 1
                  : (b >= 0xC2 && b <= 0xDF) ? 2
                  : (b >= 0xE0 && b <= 0xEF) ? 3
                  : (b >= 0xF0 && b <= 0xF4) ? 4
                                             : 0;
    if (n == 0 || i + n > copy.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const unsigned char c = copy[i + k];
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t minimum[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < minimum[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace colossal::runtime::serve::testing

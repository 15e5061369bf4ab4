//===- ByteLevelBpeTokenizer.cpp - Hugging Face tokenizer.json, byte-level BPE -------------===//
//
// The GPT-2 scheme (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"
// §2.2; the `tokenizers` library's ByteLevel pre-tokenizer and BPE model):
//  1. Added tokens are cut out of the text first (at each position the longest added token that
//     starts there, leftmost first); they become their ids as they are.
//  2. Each remaining piece is split by the GPT-2 pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     (matched here by hand: `nextPreToken`), with \s = White_Space.
//  3. The UTF-8 bytes of each pre-token map to printable characters (bytes_to_unicode: the bytes
//     '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves, the other 68 for U+0100 upward in byte
//     order); the vocabulary and merges are written in those characters.
//  4. BPE: start from one symbol per byte and merge the adjacent pair of lowest merge rank until
//     no pair has a rank (the leftmost pair among equal ranks).
// Decoding maps each token's characters back to bytes.
//
//===----------------------------------------------------------------------------------------===//
#include "TokenizerFormats.h"
#include "Unicode.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <array>
#include <queue>

namespace colossal::runtime::serve {
namespace {

/// GPT-2's bytes_to_unicode: the printable character each byte is written as.
std::array<uint32_t, 256> byteToCodePoint() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? b : next++;
  }
  return map;
}

enum class CharClass { Letter, Number, Space, Other };

/// Code points of a piece of text, each with its byte span; a byte that is no UTF-8 character
/// counts as one character of class Other (so any bytes still encode, byte by byte).
struct Chars {
  std::vector<CharClass> cls;
  std::vector<int32_t> cp;
  std::vector<size_t> offset;  // byte offset of each character; offset[size] = end
};

Chars classify(llvm::StringRef text) {
  Chars c;
  for (size_t pos = 0; pos < text.size();) {
    int len;
    const int32_t cp = decodeUtf8At(text, pos, len);
    c.cp.push_back(cp);
    c.cls.push_back(isLetter(cp) ? CharClass::Letter
                    : isNumber(cp) ? CharClass::Number
                    : isWhiteSpace(cp) ? CharClass::Space
                                       : CharClass::Other);
    c.offset.push_back(pos);
    pos += len;
  }
  c.offset.push_back(text.size());
  return c;
}

/// The end (in characters) of the GPT-2 pattern's match at character `i`.
size_t nextPreToken(const Chars &c, size_t i) {
  const size_t n = c.cls.size();
  auto cp = [&](size_t k) { return k < n ? c.cp[k] : -2; };
  // 's|'t|'re|'ve|'m|'ll|'d
  if (cp(i) == '\'') {
    const int32_t a = cp(i + 1), b = cp(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
  const size_t start = cp(i) == ' ' && i + 1 < n && c.cls[i + 1] != CharClass::Space ? i + 1 : i;
  if (c.cls[start] != CharClass::Space) {
    const CharClass run = c.cls[start];
    size_t end = start + 1;
    while (end < n && c.cls[end] == run) ++end;
    return end;
  }
  // '\s+(?!\S)': a whitespace run up to the end, or all of it but the character before a
  // non-space; else '\s+'.
  size_t end = i;
  while (end < n && c.cls[end] == CharClass::Space) ++end;
  if (end < n && end - i >= 2) return end - 1;
  return end;
}

struct MergeRule {
  int32_t rank;
  TokenId merged;
};

class ByteLevelBpeTokenizer final : public Tokenizer {
public:
  TokenizerFormat format() const override { return TokenizerFormat::HuggingFaceByteLevelBpe; }
  int32_t vocabSize() const override { return static_cast<int32_t>(bytes_.size()); }
  TokenId bosId() const override { return bos_; }
  TokenId eosId() const override { return eos_; }
  bool isSpecial(TokenId id) const override { return id >= 0 && id < vocabSize() && special_[id]; }

  void appendTokenBytes(TokenId id, bool, std::string &out) const override {
    if (id < 0 || id >= vocabSize() || special_[id]) return;
    out += bytes_[id];
  }

  llvm::Expected<std::vector<TokenId>> encode(llvm::StringRef text, bool addBos) const override {
    std::vector<TokenId> ids;
    if (addBos && bos_ >= 0) ids.push_back(bos_);
    size_t segment = 0;
    for (size_t pos = 0; pos < text.size();) {
      const AddedToken *added = addedTokenAt(text, pos);
      if (!added) {
        ++pos;
        continue;
      }
      encodeSegment(text.slice(segment, pos), ids);
      ids.push_back(added->id);
      pos += added->content.size();
      segment = pos;
    }
    encodeSegment(text.substr(segment), ids);
    return ids;
  }

  static llvm::Expected<std::unique_ptr<Tokenizer>> load(llvm::StringRef path, llvm::StringRef contents);

private:
  struct AddedToken {
    std::string content;
    TokenId id;
    bool special;
  };

  // Loading, one part of the file each (load calls them in this order).
  llvm::Error readOptions(const llvm::json::Object &root, const llvm::json::Object &model);
  llvm::Error readVocab(const llvm::json::Object &model);
  llvm::Error readAddedTokens(const llvm::json::Object &root, std::vector<AddedToken> &added);
  llvm::Error readMerges(const llvm::json::Object &model);
  void chooseBosEos(llvm::ArrayRef<AddedToken> added);
  /// "PATH: tokenizer.json: MESSAGE".
  llvm::Error fail(const llvm::Twine &message) const;

  const AddedToken *addedTokenAt(llvm::StringRef text, size_t pos) const {
    const AddedToken *best = nullptr;
    for (const AddedToken &t : addedByFirstByte_[static_cast<unsigned char>(text[pos])])
      if ((!best || t.content.size() > best->content.size()) && text.substr(pos).starts_with(t.content)) best = &t;
    return best;
  }

  void encodeSegment(llvm::StringRef segment, std::vector<TokenId> &ids) const {
    if (segment.empty()) return;
    std::string prefixed;
    if (addPrefixSpace_ && !segment.starts_with(" ")) {
      prefixed = " " + segment.str();
      segment = prefixed;
    }
    if (!useRegex_) return encodeWord(segment, ids);
    const Chars chars = classify(segment);
    for (size_t i = 0; i < chars.cls.size();) {
      const size_t end = nextPreToken(chars, i);
      encodeWord(segment.slice(chars.offset[i], chars.offset[end]), ids);
      i = end;
    }
  }

  /// BPE over the bytes of one pre-token: a linked list of symbols and a heap of the adjacent
  /// pairs that have a merge rank.
  void encodeWord(llvm::StringRef word, std::vector<TokenId> &ids) const {
    if (ignoreMerges_) {
      std::string mapped;
      for (unsigned char b : word) appendUtf8(byteToCodePoint_[b], mapped);
      auto it = vocab_.find(mapped);
      if (it != vocab_.end()) return ids.push_back(it->second);
    }
    const int n = static_cast<int>(word.size());
    std::vector<TokenId> sym(n);
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) {
      sym[i] = byteToken_[static_cast<unsigned char>(word[i])];
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Candidate {
      int32_t rank;
      int left;
      TokenId leftId, rightId, merged;
      bool operator<(const Candidate &o) const {  // min-heap on (rank, left)
        return rank != o.rank ? rank > o.rank : left > o.left;
      }
    };
    std::priority_queue<Candidate> heap;
    auto push = [&](int left) {
      if (left < 0 || next[left] < 0) return;
      auto it = merges_.find(pairKey(sym[left], sym[next[left]]));
      if (it != merges_.end()) heap.push({it->second.rank, left, sym[left], sym[next[left]], it->second.merged});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const int right = next[c.left];
      if (sym[c.left] != c.leftId || right < 0 || sym[right] != c.rightId || sym[c.left] < 0) continue;
      sym[c.left] = c.merged;
      sym[right] = -1;
      next[c.left] = next[right];
      if (next[right] >= 0) prev[next[right]] = c.left;
      push(prev[c.left]);
      push(c.left);
    }
    for (int i = 0; i >= 0 && i < n; i = next[i]) ids.push_back(sym[i]);
  }

  static uint64_t pairKey(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  std::array<uint32_t, 256> byteToCodePoint_ = byteToCodePoint();
  std::array<TokenId, 256> byteToken_{};
  llvm::StringMap<TokenId> vocab_;          // byte-level characters -> id
  llvm::DenseMap<uint64_t, MergeRule> merges_;
  std::vector<std::string> bytes_;          // what each id decodes to
  std::vector<bool> special_;
  std::vector<std::vector<AddedToken>> addedByFirstByte_ = std::vector<std::vector<AddedToken>>(256);
  TokenId bos_ = -1, eos_ = -1;
  std::string path_;
  bool addPrefixSpace_ = false, useRegex_ = true, ignoreMerges_ = false;
};

/// A token name in tokenizer_config.json: a string or an object with "content".
std::string jsonTokenName(const llvm::json::Value *v) {
  if (v) {
    if (auto s = v->getAsString()) return s->str();
    if (const auto *o = v->getAsObject())
      if (auto s = o->getString("content")) return s->str();
  }
  return std::string();
}

/// bos_token / eos_token of a tokenizer_config.json beside the tokenizer.json, if there is one.
void readConfigTokens(llvm::StringRef path, std::string &bos, std::string &eos) {
  llvm::SmallString<256> config = llvm::sys::path::parent_path(path);
  llvm::sys::path::append(config, "tokenizer_config.json");
  auto buffer = llvm::MemoryBuffer::getFile(config);
  if (!buffer) return;
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json) return llvm::consumeError(json.takeError());
  if (const auto *o = json->getAsObject()) {
    bos = jsonTokenName(o->get("bos_token"));
    eos = jsonTokenName(o->get("eos_token"));
  }
}

llvm::Error ByteLevelBpeTokenizer::fail(const llvm::Twine &message) const {
  return tokenizerError(path_, "tokenizer.json: " + message);
}

llvm::Expected<std::unique_ptr<Tokenizer>> ByteLevelBpeTokenizer::load(llvm::StringRef path, llvm::StringRef contents) {
  auto tok = std::make_unique<ByteLevelBpeTokenizer>();
  tok->path_ = path.str();
  auto parsed = llvm::json::parse(contents);
  if (!parsed) return tok->fail("not valid JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root) return tok->fail("the top level is not an object");
  const llvm::json::Object *model = root->getObject("model");
  if (!model) return tok->fail("no \"model\" object");
  std::vector<AddedToken> added;
  if (llvm::Error e = tok->readOptions(*root, *model)) return std::move(e);
  if (llvm::Error e = tok->readVocab(*model)) return std::move(e);
  if (llvm::Error e = tok->readAddedTokens(*root, added)) return std::move(e);
  if (llvm::Error e = tok->readMerges(*model)) return std::move(e);
  tok->chooseBosEos(added);
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

llvm::Error ByteLevelBpeTokenizer::readOptions(const llvm::json::Object &root, const llvm::json::Object &model) {
  const auto modelType = model.getString("type");
  if (!modelType || *modelType != "BPE")
    return fail("model type '" + (modelType ? *modelType : llvm::StringRef("(none)")) +
                "' is not supported (only BPE with a ByteLevel pre-tokenizer)");
  const llvm::json::Object *pre = root.getObject("pre_tokenizer");
  const auto preType = pre ? pre->getString("type") : std::nullopt;
  if (!preType || *preType != "ByteLevel")
    return fail("pre_tokenizer '" + (preType ? *preType : llvm::StringRef("(none)")) +
                "' is not supported (only ByteLevel, the GPT-2 scheme)");
  if (const llvm::json::Value *norm = root.get("normalizer"); norm && norm->kind() != llvm::json::Value::Null)
    return fail("a normalizer is not supported (GPT-2 style byte-level BPE has none)");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (auto s = model.getString(key); s && !s->empty())
      return fail(llvm::Twine("model.") + key + " '" + *s + "' is not supported");
  if (model.getBoolean("byte_fallback").value_or(false)) return fail("model.byte_fallback is not supported");
  addPrefixSpace_ = pre->getBoolean("add_prefix_space").value_or(false);
  useRegex_ = pre->getBoolean("use_regex").value_or(true);
  ignoreMerges_ = model.getBoolean("ignore_merges").value_or(false);
  return llvm::Error::success();
}

/// model.vocab: the ids, what each decodes to (its characters mapped back to bytes), and the
/// token of every byte.
llvm::Error ByteLevelBpeTokenizer::readVocab(const llvm::json::Object &model) {
  const llvm::json::Object *vocab = model.getObject("vocab");
  if (!vocab) return fail("model.vocab is not an object");
  int64_t maxId = -1;
  for (const auto &[key, value] : *vocab) {
    auto id = value.getAsInteger();
    if (!id || *id < 0 || *id > INT32_MAX) return fail("model.vocab['" + key.str() + "'] is not an id");
    vocab_[key.str()] = static_cast<TokenId>(*id);
    maxId = std::max(maxId, *id);
  }
  bytes_.resize(maxId + 1);
  special_.assign(maxId + 1, false);
  std::array<int, 0x200> codePointToByte;
  codePointToByte.fill(-1);
  for (int b = 0; b < 256; ++b) codePointToByte[byteToCodePoint_[b]] = b;
  for (const auto &entry : vocab_) {
    llvm::StringRef chars = entry.getKey();
    std::string &out = bytes_[entry.getValue()];
    for (size_t pos = 0; pos < chars.size();) {
      int len;
      const int32_t cp = decodeUtf8At(chars, pos, len);
      if (cp >= 0 && cp < 0x200 && codePointToByte[cp] >= 0) out.push_back(static_cast<char>(codePointToByte[cp]));
      else out.append(chars.data() + pos, len);  // not a byte-level character: its own text
      pos += len;
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    appendUtf8(byteToCodePoint_[b], ch);
    auto it = vocab_.find(ch);
    if (it == vocab_.end())
      return fail("model.vocab has no token for byte 0x" + llvm::utohexstr(b, false, 2) + " ('" + ch +
                  "'): not a byte-level vocabulary");
    byteToken_[b] = it->second;
  }
  return llvm::Error::success();
}

/// added_tokens: matched in the text before anything else; `special` ones stand for no text.
llvm::Error ByteLevelBpeTokenizer::readAddedTokens(const llvm::json::Object &root, std::vector<AddedToken> &added) {
  const llvm::json::Array *list = root.getArray("added_tokens");
  if (!list) return llvm::Error::success();
  for (size_t i = 0; i < list->size(); ++i) {
    const llvm::json::Object *t = (*list)[i].getAsObject();
    auto content = t ? t->getString("content") : std::nullopt;
    auto id = t ? t->getInteger("id") : std::nullopt;
    if (!content || content->empty() || !id || *id < 0 || *id > INT32_MAX)
      return fail("added_tokens[" + llvm::Twine(i) + "] needs a non-empty content and an id");
    for (const char *flag : {"lstrip", "rstrip", "single_word"})
      if (t->getBoolean(flag).value_or(false))
        return fail("added_tokens[" + llvm::Twine(i) + "] ('" + *content + "'): " + flag + " is not supported");
    added.push_back({content->str(), static_cast<TokenId>(*id), t->getBoolean("special").value_or(false)});
  }
  for (const AddedToken &t : added) {
    if (t.id >= vocabSize()) {
      bytes_.resize(t.id + 1);
      special_.resize(t.id + 1, false);
    }
    bytes_[t.id] = t.content;
    special_[t.id] = t.special;
    addedByFirstByte_[static_cast<unsigned char>(t.content[0])].push_back(t);
  }
  return llvm::Error::success();
}

/// model.merges: "A B" strings or [A, B] pairs, in rank order.
llvm::Error ByteLevelBpeTokenizer::readMerges(const llvm::json::Object &model) {
  const llvm::json::Array *merges = model.getArray("merges");
  if (!merges) return fail("model.merges is not an array");
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const llvm::json::Value &m = (*merges)[rank];
    std::string left, right;
    if (auto s = m.getAsString()) {
      auto [l, r] = s->split(' ');
      if (r.empty() || r.contains(' '))
        return fail("model.merges[" + llvm::Twine(rank) + "] '" + *s + "' is not 'A B'");
      left = l.str(), right = r.str();
    } else if (const auto *pair = m.getAsArray(); pair && pair->size() == 2 && (*pair)[0].getAsString() &&
                                                   (*pair)[1].getAsString()) {
      left = (*pair)[0].getAsString()->str(), right = (*pair)[1].getAsString()->str();
    } else {
      return fail("model.merges[" + llvm::Twine(rank) + "] is neither 'A B' nor [A, B]");
    }
    auto l = vocab_.find(left), r = vocab_.find(right), lr = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || lr == vocab_.end())
      return fail("model.merges[" + llvm::Twine(rank) + "] ('" + left + "', '" + right +
                  "') merges tokens that are not all in model.vocab");
    // A pair listed twice keeps its first (lowest) rank.
    merges_.try_emplace(pairKey(l->second, r->second), MergeRule{static_cast<int32_t>(rank), lr->second});
  }
  return llvm::Error::success();
}

/// BOS/EOS: tokenizer_config.json's bos_token/eos_token when it sits beside the file, else the
/// first special added token of a conventional name (GPT-2's <|endoftext|> is both).
void ByteLevelBpeTokenizer::chooseBosEos(llvm::ArrayRef<AddedToken> added) {
  std::string bosName, eosName;
  readConfigTokens(path_, bosName, eosName);
  auto find = [&](const std::string &configured, std::initializer_list<llvm::StringRef> names) -> TokenId {
    if (!configured.empty()) {
      for (const AddedToken &t : added)
        if (t.content == configured) return t.id;
      return -1;
    }
    for (llvm::StringRef name : names)
      for (const AddedToken &t : added)
        if (t.content == name && t.special) return t.id;
    return -1;
  };
  bos_ = find(bosName, {"<|begin_of_text|>", "<s>", "<|startoftext|>", "<|endoftext|>"});
  eos_ = find(eosName, {"<|end_of_text|>", "</s>", "<|endoftext|>"});
}

}  // namespace

llvm::Expected<std::unique_ptr<Tokenizer>> loadByteLevelBpeTokenizer(llvm::StringRef path, llvm::StringRef contents) {
  return ByteLevelBpeTokenizer::load(path, contents);
}

}  // namespace colossal::runtime::serve

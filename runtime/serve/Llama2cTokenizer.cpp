//===- Llama2cTokenizer.cpp - llama2.c tokenizer.bin ----------------------------------------===//
//
// Encoding is llama2.c run.c's `encode`: a dummy-prefix " " token, then one token per UTF-8
// character (at most 4 bytes: a lead byte and the continuation bytes after it) when the vocabulary
// holds it, else one byte token per byte (id = byte + 3); then, while some adjacent pair
// concatenates to a vocabulary piece, merge the pair whose piece has the highest score (the
// leftmost pair among equal scores). Here the "best pair" search runs over a heap of candidate
// pairs instead of rescanning the sequence, which picks the same pair at every step.
//
//===----------------------------------------------------------------------------------------===//
#include "TokenizerFormats.h"

#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <cstring>
#include <queue>

namespace colossal::runtime::serve {
namespace {

constexpr TokenId kBos = 1, kEos = 2, kFirstByteToken = 3;
/// run.c starts its best-score search at -1e10: a merge whose piece scores no higher never happens.
constexpr float kNoMergeScore = -1e10f;

bool isContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

/// The byte a piece "<0xHH>" stands for, or -1.
int bytePiece(llvm::StringRef piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece.back() != '>') return -1;
  unsigned value;
  if (piece.substr(3, 2).getAsInteger(16, value)) return -1;
  return static_cast<int>(value);
}

class Llama2cTokenizer final : public Tokenizer {
public:
  Llama2cTokenizer(std::vector<std::string> pieces, std::vector<float> scores)
      : pieces_(std::move(pieces)), scores_(std::move(scores)) {
    bytes_.resize(pieces_.size());
    for (size_t id = 0; id < pieces_.size(); ++id) {
      // Lookup by piece; a duplicated piece keeps its lowest id.
      lookup_.try_emplace(pieces_[id], static_cast<TokenId>(id));
      const int b = bytePiece(pieces_[id]);
      bytes_[id] = b >= 0 ? std::string(1, static_cast<char>(b)) : pieces_[id];
    }
  }

  TokenizerFormat format() const override { return TokenizerFormat::Llama2c; }
  int32_t vocabSize() const override { return static_cast<int32_t>(pieces_.size()); }
  TokenId bosId() const override { return kBos; }
  TokenId eosId() const override { return kEos; }
  bool isSpecial(TokenId id) const override { return id == kBos || id == kEos; }

  void appendTokenBytes(TokenId id, bool atStart, std::string &out) const override {
    if (id < 0 || id >= vocabSize() || isSpecial(id)) return;
    llvm::StringRef piece = bytes_[id];
    // run.c drops the space a piece starts with right after BOS; a byte token stays as it is.
    if (atStart && bytePiece(pieces_[id]) < 0 && piece.starts_with(" ")) piece = piece.drop_front();
    out.append(piece.data(), piece.size());
  }

  llvm::Expected<std::vector<TokenId>> encode(llvm::StringRef text, bool addBos) const override {
    std::vector<TokenId> tokens;
    if (addBos) tokens.push_back(kBos);
    if (!text.empty()) appendPiece(" ", tokens);
    for (size_t i = 0; i < text.size();) {
      size_t end = i + 1;
      while (end < text.size() && end - i < 4 && isContinuation(text[end])) ++end;
      appendPiece(text.substr(i, end - i), tokens);
      i = end;
    }
    mergePairs(tokens);
    return tokens;
  }

private:
  /// The piece's token, or its bytes as byte tokens.
  void appendPiece(llvm::StringRef piece, std::vector<TokenId> &tokens) const {
    auto it = lookup_.find(piece);
    if (it != lookup_.end()) {
      tokens.push_back(it->second);
      return;
    }
    for (unsigned char c : piece) tokens.push_back(kFirstByteToken + c);
  }

  /// The id of pieces[left] + pieces[right] and its score, or -1.
  TokenId mergedId(TokenId left, TokenId right) const {
    std::string merged = pieces_[left] + pieces_[right];
    auto it = lookup_.find(merged);
    if (it == lookup_.end() || !(scores_[it->second] > kNoMergeScore)) return -1;
    return it->second;
  }

  void mergePairs(std::vector<TokenId> &tokens) const {
    const int n = static_cast<int>(tokens.size());
    if (n < 2) return;
    // A doubly linked list over positions; a merge keeps the left position.
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    struct Candidate {
      float score;
      int left;
      TokenId leftId, rightId, merged;
      bool operator<(const Candidate &o) const {  // max-heap: highest score, then leftmost
        return score != o.score ? score < o.score : left > o.left;
      }
    };
    std::priority_queue<Candidate> heap;
    auto push = [&](int left) {
      if (left < 0 || next[left] < 0) return;
      const TokenId m = mergedId(tokens[left], tokens[next[left]]);
      if (m >= 0) heap.push({scores_[m], left, tokens[left], tokens[next[left]], m});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    std::vector<bool> alive(n, true);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const int right = next[c.left];
      if (!alive[c.left] || right < 0 || tokens[c.left] != c.leftId || tokens[right] != c.rightId) continue;
      tokens[c.left] = c.merged;
      alive[right] = false;
      next[c.left] = next[right];
      if (next[right] >= 0) prev[next[right]] = c.left;
      push(prev[c.left]);
      push(c.left);
    }
    std::vector<TokenId> merged;
    for (int i = 0; i >= 0; i = next[i]) merged.push_back(tokens[i]);
    tokens = std::move(merged);
  }

  std::vector<std::string> pieces_;  // as stored in the file
  std::vector<std::string> bytes_;   // what each id decodes to (byte tokens: their byte)
  std::vector<float> scores_;
  llvm::StringMap<TokenId> lookup_;
};

}  // namespace

llvm::Expected<std::unique_ptr<Tokenizer>> loadLlama2cTokenizer(llvm::StringRef path, llvm::StringRef contents) {
  auto readInt32 = [&](size_t offset) {
    int32_t v;
    std::memcpy(&v, contents.data() + offset, 4);
    return v;
  };
  const int32_t maxTokenLength = readInt32(0);
  std::vector<std::string> pieces;
  std::vector<float> scores;
  size_t offset = 4;
  while (offset < contents.size()) {
    const size_t token = pieces.size();
    if (contents.size() - offset < 8)
      return tokenizerError(path, "llama2.c tokenizer.bin truncated at byte " + llvm::Twine(offset) + ": token " +
                                      llvm::Twine(token) + " needs a float32 score and an int32 length (8 bytes), " +
                                      llvm::Twine(contents.size() - offset) + " left");
    float score;
    std::memcpy(&score, contents.data() + offset, 4);
    const int32_t length = readInt32(offset + 4);
    if (!std::isfinite(score))
      return tokenizerError(path, "llama2.c tokenizer.bin: token " + llvm::Twine(token) + " (byte " +
                                      llvm::Twine(offset) + ") has a non-finite score");
    if (length < 0 || length > maxTokenLength)
      return tokenizerError(path, "llama2.c tokenizer.bin: token " + llvm::Twine(token) + " (byte " +
                                      llvm::Twine(offset + 4) + ") has length " + llvm::Twine(length) +
                                      ", outside [0, max_token_length " + llvm::Twine(maxTokenLength) + "]");
    offset += 8;
    if (contents.size() - offset < static_cast<size_t>(length))
      return tokenizerError(path, "llama2.c tokenizer.bin truncated at byte " + llvm::Twine(offset) + ": token " +
                                      llvm::Twine(token) + " has " + llvm::Twine(length) + " bytes, " +
                                      llvm::Twine(contents.size() - offset) + " left");
    pieces.emplace_back(contents.substr(offset, length));
    scores.push_back(score);
    offset += length;
  }
  // Ids 0..2 are <unk>, BOS and EOS, 3..258 the byte tokens that every byte falls back to.
  if (pieces.size() < kFirstByteToken + 256)
    return tokenizerError(path, "llama2.c tokenizer.bin holds " + llvm::Twine(pieces.size()) +
                                    " tokens; it needs at least 259 (<unk>, BOS, EOS and the 256 byte tokens)");
  for (int b = 0; b < 256; ++b)
    if (bytePiece(pieces[kFirstByteToken + b]) != b)
      return tokenizerError(path, "llama2.c tokenizer.bin: token " + llvm::Twine(kFirstByteToken + b) + " is '" +
                                      pieces[kFirstByteToken + b] + "', not the byte token for byte " +
                                      llvm::Twine(b) + " (ids 3..258 must be <0x00>..<0xFF>)");
  return std::make_unique<Llama2cTokenizer>(std::move(pieces), std::move(scores));
}

}  // namespace colossal::runtime::serve

//===- Tokenizer.h - Text to token ids and back, for serving ---------------------*- C++ -*-===//
//
// One interface over the three tokenizer file formats the server reads (docs/serving.md
// "Tokenizers"); `loadTokenizer` picks the format from the file's contents:
//
//   llama2.c `tokenizer.bin`   int32 max_token_length, then per token: float32 score, int32 byte
//                              length, the bytes. Id 0 <unk>, 1 BOS, 2 EOS, 3..258 the byte tokens
//                              <0x00>..<0xFF>. Encoding is llama2.c run.c's `encode`.
//   SentencePiece `.model`     through libsentencepiece (Debian libsentencepiece-dev).
//   Hugging Face `tokenizer.json` with a byte-level BPE model (GPT-2 style: ByteLevel
//                              pre-tokenizer and decoder, merges by rank, added tokens).
//
// A loaded tokenizer is immutable: its methods may be called from several threads at once.
// Token ids are int32 in [0, vocabSize()). Text is bytes: UTF-8 for the SentencePiece and
// tokenizer.json formats (an invalid sequence is encoded byte by byte by the byte-level BPE and
// passed to the library by SentencePiece), any bytes for llama2.c.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_TOKENIZER_H
#define COLOSSAL_RUNTIME_SERVE_TOKENIZER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colossal::runtime::serve {

using TokenId = int32_t;

/// The file formats `loadTokenizer` reads.
enum class TokenizerFormat { Llama2c, SentencePiece, HuggingFaceByteLevelBpe };

/// The name docs and errors use for `format`: "llama2.c tokenizer.bin", "SentencePiece model",
/// "tokenizer.json (byte-level BPE)".
llvm::StringRef formatName(TokenizerFormat format);

class Tokenizer {
public:
  virtual ~Tokenizer();

  virtual TokenizerFormat format() const = 0;
  /// Number of ids; every id a method returns or accepts is below it.
  virtual int32_t vocabSize() const = 0;
  /// The begin-of-sequence id `encode(..., addBos=true)` puts first, or -1 when the tokenizer has
  /// none (a tokenizer.json without a BOS-like special token).
  virtual TokenId bosId() const = 0;
  /// The end-of-sequence id that stops generation, or -1 when the tokenizer has none.
  virtual TokenId eosId() const = 0;

  /// Token ids of `text`, with bosId() first when `addBos` and the tokenizer has a BOS.
  /// Errors: the SentencePiece library refused the text (its message).
  virtual llvm::Expected<std::vector<TokenId>> encode(llvm::StringRef text, bool addBos) const = 0;

  /// Appends the bytes token `id` stands for to `out`. `atStart`: `id` is the first text token of
  /// the sequence, whose leading space is the dummy prefix that llama2.c and SentencePiece
  /// (add_dummy_prefix) put before the text, and is dropped. Special tokens (BOS, EOS, control and
  /// special added tokens) stand for no bytes. A byte token stands for one byte, so a token's bytes
  /// may end inside a UTF-8 character (StreamDetokenizer holds those back). An id outside
  /// [0, vocabSize()) appends nothing.
  virtual void appendTokenBytes(TokenId id, bool atStart, std::string &out) const = 0;

  /// True for ids that stand for no text (BOS, EOS, control, special added tokens).
  virtual bool isSpecial(TokenId id) const = 0;

  /// The bytes of `ids`: appendTokenBytes of each, `atStart` for the first non-special one.
  /// decode(encode(s, addBos)) == s for every text s the format round-trips (docs/serving.md).
  std::string decode(llvm::ArrayRef<TokenId> ids) const;
};

/// Reads a tokenizer file; the format comes from its contents: a JSON object is a tokenizer.json,
/// a file whose int32 header is a plausible max_token_length (1..1024) is a llama2.c
/// tokenizer.bin, anything else is handed to SentencePiece. A folder stands for the first of
/// tokenizer.json, tokenizer.model, tokenizer.bin in it (a Hugging Face model folder). Errors name the file and say what is
/// wrong: unreadable, truncated (with the byte offset and token index), a token longer than
/// max_token_length, a non-finite score, JSON that does not parse (line and column), a
/// tokenizer.json model other than BPE with a ByteLevel pre-tokenizer, a merge of unknown tokens,
/// a SentencePiece model the library rejects, or a build without SentencePiece.
llvm::Expected<std::unique_ptr<Tokenizer>> loadTokenizer(llvm::StringRef path);

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_TOKENIZER_H

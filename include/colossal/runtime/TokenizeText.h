//===- TokenizeText.h - Text files to a token file with a model's tokenizer ----*- C++ -*-===//
//
// `colossal-run M.cplan tokenize --tokenizer FILE --text TEXT... --out TOKENS.bin` (docs/training.md
// "Runtime"): the training data of a model whose vocabulary is not bytes (a pretrained Llama and its
// tokenizer.bin, say), in the token file format `train --data` reads (TokenData.h).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TOKENIZETEXT_H
#define COLOSSAL_RUNTIME_TOKENIZETEXT_H

#include "colossal/runtime/DType.h"
#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace colossal::runtime {

/// What tokenizeTextFiles wrote.
struct TokenizedText {
  int64_t files = 0;   // documents
  int64_t bytes = 0;   // of text read
  int64_t tokens = 0;  // ids written, BOS included
};

/// Encodes each of `files` as one document — the tokenizer's BOS (when it has one), then
/// `tokenizer.encode(contents)` (whole, so llama2.c's and SentencePiece's dummy-prefix space comes
/// once per document) — and writes the ids of all documents, in order, to `outPath` as
/// little-endian `tokenDType` (U8 or U16), through a temporary file and a rename.
/// Errors (each naming the file): a text file unreadable, or the same file as `outPath`; the
/// tokenizer's vocabulary does not fit `tokenDType` (more than 256 ids for U8, 65536 for U16); the
/// tokenizer's own encoding errors; I/O errors writing `outPath`.
llvm::Expected<TokenizedText> tokenizeTextFiles(const serve::Tokenizer &tokenizer, llvm::ArrayRef<std::string> files,
                                                DType tokenDType, llvm::StringRef outPath);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_TOKENIZETEXT_H

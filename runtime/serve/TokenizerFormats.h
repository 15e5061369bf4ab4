//===- TokenizerFormats.h - The loaders behind loadTokenizer -------------------*- C++ -*-===//
//
// One loader per file format; `loadTokenizer` (Tokenizer.cpp) reads the file and picks one.
// Each gets the file's path (for its errors) and its whole contents.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_TOKENIZERFORMATS_H
#define COLOSSAL_RUNTIME_SERVE_TOKENIZERFORMATS_H

#include "colossal/runtime/serve/Tokenizer.h"

namespace colossal::runtime::serve {

/// llama2.c tokenizer.bin (Llama2cTokenizer.cpp).
llvm::Expected<std::unique_ptr<Tokenizer>> loadLlama2cTokenizer(llvm::StringRef path, llvm::StringRef contents);
/// SentencePiece ModelProto (SentencePieceTokenizer.cpp, or an error in a build without the library).
llvm::Expected<std::unique_ptr<Tokenizer>> loadSentencePieceTokenizer(llvm::StringRef path, llvm::StringRef contents);
/// Hugging Face tokenizer.json with a byte-level BPE model (ByteLevelBpeTokenizer.cpp).
llvm::Expected<std::unique_ptr<Tokenizer>> loadByteLevelBpeTokenizer(llvm::StringRef path, llvm::StringRef contents);

/// An llvm::Error "PATH: MESSAGE".
llvm::Error tokenizerError(llvm::StringRef path, const llvm::Twine &message);

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_TOKENIZERFORMATS_H

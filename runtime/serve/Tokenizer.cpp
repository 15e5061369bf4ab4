//===- Tokenizer.cpp - Format detection and the shared decode -------------------------------===//
#include "colossal/runtime/serve/Tokenizer.h"

#include "TokenizerFormats.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstring>

namespace colossal::runtime::serve {

Tokenizer::~Tokenizer() = default;

llvm::StringRef formatName(TokenizerFormat format) {
  switch (format) {
  case TokenizerFormat::Llama2c: return "llama2.c tokenizer.bin";
  case TokenizerFormat::SentencePiece: return "SentencePiece model";
  case TokenizerFormat::HuggingFaceByteLevelBpe: return "tokenizer.json (byte-level BPE)";
  }
  return "unknown";
}

llvm::Error tokenizerError(llvm::StringRef path, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), (path + ": " + message).str());
}

std::string Tokenizer::decode(llvm::ArrayRef<TokenId> ids) const {
  std::string out;
  bool atStart = true;
  for (TokenId id : ids) {
    if (isSpecial(id)) continue;
    appendTokenBytes(id, atStart, out);
    atStart = false;
  }
  return out;
}

namespace {
/// What loadTokenizer looks for in a folder, in this order.
const char *const kFileNames[] = {"tokenizer.json", "tokenizer.model", "tokenizer.bin"};

/// A llama2.c tokenizer.bin starts with int32 max_token_length; run.c sizes its merge buffer by
/// it, so real files hold a small number. A SentencePiece ModelProto starts with the bytes
/// 0x0A LEN 0x0A LEN2 (field 1, a piece, and its string), which read as an int32 above 10^8.
bool looksLikeLlama2c(llvm::StringRef contents) {
  if (contents.size() < 4) return false;
  int32_t maxTokenLength;
  std::memcpy(&maxTokenLength, contents.data(), 4);
  return maxTokenLength >= 1 && maxTokenLength <= 1024;
}
}  // namespace

llvm::Expected<std::unique_ptr<Tokenizer>> loadTokenizer(llvm::StringRef path) {
  if (llvm::sys::fs::is_directory(path)) {
    for (const char *name : kFileNames) {
      llvm::SmallString<256> file = path;
      llvm::sys::path::append(file, name);
      if (llvm::sys::fs::exists(file)) return loadTokenizer(file);
    }
    return tokenizerError(path, "a folder without tokenizer.json, tokenizer.model or tokenizer.bin");
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buffer) return tokenizerError(path, "cannot read the tokenizer: " + buffer.getError().message());
  llvm::StringRef contents = (*buffer)->getBuffer();
  if (contents.empty()) return tokenizerError(path, "the tokenizer file is empty");
  if (contents.ltrim().starts_with("{")) return loadByteLevelBpeTokenizer(path, contents);
  if (looksLikeLlama2c(contents)) return loadLlama2cTokenizer(path, contents);
  return loadSentencePieceTokenizer(path, contents);
}

}  // namespace colossal::runtime::serve

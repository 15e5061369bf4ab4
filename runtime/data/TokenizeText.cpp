//===- TokenizeText.cpp - Text files to a token file with a model's tokenizer -------------===//
#include "colossal/runtime/TokenizeText.h"

#include "support/AtomicFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <vector>

namespace colossal::runtime {

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}
}  // namespace

llvm::Expected<TokenizedText> tokenizeTextFiles(const serve::Tokenizer &tokenizer, llvm::ArrayRef<std::string> files,
                                                DType tokenDType, llvm::StringRef outPath) {
  if (tokenDType != DType::U8 && tokenDType != DType::U16)
    return fail(outPath + ": token files hold uint8 or uint16 ids");
  const int64_t limit = tokenDType == DType::U8 ? 256 : 65536;
  if (tokenizer.vocabSize() > limit)
    return fail(outPath + ": the tokenizer has " + llvm::Twine(tokenizer.vocabSize()) + " ids, more than " +
                (tokenDType == DType::U8 ? "uint8" : "uint16") + " holds (" + llvm::Twine(limit) + ")");
  TokenizedText stats;
  std::vector<serve::TokenId> ids;
  for (const std::string &file : files) {
    if (llvm::sys::fs::equivalent(file, outPath))
      return fail(outPath + " is the text file " + file + "; choose another output path");
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> text = llvm::MemoryBuffer::getFile(file, /*IsText=*/false);
    if (!text) return fail(file + ": cannot read: " + text.getError().message());
    llvm::Expected<std::vector<serve::TokenId>> doc = tokenizer.encode((*text)->getBuffer(), /*addBos=*/true);
    if (!doc) return fail(file + ": " + llvm::toString(doc.takeError()));
    ids.insert(ids.end(), doc->begin(), doc->end());
    stats.files += 1;
    stats.bytes += static_cast<int64_t>((*text)->getBufferSize());
  }
  stats.tokens = static_cast<int64_t>(ids.size());
  llvm::Error written = writeFileAtomically(outPath, [&](llvm::raw_ostream &os) {
    for (serve::TokenId id : ids) {
      // Little-endian, whatever the host's order.
      const unsigned char b[2] = {static_cast<unsigned char>(id & 0xff), static_cast<unsigned char>((id >> 8) & 0xff)};
      os.write(reinterpret_cast<const char *>(b), tokenDType == DType::U8 ? 1 : 2);
    }
    return llvm::Error::success();
  });
  if (written) return std::move(written);
  return stats;
}

}  // namespace colossal::runtime

//===- TokenData.cpp - Token files and the training data order ------------------------------===//
#include "colossal/runtime/TokenData.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/MemoryBuffer.h"

#include <optional>

namespace colossal::runtime {

namespace {
llvm::Error fail(llvm::StringRef path, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), (path + ": " + msg).str());
}

/// Index of the first id >= vocab, or -1. A branch-free max scan first (vectorizes), then the
/// search only when some id is out of range.
template <typename T> int64_t firstOutOfRange(const T *ids, int64_t n, int64_t vocab) {
  T maxId = 0;
  for (int64_t i = 0; i < n; ++i) maxId = ids[i] > maxId ? ids[i] : maxId;
  if (int64_t(maxId) < vocab) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (int64_t(ids[i]) >= vocab) return i;
  return -1;
}
}  // namespace

std::optional<DType> parseTokenDType(llvm::StringRef name) {
  if (name == "uint8") return DType::U8;
  if (name == "uint16") return DType::U16;
  return std::nullopt;
}

int64_t tokenRowStart(int64_t step, int64_t row, int64_t globalBatch, int64_t seqLen, int64_t numTokens) {
  using u128 = unsigned __int128;
  const u128 m = static_cast<u128>(numTokens - seqLen - 1);
  u128 r = (static_cast<u128>(step) * static_cast<u128>(globalBatch) + static_cast<u128>(row)) % m;
  return static_cast<int64_t>(r * static_cast<u128>(seqLen) % m);
}

TokenData::~TokenData() = default;

llvm::Expected<std::unique_ptr<TokenData>> TokenData::open(llvm::StringRef path, DType tokenDType, int64_t vocabSize,
                                                           int64_t seqLen) {
  if (tokenDType != DType::U8 && tokenDType != DType::U16)
    return fail(path, "token files hold uint8 or uint16 ids, not " + dtypeName(tokenDType));
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf) return fail(path, "cannot read token file: " + buf.getError().message());
  std::unique_ptr<TokenData> data(new TokenData());
  data->path_ = path.str();
  data->buffer_ = std::move(*buf);
  data->dtype_ = tokenDType;
  data->seqLen_ = seqLen;
  const size_t bytes = data->buffer_->getBufferSize(), width = dtypeSize(tokenDType);
  if (bytes % width != 0)
    return fail(path, llvm::Twine(bytes) + " bytes is not a whole number of uint16 tokens (odd size: wrong "
                      "--token-dtype?)");
  data->numTokens_ = static_cast<int64_t>(bytes / width);
  if (data->numTokens_ < seqLen + 2)
    return fail(path, "holds " + llvm::Twine(data->numTokens_) + " tokens, fewer than the " + llvm::Twine(seqLen + 2) +
                          " one sequence needs (T = " + llvm::Twine(seqLen) + " inputs, the labels one further, "
                          "and at least two row starts)");
  const char *base = data->buffer_->getBufferStart();
  int64_t bad = -1, value = 0;
  if (tokenDType == DType::U8) {
    bad = firstOutOfRange(reinterpret_cast<const uint8_t *>(base), data->numTokens_, vocabSize);
  } else if (reinterpret_cast<uintptr_t>(base) % 2 == 0) {
    bad = firstOutOfRange(reinterpret_cast<const uint16_t *>(base), data->numTokens_, vocabSize);
  } else {
    for (int64_t i = 0; i < data->numTokens_ && bad < 0; ++i)
      if (data->token(i) >= vocabSize) bad = i;
  }
  if (bad >= 0) {
    value = data->token(bad);
    return fail(path, "token id " + llvm::Twine(value) + " at byte offset " + llvm::Twine(bad * int64_t(width)) +
                          " (token " + llvm::Twine(bad) + ") is outside the vocabulary of " +
                          llvm::Twine(vocabSize) + " ids");
  }
  return data;
}

int64_t TokenData::token(int64_t i) const {
  const char *base = buffer_->getBufferStart();
  if (dtype_ == DType::U8) return static_cast<uint8_t>(base[i]);
  return llvm::support::endian::read16le(base + 2 * i);
}

void TokenData::fillRows(int64_t step, int64_t globalBatch, int64_t firstRow, int64_t rows, DType tokensDType,
                         void *tokens, int64_t *labels) const {
  const int64_t T = seqLen_;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t start = tokenRowStart(step, firstRow + r, globalBatch, T, numTokens_);
    for (int64_t t = 0; t < T; ++t) {
      int64_t id = token(start + t);
      if (tokensDType == DType::I32) static_cast<int32_t *>(tokens)[r * T + t] = static_cast<int32_t>(id);
      else static_cast<int64_t *>(tokens)[r * T + t] = id;
      labels[r * T + t] = token(start + t + 1);
    }
  }
}

}  // namespace colossal::runtime

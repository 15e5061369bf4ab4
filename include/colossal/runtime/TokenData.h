//===- TokenData.h - Token files and the training data order --------------------*- C++ -*-===//
//
// A token file is a flat array of little-endian uint8 or uint16 token ids (DESIGN.md), read
// memory-mapped. The data order (DESIGN.md "Training data order", docs/training.md "Runtime"):
// with global batch B, sequence length T and N tokens, row r of step s starts at
//   ((s·B + r)·T) mod (N − T − 1);
// its inputs are the T tokens from there, its labels the T tokens one further. Microbatch k of
// grad_accum A takes rows [k·B/A, (k+1)·B/A).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TOKENDATA_H
#define COLOSSAL_RUNTIME_TOKENDATA_H

#include "colossal/runtime/DType.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace llvm {
class MemoryBuffer;
}

namespace colossal::runtime {

/// The first token of row `row` of step `step`: ((step·B + row)·T) mod (numTokens − T − 1),
/// computed without overflow for any non-negative arguments. Requires numTokens >= T + 2.
int64_t tokenRowStart(int64_t step, int64_t row, int64_t globalBatch, int64_t seqLen, int64_t numTokens);

class TokenData {
public:
  /// Maps `path` holding `tokenDType` (U8 or U16) ids. Checks, each error naming the file: readable;
  /// size a multiple of the id size; at least seqLen + 2 tokens (one row of inputs plus its
  /// shifted labels, and a non-empty range of row starts); every id < vocabSize (the error gives
  /// the byte offset of the first one outside, and its value).
  static llvm::Expected<std::unique_ptr<TokenData>> open(llvm::StringRef path, DType tokenDType, int64_t vocabSize,
                                                         int64_t seqLen);
  ~TokenData();

  int64_t numTokens() const { return numTokens_; }
  const std::string &path() const { return path_; }
  /// Token id at index `i` (< numTokens()).
  int64_t token(int64_t i) const;

  /// Fills rows [firstRow, firstRow + rows) of step `step` (global batch `globalBatch`):
  /// `tokens` [rows, T] in `tokensDType` (I64 or I32) and `labels` [rows, T] int64.
  void fillRows(int64_t step, int64_t globalBatch, int64_t firstRow, int64_t rows, DType tokensDType, void *tokens,
                int64_t *labels) const;

private:
  TokenData() = default;
  std::string path_;
  std::unique_ptr<llvm::MemoryBuffer> buffer_;
  DType dtype_ = DType::U8;
  int64_t numTokens_ = 0, seqLen_ = 0;
};

/// Parses a --token-dtype value: "uint8" -> U8, "uint16" -> U16; nullopt otherwise.
std::optional<DType> parseTokenDType(llvm::StringRef name);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_TOKENDATA_H

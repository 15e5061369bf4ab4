//===- Fnv.cpp - FNV-1a 64-bit hashing of byte ranges and files -----------------------------===//
#include "colossal/runtime/Plan.h"

#include "llvm/Support/MemoryBuffer.h"

namespace colossal::runtime {

uint64_t fnv1a64(const void *data, size_t size, uint64_t hash) {
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= kPrime;
  }
  return hash;
}

llvm::Expected<uint64_t> fnv1a64File(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf)
    return llvm::createStringError(buf.getError(), "%s: cannot read: %s", path.str().c_str(),
                                   buf.getError().message().c_str());
  return fnv1a64((*buf)->getBufferStart(), (*buf)->getBufferSize());
}

}  // namespace colossal::runtime

//===- Fnv.cpp - FNV-1a 64-bit hashing of byte ranges and files -----------------------------===//
#include "colossal/runtime/Plan.h"

#include "llvm/Support/FileSystem.h"

#include <vector>

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
  // Read in blocks rather than mapped: hashing a large weights file then costs no resident memory
  // (the page cache is the kernel's), which offload's memory budget relies on.
  llvm::Expected<llvm::sys::fs::file_t> fd = llvm::sys::fs::openNativeFileForRead(path);
  if (!fd)
    return llvm::createStringError(llvm::errorToErrorCode(fd.takeError()), "%s: cannot read",
                                   path.str().c_str());
  std::vector<char> block(1 << 20);
  uint64_t hash = kFnv1a64OffsetBasis;
  for (;;) {
    llvm::Expected<size_t> n = llvm::sys::fs::readNativeFile(*fd, llvm::MutableArrayRef<char>(block));
    if (!n) {
      llvm::sys::fs::closeFile(*fd);
      return llvm::createStringError(llvm::errorToErrorCode(n.takeError()), "%s: cannot read",
                                     path.str().c_str());
    }
    if (*n == 0) break;
    hash = fnv1a64(block.data(), *n, hash);
  }
  llvm::sys::fs::closeFile(*fd);
  return hash;
}

}  // namespace colossal::runtime

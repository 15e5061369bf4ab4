//===- Fnv.cpp - FNV-1a 64-bit hashing of byte ranges and files -----------------------------===//
#include "colossal/runtime/Plan.h"

#include "llvm/Support/FileSystem.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <vector>

namespace colossal::runtime {

std::string serializePlan(const plan::Plan &plan) {
  plan::Plan body = plan;
  body.clear_plan_hash();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    body.SerializeToCodedStream(&coded);
  }
  const uint64_t hash = fnv1a64(bytes.data(), bytes.size());
  bytes += '\xF9';  // (63 << 3) | 1 (fixed64) as a varint
  bytes += '\x03';
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((hash >> (8 * i)) & 0xff);
  return bytes;
}

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

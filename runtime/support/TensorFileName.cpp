//===- TensorFileName.cpp - Tensor names as file names, without collisions -----------------===//
//
// See include/colossal/runtime/TensorFileName.h.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/TensorFileName.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/SHA256.h"

namespace colossal::runtime {
namespace {

bool keptAsIs(char c, bool first) {
  return llvm::isAlnum(c) || c == '_' || c == '-' || (c == '.' && !first);
}

std::string escape(llvm::StringRef name) {
  if (name.empty()) return "%";
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (keptAsIs(c, i == 0)) {
      out += c;
      continue;
    }
    out += '%';
    out += llvm::hexdigit(static_cast<unsigned char>(c) >> 4);
    out += llvm::hexdigit(static_cast<unsigned char>(c) & 15);
  }
  return out;
}

}  // namespace

std::string tensorFileName(llvm::StringRef name, llvm::StringRef suffix) {
  std::string escaped = escape(name);
  if (escaped.size() + suffix.size() <= kMaxFileNameBytes) return escaped + suffix.str();
  // "~" + 16 hex digits of SHA-256(name).
  std::array<uint8_t, 32> digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(name));
  std::string tag =
      "~" + llvm::toHex(llvm::ArrayRef<uint8_t>(digest).take_front(8), /*LowerCase=*/true);
  size_t keep = kMaxFileNameBytes - suffix.size() - tag.size();
  // Never cut an escape: back up to its '%' when one of its hex digits would be the last kept.
  if (keep >= 1 && escaped[keep - 1] == '%')
    keep -= 1;
  else if (keep >= 2 && escaped[keep - 2] == '%')
    keep -= 2;
  return escaped.substr(0, keep) + tag + suffix.str();
}

llvm::Expected<std::vector<std::string>> tensorFileNames(llvm::ArrayRef<std::string> names,
                                                         llvm::StringRef suffix,
                                                         llvm::StringRef what) {
  std::vector<std::string> files;
  llvm::StringMap<size_t> owner;
  for (size_t i = 0; i < names.size(); ++i) {
    files.push_back(tensorFileName(names[i], suffix));
    auto [it, fresh] = owner.try_emplace(files.back(), i);
    if (!fresh)
      return llvm::createStringError(what + " '" + names[it->second] + "' and '" + names[i] +
                                     "' both map to " + files.back());
  }
  return files;
}

}  // namespace colossal::runtime

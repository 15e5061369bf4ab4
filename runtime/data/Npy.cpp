//===- Npy.cpp - NumPy .npy reader and writer -----------------------------------------------===//
#include "colossal/runtime/Npy.h"

#include "support/AtomicFile.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstring>
#include <limits>

namespace colossal::runtime {

namespace {
llvm::Error fail(llvm::StringRef name, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), (name + ": " + msg).str());
}

constexpr llvm::StringLiteral kMagic("\x93NUMPY");

/// Finds `'key':` in a header dict and returns the text after the colon, whitespace-trimmed.
std::optional<llvm::StringRef> valueAfterKey(llvm::StringRef dict, llvm::StringRef key) {
  for (char quote : {'\'', '"'}) {
    std::string pattern = std::string(1, quote) + key.str() + std::string(1, quote);
    size_t pos = dict.find(pattern);
    if (pos == llvm::StringRef::npos) continue;
    llvm::StringRef rest = dict.drop_front(pos + pattern.size()).ltrim();
    if (!rest.consume_front(":")) return std::nullopt;
    return rest.ltrim();
  }
  return std::nullopt;
}
}  // namespace

llvm::Expected<NpyArray> parseNpy(llvm::StringRef bytes, llvm::StringRef name) {
  if (bytes.size() < 10 || !bytes.starts_with(kMagic))
    return fail(name, "not a .npy file (bad magic)");
  uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t headerLen, prefix;
  if (major == 1) {
    headerLen = llvm::support::endian::read16le(bytes.data() + 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return fail(name, "truncated .npy header");
    headerLen = llvm::support::endian::read32le(bytes.data() + 8);
    prefix = 12;
  } else {
    return fail(name, "unsupported .npy format version " + llvm::Twine(int(major)));
  }
  if (headerLen > bytes.size() - prefix) return fail(name, "truncated .npy header");
  llvm::StringRef dict = bytes.substr(prefix, headerLen).trim();
  if (!dict.starts_with("{") || !dict.ends_with("}"))
    return fail(name, "malformed .npy header: " + dict);

  auto descrText = valueAfterKey(dict, "descr");
  if (!descrText || descrText->empty() || ((*descrText)[0] != '\'' && (*descrText)[0] != '"'))
    return fail(name, "malformed .npy header: no 'descr' string");
  char q = (*descrText)[0];
  size_t end = descrText->find(q, 1);
  if (end == llvm::StringRef::npos) return fail(name, "malformed .npy header: unterminated descr");
  llvm::StringRef descr = descrText->substr(1, end - 1);
  std::optional<DType> dtype = dtypeFromNpyDescr(descr);
  if (!dtype)
    return fail(name, "unsupported dtype '" + descr +
                          "' (supported: <f4 <f2 <f8 <i8 <i4 <i2 |i1 |u1 |b1)");

  auto fortran = valueAfterKey(dict, "fortran_order");
  if (!fortran) return fail(name, "malformed .npy header: no 'fortran_order'");
  if (fortran->starts_with("True"))
    return fail(name, "fortran_order arrays are not supported (save a C-contiguous array)");
  if (!fortran->starts_with("False")) return fail(name, "malformed .npy header: bad fortran_order");

  auto shapeText = valueAfterKey(dict, "shape");
  if (!shapeText || !shapeText->starts_with("("))
    return fail(name, "malformed .npy header: no 'shape' tuple");
  size_t close = shapeText->find(')');
  if (close == llvm::StringRef::npos) return fail(name, "malformed .npy header: unterminated shape");
  NpyArray arr;
  arr.dtype = *dtype;
  llvm::SmallVector<llvm::StringRef, 8> parts;
  shapeText->substr(1, close - 1).split(parts, ',', -1, /*KeepEmpty=*/false);
  uint64_t numel = 1;
  for (llvm::StringRef p : parts) {
    p = p.trim();
    if (p.empty()) continue;
    if (p.ends_with("L")) p = p.drop_back();  // Python 2 longs
    uint64_t d;
    if (p.getAsInteger(10, d)) return fail(name, "malformed .npy header: bad shape entry '" + p + "'");
    if (d && numel > std::numeric_limits<uint64_t>::max() / 16 / d)
      return fail(name, "shape too large");
    numel *= d;
    arr.shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t dataBytes = numel * dtypeSize(*dtype);
  uint64_t available = bytes.size() - prefix - headerLen;
  if (available < dataBytes)
    return fail(name, "truncated .npy data: shape " + shapeToString(arr.shape) + " of " +
                          dtypeName(*dtype) + " needs " + llvm::Twine(dataBytes) + " bytes, file has " +
                          llvm::Twine(available));
  if (available > dataBytes)
    return fail(name, llvm::Twine(available - dataBytes) + " unexpected bytes after the .npy data");
  arr.data = AlignedBuffer(dataBytes);
  if (dataBytes) std::memcpy(arr.data.data(), bytes.data() + prefix + headerLen, dataBytes);
  if (*dtype == DType::Bool) {
    // NumPy bools are 0/1; anything else would make kernels' `x != 0` and `x == 1` disagree.
    auto *p = static_cast<uint8_t *>(arr.data.data());
    for (uint64_t i = 0; i < dataBytes; ++i) p[i] = p[i] != 0;
  }
  return arr;
}

llvm::Expected<NpyArray> readNpy(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf) return fail(path, "cannot read: " + buf.getError().message());
  return parseNpy((*buf)->getBuffer(), path);
}

llvm::Error writeNpy(llvm::StringRef path, DType dtype, llvm::ArrayRef<int64_t> shape,
                     const void *data) {
  llvm::StringRef descr = npyDescr(dtype);
  if (descr.empty())
    return fail(path, llvm::Twine("cannot write dtype ") + dtypeName(dtype) + " to .npy");
  std::string dict = "{'descr': '" + descr.str() + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + ", ";
  if (shape.size() > 1) dict.resize(dict.size() - 2);
  else if (shape.size() == 1) dict.resize(dict.size() - 1);  // "(3,)"
  dict += "), }";
  // Pad so magic + length + header is a multiple of 64 and ends in '\n' (as NumPy does).
  bool v2 = dict.size() + 1 + 10 > 65535;
  size_t prefix = v2 ? 12 : 10;
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  size_t bytes = static_cast<size_t>(numElements(shape)) * dtypeSize(dtype);
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) -> llvm::Error {
    os << kMagic;
    char ver[2] = {static_cast<char>(v2 ? 2 : 1), 0};
    os.write(ver, 2);
    char len[4];
    if (v2) {
      llvm::support::endian::write32le(len, dict.size());
      os.write(len, 4);
    } else {
      llvm::support::endian::write16le(len, dict.size());
      os.write(len, 2);
    }
    os << dict;
    if (bytes) os.write(static_cast<const char *>(data), bytes);
    return llvm::Error::success();
  });
}

}  // namespace colossal::runtime

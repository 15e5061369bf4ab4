//===- ExternalData.cpp - Reading an ONNX tensor's external data, confined to its model ------===//
//
// See include/colossal/runtime/ExternalData.h.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/ExternalData.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <limits>

namespace colossal::runtime {
namespace {

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// `offset` or `length`: a decimal integer in [0, 2^63-1].
llvm::Expected<uint64_t> parseByteCount(llvm::StringRef key, llvm::StringRef text) {
  auto fail = [&](llvm::StringRef why) {
    return err("external data " + key + " '" + text + "' " + why);
  };
  int64_t v;
  if (!text.getAsInteger(10, v))
    return v < 0 ? fail("is negative") : llvm::Expected<uint64_t>(static_cast<uint64_t>(v));
  llvm::StringRef digits = text;
  bool negative = digits.consume_front("-");
  if (digits.empty() || !llvm::all_of(digits, [](char c) { return llvm::isDigit(c); }))
    return fail("is not a number");
  return negative ? fail("is negative") : fail("is too large (above 2^63-1)");
}

/// Whether `path` lies strictly inside `folder` (both real paths).
bool isInside(llvm::StringRef path, llvm::StringRef folder) {
  if (folder.empty() || !path.starts_with(folder) || path.size() == folder.size()) return false;
  return llvm::sys::path::is_separator(folder.back()) ||
         llvm::sys::path::is_separator(path[folder.size()]);
}

/// The folders external data may come from (see the header): the real path of the model's folder
/// and the folder of the model's real path. Folders whose real path cannot be found are left out.
llvm::SmallVector<std::string, 2> allowedFolders(llvm::StringRef modelPath) {
  llvm::SmallVector<std::string, 2> out;
  llvm::SmallString<256> folder(llvm::sys::path::parent_path(modelPath));
  if (folder.empty()) folder = ".";
  llvm::SmallString<256> real;
  if (!llvm::sys::fs::real_path(folder, real)) out.push_back(std::string(real));
  if (!llvm::sys::fs::real_path(modelPath, real)) {
    std::string parent(llvm::sys::path::parent_path(real));
    if (!llvm::is_contained(out, parent)) out.push_back(parent);
  }
  return out;
}

/// The real path `path` would have if it existed: its folder's real path and its name, or, when
/// the folder is missing too, the absolute path with `.` and `..` removed.
llvm::SmallString<256> wouldBeRealPath(llvm::StringRef path) {
  llvm::SmallString<256> out;
  llvm::StringRef parent = llvm::sys::path::parent_path(path);
  if (!llvm::sys::fs::real_path(parent.empty() ? llvm::StringRef(".") : parent, out)) {
    llvm::sys::path::append(out, llvm::sys::path::filename(path));
    return out;
  }
  out = path;
  llvm::sys::fs::make_absolute(out);
  llvm::sys::path::remove_dots(out, /*remove_dot_dot=*/true);
  return out;
}

}  // namespace

llvm::Expected<ExternalDataRef>
parseExternalDataRef(llvm::ArrayRef<std::pair<llvm::StringRef, llvm::StringRef>> entries) {
  ExternalDataRef ref;
  for (const auto &[key, value] : entries) {
    if (key == "location") {
      ref.location = value.str();
    } else if (key == "offset" || key == "length") {
      llvm::Expected<uint64_t> v = parseByteCount(key, value);
      if (!v) return v.takeError();
      if (key == "offset")
        ref.offset = *v;
      else
        ref.length = *v;
    }
  }
  if (ref.location.empty()) return err("external data without a location");
  return ref;
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> readExternalData(llvm::StringRef modelPath,
                                                                     const ExternalDataRef &ref) {
  const std::string &location = ref.location;
  if (llvm::sys::path::is_absolute(location))
    return err("external data location '" + location +
               "' must be a relative path inside the model's folder");
  llvm::SmallString<256> full(llvm::sys::path::parent_path(modelPath));
  llvm::sys::path::append(full, location);
  auto cannotRead = [&](const llvm::Twine &why) {
    return err("cannot read external data '" + full + "': " + why);
  };

  // The real path decides, never the text: `data/../w.bin` may stay inside, `w.bin` may be a
  // symlink that leaves.
  // A missing file is judged by where it would be, so that nothing outside is probed.
  llvm::SmallString<256> real;
  std::error_code missing = llvm::sys::fs::real_path(full, real);
  if (missing) real = wouldBeRealPath(full);
  llvm::SmallVector<std::string, 2> folders = allowedFolders(modelPath);
  if (!llvm::any_of(folders, [&](const std::string &f) { return isInside(real, f); }))
    return err("external data location '" + location + "' resolves to '" + real +
               "', outside the model's folder '" +
               (folders.empty() ? std::string("?") : folders[0]) + "'");
  if (missing) return cannotRead(missing.message());
  // Not a FIFO or device (opening one could block or read forever).
  llvm::sys::fs::file_status st;
  if (std::error_code ec = llvm::sys::fs::status(real, st)) return cannotRead(ec.message());
  if (st.type() != llvm::sys::fs::file_type::regular_file)
    return cannotRead("not a regular file");

  // Open the checked path, then check what was opened: a symlink swapped in between is refused.
  llvm::SmallString<256> opened;
  llvm::Expected<llvm::sys::fs::file_t> fd =
      llvm::sys::fs::openNativeFileForRead(real, llvm::sys::fs::OF_None, &opened);
  if (!fd) return cannotRead(llvm::toString(fd.takeError()));
  llvm::scope_exit close([&] { llvm::sys::fs::closeFile(*fd); });
  if (!opened.empty() && opened != real)
    return cannotRead("the file changed while it was opened (now '" + opened + "')");
  if (std::error_code ec = llvm::sys::fs::status(*fd, st)) return cannotRead(ec.message());
  if (st.type() != llvm::sys::fs::file_type::regular_file)
    return cannotRead("not a regular file");

  // offset, length <= 2^63-1 (parseExternalDataRef): their sum cannot wrap in 64 bits.
  const uint64_t size = st.getSize();
  if (ref.length && ref.offset + *ref.length > size)
    return err("external data range [" + llvm::Twine(ref.offset) + ", " +
               llvm::Twine(ref.offset + *ref.length) + ") exceeds '" + location + "' (" +
               llvm::Twine(size) + " bytes)");
  if (ref.offset > size)
    return err("external data offset " + llvm::Twine(ref.offset) + " exceeds '" + location +
               "' (" + llvm::Twine(size) + " bytes)");
  const uint64_t length = ref.length ? *ref.length : size - ref.offset;
  if (length == 0)
    return llvm::MemoryBuffer::getMemBuffer("", real, /*RequiresNullTerminator=*/false);
  auto buf = llvm::MemoryBuffer::getOpenFileSlice(*fd, real, length,
                                                  static_cast<int64_t>(ref.offset));
  if (!buf) return cannotRead(buf.getError().message());
  if ((*buf)->getBufferSize() != length) return cannotRead("short read");
  return std::move(*buf);
}

}  // namespace colossal::runtime

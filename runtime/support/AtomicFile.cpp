//===- AtomicFile.cpp -------------------------------------------------------------------------===//
#include "support/AtomicFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace colossal::runtime {

llvm::Error writeFileAtomically(llvm::StringRef path,
                                llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write) {
  // A fresh name of fixed length beside `path` (O_EXCL: never an existing file or symlink), so that
  // a file name at the 255-byte limit (runtime/TensorFileName.h) still has a temporary.
  llvm::SmallString<256> model(llvm::sys::path::parent_path(path));
  llvm::sys::path::append(model, ".colossal-tmp-%%%%%%%%");
  llvm::SmallString<256> tmp;
  int fd = -1;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(model, fd, tmp))
    return llvm::createStringError(ec, "%s: cannot create: %s", path.str().c_str(),
                                   ec.message().c_str());
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    if (llvm::Error err = write(os)) {
      os.close();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return err;
    }
    os.close();
    if (os.has_error()) {
      std::error_code werr = os.error();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return llvm::createStringError(werr, "%s: write failed: %s", path.str().c_str(),
                                     werr.message().c_str());
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return llvm::createStringError(ec, "%s: cannot rename from temporary file: %s",
                                   path.str().c_str(), ec.message().c_str());
  }
  return llvm::Error::success();
}

}  // namespace colossal::runtime

//===- AtomicFile.cpp -------------------------------------------------------------------------===//
#include "support/AtomicFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"

namespace colossal::runtime {

llvm::Error writeFileAtomically(llvm::StringRef path,
                                llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write) {
  std::string tmp = (path + ".tmp-" + llvm::Twine(llvm::sys::Process::getProcessId())).str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_None);
    if (ec)
      return llvm::createStringError(ec, "%s: cannot create: %s", path.str().c_str(),
                                     ec.message().c_str());
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

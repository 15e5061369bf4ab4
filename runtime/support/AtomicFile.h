//===- AtomicFile.h - Write a file under a temporary name, then rename ----------*- C++ -*-===//
#ifndef COLOSSAL_RUNTIME_SUPPORT_ATOMICFILE_H
#define COLOSSAL_RUNTIME_SUPPORT_ATOMICFILE_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace colossal::runtime {

/// Calls `write` on a stream to a temporary file next to `path` (so the rename stays on one file
/// system; a fresh `.colossal-tmp-XXXXXXXX`, whatever the length of `path`'s name), then renames it
/// over `path`. On any failure the temporary file is removed and `path`
/// is untouched: no half-written file is ever visible under its final name.
llvm::Error writeFileAtomically(llvm::StringRef path,
                                llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write);

}  // namespace colossal::runtime

#endif

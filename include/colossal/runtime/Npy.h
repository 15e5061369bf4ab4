//===- Npy.h - NumPy .npy reader and writer -------------------------------------*- C++ -*-===//
//
// Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//   "\x93NUMPY" major minor, header length (u16 for v1, u32 for v2/v3), an ASCII Python dict
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and '\n'.
// Supported dtypes: <f4 <f2 <f8 <i8 <i4 <i2 |i1 |u1 |b1, C order only.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_NPY_H
#define COLOSSAL_RUNTIME_NPY_H

#include "colossal/runtime/DType.h"
#include "colossal/runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace colossal::runtime {

/// An array read from a .npy file; owns its (64-byte aligned) data.
struct NpyArray {
  DType dtype = DType::Invalid;
  std::vector<int64_t> shape;
  AlignedBuffer data;

  int64_t numel() const { return numElements(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtypeSize(dtype); }
};

/// Reads `path`. Errors (each naming the file): unreadable, bad magic, unsupported version,
/// malformed header, unsupported dtype (big-endian, complex, object, ...), fortran_order True,
/// data shorter or longer than shape × dtype.
llvm::Expected<NpyArray> readNpy(llvm::StringRef path);

/// Parses an in-memory .npy image; `name` is used in error messages.
llvm::Expected<NpyArray> parseNpy(llvm::StringRef bytes, llvm::StringRef name);

/// Writes a v1 .npy (v2 when the header does not fit 64 KiB) with the header padded to 64 bytes.
/// Atomic: writes a temporary file beside `path` and renames it over `path`. `data` holds
/// numElements(shape) * dtypeSize(dtype) bytes. Errors: BF16/invalid dtype, I/O failure.
llvm::Error writeNpy(llvm::StringRef path, DType dtype, llvm::ArrayRef<int64_t> shape, const void *data);

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_NPY_H

//===- Safetensors.h - safetensors reader and writer ----------------------------*- C++ -*-===//
//
// The weights format of a plan and of checkpoints: https://github.com/huggingface/safetensors
//   [u64 little-endian N][N bytes of JSON header][data]
// The header maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}
// (offsets relative to the start of the data section) plus an optional "__metadata__" map of
// strings. The writer pads the header with spaces so the data section starts at a multiple of 64
// bytes, and lays tensors out in the order given, without holes (as the format requires).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SAFETENSORS_H
#define COLOSSAL_RUNTIME_SAFETENSORS_H

#include "colossal/runtime/DType.h"
#include "colossal/runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class MemoryBuffer;
}

namespace colossal::runtime {

/// One tensor to write: `data` points at `size_bytes` bytes that must equal
/// numElements(shape) * dtypeSize(dtype) (checked). The bytes are written as they are (the format is
/// little-endian; so is every host we run on).
struct NamedTensor {
  std::string name;
  DType dtype = DType::Invalid;
  std::vector<int64_t> shape;
  const void *data = nullptr;
  size_t size_bytes = 0;
};

/// Writes `tensors` (unique, non-empty names not starting with "__") to `path`, atomically: the
/// bytes go to a temporary file in the same folder which is renamed over `path` when complete.
/// `metadata` becomes the "__metadata__" entry when non-empty.
/// Errors: duplicate/empty name, size mismatch, invalid dtype, I/O failure — each naming `path`.
llvm::Error writeSafetensors(llvm::StringRef path, llvm::ArrayRef<NamedTensor> tensors,
                             const std::map<std::string, std::string> &metadata = {});

/// One tensor of an opened file. `data` stays valid while the SafetensorsFile lives; it is aligned
/// to at least the element size (misaligned tensors are copied once at open time).
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::Invalid;
  std::vector<int64_t> shape;
  const void *data = nullptr;
  size_t size_bytes = 0;
};

/// A safetensors file opened read-only (memory-mapped when large). `open` validates the whole
/// header before returning: header length inside the file, valid JSON object, known dtypes,
/// non-negative shapes, offsets ordered and inside the data section, end - begin ==
/// numel * dtypeSize. Every error names the file.
class SafetensorsFile {
public:
  static llvm::Expected<std::unique_ptr<SafetensorsFile>> open(llvm::StringRef path);
  ~SafetensorsFile();

  /// Tensors in the order of their data offsets.
  llvm::ArrayRef<SafetensorsTensor> tensors() const { return tensors_; }
  /// nullptr when absent.
  const SafetensorsTensor *find(llvm::StringRef name) const;
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  const std::string &path() const { return path_; }
  /// Lets the OS drop the pages of a memory-mapped file from this process (they are read again
  /// on the next access; offload uses it once the states hold the initial values). No-op for a
  /// file read into memory.
  void releasePages() const;
  /// The same for the whole pages inside tensor `t`'s bytes only.
  void releasePages(const SafetensorsTensor &t) const;

private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<llvm::MemoryBuffer> buffer_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::vector<AlignedBuffer> realigned_;
};

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_SAFETENSORS_H

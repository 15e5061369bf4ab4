//===- Tensor.h - Non-owning tensor views and aligned host memory ---------------*- C++ -*-===//
#ifndef COLOSSAL_RUNTIME_TENSOR_H
#define COLOSSAL_RUNTIME_TENSOR_H

#include "colossal/runtime/DType.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <string>

namespace colossal::runtime {

/// A static shape, row-major. Rank 0 is a scalar (one element).
using Shape = llvm::SmallVector<int64_t, 6>;

/// Product of the dims (1 for rank 0). Dims are assumed non-negative.
int64_t numElements(llvm::ArrayRef<int64_t> shape);

/// "[2, 3, 4]" for messages.
std::string shapeToString(llvm::ArrayRef<int64_t> shape);

/// A non-owning view of a contiguous row-major tensor: dtype, shape and a data pointer.
struct TensorRef {
  DType dtype = DType::Invalid;
  Shape shape;
  void *data = nullptr;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const { return numElements(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtypeSize(dtype); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// Host memory aligned to 64 bytes (one cache line, one AVX-512 vector). Move-only. Zero-filled.
class AlignedBuffer {
public:
  static constexpr size_t kAlignment = 64;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer &&other) noexcept;
  AlignedBuffer &operator=(AlignedBuffer &&other) noexcept;
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;

  void *data() { return data_; }
  const void *data() const { return data_; }
  size_t size() const { return size_; }

private:
  void *data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_TENSOR_H

//===- Tensor.cpp - Shapes and aligned host memory ------------------------------------------===//
#include "colossal/runtime/Tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace colossal::runtime {

int64_t numElements(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shapeToString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  // aligned_alloc wants a multiple of the alignment; one extra line keeps size 0 valid too.
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment + kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer &&other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

AlignedBuffer &AlignedBuffer::operator=(AlignedBuffer &&other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

}  // namespace colossal::runtime

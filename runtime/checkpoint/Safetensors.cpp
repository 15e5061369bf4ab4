//===- Safetensors.cpp - safetensors reader and writer --------------------------------------===//
#include "colossal/runtime/Safetensors.h"

#include "support/AtomicFile.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <limits>

namespace colossal::runtime {

namespace {
llvm::Error fail(llvm::StringRef path, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (path + ": " + msg).str());
}
constexpr size_t kDataAlignment = 64;
}  // namespace

llvm::Error writeSafetensors(llvm::StringRef path, llvm::ArrayRef<NamedTensor> tensors,
                             const std::map<std::string, std::string> &metadata) {
  llvm::StringSet<> seen;
  for (const NamedTensor &t : tensors) {
    if (t.name.empty() || llvm::StringRef(t.name).starts_with("__"))
      return fail(path, "invalid tensor name '" + t.name + "'");
    if (!seen.insert(t.name).second)
      return fail(path, "duplicate tensor name '" + t.name + "'");
    if (t.dtype == DType::Invalid)
      return fail(path, "tensor '" + t.name + "' has an invalid dtype");
    for (int64_t d : t.shape)
      if (d < 0) return fail(path, "tensor '" + t.name + "' has a negative dimension");
    size_t expected = static_cast<size_t>(numElements(t.shape)) * dtypeSize(t.dtype);
    if (expected != t.size_bytes)
      return fail(path, "tensor '" + t.name + "': " + llvm::Twine(t.size_bytes) +
                            " bytes given, shape " + shapeToString(t.shape) + " of " +
                            dtypeName(t.dtype) + " needs " + llvm::Twine(expected));
    if (t.size_bytes && !t.data) return fail(path, "tensor '" + t.name + "' has no data");
  }

  std::string header;
  {
    llvm::raw_string_ostream hs(header);
    llvm::json::OStream j(hs);
    j.object([&] {
      if (!metadata.empty())
        j.attributeObject("__metadata__", [&] {
          for (const auto &[k, v] : metadata) j.attribute(k, v);
        });
      uint64_t offset = 0;
      for (const NamedTensor &t : tensors) {
        j.attributeObject(t.name, [&] {
          j.attribute("dtype", safetensorsDTypeName(t.dtype));
          j.attributeArray("shape", [&] {
            for (int64_t d : t.shape) j.value(d);
          });
          j.attributeArray("data_offsets", [&] {
            j.value(offset);
            j.value(offset + t.size_bytes);
          });
        });
        offset += t.size_bytes;
      }
    });
  }
  // Pad with spaces (allowed by the format) so the data section is 64-byte aligned.
  size_t padded = (8 + header.size() + kDataAlignment - 1) / kDataAlignment * kDataAlignment - 8;
  header.resize(padded, ' ');

  return writeFileAtomically(path, [&](llvm::raw_ostream &os) -> llvm::Error {
    char len[8];
    llvm::support::endian::write64le(len, header.size());
    os.write(len, 8);
    os << header;
    for (const NamedTensor &t : tensors)
      os.write(static_cast<const char *>(t.data), t.size_bytes);
    return llvm::Error::success();
  });
}

SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsTensor *SafetensorsFile::find(llvm::StringRef name) const {
  auto it = index_.find(name.str());
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

llvm::Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(llvm::StringRef path) {
  auto bufOrErr = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
  if (!bufOrErr)
    return fail(path, "cannot read weights: " + bufOrErr.getError().message());
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path.str();
  file->buffer_ = std::move(*bufOrErr);
  llvm::StringRef bytes = file->buffer_->getBuffer();

  if (bytes.size() < 8) return fail(path, "truncated safetensors file (" + llvm::Twine(bytes.size()) + " bytes)");
  uint64_t headerLen = llvm::support::endian::read64le(bytes.data());
  if (headerLen > bytes.size() - 8)
    return fail(path, "safetensors header length " + llvm::Twine(headerLen) +
                          " exceeds the file size " + llvm::Twine(bytes.size()));
  llvm::StringRef headerText = bytes.substr(8, headerLen);
  const uint64_t dataBegin = 8 + headerLen;
  const uint64_t dataSize = bytes.size() - dataBegin;

  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(headerText);
  if (!parsed)
    return fail(path, "malformed safetensors header: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root) return fail(path, "safetensors header is not a JSON object");

  struct Entry { uint64_t begin, end; size_t index; };
  std::vector<Entry> entries;
  for (const auto &kv : *root) {
    std::string name = kv.first.str();
    if (name == "__metadata__") {
      const llvm::json::Object *meta = kv.second.getAsObject();
      if (!meta) return fail(path, "__metadata__ is not an object");
      for (const auto &m : *meta) {
        auto s = m.second.getAsString();
        if (!s) return fail(path, "__metadata__ value '" + m.first.str() + "' is not a string");
        file->metadata_[m.first.str()] = s->str();
      }
      continue;
    }
    const llvm::json::Object *obj = kv.second.getAsObject();
    if (!obj) return fail(path, "tensor '" + name + "': entry is not an object");
    auto dtypeStr = obj->getString("dtype");
    if (!dtypeStr) return fail(path, "tensor '" + name + "': missing dtype");
    std::optional<DType> dtype = dtypeFromSafetensorsName(*dtypeStr);
    if (!dtype) return fail(path, "tensor '" + name + "': unsupported dtype '" + *dtypeStr + "'");
    const llvm::json::Array *shapeArr = obj->getArray("shape");
    if (!shapeArr) return fail(path, "tensor '" + name + "': missing shape");
    SafetensorsTensor t;
    t.name = name;
    t.dtype = *dtype;
    // Overflow-checked element count: a corrupt header must not wrap around.
    uint64_t numel = 1;
    for (const llvm::json::Value &d : *shapeArr) {
      std::optional<int64_t> v = d.getAsInteger();
      if (!v || *v < 0) return fail(path, "tensor '" + name + "': invalid shape");
      if (*v && numel > std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(*v))
        return fail(path, "tensor '" + name + "': shape too large");
      numel *= static_cast<uint64_t>(*v);
      t.shape.push_back(*v);
    }
    const llvm::json::Array *offs = obj->getArray("data_offsets");
    if (!offs || offs->size() != 2)
      return fail(path, "tensor '" + name + "': missing or malformed data_offsets");
    std::optional<int64_t> b = (*offs)[0].getAsInteger(), e = (*offs)[1].getAsInteger();
    if (!b || !e || *b < 0 || *e < *b)
      return fail(path, "tensor '" + name + "': invalid data_offsets");
    if (static_cast<uint64_t>(*e) > dataSize)
      return fail(path, "tensor '" + name + "': data_offsets [" + llvm::Twine(*b) + ", " +
                            llvm::Twine(*e) + ") outside the data section of " +
                            llvm::Twine(dataSize) + " bytes (truncated file?)");
    uint64_t expected = numel * dtypeSize(*dtype);
    if (static_cast<uint64_t>(*e - *b) != expected)
      return fail(path, "tensor '" + name + "': " + llvm::Twine(*e - *b) + " bytes, but shape " +
                            shapeToString(t.shape) + " of " + dtypeName(*dtype) + " needs " +
                            llvm::Twine(expected));
    t.size_bytes = expected;
    t.data = bytes.data() + dataBegin + *b;
    entries.push_back({static_cast<uint64_t>(*b), static_cast<uint64_t>(*e), file->tensors_.size()});
    file->tensors_.push_back(std::move(t));
  }
  // Tensors must not overlap (the format also forbids holes; we tolerate them when reading).
  std::sort(entries.begin(), entries.end(), [](const Entry &x, const Entry &y) { return x.begin < y.begin; });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end)
      return fail(path, "tensors '" + file->tensors_[entries[i - 1].index].name + "' and '" +
                            file->tensors_[entries[i].index].name + "' overlap");
  // Keep header order stable for callers: sort by offset (JSON objects are unordered).
  std::vector<SafetensorsTensor> ordered;
  for (const Entry &e : entries) ordered.push_back(std::move(file->tensors_[e.index]));
  file->tensors_ = std::move(ordered);
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    SafetensorsTensor &t = file->tensors_[i];
    file->index_[t.name] = i;
    size_t align = dtypeSize(t.dtype);
    if (reinterpret_cast<uintptr_t>(t.data) % align != 0) {
      AlignedBuffer copy(t.size_bytes);
      std::memcpy(copy.data(), t.data, t.size_bytes);
      t.data = copy.data();
      file->realigned_.push_back(std::move(copy));
    }
  }
  return file;
}

namespace {
/// madvise(MADV_DONTNEED) over the whole pages inside [begin, end) of a read-only mapping.
void dropPages(const char *first, const char *last) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(first) + page - 1) / page * page;
  uintptr_t end = reinterpret_cast<uintptr_t>(last) / page * page;
  if (end > begin) madvise(reinterpret_cast<void *>(begin), end - begin, MADV_DONTNEED);
}
}  // namespace

void SafetensorsFile::releasePages() const {
  if (!buffer_ || buffer_->getBufferKind() != llvm::MemoryBuffer::MemoryBuffer_MMap) return;
  dropPages(buffer_->getBufferStart(), buffer_->getBufferEnd());
}

void SafetensorsFile::releasePages(const SafetensorsTensor &t) const {
  if (!buffer_ || buffer_->getBufferKind() != llvm::MemoryBuffer::MemoryBuffer_MMap) return;
  const char *data = static_cast<const char *>(t.data);
  // Only bytes of the mapping itself (a realigned tensor is a heap copy).
  if (data < buffer_->getBufferStart() || data + t.size_bytes > buffer_->getBufferEnd()) return;
  dropPages(data, data + t.size_bytes);
}

}  // namespace colossal::runtime

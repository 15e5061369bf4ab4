//===- NonFinite.cpp - Finding NaN and infinity in tensors and training states --------------===//
#include "colossal/runtime/NonFinite.h"

#include "colossal/runtime/Communicator.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace colossal::runtime {

char NonFiniteError::ID = 0;

namespace {

/// The exponent mask of a float format of `Bits` bits: a value is NaN or ±inf exactly when all
/// its exponent bits are set.
template <typename Bits> int64_t scanExponent(const void *host, int64_t count, Bits mask) {
  const auto *p = static_cast<const unsigned char *>(host);
  for (int64_t i = 0; i < count; ++i) {
    Bits v;
    std::memcpy(&v, p + i * sizeof(Bits), sizeof(Bits));
    if ((v & mask) == mask) return i;
  }
  return -1;
}

/// Sign, exponent mask and mantissa mask of each float dtype, by bit pattern.
struct FloatBits {
  uint64_t sign, exponent, mantissa;
  unsigned bytes;
};

std::optional<FloatBits> floatBits(DType dtype) {
  switch (dtype) {
  case DType::F32: return FloatBits{0x80000000u, 0x7f800000u, 0x007fffffu, 4};
  case DType::F64: return FloatBits{0x8000000000000000ull, 0x7ff0000000000000ull, 0x000fffffffffffffull, 8};
  case DType::F16: return FloatBits{0x8000u, 0x7c00u, 0x03ffu, 2};
  case DType::BF16: return FloatBits{0x8000u, 0x7f80u, 0x007fu, 2};
  default: return std::nullopt;
  }
}

uint64_t bitsAt(const FloatBits &f, const void *host, int64_t index) {
  uint64_t v = 0;
  std::memcpy(&v, static_cast<const unsigned char *>(host) + index * f.bytes, f.bytes);  // little-endian
  return v;
}

/// 0 nan, 1 inf, 2 -inf (what travels between ranks).
int64_t valueCode(const std::string &text) { return text == "nan" ? 0 : text == "inf" ? 1 : 2; }
const char *codeText(int64_t code) { return code == 0 ? "nan" : code == 1 ? "inf" : "-inf"; }

}  // namespace

bool isFloatDType(DType dtype) { return floatBits(dtype).has_value(); }

int64_t firstNonFiniteElement(DType dtype, const void *host, int64_t count) {
  switch (dtype) {
  case DType::F32: return scanExponent<uint32_t>(host, count, 0x7f800000u);
  case DType::F64: return scanExponent<uint64_t>(host, count, 0x7ff0000000000000ull);
  case DType::F16: return scanExponent<uint16_t>(host, count, 0x7c00u);
  case DType::BF16: return scanExponent<uint16_t>(host, count, 0x7f80u);
  default: return -1;
  }
}

std::string nonFiniteText(DType dtype, const void *host, int64_t index) {
  std::optional<FloatBits> f = floatBits(dtype);
  if (!f) return "nan";
  uint64_t v = bitsAt(*f, host, index);
  if (v & f->mantissa) return "nan";
  return v & f->sign ? "-inf" : "inf";
}

std::string describeState(const StateEntry &e) {
  switch (e.role()) {
  case plan::StateTensor::PARAM: return "parameter '" + e.name() + "'";
  case plan::StateTensor::GRAD: {
    llvm::StringRef name = e.name();
    return "the gradient of '" + name.drop_back(name.ends_with(".grad") ? 5 : 0).str() + "'";
  }
  default: return "optimizer state '" + e.name() + "'";
  }
}

std::string describeNonFinite(const NonFiniteState &s) {
  std::string where = "element " + std::to_string(s.element);
  if (s.entry->layout) where += " of rank " + std::to_string(s.rank) + "'s shard";
  return describeState(*s.entry) + " (" + where + ": " + s.value + ")";
}

llvm::Expected<std::optional<NonFiniteValue>> firstNonFiniteRank(double local, CommContext *comm) {
  const bool bad = !std::isfinite(local);
  const int64_t code = std::isnan(local) ? 0 : local > 0 ? 1 : 2;
  if (!comm || comm->worldSize() < 2) {
    if (!bad) return std::nullopt;
    return NonFiniteValue{0, codeText(code)};
  }
  const int64_t none = std::numeric_limits<int64_t>::max();
  int64_t mine = bad ? comm->rank() : none, first = none;
  if (llvm::Error e = comm->world().allReduce(&mine, &first, 1, DType::I64, ReduceOp::Min)) return std::move(e);
  if (first == none) return std::nullopt;
  int64_t mineCode = first == comm->rank() ? code : 0, shared = 0;
  if (llvm::Error e = comm->world().allReduce(&mineCode, &shared, 1, DType::I64, ReduceOp::Sum)) return std::move(e);
  return NonFiniteValue{static_cast<int>(first), codeText(shared)};
}

llvm::Expected<std::optional<NonFiniteState>> findNonFiniteState(const StateStore &store,
                                                                 llvm::ArrayRef<plan::StateTensor::Role> roles,
                                                                 CommContext *comm) {
  // The first non-finite state of this rank, as its position in (roles, plan order).
  llvm::ArrayRef<StateEntry> entries = store.entries();
  const int64_t none = std::numeric_limits<int64_t>::max();
  int64_t key = none;
  NonFiniteState found;
  std::vector<char> staging;
  for (size_t r = 0; r < roles.size() && key == none; ++r)
    for (size_t i = 0; i < entries.size() && key == none; ++i) {
      const StateEntry &e = entries[i];
      if (e.role() != roles[r] || !isFloatDType(e.tensor.dtype)) continue;
      const void *host = e.tensor.data;
      if (store.device().kind() != DeviceKind::CPU) {
        staging.resize(e.tensor.bytes());
        store.device().copyToHost(staging.data(), e.tensor.data, e.tensor.bytes());
        host = staging.data();
      }
      int64_t at = firstNonFiniteElement(e.tensor.dtype, host, e.tensor.numel());
      if (at < 0) continue;
      key = static_cast<int64_t>(r * entries.size() + i);
      found = {&e, at, static_cast<int>(store.rank()), nonFiniteText(e.tensor.dtype, host, at)};
    }
  if (!comm || comm->worldSize() < 2) {
    if (key == none) return std::nullopt;
    return found;
  }
  // Agree on the first (state, lowest rank) over the world, then the owner tells its element and value.
  const int64_t world = comm->worldSize();
  int64_t mine = key == none ? none : key * world + comm->rank(), first = none;
  if (llvm::Error e = comm->world().allReduce(&mine, &first, 1, DType::I64, ReduceOp::Min)) return std::move(e);
  if (first == none) return std::nullopt;
  const int64_t agreedKey = first / world, owner = first % world;
  int64_t detail[2] = {0, 0}, shared[2] = {0, 0};
  if (owner == comm->rank()) detail[0] = found.element, detail[1] = valueCode(found.value);
  if (llvm::Error e = comm->world().allReduce(detail, shared, 2, DType::I64, ReduceOp::Sum)) return std::move(e);
  NonFiniteState s;
  s.entry = &entries[static_cast<size_t>(agreedKey) % entries.size()];
  s.element = shared[0];
  s.rank = static_cast<int>(owner);
  s.value = codeText(shared[1]);
  return s;
}

}  // namespace colossal::runtime

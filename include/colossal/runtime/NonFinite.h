//===- NonFinite.h - Finding NaN and infinity in tensors and training states ----*- C++ -*-===//
//
// What the training loop, the checkpoint writer and loader and `sample` use to refuse values that
// are not finite (docs/training.md "Non-finite values"): a scan of host bytes of a float tensor,
// the first non-finite state of a StateStore agreed by every rank of a job, and the error type that
// says every rank met the same error (so that one rank prints it and none has to abort the others).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_NONFINITE_H
#define COLOSSAL_RUNTIME_NONFINITE_H

#include "colossal/runtime/DType.h"
#include "colossal/runtime/StateStore.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace colossal::runtime {

class CommContext;

/// Whether `dtype` has NaN and infinities (f32, f64, f16, bf16).
bool isFloatDType(DType dtype);

/// The index of the first element of the `count` elements at `host` (row-major, `dtype`) that is
/// NaN or ±infinity, or -1 when all are finite or the dtype is not a float dtype. Reads the
/// exponent bits, so it is exact for every float format and costs one pass over the bytes.
int64_t firstNonFiniteElement(DType dtype, const void *host, int64_t count);

/// "nan", "inf" or "-inf": element `index` of `host` (which must be non-finite).
std::string nonFiniteText(DType dtype, const void *host, int64_t index);

/// One state holding a non-finite element.
struct NonFiniteState {
  const StateEntry *entry = nullptr;
  int64_t element = 0;  // row-major index in the tensor the owning rank holds (its shard, if sharded)
  int rank = 0;         // the lowest world rank holding a non-finite element of that state
  std::string value;    // "nan", "inf" or "-inf"
};

/// "parameter 'W'", "the gradient of 'W'", "optimizer state 'W.exp_avg'".
std::string describeState(const StateEntry &e);

/// "parameter 'W' (element 3: nan)"; for a sharded state "... (element 3 of rank 1's shard: nan)".
std::string describeNonFinite(const NonFiniteState &s);

/// The first state whose role is in `roles` (roles in the order given, then the plan's order) that
/// holds a non-finite element on some rank, or nullopt. With `comm` of two or more ranks this is a
/// collective over the world (every rank calls it with the same roles) and every rank gets the same
/// answer, element and value included; without, it scans this store only. Cost: one pass over the
/// states' bytes (a device copy for non-CPU devices). Errors: the collectives'.
llvm::Expected<std::optional<NonFiniteState>> findNonFiniteState(const StateStore &store,
                                                                 llvm::ArrayRef<plan::StateTensor::Role> roles,
                                                                 CommContext *comm);

/// Where a scalar that every rank computes (a loss, a norm) is not finite.
struct NonFiniteValue {
  int rank = 0;      // the lowest world rank where it is not finite
  std::string text;  // its value there: "nan", "inf" or "-inf"
};

/// The lowest world rank of `comm` whose `local` is NaN or ±inf, or nullopt when it is finite on
/// every rank: every rank gets the same answer. A collective over the world (one all-reduce; a
/// second one when some rank's value is not finite); without `comm` or with one rank, `local`
/// alone. Errors: the collectives'.
llvm::Expected<std::optional<NonFiniteValue>> firstNonFiniteRank(double local, CommContext *comm);

/// An error every rank of the job met alike, after agreeing on it (a non-finite step, a checkpoint
/// with non-finite values): the message is the same on every rank, so rank 0 prints it and every
/// rank leaves normally; no rank is left waiting in a collective.
class NonFiniteError : public llvm::ErrorInfo<NonFiniteError> {
public:
  static char ID;
  explicit NonFiniteError(std::string message) : message_(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override { os << message_; }
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }
  const std::string &text() const { return message_; }

private:
  std::string message_;
};

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_NONFINITE_H

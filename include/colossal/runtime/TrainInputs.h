//===- TrainInputs.h - train_step's inputs from .npy arrays and a seeded RNG ----*- C++ -*-===//
//
// The data contract of models that are not token models (the spec's `train.inputs`,
// TrainConfig.data_inputs; docs/training.md "Data for models that are not token models"). With
// global batch B, every step s has one global batch [B, ...] per input, independent of the mesh
// and of grad_accum; a rank's microbatch takes rows of it:
//
//   npy          row r of step s is row (s·B + r) mod N of the array (N rows, every npy input the
//                same N); with --shuffle row perm_e[(s·B + r) mod N], e = (s·B + r) div N, where
//                perm_e is the Fisher–Yates permutation of 0..N−1 with
//                j_i = w(K_e, i) mod (i + 1) for i = N−1 down to 1 (swap i and j_i),
//                K_e = mix(mix(seed ^ fnv1a64("train.inputs shuffle")) + e).
//   normal       element j of the global batch (row-major over [B, ...]) is
//                mean + std·√(−2 ln(1 − u(2j)))·cos(2π·u(2j+1)) in double, rounded to the input's
//                float dtype, with u(i) = (w(K, i) >> 11)·2⁻⁵³ and
//                K = mix(mix(seed ^ fnv1a64(NAME)) + s).
//   uniform_int  element j is low + w(K, j) mod (high − low) (K as for normal).
//
// w(K, i) = mix(K + i), mix = SplitMix64's output function (z += 0x9E3779B97F4A7C15;
// z = (z ^ z>>30)·0xBF58476D1CE4E5B9; z = (z ^ z>>27)·0x94D049BB133111EB; z ^ z>>31), all
// arithmetic mod 2⁶⁴; fnv1a64 of the name's bytes; seed = `--seed`.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_TRAININPUTS_H
#define COLOSSAL_RUNTIME_TRAININPUTS_H

#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Npy.h"

#include "plan.pb.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colossal::runtime {

/// SplitMix64's output function of `z + 0x9E3779B97F4A7C15` (Steele, Lea, Flood 2014).
uint64_t splitMix64(uint64_t z);

class TrainInputs {
public:
  /// Opens every source of `config.data_inputs()` for the program inputs `bindings` (train_step's:
  /// dtype and [b, ...] shape; the global batch is [global_batch, ...]). Npy arrays are read
  /// whole. Errors, each naming the input and file: an unreadable or malformed file, an array whose
  /// dtype or trailing dims do not fit the input ("expected float32 [N, 1, 8, 8], got float64
  /// [1797, 64]"), an empty array, npy inputs with different row counts, a source whose kind does
  /// not suit the input's dtype, an input of the config that `bindings` lacks.
  static llvm::Expected<std::unique_ptr<TrainInputs>> open(const plan::TrainConfig &config,
                                                           llvm::ArrayRef<BindingInfo> bindings,
                                                           uint64_t seed, bool shuffle);

  /// Computes the global batch of step `step` of every input (header comment).
  void prepare(int64_t step);
  /// Sets rows [firstRow, firstRow + rows) of the prepared batch as `ex`'s inputs.
  llvm::Error feed(Executor &ex, int64_t firstRow, int64_t rows) const;
  /// Writes the prepared global batch of every input to DIR/step-<8 digits>/<name>.npy (the
  /// file name by tensorFileName: docs/cli.md "Output files"), creating the folders.
  llvm::Error dump(llvm::StringRef dir, int64_t step) const;

  /// The row the global row index `g` = s·B + r reads from the npy arrays (header comment).
  int64_t arrayRow(int64_t g);

private:
  struct Input {
    const plan::DataInput *source = nullptr;
    DType dtype = DType::Invalid;
    std::vector<int64_t> globalShape; // [B, ...]
    size_t rowBytes = 0;
    NpyArray array;                   // npy
    std::vector<char> batch;          // the prepared global batch
  };
  TrainInputs() = default;
  std::vector<Input> inputs_;
  uint64_t seed_ = 0;
  bool shuffle_ = false;
  int64_t rows_ = 0;        // N of the npy arrays (0: none)
  int64_t batch_ = 0;       // B
  int64_t permEpoch_ = -1;  // the epoch perm_ holds
  std::vector<int64_t> perm_;
};

}  // namespace colossal::runtime

#endif  // COLOSSAL_RUNTIME_TRAININPUTS_H

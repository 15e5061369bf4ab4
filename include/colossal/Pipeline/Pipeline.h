//===- Pipeline.h - the pass pipeline a spec asks for ---------------*- C++ -*-===//
//
// docs/spec.md "Pipeline" and docs/architecture.md: the pipeline is built in C++ with each pass's
// typed options (the generated `<Pass>Options` structs), not glued from strings, so every value
// of the spec (regexes included) reaches its pass exactly. `colossal-opt --dump-pass-pipeline`
// prints it in MLIR's textual form, which parses back (`--pass-pipeline=...`, the spec's
// `passes:`).
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_PIPELINE_PIPELINE_H
#define COLOSSAL_PIPELINE_PIPELINE_H

#include "colossal/Spec/Spec.h"

namespace mlir {
class OpPassManager;
}

namespace colossal {

/// Appends to `pm` (anchored on builtin.module) the pipeline for `spec`:
///   colossal-define-mesh (a mesh with an axis > 1) · func.func(canonicalize, fusions, cse) ·
///   colossal-split-batch (dp · grad_accum > 1) · [train: colossal-append-loss · colossal-autodiff
///   · colossal-optimizer · func.func(canonicalize, cse)] · [tp > 1: colossal-spmd-partition ·
///   func.func(canonicalize, cse)] · [train, dp > 1: colossal-data-parallel ·
///   func.func(colossal-bucket-gradients)].
void buildColossalPipeline(mlir::OpPassManager &pm, const Spec &spec);

} // namespace colossal

#endif

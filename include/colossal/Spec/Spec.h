//===- Spec.h - the parallelization spec file -----------------------*- C++ -*-===//
#ifndef COLOSSAL_SPEC_SPEC_H
#define COLOSSAL_SPEC_SPEC_H

#include "llvm/Support/Error.h"
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colossal {

/// The `train:` section (docs/training.md "Spec"), defaults filled in. Present iff mode is train.
struct TrainSpec {
  // loss
  std::string lossKind = "cross_entropy"; // cross_entropy | output
  std::string logits;                     // cross_entropy: the logits output [..., C]
  std::string labels = "labels";          // the int64 labels input (created for cross_entropy)
  std::string output;                     // output: the model's scalar loss output
  int64_t ignoreIndex = -100;
  // optimizer (PyTorch's defaults)
  std::string optimizer = "adamw"; // sgd | adam | adamw
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weightDecay = 0.01; // adamw's default; adam and sgd: 0
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  // lr_schedule
  std::string schedule = "constant"; // constant | cosine
  int64_t warmupSteps = 0, totalSteps = 0;
  double minLr = 0;
  double gradClip = 0; // 0: off
  int64_t gradAccum = 1;
  std::vector<std::string> frozen, noDecay; // POSIX extended regexes (whole-name match)
};

/// The parsed spec (DESIGN.md "Spec file"). Only what the compiler implements is represented;
/// every other key the format defines is rejected by the parser as "not supported yet".
struct Spec {
  std::string mode = "inference";
  std::vector<std::pair<std::string, std::vector<int64_t>>> inputs; // global shapes
  std::vector<std::pair<std::string, std::string>> values;          // NAME -> .npy path
  std::string passes;                                               // replaces the pipeline
  std::optional<TrainSpec> train;                                   // set iff mode == "train"
};

/// Parses `path` with LLVM's YAML I/O. Unknown keys and bad values are errors that carry
/// `path:line:col`; known-but-unimplemented keys or values are "not supported yet" errors.
/// Relative `values` paths are resolved against the spec's folder.
llvm::Expected<Spec> parseSpecFile(llvm::StringRef path);

/// The textual pass pipeline the spec generates (what --dump-pass-pipeline prints). In train mode
/// it appends colossal-append-loss, colossal-autodiff and colossal-optimizer with every `train:`
/// value as a pass option (docs/training.md "Compiler pipeline").
std::string defaultPipeline(const Spec &spec);

} // namespace colossal

#endif

//===- Spec.cpp - the spec file (YAML through LLVM's YAML I/O) -------------===//
//
// Every key DESIGN.md defines is mapped, so a typo is an "unknown key" error with line and column.
// What the compiler does not implement yet (several ranks, training, reduced precision, ZeRO) is
// rejected with "not supported yet" at the offending node instead of being ignored.
//===----------------------------------------------------------------------===//
#include "colossal/Spec/Spec.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"
#include "llvm/Support/YAMLTraits.h"

#include <charconv>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>

using namespace llvm;

namespace {

struct TensorParallel {
  std::string style = "1d";
  bool sequenceParallel = false;
  int64_t depth = 0;                         // 2.5d: the depth d of the q x q x d grid
  std::map<std::string, std::string> hints;  // regex -> "DIM,DIM,..." (docs/spec.md)
};
/// `parallel.pipeline.stages`: `auto` or a list of cut points (node names or regexes).
struct Stages {
  std::string scalar = "auto";
  std::vector<std::string> cuts;
};
struct PipelineParallel {
  std::string schedule = "1f1b";
  bool scheduleSet = false;  // `schedule` written in the spec
  int64_t microbatches = 1;
  int64_t virtualStages = 1;
  bool virtualStagesSet = false;  // `virtual_stages` written in the spec
  Stages stages;
  std::string scheduleFile;
};
struct Parallel {
  std::optional<TensorParallel> tensor;
  std::optional<PipelineParallel> pipeline;
};
/// `precision.loss_scale` (fp16's dynamic loss scaling; torch.cuda.amp.GradScaler's defaults).
struct LossScale {
  double initial = 65536, growthFactor = 2.0, backoffFactor = 0.5, min = 1.0;
  int64_t growthInterval = 2000;
};
struct Precision {
  std::string compute = "fp32";
  std::optional<LossScale> lossScale;
};
/// `memory:` (docs/training.md "Memory budget"): a budget, activation recompute and offload.
struct Memory {
  std::optional<double> budgetMb;
  std::string recompute = "none", offload = "none", offloadDir;
};
/// `generate:` (serving; mode generate).
struct Generate {
  int64_t maxSeqLen = 512, blockSize = 16, maxBatchSeqs = 16;
  /// Unset: min(512, the largest power of two <= max_seq_len / 2), so that the model is imported
  /// at max_seq_len positions (colossal-generate cuts them twice into the largest step).
  std::optional<int64_t> maxBatchTokens;
  std::string kvBlocks = "auto";
};
/// One `train.inputs` entry: where an input of a model that is not a token model comes from.
struct NormalSource {
  double mean = 0, std = 1;
};
struct TrainInput {
  std::optional<std::string> npy;
  std::optional<NormalSource> normal;
  std::vector<int64_t> uniformInt;
};
using TrainInputMap = std::map<std::string, TrainInput>;
struct BucketMbTag {
  static constexpr double dflt = 25;
  static StringRef check(double v) {
    return v >= 0 && v <= 1048576 ? "" : "zero.bucket_mb must be a size in MiB in [0, 1048576]";
  }
};
struct Zero {
  int64_t stage = 0;
  double bucketMb = BucketMbTag::dflt; // MiB; checked by BucketMbTag in the mapping
};

/// Scalars validated where they are read, so errors point at the value's line and column.
struct Mode {
  std::string value;
};
struct MeshSize {
  int64_t value = 1;
};
struct Dim {
  int64_t value = 0;
};

/// A number checked where it is read (so the error points at it). `Tag::check` returns the error
/// message for a bad value, or an empty StringRef.
template <typename Tag> struct Real {
  double value = Tag::dflt;
};
template <typename Tag> struct Int {
  int64_t value = Tag::dflt;
};
struct LrTag {
  static constexpr double dflt = 0;
  static StringRef check(double v) { return v > 0 ? "" : "lr must be a number > 0"; }
};
struct BetaTag {
  static constexpr double dflt = 0;
  static StringRef check(double v) {
    return v >= 0 && v < 1 ? "" : "each of betas must be a number in [0, 1)";
  }
};
struct NonNegativeTag {
  static constexpr double dflt = 0;
  static StringRef check(double v) { return v >= 0 ? "" : "expected a number >= 0"; }
};
struct DampeningTag {
  static constexpr double dflt = 0;
  static StringRef check(double v) {
    return v >= 0 && v <= 1 ? "" : "dampening must be a number in [0, 1]";
  }
};
struct GradClipTag {
  static constexpr double dflt = 0;
  static StringRef check(double v) {
    return v > 0 ? "" : "grad_clip must be a number > 0 (leave it out to turn clipping off)";
  }
};
struct GradAccumTag {
  static constexpr int64_t dflt = 1;
  static StringRef check(int64_t v) {
    return v >= 1 ? "" : "grad_accum must be an integer >= 1 (microbatches per optimizer step)";
  }
};
struct StepsTag {
  static constexpr int64_t dflt = 0;
  static StringRef check(int64_t v) { return v >= 0 ? "" : "expected an integer >= 0"; }
};
struct AnyIntTag {
  static constexpr int64_t dflt = -100;
  static StringRef check(int64_t) { return ""; }
};

/// A regex of `frozen` / `no_decay`, validated with LLVM's Regex (POSIX extended).
struct Pattern {
  std::string value;
};
/// A `kind:` value from a fixed list.
template <typename Tag> struct Kind {
  std::string value = Tag::dflt;
};
struct LossKindTag {
  static constexpr const char *dflt = "cross_entropy";
  static constexpr const char *choices[] = {"cross_entropy", "output"};
  static constexpr const char *error = "loss.kind must be cross_entropy or output";
};
struct OptimizerKindTag {
  static constexpr const char *dflt = "adamw";
  static constexpr const char *choices[] = {"sgd", "adam", "adamw"};
  static constexpr const char *error = "optimizer.kind must be sgd, adam or adamw";
};
struct ScheduleKindTag {
  static constexpr const char *dflt = "constant";
  static constexpr const char *choices[] = {"constant", "cosine"};
  static constexpr const char *error = "lr_schedule.kind must be constant or cosine";
};

struct RawLoss {
  Kind<LossKindTag> kind;
  std::string logits, labels = "labels", output;
  Int<AnyIntTag> ignoreIndex;
};
struct RawOptimizer {
  Kind<OptimizerKindTag> kind;
  Real<LrTag> lr;
  std::vector<Real<BetaTag>> betas;
  std::optional<Real<NonNegativeTag>> eps, weightDecay, momentum;
  Real<DampeningTag> dampening;
  bool nesterov = false;
};
struct RawSchedule {
  Kind<ScheduleKindTag> kind;
  Int<StepsTag> warmupSteps, totalSteps;
  Real<NonNegativeTag> minLr;
};
struct RawTrain {
  RawLoss loss;
  RawOptimizer optimizer;
  std::optional<RawSchedule> schedule;
  std::optional<Real<GradClipTag>> gradClip;
  Int<GradAccumTag> gradAccum;
  std::vector<Pattern> frozen, noDecay;
  std::optional<TrainInputMap> inputs;
};

using ShapeMap = std::map<std::string, std::vector<Dim>>;
using ValueMap = std::map<std::string, std::string>;
using MeshMap = std::map<std::string, MeshSize>;

struct RawSpec {
  Mode mode;
  ShapeMap inputs;
  ValueMap values;
  MeshMap mesh;
  std::optional<Parallel> parallel;
  std::optional<Precision> precision;
  std::optional<Zero> zero;
  std::optional<Memory> memory;
  std::optional<Generate> generate;
  std::string device = "cpu";
  std::string passes;
  RawTrain train;
};

} // namespace

LLVM_YAML_IS_FLOW_SEQUENCE_VECTOR(Dim)
LLVM_YAML_IS_FLOW_SEQUENCE_VECTOR(Real<BetaTag>)
LLVM_YAML_IS_FLOW_SEQUENCE_VECTOR(Pattern)

namespace llvm::yaml {

template <> struct ScalarTraits<Mode> {
  static void output(const Mode &m, void *, raw_ostream &os) { os << m.value; }
  static StringRef input(StringRef scalar, void *, Mode &m) {
    m.value = scalar.str();
    if (scalar == "inference" || scalar == "train" || scalar == "generate")
      return {};
    return "mode must be inference, train or generate";
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <> struct ScalarTraits<Dim> {
  static void output(const Dim &d, void *, raw_ostream &os) { os << d.value; }
  static StringRef input(StringRef scalar, void *, Dim &d) {
    if (scalar.getAsInteger(10, d.value))
      return "a dimension must be an integer";
    if (d.value < 0)
      return "a dimension must be >= 0";
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <> struct ScalarTraits<MeshSize> {
  static void output(const MeshSize &m, void *, raw_ostream &os) { os << m.value; }
  static StringRef input(StringRef scalar, void *, MeshSize &m) {
    if (scalar.getAsInteger(10, m.value) || m.value < 1)
      return "a mesh axis size must be a positive integer";
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <typename Tag> struct ScalarTraits<Real<Tag>> {
  static void output(const Real<Tag> &r, void *, raw_ostream &os) { os << r.value; }
  static StringRef input(StringRef scalar, void *, Real<Tag> &r) {
    // YAML's .inf/.nan spellings are not numbers here; every value must be finite.
    if (scalar.getAsDouble(r.value) || !std::isfinite(r.value))
      return "expected a finite number";
    return Tag::check(r.value);
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};
template <typename Tag> struct ScalarTraits<Int<Tag>> {
  static void output(const Int<Tag> &i, void *, raw_ostream &os) { os << i.value; }
  static StringRef input(StringRef scalar, void *, Int<Tag> &i) {
    if (scalar.getAsInteger(10, i.value))
      return "expected an integer";
    return Tag::check(i.value);
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};
template <typename Tag> struct ScalarTraits<Kind<Tag>> {
  static void output(const Kind<Tag> &k, void *, raw_ostream &os) { os << k.value; }
  static StringRef input(StringRef scalar, void *, Kind<Tag> &k) {
    k.value = scalar.str();
    return llvm::is_contained(Tag::choices, scalar) ? StringRef() : StringRef(Tag::error);
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <> struct ScalarTraits<Pattern> {
  static void output(const Pattern &p, void *, raw_ostream &os) { os << p.value; }
  static StringRef input(StringRef scalar, void *, Pattern &p) {
    static std::string message; // the parser copies it into its diagnostic at once
    p.value = scalar.str();
    std::string why;
    if (!Regex(("^(" + scalar + ")$").str()).isValid(why)) {
      message = "invalid regex (POSIX extended): " + why;
      return message;
    }
    // The regex travels as a pass option (`frozen=a,b`), which a space, a quote, a comma outside
    // `{m,n}` or an unbalanced bracket would split or end.
    int depth[3] = {0, 0, 0};
    for (char c : scalar) {
      if (c == ' ' || c == '\t' || c == '"' || c == '\'')
        return "a regex here may not hold spaces or quotes (write [[:space:]] or . instead)";
      if (c == ',' && depth[2] == 0)
        return "a regex here may hold a comma only inside {m,n} (the list travels as a "
               "comma-separated pass option)";
      depth[0] += c == '(' ? 1 : c == ')' ? -1 : 0;
      depth[1] += c == '[' ? 1 : c == ']' ? -1 : 0;
      depth[2] += c == '{' ? 1 : c == '}' ? -1 : 0;
    }
    if (depth[0] || depth[1] || depth[2])
      return "a regex here must have balanced (), [] and {} (it travels as a pass option)";
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
};

template <> struct MappingTraits<RawLoss> {
  static void mapping(IO &io, RawLoss &l) {
    io.mapOptional("kind", l.kind);
    if (l.kind.value == "output") {
      io.mapRequired("output", l.output);
      io.mapOptional("logits", l.logits); // optional: gives the vocabulary size
    } else {
      io.mapRequired("logits", l.logits);
    }
    io.mapOptional("labels", l.labels);
    io.mapOptional("ignore_index", l.ignoreIndex);
  }
  static std::string validate(IO &, RawLoss &l) {
    if (l.labels.empty())
      return "loss.labels must name the labels input";
    if (l.kind.value == "output" && l.output.empty())
      return "loss.output must name the model's scalar loss output";
    if (l.kind.value == "cross_entropy" && l.logits.empty())
      return "loss.logits must name the model's logits output";
    return "";
  }
};
template <> struct MappingTraits<RawOptimizer> {
  static void mapping(IO &io, RawOptimizer &o) {
    // Keys that do not apply to the kind are not mapped, so they are "unknown key" errors.
    io.mapOptional("kind", o.kind);
    io.mapRequired("lr", o.lr);
    if (o.kind.value == "sgd") {
      io.mapOptional("momentum", o.momentum);
      io.mapOptional("dampening", o.dampening);
      io.mapOptional("nesterov", o.nesterov);
    } else {
      io.mapOptional("betas", o.betas);
      io.mapOptional("eps", o.eps);
    }
    io.mapOptional("weight_decay", o.weightDecay);
  }
  static std::string validate(IO &, RawOptimizer &o) {
    if (!o.betas.empty() && o.betas.size() != 2)
      return "optimizer.betas must be two numbers [beta1, beta2]";
    double momentum = o.momentum ? o.momentum->value : 0;
    if (o.nesterov && (momentum <= 0 || o.dampening.value != 0))
      return "optimizer: nesterov needs momentum > 0 and dampening 0 (as torch.optim.SGD)";
    return "";
  }
};
template <> struct MappingTraits<RawSchedule> {
  static void mapping(IO &io, RawSchedule &s) {
    io.mapOptional("kind", s.kind);
    if (s.kind.value == "cosine") {
      io.mapOptional("warmup_steps", s.warmupSteps);
      io.mapRequired("total_steps", s.totalSteps);
      io.mapOptional("min_lr", s.minLr);
    }
  }
  static std::string validate(IO &, RawSchedule &s) {
    if (s.kind.value == "cosine" && s.totalSteps.value < s.warmupSteps.value)
      return "lr_schedule: total_steps (" + std::to_string(s.totalSteps.value) +
             ") must be >= warmup_steps (" + std::to_string(s.warmupSteps.value) + ")";
    return "";
  }
};
template <> struct MappingTraits<RawTrain> {
  static void mapping(IO &io, RawTrain &t) {
    io.mapRequired("loss", t.loss);
    io.mapRequired("optimizer", t.optimizer);
    io.mapOptional("lr_schedule", t.schedule);
    io.mapOptional("grad_clip", t.gradClip);
    io.mapOptional("grad_accum", t.gradAccum);
    io.mapOptional("frozen", t.frozen);
    io.mapOptional("no_decay", t.noDecay);
    io.mapOptional("inputs", t.inputs);
  }
  static std::string validate(IO &, RawTrain &t) {
    if (t.schedule && t.schedule->kind.value == "cosine" &&
        t.schedule->minLr.value > t.optimizer.lr.value)
      return "lr_schedule.min_lr must not exceed optimizer.lr";
    return "";
  }
};

template <> struct CustomMappingTraits<ShapeMap> {
  static void inputOne(IO &io, StringRef key, ShapeMap &m) {
    io.mapRequired(key.str().c_str(), m[key.str()]);
  }
  static void output(IO &, ShapeMap &) {}
};
template <> struct CustomMappingTraits<ValueMap> {
  static void inputOne(IO &io, StringRef key, ValueMap &m) {
    io.mapRequired(key.str().c_str(), m[key.str()]);
  }
  static void output(IO &, ValueMap &) {}
};
template <> struct CustomMappingTraits<MeshMap> {
  static void inputOne(IO &io, StringRef key, MeshMap &m) {
    MeshSize &size = m[key.str()];
    io.mapRequired(key.str().c_str(), size);
    // Any other name is an error whatever its size (a misspelt `tq: 1` must not pass unnoticed;
    // docs/spec.md "mesh").
    if (key != "dp" && key != "tp" && key != "pp")
      io.setError("mesh axis '" + key + "' of size " + Twine(size.value) +
                  ": unknown mesh axis (known: dp, tp, pp)");
  }
  static void output(IO &, MeshMap &) {}
};

template <> struct MappingTraits<TensorParallel> {
  static void mapping(IO &io, TensorParallel &t) {
    io.mapOptional("style", t.style);
    io.mapOptional("sequence_parallel", t.sequenceParallel);
    io.mapOptional("depth", t.depth);
    io.mapOptional("hints", t.hints);
  }
  static std::string validate(IO &, TensorParallel &t) {
    if (t.style != "1d" && t.style != "2d" && t.style != "2.5d" && t.style != "3d")
      return "parallel.tensor.style must be one of 1d, 2d, 2.5d, 3d; got '" + t.style + "'";
    if (t.sequenceParallel && t.style != "1d")
      return "parallel.tensor.sequence_parallel applies to style 1d (Megatron), not " + t.style;
    if (t.style == "2.5d" ? t.depth < 1 : t.depth != 0)
      return t.style == "2.5d" ? "parallel.tensor: style 2.5d needs depth >= 1"
                               : "parallel.tensor.depth applies to style 2.5d only";
    for (auto &[pattern, dims] : t.hints) {
      std::string err;
      if (!llvm::Regex(pattern).isValid(err))
        return "parallel.tensor.hints: '" + pattern + "' is not a regex: " + err;
      for (StringRef d : llvm::split(StringRef(dims), ','))
        if (d.trim().empty())
          return "parallel.tensor.hints: '" + pattern + "': '" + dims +
                 "' must list one entry per dim, '-' or mesh axes joined by '*'";
    }
    return "";
  }
};
template <> struct MappingTraits<Stages> {
  static void mapping(IO &io, Stages &) {
    io.setError("parallel.pipeline.stages must be auto or a list of cut points, not a mapping");
  }
};
template <> struct PolymorphicTraits<Stages> {
  static NodeKind getKind(const Stages &s) {
    return s.cuts.empty() ? NodeKind::Scalar : NodeKind::Sequence;
  }
  static std::string &getAsScalar(Stages &s) { return s.scalar; }
  static std::vector<std::string> &getAsSequence(Stages &s) {
    s.scalar.clear();
    return s.cuts;
  }
  static Stages &getAsMap(Stages &s) { return s; }
};
template <> struct MappingTraits<PipelineParallel> {
  static void mapping(IO &io, PipelineParallel &p) {
    std::optional<std::string> schedule;
    io.mapOptional("schedule", schedule);
    if (schedule) {
      p.schedule = *schedule;
      p.scheduleSet = true;
    }
    io.mapOptional("microbatches", p.microbatches);
    std::optional<int64_t> virtualStages;
    io.mapOptional("virtual_stages", virtualStages);
    if (virtualStages) {
      p.virtualStages = *virtualStages;
      p.virtualStagesSet = true;
    }
    io.mapOptional("stages", p.stages);
    io.mapOptional("schedule_file", p.scheduleFile);
  }
  static std::string validate(IO &, PipelineParallel &p) {
    if (p.schedule == "zero-bubble")
      return "parallel.pipeline.schedule 'zero-bubble' names a family: use zb-h1 (ZB-H1, one "
             "chunk per rank) or zbv (ZB-V, two chunks per rank)";
    static const char *known[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv"};
    if (!llvm::is_contained(known, p.schedule))
      return "parallel.pipeline.schedule must be one of gpipe, 1f1b, interleaved, zb-h1, zbv; "
             "got '" + p.schedule + "'";
    if (p.microbatches < 1)
      return "parallel.pipeline.microbatches must be >= 1";
    if (p.virtualStages < 1)
      return "parallel.pipeline.virtual_stages must be >= 1";
    if (p.stages.scalar != "auto" && p.stages.cuts.empty())
      return "parallel.pipeline.stages must be auto or a list of cut points (node names or "
             "regexes); got '" + p.stages.scalar + "'";
    // ZB-V runs two chunks per rank in a V; virtual_stages may be left out.
    if (p.schedule == "zbv" && !p.virtualStagesSet)
      p.virtualStages = 2;
    if (p.schedule == "zbv" && p.virtualStages != 2)
      return "parallel.pipeline.schedule zbv runs 2 chunks per rank (virtual_stages 2), got virtual_stages " +
             std::to_string(p.virtualStages);
    if (p.schedule == "interleaved" && p.virtualStages < 2)
      return "parallel.pipeline.schedule interleaved needs virtual_stages >= 2 (chunks per rank), got " +
             std::to_string(p.virtualStages);
    if (p.schedule != "interleaved" && p.schedule != "zbv" && p.virtualStages != 1)
      return "parallel.pipeline.virtual_stages " + std::to_string(p.virtualStages) + " applies to schedule "
             "interleaved (" + p.schedule + " runs one chunk per rank)";
    for (const std::string &cut : p.stages.cuts) {
      std::string err;
      if (!llvm::Regex(cut).isValid(err))
        return "parallel.pipeline.stages: '" + cut + "' is not a regex: " + err;
    }
    return "";
  }
};
template <> struct MappingTraits<Parallel> {
  static void mapping(IO &io, Parallel &p) {
    io.mapOptional("tensor", p.tensor);
    io.mapOptional("pipeline", p.pipeline);
  }
};
template <> struct MappingTraits<LossScale> {
  static void mapping(IO &io, LossScale &l) {
    io.mapOptional("initial", l.initial);
    io.mapOptional("growth_factor", l.growthFactor);
    io.mapOptional("backoff_factor", l.backoffFactor);
    io.mapOptional("growth_interval", l.growthInterval);
    io.mapOptional("min", l.min);
  }
  static std::string validate(IO &, LossScale &l) {
    auto num = [](double v) { // shortest round-trip form, as the user would write it
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof buf, v);
      return std::string(buf, res.ptr);
    };
    // The scale multiplies an f32 loss: it must be a finite float32.
    constexpr double kMaxF32 = 3.4028234663852886e38;
    if (!(l.initial > 0) || !(l.initial <= kMaxF32))
      return "precision.loss_scale.initial must be a float32 > 0 (at most 3.4e38), got " + num(l.initial);
    if (!(l.min > 0) || l.min > l.initial)
      return "precision.loss_scale.min must be > 0 and at most initial (" + num(l.initial) + "), got " + num(l.min);
    if (!(l.growthFactor > 1) || !(l.growthFactor <= kMaxF32))
      return "precision.loss_scale.growth_factor must be > 1, got " + num(l.growthFactor);
    if (!(l.backoffFactor > 0 && l.backoffFactor < 1))
      return "precision.loss_scale.backoff_factor must be in (0, 1), got " + num(l.backoffFactor);
    if (l.growthInterval < 1)
      return "precision.loss_scale.growth_interval must be an integer >= 1, got " + std::to_string(l.growthInterval);
    return "";
  }
};
template <> struct MappingTraits<Precision> {
  static void mapping(IO &io, Precision &p) {
    io.mapOptional("compute", p.compute);
    io.mapOptional("loss_scale", p.lossScale);
  }
  static std::string validate(IO &, Precision &p) {
    if (p.compute != "fp32" && p.compute != "bf16" && p.compute != "fp16")
      return "precision.compute must be fp32, bf16 or fp16; got '" + p.compute + "'";
    if (p.lossScale && p.compute != "fp16")
      return "precision.loss_scale applies to compute: fp16 only";
    return "";
  }
};
template <> struct MappingTraits<Memory> {
  static void mapping(IO &io, Memory &m) {
    io.mapOptional("budget_mb", m.budgetMb);
    io.mapOptional("recompute", m.recompute);
    io.mapOptional("offload", m.offload);
    io.mapOptional("offload_dir", m.offloadDir);
  }
  static std::string validate(IO &, Memory &m) {
    static const char *recompute[] = {"none", "full", "selective", "auto"};
    static const char *offload[] = {"none", "optimizer", "params", "auto"};
    if (m.budgetMb && !(*m.budgetMb * 1048576.0 >= 1))
      return "memory.budget_mb must be a size in MiB of at least one byte (2^-20)";
    if (!llvm::is_contained(recompute, m.recompute))
      return "memory.recompute must be none, full, selective or auto; got '" + m.recompute + "'";
    if (!llvm::is_contained(offload, m.offload))
      return "memory.offload must be none, optimizer, params or auto; got '" + m.offload + "'";
    if (!m.offloadDir.empty() && m.offload == "none")
      return "memory.offload_dir names the folder of the offload tier; set memory.offload too";
    if (m.budgetMb && *m.budgetMb > 1048576.0 * 1024)
      return "memory.budget_mb must be at most 2^30 MiB";
    return "";
  }
};
template <> struct MappingTraits<Generate> {
  static void mapping(IO &io, Generate &g) {
    io.mapOptional("max_seq_len", g.maxSeqLen);
    io.mapOptional("block_size", g.blockSize);
    io.mapOptional("kv_blocks", g.kvBlocks);
    io.mapOptional("max_batch_seqs", g.maxBatchSeqs);
    io.mapOptional("max_batch_tokens", g.maxBatchTokens);
  }
  static std::string validate(IO &, Generate &g) {
    int64_t blocks = 0;
    if (g.maxSeqLen < 1 || g.blockSize < 1 || g.maxBatchSeqs < 1 || (g.maxBatchTokens && *g.maxBatchTokens < 1))
      return "generate: max_seq_len, block_size, max_batch_seqs and max_batch_tokens must be >= 1";
    if (g.kvBlocks != "auto" && (StringRef(g.kvBlocks).getAsInteger(10, blocks) || blocks < 1))
      return "generate.kv_blocks must be auto or an integer >= 1; got '" + g.kvBlocks + "'";
    return "";
  }
};
template <> struct MappingTraits<NormalSource> {
  static void mapping(IO &io, NormalSource &n) {
    io.mapOptional("mean", n.mean);
    io.mapOptional("std", n.std);
  }
};
template <> struct MappingTraits<TrainInput> {
  static void mapping(IO &io, TrainInput &t) {
    io.mapOptional("npy", t.npy);
    io.mapOptional("normal", t.normal);
    io.mapOptional("uniform_int", t.uniformInt);
  }
  static std::string validate(IO &, TrainInput &t) {
    int sources = t.npy.has_value() + t.normal.has_value() + !t.uniformInt.empty();
    if (sources != 1)
      return "train.inputs: each input needs exactly one of npy, normal, uniform_int";
    if (!t.uniformInt.empty() && (t.uniformInt.size() != 2 || t.uniformInt[0] >= t.uniformInt[1]))
      return "train.inputs: uniform_int is [low, high) with low < high";
    if (t.normal && !(t.normal->std > 0))
      return "train.inputs: normal.std must be > 0";
    return "";
  }
};
template <> struct CustomMappingTraits<TrainInputMap> {
  static void inputOne(IO &io, StringRef key, TrainInputMap &m) {
    // The names travel as a comma-separated pass option (colossal-append-loss data-inputs).
    if (key.find_first_of(", \t\"'") != StringRef::npos)
      io.setError("train.inputs: input name '" + key +
                  "' may not hold commas, spaces or quotes (it travels as a pass option)");
    io.mapRequired(key.str().c_str(), m[key.str()]);
  }
  static void output(IO &, TrainInputMap &) {}
};
template <> struct MappingTraits<Zero> {
  static void mapping(IO &io, Zero &z) {
    io.mapOptional("stage", z.stage);
    io.mapOptional("bucket_mb", z.bucketMb);
  }
  static std::string validate(IO &, Zero &z) {
    if (StringRef err = BucketMbTag::check(z.bucketMb); !err.empty())
      return err.str();
    if (z.stage < 0 || z.stage > 3)
      return "zero.stage must be 0, 1, 2 or 3; got " + std::to_string(z.stage);
    return "";
  }
};

template <> struct MappingTraits<RawSpec> {
  static void mapping(IO &io, RawSpec &s) {
    io.mapRequired("mode", s.mode);
    io.mapOptional("inputs", s.inputs);
    io.mapOptional("values", s.values);
    io.mapOptional("mesh", s.mesh);
    io.mapOptional("parallel", s.parallel);
    io.mapOptional("precision", s.precision);
    io.mapOptional("zero", s.zero);
    io.mapOptional("memory", s.memory);
    io.mapOptional("generate", s.generate);
    io.mapOptional("device", s.device);
    io.mapOptional("passes", s.passes);
    if (s.device != "cpu")
      io.setError(s.device == "cuda" ? "device: cuda is not supported yet (the CUDA backend)"
                                     : "device must be cpu or cuda; got '" + s.device + "'");
    if (s.mode.value == "train")
      io.mapRequired("train", s.train);
    else if (llvm::is_contained(io.keys(), "train"))
      io.setError("train: applies only to mode: train");
  }
};

} // namespace llvm::yaml

namespace colossal {

Expected<Spec> parseSpecFile(StringRef path) {
  auto buffer = MemoryBuffer::getFile(path);
  if (!buffer)
    return createStringError(buffer.getError(),
                             path + ": cannot read spec: " + buffer.getError().message());
  std::string diag;
  auto handler = [](const SMDiagnostic &d, void *ctx) {
    auto *out = static_cast<std::string *>(ctx);
    if (!out->empty())
      return;
    raw_string_ostream os(*out);
    os << d.getFilename() << ":" << d.getLineNo() << ":" << (d.getColumnNo() + 1) << ": ";
    // yaml::Input's value errors ("not a mapping", "invalid number") do not say whose value: the
    // key is the last `name:` before the value on its line.
    StringRef msg = d.getMessage();
    if (msg == "not a mapping" || msg == "not a sequence" || msg == "invalid number" ||
        msg == "invalid boolean" || msg.starts_with("invalid hex")) {
      StringRef before = d.getLineContents().take_front(d.getColumnNo());
      size_t colon = before.rfind(':');
      if (colon != StringRef::npos) {
        StringRef key = before.take_front(colon).rtrim();
        size_t start = key.find_last_of(" {,[-");
        key = (start == StringRef::npos ? key : key.drop_front(start + 1)).trim();
        if (!key.empty()) {
          os << "'" << key << "': " << msg;
          if (msg == "not a mapping")
            os << " (it takes a mapping, e.g. " << key << ": {...}; docs/spec.md)";
          return;
        }
      }
    }
    os << msg;
  };
  // The document must be one YAML mapping (yaml::Input assumes a mapping at the root).
  {
    SourceMgr sm;
    std::string syntax; // the parser's first error, as file:line:col: message
    sm.setDiagHandler(
        [](const SMDiagnostic &d, void *ctx) {
          auto *first = static_cast<std::string *>(ctx);
          if (!first->empty()) return;
          raw_string_ostream os(*first);
          os << ":" << d.getLineNo() << ":" << (d.getColumnNo() + 1) << ": invalid YAML: " << d.getMessage();
        },
        &syntax);
    yaml::Stream stream((*buffer)->getMemBufferRef(), sm);
    std::string where;
    auto at = [&](yaml::Node *node) {
      SMLoc loc = node ? node->getSourceRange().Start : SMLoc::getFromPointer((*buffer)->getBufferStart());
      auto [line, col] = sm.getLineAndColumn(loc);
      return (path + ":" + Twine(line) + ":" + Twine(col) + ": ").str();
    };
    // A syntax error the parser met on the way explains any refusal below better than it does.
    auto refuse = [&](const Twine &msg) {
      return createStringError(inconvertibleErrorCode(), syntax.empty() ? msg.str() : (path + syntax).str());
    };
    auto doc = stream.begin();
    if (doc == stream.end() || !doc->getRoot() ||
        !llvm::isa<yaml::MappingNode>(doc->getRoot()))
      return refuse(path + ": the spec must be a YAML mapping with at least `mode:` (e.g. `mode: inference`)");
    if (++doc != stream.end() && doc->getRoot() && !llvm::isa<yaml::NullNode>(doc->getRoot()))
      return refuse(at(doc->getRoot()) + "the spec must be a single YAML document");
    if (stream.failed())
      return refuse(path + ": invalid YAML");
  }
  RawSpec raw;
  {
    yaml::Input in((*buffer)->getMemBufferRef(), nullptr, handler, &diag);
    in >> raw;
    if (in.error()) {
      if (diag.empty())
        diag = (path + ": invalid spec").str();
      return createStringError(inconvertibleErrorCode(), diag);
    }
  }
  Spec spec;
  spec.mode = raw.mode.value;
  for (auto &[name, shape] : raw.inputs) {
    std::vector<int64_t> dims;
    for (Dim d : shape)
      dims.push_back(d.value);
    spec.inputs.emplace_back(name, dims);
  }
  SmallString<256> dir = path;
  sys::path::remove_filename(dir);
  for (auto &[name, file] : raw.values) {
    SmallString<256> full;
    if (sys::path::is_absolute(file) || dir.empty())
      full = file;
    else {
      full = dir;
      sys::path::append(full, file);
    }
    spec.values.emplace_back(name, std::string(full));
  }
  spec.passes = raw.passes;
  if (raw.precision)
    spec.precision = raw.precision->compute;
  if (raw.precision && raw.precision->compute == "fp16") {
    Spec::LossScale ls;
    if (const std::optional<LossScale> &l = raw.precision->lossScale) {
      ls.initial = l->initial;
      ls.growthFactor = l->growthFactor;
      ls.backoffFactor = l->backoffFactor;
      ls.growthInterval = l->growthInterval;
      ls.min = l->min;
    }
    spec.lossScale = ls;
  }
  if (raw.memory) {
    if (raw.memory->budgetMb)
      spec.memory.budgetBytes = static_cast<uint64_t>(*raw.memory->budgetMb * 1048576.0);
    spec.memory.recompute = raw.memory->recompute;
    spec.memory.offload = raw.memory->offload;
    if (!raw.memory->offloadDir.empty()) {
      SmallString<256> full(raw.memory->offloadDir);
      if (!sys::path::is_absolute(full) && !dir.empty()) {
        full = dir;
        sys::path::append(full, raw.memory->offloadDir);
      }
      spec.memory.offloadDir = std::string(full);
    }
  }
  if (raw.zero) {
    spec.bucketMb = raw.zero->bucketMb;
    spec.zeroStage = raw.zero->stage;
  }
  for (auto &[axis, size] : raw.mesh)
    spec.mesh.emplace_back(axis, size.value);
  if (raw.parallel && raw.parallel->tensor) {
    const TensorParallel &t = *raw.parallel->tensor;
    spec.tensor.style = t.style;
    spec.tensor.sequenceParallel = t.sequenceParallel;
    spec.tensor.depth = t.depth;
    for (auto &[pattern, dims] : t.hints)
      spec.tensor.hints.emplace_back(pattern, dims);
  }
  if (raw.parallel && raw.parallel->pipeline) {
    const PipelineParallel &p = *raw.parallel->pipeline;
    spec.pipeline = Spec::Pipeline{p.schedule, p.microbatches, p.virtualStages, p.stages.cuts, ""};
    if (!p.scheduleFile.empty()) {
      SmallString<256> full(p.scheduleFile);
      if (!sys::path::is_absolute(full) && !dir.empty()) {
        full = dir;
        sys::path::append(full, p.scheduleFile);
      }
      spec.pipeline->scheduleFile = std::string(full);
    }
  }
  if (const int64_t pp = spec.pipelineParallel(); pp > 1 || spec.pipeline) {
    auto fail = [&](const Twine &msg) {
      return createStringError(inconvertibleErrorCode(), path + ": " + msg);
    };
    if (pp == 1) {
      // The neutral section (no microbatches, cut points or schedule file) is accepted without
      // a pipeline.
      if (spec.pipeline->microbatches != 1 || !spec.pipeline->cuts.empty() ||
          !spec.pipeline->scheduleFile.empty())
        return fail(std::string("parallel.pipeline.") +
                    (!spec.pipeline->scheduleFile.empty() ? "schedule_file"
                     : spec.pipeline->cuts.empty()        ? "microbatches"
                                                          : "stages") +
                    " needs pipeline parallelism: set mesh pp > 1");
    }
    if (pp == 1)
      spec.pipeline.reset();
    else if (!spec.pipeline)
      spec.pipeline = Spec::Pipeline();
    if (pp > 1 && !spec.pipeline->cuts.empty()) {
      const int64_t stages = pp * std::max<int64_t>(1, spec.pipeline->virtualStages);
      const size_t cuts = spec.pipeline->cuts.size();
      if (static_cast<int64_t>(cuts) != stages - 1)
        return fail("parallel.pipeline.stages lists " + Twine(cuts) + (cuts == 1 ? " cut point; " : " cut points; ") +
                    Twine(stages) + " stages (mesh pp=" + Twine(pp) +
                    (stages > pp ? " x virtual_stages " + std::to_string(stages / pp) : std::string()) + ") need " +
                    Twine(stages - 1));
    }
    if (pp > 1 && spec.mode != "train" && spec.mode != "inference")
      return fail("mesh pp=" + Twine(pp) + ": pipeline parallelism of " + spec.mode +
                  " is not supported yet (train and inference)");
    if (pp > 1 && spec.mode == "inference" && raw.parallel && raw.parallel->pipeline &&
        raw.parallel->pipeline->scheduleSet && spec.pipeline->schedule != "gpipe")
      return fail("parallel.pipeline.schedule " + spec.pipeline->schedule +
                  ": inference runs forwards only, as gpipe (set schedule: gpipe or leave it out)");
    if (pp > 1 && spec.mode == "inference" &&
        (spec.dataParallel() > 1 || spec.tensorParallel() > 1 || spec.pipeline->schedule == "interleaved"))
      return fail("mesh pp=" + Twine(pp) + ": inference under pipeline parallelism runs pp alone with "
                  "one stage per rank for now (no dp, tp or interleaved)");
    auto other = [&]() -> std::string {
      if (spec.zeroStage != 0) return "zero.stage " + std::to_string(spec.zeroStage);
      if (raw.precision && raw.precision->compute != "fp32") return "precision.compute " + raw.precision->compute;
      if (spec.memory.recompute != "none") return "memory.recompute " + spec.memory.recompute;
      if (spec.memory.offload != "none") return "memory.offload " + spec.memory.offload;
      if (spec.memory.budgetBytes) return "memory.budget_mb";
      if (!spec.passes.empty()) return "passes:";
      return "";
    }();
    if (pp > 1 && !other.empty())
      return fail("mesh pp=" + Twine(pp) + " together with " + other +
                  " is not supported yet (pipeline parallelism alone)");
  }
  if (raw.precision && raw.precision->lossScale && spec.mode != "train")
    return createStringError(inconvertibleErrorCode(),
                             path + ": precision.loss_scale scales the loss of training; it needs "
                                    "mode: train (inference in fp16 needs no loss scale)");
  if (spec.memory.recompute != "none" && spec.mode != "train")
    return createStringError(inconvertibleErrorCode(),
                             path + ": memory.recompute " + spec.memory.recompute +
                                 " recomputes activations saved for the backward pass; it needs "
                                 "mode: train");
  if (spec.memory.offload != "none" && spec.mode != "train")
    return createStringError(inconvertibleErrorCode(),
                             path + ": memory.offload " + spec.memory.offload +
                                 " moves training state (parameters, gradients, optimizer state) "
                                 "to a slower tier; it needs mode: train");
  if (spec.memory.offload == "auto" && !spec.memory.budgetBytes)
    return createStringError(inconvertibleErrorCode(),
                             path + ": memory.offload auto offloads what memory.budget_mb needs; "
                                    "set one (or use optimizer or params)");
  if (spec.memory.recompute == "auto" && !spec.memory.budgetBytes)
    return createStringError(inconvertibleErrorCode(),
                             path + ": memory.recompute auto chooses what to recompute to fit "
                                    "memory.budget_mb; set one (or use full or selective)");
  if (spec.zeroStage != 0 && spec.mode != "train")
    return createStringError(inconvertibleErrorCode(),
                             path + ": zero.stage " + Twine(spec.zeroStage) +
                                 " partitions training state (optimizer state, gradients, "
                                 "parameters); it needs mode: train");
  {
    // The tensor-parallel grid must fit `tp` (ColossalAI: 2d q*q, 2.5d q*q*depth, 3d q*q*q).
    const int64_t tp = spec.tensorParallel();
    const std::string &style = spec.tensor.style;
    auto fail = [&](const Twine &msg) {
      return createStringError(inconvertibleErrorCode(), path + ": parallel.tensor: " + msg);
    };
    if (tp == 1 && (style != "1d" || spec.tensor.sequenceParallel || !spec.tensor.hints.empty()))
      return fail("style " + style + (spec.tensor.sequenceParallel ? " with sequence_parallel" : "") +
                  (spec.tensor.hints.empty() ? "" : " with hints") +
                  " needs tensor parallelism: set mesh tp > 1");
    auto root = [](int64_t n, int k) -> int64_t {
      int64_t q = std::llround(std::pow(double(n), 1.0 / k));
      for (int64_t c = std::max<int64_t>(1, q - 1); c <= q + 1; ++c) {
        int64_t p = 1;
        for (int i = 0; i < k; ++i)
          p *= c;
        if (p == n)
          return c;
      }
      return 0;
    };
    int64_t ranks = 1;
    for (auto &[axis, size] : spec.mesh) {
      if (size > (int64_t(1) << 30) || ranks * size > (int64_t(1) << 30))
        return createStringError(inconvertibleErrorCode(),
                                 path + ": mesh: more than 2^30 ranks (the plan's limit)");
      ranks *= size;
    }
    if (style == "2d" && !root(tp, 2))
      return fail("style 2d needs tp = q*q (a square grid), got tp=" + Twine(tp));
    if (style == "3d" && !root(tp, 3))
      return fail("style 3d needs tp = q*q*q (a cube), got tp=" + Twine(tp));
    if (style == "2.5d" && (tp % spec.tensor.depth != 0 || !root(tp / spec.tensor.depth, 2)))
      return fail("style 2.5d needs tp = q*q*depth, got tp=" + Twine(tp) + " and depth " +
                  Twine(spec.tensor.depth));
    if (style != "1d" && tp > 1) {
      int64_t grid = style == "2.5d" && spec.tensor.depth >= 1 ? tp / spec.tensor.depth : tp;
      if (grid < 4)
        return fail("style " + style + " needs a grid of at least 2 x 2 (tp=" + Twine(tp) +
                    (style == "2.5d" ? " with depth " + Twine(spec.tensor.depth) : Twine()) +
                    " leaves a 1 x 1 grid)");
    }
  }
  if (raw.mode.value == "train") {
    const RawTrain &r = raw.train;
    TrainSpec t;
    t.lossKind = r.loss.kind.value;
    t.logits = r.loss.logits;
    t.labels = r.loss.labels;
    t.output = r.loss.output;
    t.ignoreIndex = r.loss.ignoreIndex.value;
    const RawOptimizer &o = r.optimizer;
    t.optimizer = o.kind.value;
    t.lr = o.lr.value;
    if (o.betas.size() == 2) {
      t.beta1 = o.betas[0].value;
      t.beta2 = o.betas[1].value;
    }
    if (o.eps)
      t.eps = o.eps->value;
    // PyTorch's defaults: AdamW 0.01, Adam and SGD 0.
    t.weightDecay = o.weightDecay ? o.weightDecay->value : t.optimizer == "adamw" ? 0.01 : 0.0;
    t.momentum = o.momentum ? o.momentum->value : 0;
    t.dampening = o.dampening.value;
    t.nesterov = o.nesterov;
    if (r.schedule) {
      t.schedule = r.schedule->kind.value;
      t.warmupSteps = r.schedule->warmupSteps.value;
      t.totalSteps = r.schedule->totalSteps.value;
      t.minLr = r.schedule->minLr.value;
    }
    t.gradClip = r.gradClip ? r.gradClip->value : 0;
    t.gradAccum = r.gradAccum.value;
    if (spec.pipeline && t.gradAccum != 1)
      return createStringError(inconvertibleErrorCode(),
                               path + ": train.grad_accum " + Twine(t.gradAccum) +
                                   " with mesh pp=" + Twine(spec.pipelineParallel()) +
                                   ": under pipeline parallelism parallel.pipeline.microbatches "
                                   "plays grad_accum's role; set grad_accum: 1 and microbatches");
    for (const Pattern &p : r.frozen)
      t.frozen.push_back(p.value);
    for (const Pattern &p : r.noDecay)
      t.noDecay.push_back(p.value);
    if (r.inputs)
      for (const auto &[name, in] : *r.inputs) {
        TrainSpec::Input d;
        d.name = name;
        if (in.npy) {
          d.kind = "npy";
          SmallString<256> full(*in.npy);
          if (!sys::path::is_absolute(full) && !dir.empty()) {
            full = dir;
            sys::path::append(full, *in.npy);
          }
          d.path = std::string(full);
        } else if (in.normal) {
          d.kind = "normal";
          d.mean = in.normal->mean;
          d.std = in.normal->std;
        } else {
          d.kind = "uniform_int";
          d.low = in.uniformInt[0];
          d.high = in.uniformInt[1];
        }
        t.inputs.push_back(std::move(d));
      }
    spec.train = std::move(t);
  }
  if (raw.generate && raw.mode.value != "generate")
    return createStringError(inconvertibleErrorCode(),
                             path + ": generate: configures serving; it needs mode: generate");
  if (raw.mode.value == "generate") {
    auto fail = [&](const Twine &msg) {
      return createStringError(inconvertibleErrorCode(), path + ": mode generate: " + msg);
    };
    Spec::Generate g;
    if (raw.generate) {
      g.maxSeqLen = raw.generate->maxSeqLen;
      g.blockSize = raw.generate->blockSize;
      g.maxBatchSeqs = raw.generate->maxBatchSeqs;
      if (raw.generate->maxBatchTokens) {
        g.maxBatchTokens = *raw.generate->maxBatchTokens;
      } else {
        g.maxBatchTokens = 1;
        while (g.maxBatchTokens < 512 && g.maxBatchTokens * 4 <= g.maxSeqLen)
          g.maxBatchTokens *= 2;
      }
      if (raw.generate->kvBlocks != "auto")
        StringRef(raw.generate->kvBlocks).getAsInteger(10, g.kvBlocks);
    }
    if (!spec.inputs.empty())
      return fail("the programs' shapes come from generate: (max_batch_tokens, max_batch_seqs, "
                  "max_seq_len), so the spec has no inputs:; remove it");
    // Tensor parallelism splits the heads and the MLP of every step program (docs/serving.md
    // "Tensor parallelism"); the other axes have no serving meaning yet.
    for (auto &[axis, size] : spec.mesh)
      if (size > 1 && axis != "tp")
        return fail("mesh " + axis + "=" + Twine(size) +
                    " is not supported yet (mode generate runs on one rank or under mesh tp)");
    if (spec.tensorParallel() > 1 && spec.tensor.style != "1d")
      return fail("parallel.tensor.style " + spec.tensor.style +
                  " is not supported yet (mode generate splits heads: style 1d)");
    if (spec.tensor.sequenceParallel)
      return fail("parallel.tensor.sequence_parallel splits the token rows of a step, which a "
                  "decode step of one token per sequence does not have; remove it");
    if (spec.precision != "fp32")
      return fail("precision.compute " + spec.precision + " is not supported yet (fp32)");
    if (g.maxSeqLen > (int64_t(1) << 24) || g.maxBatchTokens > (int64_t(1) << 16))
      return fail("max_seq_len is at most 2^24 and max_batch_tokens at most 2^16");
    spec.generate = g;
  }
  // Data parallelism and grad_accum: each of the D ranks takes B/D rows of every batch, in
  // grad_accum microbatches in train mode, so D·grad_accum must divide the batch of every input
  // the spec gives (a batch the model fixes is checked by colossal-split-batch).
  const int64_t dp = spec.dataParallel();
  const int64_t accum = spec.train ? spec.train->gradAccum : 1;
  if (spec.pipeline && spec.pipeline->schedule == "interleaved" &&
      spec.pipeline->microbatches % spec.pipelineParallel() != 0)
    return createStringError(inconvertibleErrorCode(),
                             path + ": parallel.pipeline.schedule interleaved: microbatches " +
                                 Twine(spec.pipeline->microbatches) + " must be a multiple of mesh pp=" +
                                 Twine(spec.pipelineParallel()) + " (Megatron's interleaved 1F1B)");
  if (spec.pipeline)
    for (auto &[name, shape] : spec.inputs)
      if (!shape.empty() && shape[0] % (dp * spec.pipeline->microbatches) != 0)
        return createStringError(
            inconvertibleErrorCode(),
            path + ": parallel.pipeline.microbatches " + Twine(spec.pipeline->microbatches) +
                " must divide each dp rank's rows: the batch (dim 0 of input '" + name + "', " +
                Twine(shape[0]) + ") / dp " + Twine(dp) + " is not divisible by " +
                Twine(spec.pipeline->microbatches));
  if (dp * accum > 1)
    for (auto &[name, shape] : spec.inputs)
      if (!shape.empty() && shape[0] % (dp * accum) != 0) {
        std::string by = dp > 1 && accum > 1 ? "dp x grad_accum = " + std::to_string(dp * accum)
                         : dp > 1             ? "dp = " + std::to_string(dp)
                                              : "grad_accum = " + std::to_string(accum);
        std::string msg = path.str() + ": ";
        if (dp > 1)
          msg += "mesh dp=" + std::to_string(dp) + (accum > 1 ? " with " : "");
        if (accum > 1)
          msg += "train.grad_accum " + std::to_string(accum);
        msg += ": the batch (dim 0 of input '" + name + "', " + std::to_string(shape[0]) +
               ") must be divisible by " + by;
        return createStringError(inconvertibleErrorCode(), msg);
      }
  return spec;
}

std::vector<Spec::MeshAxis> Spec::meshAxes() const {
  std::vector<MeshAxis> out;
  auto size = [&](StringRef name) -> std::optional<int64_t> {
    for (auto &[axis, n] : mesh)
      if (axis == name)
        return n;
    return std::nullopt;
  };
  if (auto pp = size("pp"))
    out.push_back({"pp", *pp, "pipeline"});
  if (auto dp = size("dp"))
    out.push_back({"dp", *dp, "data"});
  std::optional<int64_t> tp = size("tp");
  if (!tp)
    return out;
  if (tensor.style == "1d" || *tp == 1) {
    out.push_back({"tp", *tp, "tensor"});
    return out;
  }
  int64_t depth = 1, q = 1;
  if (tensor.style == "2.5d")
    depth = tensor.depth;
  int k = tensor.style == "3d" ? 3 : 2;
  while (true) {
    int64_t p = 1;
    for (int i = 0; i < k; ++i)
      p *= q;
    if (p * depth >= *tp)
      break;
    ++q;
  }
  if (tensor.style == "3d")
    depth = q;
  if (tensor.style != "2d")
    out.push_back({"tp_depth", depth, "grid_depth"});
  out.push_back({"tp_row", q, "grid_row"});
  out.push_back({"tp_col", q, "grid_col"});
  return out;
}

} // namespace colossal

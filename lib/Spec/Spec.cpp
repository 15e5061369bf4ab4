//===- Spec.cpp - the spec file (YAML through LLVM's YAML I/O) -------------===//
//
// Every key DESIGN.md defines is mapped, so a typo is an "unknown key" error with line and column.
// What the compiler does not implement yet (several ranks, training, reduced precision, ZeRO) is
// rejected with "not supported yet" at the offending node instead of being ignored.
//===----------------------------------------------------------------------===//
#include "colossal/Spec/Spec.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"
#include "llvm/Support/YAMLTraits.h"

#include <map>
#include <optional>

using namespace llvm;

namespace {

struct TensorParallel {
  std::string style = "1d";
  bool sequenceParallel = false;
};
struct PipelineParallel {
  std::string schedule = "1f1b";
  int64_t microbatches = 1;
};
struct Parallel {
  std::optional<TensorParallel> tensor;
  std::optional<PipelineParallel> pipeline;
};
struct Precision {
  std::string compute = "fp32";
};
struct Zero {
  int64_t stage = 0;
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
  std::string passes;
  bool hasTrain = false;
};

} // namespace

LLVM_YAML_IS_FLOW_SEQUENCE_VECTOR(Dim)

namespace llvm::yaml {

template <> struct ScalarTraits<Mode> {
  static void output(const Mode &m, void *, raw_ostream &os) { os << m.value; }
  static StringRef input(StringRef scalar, void *, Mode &m) {
    m.value = scalar.str();
    if (scalar == "inference")
      return {};
    if (scalar == "train" || scalar == "generate")
      return "this mode is not supported yet (only 'inference' is implemented)";
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
    if (m.value != 1)
      return "multi-rank meshes are not supported yet (every mesh axis must be 1)";
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::None; }
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
    io.mapRequired(key.str().c_str(), m[key.str()]);
  }
  static void output(IO &, MeshMap &) {}
};

template <> struct MappingTraits<TensorParallel> {
  static void mapping(IO &io, TensorParallel &t) {
    io.mapOptional("style", t.style);
    io.mapOptional("sequence_parallel", t.sequenceParallel);
  }
  static std::string validate(IO &, TensorParallel &t) {
    if (t.style != "1d" && t.style != "2d" && t.style != "2.5d" && t.style != "3d")
      return "parallel.tensor.style must be one of 1d, 2d, 2.5d, 3d; got '" + t.style + "'";
    if (t.style != "1d" || t.sequenceParallel)
      return "parallel.tensor: " +
             std::string(t.sequenceParallel ? "sequence_parallel" : "style " + t.style) +
             " is not supported yet (tensor parallelism needs a multi-rank mesh)";
    return "";
  }
};
template <> struct MappingTraits<PipelineParallel> {
  static void mapping(IO &io, PipelineParallel &p) {
    io.mapOptional("schedule", p.schedule);
    io.mapOptional("microbatches", p.microbatches);
  }
  static std::string validate(IO &, PipelineParallel &p) {
    static const char *known[] = {"gpipe", "1f1b", "interleaved", "zero-bubble"};
    if (!llvm::is_contained(known, p.schedule))
      return "parallel.pipeline.schedule must be one of gpipe, 1f1b, interleaved, zero-bubble; "
             "got '" + p.schedule + "'";
    if (p.microbatches < 1)
      return "parallel.pipeline.microbatches must be >= 1";
    if (p.microbatches != 1)
      return "parallel.pipeline: microbatches is not supported yet (pipeline parallelism)";
    return "";
  }
};
template <> struct MappingTraits<Parallel> {
  static void mapping(IO &io, Parallel &p) {
    io.mapOptional("tensor", p.tensor);
    io.mapOptional("pipeline", p.pipeline);
  }
};
template <> struct MappingTraits<Precision> {
  static void mapping(IO &io, Precision &p) { io.mapOptional("compute", p.compute); }
  static std::string validate(IO &, Precision &p) {
    if (p.compute != "fp32" && p.compute != "bf16" && p.compute != "fp16")
      return "precision.compute must be fp32, bf16 or fp16; got '" + p.compute + "'";
    if (p.compute != "fp32")
      return "precision.compute: " + p.compute + " is not supported yet";
    return "";
  }
};
template <> struct MappingTraits<Zero> {
  static void mapping(IO &io, Zero &z) { io.mapOptional("stage", z.stage); }
  static std::string validate(IO &, Zero &z) {
    if (z.stage < 0 || z.stage > 3)
      return "zero.stage must be 0, 1, 2 or 3; got " + std::to_string(z.stage);
    if (z.stage != 0)
      return "zero.stage " + std::to_string(z.stage) + " is not supported yet";
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
    io.mapOptional("passes", s.passes);
    // Say "not supported yet" rather than "unknown key" for a key the format defines.
    if (llvm::is_contained(io.keys(), "train")) {
      s.hasTrain = true;
      io.setError("train: training is not supported yet");
    }
  }
  static std::string validate(IO &, RawSpec &s) {
    return "";
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
    os << d.getFilename() << ":" << d.getLineNo() << ":" << (d.getColumnNo() + 1) << ": "
       << d.getMessage();
  };
  // The document must be one YAML mapping (yaml::Input assumes a mapping at the root).
  {
    SourceMgr sm;
    sm.setDiagHandler([](const SMDiagnostic &, void *) {}, nullptr); // reported below instead
    yaml::Stream stream((*buffer)->getMemBufferRef(), sm);
    std::string where;
    auto at = [&](yaml::Node *node) {
      SMLoc loc = node ? node->getSourceRange().Start : SMLoc::getFromPointer((*buffer)->getBufferStart());
      auto [line, col] = sm.getLineAndColumn(loc);
      return (path + ":" + Twine(line) + ":" + Twine(col) + ": ").str();
    };
    auto doc = stream.begin();
    if (doc == stream.end() || !doc->getRoot() ||
        !llvm::isa<yaml::MappingNode>(doc->getRoot()))
      return createStringError(inconvertibleErrorCode(),
                               path + ": the spec must be a YAML mapping with at least `mode:` "
                                      "(e.g. `mode: inference`)");
    if (++doc != stream.end() && doc->getRoot() && !llvm::isa<yaml::NullNode>(doc->getRoot()))
      return createStringError(inconvertibleErrorCode(),
                               at(doc->getRoot()) + "the spec must be a single YAML document");
    if (stream.failed())
      return createStringError(inconvertibleErrorCode(), path + ": invalid YAML");
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
  return spec;
}

std::string defaultPipeline(const Spec &) {
  return "builtin.module(func.func(canonicalize, colossal-fuse-norms, colossal-fuse-activations, "
         "colossal-fuse-attention, canonicalize, cse))";
}

} // namespace colossal

//===- main.cpp - colossal-run: execute a compiled plan -------------------------------------===//
//
//   colossal-run MODEL.cplan --input NAME=FILE.npy ... --output-dir DIR [--threads N]
//                [--repeat N] [--warmup N] [--program NAME]
//   colossal-run MODEL.cplan export --onnx OUT.onnx [--checkpoint DIR]
//
// `export` writes the source ONNX model with the plan's (or a checkpoint's) parameter values
// (docs/training.md; runtime/checkpoint/OnnxExport.cpp). The generic mode:
//
// Loads and validates the plan and its weights, reads every input from .npy (dtype and shape must
// match the plan's binding; bfloat16 bindings take float32 arrays, converted at the boundary, or
// uint16 arrays holding the raw bfloat16 bits, as NumPy-only tools write bfloat16),
// runs the program and writes each output to DIR/NAME.npy (created atomically; '/' and other
// characters unsafe in file names become '_'). With --warmup/--repeat it runs the forward that
// many times and prints "forward: median X ms, min Y ms over N runs" to stderr.
// Any failure prints one line "error: ..." and exits with status 1.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Npy.h"
#include "colossal/runtime/OnnxExport.h"
#include "colossal/runtime/Plan.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <vector>

#include <unistd.h>

using namespace colossal::runtime;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("colossal-run options");
cl::opt<std::string> planPath(cl::Positional, cl::Required, cl::desc("<plan.cplan>"), cl::cat(category));
cl::opt<std::string> subcommand(cl::Positional, cl::Optional, cl::desc("[export]"), cl::cat(category));
cl::list<std::string> inputArgs("input", cl::desc("Bind a program input: NAME=FILE.npy (repeatable)"),
                                cl::value_desc("NAME=FILE.npy"), cl::cat(category));
cl::opt<std::string> outputDir("output-dir", cl::desc("Write each output to DIR/NAME.npy"),
                               cl::value_desc("DIR"), cl::cat(category));
cl::opt<int> threads("threads", cl::desc("CPU threads for kernels (default: all cores)"),
                     cl::init(0), cl::cat(category));
cl::opt<int> repeat("repeat", cl::desc("Run the program N times and report timings"), cl::init(1),
                    cl::cat(category));
cl::opt<int> warmup("warmup", cl::desc("Untimed runs before the timed ones"), cl::init(0),
                    cl::cat(category));
cl::opt<std::string> programName("program", cl::desc("Program of the plan to run"),
                                 cl::init("forward"), cl::cat(category));

cl::OptionCategory exportCategory("export options (colossal-run MODEL.cplan export ...)");
cl::opt<std::string> onnxOut("onnx", cl::desc("Write the model with the trained weights"),
                             cl::value_desc("OUT.onnx"), cl::cat(exportCategory));
cl::opt<std::string> checkpointDir("checkpoint", cl::desc("Parameter values from a checkpoint (DIR or DIR/step-N)"),
                                   cl::value_desc("DIR"), cl::cat(exportCategory));

int fail(const llvm::Twine &msg) {
  llvm::errs() << "error: " << msg << "\n";
  return 1;
}
int fail(llvm::Error err) { return fail(llvm::toString(std::move(err))); }

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fffu + ((x >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}
float bf16ToFloat(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::string safeFileName(llvm::StringRef name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

/// One input read from disk, in the binding's dtype (bf16 converted from f32).
struct InputData {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  AlignedBuffer bytes;
};

int runMain(int argc, char **argv) {
  cl::HideUnrelatedOptions({&category, &exportCategory});
  cl::ParseCommandLineOptions(argc, argv, "colossal-run: execute a compiled Colossal plan\n");
  if (!subcommand.empty() && subcommand != "export")
    return fail("unknown subcommand '" + subcommand + "' (expected export)");
  if (subcommand == "export") {
    if (onnxOut.empty()) return fail("export needs --onnx OUT.onnx");
    auto loaded = loadPlan(planPath, KernelRegistry::cpu());
    if (!loaded) return fail(loaded.takeError());
    if (llvm::Error e = exportOnnxCommand(**loaded, checkpointDir, onnxOut)) return fail(std::move(e));
    return 0;
  }
  if (!onnxOut.empty() || !checkpointDir.empty())
    return fail("--onnx and --checkpoint are options of 'export'");
  if (threads < 0) return fail("--threads must be >= 0");
  // More threads than this only oversubscribes the machine (and exhausts OpenMP's thread limits).
  constexpr int kMaxThreads = 1024;
  if (threads > kMaxThreads)
    return fail("--threads " + llvm::Twine(int(threads)) + " is above the limit of " +
                llvm::Twine(kMaxThreads));
  if (repeat < 1) return fail("--repeat must be >= 1");
  if (warmup < 0) return fail("--warmup must be >= 0");

  const KernelRegistry &registry = KernelRegistry::cpu();
  auto loaded = loadPlan(planPath, registry);
  if (!loaded) return fail(loaded.takeError());
  std::unique_ptr<Device> device = createCpuDevice();
  device->setThreads(threads);
  auto executor = Executor::create(**loaded, registry, *device, programName);
  if (!executor) return fail(executor.takeError());
  Executor &ex = **executor;

  std::map<std::string, const BindingInfo *> bindings;
  for (const BindingInfo &b : ex.inputs()) bindings[b.name] = &b;
  std::vector<InputData> inputs;
  llvm::StringSet<> given;
  for (const std::string &arg : inputArgs) {
    auto [name, file] = llvm::StringRef(arg).split('=');
    if (name.empty() || file.empty() || !llvm::StringRef(arg).contains('='))
      return fail("--input expects NAME=FILE.npy, got '" + arg + "'");
    if (!given.insert(name).second) return fail("input '" + name + "' given twice");
    auto it = bindings.find(name.str());
    if (it == bindings.end()) {
      std::string known;
      for (const BindingInfo &b : ex.inputs()) known += (known.empty() ? "" : ", ") + b.name;
      return fail("unknown input '" + name + "' (the plan's inputs: " + (known.empty() ? "none" : known) + ")");
    }
    const TensorRef &want = it->second->tensor;
    auto arr = readNpy(file);
    if (!arr) return fail(arr.takeError());
    InputData in{name.str(), want.dtype, arr->shape, AlignedBuffer()};
    bool bf16FromF32 = want.dtype == DType::BF16 && arr->dtype == DType::F32;
    bool bf16Bits = want.dtype == DType::BF16 && arr->dtype == DType::U16;
    if (arr->dtype != want.dtype && !bf16FromF32 && !bf16Bits)
      return fail("input '" + name + "' (" + file + "): expected dtype " + dtypeName(want.dtype) +
                  ", got " + dtypeName(arr->dtype));
    if (llvm::ArrayRef<int64_t>(arr->shape) != llvm::ArrayRef<int64_t>(want.shape))
      return fail("input '" + name + "' (" + file + "): expected shape " + shapeToString(want.shape) +
                  ", got " + shapeToString(arr->shape));
    if (bf16FromF32) {
      in.bytes = AlignedBuffer(want.bytes());
      const float *src = static_cast<const float *>(arr->data.data());
      auto *dst = static_cast<uint16_t *>(in.bytes.data());
      for (int64_t i = 0; i < want.numel(); ++i) dst[i] = floatToBf16(src[i]);
    } else {
      in.bytes = std::move(arr->data);
    }
    inputs.push_back(std::move(in));
  }
  for (const BindingInfo &b : ex.inputs())
    if (!given.contains(b.name))
      return fail("missing input '" + b.name + "' (" + dtypeName(b.tensor.dtype) + " " +
                  shapeToString(b.tensor.shape) + "); pass --input " + b.name + "=FILE.npy");

  // Inputs are copied in before every run: in-place kernels may reuse their arena bytes.
  auto runOnce = [&]() -> llvm::Error {
    for (const InputData &in : inputs)
      if (llvm::Error e = ex.setInput(in.name, in.dtype, in.shape, in.bytes.data())) return e;
    return ex.run();
  };
  for (int i = 0; i < warmup; ++i)
    if (llvm::Error e = runOnce()) return fail(std::move(e));
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    for (const InputData &in : inputs)
      if (llvm::Error e = ex.setInput(in.name, in.dtype, in.shape, in.bytes.data())) return fail(std::move(e));
    auto t0 = std::chrono::steady_clock::now();
    if (llvm::Error e = ex.run()) return fail(std::move(e));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (repeat > 1 || warmup > 0) {
    std::sort(ms.begin(), ms.end());
    llvm::errs() << llvm::format("%s: median %.3f ms, min %.3f ms over %d runs\n", programName.c_str(),
                                 ms[ms.size() / 2], ms.front(), repeat.getValue());
  }

  if (outputDir.empty()) return 0;
  if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
    return fail(outputDir + ": cannot create output directory: " + ec.message());
  for (const BindingInfo &out : ex.outputs()) {
    llvm::SmallString<256> path(outputDir);
    llvm::sys::path::append(path, safeFileName(out.name) + ".npy");
    const TensorRef &t = out.tensor;
    if (t.dtype == DType::BF16) {  // bfloat16 travels as float32
      std::vector<float> f(t.numel());
      const auto *src = t.as<const uint16_t>();
      for (int64_t i = 0; i < t.numel(); ++i) f[i] = bf16ToFloat(src[i]);
      if (llvm::Error e = writeNpy(path, DType::F32, t.shape, f.data())) return fail(std::move(e));
      continue;
    }
    std::vector<char> host(t.bytes());
    device->copyToHost(host.data(), t.data, t.bytes());
    if (llvm::Error e = writeNpy(path, t.dtype, t.shape, host.data())) return fail(std::move(e));
  }
  return 0;
}

}  // namespace

/// libgomp's default wait spins ~300k iterations between parallel regions. When other processes
/// compete for the cores (a build, other ranks, a test runner), spinning threads steal time from
/// the ones doing work and a forward pass gets 10-15x slower; sleeping at once (passive) costs
/// ~15% on an idle machine. A short spin (GOMP_SPINCOUNT=3000) keeps the idle speed and most of
/// the robustness (measurements in docs/kernels.md). libgomp reads its environment before main()
/// runs, so it is set by re-executing once, unless the user chose a wait policy already.
static void preferShortOpenMPSpins(char **argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT"))
    return;
  setenv("GOMP_SPINCOUNT", "3000", 1);
  execv("/proc/self/exe", argv); // returns only on failure: then run with the default policy
}

int main(int argc, char **argv) {
  preferShortOpenMPSpins(argv);
  try {
    return runMain(argc, argv);
  } catch (const std::bad_alloc &) {
    return fail("out of memory");
  } catch (const std::exception &e) {
    return fail(e.what());
  }
}

//===- main.cpp - colossal-run: execute a compiled plan -------------------------------------===//
//
//   colossal-run MODEL.cplan --input NAME=FILE.npy ... --output-dir DIR [--threads N]
//                [--repeat N] [--warmup N] [--program NAME] [--checkpoint DIR] [--dump-states DIR]
//                [--nproc N] [--comm-timeout S] [--allow-nonfinite-checkpoint] [--profile]
//   colossal-run MODEL.cplan train --data TOKENS.bin [--token-dtype uint8|uint16] --steps N
//                --metrics M.jsonl [--trace T.json] [--save DIR --save-every K] [--resume DIR]
//                [--eval-data FILE --eval-every K --eval-steps M] [--seed S] [--threads N]
//                [--shuffle] [--dump-inputs DIR] (a plan with train.inputs: no --data)
//                [--on-nonfinite stop|skip] [--allow-nonfinite-checkpoint] [--profile]
//   colossal-run MODEL.cplan sample [--checkpoint DIR] --prompt TEXT --tokens N [--tokenizer FILE]
//                [--temperature X --seed S] [--threads N] [--allow-nonfinite-checkpoint]
//   colossal-run MODEL.cplan export --onnx OUT.onnx [--checkpoint DIR] [--inference]
//                [--allow-nonfinite-checkpoint]
//   colossal-run MODEL.cplan tokenize --tokenizer FILE --text FILE... --out TOKENS.bin [--token-dtype T]
//   colossal-run MODEL.cplan generate --tokenizer TOK --prompt TEXT --max-tokens N [sampling flags]
//                (or --prompt-ids ID,.. | --requests FILE.jsonl; a `mode: generate` plan; Generate.h)
//   colossal-run MODEL.cplan serve --tokenizer TOK [--host 127.0.0.1] [--port 8000] [--chat-template F]
//                (the OpenAI-compatible server over a `mode: generate` plan; Serve.cpp)
//   generate and serve take [--speculative ngram|draft --num-speculative-tokens K [--ngram-max N
//                --ngram-min N] [--draft-plan D.cplan]] (speculative decoding; Speculative.cpp)
//
// `train`, `sample`, `export` and `tokenize` are docs/training.md's subcommands; their logic lives
// in the runtime (runtime/train/Trainer.cpp, Sampler.cpp, runtime/checkpoint/,
// runtime/data/TokenizeText.cpp). The generic mode:
//
// Loads and validates the plan and its weights, reads every input from .npy (dtype and shape must
// match the plan's binding; bfloat16 bindings take float32 arrays, converted at the boundary, or
// uint16 arrays holding the raw bfloat16 bits, as NumPy-only tools write bfloat16),
// runs the program and writes each output to DIR/FILE.npy (created atomically; FILE is the name
// percent-encoded, runtime/TensorFileName.h) and prints "output 'NAME' -> DIR/FILE.npy" for each.
// With --warmup/--repeat it runs the forward that
// many times and prints "forward: median X ms, min Y ms over N runs" to stderr. A plan with
// persistent state (a training plan) runs with its StateStore: initial values, or those of
// --checkpoint DIR; --dump-states DIR writes every state after the run to DIR/FILE.npy (same names).
// Any failure prints one line "error: ..." and exits with status 1.
//
// Several ranks (docs/parallelism.md): `mpirun -np N colossal-run ...`, or `--nproc N`, which
// re-executes the same command under mpirun. N must equal the plan's mesh size. Errors that every
// rank meets alike are printed by rank 0; an error on one rank while running prints
// "error: rank R: ..." and aborts the job (abortOnRankError). Rank 0 writes the outputs. Kernel threads per rank
// default to the cores divided by the ranks on this machine.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/OpProfile.h"
#include "colossal/runtime/Checkpoint.h"
#include "colossal/runtime/DataParallelIO.h"
#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Executor.h"
#include "colossal/runtime/Mesh.h"
#include "colossal/runtime/NonFinite.h"
#include "colossal/runtime/Npy.h"
#include "colossal/runtime/OnnxExport.h"
#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Sampler.h"
#include "colossal/runtime/StateStore.h"
#include "colossal/runtime/TensorFileName.h"
#include "colossal/runtime/TokenData.h"
#include "colossal/runtime/TokenizeText.h"
#include "colossal/runtime/Trainer.h"
#include "colossal/runtime/PipelineRunner.h"
#include "colossal/runtime/serve/Tokenizer.h"

#include "Generate.h"
#include "Parallel.h"

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
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <unistd.h>

using namespace colossal::runtime;
namespace cl = llvm::cl;


namespace {

/// An error on this rank while the job runs: print "error: rank R: ..." and end the whole job
/// (the other ranks would wait in a collective). An error every rank meets at once (a token id
/// outside the vocabulary, a bad file they all read) would print once per rank, so ranks other
/// than 0 wait half a second first: if rank 0 hit it too, its abort ends them before they print;
/// an error of this rank alone is still printed, half a second later.
[[noreturn]] void abortOnRankError(CommContext &comm, llvm::Error e) {
  if (comm.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  llvm::errs() << ("error: rank " + llvm::Twine(comm.rank()) + ": " + llvm::toString(std::move(e)) + "\n").str();
  comm.abort(1);
}

}  // namespace

namespace {

cl::OptionCategory category("colossal-run options");
cl::list<std::string> positionals(cl::Positional, cl::OneOrMore,
                                  cl::desc("<plan.cplan> [train|sample|export|tokenize|generate|serve]"), cl::cat(category));
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
cl::opt<bool> profileOps("profile",
                         cl::desc("run, train: time every instruction and print, per kind of op, calls, total ms, "
                                  "share, mean us and GFLOP/s (rank 0, to stderr; after --warmup)"),
                         cl::cat(category));
cl::opt<bool> zeroInputs("zero-inputs",
                         cl::desc("run: fill every input not given with --input with zeros (timing a "
                                  "program alone, e.g. one pipeline stage's)"),
                         cl::cat(category));
cl::opt<std::string> programName("program", cl::desc("Program of the plan to run (default: its forward program)"),
                                 cl::cat(category));
cl::opt<std::string> checkpointDir("checkpoint", cl::desc("Load persistent state from a checkpoint (DIR or DIR/step-N)"),
                                   cl::value_desc("DIR"), cl::cat(category));
cl::opt<std::string> dumpStatesDir("dump-states", cl::desc("After the run, write every state tensor to DIR/NAME.npy"),
                                   cl::value_desc("DIR"), cl::cat(category));
cl::opt<std::string> offloadDir("offload-dir",
                                cl::desc("Plans with memory.offload: keep the tier's file in DIR instead of the "
                                         "folder compiled into the plan"),
                                cl::value_desc("DIR"), cl::cat(category));
cl::opt<int> nproc("nproc", cl::desc("Run on N ranks: re-executes this command under mpirun -np N"),
                   cl::value_desc("N"), cl::init(0), cl::cat(category));
cl::opt<bool> allowNonFiniteCheckpoint(
    "allow-nonfinite-checkpoint",
    cl::desc("Load a checkpoint (--checkpoint, --resume) even when a tensor holds NaN or infinity"),
    cl::init(false), cl::cat(category));
cl::opt<double> commTimeout("comm-timeout",
                            cl::desc("Seconds a collective may take before the job is aborted"),
                            cl::value_desc("S"), cl::init(300.0), cl::cat(category));

cl::OptionCategory trainCategory("train options (colossal-run MODEL.cplan train ...)");
cl::opt<std::string> dataPath("data", cl::desc("Training tokens (little-endian uint8/uint16)"), cl::value_desc("FILE"),
                              cl::cat(trainCategory));
cl::opt<std::string> tokenDTypeName("token-dtype", cl::desc("uint8 (default) or uint16"), cl::init("uint8"),
                                    cl::cat(trainCategory));
cl::opt<int64_t> steps("steps", cl::desc("Total optimizer steps"), cl::init(-1), cl::cat(trainCategory));
cl::opt<std::string> metricsPath("metrics", cl::desc("Metrics, one JSON line per step"), cl::value_desc("FILE"),
                                 cl::cat(trainCategory));
cl::opt<std::string> tracePath("trace",
                               cl::desc("Chrome trace of the run's steps, all ranks in one file (Perfetto, "
                                        "chrome://tracing)"),
                               cl::value_desc("FILE.json"), cl::cat(trainCategory));
cl::opt<std::string> saveDir("save", cl::desc("Checkpoint folder"), cl::value_desc("DIR"), cl::cat(trainCategory));
cl::opt<int64_t> saveEvery("save-every", cl::desc("Save every K steps (and after the last)"), cl::init(0),
                           cl::cat(trainCategory));
cl::opt<std::string> resumeDir("resume", cl::desc("Continue from a checkpoint"), cl::value_desc("DIR"),
                               cl::cat(trainCategory));
cl::opt<std::string> evalDataPath("eval-data", cl::desc("Evaluation tokens"), cl::value_desc("FILE"),
                                  cl::cat(trainCategory));
cl::opt<int64_t> evalEvery("eval-every", cl::desc("Evaluate after every K steps (K >= 1, with --eval-data)"), cl::init(0), cl::cat(trainCategory));
cl::opt<int64_t> evalSteps("eval-steps", cl::desc("Batches per evaluation"), cl::init(1), cl::cat(trainCategory));
cl::opt<std::string> onNonFinite("on-nonfinite",
                                 cl::desc("A step whose loss or gradient norm is NaN or infinite: stop (default: "
                                          "an error naming the step) or skip (leave the state as it was, go on)"),
                                 cl::value_desc("stop|skip"), cl::init("stop"), cl::cat(trainCategory));
cl::opt<uint64_t> seed("seed",
                       cl::desc("sample, generate: seeds temperature sampling (a request's own seed wins); train: "
                                "seeds train.inputs' RNG draws and --shuffle (recorded in checkpoints)"),
                       cl::init(0), cl::cat(trainCategory));
cl::opt<bool> shuffle("shuffle", cl::desc("train.inputs: read the npy rows in a per-epoch permutation by --seed"),
                      cl::cat(trainCategory));
cl::opt<std::string> dumpInputsDir("dump-inputs", cl::desc("train.inputs: write each step's inputs to DIR/step-N/NAME.npy"),
                                   cl::value_desc("DIR"), cl::cat(trainCategory));

cl::OptionCategory sampleCategory("text options (sample, generate, serve, tokenize)");
cl::opt<std::string> prompt("prompt", cl::desc("sample, generate: text to continue (gets the tokenizer's BOS)"),
                            cl::cat(sampleCategory));
cl::opt<int64_t> sampleTokens("tokens", cl::desc("sample: tokens to generate"), cl::init(-1), cl::cat(sampleCategory));
cl::opt<double> temperature("temperature", cl::desc("sample, generate: sampling temperature, 0 = greedy"),
                            cl::init(0.0), cl::cat(sampleCategory));
cl::opt<std::string> tokenizerPath("tokenizer",
                                   cl::desc("sample, generate, serve, tokenize: the model's tokenizer (tokenizer.bin, "
                                            ".model, tokenizer.json); without it sample's token ids are bytes"),
                                   cl::value_desc("FILE"), cl::cat(sampleCategory));

cl::OptionCategory tokenizeCategory("tokenize options (colossal-run MODEL.cplan tokenize ...)");
cl::list<std::string> textFiles("text", cl::desc("tokenize: a text file, one document (repeatable)"),
                                cl::value_desc("FILE"), cl::cat(tokenizeCategory));
cl::opt<std::string> tokensOut("out", cl::desc("tokenize: the token file to write"), cl::value_desc("TOKENS.bin"),
                               cl::cat(tokenizeCategory));

cl::OptionCategory exportCategory("export options (colossal-run MODEL.cplan export ...)");
cl::opt<std::string> onnxOut("onnx", cl::desc("Write the model with the trained weights"), cl::value_desc("OUT.onnx"),
                             cl::cat(exportCategory));
cl::opt<bool> exportInference("inference",
                              cl::desc("export: training-mode BatchNormalizations normalise with their running "
                                       "statistics (training_mode 0), as torch's eval mode"),
                              cl::cat(exportCategory));

int fail(const llvm::Twine &msg) {
  // Every rank meets it alike: rank 0 prints it (in one write, so that mpirun's own messages cannot
  // split the line) and gives the job its exit status 1. The other ranks leave with 0: a non-zero
  // exit there would make mpirun kill rank 0 before its message is out.
  if (!isPrintingRank()) return 0;
  llvm::errs() << ("error: " + msg + "\n").str();
  return 1;
}
int fail(llvm::Error err) { return fail(llvm::toString(std::move(err))); }

/// One input read from disk, in the binding's dtype (bf16 converted from f32).
struct InputData {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  AlignedBuffer bytes;
};

/// Which options each mode accepts (beyond --threads); any other given option is an error.
llvm::Error checkModeOptions(llvm::StringRef mode) {
  struct Use {
    cl::Option *opt;
    std::vector<llvm::StringRef> modes;
  };
  std::vector<Use> uses = {
      {std::addressof(inputArgs), {"run"}},        {&outputDir, {"run"}},          {&repeat, {"run"}},
      {&warmup, {"run"}},           {&programName, {"run"}},        {&dumpStatesDir, {"run"}},
      {&zeroInputs, {"run"}},       {&profileOps, {"run", "train"}},
      {&checkpointDir, {"run", "sample", "export"}},
      {&dataPath, {"train"}},       {&tokenDTypeName, {"train", "tokenize"}},   {&steps, {"train"}},
      {&metricsPath, {"train"}},    {&tracePath, {"train"}},        {&saveDir, {"train"}},          {&saveEvery, {"train"}},
      {&resumeDir, {"train"}},      {&evalDataPath, {"train"}},     {&evalEvery, {"train"}},
      {&evalSteps, {"train"}},      {&seed, {"train", "sample", "generate"}}, {&prompt, {"sample", "generate"}},
      {&onNonFinite, {"train"}},    {&allowNonFiniteCheckpoint, {"run", "train", "sample", "export"}},
      {&shuffle, {"train"}},        {&dumpInputsDir, {"train"}},
      {&sampleTokens, {"sample"}},  {&temperature, {"sample", "generate"}}, {&onnxOut, {"export"}},
      {&tokenizerPath, {"sample", "tokenize", "generate", "serve"}}, {std::addressof(textFiles), {"tokenize"}},
      {&tokensOut, {"tokenize"}},   {&exportInference, {"export"}}};
  for (cl::Option *o : colossal::tools::generateOnlyOptions()) uses.push_back({o, {"generate"}});
  for (cl::Option *o : colossal::tools::serveOnlyOptions()) uses.push_back({o, {"serve"}});
  for (cl::Option *o : colossal::tools::schedulerOptions()) uses.push_back({o, {"generate", "serve"}});
  for (cl::Option *o : colossal::tools::speculativeOptions()) uses.push_back({o, {"generate", "serve"}});
  for (const Use &u : uses) {
    if (u.opt->getNumOccurrences() == 0 || llvm::is_contained(u.modes, mode)) continue;
    std::string where;
    for (llvm::StringRef m : u.modes)
      where += (where.empty() ? "" : ", ") + (m == "run" ? std::string("running a program") : "'" + m.str() + "'");
    return llvm::createStringError("--" + u.opt->ArgStr.str() + " is not an option of " +
                                   (mode == "run" ? std::string("running a program") : "'" + mode.str() + "'") +
                                   " (it belongs to " + where + ")");
  }
  return llvm::Error::success();
}

/// `path` absolute, through real_path when it (or else its parent folder) exists, so that two
/// spellings of one file compare equal; lexically absolute otherwise.
std::string canonicalPath(llvm::StringRef path) {
  llvm::SmallString<256> real;
  if (!llvm::sys::fs::real_path(path, real)) return std::string(real);
  llvm::SmallString<256> parent(llvm::sys::path::parent_path(path));
  if (parent.empty()) parent = ".";
  if (!llvm::sys::fs::real_path(parent, real)) {
    llvm::sys::path::append(real, llvm::sys::path::filename(path));
    return std::string(real);
  }
  llvm::SmallString<256> abs(path);
  llvm::sys::fs::make_absolute(abs);
  llvm::sys::path::remove_dots(abs, /*remove_dot_dot=*/true);
  return std::string(abs);
}

/// Whether `path` is `dir` or lies inside it (after canonicalPath on both).
bool isInside(llvm::StringRef path, llvm::StringRef dir) {
  std::string p = canonicalPath(path), d = canonicalPath(dir);
  return p == d || (llvm::StringRef(p).starts_with(d) && llvm::sys::path::is_separator(p[d.size()]));
}

/// The checks of train's files before any work: --metrics and --trace must not be (or lie in) an
/// input or a checkpoint folder, nor be one file, since they are truncated when training starts;
/// --save DIR is created and must be a writable folder (found now, not at the first save hours
/// later); --resume must be a folder.
llvm::Error checkTrainPaths(const LoadedPlan &plan) {
  auto err = [](const llvm::Twine &msg) { return llvm::createStringError(msg.str()); };
  std::vector<std::pair<std::string, std::string>> inputs = {{plan.path, "the plan"}};
  if (plan.weights) inputs.push_back({plan.weights->path(), "the plan's weights file"});
  if (!dataPath.empty()) inputs.push_back({dataPath, "the --data file"});
  for (const colossal::plan::DataInput &d : plan.plan.train().data_inputs())
    if (d.kind() == colossal::plan::DataInput::NPY) inputs.push_back({d.path(), "the npy file of train.inputs." + d.name()});
  if (!dumpInputsDir.empty() && isInside(metricsPath, dumpInputsDir))
    return err("--metrics " + metricsPath + " lies in the --dump-inputs folder " + dumpInputsDir +
               "; choose a path outside it");
  if (!evalDataPath.empty()) inputs.push_back({evalDataPath, "the --eval-data file"});
  auto same = [](const std::string &a, const std::string &b) {
    return llvm::sys::fs::equivalent(a, b) || canonicalPath(a) == canonicalPath(b);
  };
  struct Output {
    const std::string &path;
    const char *flag, *kind;
  };
  for (const Output &out : {Output{metricsPath, "--metrics", "metrics"}, Output{tracePath, "--trace", "trace"}}) {
    if (out.path.empty()) continue;
    for (const auto &[file, what] : inputs)
      if (same(out.path, file))
        return err(llvm::Twine(out.flag) + " " + out.path + " is " + what + " (" + file + "); the " + out.kind +
                   " file is overwritten, choose another path");
    for (const auto &[dir, flag] : {std::pair<std::string, const char *>{saveDir, "--save"}, {resumeDir, "--resume"}})
      if (!dir.empty() && isInside(out.path, dir))
        return err(llvm::Twine(out.flag) + " " + out.path + " lies in the " + flag + " folder " + dir +
                   "; choose a path outside the checkpoint folder");
  }
  if (!tracePath.empty() && same(tracePath, metricsPath))
    return err("--trace " + tracePath + " is the --metrics file; choose another path");
  if (!resumeDir.empty() && llvm::sys::fs::exists(resumeDir) && !llvm::sys::fs::is_directory(resumeDir))
    return err("--resume " + resumeDir + ": not a directory (expected a checkpoint folder DIR or DIR/step-N)");
  if (!saveDir.empty()) {
    if (llvm::sys::fs::exists(saveDir) && !llvm::sys::fs::is_directory(saveDir))
      return err("--save " + saveDir + ": exists and is not a directory");
    if (std::error_code ec = llvm::sys::fs::create_directories(saveDir))
      return err("--save " + saveDir + ": cannot create the folder: " + ec.message());
    // A probe file: permissions, read-only mounts and /proc-like folders all show here.
    llvm::SmallString<256> probe(saveDir);
    llvm::sys::path::append(probe, ".colossal-write-probe-%%%%%%");
    int fd = -1;
    llvm::SmallString<256> made;
    if (std::error_code ec = llvm::sys::fs::createUniqueFile(probe, fd, made))
      return err("--save " + saveDir + ": the folder is not writable: " + ec.message());
    ::close(fd);
    llvm::sys::fs::remove(made);
  }
  return llvm::Error::success();
}

/// llvm::errs() as seen by the training loop, remembering whether its last character ended a
/// line: the progress bar ("\r...") leaves the line open, and the line is closed before anything
/// else is printed (an error message) and when the run ends.
class LineTrackingStream : public llvm::raw_ostream {
public:
  explicit LineTrackingStream(llvm::raw_ostream &os) : os_(os) { SetUnbuffered(); }
  bool lineOpen() const { return open_; }
  void closeLine() {
    if (open_) os_ << "\n";
    os_.flush();
    open_ = false;
  }

private:
  void write_impl(const char *ptr, size_t size) override {
    if (size) open_ = ptr[size - 1] != '\n';
    os_.write(ptr, size);
    os_.flush();
  }
  uint64_t current_pos() const override { return os_.tell(); }
  llvm::raw_ostream &os_;
  bool open_ = false;
};

int trainMain(const LoadedPlan &plan, Device &device, CommContext &comm) {
  if (plan.plan.train().data_inputs_size() > 0 && tokenDTypeName.getNumOccurrences())
    return fail("--token-dtype: this plan reads its inputs from the spec's train.inputs; --data and --token-dtype are "
                "for token models, leave them out");
  if (steps < 0) return fail("train needs --steps N (N >= 0)");
  if (metricsPath.empty()) return fail("train needs --metrics FILE");
  std::optional<DType> tokenDType = parseTokenDType(tokenDTypeName);
  if (!tokenDType) return fail("--token-dtype must be uint8 or uint16, not '" + tokenDTypeName + "'");
  if (saveEvery.getNumOccurrences() && saveDir.empty()) return fail("--save-every needs --save DIR");
  if (onNonFinite != "stop" && onNonFinite != "skip")
    return fail("--on-nonfinite must be stop or skip, not '" + onNonFinite + "'");
  // Every rank checks alike (rank 0 prints), so that no rank waits for one that left.
  if (llvm::Error e = checkTrainPaths(plan)) return fail(std::move(e));
  TrainOptions o;
  o.dataPath = dataPath;
  o.tokenDType = *tokenDType;
  o.steps = steps;
  o.metricsPath = metricsPath;
  o.saveDir = saveDir;
  o.saveEvery = saveEvery;
  o.resumeDir = resumeDir;
  o.evalDataPath = evalDataPath;
  o.evalEvery = evalEvery;
  o.evalSteps = evalSteps;
  o.seed = seed;
  o.shuffle = shuffle;
  o.dumpInputsDir = dumpInputsDir;
  o.onNonFinite = onNonFinite == "skip" ? NonFinitePolicy::Skip : NonFinitePolicy::Stop;
  o.allowNonFiniteCheckpoint = allowNonFiniteCheckpoint;
  o.progressBar = isatty(STDERR_FILENO) && comm.rank() == 0;
  o.comm = &comm;
  o.tracePath = tracePath;
  LineTrackingStream log(llvm::errs());
  llvm::Error e = runTraining(plan, KernelRegistry::cpu(), device, o, log);
  log.closeLine();  // the progress bar's line ends before an error message or the shell prompt
  // A non-finite step or a refused checkpoint: every rank agreed on it and leaves here together.
  std::optional<std::string> agreed;
  e = llvm::handleErrors(std::move(e), [&](const NonFiniteError &n) { agreed = n.text(); });
  if (agreed) return fail(*agreed);
  if (e) {
    if (comm.worldSize() == 1) return fail(std::move(e));
    // Under data parallelism an error may be this rank's alone (its rows, its files): name the
    // rank and end the job (the others would wait in a collective).
    abortOnRankError(comm, std::move(e));
  }
  // Only a run that finished has a profile to show (a failed one ends with its error alone).
  if (OpProfile *profile = OpProfile::active(); profile && comm.rank() == 0)
    profile->print(llvm::errs(), "profile: rank 0, every program this run's steps ran (train_step, optimizer_step; "
                                 "eval with --eval-data)");
  return 0;
}

/// A StateStore for `plan` with --checkpoint's values when given.
llvm::Expected<std::unique_ptr<StateStore>> openStates(const LoadedPlan &plan, Device &device) {
  auto states = StateStore::create(plan, device);
  if (!states) return states.takeError();
  if (!checkpointDir.empty()) {
    if (plan.plan.states().empty())
      return llvm::createStringError(plan.path + ": --checkpoint given, but the plan has no persistent state");
    llvm::Expected<CheckpointInfo> info = loadCheckpoint(checkpointDir, **states, allowNonFiniteCheckpoint);
    if (!info) return info.takeError();
  }
  return states;
}

int sampleMain(const LoadedPlan &plan, Device &device, CommContext &comm) {
  if (sampleTokens < 0) return fail("sample needs --tokens N (N >= 0)");
  if (!prompt.getNumOccurrences()) return fail("sample needs --prompt TEXT");
  auto states = openStates(plan, device);
  if (!states) return fail(states.takeError());
  SampleOptions o;
  o.prompt = prompt;
  o.tokens = sampleTokens;
  o.temperature = temperature;
  o.seed = seed;
  o.comm = &comm;
  std::unique_ptr<serve::Tokenizer> tokenizer;
  if (!tokenizerPath.empty()) {
    auto t = serve::loadTokenizer(tokenizerPath);
    if (!t) return fail(t.takeError());
    tokenizer = std::move(*t);
    o.tokenizer = tokenizer.get();
  }
  // Every rank samples alike (a tensor-parallel forward needs them all); rank 0 prints.
  llvm::raw_ostream &out = comm.rank() == 0 ? llvm::outs() : llvm::nulls();
  if (llvm::Error e = sampleText(plan, KernelRegistry::cpu(), device, **states, o, out))
    return fail(std::move(e));
  out << "\n";
  return 0;
}

/// `tokenize`: the --text files as one token file, each a document after the tokenizer's BOS
/// (runtime/data/TokenizeText.cpp); the ids must fit the plan's vocabulary.
int tokenizeMain(const LoadedPlan &plan) {
  if (tokenizerPath.empty()) return fail("tokenize needs --tokenizer FILE (the model's tokenizer)");
  if (textFiles.empty()) return fail("tokenize needs --text FILE (repeatable: one document each)");
  if (tokensOut.empty()) return fail("tokenize needs --out TOKENS.bin");
  auto tokenizer = serve::loadTokenizer(tokenizerPath);
  if (!tokenizer) return fail(tokenizer.takeError());
  const int64_t ids = (*tokenizer)->vocabSize();
  if (plan.plan.has_train() && plan.plan.train().vocab_size() > 0 && ids > plan.plan.train().vocab_size())
    return fail("--tokenizer " + tokenizerPath + " has " + llvm::Twine(ids) + " ids, the model's vocabulary " +
                llvm::Twine(plan.plan.train().vocab_size()) + ": not this model's tokenizer");
  // The smallest id type that holds the vocabulary, unless --token-dtype says otherwise.
  std::optional<DType> dtype = ids <= 256 ? DType::U8 : DType::U16;
  if (tokenDTypeName.getNumOccurrences()) dtype = parseTokenDType(tokenDTypeName);
  if (!dtype) return fail("--token-dtype must be uint8 or uint16, not '" + tokenDTypeName + "'");
  auto done = tokenizeTextFiles(**tokenizer, textFiles, *dtype, tokensOut);
  if (!done) return fail(done.takeError());
  llvm::outs() << "tokenize: " << done->files << (done->files == 1 ? " file, " : " files, ") << done->bytes
               << " bytes -> " << done->tokens << " tokens (" << (*dtype == DType::U8 ? "uint8" : "uint16")
               << ") -> " << tokensOut << "\n";
  return 0;
}

int exportMain(const LoadedPlan &plan) {
  if (onnxOut.empty()) return fail("export needs --onnx OUT.onnx");
  if (llvm::Error e = exportOnnxCommand(plan, checkpointDir, onnxOut, allowNonFiniteCheckpoint, exportInference))
    return fail(std::move(e));
  return 0;
}

/// Writes every state tensor to DIR/FILE.npy (bfloat16 as float32, FILE by tensorFileName), whole:
/// sharded states are gathered first (gatherState: every rank calls this), then rank 0 writes.
llvm::Error dumpStates(const StateStore &states, llvm::StringRef dir, CommContext &comm) {
  std::map<std::string, AlignedBuffer> whole;
  for (const StateEntry &e : states.entries()) {
    if (!e.layout) continue;
    llvm::Expected<AlignedBuffer> g = gatherState(states, e, &comm);
    if (!g) return g.takeError();
    whole[e.name()] = std::move(*g);
  }
  if (comm.rank() != 0) return llvm::Error::success();
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return llvm::createStringError(dir + ": cannot create folder: " + ec.message());
  std::vector<std::string> names;
  for (const StateEntry &e : states.entries()) names.push_back(e.name());
  auto files = tensorFileNames(names, ".npy", "states");
  if (!files) return llvm::createStringError(dir + ": " + llvm::toString(files.takeError()));
  for (const auto &[e, file] : llvm::zip_equal(states.entries(), *files)) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, file);
    Shape shape = e.globalShape();
    std::vector<char> host;
    auto gathered = whole.find(e.name());
    if (gathered != whole.end()) {
      const char *g = static_cast<const char *>(gathered->second.data());
      host.assign(g, g + gathered->second.size());
    } else {
      host.resize(e.tensor.bytes());
      states.device().copyToHost(host.data(), e.tensor.data, host.size());
    }
    if (e.tensor.dtype == DType::BF16) {
      std::vector<float> f(numElements(shape));
      for (size_t i = 0; i < f.size(); ++i) f[i] = bfloat16ToFloat(reinterpret_cast<const uint16_t *>(host.data())[i]);
      if (llvm::Error err = writeNpy(path, DType::F32, shape, f.data())) return err;
    } else if (llvm::Error err = writeNpy(path, e.tensor.dtype, shape, host.data())) {
      return err;
    }
  }
  return llvm::Error::success();
}

/// Writes one output to `path` as .npy (bfloat16 as float32).
llvm::Error writeOutput(llvm::StringRef path, const TensorRef &t, Device &device) {
  std::vector<char> host(t.bytes());
  device.copyToHost(host.data(), t.data, t.bytes());
  if (t.dtype != DType::BF16) return writeNpy(path, t.dtype, t.shape, host.data());
  std::vector<float> f(t.numel());
  const auto *src = reinterpret_cast<const uint16_t *>(host.data());
  for (int64_t i = 0; i < t.numel(); ++i) f[i] = bfloat16ToFloat(src[i]);
  return writeNpy(path, DType::F32, t.shape, f.data());
}

/// Inference under pipeline parallelism (docs/parallelism.md "Pipeline parallelism"): the
/// --input arrays hold the whole batch; microbatch k of the schedule takes rows k·R .. (k+1)·R − 1
/// (R = the stage programs' rows); each model output is gathered on the rank of the stage that
/// computes it, sent to rank 0 and written there.
int pipelineRunMain(LoadedPlan &plan, Device &device, CommContext &comm) {
  const KernelRegistry &registry = KernelRegistry::cpu();
  ExecutorOptions options;
  options.comm = &comm;
  auto runner = PipelineRunner::create(plan, registry, device, comm, options, 0, 1);
  if (!runner) return fail(runner.takeError());
  const uint32_t m = plan.plan.pipeline().microbatches();
  // The model's inputs and outputs: the stage programs' bindings that are not transfers.
  struct Array {
    DType dtype;
    std::vector<int64_t> shape;  // the whole batch's
    AlignedBuffer bytes;
    uint32_t stage = 0;
  };
  std::map<std::string, Array> in, out;
  for (const colossal::plan::Program &prog : plan.plan.programs()) {
    if (prog.role() != colossal::plan::Program::STAGE_FORWARD) continue;
    auto add = [&](const colossal::plan::Binding &b, std::map<std::string, Array> &to) {
      if (llvm::StringRef(b.name()).starts_with("pp.")) return;
      const colossal::plan::Buffer &buf = prog.buffers(static_cast<int>(b.buffer()));
      Array a{static_cast<DType>(buf.dtype()), std::vector<int64_t>(buf.shape().begin(), buf.shape().end()),
              AlignedBuffer(), static_cast<uint32_t>(prog.stage())};
      if (!a.shape.empty()) a.shape[0] *= m;
      to.try_emplace(b.name(), std::move(a));
    };
    for (const colossal::plan::Binding &b : prog.inputs()) add(b, in);
    for (const colossal::plan::Binding &b : prog.outputs()) add(b, out);
  }
  llvm::StringSet<> given;
  for (const std::string &arg : inputArgs) {
    auto [name, file] = llvm::StringRef(arg).split('=');
    if (name.empty() || file.empty()) return fail("--input expects NAME=FILE.npy, got '" + arg + "'");
    auto it = in.find(name.str());
    if (it == in.end()) {
      std::string known;
      for (auto &[n, a] : in) known += (known.empty() ? "" : ", ") + n;
      return fail("unknown input '" + name + "' (the plan's inputs: " + known + ")");
    }
    auto arr = readNpy(file);
    if (!arr) return fail(arr.takeError());
    if (arr->dtype != it->second.dtype || llvm::ArrayRef<int64_t>(arr->shape) != llvm::ArrayRef<int64_t>(it->second.shape))
      return fail("input '" + name + "' (" + file + "): expected " + dtypeName(it->second.dtype) + " " +
                  shapeToString(it->second.shape) + ", got " + dtypeName(arr->dtype) + " " + shapeToString(arr->shape));
    it->second.bytes = std::move(arr->data);
    given.insert(name);
  }
  for (auto &[name, a] : in)
    if (!given.contains(name))
      return fail("missing input '" + name + "' (" + dtypeName(a.dtype) + " " + shapeToString(a.shape) +
                  "); pass --input " + name + "=FILE.npy");
  for (auto &[name, a] : out) a.bytes = AlignedBuffer(static_cast<size_t>(numElements(a.shape)) * dtypeSize(a.dtype));
  auto rowsBytes = [](const Array &a) { return a.bytes.size() / static_cast<size_t>(a.shape.empty() ? 1 : a.shape[0]); };
  PipelineRunner::Feed feed = [&](Executor &ex, const BindingInfo &b, uint32_t mb) -> llvm::Expected<bool> {
    auto it = in.find(b.name);
    if (it == in.end()) return false;
    const size_t chunk = b.tensor.bytes();
    if (llvm::Error e = ex.setInput(b.name, b.tensor.dtype, b.tensor.shape,
                                    static_cast<const char *>(it->second.bytes.data()) + mb * chunk))
      return std::move(e);
    (void)rowsBytes;
    return true;
  };
  PipelineRunner::Collect collect = [&](const BindingInfo &b, uint32_t mb) -> llvm::Error {
    auto it = out.find(b.name);
    if (it == out.end()) return llvm::createStringError(llvm::inconvertibleErrorCode(), "not a model output");
    device.copyToHost(static_cast<char *>(it->second.bytes.data()) + mb * b.tensor.bytes(), b.tensor.data,
                      b.tensor.bytes());
    return llvm::Error::success();
  };
  std::vector<double> ms;
  for (int i = 0; i < warmup + repeat; ++i) {
    if (i == warmup)
      if (OpProfile *profile = OpProfile::active()) profile->reset();
    auto t0 = std::chrono::steady_clock::now();
    if (llvm::Error e = (*runner)->runForward(feed, collect)) abortOnRankError(comm, std::move(e));
    if (i >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if ((repeat > 1 || warmup > 0) && comm.rank() == 0) {
    std::sort(ms.begin(), ms.end());
    llvm::errs() << llvm::format("pipeline forward: median %.3f ms, min %.3f ms over %d runs\n", ms[ms.size() / 2],
                                 ms.front(), repeat.getValue());
  }
  if (OpProfile *profile = OpProfile::active(); profile && comm.rank() == 0)
    profile->print(llvm::errs(), "profile: rank 0 (pipeline stage 0), " + std::to_string(repeat) + " runs");
  // Each output to rank 0 from the rank of its stage (pipeline rank = stage: one stage per rank).
  Communicator &group = (*runner)->group();
  for (auto &[name, a] : out) {
    const int owner = static_cast<int>(a.stage % static_cast<uint32_t>(group.size()));
    if (owner == 0) continue;
    const int64_t count = numElements(a.shape);
    llvm::Error e = group.rank() == owner ? group.send(a.bytes.data(), count, a.dtype, 0)
                    : group.rank() == 0   ? group.recv(a.bytes.data(), count, a.dtype, owner)
                                          : llvm::Error::success();
    if (e) abortOnRankError(comm, std::move(e));
  }
  if (outputDir.empty() || comm.rank() != 0) return 0;
  if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
    return fail(outputDir + ": cannot create output directory: " + ec.message());
  std::vector<std::string> names;
  for (auto &[name, a] : out) names.push_back(name);
  auto files = tensorFileNames(names, ".npy", "outputs");
  if (!files) return fail(outputDir + ": " + llvm::toString(files.takeError()));
  size_t i = 0;
  for (auto &[name, a] : out) {
    llvm::SmallString<256> path(outputDir);
    llvm::sys::path::append(path, (*files)[i++]);
    if (llvm::Error e = writeNpy(path, a.dtype, a.shape, a.bytes.data())) return fail(std::move(e));
    llvm::outs() << "output '" << name << "' -> " << path << "\n";
  }
  return 0;
}

int runMain(int argc, char **argv) {
  cl::HideUnrelatedOptions({&category, &trainCategory, &sampleCategory, &tokenizeCategory, &exportCategory,
                            &colossal::tools::generateCategory(), &colossal::tools::serveCategory(),
                            &colossal::tools::speculativeCategory()});
  cl::ParseCommandLineOptions(argc, argv, "colossal-run: execute a compiled Colossal plan\n");
  if (!(commTimeout > 0)) return fail("--comm-timeout must be > 0");  // before mpirun starts
  if (nproc.getNumOccurrences()) {
    if (nproc < 1) return fail("--nproc must be >= 1, got " + llvm::Twine(int(nproc)));
    // A named program (a stage program timed alone) settles its mesh itself.
    if (!launchedByMpirun() && !positionals.empty() && programName.empty())
      if (llvm::Error e = checkPlanRanks(positionals[0], nproc)) return fail(std::move(e));
    if (llvm::Error e = relaunchUnderMpirun(argc, argv, nproc)) return fail(std::move(e));
  }
  const std::string planPath = positionals[0];
  std::string mode = "run";
  if (positionals.size() > 1) {
    mode = positionals[1];
    if (mode != "train" && mode != "sample" && mode != "export" && mode != "tokenize" && mode != "generate" &&
        mode != "serve")
      return fail("unknown subcommand '" + mode + "' (expected train, sample, export, tokenize, generate or serve)");
  }
  if (positionals.size() > 2) return fail("unexpected argument '" + positionals[2] + "'");
  if (llvm::Error e = checkModeOptions(mode)) return fail(std::move(e));
  if (allowNonFiniteCheckpoint && checkpointDir.empty() && resumeDir.empty())
    return fail("--allow-nonfinite-checkpoint needs the checkpoint it applies to (--checkpoint DIR, or --resume DIR "
                "in train)");
  if (threads < 0) return fail("--threads must be >= 0");
  // More threads than this only oversubscribes the machine (and exhausts OpenMP's thread limits).
  constexpr int kMaxThreads = 1024;
  if (threads > kMaxThreads)
    return fail("--threads " + llvm::Twine(int(threads)) + " is above the limit of " +
                llvm::Twine(kMaxThreads));
  if (repeat < 1) return fail("--repeat must be >= 1");
  if (warmup < 0) return fail("--warmup must be >= 0");
  // An --output-dir that cannot hold the outputs is refused before the run, not after it: the
  // path itself, or the nearest folder above it that exists (where it will be created), must be a
  // folder; an empty one would silently write nothing.
  if (outputDir.getNumOccurrences() && outputDir.empty())
    return fail("--output-dir: the folder name is empty");
  if (!outputDir.empty()) {
    if (llvm::sys::fs::exists(outputDir) && !llvm::sys::fs::is_directory(outputDir))
      return fail(outputDir + ": --output-dir exists and is not a directory");
    llvm::SmallString<256> above(outputDir.getValue());
    while (!above.empty() && !llvm::sys::fs::exists(above)) llvm::sys::path::remove_filename(above);
    if (!above.empty() && !llvm::sys::fs::is_directory(above))
      return fail(outputDir + ": cannot create output directory: " + above + " is not a directory");
  }
  if (profileOps) OpProfile::enable();

  const KernelRegistry &registry = KernelRegistry::cpu();
  auto loaded = loadPlan(planPath, registry);
  if (!loaded) return fail(loaded.takeError());
  if (!offloadDir.empty()) {
    if (!(*loaded)->plan.has_offload())
      return fail(planPath + ": --offload-dir: the plan offloads nothing (compile it with memory.offload)");
    llvm::SmallString<256> dir(offloadDir.getValue());
    if (std::error_code ec = llvm::sys::fs::make_absolute(dir)) return fail("--offload-dir " + offloadDir + ": " + ec.message());
    (*loaded)->plan.mutable_offload()->set_dir(dir.str().str());
  }
  std::unique_ptr<Device> device = createCpuDevice();
  device->setThreads(threads == 0 && launchedByMpirun() ? defaultThreadsPerRank() : int(threads));
  if (mode == "export") return exportMain(**loaded);
  if (mode == "tokenize") return tokenizeMain(**loaded);
  const bool generatePlan = (*loaded)->plan.mode() == "generate";
  const bool serving = mode == "generate" || mode == "serve";
  if (generatePlan != serving)
    return fail(planPath + (generatePlan ? ": a generate plan runs with `colossal-run PLAN generate ...` or `serve`"
                                         : ": " + mode + " needs a plan compiled with `mode: generate` (this one is mode " +
                                               (*loaded)->plan.mode() + ")"));
  if (serving) {
    auto comm = startCommunication(**loaded, "", commTimeout);
    if (!comm) return fail(comm.takeError());
    // Tensor parallelism: this rank's slices of the sharded weights.
    if (llvm::Error e = selectRank(**loaded, (*comm)->rank())) return fail(std::move(e));
    if (mode == "serve") return colossal::tools::serveMain(**loaded, *device, **comm, tokenizerPath);
    colossal::tools::SharedGenerateOptions shared;
    if (prompt.getNumOccurrences()) shared.prompt = prompt;
    shared.tokenizer = tokenizerPath;
    shared.temperature = temperature;
    shared.seed = seed;
    return colossal::tools::generateMain(**loaded, *device, **comm, shared);
  }
  if (programName.empty()) programName = (*loaded)->program(colossal::plan::Program::FORWARD)->name();
  // One pipeline stage's forward or backward without collectives runs alone on one process (to
  // time it, docs/parallelism.md "Pipeline parallelism"): its mesh is then one rank.
  if (mode == "run" && !launchedByMpirun() && (*loaded)->plan.has_pipeline())
    if (const colossal::plan::Program *prog = (*loaded)->program(programName);
        prog && (prog->role() == colossal::plan::Program::STAGE_FORWARD || prog->role() == colossal::plan::Program::STAGE_BACKWARD ||
                 prog->role() == colossal::plan::Program::STAGE_BACKWARD_WEIGHT) &&
        std::none_of(prog->instructions().begin(), prog->instructions().end(),
                     [](const colossal::plan::Instruction &inst) {
                       auto it = inst.attrs().find("axes");
                       return it != inst.attrs().end() && it->second.has_s();
                     }))
      (*loaded)->plan.clear_mesh();
  auto comm = startCommunication(**loaded, programName, commTimeout);
  if (!comm) return fail(comm.takeError());
  // Sharded weights and states hold this rank's shards (docs/parallelism.md "Sharded tensors").
  if ((*comm)->rank() != 0)
    if (llvm::Error e = selectRank(**loaded, (*comm)->rank())) return fail(std::move(e));
  // An error on one rank alone ends the whole job (the others would wait in a collective).
  auto failHere = [&](llvm::Error e) {
    if ((*comm)->worldSize() == 1) return fail(std::move(e));
    abortOnRankError(**comm, std::move(e));
  };
  if (mode == "train") return trainMain(**loaded, *device, **comm);
  if (mode == "sample") return sampleMain(**loaded, *device, **comm);
  if ((*loaded)->plan.has_pipeline() && (*loaded)->plan.pipeline().forward_only() && programName.getNumOccurrences() == 0)
    return pipelineRunMain(**loaded, *device, **comm);

  std::unique_ptr<StateStore> states;
  if (!(*loaded)->plan.states().empty() || !checkpointDir.empty() || !dumpStatesDir.empty()) {
    auto s = openStates(**loaded, *device);
    if (!s) return fail(s.takeError());
    states = std::move(*s);
  }
  ExecutorOptions exOptions;
  exOptions.states = states.get();
  exOptions.comm = comm->get();
  auto executor = Executor::create(**loaded, registry, *device, programName, exOptions);
  if (!executor) return fail(executor.takeError());
  Executor &ex = **executor;

  // Data-parallel inference (docs/parallelism.md "Data parallelism"; DataParallelIO.h): inputs
  // are the global arrays, each rank keeps its rows; outputs are gathered for rank 0.
  DataParallelIO dataParallel;
  if ((*loaded)->plan.mode() != "train") {
    llvm::Expected<Mesh> mesh = Mesh::fromPlan((*loaded)->plan, (*loaded)->path);
    if (!mesh) return fail(mesh.takeError());
    llvm::Expected<DataParallelIO> io = DataParallelIO::create(*mesh, **comm);
    if (!io) return fail(io.takeError());
    dataParallel = std::move(*io);
  }
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
    if (llvm::Error e = dataParallel.scatter(*arr, want.shape, "input '" + name.str() + "' (" + file.str() + ")"))
      return fail(std::move(e));
    in.shape = arr->shape;
    if (llvm::ArrayRef<int64_t>(arr->shape) != llvm::ArrayRef<int64_t>(want.shape))
      return fail("input '" + name + "' (" + file + "): expected shape " + shapeToString(want.shape) +
                  ", got " + shapeToString(arr->shape));
    if (bf16FromF32) {
      in.bytes = AlignedBuffer(want.bytes());
      const float *src = static_cast<const float *>(arr->data.data());
      auto *dst = static_cast<uint16_t *>(in.bytes.data());
      for (int64_t i = 0; i < want.numel(); ++i) dst[i] = floatToBfloat16(src[i]);
    } else {
      in.bytes = std::move(arr->data);
    }
    inputs.push_back(std::move(in));
  }
  for (const BindingInfo &b : ex.inputs())
    if (!given.contains(b.name)) {
      if (!zeroInputs)
        return fail("missing input '" + b.name + "' (" + dtypeName(b.tensor.dtype) + " " +
                    shapeToString(b.tensor.shape) + "); pass --input " + b.name + "=FILE.npy (or --zero-inputs)");
      inputs.push_back({b.name, b.tensor.dtype, std::vector<int64_t>(b.tensor.shape.begin(), b.tensor.shape.end()),
                        AlignedBuffer(b.tensor.bytes())});
    }

  // The output files are known before anything runs: a name mapping clash stops here.
  std::vector<std::string> outputFiles;
  if (!outputDir.empty()) {
    std::vector<std::string> names;
    for (const BindingInfo &out : ex.outputs()) names.push_back(out.name);
    auto files = tensorFileNames(names, ".npy", "outputs");
    if (!files) return fail(outputDir + ": " + llvm::toString(files.takeError()));
    outputFiles = std::move(*files);
  }

  // Inputs are copied in before every run: in-place kernels may reuse their arena bytes.
  auto runOnce = [&]() -> llvm::Error {
    for (const InputData &in : inputs)
      if (llvm::Error e = ex.setInput(in.name, in.dtype, in.shape, in.bytes.data())) return e;
    return ex.run();
  };
  for (int i = 0; i < warmup; ++i)
    if (llvm::Error e = runOnce()) return failHere(std::move(e));
  if (OpProfile *profile = OpProfile::active()) profile->reset();  // the timed runs only
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    for (const InputData &in : inputs)
      if (llvm::Error e = ex.setInput(in.name, in.dtype, in.shape, in.bytes.data())) return fail(std::move(e));
    auto t0 = std::chrono::steady_clock::now();
    if (llvm::Error e = ex.run()) return failHere(std::move(e));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if ((repeat > 1 || warmup > 0) && (*comm)->rank() == 0) {
    std::sort(ms.begin(), ms.end());
    llvm::errs() << llvm::format("%s: median %.3f ms, min %.3f ms over %d runs\n", programName.c_str(),
                                 ms[ms.size() / 2], ms.front(), repeat.getValue());
  }
  // The profile closes a run that finished (outputs written): a failed one ends with its error.
  auto printProfile = [&] {
    if (OpProfile *profile = OpProfile::active(); profile && (*comm)->rank() == 0)
      profile->print(llvm::errs(), "profile: rank 0, program " + programName + ", " + std::to_string(repeat) +
                                       " run" + (repeat == 1 ? "" : "s"));
    return 0;
  };

  if (!dumpStatesDir.empty())
    if (llvm::Error e = dumpStates(*states, dumpStatesDir, **comm)) return failHere(std::move(e));
  // Data parallelism: every output's dim 0 is the batch; gather the ranks' rows (every rank takes
  // part), then rank 0 writes them.
  std::vector<std::pair<Shape, AlignedBuffer>> gathered;
  if (dataParallel.size() > 1 && !outputDir.empty())
    for (const BindingInfo &out : ex.outputs()) {
      const TensorRef &t = out.tensor;
      std::vector<char> host(t.bytes());
      device->copyToHost(host.data(), t.data, t.bytes());
      auto all = dataParallel.gather(host.data(), t.shape, t.dtype, "output '" + out.name + "'");
      if (!all) return failHere(all.takeError());
      Shape shape = t.shape;
      shape[0] *= dataParallel.size();
      gathered.emplace_back(std::move(shape), std::move(*all));
    }
  // Rank 0 writes the outputs (each rank holds them whole until plans carry output shardings).
  if (outputDir.empty() || (*comm)->rank() != 0) return printProfile();
  if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
    return fail(outputDir + ": cannot create output directory: " + ec.message());
  for (size_t i = 0; i < ex.outputs().size(); ++i) {
    const BindingInfo &out = ex.outputs()[i];
    llvm::SmallString<256> path(outputDir);
    llvm::sys::path::append(path, outputFiles[i]);
    TensorRef t = out.tensor;
    if (!gathered.empty()) {
      t.shape = gathered[i].first;
      t.data = gathered[i].second.data();
    }
    if (llvm::Error e = writeOutput(path, t, *device)) return fail(std::move(e));
    llvm::outs() << "output '" << out.name << "' -> " << path << "\n";
  }
  return printProfile();
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

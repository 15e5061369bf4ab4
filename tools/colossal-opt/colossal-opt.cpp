//===- colossal-opt.cpp - the Colossal compiler driver --------------------===//
//
//   colossal-opt MODEL.onnx --spec SPEC.yaml -o MODEL.cplan     compile to a plan
//   colossal-opt MODEL.onnx --spec SPEC.yaml --emit=mlir        IR after the pipeline
//   colossal-opt IN.mlir --pass-pipeline='builtin.module(...)'  mlir-opt mode (lit tests)
//   colossal-opt IN.mlir --emit=plan -o M.cplan [--report]      lower a module to a plan
//
// Every standard mlir-opt flag works in both modes (--pass-pipeline, --dump-pass-pipeline,
// --mlir-print-ir-after-all, -split-input-file, -verify-diagnostics).
//===----------------------------------------------------------------------===//
#include "colossal/Import/ONNX.h"
#include "MemoryBudget.h"
#include "colossal/Pipeline/Pipeline.h"
#include "colossal/Spec/Spec.h"
#include "colossal/Target/Plan.h"
#include "colossal/runtime/Plan.h"
#include "dialects/Colossal/ColossalOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

static llvm::cl::OptionCategory category("colossal-opt: ONNX compilation");
static llvm::cl::opt<std::string> specPath("spec", llvm::cl::desc("Spec file (YAML)"),
                                           llvm::cl::value_desc("SPEC.yaml"),
                                           llvm::cl::cat(category));
static llvm::cl::opt<std::string> emitKind(
    "emit", llvm::cl::desc("What to write for an ONNX input: plan (default) or mlir"),
    llvm::cl::init("plan"), llvm::cl::cat(category));
static llvm::cl::opt<bool> report("report",
                                  llvm::cl::desc("Print the memory plan report (stdout)"),
                                  llvm::cl::cat(category));
static llvm::cl::opt<std::string> reportFormat(
    "report-format",
    llvm::cl::desc("The report's form: text (default) or json (one object; implies --report)"),
    llvm::cl::init("text"), llvm::cl::cat(category));

static llvm::cl::opt<bool> dumpSchedule(
    "dump-schedule",
    llvm::cl::desc("Print the pipeline schedule (actions per stage, bubble; stdout)"),
    llvm::cl::cat(category));

/// --report, or --report-format=json alone.
static bool wantReport() { return report || reportFormat == "json"; }

static llvm::cl::opt<double> bucketCapMb(
    "bucket-cap-mb",
    llvm::cl::desc("Gradient buckets: overrides the spec's zero.bucket_mb (default 25 MiB; 0: one "
                   "collective per gradient)"),
    llvm::cl::init(25.0), llvm::cl::value_desc("MiB"), llvm::cl::cat(category));

static int fail(const llvm::Twine &msg) {
  llvm::errs() << "error: " << msg << "\n";
  return 1;
}

static int compileONNX(StringRef input, StringRef output, DialectRegistry &registry) {
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  colossal::Spec spec;
  if (!specPath.empty()) {
    auto parsed = colossal::parseSpecFile(specPath);
    if (!parsed) {
      llvm::errs() << "error: " << llvm::toString(parsed.takeError()) << "\n";
      return 1;
    }
    spec = std::move(*parsed);
  }
  if (bucketCapMb.getNumOccurrences() > 0)
    spec.bucketMb = bucketCapMb;
  if (emitKind != "plan" && emitKind != "mlir")
    return fail("--emit must be 'plan' or 'mlir', got '" + emitKind + "'");
  if (emitKind == "plan" && (output.empty() || output == "-"))
    return fail("compiling to a plan needs -o MODEL.cplan");

  // Never write over the inputs: the plan (or its weights file) must not be the model or spec.
  if (emitKind == "plan") {
    llvm::SmallString<256> weights = llvm::sys::path::parent_path(output);
    llvm::sys::path::append(weights, llvm::sys::path::stem(output) + ".safetensors");
    for (StringRef target : {output, StringRef(weights)})
      for (StringRef source : {input, StringRef(specPath)})
        if (!source.empty() && llvm::sys::fs::equivalent(target, source))
          return fail(target + " is the input file " + source + "; choose another -o");
  }

  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false); // a whole-module dump helps nobody reading an error
  // Diagnostics read like the importer's: `error: MODEL.onnx: node 'NAME': message` for an op
  // that came from an ONNX node, `error: message` otherwise (messages name their file).
  ScopedDiagnosticHandler diagnostics(&context, [&](Diagnostic &d) {
    const char *severity = d.getSeverity() == DiagnosticSeverity::Error     ? "error"
                           : d.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                           : d.getSeverity() == DiagnosticSeverity::Note    ? "note"
                                                                             : "remark";
    llvm::errs() << severity << ": ";
    if (auto name = llvm::dyn_cast<NameLoc>(d.getLocation()))
      llvm::errs() << input << ": node '" << name.getName().getValue() << "': ";
    else if (!specPath.empty() && StringRef(d.str()).starts_with("parallel.tensor."))
      llvm::errs() << specPath << ": "; // a spec key checked against the model (hints)
    llvm::errs() << d.str() << "\n";
    for (Diagnostic &note : d.getNotes())
      llvm::errs() << "note: " << note.str() << "\n";
    return success();
  });
  // The model is imported at the global batch (the spec's `inputs` are global shapes); data
  // parallelism and grad_accum split it in the pipeline (colossal-split-batch).
  colossal::ImportOptions importOptions;
  for (auto &[name, shape] : spec.inputs)
    importOptions.inputShapes[name] = shape;
  for (auto &[name, file] : spec.values)
    importOptions.inputValues[name] = file;
  importOptions.trainParams = spec.train.has_value();
  // Mode generate: one sequence of positions, from which colossal-generate derives the steps.
  if (spec.generate)
    importOptions.tokenRows = spec.generate->importTokens();
  bool nodeError = false; // the import failed at a node (not at the file, an input, ...)
  importOptions.failedAtNode = &nodeError;
  OwningOpRef<ModuleOp> module = colossal::importONNX(input, importOptions, context);
  if (!module) {
    if (spec.generate && nodeError) { // a node's shapes failed at the imported length
      int64_t step = 1;
      while (step < spec.generate->maxBatchTokens)
        step *= 2;
      llvm::errs() << "note: mode generate imports the model as one sequence of "
                   << importOptions.tokenRows << " positions (generate.max_seq_len "
                   << spec.generate->maxSeqLen << " rounded up to a multiple of the largest step, "
                   << step << " tokens, and at least twice it); a model whose tables hold fewer "
                      "positions needs a smaller max_batch_tokens or max_seq_len\n";
    }
    return 1;
  }

  // The pipeline: an explicit --pass-pipeline, else the spec's `passes`, else the one the spec
  // generates (buildColossalPipeline, typed pass options). MLIR's mlir-opt config offers the
  // command line's pipeline only through a callback that also dumps it (an empty one too, when
  // none was given), so whether one was given is read from the registered option.
  std::string text = spec.passes;
  auto &registered = llvm::cl::getRegisteredOptions();
  if (auto it = registered.find("pass-pipeline");
      it != registered.end() && it->second->getNumOccurrences() > 0)
    text = static_cast<llvm::cl::opt<std::string> *>(it->second)->getValue();
  PassManager pm(&context, ModuleOp::getOperationName());
  if (text.empty()) {
    colossal::buildColossalPipeline(pm, spec);
  } else {
    auto parsed = parsePassPipeline(text, llvm::errs());
    if (failed(parsed))
      return fail("invalid pass pipeline '" + text + "'");
    if (parsed->getOpAnchorName() != ModuleOp::getOperationName())
      return fail("the pass pipeline must be anchored on builtin.module, got '" + text + "'");
    static_cast<OpPassManager &>(pm) = std::move(*parsed);
  }
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  if (config.shouldDumpPassPipeline()) {
    pm.printAsTextualPipeline(llvm::errs());
    llvm::errs() << "\n";
  }
  // memory: acts through the generated pipeline (colossal-recompute, colossal-chain-global-norm,
  // the budget fit); a hand-written one would drop it silently.
  if (!text.empty() && (spec.memory.budgetBytes || spec.memory.recompute != "none" ||
                        spec.memory.offload != "none"))
    return fail(specPath + ": memory: (budget_mb, recompute, offload) applies to the pipeline the "
                "spec generates; it cannot be combined with `passes:` or --pass-pipeline (add "
                "colossal-recompute / colossal-chain-global-norm to the pipeline yourself and drop "
                "memory:)");
  // A memory budget or recompute (docs/training.md "Memory budget") may need the pipeline more
  // than once, so the imported module is kept.
  const bool budgeted =
      text.empty() && (spec.memory.budgetBytes ||
                       (spec.train && (spec.memory.recompute != "none" || spec.memory.offload != "none" ||
                                       wantReport())));
  OwningOpRef<ModuleOp> imported;
  if (budgeted)
    imported = module->clone();
  if (failed(pm.run(*module)))
    return 1;
  colossal::MemoryFit fit;
  if (budgeted) {
    auto compile = [&](const colossal::Spec &variant) -> OwningOpRef<ModuleOp> {
      OwningOpRef<ModuleOp> m(imported->clone());
      PassManager again(&context, ModuleOp::getOperationName());
      colossal::buildColossalPipeline(again, variant);
      if (failed(again.run(*m)))
        return nullptr;
      return m;
    };
    colossal::PlanOptions predictOptions;
    predictOptions.offloadDir = spec.memory.offloadDir;
    auto fitted = colossal::fitMemoryBudget(*module, spec, predictOptions, compile, specPath);
    if (failed(fitted))
      return 1;
    fit = std::move(*fitted);
    if (fit.module)
      module = std::move(fit.module);
  }
  if (emitKind == "mlir") {
    std::string err;
    auto out = openOutputFile(output.empty() ? "-" : output, &err);
    if (!out)
      return fail(err);
    module->print(out->os(), OpPrintingFlags().elideLargeElementsAttrs(16));
    out->os() << "\n";
    out->keep();
    return 0;
  }
  colossal::PlanOptions planOptions;
  planOptions.mode = spec.mode;
  if (spec.train)
    for (const colossal::TrainSpec::Input &in : spec.train->inputs) {
      // The plan may run from another folder: an npy source is recorded as an absolute path
      // (read, and checked against the input, when training starts).
      llvm::SmallString<256> path(in.path);
      if (!path.empty())
        if (std::error_code ec = llvm::sys::fs::make_absolute(path))
          return fail(in.path + ": " + ec.message());
      planOptions.dataInputs.push_back(
          {in.name, in.kind, path.str().str(), in.mean, in.std, in.low, in.high});
    }
  planOptions.reportFormat = reportFormat;
  planOptions.dumpSchedule = dumpSchedule;
  if (spec.pipeline)
    planOptions.scheduleFile = spec.pipeline->scheduleFile;
  planOptions.memoryBudgetBytes = spec.memory.budgetBytes.value_or(0);
  planOptions.minimumBudgetBytes = fit.minimumBytes;
  planOptions.offloadMode = fit.offloadMode;
  planOptions.offloadDir = spec.memory.offloadDir;
  {
    // The plan records the model compiled: `colossal-run export --onnx` rereads it; a train plan
    // also the spec's hash (checkpoint manifests).
    llvm::SmallString<256> absolute(input);
    if (std::error_code ec = llvm::sys::fs::make_absolute(absolute))
      return fail(input + ": " + ec.message());
    planOptions.sourceModel = absolute.str().str();
    auto modelHash = colossal::runtime::fnv1a64File(input);
    if (!modelHash)
      return fail(llvm::toString(modelHash.takeError()));
    planOptions.sourceModelHash = *modelHash;
    if (spec.mode == "train" && !specPath.empty()) {
      auto specHash = colossal::runtime::fnv1a64File(specPath);
      if (!specHash)
        return fail(llvm::toString(specHash.takeError()));
      planOptions.specHash = *specHash;
    }
  }
  if (failed(colossal::emitPlan(*module, output, planOptions, wantReport() ? &llvm::outs() : nullptr)))
    return 1;
  return 0;
}

/// `colossal-opt IN.mlir --emit=plan -o M.cplan [--pass-pipeline=...] [--report]`: lowers a
/// hand-written module (lit tests of the plan lowering); the mode follows the module (train when
/// it carries `colossal.train`).
static int compileMLIR(StringRef input, StringRef output, DialectRegistry &registry) {
  if (output.empty() || output == "-")
    return fail("compiling to a plan needs -o MODEL.cplan");
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
  std::string err;
  auto file = openInputFile(input, &err);
  if (!file)
    return fail(err);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;
  auto &registered = llvm::cl::getRegisteredOptions();
  if (auto it = registered.find("pass-pipeline");
      it != registered.end() && it->second->getNumOccurrences() > 0) {
    std::string pipeline = static_cast<llvm::cl::opt<std::string> *>(it->second)->getValue();
    auto parsed = parsePassPipeline(pipeline, llvm::errs());
    if (failed(parsed))
      return fail("invalid pass pipeline '" + pipeline + "'");
    PassManager pm(&context, parsed->getOpAnchorName());
    static_cast<OpPassManager &>(pm) = std::move(*parsed);
    if (failed(pm.run(*module)))
      return 1;
  }
  colossal::PlanOptions planOptions;
  planOptions.reportFormat = reportFormat;
  planOptions.dumpSchedule = dumpSchedule;
  if (failed(colossal::emitPlan(*module, output, planOptions, wantReport() ? &llvm::outs() : nullptr)))
    return 1;
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  DialectRegistry registry;
  registry.insert<colossal::ColossalDialect, func::FuncDialect>();
  registerTransformsPasses();
  colossal::registerColossalPasses();

  std::string header = registerCLIOptions("colossal-opt: the Colossal compiler", registry);
  auto [input, output] = parseCLIOptions(argc, argv, header);
  if (!(bucketCapMb >= 0 && bucketCapMb <= 1048576))
    return fail("--bucket-cap-mb=" + std::to_string(bucketCapMb.getValue()) +
                ": expected a size in MiB in [0, 1048576]");
  if (reportFormat != "text" && reportFormat != "json")
    return fail("--report-format=" + reportFormat + ": expected text or json");
  if (StringRef(input).ends_with(".onnx"))
    return compileONNX(input, output, registry);
  if (!specPath.empty())
    return fail("--spec applies to an ONNX model; '" + input + "' is not a .onnx file");
  if (emitKind.getNumOccurrences() > 0 && emitKind == "plan")
    return compileMLIR(input, output, registry);
  return asMainReturnCode(MlirOptMain(argc, argv, input, output, registry));
}

//===- TrainConfig.cpp - Plan.train from the module's `colossal.train` ---------------------===//
//
// The dictionary maps onto TrainConfig field by field through protobuf reflection, so a field
// added to plan.proto travels without code here; what the programs already say (batch, sequence
// length, accumulation, vocabulary) is derived from them, or checked against them.
//
//===----------------------------------------------------------------------------------------===//
#include "TrainConfig.h"

#include "dialects/Colossal/ColossalDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringSwitch.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

using namespace mlir;
namespace pb = google::protobuf;

namespace colossal {

namespace {

/// The binding `name` of `program`, or nullptr.
const Tensor *binding(const CollectedProgram &program,
                      const std::vector<std::pair<std::string, uint32_t>> &bindings,
                      llvm::StringRef name) {
  for (const auto &[n, id] : bindings)
    if (n == name)
      return &program.tensors[id];
  return nullptr;
}

const CollectedProgram *program(const CollectedModule &collected, ProgramRole role) {
  for (const CollectedProgram &p : collected.programs)
    if (p.role == role)
      return &p;
  return nullptr;
}

/// What both data contracts end with: the labels input (when there is one) is an input of
/// @train_step and @eval, vocab_size comes from @forward's logits output (when named), and the
/// driver's model and spec hashes.
template <typename Fail, typename Derive>
LogicalResult finishTrainConfig(const CollectedProgram &forward, const CollectedProgram &trainStep,
                                const CollectedProgram &eval, const PlanOptions &options,
                                plan::TrainConfig &config, Fail fail, Derive derive) {
  if (!config.labels_input().empty())
    for (const CollectedProgram *p : {&trainStep, &eval})
      if (!binding(*p, p->inputs, config.labels_input()))
        return fail("labels_input '" + config.labels_input() + "' is no input of @" + p->name);
  if (!config.logits_output().empty()) {
    const Tensor *logits = binding(forward, forward.outputs, config.logits_output());
    if (!logits || logits->type.shape.empty())
      return fail("logits_output '" + config.logits_output() + "' is no output of @forward");
    if (!derive("vocab_size", logits->type.shape.back(), "@forward's logits output"))
      return failure();
  }
  config.set_source_model(options.sourceModel);
  config.set_source_model_hash(options.sourceModelHash);
  config.set_spec_hash(options.specHash);
  return success();
}

/// TrainConfig.data_inputs (the spec's train.inputs): each name of `names` gets its source from
/// `options`; global_batch comes from @forward's data inputs (the created labels are not among
/// them), grad_accum from @train_step's rows.
template <typename Fail, typename Derive>
LogicalResult collectDataInputs(ModuleOp module, ArrayAttr names, const CollectedProgram &forward,
                                const CollectedProgram &trainStep, const CollectedProgram &eval,
                                const PlanOptions &options, plan::TrainConfig &config, Fail fail,
                                Derive derive) {
  int64_t rows = -1;
  for (Attribute a : names) {
    auto name = llvm::dyn_cast<StringAttr>(a);
    if (!name)
      return fail("data_inputs must be an array of strings");
    auto it = llvm::find_if(options.dataInputs,
                            [&](const PlanOptions::DataInput &d) { return d.name == name.getValue(); });
    if (it == options.dataInputs.end())
      return fail("data input '" + name.getValue() +
                  "' has no source (colossal-opt fills them from the spec's train.inputs)");
    plan::DataInput *d = config.add_data_inputs();
    d->set_name(it->name);
    d->set_kind(it->kind == "npy"      ? plan::DataInput::NPY
                : it->kind == "normal" ? plan::DataInput::NORMAL
                                       : plan::DataInput::UNIFORM_INT);
    d->set_path(it->path);
    d->set_mean(it->mean);
    d->set_std(it->std);
    d->set_low(it->low);
    d->set_high(it->high);
    for (const CollectedProgram *p : {&trainStep, &eval}) {
      const Tensor *t = binding(*p, p->inputs, name.getValue());
      if (!t || t->type.shape.empty())
        return fail("data input '" + name.getValue() + "' is no input [b, ...] of @" + p->name);
      if (rows >= 0 && t->type.shape[0] != rows)
        return fail("data input '" + name.getValue() + "' has " + llvm::Twine(t->type.shape[0]) +
                    " rows in @" + p->name + ", the others " + llvm::Twine(rows));
      rows = t->type.shape[0];
    }
    if (const Tensor *t = binding(forward, forward.inputs, name.getValue()))
      if (!derive("global_batch", t->type.shape[0], "@forward's input '" + name.getValue() + "'"))
        return failure();
  }
  if (config.global_batch() <= 0 || rows <= 0 || config.global_batch() % rows != 0)
    return fail("@train_step's data inputs take " + llvm::Twine(rows) +
                " rows, which must divide global_batch " + llvm::Twine(config.global_batch()));
  if (!derive("grad_accum", config.global_batch() / rows, "@train_step's data inputs"))
    return failure();
  (void)module;
  return finishTrainConfig(forward, trainStep, eval, options, config, fail, derive);
}
} // namespace

LogicalResult collectTrainConfig(ModuleOp module, const CollectedModule &collected,
                                 const PlanOptions &options, plan::TrainConfig &config) {
  auto dict = module->getAttrOfType<DictionaryAttr>(kTrainAttr);
  if (!dict)
    return module.emitError() << "'" << kTrainAttr << "' must be a dictionary, got "
                              << module->getAttr(kTrainAttr);
  auto fail = [&](const llvm::Twine &message) {
    return module.emitError() << "'" << kTrainAttr << "': " << message;
  };

  // 1. Every key that names a TrainConfig field.
  const pb::Descriptor *descriptor = config.GetDescriptor();
  const pb::Reflection *reflection = config.GetReflection();
  for (NamedAttribute entry : dict) {
    const pb::FieldDescriptor *field = descriptor->FindFieldByName(entry.getName().str());
    if (!field || field->is_repeated())
      continue; // repeated fields (data_inputs) are filled below
    Attribute value = entry.getValue();
    auto integer = llvm::dyn_cast<IntegerAttr>(value);
    bool ok = true;
    switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING:
      if (auto s = llvm::dyn_cast<StringAttr>(value))
        reflection->SetString(&config, field, s.getValue().str());
      else
        ok = false;
      break;
    case pb::FieldDescriptor::CPPTYPE_INT64:
      if (integer && !llvm::isa<BoolAttr>(value))
        reflection->SetInt64(&config, field, integer.getValue().getSExtValue());
      else
        ok = false;
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      if (integer && !llvm::isa<BoolAttr>(value))
        reflection->SetUInt64(&config, field, integer.getValue().getZExtValue());
      else
        ok = false;
      break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      if (auto f = llvm::dyn_cast<FloatAttr>(value))
        reflection->SetDouble(&config, field, f.getValueAsDouble());
      else if (integer && !llvm::isa<BoolAttr>(value))
        reflection->SetDouble(&config, field, double(integer.getValue().getSExtValue()));
      else
        ok = false;
      break;
    default:
      ok = false;
    }
    if (!ok)
      return fail("key '" + entry.getName().getValue() + "' has a value of the wrong kind (" +
                  field->cpp_type_name() + " expected)");
  }
  for (llvm::StringRef key : {"tokens_input", "labels_input", "optimizer", "lr"})
    if (!dict.get(key))
      return fail("missing key '" + key + "'");
  if (!llvm::is_contained({llvm::StringRef("sgd"), llvm::StringRef("adam"), llvm::StringRef("adamw")},
                          config.optimizer()))
    return fail("optimizer '" + config.optimizer() + "' is not sgd, adam or adamw");
  if (config.lr_schedule().empty())
    config.set_lr_schedule("constant");
  if (config.lr_schedule() != "constant" && config.lr_schedule() != "cosine")
    return fail("lr_schedule '" + config.lr_schedule() + "' is not constant or cosine");

  // 2. Derived from (or checked against) the programs.
  auto derive = [&](llvm::StringRef key, int64_t actual, const llvm::Twine &from) -> bool {
    const pb::FieldDescriptor *field = descriptor->FindFieldByName(key.str());
    if (dict.get(key) && reflection->GetInt64(config, field) != actual) {
      (void)fail("key '" + key + "' is " + llvm::Twine(reflection->GetInt64(config, field)) +
                 " but " + from + " says " + llvm::Twine(actual));
      return false;
    }
    reflection->SetInt64(&config, field, actual);
    return true;
  };
  const CollectedProgram *forward = program(collected, ProgramRole::Forward);
  const CollectedProgram *trainStep = program(collected, ProgramRole::TrainStep);
  const CollectedProgram *eval = program(collected, ProgramRole::Eval);
  if (auto names = dict.getAs<ArrayAttr>("data_inputs"))
    return collectDataInputs(module, names, *forward, *trainStep, *eval, options, config, fail,
                             derive);
  const Tensor *tokens = binding(*forward, forward->inputs, config.tokens_input());
  if (!tokens)
    return fail("tokens_input '" + config.tokens_input() + "' is no input of @forward");
  if (tokens->type.shape.size() != 2 ||
      (tokens->type.dtype != plan::I64 && tokens->type.dtype != plan::I32))
    return fail("tokens_input '" + config.tokens_input() +
                "' must be int64 or int32 [B, T] in @forward");
  if (!derive("global_batch", tokens->type.shape[0], "@forward's tokens input") ||
      !derive("seq_len", tokens->type.shape[1], "@forward's tokens input"))
    return failure();
  const Tensor *stepTokens = binding(*trainStep, trainStep->inputs, config.tokens_input());
  if (!stepTokens || stepTokens->type.shape.size() != 2 ||
      stepTokens->type.shape[1] != config.seq_len() || stepTokens->type.shape[0] <= 0 ||
      config.global_batch() % stepTokens->type.shape[0] != 0)
    return fail("@train_step must take tokens_input '" + config.tokens_input() +
                "' as [B / grad_accum, T] = [b, " + llvm::Twine(config.seq_len()) +
                "] with b dividing " + llvm::Twine(config.global_batch()));
  if (!derive("grad_accum", config.global_batch() / stepTokens->type.shape[0],
              "@train_step's tokens input"))
    return failure();
  if (config.labels_input().empty())
    return fail("labels_input is empty: a token-file plan's @train_step reads its labels");
  // 3. From the driver.
  return finishTrainConfig(*forward, *trainStep, *eval, options, config, fail, derive);
}

} // namespace colossal

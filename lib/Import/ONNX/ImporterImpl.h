//===- ImporterImpl.h - shared state of the ONNX importer ---------*- C++ -*-===//
//
// The importer walks the graph's nodes in order (ONNX requires topological order). For each node,
// a NodeContext gathers its inputs and attributes and an op importer (OpImporters.cpp) emits
// colossal ops through NodeContext::make, which infers result types, verifies, and folds — so
// shape arithmetic becomes constants as soon as its operands are constants.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_LIB_IMPORT_ONNX_IMPORTERIMPL_H
#define COLOSSAL_LIB_IMPORT_ONNX_IMPORTERIMPL_H

#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>

namespace colossal::onnx_import {

class GraphImporter;

/// Maps an ONNX TensorProto data type to an MLIR element type; null when unsupported.
mlir::Type elementTypeFor(int onnxType, mlir::MLIRContext *ctx);
/// The ONNX name of a data type ("FLOAT", "STRING", ...), for messages.
std::string onnxTypeName(int onnxType);

/// The largest tensor the compiler creates: 2^40 elements (4 TiB of f32) — beyond any plan that
/// can run, and far from int64 overflow in byte arithmetic.
inline constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

/// Whether `name` is one of the graph's initializers (a weight, or a Constant node's output).
bool isInitializerName(const GraphImporter &g, llvm::StringRef name);

/// TensorProto (raw, typed or external data) → DenseElementsAttr; file-level errors are printed
/// by the importer and yield failure. `what` names the tensor in messages.
mlir::FailureOr<mlir::DenseElementsAttr> importTensor(GraphImporter &g, const onnx::TensorProto &t,
                                                      const llvm::Twine &what);

/// Imports a control-flow body inline (GraphImporter::importSubgraph): `inputs` bind its formal
/// inputs, outer names stay visible; returns its outputs. Errors are already printed on failure.
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
importSubgraph(GraphImporter &g, const onnx::GraphProto &graph, llvm::ArrayRef<mlir::Value> inputs);

/// The ONNX training-operator domain (Adagrad, Adam, Momentum); its importers are keyed
/// "ai.onnx.preview.training.<OpType>".
inline constexpr const char *kTrainingDomain = "ai.onnx.preview.training";

/// Everything an op importer needs about one node.
class NodeContext {
public:
  NodeContext(GraphImporter &graph, const onnx::NodeProto &node, int64_t opset,
              mlir::OpBuilder &builder, mlir::Location loc)
      : graph(graph), node(node), opset(opset), b(builder), loc(loc) {}

  GraphImporter &graph;
  const onnx::NodeProto &node;
  const int64_t opset;
  mlir::OpBuilder &b;
  mlir::Location loc;
  /// Node inputs; a null Value for an absent optional input (empty name or past the end).
  llvm::SmallVector<mlir::Value> in;
  /// Node outputs, set by the op importer.
  llvm::SmallVector<mlir::Value> out;
  /// The first error; reported by the caller with the node's name, type and opset.
  std::string errorMessage;
  /// Train mode, a training-mode BatchNormalization whose running statistics (inputs 3 and 4)
  /// are initializers: they are parameter arguments the importer updates with
  /// colossal.update_buffer (buffers, as torch calls them), not constants.
  bool runningStatsAreBuffers = false;

  mlir::MLIRContext *ctx() { return b.getContext(); }
  bool has(size_t i) const { return i < in.size() && in[i]; }
  mlir::RankedTensorType typeOf(size_t i) const {
    return llvm::cast<mlir::RankedTensorType>(in[i].getType());
  }
  size_t numOutputs() const { return node.output_size(); }
  bool outputUsed(size_t i) const { return int(i) < node.output_size() && !node.output(i).empty(); }

  mlir::LogicalResult error(const llvm::Twine &message) {
    if (errorMessage.empty())
      errorMessage = message.str();
    return mlir::failure();
  }
  mlir::LogicalResult requireInputs(size_t minimum);

  // Attributes.
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  int64_t attrInt(llvm::StringRef name, int64_t dflt) const;
  float attrFloat(llvm::StringRef name, float dflt) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef dflt) const;
  std::optional<llvm::SmallVector<int64_t>> attrInts(llvm::StringRef name) const;

  /// Input `i` as a compile-time constant (all shape operands must be); `what` names the operand
  /// in the error ("shape", "axes", ...).
  mlir::FailureOr<HostTensor> constInput(size_t i, llvm::StringRef what);
  mlir::FailureOr<llvm::SmallVector<int64_t>> constInts(size_t i, llvm::StringRef what);
  /// Why `v` is not a compile-time constant, as a clause for an error message: the model inputs
  /// it is computed from ("it depends on model input 'sr' (bind it with the spec's values ...)"),
  /// else the weights, else "it depends on values computed at run time".
  std::string dependence(mlir::Value v);

  /// Normalizes a possibly negative axis against `rank`; an error when out of range.
  mlir::FailureOr<int64_t> normAxis(int64_t axis, int64_t rank, llvm::StringRef what = "axis");

  /// Creates `OpTy` with inferred result types, verifies it and folds it. Errors from inference
  /// or verification become this node's error.
  template <typename OpTy, typename... Args>
  mlir::FailureOr<mlir::Value> make(Args &&...args) {
    mlir::OperationState state(loc, OpTy::getOperationName());
    OpTy::build(b, state, mlir::TypeRange{b.getNoneType()}, std::forward<Args>(args)...);
    if (mlir::failed(checkOperands(state)))
      return mlir::failure();
    llvm::SmallVector<mlir::Type> types;
    std::string diag;
    {
      mlir::ScopedDiagnosticHandler handler(ctx(), [&](mlir::Diagnostic &d) {
        if (diag.empty())
          diag = d.str();
        return mlir::success();
      });
      if (mlir::failed(OpTy::inferReturnTypes(ctx(), loc, state.operands,
                                              state.attributes.getDictionary(ctx()),
                                              state.getRawProperties(), state.regions, types)))
        return mlir::FailureOr<mlir::Value>(error(diag.empty() ? "invalid operands" : diag));
    }
    state.types.assign(types.begin(), types.end());
    return finish(state);
  }

  /// Like make, with explicit result types (reshape, expand, cast, split).
  template <typename OpTy, typename... Args>
  mlir::FailureOr<llvm::SmallVector<mlir::Value>> makeTyped(mlir::TypeRange resultTypes,
                                                             Args &&...args) {
    mlir::OperationState state(loc, OpTy::getOperationName());
    OpTy::build(b, state, resultTypes, std::forward<Args>(args)...);
    if (mlir::failed(checkOperands(state)))
      return mlir::failure();
    return finishMulti(state);
  }
  template <typename OpTy, typename... Args>
  mlir::FailureOr<mlir::Value> makeTyped1(mlir::Type resultType, Args &&...args) {
    auto r = makeTyped<OpTy>(mlir::TypeRange{resultType}, std::forward<Args>(args)...);
    if (mlir::failed(r))
      return mlir::failure();
    return (*r)[0];
  }

  mlir::Value constant(mlir::DenseElementsAttr value);
  /// Reshape (a no-op when the shape already matches).
  mlir::FailureOr<mlir::Value> reshape(mlir::Value v, llvm::ArrayRef<int64_t> shape);

  /// An error unless `shape` has at most kMaxTensorElements elements (and no int64 overflow).
  mlir::LogicalResult checkElementCount(llvm::ArrayRef<int64_t> shape, llvm::StringRef what);

private:
  /// A missing (blank) input where the op needs one is an error, not a null operand.
  mlir::LogicalResult checkOperands(mlir::OperationState &state);
  mlir::FailureOr<mlir::Value> finish(mlir::OperationState &state);
  mlir::FailureOr<llvm::SmallVector<mlir::Value>> finishMulti(mlir::OperationState &state);
};

/// Appends `v` to the node's outputs (failure passes through): `return setOut(c, c.make<...>())`.
inline mlir::LogicalResult setOut(NodeContext &c, mlir::FailureOr<mlir::Value> v) {
  if (mlir::failed(v))
    return mlir::failure();
  c.out.push_back(*v);
  return mlir::success();
}

/// A type as MLIR prints it ("f32", "tensor<2x3xi64>"), for messages.
inline std::string typeStr(mlir::Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

/// The `axes` of ops that took them as an attribute before `inputSinceOpset` and as input 1 from
/// then on (Squeeze, Unsqueeze, ReduceX). Empty when absent and not `required`.
mlir::FailureOr<llvm::SmallVector<int64_t>> axesOperand(NodeContext &c, int64_t inputSinceOpset,
                                                        bool required);

using OpImporter = mlir::LogicalResult (*)(NodeContext &);
using ImporterTable = llvm::StringMap<OpImporter>;

/// The op importer table: ONNX op type → importer, filled by one registration function per op
/// family. Ops whose initializer operands may be taken as constants (data movement and
/// comparisons, which then fold) are listed by foldsInitializers.
const ImporterTable &opImporters();
void registerCoreImporters(ImporterTable &table);
void registerNNImporters(ImporterTable &table);
void registerIndexingImporters(ImporterTable &table);
void registerElementwiseImporters(ImporterTable &table);
void registerMiscImporters(ImporterTable &table);

/// The oldest opset at which `opType` means what the importer implements. Most operators are
/// supported from opset 7 (the first with NumPy broadcasting); a few whose definition has not
/// changed since an earlier version are accepted from that version.
int64_t oldestOpset(llvm::StringRef opType);
bool foldsInitializers(llvm::StringRef opType);

} // namespace colossal::onnx_import

#endif

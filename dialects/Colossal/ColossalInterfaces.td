#ifndef COLOSSAL_INTERFACES_TD
#define COLOSSAL_INTERFACES_TD

include "mlir/IR/OpBase.td"

// Reverse-mode autodiff (passes/Autodiff, docs/training.md). Each differentiable op states its
// vector-Jacobian product next to its definition (the op family's .cpp) by listing
// `DeclareOpInterfaceMethods<Colossal_VJPOpInterface>` among its traits.
def Colossal_VJPOpInterface : OpInterface<"VJPOpInterface"> {
  let cppNamespace = "::colossal";
  let description = [{
    The vector-Jacobian product of an op: given the cotangents of its results (∂L/∂result), build
    the cotangents of its operands (∂L/∂operand) as colossal ops at the builder's insertion point.
  }];
  let methods = [
    InterfaceMethod<[{
      Builds ∂L/∂operand for every operand `i` with `needed[i]` set.

      - `resultGrads[j]` is ∂L/∂result_j with result_j's type, or a null Value when result j does
        not reach the loss (its cotangent is zero). At least one is non-null.
      - `operandGrads` arrives sized to the number of operands, all null. Set entry `i` to a value
        of operand i's exact type (reduce broadcast dims back with `reduceToShape`), or leave it
        null when operand i gets no gradient (integer operands, indices, masks, shapes).
      - Operands not `needed` may be left null (the driver never reads them).
      - Return failure() with a diagnostic on the op (emitOpError) for a configuration the VJP
        does not cover; the autodiff pass then fails naming the op and its ONNX node.
    }],
    "::mlir::LogicalResult", "buildVJP",
    (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads,
         "::llvm::ArrayRef<bool>":$needed,
         "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

// Tensor parallelism (passes/Parallel, docs/parallelism.md "Sharding rules"). An op that can run
// on split operands states its rule next to its definition: `Sharded` among its traits and
// `let extraClassDefinition = ShardingRuleIs<"...">.body;` (ColossalOps.td). The partitioner
// applies the rule; an op without one is an error when a split operand reaches it.
def Colossal_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::colossal";
  let description = [{
    How the op's operand and result shardings relate (dialects/Colossal/ShardingRule.h).
  }];
  let methods = [
    InterfaceMethod<[{
      The op's sharding rule, or nullopt when its attributes leave it without one (a pad that
      pads the batch dim): a split operand is then an error naming the op.
    }],
    "std::optional<::colossal::ShardingRule>", "getShardingRule", (ins)>,
  ];
}

#endif

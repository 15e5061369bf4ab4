#ifndef COLOSSAL_DIALECT_TD
#define COLOSSAL_DIALECT_TD

include "mlir/IR/OpBase.td"

def Colossal_Dialect : Dialect {
  let name = "colossal";
  let cppNamespace = "::colossal";
  let summary = "Value-semantic tensor ops named after ONNX / PyTorch terms";
  let description = [{
    The `colossal` dialect holds a model as value-semantic ops on builtin ranked tensors with
    static shapes. Ops are named after the ONNX operator or PyTorch function they implement
    (`matmul`, `layer_norm`, `attention`, ...), carry their inherent attributes as properties,
    infer their result types, and fold when their operands are constants (all shape arithmetic of
    an imported model folds away). Model parameters are `func.func` arguments marked
    `colossal.param`; inputs and outputs are marked `colossal.input` / `colossal.output`.
  }];
  let hasConstantMaterializer = 1;
  let useDefaultAttributePrinterParser = 1;
  // `colossal.sharding` (and the program roles) on function arguments, results and ops are
  // checked against the module's mesh and the value's type (ColossalDialect.cpp).
  let hasRegionArgAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Registers ColossalAttrs.td's attributes (ColossalAttrs.cpp, where their storage is).
    void registerAttributes();
  }];
}

#endif // COLOSSAL_DIALECT_TD

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
}

#endif // COLOSSAL_DIALECT_TD

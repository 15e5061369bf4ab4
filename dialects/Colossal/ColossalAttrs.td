//===- ColossalAttrs.td - attributes of the colossal dialect (shardings) ---===//
//
// `#colossal.sharding` is the one form of a sharding: every pass of passes/Parallel reads and
// writes it, the IR prints it, and the plan emitter turns it into plan.proto's Sharding. Shardy's
// `#sdy.sharding` (per dim, the mesh axes it is split over) is the model; Colossal adds block
// counts (a fused QKV projection's columns, split block by block) and GSPMD's partial sums.
// The C++ (parser, printer, verifier) lives in ColossalAttrs.cpp.
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_ATTRS_TD
#define COLOSSAL_ATTRS_TD

include "dialects/Colossal/ColossalDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def Colossal_DimShardingAttr : AttrDef<Colossal_Dialect, "DimSharding"> {
  let mnemonic = "dim_sharding";
  let summary = "One dim of a sharding: the mesh axes it is split over, in how many blocks";
  let description = [{
    `{"tp"}`, `{"dp", "tp"}` (major to minor), `{}` (whole), `{"tp"}/3` (3 equal blocks, each
    split separately). Written bare inside `#colossal.sharding`;
    `#colossal.dim_sharding<{"tp"}/3>` alone.
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$axes,
                        DefaultValuedParameter<"int64_t", "1">:$blocks);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// `{"tp"}/3` (ShardingAttr prints its dims this way).
    void printBare(::mlir::AsmPrinter &printer) const;
    /// Parses `{"tp"}/3`.
    static ::mlir::Attribute parseBare(::mlir::AsmParser &parser);
  }];
}

def Colossal_ShardingAttr : AttrDef<Colossal_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "How a tensor of global shape G is split over the module's mesh";
  let description = [{
    `#colossal.sharding<@mesh, [{"tp"}, {} ], partial = {"tp"}>` (a space before `]` only here, in
    TableGen; the printer writes none):

    - `@mesh`: the `colossal.mesh` whose axes it names.
    - one `{...}` per dim of G, major to minor: the mesh axes that dim is split over (group rank
      row-major over them; `{}` = whole). `{"tp"}/3`: the dim is 3 equal blocks, each split
      separately (a fused QKV projection's columns).
    - `partial = {...}`: the axes over which the local value is a sum still to be reduced (GSPMD's
      "partial", Xu et al. 2021 §3.2; Megatron's row-parallel output before its all_reduce).

    An axis appears at most once. The verifier checks what the attribute alone can; the dialect's
    argument verifier checks that the mesh exists, has the axes, and that the sharding fits the
    argument (ColossalDialect.cpp).
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$mesh,
                        ArrayRefParameter<"::colossal::DimShardingAttr">:$dims,
                        ArrayRefParameter<"::mlir::StringAttr">:$partial);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether some dim is split.
    bool isSplit() const;
    /// Whether no dim is split and nothing is partial.
    bool isReplicated() const { return !isSplit() && getPartial().empty(); }
  }];
}

#endif // COLOSSAL_ATTRS_TD

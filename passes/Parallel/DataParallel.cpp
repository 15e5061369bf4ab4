//===- DataParallel.cpp - the mesh, the gradient all-reduce and its buckets ---===//
//
// Passes.td "DefineMesh", "DataParallel", "BucketGradients"; docs/parallelism.md "Data
// parallelism" and "Gradient buckets". Data parallelism is three rewrites of the IR, so that
// `--emit=mlir` shows every collective the plan runs: colossal-split-batch makes each rank's
// program one row block of the batch, colossal-data-parallel sums the gradients over the data
// axes before the optimizer reads them, and colossal-bucket-gradients fuses those sums into
// buckets (one collective per bucket).
//===----------------------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "dialects/Colossal/Programs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace colossal {
#define GEN_PASS_DEF_DEFINEMESH
#define GEN_PASS_DEF_DATAPARALLEL
#define GEN_PASS_DEF_BUCKETGRADIENTS
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;

namespace {

//===----------------------------------------------------------------------===//
// colossal-define-mesh
//===----------------------------------------------------------------------===//

struct DefineMeshPass : colossal::impl::DefineMeshBase<DefineMeshPass> {
  using DefineMeshBase::DefineMeshBase;

  /// "dp=2 data, tp=2 tensor", for messages.
  static std::string describe(MeshOp mesh) {
    std::string s;
    for (auto [axis, size, role] : llvm::zip(mesh.getAxes(), mesh.getShape(), mesh.getRoles()))
      s += (s.empty() ? "" : ", ") + cast<StringAttr>(axis).str() + "=" + std::to_string(size) +
           " " + cast<StringAttr>(role).str();
    return s;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    SmallVector<Attribute> names, roles;
    SmallVector<int64_t> sizes;
    for (const std::string &entry : axes) {
      auto [name, rest] = StringRef(entry).split('=');
      auto [sizeText, role] = rest.split(':');
      int64_t size;
      if (name.empty() || sizeText.getAsInteger(10, size) || role.empty()) {
        module.emitError("colossal-define-mesh: axis '") << entry << "' is not NAME=SIZE:ROLE";
        return signalPassFailure();
      }
      names.push_back(StringAttr::get(ctx, name));
      sizes.push_back(size);
      roles.push_back(StringAttr::get(ctx, role));
    }
    // The wanted mesh, verified on its own (in a scratch module), then compared with an existing
    // one: a module has one mesh.
    OwningOpRef<ModuleOp> scratch = ModuleOp::create(module.getLoc());
    OpBuilder b = OpBuilder::atBlockBegin(scratch->getBody());
    auto wanted = MeshOp::create(b, module.getLoc(), "mesh", ArrayAttr::get(ctx, names),
                                 DenseI64ArrayAttr::get(ctx, sizes), ArrayAttr::get(ctx, roles));
    if (failed(mlir::verify(wanted)))
      return signalPassFailure();
    if (MeshOp existing = lookupMesh(module)) {
      if (existing.getAxes() != wanted.getAxes() || existing.getShape() != wanted.getShape() ||
          existing.getRoles() != wanted.getRoles()) {
        existing.emitError("colossal-define-mesh: the module already has a different mesh (")
            << describe(existing) << "); wanted " << describe(wanted);
        return signalPassFailure();
      }
      return;
    }
    wanted->moveBefore(module.getBody(), module.getBody()->begin());
  }
};

//===----------------------------------------------------------------------===//
// colossal-data-parallel
//===----------------------------------------------------------------------===//

/// The gradients @optimizer_step reads (the global norm's and the update ops' `g` operands), in
/// argument order (the plan's states order), arguments before anything else.
SmallVector<Value> optimizerGradients(func::FuncOp step) {
  SmallVector<Value> grads;
  llvm::SmallPtrSet<Value, 16> seen;
  auto add = [&](Value g) {
    if (seen.insert(g).second)
      grads.push_back(g);
  };
  step.walk([&](GlobalNormOp norm) {
    for (Value g : norm.getGrads())
      add(g);
  });
  step.walk([&](Operation *op) {
    if (auto u = dyn_cast<AdamWUpdateOp>(op))
      add(u.getG());
    else if (auto u = dyn_cast<AdamUpdateOp>(op))
      add(u.getG());
    else if (auto u = dyn_cast<SgdUpdateOp>(op))
      add(u.getG());
  });
  auto position = [](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg ? arg.getArgNumber() : ~0u;
  };
  llvm::stable_sort(grads, [&](Value a, Value b) { return position(a) < position(b); });
  return grads;
}

struct DataParallelPass : colossal::impl::DataParallelBase<DataParallelPass> {
  using DataParallelBase::DataParallelBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = lookupMesh(module);
    if (!mesh)
      return;
    SmallVector<Attribute> dataAxes;
    int64_t dp = 1;
    for (int i : mesh.axesWithRole(AxisRole::Data)) {
      dataAxes.push_back(mesh.getAxes()[i]);
      dp *= mesh.getShape()[i];
    }
    auto step = lookupProgram(module, ProgramRole::OptimizerStep);
    if (dp == 1 || !step)
      return;
    OpBuilder b = OpBuilder::atBlockBegin(&step.getBody().front());
    ArrayAttr axes = b.getArrayAttr(dataAxes);
    for (Value g : optimizerGradients(step)) {
      // The location names the gradient, as the plan's instruction does.
      auto arg = dyn_cast<BlockArgument>(g);
      auto name = arg && arg.getOwner() == &step.getBody().front()
                      ? step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kStateAttr)
                      : StringAttr();
      if (!name) {
        Operation *reader = *g.user_begin();
        reader->emitError("colossal-data-parallel: this op reads a gradient that is not a ")
            << kStateAttr << " argument of @" << step.getSymName()
            << ", so it cannot be summed over the data axes in place";
        return signalPassFailure();
      }
      AllReduceInPlaceOp::create(b, NameLoc::get(name, step.getLoc()), ValueRange{g}, axes,
                                 b.getStringAttr("sum"));
    }
  }
};

//===----------------------------------------------------------------------===//
// colossal-bucket-gradients
//===----------------------------------------------------------------------===//

uint64_t bytesOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return static_cast<uint64_t>(type.getNumElements()) *
         ((type.getElementTypeBitWidth() + 7) / 8);
}

struct BucketGradientsPass : colossal::impl::BucketGradientsBase<BucketGradientsPass> {
  using BucketGradientsBase::BucketGradientsBase;

  void runOnOperation() override {
    if (!(bucketCapMb >= 0)) {
      getOperation().emitError("colossal-bucket-gradients: bucket-cap-mb must be >= 0, got ")
          << bucketCapMb;
      return signalPassFailure();
    }
    const uint64_t cap = static_cast<uint64_t>(bucketCapMb * double(1 << 20));
    if (cap == 0)
      return;
    for (Block &block : getOperation().getBody())
      bucketBlock(block, cap);
  }

  /// The in-place collectives a bucket fuses: data parallelism's all_reduce and ZeRO's
  /// reduce-scatter and all-gather of dim-0 chunks.
  static bool bucketable(Operation *op) {
    return isa<AllReduceInPlaceOp, ReduceScatterInPlaceOp, AllGatherInPlaceOp>(op);
  }

  static bool joins(Operation *first, Operation *next) {
    auto elementType = [](Operation *op) {
      return cast<RankedTensorType>(op->getOperand(0).getType()).getElementType();
    };
    return next->getName() == first->getName() &&
           next->getAttr("axes") == first->getAttr("axes") &&
           next->getAttr("reduction") == first->getAttr("reduction") &&
           elementType(next) == elementType(first);
  }

  void bucketBlock(Block &block, uint64_t cap) {
    SmallVector<SmallVector<Operation *>> buckets;
    uint64_t bytes = 0;
    llvm::SmallPtrSet<Value, 16> members;
    bool open = false; // the last op was a collective of the current bucket
    for (Operation &op : block) {
      if (!bucketable(&op)) {
        open = false;
        continue;
      }
      uint64_t size = 0;
      for (Value x : op.getOperands())
        size += bytesOf(x);
      bool fits = open && joins(buckets.back().front(), &op) && bytes + size <= cap &&
                  llvm::none_of(op.getOperands(), [&](Value x) { return members.contains(x); });
      if (!fits) {
        buckets.emplace_back();
        members.clear();
        bytes = 0;
      }
      buckets.back().push_back(&op);
      for (Value x : op.getOperands())
        members.insert(x);
      bytes += size;
      open = true;
    }
    for (auto &bucket : buckets) {
      if (bucket.size() < 2)
        continue;
      SmallVector<Value> xs;
      SmallVector<Location> locs;
      for (Operation *op : bucket) {
        xs.append(op->getOperands().begin(), op->getOperands().end());
        locs.push_back(op->getLoc());
      }
      Operation *first = bucket.front();
      OpBuilder b(first);
      OperationState state(b.getFusedLoc(locs), first->getName());
      state.addOperands(xs);
      state.addAttributes(first->getAttrs());
      b.create(state);
      for (Operation *op : bucket)
        op->erase();
    }
  }
};

} // namespace

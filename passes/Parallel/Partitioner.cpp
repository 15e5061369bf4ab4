//===- Partitioner.cpp - the walk over one function ---===//
//
// Partitioner.h: arguments, then op by op: decide undecided parameters, apply the op's rule,
// reshard operands, set local types; results made whole.
//===----------------------------------------------------------------------------------===//
#include "passes/Parallel/Partitioner.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"
#include "dialects/Colossal/Programs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"

#include <cstring>

using namespace mlir;
using namespace colossal;
using namespace colossal::spmd;

//===----------------------------------------------------------------------===//
// The walk
//===----------------------------------------------------------------------===//

/// The parameter a state argument belongs to: the longest parameter name p with state = p + ".x".
static std::string paramOf(StringRef state, ArrayRef<std::string> params) {
  std::string best;
  for (const std::string &p : params)
    if (state.size() > p.size() + 1 && state.starts_with(p) && state[p.size()] == '.' &&
        p.size() > best.size())
      best = p;
  return best;
}

bool colossal::spmd::isCollectiveOver(Operation *op, llvm::StringRef axis) {
  auto axes = op->getAttrOfType<ArrayAttr>("axes");
  return axes &&
         isa<colossal::AllReduceOp, colossal::AllGatherOp, colossal::ReduceScatterOp, colossal::BroadcastOp,
             colossal::ShardSliceOp, colossal::AxisIndexOp>(op) &&
         llvm::any_of(axes, [&](Attribute a) { return cast<StringAttr>(a).getValue() == axis; });
}

bool colossal::spmd::shrinkBroadcastCut(colossal::ShardSliceOp slice) {
  auto expand = slice.getX().getDefiningOp<colossal::ExpandOp>();
  if (!expand)
    return false;
  auto in = tensorType(expand.getX());
  int64_t d = slice.getDim() - (tensorType(expand).getRank() - in.getRank());
  if (d >= 0 && in.getDimSize(d) != 1)
    return false;
  OpBuilder b(slice);
  Operation *smaller = b.clone(*expand);
  smaller->getResult(0).setType(slice.getType());
  slice.replaceAllUsesWith(smaller->getResult(0));
  slice.erase();
  return true;
}

Operation *colossal::spmd::collectiveBlame(Operation *op) {
  if (isa<colossal::AllReduceOp, colossal::ReduceScatterOp>(op)) {
    if (Operation *producer = op->getOperand(0).getDefiningOp())
      return producer;
  } else if (op->getNumResults() == 1 && !op->getResult(0).use_empty()) {
    Operation *user = *op->getResult(0).user_begin();
    if (!isa<func::ReturnOp>(user))
      return user;
  }
  return op;
}

void colossal::spmd::eraseDeadOps(func::FuncOp f) {
  SmallVector<Operation *> ops;
  f.walk([&](Operation *op) { ops.push_back(op); });
  for (Operation *op : llvm::reverse(ops))
    if (isOpTriviallyDead(op))
      op->erase();
}

std::optional<DenseElementsAttr> colossal::spmd::equalRowBlock(ElementsAttr attr, int64_t dim,
                                                               int64_t ways,
                                                               RankedTensorType local) {
  auto value = dyn_cast<DenseElementsAttr>(attr);
  if (value && value.isSplat())
    return DenseElementsAttr::get(local, value.getSplatValue<Attribute>());
  auto type = cast<ShapedType>(attr.getType());
  ArrayRef<int64_t> shape = type.getShape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d)
    inner *= shape[d];
  const int64_t rows = shape[dim] / ways;
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  ArrayRef<char> raw;
  if (value) {
    raw = value.getRawData();
  } else if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    if (AsmResourceBlob *blob = resource.getRawHandle().getBlob())
      raw = blob->getData();
  }
  const size_t esize = bits / 8;
  if (bits % 8 == 0 && raw.size() == static_cast<size_t>(type.getNumElements()) * esize) {
    // Whole bytes: compare and cut the raw data.
    const size_t run = static_cast<size_t>(rows * inner) * esize;
    std::vector<char> block;
    block.reserve(static_cast<size_t>(outer) * run);
    for (int64_t o = 0; o < outer; ++o) {
      const char *first = raw.data() + static_cast<size_t>(o * shape[dim] * inner) * esize;
      for (int64_t w = 1; w < ways; ++w)
        if (std::memcmp(first, first + w * run, run) != 0)
          return std::nullopt;
      block.insert(block.end(), first, first + run);
    }
    return DenseElementsAttr::getFromRawBuffer(local, block);
  }
  if (!value)
    return std::nullopt;
  SmallVector<Attribute> all(value.getValues<Attribute>());
  SmallVector<Attribute> block;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < inner; ++i) {
        Attribute first = all[(o * shape[dim] + r) * inner + i];
        for (int64_t w = 1; w < ways; ++w)
          if (all[(o * shape[dim] + w * rows + r) * inner + i] != first)
            return std::nullopt;
        block.push_back(first);
      }
  return DenseElementsAttr::get(local, block);
}

void Partitioner::decideFree(Value v, const Sharding &s) {
  decided[freeParams.lookup(v)] = s;
  shardings[v] = s;
  freeParams.erase(v);
  // A cast copy decides the parameter it copies.
  if (auto src = castSources.find(v); src != castSources.end()) {
    shardings[src->second] = s;
    freeParams.erase(src->second);
  }
}

LogicalResult Partitioner::run(func::FuncOp f) {
  Block &body = f.getBody().front();
  MLIRContext *ctx = f.getContext();
  SmallVector<std::string> params;
  for (BlockArgument arg : body.getArguments())
    if (auto p = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kParamAttr))
      params.push_back(p.str());
  for (BlockArgument arg : body.getArguments()) {
    auto type = tensorType(arg);
    globalTypes[arg] = type;
    Sharding s = Sharding::replicated(type.getRank());
    std::string name;
    unsigned i = arg.getArgNumber();
    if (auto p = f.getArgAttrOfType<StringAttr>(i, kParamAttr))
      name = p.str();
    // A KV cache (mode generate) belongs to no parameter: its layer's kv_append decides it,
    // from the split of the keys it writes.
    bool kvCache = false;
    if (auto st = f.getArgAttrOfType<StringAttr>(i, kStateAttr); st && !f.getArgAttr(i, kParamAttr)) {
      name = paramOf(st.getValue(), params);
      if (name.empty() && llvm::any_of(arg.getUsers(), [](Operation *u) { return isa<colossal::KvAppendOp>(u); })) {
        name = st.str();
        kvCache = true;
      }
    }
    if (!name.empty() && f.getArgAttr(i, kParamAttr))
      weights.insert(arg);
    // Integer inputs are token ids (a table they read is vocab-parallel), except a step
    // program's positions and cache indices: a RoPE table gathered at `positions` stays whole.
    if (auto input = f.getArgAttrOfType<StringAttr>(i, kInputAttr);
        input && isa<IntegerType>(type.getElementType()) &&
        (programRole(f) != ProgramRole::Generate || input.getValue() == "tokens"))
      tokenDerived.insert(arg);
    if (!strategy.localBatch.empty() && f.getArgAttr(i, kInputAttr) && type.getRank() >= 1 &&
        (strategy.localBatchArgs.empty() || llvm::is_contained(strategy.localBatchArgs, i)))
      s.dims[0] = strategy.localBatch;
    if (!name.empty()) {
      bool isParam = f.getArgAttr(i, kParamAttr) != nullptr;
      auto it = decided.find(name);
      if (it != decided.end())
        s = it->second;
      else if (deciding && (isParam || kvCache)) // states follow their parameter once it is decided
        freeParams[arg] = name;
      else if (!deciding)
        decided[name] = s;
    }
    shardings[arg] = s;
    if (!deciding)
      arg.setType(localType(type, s));
  }

  // Grid styles split the batch of integer inputs (token ids, labels) over the batch axes; the
  // activations follow from there.
  if (!strategy.batch.empty()) {
    OpBuilder b = OpBuilder::atBlockBegin(&body);
    int64_t p = mesh.groupSize(strategy.batch);
    for (BlockArgument arg : body.getArguments()) {
      auto type = tensorType(arg);
      if (!f.getArgAttr(arg.getArgNumber(), kInputAttr) ||
          !isa<IntegerType>(type.getElementType()) || type.getRank() < 1 ||
          type.getDimSize(0) % p != 0 || arg.use_empty())
        continue;
      Sharding sl = shardings.lookup(arg);
      Value v = sliceDim(b, f.getLoc(), arg, sl, 0, strategy.batch, 1);
      arg.replaceAllUsesExcept(v, v.getDefiningOp());
      tokenDerived.insert(v);
    }
  }

  // Split-batch: constants of the batch's rows with equal row blocks are split like the inputs.
  llvm::DenseSet<Operation *> presplit;
  if (!strategy.localBatch.empty() && strategy.localBatchRows > 0 && !deciding) {
    const int64_t ways = mesh.groupSize(strategy.localBatch);
    for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
      auto cst = dyn_cast<colossal::ConstantOp>(op);
      if (!cst)
        continue;
      ElementsAttr dense = cst.getValue();
      RankedTensorType type = tensorType(cst);
      if (type.getRank() < 1 || type.getDimSize(0) != strategy.localBatchRows)
        continue;
      Sharding s = Sharding::replicated(type.getRank());
      s.dims[0] = strategy.localBatch;
      std::optional<DenseElementsAttr> block = equalRowBlock(dense, 0, ways, localType(type, s));
      if (!block)
        continue;
      OpBuilder b(cst);
      auto local = colossal::ConstantOp::create(b, cst.getLoc(), cast<ElementsAttr>(*block));
      record(local, type, s);
      cst.replaceAllUsesWith(local.getResult());
      cst.erase();
      presplit.insert(local);
    }
  }

  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    if (!isa<colossal::ShardSliceOp>(op) && !presplit.contains(&op))
      ops.push_back(&op);
  for (Operation *op : ops) {
    for (Value r : op->getResults())
      globalTypes[r] = tensorType(r);
    // Views of weights are weights; views of token ids are token ids.
    if (isa<colossal::ReshapeOp, colossal::TransposeOp, colossal::CastOp>(op)) {
      if (weights.count(op->getOperand(0)))
        weights.insert(op->getResult(0));
      if (tokenDerived.count(op->getOperand(0)))
        tokenDerived.insert(op->getResult(0));
    }
    if (auto g = dyn_cast<colossal::GlobalNormOp>(op)) {
      if (trace)
        trace->push_back(Sharding::replicated(0).toAttr(mesh));
      if (failed(emitGlobalNorm(g)))
        return failure();
      continue;
    }
    SmallVector<Sharding> in;
    for (Value v : op->getOperands())
      in.push_back(shardings.lookup(v));
    // A cast of an undecided parameter (mixed precision's bf16/fp16 copy at each use) decides
    // nothing: the parameter is decided where its copy is read, as if read directly.
    if (auto castOp = dyn_cast<colossal::CastOp>(op); castOp && deciding) {
      auto it = freeParams.find(castOp.getOperand());
      if (it != freeParams.end()) {
        castSources[castOp.getResult()] = castOp.getOperand();
        freeParams[castOp.getResult()] = it->second;
        in[0] = Sharding::replicated(in[0].rank()); // decided later; the clone is discarded
      }
    }
    const bool deferredCast = isa<colossal::CastOp>(op) && castSources.count(op->getResult(0));
    // Strategy: decide undecided parameters at their first use.
    for (unsigned i = 0; i < op->getNumOperands() && !deferredCast; ++i) {
      auto it = freeParams.find(op->getOperand(i));
      if (it == freeParams.end())
        continue;
      std::optional<Sharding> s;
      if (auto done = decided.find(it->second); done != decided.end())
        s = done->second; // another copy of this parameter decided it already
      else if (isa<colossal::KvAppendOp>(op))
        continue; // a KV cache: the rule below decides it
      else
        s = decideWeight(op, i, in);
      if (errorOp)
        return errorOp->emitError(errorMessage);
      if (!s) { // elementwise ops decide biases below from the other operands
        if (isa<colossal::AddOp>(op))
          continue;
        s = Sharding::replicated(in[i].rank());
      }
      decideFree(op->getOperand(i), *s);
      in[i] = *s;
    }
    Decision d = rule(op, in);
    if (errorOp)
      return errorOp->emitError(errorMessage);
    if (trace) {
      // One result: its sharding; several: one per result; none: an empty list.
      SmallVector<Attribute> results;
      for (const Sharding &r : d.results)
        results.push_back(r.toAttr(mesh));
      trace->push_back(results.size() == 1 ? results[0]
                                           : Attribute(ArrayAttr::get(mesh.context, results)));
    }
    for (unsigned i = 0; i < op->getNumOperands() && !deferredCast; ++i) {
      if (!freeParams.count(op->getOperand(i)))
        continue;
      Sharding s = d.operands[i];
      s.partial.clear();
      decideFree(op->getOperand(i), s);
    }
    OpBuilder b(op);
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      Value v = op->getOperand(i);
      Value w = reshard(b, op->getLoc(), v, d.operands[i]);
      if (w != v)
        op->setOperand(i, w);
    }
    if (isa<colossal::CrossEntropyOp, colossal::CrossEntropyGradOp>(op) &&
        d.operands[0].isSplit()) {
      if (failed(emitVocabParallelCrossEntropy(op, d)))
        return failure();
      continue;
    }
    if (d.summa) {
      for (auto [r, sh] : llvm::zip(op->getResults(), d.results))
        r.setType(localType(globalTypes.lookup(r), sh));
      emitSumma(cast<colossal::MatMulOp>(op), d);
      continue;
    }
    if (auto g = dyn_cast<colossal::GatherOp>(op);
        g && g.getAxis() == 0 && !d.operands[0].dims[0].empty()) {
      for (auto [r, s] : llvm::zip(op->getResults(), d.results))
        r.setType(localType(globalTypes.lookup(r), s));
      if (failed(emitVocabParallelGather(g, d)))
        return failure();
      continue;
    }
    for (auto [r, s] : llvm::zip(op->getResults(), d.results)) {
      r.setType(localType(globalTypes.lookup(r), s));
      shardings[r] = s;
    }
    // Slice limits of split dims are the local sizes.
    if (auto s = dyn_cast<colossal::SliceOp>(op)) {
      SmallVector<int64_t> limits(s.getLimits());
      auto local = tensorType(s.getX()).getShape();
      for (size_t dd = 0; dd < limits.size(); ++dd)
        if (!d.operands[0].dims[dd].empty())
          limits[dd] = local[dd];
      s.setLimits(limits);
    }
  }
  // Results whole (split-batch: a result split along dim 0 over the local batch axes only stays
  // split; that is the row block's result).
  Operation *ret = body.getTerminator();
  OpBuilder b(ret);
  for (unsigned i = 0; i < ret->getNumOperands(); ++i) {
    Value v = ret->getOperand(i);
    Sharding want = Sharding::replicated(tensorType(v).getRank());
    if (!strategy.localBatch.empty()) {
      const Sharding &have = shardings.lookup(v);
      if (want.rank() >= 1 && have.dims[0] == strategy.localBatch)
        want.dims[0] = strategy.localBatch;
      if (strategy.localPartialResults && have.partial == strategy.localBatch)
        want.partial = have.partial;
    }
    Value w = reshard(b, ret->getLoc(), v, want);
    if (w != v)
      ret->setOperand(i, w);
  }
  if (deciding)
    return success();
  // Arguments: local types and their shardings.
  for (BlockArgument arg : body.getArguments()) {
    const Sharding &s = shardings.lookup(arg);
    if (!s.isSplit() || !strategy.localBatch.empty())
      continue;
    f.setArgAttr(arg.getArgNumber(), kShardingAttr, s.toAttr(mesh));
  }
  f.setFunctionType(FunctionType::get(ctx, body.getArgumentTypes(), ret->getOperandTypes()));
  return success();
}

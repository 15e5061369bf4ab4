//===- Emit.cpp - ops the partitioner rewrites into several ---===//
//
// Partitioner.h: SUMMA, the vocab-parallel gather and cross-entropy, the sharded global norm.
//===----------------------------------------------------------------------------------===//
#include "passes/Parallel/Partitioner.h"

#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Builders.h"

#include <map>

using namespace mlir;
using namespace colossal;
using namespace colossal::spmd;

/// SUMMA's q steps (Rules.cpp `summa`): C_ij = Σ_k broadcast(A_ik over col, root k) ·
/// broadcast(B_kj over row, root k).
void Partitioner::emitSumma(colossal::MatMulOp op, const Decision &d) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  MLIRContext *ctx = b.getContext();
  int64_t q = mesh.groupSize(strategy.col);
  Value acc;
  for (int64_t k = 0; k < q; ++k) {
    Value a =
        colossal::BroadcastOp::create(b, loc, op.getLhs().getType(), op.getLhs(),
                                      mesh.axesAttr(ctx, strategy.col), b.getI64IntegerAttr(k));
    Value w =
        colossal::BroadcastOp::create(b, loc, op.getRhs().getType(), op.getRhs(),
                                      mesh.axesAttr(ctx, strategy.row), b.getI64IntegerAttr(k));
    Value p = colossal::MatMulOp::create(b, loc, op.getResult().getType(), a, w);
    acc = acc ? colossal::AddOp::create(b, loc, acc, p).getResult() : p;
  }
  op.getResult().replaceAllUsesWith(acc);
  record(acc, globalTypes.lookup(op.getResult()), d.results[0]);
  op.erase();
}

//===----------------------------------------------------------------------===//
// Custom emission
//===----------------------------------------------------------------------===//

/// Index `ids` (integer, any shape) into this rank's shard of `rows` rows of a dim split over
/// `axes`: local = ids − r·rows; `inLow`/`inHigh` say 0 ≤ local and local < rows; `safe` is
/// local where both hold, else 0 (a valid row to read and then mask).
Partitioner::LocalIndex Partitioner::localIndex(OpBuilder &b, Location loc, Value ids,
                                                ArrayAttr axes, int64_t rows) {
  auto idsType = tensorType(ids);
  Type elem = idsType.getElementType();
  auto scalar = [&](int64_t v) -> Value {
    auto t = RankedTensorType::get({}, elem);
    return colossal::ConstantOp::create(b, loc,
                                        DenseElementsAttr::get(t, b.getIntegerAttr(elem, v)));
  };
  Value r = colossal::AxisIndexOp::create(b, loc, RankedTensorType::get({}, b.getI64Type()), axes);
  if (!elem.isInteger(64))
    r = colossal::CastOp::create(b, loc, RankedTensorType::get({}, elem), r);
  Value local =
      colossal::SubOp::create(b, loc, ids, colossal::MulOp::create(b, loc, r, scalar(rows)));
  auto boolType = RankedTensorType::get(idsType.getShape(), b.getI1Type());
  LocalIndex li;
  li.inLow = colossal::GreaterOp::create(b, loc, boolType, local, scalar(-1));
  li.inHigh = colossal::LessOp::create(b, loc, boolType, local, scalar(rows));
  Value zero = scalar(0);
  li.safe = colossal::WhereOp::create(b, loc, li.inLow, local, zero);
  li.safe = colossal::WhereOp::create(b, loc, li.inHigh, li.safe, zero);
  return li;
}

/// Vocab-parallel gather: local ids = ids − r·(V/P); out-of-range ids read row 0 and are zeroed.
LogicalResult Partitioner::emitVocabParallelGather(colossal::GatherOp op, const Decision &d) {
  const Sharding &data = d.operands[0];
  OpBuilder b(op);
  Location loc = op.getLoc();
  MLIRContext *ctx = b.getContext();
  Value ids = op.getIndices();
  auto idsType = tensorType(ids);
  Type idElem = idsType.getElementType();
  int64_t rows = tensorType(op.getData()).getDimSize(0); // local V/P
  // The ids as one rank's gather reads them: negative ids count from the end (ONNX Gather), and an
  // id outside [-V, V) is the same run-time error. A gather of the iota table [0, V) gives both,
  // before the masking below would turn a bad id into a row of zeros.
  int64_t vocab = globalTypes.lookup(op.getData()).getDimSize(0);
  {
    SmallVector<int64_t> iota(vocab);
    for (int64_t i = 0; i < vocab; ++i)
      iota[i] = i;
    auto tableType = RankedTensorType::get({vocab}, b.getI64Type());
    Value table = colossal::ConstantOp::create(
        b, loc, DenseElementsAttr::get(tableType, ArrayRef<int64_t>(iota)));
    if (!idElem.isInteger(64))
      table = colossal::CastOp::create(b, loc, RankedTensorType::get({vocab}, idElem), table);
    ids = colossal::GatherOp::create(b, loc, idsType, table, ids, b.getI64IntegerAttr(0));
  }
  auto [safe, low, high] = localIndex(b, loc, ids, mesh.axesAttr(ctx, data.dims[0]), rows);
  auto outType = tensorType(op.getResult());
  Value g = colossal::GatherOp::create(b, loc, outType, op.getData(), safe, op.getAxisAttr());
  // Masks broadcast over the gathered row: [I...] -> [I..., 1...].
  SmallVector<int64_t> maskShape(idsType.getShape());
  maskShape.append(outType.getRank() - idsType.getRank(), 1);
  auto maskType = RankedTensorType::get(maskShape, b.getI1Type());
  Value lowB = colossal::ReshapeOp::create(b, loc, maskType, low);
  Value highB = colossal::ReshapeOp::create(b, loc, maskType, high);
  auto zeroT = RankedTensorType::get({}, outType.getElementType());
  Value zero = colossal::ConstantOp::create(
      b, loc, DenseElementsAttr::get(zeroT, b.getZeroAttr(outType.getElementType())));
  g = colossal::WhereOp::create(b, loc, lowB, g, zero);
  g = colossal::WhereOp::create(b, loc, highB, g, zero);
  op.getResult().replaceAllUsesWith(g);
  record(g, globalTypes.lookup(op.getResult()), d.results[0]);
  op.erase();
  return success();
}

/// Vocab-parallel cross_entropy / cross_entropy_grad (Shoeybi et al. 2019 §3; Megatron's
/// vocab_parallel_cross_entropy): logits [N, V/P] per rank. The row max is all-reduced (max), the
/// sum of exponentials and the target logit (zero on ranks not holding the label) all-reduced
/// (sum), so each rank has logsumexp and the target exactly; loss = mean over rows whose label is
/// not ignore_index of logsumexp − target; ∂loss/∂logits = (softmax − onehot)·dloss/count on the
/// local columns.
LogicalResult Partitioner::emitVocabParallelCrossEntropy(Operation *op, const Decision &d) {
  OpBuilder b(op);
  Location loc = op->getLoc();
  MLIRContext *ctx = b.getContext();
  Value logits = op->getOperand(0), labels = op->getOperand(1);
  auto lt = tensorType(logits);
  int64_t n = lt.getDimSize(0), vl = lt.getDimSize(1);
  Type f32 = lt.getElementType(), i64 = b.getI64Type();
  ArrayAttr axes = mesh.axesAttr(ctx, d.operands[0].dims[1]);
  int64_t ignore = op->getAttrOfType<IntegerAttr>("ignore_index").getInt();
  auto cst = [&](Type t, ArrayRef<int64_t> shape, Attribute v) -> Value {
    return colossal::ConstantOp::create(b, loc,
                                        DenseElementsAttr::get(RankedTensorType::get(shape, t), v));
  };
  auto col = [&](Type t) { return RankedTensorType::get({n, 1}, t); };
  auto reduce = [&](bool max, Value x, ArrayRef<int64_t> axesR, bool keep) -> Value {
    auto xt = tensorType(x);
    SmallVector<int64_t> shape;
    for (int64_t i = 0; i < xt.getRank(); ++i)
      if (!llvm::is_contained(axesR, i))
        shape.push_back(xt.getDimSize(i));
      else if (keep)
        shape.push_back(1);
    auto rt = RankedTensorType::get(shape, xt.getElementType());
    if (max)
      return colossal::ReduceMaxOp::create(b, loc, rt, x, b.getDenseI64ArrayAttr(axesR),
                                           b.getBoolAttr(keep));
    return colossal::ReduceSumOp::create(b, loc, rt, x, b.getDenseI64ArrayAttr(axesR),
                                         b.getBoolAttr(keep));
  };
  // Local label and whether this rank holds it.
  auto [safe, low, high] = localIndex(b, loc, labels, axes, vl);
  auto boolN = RankedTensorType::get({n}, b.getI1Type());
  Value safeCol = colossal::ReshapeOp::create(b, loc, col(i64), safe);
  Value lowCol = colossal::ReshapeOp::create(b, loc, col(b.getI1Type()), low);
  Value highCol = colossal::ReshapeOp::create(b, loc, col(b.getI1Type()), high);
  Value zeroF = cst(f32, {}, b.getFloatAttr(f32, 0.0));
  Value oneF = cst(f32, {}, b.getFloatAttr(f32, 1.0));
  // Global row max, shifted logits, global Σ exp.
  Value m = reduce(true, logits, {1}, true);
  m = colossal::AllReduceOp::create(b, loc, m.getType(), m, axes, b.getStringAttr("max"));
  Value z = colossal::SubOp::create(b, loc, logits, m);
  Value e = colossal::ExpOp::create(b, loc, z.getType(), z);
  Value sum = reduce(false, e, {1}, true);
  sum = colossal::AllReduceOp::create(b, loc, sum.getType(), sum, axes, b.getStringAttr("sum"));
  // Rows that count.
  Value ignored =
      colossal::EqualOp::create(b, loc, boolN, labels, cst(i64, {}, b.getI64IntegerAttr(ignore)));
  Value valid = colossal::WhereOp::create(b, loc, ignored, zeroF, oneF);
  Value validCol = colossal::ReshapeOp::create(b, loc, col(f32), valid);
  Value count = reduce(false, valid, {0}, false);
  Value result;
  if (isa<colossal::CrossEntropyOp>(op)) {
    Value t =
        colossal::GatherElementsOp::create(b, loc, col(f32), z, safeCol, b.getI64IntegerAttr(1));
    t = colossal::WhereOp::create(b, loc, lowCol, t, zeroF);
    t = colossal::WhereOp::create(b, loc, highCol, t, zeroF);
    t = colossal::AllReduceOp::create(b, loc, t.getType(), t, axes, b.getStringAttr("sum"));
    Value lse = colossal::LogOp::create(b, loc, sum.getType(), sum);
    Value row = colossal::SubOp::create(b, loc, lse, t);
    row = colossal::MulOp::create(b, loc, row, validCol);
    result = colossal::DivOp::create(b, loc, reduce(false, row, {0, 1}, false), count);
  } else {
    Value dloss = op->getOperand(2);
    Value p = colossal::DivOp::create(b, loc, e, sum);
    SmallVector<int64_t> iota(vl);
    for (int64_t i = 0; i < vl; ++i)
      iota[i] = i;
    Value classes = colossal::ConstantOp::create(
        b, loc,
        DenseElementsAttr::get(RankedTensorType::get({1, vl}, i64), ArrayRef<int64_t>(iota)));
    Value hit = colossal::EqualOp::create(b, loc, RankedTensorType::get({n, vl}, b.getI1Type()),
                                          classes, safeCol);
    Value onehot = colossal::WhereOp::create(b, loc, hit, oneF, zeroF);
    onehot = colossal::WhereOp::create(b, loc, lowCol, onehot, zeroF);
    onehot = colossal::WhereOp::create(b, loc, highCol, onehot, zeroF);
    Value g = colossal::SubOp::create(b, loc, p, onehot);
    Value scale = colossal::DivOp::create(b, loc, dloss, count);
    g = colossal::MulOp::create(b, loc, g, colossal::MulOp::create(b, loc, validCol, scale));
    result = g;
  }
  op->getResult(0).replaceAllUsesWith(result);
  record(result, globalTypes.lookup(op->getResult(0)), d.results[0]);
  op->erase();
  return success();
}

/// global_norm over sharded gradients: per group of gradients split over the same axes, the
/// local norm squared is summed over those axes; replicated gradients count once.
LogicalResult Partitioner::emitGlobalNorm(colossal::GlobalNormOp op) {
  std::map<std::vector<int>, SmallVector<Value>> groups;
  for (Value g : op.getGrads()) {
    std::vector<int> axes;
    for (const Axes &d : shardings.lookup(g).dims)
      axes.insert(axes.end(), d.begin(), d.end());
    llvm::sort(axes);
    groups[axes].push_back(g);
  }
  if (groups.size() == 1 && groups.begin()->first.empty())
    return success();
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto scalarType = tensorType(op.getNorm());
  Value total;
  for (auto &[axes, grads] : groups) {
    Value n = colossal::GlobalNormOp::create(b, loc, scalarType, grads);
    Value sq = colossal::MulOp::create(b, loc, n, n);
    if (!axes.empty())
      sq = colossal::AllReduceOp::create(
          b, loc, scalarType, sq, mesh.axesAttr(b.getContext(), axes), b.getStringAttr("sum"));
    total = total ? colossal::AddOp::create(b, loc, total, sq).getResult() : sq;
  }
  Value norm = colossal::SqrtOp::create(b, loc, total.getType(), total);
  op.getNorm().replaceAllUsesWith(norm);
  record(norm, scalarType, Sharding::replicated(0));
  op.erase();
  return success();
}

//===- ColossalServeOps.cpp - the paged KV cache ops -------------------------===//
//
// ColossalServeOps.td: the checks of kv_append and paged_attention and the result type of
// paged_attention. The cache layout is the kernels' (runtime/kernels/cpu/paged_attention.cpp).
//===----------------------------------------------------------------------===//
#include "dialects/Colossal/ColossalOps.h"
#include "dialects/Colossal/ConstantEval.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace colossal;

namespace {

bool isI32Of(RankedTensorType t, int64_t rank) {
  return t.getRank() == rank && t.getElementType().isInteger(32);
}

/// k_cache [NB, Hkv, BS, D] and v_cache [NB, Hkv, BS, Dv], both f32, agreeing on NB, Hkv and BS.
LogicalResult checkCaches(std::optional<Location> loc, RankedTensorType kc, RankedTensorType vc) {
  if (kc.getRank() != 4 || vc.getRank() != 4 || !kc.getElementType().isF32() ||
      !vc.getElementType().isF32())
    return emitOptionalError(loc, "k_cache and v_cache must be f32 [NB, Hkv, BS, D], got ",
                             shapeStr(kc.getShape()), " and ", shapeStr(vc.getShape()));
  if (kc.getShape().take_front(3) != vc.getShape().take_front(3))
    return emitOptionalError(loc, "k_cache ", shapeStr(kc.getShape()), " and v_cache ",
                             shapeStr(vc.getShape()), " differ in blocks, heads or block size");
  return success();
}

} // namespace

LogicalResult KvAppendOp::verify() {
  auto kc = rankedType(getKCache()), vc = rankedType(getVCache());
  auto k = rankedType(getK()), v = rankedType(getV()), slots = rankedType(getSlotMapping());
  if (failed(checkCaches(getLoc(), kc, vc)))
    return failure();
  if (k.getRank() != 3 || v.getRank() != 3 || !k.getElementType().isF32() ||
      !v.getElementType().isF32() || k.getDimSize(0) != v.getDimSize(0) ||
      k.getDimSize(1) != kc.getDimSize(1) || k.getDimSize(2) != kc.getDimSize(3) ||
      v.getDimSize(1) != vc.getDimSize(1) || v.getDimSize(2) != vc.getDimSize(3))
    return emitOpError() << "needs k [T, Hkv, D] and v [T, Hkv, Dv] of f32 matching the caches "
                         << shapeStr(kc.getShape()) << " and " << shapeStr(vc.getShape())
                         << ", got " << shapeStr(k.getShape()) << " and " << shapeStr(v.getShape());
  if (!isI32Of(slots, 1) || slots.getDimSize(0) != k.getDimSize(0))
    return emitOpError() << "needs slot_mapping [" << k.getDimSize(0) << "] of i32, got "
                         << slots;
  if (failed(verifyStateOperand(*this, getKCache(), "k_cache")))
    return failure();
  return verifyStateOperand(*this, getVCache(), "v_cache");
}

LogicalResult PagedAttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto q = rankedType(adaptor.getQ()), vc = rankedType(adaptor.getVCache());
  if (q.getRank() != 3 || vc.getRank() != 4)
    return emitOptionalError(loc, "paged_attention needs q [T, Hq, D] and v_cache [NB, Hkv, BS, Dv]");
  inferred.push_back(RankedTensorType::get({q.getDimSize(0), q.getDimSize(1), vc.getDimSize(3)},
                                           q.getElementType()));
  return success();
}

LogicalResult PagedAttentionOp::verify() {
  auto q = rankedType(getQ()), kc = rankedType(getKCache()), vc = rankedType(getVCache());
  auto tables = rankedType(getBlockTables()), ctx = rankedType(getContextLens());
  auto qsl = rankedType(getQueryStartLoc());
  if (failed(checkCaches(getLoc(), kc, vc)))
    return failure();
  if (!q.getElementType().isF32() || q.getDimSize(2) != kc.getDimSize(3))
    return emitOpError() << "needs q [T, Hq, " << kc.getDimSize(3) << "] of f32, got " << q;
  const int64_t hkv = kc.getDimSize(1);
  if (hkv == 0 || q.getDimSize(1) % hkv != 0)
    return emitOpError() << "query heads (" << q.getDimSize(1)
                         << ") must be a multiple of the cache's key/value heads (" << hkv << ")";
  if (!isI32Of(tables, 2) || !isI32Of(ctx, 1) || !isI32Of(qsl, 1) ||
      ctx.getDimSize(0) != tables.getDimSize(0) || qsl.getDimSize(0) != tables.getDimSize(0) + 1)
    return emitOpError() << "needs block_tables [S, MB], context_lens [S] and query_start_loc "
                            "[S + 1] of i32, got "
                         << tables << ", " << ctx << " and " << qsl;
  return success();
}

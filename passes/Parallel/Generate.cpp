//===- Generate.cpp - colossal-generate: the serving programs over a paged KV cache ---===//
//
// Passes.td "Generate"; docs/serving.md "Compiler". The model is imported as one sequence of T
// positions (ImportOptions::tokenRows): input_ids [1, T], its RoPE tables, position ids and
// causal masks folded at T, and colossal-fuse-attention has turned every attention into
// `colossal.attention {causal}`. This pass derives from that @forward the programs the engine
// runs, one per token count N (1, 2, 4, ... up to max_batch_tokens rounded up to a power of
// two), each one step of a ragged batch of N token rows:
//
//  1. Each attention becomes kv_append (this step's keys and values into the layer's paged
//     cache, two `colossal.state` arguments kv.<l>.k / kv.<l>.v) and paged_attention (the
//     queries against the cache through the block table). Rows are token rows: q [1, H, T, D]
//     is transposed and reshaped to [T, H, D] and the result back.
//  2. The token rows are split into T / N blocks with the SPMD partitioner (as
//     colossal-split-batch splits a batch): tokens, positions and slot_mapping arrive split
//     along dim 0, and each op's sharding rule carries the split. Every op other than the
//     paged ones computes each token row alone, so the rules never communicate; one that would
//     mixes positions outside the attention the fusion recognised, and is the error.
//  3. A value the partitioner must cut along the token rows without computing it from them
//     (a RoPE table, a learned position embedding's rows, a constant folded at T) is the value
//     of the positions 0 .. T − 1 of one sequence; row r of the step is position positions[r]
//     of its sequence, so the cut becomes a gather of that table at `positions`.
//
// The result: programs @generate_<N> (colossal.program = "generate", colossal.tokens = N) with
// inputs tokens, positions, slot_mapping [N], block_tables [S, MB], context_lens [S],
// query_start_loc [S + 1] and output logits [N, V]; @forward is erased and the module records
// the configuration in `colossal.generate`.
//===----------------------------------------------------------------------------------===//
#include "passes/Parallel/Partitioner.h"
#include "dialects/Colossal/Programs.h"
#include "passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace colossal {
#define GEN_PASS_DEF_GENERATE
#include "passes/Passes.h.inc"
} // namespace colossal

using namespace mlir;
using namespace colossal;
using namespace colossal::spmd;

namespace {

/// The mesh axis of token-row blocks; it lives only inside this pass.
constexpr llvm::StringLiteral kTokenRowAxis = "token_rows";

/// One attention layer's cache shape.
struct LayerCache {
  colossal::AttentionOp op;
  int64_t kvHeads = 0, headDim = 0, valueDim = 0;
};

struct GeneratePass : colossal::impl::GenerateBase<GeneratePass> {
  using GenerateBase::GenerateBase;

  std::string file; // "MODEL.onnx: " for messages
  int64_t T = 0;    // token rows of @forward (one sequence of T positions)
  unsigned tokensArg = 0;
  std::optional<unsigned> positionIdsArg;
  unsigned logitsResult = 0;
  std::vector<LayerCache> layers;
  int64_t numBlocks = 0, blocksPerSeq = 0, vocab = 0;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  InFlightDiagnostic error(Operation *op) { return op->emitError() << file; }

  /// The inputs: the token ids (the one integer input of shape [1, T]) and, when the model takes
  /// them, position ids (an integer input named position_ids, fed with each row's position).
  LogicalResult findInputs(func::FuncOp f) {
    std::optional<unsigned> tokens;
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto name = f.getArgAttrOfType<StringAttr>(i, kInputAttr);
      if (!name)
        continue;
      auto type = tensorType(f.getArgument(i));
      const bool tokenShaped = type.getRank() == 2 && type.getDimSize(0) == 1 &&
                               isa<IntegerType>(type.getElementType()) &&
                               type.getElementType().getIntOrFloatBitWidth() > 1;
      if (tokenShaped && name.getValue() == "position_ids" && !positionIdsArg) {
        positionIdsArg = i;
        continue;
      }
      if (tokenShaped && !tokens) {
        tokens = i;
        continue;
      }
      return error(f) << "input '" << name.getValue() << "' (" << type
                      << "): mode generate feeds a decoder its token ids (one integer input, "
                         "imported as [1, T]) and optionally position_ids; other inputs (an "
                         "attention mask, images) are not supported: bind them with the spec's "
                         "values: or export the model without them";
    }
    if (!tokens)
      return error(f) << "mode generate needs the model's token ids: an integer input of shape "
                         "[batch, sequence] (found none)";
    tokensArg = *tokens;
    tokensInput = f.getArgAttrOfType<StringAttr>(tokensArg, kInputAttr).str();
    T = tensorType(f.getArgument(tokensArg)).getDimSize(1);
    if (positionIdsArg && tensorType(f.getArgument(*positionIdsArg)).getDimSize(1) != T)
      return error(f) << "position_ids has " << tensorType(f.getArgument(*positionIdsArg)).getDimSize(1)
                      << " positions but the token ids " << T;
    return success();
  }

  /// The logits: the output named `logits`, else the first; [1, T, V] float.
  LogicalResult findLogits(func::FuncOp f) {
    std::optional<unsigned> found;
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      if (auto name = f.getResultAttrOfType<StringAttr>(i, kOutputAttr); name && name.getValue() == "logits")
        found = i;
    logitsResult = found.value_or(0);
    if (f.getNumResults() == 0)
      return error(f) << "the model has no output";
    auto type = cast<RankedTensorType>(f.getResultTypes()[logitsResult]);
    if (type.getRank() != 3 || type.getDimSize(0) != 1 || type.getDimSize(1) != T ||
        !type.getElementType().isF32()) {
      auto name = f.getResultAttrOfType<StringAttr>(logitsResult, kOutputAttr);
      return error(f) << "output '" << (name ? name.getValue() : StringRef("?")) << "' (" << type
                      << ") is not next-token logits [batch, " << T
                      << ", vocab] of f32; mode generate serves a decoder's logits";
    }
    vocab = type.getDimSize(2);
    return success();
  }

  /// Every attention must be the causal self-attention of one sequence: q [1, H, T, D], k and v
  /// [1, Hkv, T, *], no mask operand.
  LogicalResult findLayers(func::FuncOp f) {
    WalkResult walk = f.walk([&](colossal::AttentionOp a) {
      auto q = tensorType(a.getQ()), k = tensorType(a.getK()), v = tensorType(a.getV());
      if (!a.getCausal() || a.getMask()) {
        error(a) << "this attention is not causal self-attention without a mask operand"
                 << (a.getMask() ? " (it has a mask the fusion could not read as causal)" : "")
                 << ", so mode generate cannot serve it from a KV cache";
        return WalkResult::interrupt();
      }
      if (q.getDimSize(0) != 1 || q.getDimSize(2) != T || k.getDimSize(2) != T ||
          !q.getElementType().isF32() || !k.getElementType().isF32() || !v.getElementType().isF32()) {
        error(a) << "attention over q " << q << " and k " << k
                 << ": mode generate needs the self-attention of the " << T
                 << " token positions in f32";
        return WalkResult::interrupt();
      }
      layers.push_back({a, k.getDimSize(1), k.getDimSize(3), v.getDimSize(3)});
      return WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  }

  /// kv_blocks: the option, else (auto) the budget's share after the weights, else
  /// max_batch_seqs full sequences.
  LogicalResult chooseBlocks(func::FuncOp f) {
    blocksPerSeq = (maxSeqLen + blockSize - 1) / blockSize;
    // Under tensor parallelism (colossal-spmd-partition runs after this pass) each rank holds
    // 1/tp of every layer's heads, hence of each block, and about 1/tp of the weights.
    tensorParallel = 1;
    if (MeshOp mesh = lookupMesh(f))
      for (int axis : mesh.axesWithRole(AxisRole::Tensor))
        tensorParallel *= Mesh::of(mesh).sizes[axis];
    const uint64_t blockBytes = kvBlockBytes();
    if (kvBlocks > 0) {
      numBlocks = kvBlocks;
    } else if (budgetBytes > 0) {
      uint64_t weights = 0;
      for (unsigned i = 0; i < f.getNumArguments(); ++i)
        if (f.getArgAttr(i, kParamAttr)) {
          auto t = tensorType(f.getArgument(i));
          weights += uint64_t(t.getNumElements()) * ((t.getElementTypeBitWidth() + 7) / 8);
        }
      weights /= uint64_t(tensorParallel);
      // The largest step's activations come on top (the arena, known only once the plan is laid
      // out): reserve 4 bytes × its token rows × (vocabulary + 16 × the query width), which covers
      // a transformer block's live intermediates (an MLP of up to 4× the width) and the logits.
      int64_t queryWidth = 0;
      for (LayerCache &l : layers) {
        auto q = tensorType(l.op.getQ());
        queryWidth = std::max(queryWidth, q.getDimSize(1) * q.getDimSize(3));
      }
      const uint64_t reserve = uint64_t(largestStep) * 4 * uint64_t(vocab + 16 * queryWidth);  // not split by tp
      const uint64_t used = weights + reserve;
      numBlocks = blockBytes == 0 || used >= budgetBytes ? 0 : int64_t((budgetBytes - used) / blockBytes);
    } else {
      numBlocks = maxBatchSeqs * blocksPerSeq;
    }
    if (numBlocks < blocksPerSeq)
      return error(f) << "the KV cache of " << numBlocks << " blocks of " << int64_t(blockSize)
                      << " tokens (" << blockBytes << " bytes per block over " << layers.size()
                      << " layers" << (kvBlocks > 0 ? "" : budgetBytes > 0 ? ", memory.budget_mb's share after the weights and the activations' reserve" : "")
                      << ") cannot hold one sequence of generate.max_seq_len = " << int64_t(maxSeqLen)
                      << " tokens, which needs " << blocksPerSeq << " blocks";
    return success();
  }

  /// One block's bytes on one rank: every layer's keys and values of its share of the heads.
  uint64_t kvBlockBytes() const {
    uint64_t bytes = 0;
    for (const LayerCache &l : layers)
      bytes += uint64_t(l.kvHeads) * uint64_t(blockSize) * uint64_t(l.headDim + l.valueDim) * 4;
    return bytes / uint64_t(tensorParallel);
  }
  int64_t tensorParallel = 1; // the product of the mesh's tensor axes (chooseBlocks)
  int64_t largestStep = 1;    // token rows of the largest step: max-batch-tokens rounded up to 2^k

  /// Clones @forward into the step program of T rows: new inputs and caches, attention paged,
  /// the logits flattened to [T, V]. The partitioner then cuts it to N rows.
  func::FuncOp buildStep(func::FuncOp forward, int64_t n) {
    MLIRContext *ctx = &getContext();
    auto g = cast<func::FuncOp>(forward->clone());
    g.setName(("generate_" + Twine(n)).str());
    setProgramRole(g, ProgramRole::Generate);
    g->setAttr(kTokensAttr, IntegerAttr::get(IntegerType::get(ctx, 64), n));
    Block &body = g.getBody().front();
    Location loc = g.getLoc();
    Type i32 = IntegerType::get(ctx, 32);
    auto tokenType = tensorType(g.getArgument(tokensArg));

    // Inputs, then the caches, after the model's own arguments.
    const unsigned first = g.getNumArguments();
    auto addInput = [&](StringRef name, ArrayRef<int64_t> shape, Type et) {
      NamedAttribute attr(StringAttr::get(ctx, kInputAttr), StringAttr::get(ctx, name));
      (void)g.insertArgument(g.getNumArguments(), RankedTensorType::get(shape, et),
                             DictionaryAttr::get(ctx, {attr}), NameLoc::get(StringAttr::get(ctx, name)));
      return body.getArguments().back();
    };
    Value tokens = addInput("tokens", {T}, tokenType.getElementType());
    Value positions = addInput("positions", {T}, i32);
    Value slots = addInput("slot_mapping", {T}, i32);
    Value tables = addInput("block_tables", {maxBatchSeqs, blocksPerSeq}, i32);
    Value contextLens = addInput("context_lens", {maxBatchSeqs}, i32);
    Value queryStart = addInput("query_start_loc", {maxBatchSeqs + 1}, i32);
    splitArgs = {first, first + 1, first + 2};

    OpBuilder b = OpBuilder::atBlockBegin(&body);
    Value ids = colossal::ReshapeOp::create(b, loc, tokenType, tokens);
    g.getArgument(tokensArg).replaceAllUsesWith(ids);
    if (positionIdsArg) {
      auto pt = tensorType(g.getArgument(*positionIdsArg));
      Value p = positions;
      if (pt.getElementType() != i32)
        p = colossal::CastOp::create(b, loc, RankedTensorType::get({T}, pt.getElementType()), p);
      g.getArgument(*positionIdsArg).replaceAllUsesWith(colossal::ReshapeOp::create(b, loc, pt, p));
    }

    // Attention → kv_append + paged_attention, layer by layer in program order.
    SmallVector<colossal::AttentionOp> attentions;
    g.walk([&](colossal::AttentionOp a) { attentions.push_back(a); });
    for (auto [l, a] : llvm::enumerate(attentions)) {
      const LayerCache &lc = layers[l];
      auto cacheType = [&](int64_t d) {
        return RankedTensorType::get({numBlocks, lc.kvHeads, blockSize, d}, b.getF32Type());
      };
      auto addCache = [&](const std::string &name, int64_t d) {
        NamedAttribute attr(StringAttr::get(ctx, kStateAttr), StringAttr::get(ctx, name));
        (void)g.insertArgument(g.getNumArguments(), cacheType(d), DictionaryAttr::get(ctx, {attr}),
                               NameLoc::get(StringAttr::get(ctx, name)));
        return body.getArguments().back();
      };
      Value kc = addCache("kv." + std::to_string(l) + ".k", lc.headDim);
      Value vc = addCache("kv." + std::to_string(l) + ".v", lc.valueDim);
      b.setInsertionPoint(a);
      Location aloc = a.getLoc();
      // [1, H, T, D] → [T, H, D]
      auto rows = [&](Value x) {
        auto t = tensorType(x);
        Value tr = colossal::TransposeOp::create(b, aloc, x, b.getDenseI64ArrayAttr({0, 2, 1, 3}));
        return colossal::ReshapeOp::create(
            b, aloc, RankedTensorType::get({T, t.getDimSize(1), t.getDimSize(3)}, t.getElementType()), tr);
      };
      Value q = rows(a.getQ()), k = rows(a.getK()), v = rows(a.getV());
      colossal::KvAppendOp::create(b, aloc, kc, vc, k, v, slots);
      Value y = colossal::PagedAttentionOp::create(b, aloc, q, kc, vc, tables, contextLens, queryStart,
                                                   a.getScaleAttr());
      auto out = tensorType(a.getResult());
      Value y4 = colossal::ReshapeOp::create(
          b, aloc, RankedTensorType::get({1, T, out.getDimSize(1), out.getDimSize(3)}, out.getElementType()), y);
      Value back = colossal::TransposeOp::create(b, aloc, y4, b.getDenseI64ArrayAttr({0, 2, 1, 3}));
      a.getResult().replaceAllUsesWith(back);
      a.erase();
    }

    // The logits alone, as [T, V].
    Operation *ret = body.getTerminator();
    b.setInsertionPoint(ret);
    Value logits = colossal::ReshapeOp::create(b, ret->getLoc(), RankedTensorType::get({T, vocab}, b.getF32Type()),
                                               ret->getOperand(logitsResult));
    func::ReturnOp::create(b, ret->getLoc(), ValueRange{logits});
    ret->erase();
    SmallVector<Type> argTypes(body.getArgumentTypes());
    g.removeResAttrsAttr(); // the model's other outputs (a hidden state, ...) are not served
    g.setFunctionType(FunctionType::get(ctx, argTypes, {logits.getType()}));
    g.setResultAttrs(0, DictionaryAttr::get(ctx, {NamedAttribute(StringAttr::get(ctx, kOutputAttr),
                                                                 StringAttr::get(ctx, "logits"))}));
    // The model's own inputs are gone.
    llvm::BitVector dead(g.getNumArguments());
    dead.set(tokensArg);
    if (positionIdsArg)
      dead.set(*positionIdsArg);
    (void)g.eraseArguments(dead);
    const unsigned shift = positionIdsArg ? 2 : 1;
    for (unsigned &a : splitArgs)
      a -= shift;
    positionsArg = splitArgs[1];
    return g;
  }

  SmallVector<unsigned> splitArgs;
  unsigned positionsArg = 0;

  /// The rows `positions` (i64 [N]) along `dim` of `v`, a value that does not depend on the step's
  /// inputs: a table over the T positions of one sequence (a RoPE table, a position embedding's
  /// rows, a constant folded at T), typed `local` (v's type with dim = N). The gather moves up
  /// through views, slices and gathers toward the table itself, so a step reads N rows of it
  /// instead of computing all T; at the top it is gather(v, positions, dim).
  Value positionRows(OpBuilder &b, Location loc, Value v, int64_t dim, RankedTensorType local,
                     Value positions) {
    auto with = [&](RankedTensorType t, int64_t d) {
      SmallVector<int64_t> shape(t.getShape());
      shape[d] = local.getDimSize(dim);
      return RankedTensorType::get(shape, t.getElementType());
    };
    Operation *def = v.getDefiningOp();
    if (auto g = dyn_cast_or_null<colossal::GatherOp>(def)) {
      // gather(table, ids) cut along an index dim: the table at those rows of the ids.
      auto idx = tensorType(g.getIndices());
      const int64_t axis = g.getAxis();
      if (dim >= axis && dim < axis + idx.getRank()) {
        Value ids = positionRows(b, loc, g.getIndices(), dim - axis, with(idx, dim - axis), positions);
        return colossal::GatherOp::create(b, loc, local, g.getData(), ids, g.getAxisAttr());
      }
    } else if (auto sl = dyn_cast_or_null<colossal::SliceOp>(def)) {
      // A prefix of a longer table (cos_cached[:T]): the table at the positions.
      if (sl.getStarts()[dim] == 0 && sl.getSteps()[dim] == 1) {
        auto in = tensorType(sl.getX());
        Value rows = positionRows(b, loc, sl.getX(), dim, with(in, dim), positions);
        SmallVector<int64_t> starts(sl.getStarts()), limits(sl.getLimits()), steps(sl.getSteps());
        limits[dim] = local.getDimSize(dim);
        if (tensorType(rows) == local)
          return rows;
        return colossal::SliceOp::create(b, loc, local, rows, b.getDenseI64ArrayAttr(starts),
                                         b.getDenseI64ArrayAttr(limits), b.getDenseI64ArrayAttr(steps));
      }
    } else if (auto t = dyn_cast_or_null<colossal::TransposeOp>(def)) {
      const int64_t from = t.getPerm()[dim];
      auto in = tensorType(t.getX());
      Value rows = positionRows(b, loc, t.getX(), from, with(in, from), positions);
      return colossal::TransposeOp::create(b, loc, rows, t.getPermAttr());
    } else if (auto r = dyn_cast_or_null<colossal::ReshapeOp>(def)) {
      // A reshape that keeps the token dim whole: the dims before it hold as many elements.
      auto in = tensorType(r.getX()), out = tensorType(r.getResult());
      int64_t before = 1;
      for (int64_t d = 0; d < dim; ++d)
        before *= out.getDimSize(d);
      int64_t prefix = 1;
      for (int64_t d = 0; d < in.getRank(); prefix *= in.getDimSize(d), ++d)
        if (prefix == before && in.getDimSize(d) == out.getDimSize(dim)) {
          Value rows = positionRows(b, loc, r.getX(), d, with(in, d), positions);
          return colossal::ReshapeOp::create(b, loc, local, rows);
        }
    } else if (auto c = dyn_cast_or_null<colossal::CastOp>(def)) {
      auto in = tensorType(c.getX());
      Value rows = positionRows(b, loc, c.getX(), dim, with(in, dim), positions);
      return colossal::CastOp::create(b, loc, local, rows);
    }
    return colossal::GatherOp::create(b, loc, local, v, positions, b.getI64IntegerAttr(dim));
  }

  /// After the partitioner: each cut of a whole value along the token rows becomes the gather of
  /// its positions (or a smaller broadcast); any other collective over the rows is an error.
  LogicalResult finish(func::FuncOp g) {
    Value positions = g.getArgument(positionsArg);
    Value positions64;
    WalkResult walk = g.walk([&](Operation *op) -> WalkResult {
      if (!isCollectiveOver(op, kTokenRowAxis))
        return WalkResult::advance();
      if (auto slice = dyn_cast<colossal::ShardSliceOp>(op)) {
        if (shrinkBroadcastCut(slice))
          return WalkResult::advance();
        if (!positions64) {
          OpBuilder atStart = OpBuilder::atBlockBegin(&g.getBody().front());
          positions64 = colossal::CastOp::create(
              atStart, g.getLoc(),
              RankedTensorType::get(tensorType(positions).getShape(), atStart.getI64Type()), positions);
        }
        OpBuilder b(slice);
        slice.replaceAllUsesWith(positionRows(b, slice.getLoc(), slice.getX(), slice.getDim(),
                                              cast<RankedTensorType>(slice.getType()), positions64));
        slice.erase();
        return WalkResult::advance();
      }
      // Blame the op that needs all the rows (a gather's consumer) or that summed over them.
      Operation *blame = collectiveBlame(op);
      error(blame) << "this op mixes token positions (computing it a few token rows at a time "
                      "would need "
                   << op->getName().stripDialect()
                   << " across the rows), so mode generate cannot serve the model: only an "
                      "attention that colossal-fuse-attention recognises (causal, softmax(q·kᵀ)·v) "
                      "may read other positions";
      return WalkResult::interrupt();
    });
    if (walk.wasInterrupted())
      return failure();
    eraseDeadOps(g);
    return success();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    if (auto source = module->getAttrOfType<StringAttr>(kSourceAttr))
      file = source.str() + ": ";
    if (maxSeqLen < 1 || blockSize < 1 || maxBatchSeqs < 1 || maxBatchTokens < 1)
      return module.emitError("colossal-generate: max-seq-len, block-size, max-batch-seqs and "
                              "max-batch-tokens must be >= 1");
    auto forward = lookupProgram(module, ProgramRole::Forward);
    if (!forward)
      return module.emitError("colossal-generate needs the forward program (the imported model)");
    if (failed(findInputs(forward)) || failed(findLogits(forward)) || failed(findLayers(forward)))
      return failure();
    // Token counts: powers of two up to max_batch_tokens rounded up; each must cut T into at
    // least two blocks (so that every position table is cut, hence gathered).
    largestStep = 1;
    while (largestStep < maxBatchTokens)
      largestStep *= 2;
    const int64_t top = largestStep;
    if (T < maxSeqLen)
      return error(forward) << "the model was imported with " << T
                            << " positions (its sequence length is fixed there), fewer than "
                               "generate.max_seq_len = "
                            << int64_t(maxSeqLen) << "; lower max_seq_len to at most " << T;
    if (T % top != 0 || T < 2 * top) {
      int64_t most = 1;
      while (T % (most * 2) == 0 && T >= 4 * most)
        most *= 2;
      return error(forward) << "the model's " << T << " positions cannot be cut into steps of "
                            << top << " token rows (generate.max_batch_tokens = " << int64_t(maxBatchTokens)
                            << " rounded up to a power of two, which must divide the positions at "
                               "least twice); lower max_batch_tokens to at most "
                            << most;
    }
    if (failed(chooseBlocks(forward)))
      return failure();

    for (int64_t n = 1; n <= top; n *= 2) {
      func::FuncOp g = buildStep(forward, n);
      module.push_back(g);
      Mesh mesh;
      mesh.context = module.getContext();
      mesh.symbol = kTokenRowAxis.str();
      mesh.names.push_back(kTokenRowAxis.str());
      mesh.sizes.push_back(T / n);
      Strategy strategy;
      strategy.localBatch = {0};
      strategy.localBatchArgs = splitArgs;
      strategy.noRuleAdvice = "it has no row-wise rule, so mode generate cannot compute it a few token "
                              "rows at a time";
      llvm::StringMap<Sharding> decided;
      Partitioner partitioner(mesh, strategy, decided, /*deciding=*/false);
      if (failed(partitioner.run(g)) || failed(finish(g)))
        return failure();
      // A request's rows must not change with the rows beside it: batch-invariant GEMMs.
      g.walk([&](Operation *op) {
        if (isa<colossal::MatMulOp, colossal::GemmOp>(op))
          op->setAttr(kBatchInvariantAttr, UnitAttr::get(op->getContext()));
      });
    }
    forward.erase();

    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    SmallVector<NamedAttribute> config = {
        b.getNamedAttr("max_seq_len", b.getI64IntegerAttr(maxSeqLen)),
        b.getNamedAttr("block_size", b.getI64IntegerAttr(blockSize)),
        b.getNamedAttr("num_blocks", b.getI64IntegerAttr(numBlocks)),
        b.getNamedAttr("max_batch_seqs", b.getI64IntegerAttr(maxBatchSeqs)),
        b.getNamedAttr("max_batch_tokens", b.getI64IntegerAttr(maxBatchTokens)),
        b.getNamedAttr("max_blocks_per_seq", b.getI64IntegerAttr(blocksPerSeq)),
        b.getNamedAttr("vocab_size", b.getI64IntegerAttr(vocab)),
        b.getNamedAttr("layers", b.getI64IntegerAttr(int64_t(layers.size()))),
        b.getNamedAttr("kv_heads", b.getI64IntegerAttr(layers.empty() ? 0 : layers[0].kvHeads)),
        b.getNamedAttr("head_dim", b.getI64IntegerAttr(layers.empty() ? 0 : layers[0].headDim)),
        b.getNamedAttr("kv_block_bytes", b.getI64IntegerAttr(int64_t(kvBlockBytes()))),
        b.getNamedAttr("tokens_input", b.getStringAttr(tokensInput)),
    };
    module->setAttr(kGenerateAttr, DictionaryAttr::get(ctx, config));
    return success();
  }

  std::string tokensInput;
};

} // namespace

//===- paged_attention.cpp - Paged KV cache: append, block copy, attention (f32) -------------===//
//
// The KV-cache kernels of serving (docs/serving.md "KV-cache kernels"). The cache of one layer is
// two f32 tensors, k_cache [NB, Hkv, BS, D] and v_cache [NB, Hkv, BS, Dv]: NB blocks of BS token
// slots (serve/BlockManager.h); slot s is block s / BS, offset s % BS, and one (block, kv head)
// is a contiguous [BS, D] tile. A batch is ragged: sequence i contributes q_len_i tokens, stored
// one after the other (T = Σ q_len_i rows), no padding.
//
// kv_append      inputs  k [T, Hkv, D], v [T, Hkv, Dv], slot_mapping [T] i32
//                outputs k_cache, v_cache, updated in place: row t goes to slot slot_mapping[t]
//                (−1: a padding row, skipped); every other slot keeps its contents.
//                Error (at run time): a slot outside [−1, NB·BS).
// kv_copy_blocks inputs  block_copies [N, 2] i32 (src, dst) — the block manager's copy-on-write
//                outputs k_cache, v_cache, in place: block dst (every head and slot) = block src,
//                in order. Error: a block outside [0, NB).
// paged_attention inputs q [T, Hq, D], k_cache, v_cache, block_tables [S, MB] i32,
//                context_lens [S] i32, query_start_loc [S + 1] i32; output y [T, Hq, Dv].
//                Sequence i owns rows [query_start_loc[i], query_start_loc[i+1]) of q and y, its
//                q_len queries at positions [ctx − q_len, ctx), ctx = context_lens[i] (the cache
//                already holds the keys and values of all ctx positions, this step's included:
//                kv_append runs first). Row at position p attends causally to positions [0, p],
//                position j read from block block_tables[i][j / BS] at offset j % BS. GQA: query
//                head h reads kv head h / (Hq / Hkv). attrs: scale (default 1/sqrt(D)).
//                y = softmax(q·kᵀ·scale)·v (Vaswani et al. 2017, §3.2.1).
//                Errors (at run time): query_start_loc not starting at 0, decreasing, or not
//                ending at T; q_len > ctx; ctx > MB·BS; a block table entry outside [0, NB) among
//                the ⌈ctx / BS⌉ a sequence reads (entries past those are not read).
//
// Batch invariance. A row's result is a function of its query, its position p and the keys and
// values at positions [0, p] only: not of the other rows of its chunk, the other sequences of the
// batch, where its blocks are, the block size or the thread count. Each row runs the same code in
// the same order: one score per key (a dot product over D in 16 fixed lanes, added in a fixed
// tree), the exact max, the exponentials summed in 16 fixed lanes over key position, and the
// output accumulated over keys in position order. So a prompt prefilled whole, in chunks of 16
// or 64, or decoded token by token gives bit-identical rows, and a request's tokens do not change
// with what else is running (vLLM #5543, #7845 describe what happens otherwise). The price: no
// register blocking across query rows (each row streams its keys and values once; across the
// query heads of a GQA group and the rows of a chunk they stay in cache).
//
// Work items are (sequence, tile of 16 query rows, query head), run in parallel (OpenMP, dynamic)
// so that a long prefill chunk and many decodes in one batch spread over the threads. Scratch per
// thread: the row's scores (MB·BS floats) and its output accumulator (Dv floats).
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"
#include "FastMath.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace colossal::runtime::cpu {
namespace {

constexpr int kLanes = 16;       // fixed accumulation lanes (one AVX-512 vector of f32)
constexpr int64_t kRowTile = 16; // query rows per work item

/// Σ lane[0..16) in a fixed tree.
inline float sumLanes(const float *lane) {
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = lane[i] + lane[i + 8];
  for (int i = 0; i < 4; ++i) t[i] += t[i + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

/// a · b over n floats: lane k sums the products at indices ≡ k (mod 16), in index order.
inline float dot(const float *a, const float *b, int64_t n) {
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += a[i + k] * b[i + k];
  for (int k = 0; i + k < n; ++k) lane[k] += a[i + k] * b[i + k];
  return sumLanes(lane);
}

// ---------------------------------------------------------------------------- shapes and checks

struct CacheDims {
  int64_t NB, Hkv, BS, D, Dv;
};

CacheDims cacheDims(const TensorRef &K, const TensorRef &V) {
  return {K.shape[0], K.shape[1], K.shape[2], K.shape[3], V.shape[3]};
}

llvm::Error verifyCache(const TensorRef &K, const TensorRef &V) {
  if (llvm::Error e = verifyDType(K, DType::F32, "k_cache")) return e;
  if (llvm::Error e = verifyDType(V, DType::F32, "v_cache")) return e;
  if (K.rank() != 4 || V.rank() != 4)
    return kernelError("k_cache and v_cache must have rank 4 ([blocks, kv heads, block size, head dim]), got " +
                       shapeToString(K.shape) + " and " + shapeToString(V.shape));
  if (K.shape[0] != V.shape[0] || K.shape[1] != V.shape[1] || K.shape[2] != V.shape[2])
    return kernelError("k_cache " + shapeToString(K.shape) + " and v_cache " + shapeToString(V.shape) +
                       " differ in blocks, kv heads or block size");
  if (K.shape[1] < 1 || K.shape[2] < 1) return kernelError("k_cache needs >= 1 kv head and block size >= 1");
  return llvm::Error::success();
}

llvm::Error verifyIndexVector(const TensorRef &t, int64_t n, llvm::StringRef what) {
  if (llvm::Error e = verifyDType(t, DType::I32, what)) return e;
  if (t.rank() != 1 || t.shape[0] != n)
    return kernelError(what + " must be [" + llvm::Twine(n) + "], got " + shapeToString(t.shape));
  return llvm::Error::success();
}

// ---------------------------------------------------------------------------- kv_append

llvm::Error verifyKvAppend(const KernelCall &c) {
  const TensorRef &K = c.inputs[0], &V = c.inputs[1], &slots = c.inputs[2];
  const TensorRef &Kc = c.outputs[0], &Vc = c.outputs[1];
  if (llvm::Error e = verifyCache(Kc, Vc)) return e;
  if (llvm::Error e = verifyDType(K, DType::F32, "k")) return e;
  if (llvm::Error e = verifyDType(V, DType::F32, "v")) return e;
  const CacheDims d = cacheDims(Kc, Vc);
  const int64_t T = K.rank() == 3 ? K.shape[0] : -1;
  if (K.shape != Shape{T, d.Hkv, d.D} || V.shape != Shape{T, d.Hkv, d.Dv})
    return kernelError("k " + shapeToString(K.shape) + " and v " + shapeToString(V.shape) +
                       " must be [T, kv heads, head dim] matching k_cache " + shapeToString(Kc.shape) +
                       " and v_cache " + shapeToString(Vc.shape));
  return verifyIndexVector(slots, T, "slot_mapping");
}

llvm::Error runKvAppend(const KernelCall &c) {
  const TensorRef &K = c.inputs[0], &V = c.inputs[1];
  const CacheDims d = cacheDims(c.outputs[0], c.outputs[1]);
  const int32_t *slots = c.inputs[2].as<const int32_t>();
  const int64_t T = K.shape[0], numSlots = d.NB * d.BS;
  for (int64_t t = 0; t < T; ++t)
    if (slots[t] < -1 || slots[t] >= numSlots)
      return kernelError("slot_mapping[" + llvm::Twine(t) + "] = " + llvm::Twine(slots[t]) + " is outside [-1, " +
                         llvm::Twine(numSlots) + ")");
  const float *k = K.as<const float>(), *v = V.as<const float>();
  float *kc = c.outputs[0].as<float>(), *vc = c.outputs[1].as<float>();
  parallelFor(T, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (slots[t] < 0) continue;
      const int64_t block = slots[t] / d.BS, offset = slots[t] % d.BS;
      for (int64_t h = 0; h < d.Hkv; ++h) {
        const int64_t dst = (block * d.Hkv + h) * d.BS + offset;
        std::memcpy(kc + dst * d.D, k + (t * d.Hkv + h) * d.D, d.D * sizeof(float));
        std::memcpy(vc + dst * d.Dv, v + (t * d.Hkv + h) * d.Dv, d.Dv * sizeof(float));
      }
    }
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------------------- kv_copy_blocks

llvm::Error verifyKvCopyBlocks(const KernelCall &c) {
  const TensorRef &copies = c.inputs[0];
  if (llvm::Error e = verifyCache(c.outputs[0], c.outputs[1])) return e;
  if (llvm::Error e = verifyDType(copies, DType::I32, "block_copies")) return e;
  if (copies.rank() != 2 || copies.shape[1] != 2)
    return kernelError("block_copies must be [N, 2] (src, dst), got " + shapeToString(copies.shape));
  return llvm::Error::success();
}

llvm::Error runKvCopyBlocks(const KernelCall &c) {
  const CacheDims d = cacheDims(c.outputs[0], c.outputs[1]);
  const int32_t *copies = c.inputs[0].as<const int32_t>();
  const int64_t n = c.inputs[0].shape[0];
  for (int64_t i = 0; i < 2 * n; ++i)
    if (copies[i] < 0 || copies[i] >= d.NB)
      return kernelError("block_copies[" + llvm::Twine(i / 2) + "][" + llvm::Twine(i % 2) + "] = " +
                         llvm::Twine(copies[i]) + " is outside [0, " + llvm::Twine(d.NB) + ")");
  float *kc = c.outputs[0].as<float>(), *vc = c.outputs[1].as<float>();
  const int64_t kBlock = d.Hkv * d.BS * d.D, vBlock = d.Hkv * d.BS * d.Dv;
  // In order: a later copy may read what an earlier one wrote.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = copies[2 * i], dst = copies[2 * i + 1];
    if (src == dst) continue;
    std::memcpy(kc + dst * kBlock, kc + src * kBlock, kBlock * sizeof(float));
    std::memcpy(vc + dst * vBlock, vc + src * vBlock, vBlock * sizeof(float));
  }
  return llvm::Error::success();
}

// ---------------------------------------------------------------------------- paged_attention

struct AttnDims {
  int64_t T, Hq, S, MB;
  CacheDims cache;
};

AttnDims attnDims(const KernelCall &c) {
  return {c.inputs[0].shape[0], c.inputs[0].shape[1], c.inputs[3].shape[0], c.inputs[3].shape[1],
          cacheDims(c.inputs[1], c.inputs[2])};
}

llvm::Error verifyPagedAttention(const KernelCall &c) {
  const TensorRef &Q = c.inputs[0], &tables = c.inputs[3], &Y = c.outputs[0];
  if (llvm::Error e = verifyCache(c.inputs[1], c.inputs[2])) return e;
  if (llvm::Error e = verifyDType(Q, DType::F32, "q")) return e;
  if (llvm::Error e = verifyDType(Y, DType::F32, "y")) return e;
  if (llvm::Error e = verifyDType(tables, DType::I32, "block_tables")) return e;
  if (Q.rank() != 3 || tables.rank() != 2)
    return kernelError("q must be [T, heads, head dim] and block_tables [sequences, blocks], got " +
                       shapeToString(Q.shape) + " and " + shapeToString(tables.shape));
  const AttnDims d = attnDims(c);
  if (Q.shape[2] != d.cache.D)
    return kernelError("q " + shapeToString(Q.shape) + " and k_cache " + shapeToString(c.inputs[1].shape) +
                       " differ in head dim");
  if (d.Hq % d.cache.Hkv != 0)
    return kernelError("query heads " + llvm::Twine(d.Hq) + " not a multiple of kv heads " + llvm::Twine(d.cache.Hkv));
  if (llvm::Error e = verifyIndexVector(c.inputs[4], d.S, "context_lens")) return e;
  if (llvm::Error e = verifyIndexVector(c.inputs[5], d.S + 1, "query_start_loc")) return e;
  const Shape want = {d.T, d.Hq, d.cache.Dv};
  if (Y.shape != want) return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  if (c.hasAttr("scale") && !std::isfinite(c.attrFloat("scale", 1.0))) return kernelError("scale must be finite");
  return llvm::Error::success();
}

/// The data-dependent checks of paged_attention (header comment), before any row runs.
llvm::Error checkBatch(const KernelCall &c, const AttnDims &d) {
  const int32_t *tables = c.inputs[3].as<const int32_t>(), *ctx = c.inputs[4].as<const int32_t>(),
                *qsl = c.inputs[5].as<const int32_t>();
  if (qsl[0] != 0) return kernelError("query_start_loc[0] = " + llvm::Twine(qsl[0]) + ", must be 0");
  if (qsl[d.S] != d.T)
    return kernelError("query_start_loc[" + llvm::Twine(d.S) + "] = " + llvm::Twine(qsl[d.S]) +
                       ", must be the number of query rows " + llvm::Twine(d.T));
  for (int64_t s = 0; s < d.S; ++s) {
    const int64_t qLen = int64_t(qsl[s + 1]) - qsl[s];
    const std::string where = "sequence " + std::to_string(s) + ": ";
    if (qLen < 0) return kernelError(where + "query_start_loc decreases (" + llvm::Twine(qsl[s]) + " then " + llvm::Twine(qsl[s + 1]) + ")");
    if (ctx[s] > d.MB * d.cache.BS)
      return kernelError(where + "context length " + llvm::Twine(ctx[s]) + " exceeds the block table's " +
                         llvm::Twine(d.MB) + " blocks of " + llvm::Twine(d.cache.BS));
    if (qLen > ctx[s])
      return kernelError(where + llvm::Twine(qLen) + " queries but context length " + llvm::Twine(ctx[s]));
    for (int64_t b = 0; b < (ctx[s] + d.cache.BS - 1) / d.cache.BS; ++b) {
      const int32_t block = tables[s * d.MB + b];
      if (block < 0 || block >= d.cache.NB)
        return kernelError(where + "block_tables[" + llvm::Twine(s) + "][" + llvm::Twine(b) + "] = " +
                           llvm::Twine(block) + " is outside [0, " + llvm::Twine(d.cache.NB) + ")");
    }
  }
  return llvm::Error::success();
}

size_t scoreFloats(const AttnDims &d) { return static_cast<size_t>((d.MB * d.cache.BS + 15) / 16 * 16); }
size_t perThreadFloats(const AttnDims &d) { return scoreFloats(d) + static_cast<size_t>((d.cache.Dv + 15) / 16 * 16); }

size_t pagedAttentionWorkspace(const KernelCall &c, int threads) {
  const AttnDims d = attnDims(c);
  return sizeof(int64_t) * (d.S + 1) + perThreadFloats(d) * sizeof(float) * std::max(threads, 1);
}

/// One query row at position p (keys [0, p]): y[0..Dv) = softmax(scale · q·kⱼ) · vⱼ. `kHead` and
/// `vHead` are the first (block, kv head) tiles' offsets; `table` the sequence's blocks.
/// Every row of every batch goes through this one function (batch invariance, header comment).
void attendRow(const float *q, int64_t p, const int32_t *table, const float *kCache, const float *vCache,
               int64_t hk, const CacheDims &d, float scale, float *scores, float *acc, float *y) {
  const int64_t n = p + 1;
  for (int64_t j0 = 0, b = 0; j0 < n; j0 += d.BS, ++b) {
    const int64_t tile = (int64_t(table[b]) * d.Hkv + hk) * d.BS;
    const float *k = kCache + tile * d.D;
    const int64_t m = std::min(d.BS, n - j0);
    for (int64_t j = 0; j < m; ++j) scores[j0 + j] = dot(q, k + j * d.D, d.D) * scale;
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, scores[j]);
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += scores[j + k] = fastExp(scores[j + k] - mx);
  for (int k = 0; j + k < n; ++k) lane[k] += scores[j + k] = fastExp(scores[j + k] - mx);
  const float l = sumLanes(lane);  // >= 1: the max's own term is e⁰

  std::fill(acc, acc + d.Dv, 0.0f);
  for (int64_t j0 = 0, b = 0; j0 < n; j0 += d.BS, ++b) {
    const float *v = vCache + (int64_t(table[b]) * d.Hkv + hk) * d.BS * d.Dv;
    const int64_t m = std::min(d.BS, n - j0);
    for (int64_t jj = 0; jj < m; ++jj) {
      const float w = scores[j0 + jj];
      const float *vr = v + jj * d.Dv;
#pragma omp simd
      for (int64_t c = 0; c < d.Dv; ++c) acc[c] += w * vr[c];
    }
  }
  const float inv = 1.0f / l;
  for (int64_t c = 0; c < d.Dv; ++c) y[c] = acc[c] * inv;
}

llvm::Error runPagedAttention(const KernelCall &c) {
  const AttnDims d = attnDims(c);
  if (llvm::Error e = checkBatch(c, d)) return e;
  if (d.T == 0 || d.cache.Dv == 0) return llvm::Error::success();
  const float *q = c.inputs[0].as<const float>(), *kc = c.inputs[1].as<const float>(),
              *vc = c.inputs[2].as<const float>();
  const int32_t *tables = c.inputs[3].as<const int32_t>(), *ctx = c.inputs[4].as<const int32_t>(),
                *qsl = c.inputs[5].as<const int32_t>();
  float *y = c.outputs[0].as<float>();
  const float scale = static_cast<float>(c.attrFloat("scale", 1.0 / std::sqrt(static_cast<double>(d.cache.D))));
  const int64_t group = d.Hq / d.cache.Hkv;

  // firstItem[s]: the first work item of sequence s; its items are (tile, head), head fastest.
  int64_t *firstItem = static_cast<int64_t *>(c.workspace);
  firstItem[0] = 0;
  for (int64_t s = 0; s < d.S; ++s)
    firstItem[s + 1] = firstItem[s] + (qsl[s + 1] - qsl[s] + kRowTile - 1) / kRowTile * d.Hq;
  const int64_t items = firstItem[d.S];
  float *scratch = reinterpret_cast<float *>(firstItem + d.S + 1);
  const size_t perThread = perThreadFloats(d);
  const int threads = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(omp_get_max_threads()), c.threads, items})));

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t s = std::upper_bound(firstItem, firstItem + d.S + 1, item) - firstItem - 1;
    const int64_t local = item - firstItem[s], h = local % d.Hq, tile = local / d.Hq;
    const int64_t qLen = qsl[s + 1] - qsl[s], r0 = tile * kRowTile, r1 = std::min(qLen, r0 + kRowTile);
    float *scores = scratch + perThread * omp_get_thread_num(), *acc = scores + scoreFloats(d);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t row = qsl[s] + r, pos = ctx[s] - qLen + r;
      attendRow(q + (row * d.Hq + h) * d.cache.D, pos, tables + s * d.MB, kc, vc, h / group, d.cache, scale, scores,
                acc, y + (row * d.Hq + h) * d.cache.Dv);
    }
  }
  return llvm::Error::success();
}

}  // namespace

void registerPagedAttentionKernels(KernelRegistry &r) {
  KernelDesc append;
  append.op = "kv_append";
  append.minInputs = append.maxInputs = 3;
  append.minOutputs = append.maxOutputs = 2;
  append.verify = verifyKvAppend;
  append.run = runKvAppend;
  r.add(append);

  KernelDesc copy;
  copy.op = "kv_copy_blocks";
  copy.minInputs = copy.maxInputs = 1;
  copy.minOutputs = copy.maxOutputs = 2;
  copy.verify = verifyKvCopyBlocks;
  copy.run = runKvCopyBlocks;
  r.add(copy);

  KernelDesc attn;
  attn.op = "paged_attention";
  attn.minInputs = attn.maxInputs = 6;
  attn.attrs = {{"scale", AttrKind::Float}};
  attn.verify = verifyPagedAttention;
  attn.workspace = pagedAttentionWorkspace;
  attn.run = runPagedAttention;
  r.add(attn);
}

}  // namespace colossal::runtime::cpu

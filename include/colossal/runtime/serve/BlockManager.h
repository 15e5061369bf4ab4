//===- BlockManager.h - Paged KV cache: blocks, block tables, prefix cache -------*- C++ -*-===//
//
// The bookkeeping of a paged KV cache (Kwon et al. 2023, "Efficient Memory Management for Large
// Language Model Serving with PagedAttention", SOSP'23; docs/serving.md "KV cache blocks"). The
// cache is a pool of `numBlocks` blocks of `blockSize` token slots each; the tensors that hold the
// keys and values ([numBlocks, Hkv, blockSize, D] per layer, runtime/kernels/cpu/paged_attention.cpp)
// live elsewhere, this class only says which block holds which tokens. Token position p of a
// sequence is in block `blockTable(seq)[p / blockSize]` at offset `p % blockSize`; its slot (what
// the kv_append kernel writes through) is `block · blockSize + offset`.
//
// - Reference counts: a block is referenced by every sequence whose block table holds it.
// - Fork (n > 1, beam-like sharing): the child gets the parent's block table and tokens; every
//   block's count goes up. A full shared block is never written again. When a sequence appends to
//   a shared, partially filled last block, it gets a private copy first (copy-on-write): the call
//   returns a BlockCopy {src, dst} that the engine applies to every layer's K and V before the
//   step's kv_append writes the new tokens.
// - Prefix cache: a full block is identified by a chained hash, h_i = XXH3-64 (LLVM's xxh3_64bits)
//   of the bytes of (h_{i−1} as little-endian uint64, the block's blockSize int32 token ids), with
//   h_{−1} = 0, so equal hashes stand for equal prefixes, not only equal blocks. Once a full
//   block's keys and values are computed (markComputed), its hash is registered; a later sequence
//   whose prompt starts with the same tokens reuses the block instead of recomputing it. A hit is
//   verified against the stored token ids and parent hash, so a hash collision is a miss, never
//   wrong keys. Only full blocks are cached, and never the block holding a prompt's last token
//   (its logits must be computed).
// - Eviction: a cached block whose count drops to 0 stays cached but evictable; new blocks come
//   from never-cached free blocks first, then from the least recently released cached block
//   (LRU). A sequence releases its blocks last to first, so a chain is evicted from its tail: a
//   block is useless once its parent is gone.
// - Out of blocks is a value, not an error: OutOfBlocks, with nothing changed, so the scheduler
//   can preempt a sequence and retry. Misuse (an unknown or duplicate sequence id, an empty
//   prompt) is an llvm::Error naming the sequence.
//
// Not thread-safe: one scheduler thread owns it. No allocation beyond the per-sequence vectors
// and the hash map; every operation is O(blocks touched) (hash-map and list operations O(1)).
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_BLOCKMANAGER_H
#define COLOSSAL_RUNTIME_SERVE_BLOCKMANAGER_H

#include "colossal/runtime/serve/Tokenizer.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace colossal::runtime::serve {

using BlockId = int32_t;
/// The scheduler's name for a sequence (a request's choice); any value, unique among live ones.
using SeqId = int64_t;

struct BlockManagerConfig {
  int32_t numBlocks = 0;        // >= 1: blocks in the pool (generate.kv_blocks)
  int32_t blockSize = 16;       // >= 1: token slots per block (generate.block_size)
  bool prefixCaching = true;    // off: no hashes registered, no hits, released blocks are free
  int64_t maxSeqLen = 0;        // tokens one sequence may hold (generate.max_seq_len); 0: no limit
};

/// Whether a call that may need new blocks got them. OutOfBlocks leaves the manager unchanged.
enum class KvStatus { Ok, OutOfBlocks };

/// A copy the engine must apply before the step runs: every layer's K and V block `src` into
/// block `dst` (all blockSize slots; those past the sequence's length are never read).
struct BlockCopy {
  BlockId src, dst;
};

struct AllocateResult {
  KvStatus status = KvStatus::Ok;
  /// Leading prompt tokens whose keys and values are already in the cache (a multiple of
  /// blockSize, < the prompt's length): the first prefill computes tokens [cachedTokens, len).
  int64_t cachedTokens = 0;
};

struct AppendResult {
  KvStatus status = KvStatus::Ok;
  /// Set when the last block was shared and was copied (copy-on-write).
  std::optional<BlockCopy> copy;
};

/// Counters since creation (for /metrics): prompt tokens looked up in the prefix cache and hit.
struct PrefixCacheStats {
  int64_t queriedTokens = 0, hitTokens = 0;
  int64_t evictions = 0;  // cached blocks whose hash was dropped to reuse the block
};

class BlockManager {
public:
  /// Errors: numBlocks or blockSize < 1 ("kv_blocks must be >= 1, not 0"); maxSeqLen < 0; a pool
  /// that cannot hold one sequence of maxSeqLen tokens ("max_seq_len 4096 needs 256 blocks of 16
  /// tokens, but kv_blocks is 100 (1600 tokens)").
  static llvm::Expected<std::unique_ptr<BlockManager>> create(const BlockManagerConfig &config);

  int32_t numBlocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t blockSize() const { return blockSize_; }
  /// Blocks a new allocation can take: never-used or released free blocks plus evictable cached
  /// ones (count 0). numBlocks() − numFreeBlocks() blocks are referenced by live sequences.
  int32_t numFreeBlocks() const { return static_cast<int32_t>(free_.size() + evictable_.size()); }
  /// Cached blocks with count 0 (a subset of the free ones).
  int32_t numEvictableBlocks() const { return static_cast<int32_t>(evictable_.size()); }
  /// Blocks whose hash is registered (referenced or not).
  int32_t numCachedBlocks() const { return static_cast<int32_t>(cache_.size()); }
  /// Blocks needed for `tokens` tokens: ⌈tokens / blockSize⌉.
  int64_t blocksFor(int64_t tokens) const { return (tokens + blockSize_ - 1) / blockSize_; }

  /// A new sequence `seq` holding `prompt` (>= 1 token): its block table covers every prompt
  /// token, leading full blocks taken from the prefix cache where their chained hash is
  /// registered (their count goes up), the rest newly allocated (count 1). OutOfBlocks when the
  /// pool cannot hold the blocks not found in the cache. Errors: `seq` already live, empty prompt,
  /// a prompt longer than maxSeqLen.
  llvm::Expected<AllocateResult> allocate(SeqId seq, llvm::ArrayRef<TokenId> prompt);

  /// Appends generated (or draft) tokens to `seq`: a new block whenever the last one is full,
  /// copy-on-write when the last block is partially filled and shared (at most one copy per call:
  /// only the first new token can land in a shared block). OutOfBlocks when the pool cannot hold
  /// the new blocks. Errors: `seq` unknown, a length beyond maxSeqLen.
  llvm::Expected<AppendResult> append(SeqId seq, llvm::ArrayRef<TokenId> tokens);

  /// Drops `seq`'s tokens past the first `length` (speculative decoding's rejected drafts, whose
  /// slots later tokens overwrite): blocks that held only dropped positions are released (count
  /// − 1, free at 0). Only tokens not yet marked computed can be dropped, so no block in the
  /// prefix cache ever loses or changes a token. Errors: `seq` unknown, `length` above its length
  /// or below its computed count (markComputed).
  llvm::Error truncate(SeqId seq, int64_t length);

  /// Whether append(seq, n tokens) would get its blocks now (false for an unknown `seq`).
  bool canAppend(SeqId seq, int64_t n) const;

  /// A new sequence `child` sharing all of `parent`'s blocks and tokens (parallel sampling, n > 1).
  /// Takes no block. Errors: `parent` unknown, `child` already live.
  llvm::Error fork(SeqId parent, SeqId child);

  /// Records that the keys and values of `seq`'s first `tokens` tokens are in the cache (the
  /// step that wrote them has run), registering the hashes of the full blocks among them in the
  /// prefix cache. Monotone: a smaller count than before is ignored. Errors: `seq` unknown,
  /// `tokens` above its length.
  llvm::Error markComputed(SeqId seq, int64_t tokens);

  /// Releases `seq`'s blocks (last to first): a block whose count reaches 0 becomes evictable if
  /// cached, else free. Errors: `seq` unknown.
  llvm::Error release(SeqId seq);

  bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
  /// Tokens of `seq` (0 for an unknown sequence).
  int64_t length(SeqId seq) const { return static_cast<int64_t>(tokens(seq).size()); }
  /// The count markComputed last recorded (the prefix-cache hit after allocate).
  int64_t computedTokens(SeqId seq) const;
  /// `seq`'s blocks, position p in element p / blockSize (empty for an unknown sequence).
  llvm::ArrayRef<BlockId> blockTable(SeqId seq) const;
  /// `seq`'s token ids (prompt and appended), empty for an unknown sequence.
  llvm::ArrayRef<TokenId> tokens(SeqId seq) const;
  /// The slot of each position in [begin, end) of `seq`, appended to `slots` (block · blockSize +
  /// offset; the kv_append kernel's slot_mapping). Precondition: 0 <= begin <= end <= length.
  void slotMapping(SeqId seq, int64_t begin, int64_t end, std::vector<int32_t> &slots) const;

  /// Sequences referencing `block` (0 for free and evictable blocks).
  int32_t refCount(BlockId block) const { return blocks_[block].refCount; }
  /// Whether `block`'s hash is registered in the prefix cache.
  bool isCached(BlockId block) const { return blocks_[block].cached; }
  /// Evictable blocks, the next one to be evicted first (for tests and diagnostics).
  std::vector<BlockId> evictionOrder() const { return {evictable_.begin(), evictable_.end()}; }
  const PrefixCacheStats &prefixCacheStats() const { return stats_; }

private:
  struct Block {
    int32_t refCount = 0;
    bool cached = false;
    uint64_t hash = 0, parentHash = 0;  // when cached
    std::vector<TokenId> tokens;        // when cached: the blockSize ids the hash covers
    std::list<BlockId>::iterator lru;   // when cached with refCount 0: position in evictable_
  };
  struct Sequence {
    std::vector<TokenId> tokens;
    std::vector<BlockId> table;
    std::vector<uint64_t> hashes;  // chained hashes of the full blocks registered so far
    int64_t computed = 0;
  };

  explicit BlockManager(const BlockManagerConfig &config);
  /// One block with count 1, from free_ else by evicting evictable_.front(); -1 when none.
  BlockId takeBlock();
  void dropReference(BlockId block);
  uint64_t blockHash(uint64_t parent, llvm::ArrayRef<TokenId> tokens) const;
  /// The cached block for (parent hash, tokens), verified against its stored ids; -1 on a miss.
  BlockId lookup(uint64_t parent, llvm::ArrayRef<TokenId> tokens, uint64_t &hash) const;
  llvm::Error unknown(SeqId seq, const char *what) const;

  int32_t blockSize_;
  bool prefixCaching_;
  int64_t maxSeqLen_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;     // never cached or uncached, count 0 (a stack: LIFO reuse)
  std::list<BlockId> evictable_;  // cached, count 0; front = least recently released
  std::unordered_map<uint64_t, BlockId> cache_;
  std::unordered_map<SeqId, Sequence> seqs_;
  PrefixCacheStats stats_;
};

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_BLOCKMANAGER_H

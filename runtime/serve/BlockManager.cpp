//===- BlockManager.cpp - Block tables, reference counts, COW, prefix cache, LRU -------------===//
#include "colossal/runtime/serve/BlockManager.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <cstring>

namespace colossal::runtime::serve {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}
}  // namespace

llvm::Expected<std::unique_ptr<BlockManager>> BlockManager::create(const BlockManagerConfig &config) {
  if (config.numBlocks < 1) return error("kv_blocks must be >= 1, not " + llvm::Twine(config.numBlocks));
  if (config.blockSize < 1) return error("block_size must be >= 1, not " + llvm::Twine(config.blockSize));
  if (config.maxSeqLen < 0) return error("max_seq_len must be >= 0 (0: no limit), not " + llvm::Twine(config.maxSeqLen));
  const int64_t need = (config.maxSeqLen + config.blockSize - 1) / config.blockSize;
  if (need > config.numBlocks)
    return error("max_seq_len " + llvm::Twine(config.maxSeqLen) + " needs " + llvm::Twine(need) + " blocks of " +
                 llvm::Twine(config.blockSize) + " tokens, but kv_blocks is " + llvm::Twine(config.numBlocks) + " (" +
                 llvm::Twine(int64_t(config.numBlocks) * config.blockSize) + " tokens)");
  return std::unique_ptr<BlockManager>(new BlockManager(config));
}

BlockManager::BlockManager(const BlockManagerConfig &config)
    : blockSize_(config.blockSize), prefixCaching_(config.prefixCaching), maxSeqLen_(config.maxSeqLen),
      blocks_(config.numBlocks) {
  // A stack whose top is block 0, so blocks are handed out 0, 1, 2, ... from a fresh pool.
  free_.reserve(config.numBlocks);
  for (BlockId b = config.numBlocks - 1; b >= 0; --b) free_.push_back(b);
}

llvm::Error BlockManager::unknown(SeqId seq, const char *what) const {
  return error(llvm::Twine(what) + ": no live sequence " + llvm::Twine(seq));
}

llvm::ArrayRef<BlockId> BlockManager::blockTable(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? llvm::ArrayRef<BlockId>() : llvm::ArrayRef<BlockId>(it->second.table);
}

llvm::ArrayRef<TokenId> BlockManager::tokens(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? llvm::ArrayRef<TokenId>() : llvm::ArrayRef<TokenId>(it->second.tokens);
}

int64_t BlockManager::computedTokens(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.computed;
}

void BlockManager::slotMapping(SeqId seq, int64_t begin, int64_t end, std::vector<int32_t> &slots) const {
  llvm::ArrayRef<BlockId> table = blockTable(seq);
  for (int64_t p = begin; p < end; ++p)
    slots.push_back(table[p / blockSize_] * blockSize_ + static_cast<int32_t>(p % blockSize_));
}

uint64_t BlockManager::blockHash(uint64_t parent, llvm::ArrayRef<TokenId> tokens) const {
  // (parent, ids) as little-endian bytes: the hash is the same on every host.
  llvm::SmallVector<uint8_t, 8 + 4 * 64> bytes(8 + 4 * tokens.size());
  llvm::support::endian::write64le(bytes.data(), parent);
  for (size_t i = 0; i < tokens.size(); ++i)
    llvm::support::endian::write32le(bytes.data() + 8 + 4 * i, static_cast<uint32_t>(tokens[i]));
  return llvm::xxh3_64bits(bytes);
}

BlockId BlockManager::lookup(uint64_t parent, llvm::ArrayRef<TokenId> tokens, uint64_t &hash) const {
  hash = blockHash(parent, tokens);
  auto it = cache_.find(hash);
  if (it == cache_.end()) return -1;
  const Block &b = blocks_[it->second];
  // A collision of the 64-bit hash is a miss: the stored chain link and ids must match too.
  if (b.parentHash != parent || !std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end()))
    return -1;
  return it->second;
}

BlockId BlockManager::takeBlock() {
  BlockId id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();
    evictable_.pop_front();
    Block &b = blocks_[id];
    cache_.erase(b.hash);
    b.cached = false;
    b.tokens.clear();
    ++stats_.evictions;
  } else {
    return -1;
  }
  blocks_[id].refCount = 1;
  return id;
}

void BlockManager::dropReference(BlockId id) {
  Block &b = blocks_[id];
  if (--b.refCount > 0) return;
  if (b.cached) b.lru = evictable_.insert(evictable_.end(), id);
  else free_.push_back(id);
}

llvm::Expected<AllocateResult> BlockManager::allocate(SeqId seq, llvm::ArrayRef<TokenId> prompt) {
  if (prompt.empty()) return error("allocate: sequence " + llvm::Twine(seq) + " has an empty prompt");
  if (seqs_.count(seq)) return error("allocate: sequence " + llvm::Twine(seq) + " is already live");
  const int64_t len = static_cast<int64_t>(prompt.size());
  if (maxSeqLen_ > 0 && len > maxSeqLen_)
    return error("allocate: sequence " + llvm::Twine(seq) + " has " + llvm::Twine(len) + " tokens, above max_seq_len " +
                 llvm::Twine(maxSeqLen_));
  const int64_t needed = blocksFor(len);

  // Prefix-cache hits: leading full blocks, not the one holding the prompt's last token.
  std::vector<BlockId> hits;
  std::vector<uint64_t> hashes;
  int64_t hitsEvictable = 0;
  if (prefixCaching_) {
    uint64_t parent = 0;
    for (int64_t i = 0; i < (len - 1) / blockSize_; ++i) {
      uint64_t h;
      BlockId b = lookup(parent, prompt.slice(i * blockSize_, blockSize_), h);
      if (b < 0) break;
      hits.push_back(b);
      hashes.push_back(h);
      hitsEvictable += blocks_[b].refCount == 0;
      parent = h;
    }
  }
  const int64_t fresh = needed - static_cast<int64_t>(hits.size());
  if (fresh > numFreeBlocks() - hitsEvictable) return AllocateResult{KvStatus::OutOfBlocks, 0};

  Sequence s;
  s.tokens.assign(prompt.begin(), prompt.end());
  s.table.reserve(needed);
  for (BlockId b : hits) {
    Block &blk = blocks_[b];
    if (blk.refCount++ == 0) evictable_.erase(blk.lru);
    s.table.push_back(b);
  }
  for (int64_t i = 0; i < fresh; ++i) s.table.push_back(takeBlock());
  s.hashes = std::move(hashes);
  s.computed = static_cast<int64_t>(hits.size()) * blockSize_;
  if (prefixCaching_) {
    stats_.queriedTokens += len;
    stats_.hitTokens += s.computed;
  }
  const int64_t cached = s.computed;
  seqs_.emplace(seq, std::move(s));
  return AllocateResult{KvStatus::Ok, cached};
}

bool BlockManager::canAppend(SeqId seq, int64_t n) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return false;
  const Sequence &s = it->second;
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  int64_t needed = blocksFor(len + n) - static_cast<int64_t>(s.table.size());
  if (n > 0 && len % blockSize_ != 0 && blocks_[s.table.back()].refCount > 1) ++needed;  // copy-on-write
  return needed <= numFreeBlocks();
}

llvm::Expected<AppendResult> BlockManager::append(SeqId seq, llvm::ArrayRef<TokenId> tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown(seq, "append");
  const int64_t newLen = static_cast<int64_t>(it->second.tokens.size() + tokens.size());
  if (maxSeqLen_ > 0 && newLen > maxSeqLen_)
    return error("append: sequence " + llvm::Twine(seq) + " would have " + llvm::Twine(newLen) +
                 " tokens, above max_seq_len " + llvm::Twine(maxSeqLen_));
  if (!canAppend(seq, static_cast<int64_t>(tokens.size()))) return AppendResult{KvStatus::OutOfBlocks, {}};
  Sequence &s = it->second;
  AppendResult result;
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  if (!tokens.empty() && len % blockSize_ != 0 && blocks_[s.table.back()].refCount > 1) {
    // The first new token lands in a partially filled block another sequence also reads.
    const BlockId shared = s.table.back(), copy = takeBlock();
    dropReference(shared);
    s.table.back() = copy;
    result.copy = BlockCopy{shared, copy};
  }
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  while (static_cast<int64_t>(s.table.size()) < blocksFor(static_cast<int64_t>(s.tokens.size())))
    s.table.push_back(takeBlock());
  return result;
}

llvm::Error BlockManager::truncate(SeqId seq, int64_t length) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown(seq, "truncate");
  Sequence &s = it->second;
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  if (length > len || length < s.computed)
    return error("truncate: sequence " + llvm::Twine(seq) + " to " + llvm::Twine(length) + " tokens, outside [" +
                 llvm::Twine(s.computed) + " computed, " + llvm::Twine(len) + " held]");
  s.tokens.resize(length);
  // Release last to first, as release() does; a sequence keeps at least one block (allocate's).
  const size_t keep = static_cast<size_t>(std::max<int64_t>(blocksFor(length), 1));
  while (s.table.size() > keep) {
    dropReference(s.table.back());
    s.table.pop_back();
  }
  return llvm::Error::success();
}

llvm::Error BlockManager::fork(SeqId parent, SeqId child) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end()) return unknown(parent, "fork");
  if (seqs_.count(child)) return error("fork: sequence " + llvm::Twine(child) + " is already live");
  Sequence copy = it->second;  // before emplace: it may rehash
  for (BlockId b : copy.table) ++blocks_[b].refCount;
  seqs_.emplace(child, std::move(copy));
  return llvm::Error::success();
}

llvm::Error BlockManager::markComputed(SeqId seq, int64_t tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown(seq, "markComputed");
  Sequence &s = it->second;
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  if (tokens > len)
    return error("markComputed: sequence " + llvm::Twine(seq) + " has " + llvm::Twine(len) + " tokens, not " +
                 llvm::Twine(tokens));
  s.computed = std::max(s.computed, tokens);
  if (!prefixCaching_) return llvm::Error::success();
  for (int64_t i = static_cast<int64_t>(s.hashes.size()); i < s.computed / blockSize_; ++i) {
    const uint64_t parent = i == 0 ? 0 : s.hashes[i - 1];
    llvm::ArrayRef<TokenId> ids = llvm::ArrayRef<TokenId>(s.tokens).slice(i * blockSize_, blockSize_);
    const uint64_t h = blockHash(parent, ids);
    s.hashes.push_back(h);
    // Another block may hold the same prefix already (two sequences computed it at once): keep
    // that one; this block stays uncached and is freed, not kept, when released.
    Block &b = blocks_[s.table[i]];
    if (b.cached || !cache_.emplace(h, s.table[i]).second) continue;
    b.cached = true;
    b.hash = h;
    b.parentHash = parent;
    b.tokens.assign(ids.begin(), ids.end());
  }
  return llvm::Error::success();
}

llvm::Error BlockManager::release(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return unknown(seq, "release");
  const std::vector<BlockId> &table = it->second.table;
  for (auto b = table.rbegin(); b != table.rend(); ++b) dropReference(*b);
  seqs_.erase(it);
  return llvm::Error::success();
}

}  // namespace colossal::runtime::serve

#pragma once
// KV reuse across requests (the server) and turns (a Session): the caches of recent sequences with the tokens they hold, least
// recently used first out when their pages exceed a memory budget. A new prompt reuses the
// longest cached prefix, token for token (at most prompt length - 1, so at least one token is
// prefilled and yields the first logits); only the rest is prefilled. A cache cut inside a block
// is exact: attention and the index branch read only positions below the cache length, and a
// token's K/V do not depend on how the tokens before it were chunked.
//
// Reuse is exact: the engine computes a token's K/V the same way whatever ran before it in the
// cache (see docs/ARCHITECTURE.md), so logits with reuse equal logits without.
//
// When the prompt extends an entry (reuse reaches into its last whole block), the entry itself is
// taken over and truncated; otherwise the new sequence gets a cache that shares the entry's pages of
// the reused whole blocks (KvCache::prefix_of; only a partial last block is copied), so the other
// sequence (e.g. a different conversation sharing the system prompt) stays cached at no extra
// memory. bytes() counts every page once, however many entries hold it. Not thread-safe: the engine
// worker alone uses it.
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "memory/kv_cache.h"

namespace m3 {

class PrefixCache {
 public:
  // max_entries: 0 for no limit (the server); 1 keeps only the latest sequence (a chat session).
  PrefixCache(KvCacheShape shape, uint64_t budget_bytes, size_t max_entries = 0);

  struct Lease {
    std::unique_ptr<KvCache> cache;  // holds exactly prompt[0, reused)
    int64_t reused = 0;
  };
  Lease acquire(const std::vector<int32_t>& prompt);
  // Returns a cache after a request; `tokens` are the ids whose K/V it holds (length() of them).
  void release(std::unique_ptr<KvCache> cache, std::vector<int32_t> tokens);

  size_t entries() const { return entries_.size(); }
  void clear() { entries_.clear(); }
  uint64_t bytes() const;
  uint64_t budget_bytes() const { return budget_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::unique_ptr<KvCache> cache;
  };
  void evict_to_budget();

  KvCacheShape shape_;
  uint64_t budget_;
  size_t max_entries_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace m3

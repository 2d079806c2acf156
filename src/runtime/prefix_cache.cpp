#include "runtime/prefix_cache.h"

#include <algorithm>
#include <unordered_map>

#include "m3/error.h"

namespace m3 {

PrefixCache::PrefixCache(KvCacheShape shape, uint64_t budget_bytes, size_t max_entries)
    : shape_(std::move(shape)), budget_(budget_bytes), max_entries_(max_entries) {}

uint64_t PrefixCache::bytes() const {
  // Entries share the pages of common prefixes: each page counts once.
  std::unordered_map<const void*, size_t> pages;
  for (const auto& e : entries_) e.cache->collect_pages(pages);
  uint64_t b = 0;
  for (const auto& [page, n] : pages) b += n;
  return b;
}

PrefixCache::Lease PrefixCache::acquire(const std::vector<int32_t>& prompt) {
  const int64_t B = shape_.block_size;
  const int64_t limit = std::max<int64_t>(0, int64_t(prompt.size()) - 1);
  auto best = entries_.end();
  int64_t best_reuse = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const int64_t n = std::min<int64_t>({int64_t(it->tokens.size()), it->cache->length(), limit});
    int64_t common = 0;
    while (common < n && it->tokens[size_t(common)] == prompt[size_t(common)]) ++common;
    const int64_t reuse = common;
    if (reuse > best_reuse) {  // ties: the more recently used entry (earlier in the list)
      best_reuse = reuse;
      best = it;
    }
  }
  Lease lease;
  if (best == entries_.end()) {
    lease.cache = std::make_unique<KvCache>(shape_);
    return lease;
  }
  lease.reused = best_reuse;
  const int64_t entry_whole = best->cache->length() / B * B;
  if (best_reuse + B >= entry_whole) {
    // The prompt continues this sequence (at most the entry's last block is dropped): take it over.
    lease.cache = std::move(best->cache);
    entries_.erase(best);
    lease.cache->truncate(best_reuse);
  } else {
    lease.cache = KvCache::prefix_of(*best->cache, best_reuse);
    entries_.splice(entries_.begin(), entries_, best);  // used: move to the front
  }
  return lease;
}

void PrefixCache::release(std::unique_ptr<KvCache> cache, std::vector<int32_t> tokens) {
  if (!cache || budget_ == 0) return;
  M3_CHECK(int64_t(tokens.size()) >= cache->length(), "prefix cache: fewer tokens than cached positions");
  tokens.resize(size_t(cache->length()));
  if (tokens.empty()) return;
  // An entry that is a prefix of the new one holds nothing the new one lacks.
  entries_.remove_if([&](const Entry& e) {
    return e.tokens.size() <= tokens.size() && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin());
  });
  entries_.push_front(Entry{std::move(tokens), std::move(cache)});
  evict_to_budget();
}

void PrefixCache::evict_to_budget() {
  while (max_entries_ > 0 && entries_.size() > max_entries_) entries_.pop_back();
  while (!entries_.empty() && bytes() > budget_) entries_.pop_back();
}

}  // namespace m3

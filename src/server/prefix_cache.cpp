#include "server/prefix_cache.h"

#include <algorithm>

#include "base/error.h"

namespace m3::server {

PrefixCache::PrefixCache(KvCacheShape shape, uint64_t budget_bytes) : shape_(std::move(shape)), budget_(budget_bytes) {}

uint64_t PrefixCache::bytes() const {
  uint64_t b = 0;
  for (const auto& e : entries_) b += e.cache->bytes();
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
    lease.cache = copy_cache_prefix(*best->cache, best_reuse);
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
  uint64_t total = bytes();
  while (!entries_.empty() && total > budget_) {
    total -= entries_.back().cache->bytes();
    entries_.pop_back();
  }
}

std::unique_ptr<KvCache> copy_cache_prefix(const KvCache& src, int64_t tokens) {
  const KvCacheShape& s = src.shape();
  M3_CHECK(tokens >= 0 && tokens <= src.length(), "copy_cache_prefix: ", tokens, " > ", src.length());
  auto dst = std::make_unique<KvCache>(s);
  dst->ensure_capacity(tokens);
  const int hd = s.head_dim;
  std::vector<float> k(static_cast<size_t>(hd)), v(static_cast<size_t>(hd)), ik(static_cast<size_t>(s.index_dim));
  for (int l = 0; l < s.num_layers; ++l) {
    const bool has_index = size_t(l) < s.layer_has_index.size() && s.layer_has_index[size_t(l)];
    for (int64_t pos = 0; pos < tokens; ++pos) {
      // Widened and stored again in the same dtype: exact for f32 and bf16 caches alike.
      for (int h = 0; h < s.kv_heads; ++h) {
        src.read_kv(l, pos, h, k.data(), v.data());
        dst->write_kv(l, pos, h, k.data(), v.data());
      }
      if (has_index) {
        src.read_index_k(l, pos, ik.data());
        dst->write_index_k(l, pos, ik.data());
      }
    }
  }
  dst->set_length(tokens);
  return dst;
}

}  // namespace m3::server

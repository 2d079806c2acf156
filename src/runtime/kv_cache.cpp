#include "runtime/kv_cache.h"

#include <algorithm>

#include "base/error.h"

namespace m3 {

KvCache::KvCache(KvCacheShape shape) : shape_(std::move(shape)) {
  M3_CHECK(shape_.block_size > 0 && shape_.kv_heads > 0 && shape_.head_dim > 0, "KvCache: bad shape");
  kv_pages_.resize(size_t(shape_.num_layers));
  index_pages_.resize(size_t(shape_.num_layers));
}

void KvCache::ensure_capacity(int64_t tokens) {
  const int64_t blocks = (tokens + shape_.block_size - 1) / shape_.block_size;
  for (int l = 0; l < shape_.num_layers; ++l) {
    auto& kv = kv_pages_[size_t(l)];
    while (int64_t(kv.size()) < blocks) kv.emplace_back(new float[kv_page_floats()]());
    if (shape_.layer_has_index[size_t(l)]) {
      auto& ix = index_pages_[size_t(l)];
      while (int64_t(ix.size()) < blocks) ix.emplace_back(new float[index_page_floats()]());
    }
  }
}

void KvCache::set_length(int64_t n) {
  M3_CHECK(n >= 0 && n <= int64_t(kv_pages_.empty() ? 0 : kv_pages_[0].size()) * shape_.block_size,
           "KvCache: length ", n, " beyond the allocated pages");
  length_ = n;
}

void KvCache::truncate(int64_t tokens) {
  if (tokens >= length_) return;
  const int64_t blocks = (tokens + shape_.block_size - 1) / shape_.block_size;
  for (auto& layer : kv_pages_)
    if (int64_t(layer.size()) > blocks) layer.resize(size_t(blocks));
  for (auto& layer : index_pages_)
    if (int64_t(layer.size()) > blocks) layer.resize(size_t(blocks));
  length_ = tokens;
}

int64_t KvCache::num_pages() const {
  int64_t n = 0;
  for (const auto& l : kv_pages_) n += int64_t(l.size());
  for (const auto& l : index_pages_) n += int64_t(l.size());
  return n;
}

uint64_t KvCache::bytes() const {
  uint64_t b = 0;
  for (const auto& l : kv_pages_) b += l.size() * kv_page_floats() * sizeof(float);
  for (const auto& l : index_pages_) b += l.size() * index_page_floats() * sizeof(float);
  return b;
}

void KvCache::write_kv(int layer, int64_t pos, int kv_head, const float* k, const float* v) {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size, hd = shape_.head_dim;
  float* page = kv_pages_[size_t(layer)][size_t(block)].get();
  float* kt = page + size_t(kv_head) * B * hd;                                 // [hd][B]
  float* vs = page + size_t(shape_.kv_heads) * B * hd + (size_t(kv_head) * B + s) * hd;  // [B][hd] row s
  for (int d = 0; d < hd; ++d) kt[size_t(d) * B + s] = k[d];
  std::copy_n(v, hd, vs);
}

const float* KvCache::block_ptr(int layer, int64_t block, int kv_head, int which) const {
  const float* page = kv_pages_[size_t(layer)][size_t(block)].get();
  const size_t half = size_t(shape_.kv_heads) * shape_.block_size * shape_.head_dim;
  return page + which * half + size_t(kv_head) * shape_.block_size * shape_.head_dim;
}

void KvCache::write_index_k(int layer, int64_t pos, const float* ik) {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size;
  float* page = index_pages_[size_t(layer)][size_t(block)].get();
  for (int d = 0; d < shape_.index_dim; ++d) page[size_t(d) * B + s] = ik[d];
}

const float* KvCache::index_k_block_t(int layer, int64_t block) const {
  return index_pages_[size_t(layer)][size_t(block)].get();
}
}  // namespace m3

#include "memory/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace m3 {

namespace {

// One stored element of either dtype: fp32 as is, bf16 rounded to nearest even.
inline void store_elem(std::byte* page, DType t, size_t i, float x) {
  if (t == DType::BF16) {
    const uint16_t h = f32_to_bf16(x);
    std::memcpy(page + i * 2, &h, 2);
  } else {
    std::memcpy(page + i * 4, &x, 4);
  }
}

inline float load_elem(const std::byte* page, DType t, size_t i) {
  if (t == DType::BF16) {
    uint16_t h;
    std::memcpy(&h, page + i * 2, 2);
    return bf16_to_f32(h);
  }
  float x;
  std::memcpy(&x, page + i * 4, 4);
  return x;
}

}  // namespace

std::optional<DType> parse_cache_type(std::string_view name) {
  if (name == "f32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  return std::nullopt;
}

const char* cache_type_name(DType t) { return t == DType::BF16 ? "bf16" : "f32"; }

KvCache::KvCache(KvCacheShape shape) : shape_(std::move(shape)) {
  M3_CHECK(shape_.block_size > 0 && shape_.kv_heads > 0 && shape_.head_dim > 0, "KvCache: bad shape");
  M3_CHECK(shape_.dtype == DType::F32 || shape_.dtype == DType::BF16, "KvCache: the cache type must be f32 or bf16, not ",
           dtype_name(shape_.dtype));
  kv_pages_.resize(size_t(shape_.num_layers));
  index_pages_.resize(size_t(shape_.num_layers));
}

void KvCache::check_dtype(DType want, const char* what) const {
  M3_CHECK(shape_.dtype == want, "KvCache::", what, ": the cache holds ", cache_type_name(shape_.dtype), ", not ",
           cache_type_name(want));
}

void KvCache::ensure_capacity(int64_t tokens) {
  const int64_t blocks = (tokens + shape_.block_size - 1) / shape_.block_size;
  for (int l = 0; l < shape_.num_layers; ++l) {
    auto& kv = kv_pages_[size_t(l)];
    while (int64_t(kv.size()) < blocks) kv.emplace_back(new std::byte[kv_page_elems() * elem_bytes()]());
    if (shape_.layer_has_index[size_t(l)]) {
      auto& ix = index_pages_[size_t(l)];
      while (int64_t(ix.size()) < blocks) ix.emplace_back(new std::byte[index_page_elems() * elem_bytes()]());
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
  for (const auto& l : kv_pages_) b += l.size() * kv_page_elems() * elem_bytes();
  for (const auto& l : index_pages_) b += l.size() * index_page_elems() * elem_bytes();
  return b;
}

size_t KvCache::kv_offset(int kv_head, int which) const {
  const size_t half = size_t(shape_.kv_heads) * shape_.block_size * shape_.head_dim;
  return which * half + size_t(kv_head) * shape_.block_size * shape_.head_dim;
}

void KvCache::write_kv(int layer, int64_t pos, int kv_head, const float* k, const float* v) {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size, hd = shape_.head_dim;
  std::byte* page = kv_pages_[size_t(layer)][size_t(block)].get();
  const size_t kt = kv_offset(kv_head, 0), vs = kv_offset(kv_head, 1) + size_t(s) * hd;  // K [hd][B], V row s
  for (int d = 0; d < hd; ++d) store_elem(page, shape_.dtype, kt + size_t(d) * B + s, k[d]);
  for (int d = 0; d < hd; ++d) store_elem(page, shape_.dtype, vs + size_t(d), v[d]);
}

void KvCache::read_kv(int layer, int64_t pos, int kv_head, float* k, float* v) const {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size, hd = shape_.head_dim;
  const std::byte* page = kv_page(layer, block);
  const size_t kt = kv_offset(kv_head, 0), vs = kv_offset(kv_head, 1) + size_t(s) * hd;
  for (int d = 0; d < hd; ++d) k[d] = load_elem(page, shape_.dtype, kt + size_t(d) * B + s);
  for (int d = 0; d < hd; ++d) v[d] = load_elem(page, shape_.dtype, vs + size_t(d));
}

void KvCache::write_index_k(int layer, int64_t pos, const float* ik) {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size;
  std::byte* page = index_pages_[size_t(layer)][size_t(block)].get();
  for (int d = 0; d < shape_.index_dim; ++d) store_elem(page, shape_.dtype, size_t(d) * B + s, ik[d]);
}

void KvCache::read_index_k(int layer, int64_t pos, float* ik) const {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size;
  const std::byte* page = index_page(layer, block);
  for (int d = 0; d < shape_.index_dim; ++d) ik[d] = load_elem(page, shape_.dtype, size_t(d) * B + s);
}

// The pages are allocated as bytes by operator new[] (aligned for any scalar), and each holds only
// elements of the cache's one dtype, so viewing them as float or uint16_t arrays is sound.
const float* KvCache::k_block_t(int layer, int64_t block, int kv_head) const {
  check_dtype(DType::F32, "k_block_t");
  return reinterpret_cast<const float*>(kv_page(layer, block)) + kv_offset(kv_head, 0);
}
const uint16_t* KvCache::k_block_t_bf16(int layer, int64_t block, int kv_head) const {
  check_dtype(DType::BF16, "k_block_t_bf16");
  return reinterpret_cast<const uint16_t*>(kv_page(layer, block)) + kv_offset(kv_head, 0);
}
const float* KvCache::v_block(int layer, int64_t block, int kv_head) const {
  check_dtype(DType::F32, "v_block");
  return reinterpret_cast<const float*>(kv_page(layer, block)) + kv_offset(kv_head, 1);
}
const uint16_t* KvCache::v_block_bf16(int layer, int64_t block, int kv_head) const {
  check_dtype(DType::BF16, "v_block_bf16");
  return reinterpret_cast<const uint16_t*>(kv_page(layer, block)) + kv_offset(kv_head, 1);
}
const float* KvCache::index_k_block_t(int layer, int64_t block) const {
  check_dtype(DType::F32, "index_k_block_t");
  return reinterpret_cast<const float*>(index_page(layer, block));
}
const uint16_t* KvCache::index_k_block_t_bf16(int layer, int64_t block) const {
  check_dtype(DType::BF16, "index_k_block_t_bf16");
  return reinterpret_cast<const uint16_t*>(index_page(layer, block));
}

}  // namespace m3

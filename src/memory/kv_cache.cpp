#include "memory/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "m3/error.h"
#include "format/mxfp8_quantize.h"
#include "memory/page_arena.h"

namespace m3 {

namespace {

// One stored element of f32 or bf16: fp32 as is, bf16 rounded to nearest even.
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

// One vector of n values (a token's key, value or index key) into a page: elements at
// page[first + i * stride], in the cache's dtype; on an FP8 page its scale byte at page[scale_at].
void store_vector(std::byte* page, DType t, size_t first, size_t stride, int n, const float* x, size_t scale_at) {
  if (t != DType::F8_E4M3) {
    for (int i = 0; i < n; ++i) store_elem(page, t, first + size_t(i) * stride, x[i]);
    return;
  }
  const uint8_t s = fp8_vector_scale(x, n);
  const float inv = 1.0f / ue8m0_to_f32(s);  // a power of two: exact
  for (int i = 0; i < n; ++i) page[first + size_t(i) * stride] = std::byte(f32_to_f8e4m3(x[i] * inv));
  page[scale_at] = std::byte(s);
}

void load_vector(const std::byte* page, DType t, size_t first, size_t stride, int n, float* x, size_t scale_at) {
  if (t != DType::F8_E4M3) {
    for (int i = 0; i < n; ++i) x[i] = load_elem(page, t, first + size_t(i) * stride);
    return;
  }
  const float s = ue8m0_to_f32(uint8_t(page[scale_at]));
  for (int i = 0; i < n; ++i) x[i] = f8e4m3_to_f32(uint8_t(page[first + size_t(i) * stride])) * s;
}

}  // namespace

uint8_t fp8_vector_scale(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  // The smallest e with amax / 2^e <= 448, in [-126, 119]: 2^e stays a normal fp32, and so does
  // the kernels' 2^(e+8) (LoadScales in attention_simd-inl.h). Only magnitudes past 448 x 2^119
  // (3e38, near fp32's limit) saturate.
  int e = 0;
  if (amax > 0.0f && std::isfinite(amax)) {
    e = int(std::ceil(std::log2(double(amax) / 448.0)));
    while (e > -126 && double(amax) <= 448.0 * std::ldexp(1.0, e - 1)) --e;  // log2's rounding
    while (e < 119 && double(amax) > 448.0 * std::ldexp(1.0, e)) ++e;
    e = std::clamp(e, -126, 119);
  }
  return uint8_t(127 + e);
}

std::optional<DType> parse_cache_type(std::string_view name) {
  if (name == "f32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "fp8") return DType::F8_E4M3;
  return std::nullopt;
}

const char* cache_type_name(DType t) { return t == DType::BF16 ? "bf16" : t == DType::F8_E4M3 ? "fp8" : "f32"; }

void check_cache_page_type(DType have, DType want) {
  M3_CHECK(have == want, "KvCache: the page holds ", cache_type_name(have), ", read as ", cache_type_name(want));
}

KvCache::KvCache(KvCacheShape shape) : shape_(std::move(shape)) {
  M3_CHECK(shape_.block_size > 0 && shape_.kv_heads > 0 && shape_.head_dim > 0, "KvCache: bad shape");
  M3_CHECK(shape_.dtype == DType::F32 || shape_.dtype == DType::BF16 || shape_.dtype == DType::F8_E4M3,
           "KvCache: the cache type must be f32, bf16 or fp8, not ",
           dtype_name(shape_.dtype));
  kv_pages_.resize(size_t(shape_.num_layers));
  index_pages_.resize(size_t(shape_.num_layers));
}

namespace {

std::shared_ptr<std::byte[]> new_page(size_t bytes) { return allocate_cache_page(bytes); }

std::shared_ptr<std::byte[]> copy_page(const std::shared_ptr<std::byte[]>& page, size_t bytes) {
  std::shared_ptr<std::byte[]> c = allocate_cache_page(bytes);
  std::memcpy(c.get(), page.get(), bytes);
  return c;
}

}  // namespace

void KvCache::ensure_capacity(int64_t tokens) {
  const int64_t blocks = (tokens + shape_.block_size - 1) / shape_.block_size;
  for (int l = 0; l < shape_.num_layers; ++l) {
    auto& kv = kv_pages_[size_t(l)];
    while (int64_t(kv.size()) < blocks) kv.push_back(new_page(kv_page_bytes()));
    if (shape_.layer_has_index[size_t(l)]) {
      auto& ix = index_pages_[size_t(l)];
      while (int64_t(ix.size()) < blocks) ix.push_back(new_page(index_page_bytes()));
    }
  }
}

void KvCache::prepare_write(int64_t from, int64_t to) {
  ensure_capacity(to);
  if (to <= from) return;
  const int64_t b0 = from / shape_.block_size, b1 = (to - 1) / shape_.block_size + 1;
  auto unshare = [&](PageTable& table, size_t bytes) {
    for (auto& layer : table)
      for (int64_t b = b0; b < std::min<int64_t>(b1, int64_t(layer.size())); ++b)
        if (layer[size_t(b)].use_count() > 1) layer[size_t(b)] = copy_page(layer[size_t(b)], bytes);
  };
  unshare(kv_pages_, kv_page_bytes());
  unshare(index_pages_, index_page_bytes());
}

std::unique_ptr<KvCache> KvCache::prefix_of(const KvCache& src, int64_t tokens) {
  M3_CHECK(tokens >= 0 && tokens <= src.length(), "KvCache::prefix_of: ", tokens, " > ", src.length(), " tokens");
  auto dst = std::make_unique<KvCache>(src.shape_);
  const int64_t B = src.shape_.block_size, whole = tokens / B, blocks = (tokens + B - 1) / B;
  auto take = [&](const PageTable& from, PageTable& to, size_t bytes) {
    for (size_t l = 0; l < from.size(); ++l) {
      if (from[l].empty()) continue;  // a layer without index pages
      for (int64_t b = 0; b < whole; ++b) to[l].push_back(from[l][size_t(b)]);
      // The partial last block: the source goes on writing into it, so it is copied.
      if (blocks > whole && int64_t(from[l].size()) > whole) to[l].push_back(copy_page(from[l][size_t(whole)], bytes));
    }
  };
  take(src.kv_pages_, dst->kv_pages_, src.kv_page_bytes());
  take(src.index_pages_, dst->index_pages_, src.index_page_bytes());
  dst->length_ = tokens;
  return dst;
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
  for (const auto& l : kv_pages_) b += l.size() * kv_page_bytes();
  for (const auto& l : index_pages_) b += l.size() * index_page_bytes();
  return b;
}

void KvCache::collect_pages(std::unordered_map<const void*, size_t>& pages) const {
  for (const auto& l : kv_pages_)
    for (const Page& p : l) pages.emplace(p.get(), kv_page_bytes());
  for (const auto& l : index_pages_)
    for (const Page& p : l) pages.emplace(p.get(), index_page_bytes());
}

int64_t KvCache::shared_pages() const {
  int64_t n = 0;
  for (const PageTable* t : {&kv_pages_, &index_pages_})
    for (const auto& l : *t)
      for (const Page& p : l) n += p.use_count() > 1;
  return n;
}

void KvCache::write_kv(int layer, int64_t pos, int kv_head, const float* k, const float* v) {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size, hd = shape_.head_dim;
  const Page& shared = kv_pages_[size_t(layer)][size_t(block)];
  M3_CHECK(shared.use_count() == 1, "KvCache::write_kv: block ", block, " is shared (call prepare_write first)");
  std::byte* page = shared.get();
  const size_t kt = kv_offset(kv_head, 0), vs = kv_offset(kv_head, 1) + size_t(s) * hd;  // K [hd][B], V row s
  store_vector(page, shape_.dtype, kt + size_t(s), size_t(B), hd, k, kv_scale_offset(kv_head, 0) + size_t(s));
  store_vector(page, shape_.dtype, vs, 1, hd, v, kv_scale_offset(kv_head, 1) + size_t(s));
}

void KvCache::read_kv(int layer, int64_t pos, int kv_head, float* k, float* v) const {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size, hd = shape_.head_dim;
  const std::byte* page = kv_page(layer, block);
  const size_t kt = kv_offset(kv_head, 0), vs = kv_offset(kv_head, 1) + size_t(s) * hd;
  load_vector(page, shape_.dtype, kt + size_t(s), size_t(B), hd, k, kv_scale_offset(kv_head, 0) + size_t(s));
  load_vector(page, shape_.dtype, vs, 1, hd, v, kv_scale_offset(kv_head, 1) + size_t(s));
}

void KvCache::write_index_k(int layer, int64_t pos, const float* ik) {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size;
  const Page& shared = index_pages_[size_t(layer)][size_t(block)];
  M3_CHECK(shared.use_count() == 1, "KvCache::write_index_k: block ", block, " is shared (call prepare_write first)");
  store_vector(shared.get(), shape_.dtype, size_t(s), size_t(B), shape_.index_dim, ik, index_page_elems() + size_t(s));
}

void KvCache::read_index_k(int layer, int64_t pos, float* ik) const {
  const int64_t block = pos / shape_.block_size;
  const int s = int(pos % shape_.block_size), B = shape_.block_size;
  load_vector(index_page(layer, block), shape_.dtype, size_t(s), size_t(B), shape_.index_dim, ik,
              index_page_elems() + size_t(s));
}

// The pages are allocated as bytes, 64-byte aligned (memory/page_arena.h), and each holds only
// elements of the cache's one dtype (then, on FP8 pages, scale bytes), so viewing them as float,
// uint16_t or uint8_t arrays is sound.
CachePageView KvCache::index_k_block_t(int layer, int64_t block) const {
  CachePageView v = view(index_page(layer, block), 0);
  if (fp8()) v.scales = reinterpret_cast<const uint8_t*>(index_page(layer, block) + index_page_elems());
  return v;
}

}  // namespace m3

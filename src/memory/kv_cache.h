#pragma once
// The per-sequence cache, paged by MSA block: one page holds the K and V of one block_size-token
// block of one layer, so a selected block is one contiguous page. Within a page, K is stored
// transposed per KV head, K[kv_head][dim][slot], so the attention kernels load one dimension of 16
// consecutive keys as a vector; V is natural, V[kv_head][slot][dim]. MSA layers also keep an
// index-K page per block, transposed the same way: [index_dim][slot].
// Element type: fp32, bf16 (the spec's reference cache dtype, §2.6; the default) or fp8 (E4M3).
// A bf16 cache rounds K, V and index keys to nearest even when they are written, and the attention
// kernels widen them back to fp32 on load, so only the stored values lose precision, never the math.
// An fp8 cache stores each key, value and index key vector (one token, one KV head) as E4M3 bytes
// times its own power-of-two scale, one UE8M0 byte per vector: the smallest 2^e with the vector's
// largest magnitude / 2^e <= 448, as an MXFP8 block (format/mxfp8_quantize.h) of head_dim elements.
// A token's scale depends on that token alone, so what is stored never depends on how the tokens
// were batched. The scales of a page follow its elements: [kv_head][slot] for K, then for V, and
// [slot] on an index page.
//
// Pages are reference-counted: caches made by prefix_of() share the pages of the prefix's whole
// blocks with their source (a system prompt's K/V is held once however many sequences use it), and
// a page is copied only when a shared page must be written (copy on write, in prepare_write).
// A cache is used by one thread at a time; caches that share pages may be used by different threads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "m3/dtype.h"

namespace m3 {

struct KvCacheShape {
  int num_layers = 0;
  int block_size = 128;
  int kv_heads = 0;
  int head_dim = 0;
  int index_dim = 0;
  std::vector<bool> layer_has_index;  // MSA layers
  DType dtype = DType::F32;           // F32, BF16 or F8_E4M3, for K, V and index-K alike
};

// The UE8M0 scale byte an FP8 cache stores a vector of n values with: 127 + e for the smallest e
// with max|x| / 2^e <= 448, e in [-126, 119] (127 for an all-zero vector).
uint8_t fp8_vector_scale(const float* x, int n);

// Throws m3::Error when a page of type `have` is read as `want`.
void check_cache_page_type(DType have, DType want);


// A page of one block (or part of it) with its element type: float for an F32 cache, the 16-bit
// patterns for a BF16 one, E4M3 bytes for an FP8 one (whose `scales` hold one UE8M0 byte per
// slot). as<T>() checks that T is the page's type.
struct CachePageView {
  const std::byte* data = nullptr;
  DType dtype = DType::F32;
  const uint8_t* scales = nullptr;  // FP8 pages: [block_size]

  template <typename T>
  const T* as() const;
};

class KvCache {
 public:
  explicit KvCache(KvCacheShape shape);

  // A new cache holding the first `tokens` positions of `src` (tokens <= src.length()): the pages of
  // whole blocks are shared, a partial last block is copied.
  static std::unique_ptr<KvCache> prefix_of(const KvCache& src, int64_t tokens);

  const KvCacheShape& shape() const { return shape_; }
  DType dtype() const { return shape_.dtype; }
  int64_t length() const { return length_; }      // tokens whose K/V are stored
  void set_length(int64_t n);                      // after a forward pass wrote positions < n
  void ensure_capacity(int64_t tokens);            // pages for positions < tokens
  // Before positions [from, to) are written: pages for them exist and none is shared.
  void prepare_write(int64_t from, int64_t to);
  void truncate(int64_t tokens);                   // forget positions >= tokens (drops whole pages)
  int64_t num_pages() const;
  // Bytes of the pages this cache holds, shared pages counted in full.
  uint64_t bytes() const;
  // Adds every page this cache holds to `pages` (identity -> bytes): the bytes several caches
  // really use are those of the union of their pages (what /metrics reports).
  void collect_pages(std::unordered_map<const void*, size_t>& pages) const;
  // Pages this cache shares with at least one other cache.
  int64_t shared_pages() const;

  // Stores the key and value (head_dim each) of one token and KV head, rounded to the cache dtype.
  void write_kv(int layer, int64_t pos, int kv_head, const float* k, const float* v);
  void write_index_k(int layer, int64_t pos, const float* ik);  // (index_dim)
  // The stored values of one token, widened to fp32 (exact: every stored value is an fp32).
  void read_kv(int layer, int64_t pos, int kv_head, float* k, float* v) const;
  void read_index_k(int layer, int64_t pos, float* ik) const;

  // Pages for the kernels. Keys of one block and KV head, transposed: [head_dim][block_size].
  CachePageView k_block_t(int layer, int64_t block, int kv_head) const;
  // Values of one block and KV head: [block_size][head_dim].
  CachePageView v_block(int layer, int64_t block, int kv_head) const;
  // Index keys of one block, transposed: [index_dim][block_size].
  CachePageView index_k_block_t(int layer, int64_t block) const;

 private:
  // Element offset of (kv_head, which = 0 K / 1 V) inside a KV page.
  size_t kv_offset(int kv_head, int which) const;
  using Page = std::shared_ptr<std::byte[]>;
  using PageTable = std::vector<std::vector<Page>>;  // [layer][block]
  const std::byte* kv_page(int layer, int64_t block) const { return kv_pages_[size_t(layer)][size_t(block)].get(); }
  const std::byte* index_page(int layer, int64_t block) const { return index_pages_[size_t(layer)][size_t(block)].get(); }
  CachePageView view(const std::byte* page, size_t elem_offset) const;
  size_t kv_page_elems() const { return size_t(2) * shape_.kv_heads * shape_.block_size * shape_.head_dim; }
  size_t index_page_elems() const { return size_t(shape_.block_size) * shape_.index_dim; }
  size_t elem_bytes() const { return shape_.dtype == DType::F32 ? 4 : shape_.dtype == DType::BF16 ? 2 : 1; }  // the constructor's three
  bool fp8() const { return shape_.dtype == DType::F8_E4M3; }
  // Page sizes: the elements, then on FP8 pages one scale byte per stored vector.
  size_t kv_page_bytes() const {
    return kv_page_elems() * elem_bytes() + (fp8() ? size_t(2) * shape_.kv_heads * shape_.block_size : 0);
  }
  size_t index_page_bytes() const { return index_page_elems() * elem_bytes() + (fp8() ? size_t(shape_.block_size) : 0); }
  // Byte offset of the scales of (kv_head, which) inside an FP8 KV page, [block_size] of them.
  size_t kv_scale_offset(int kv_head, int which) const {
    return kv_page_elems() + (size_t(which) * shape_.kv_heads + size_t(kv_head)) * shape_.block_size;
  }

  KvCacheShape shape_;
  int64_t length_ = 0;
  PageTable kv_pages_;
  PageTable index_pages_;  // MSA layers only
};

template <typename T>
const T* CachePageView::as() const {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint16_t> || std::is_same_v<T, uint8_t>,
                "cache pages hold float, bf16 bits or E4M3 bytes");
  const DType want = std::is_same_v<T, float> ? DType::F32 : std::is_same_v<T, uint16_t> ? DType::BF16 : DType::F8_E4M3;
  if (dtype != want) check_cache_page_type(dtype, want);
  return reinterpret_cast<const T*>(data);
}

// The page lookups are inline: a sparse row with small blocks (the tiny preset's) makes one per
// selected block and kernel call, and the calls were 5% of its attention.
inline size_t KvCache::kv_offset(int kv_head, int which) const {
  const size_t half = size_t(shape_.kv_heads) * shape_.block_size * shape_.head_dim;
  return which * half + size_t(kv_head) * shape_.block_size * shape_.head_dim;
}
inline CachePageView KvCache::view(const std::byte* page, size_t elem_offset) const {
  return CachePageView{page + elem_offset * elem_bytes(), shape_.dtype};
}
inline CachePageView KvCache::k_block_t(int layer, int64_t block, int kv_head) const {
  CachePageView v = view(kv_page(layer, block), kv_offset(kv_head, 0));
  if (fp8()) v.scales = reinterpret_cast<const uint8_t*>(kv_page(layer, block) + kv_scale_offset(kv_head, 0));
  return v;
}
inline CachePageView KvCache::v_block(int layer, int64_t block, int kv_head) const {
  CachePageView v = view(kv_page(layer, block), kv_offset(kv_head, 1));
  if (fp8()) v.scales = reinterpret_cast<const uint8_t*>(kv_page(layer, block) + kv_scale_offset(kv_head, 1));
  return v;
}

}  // namespace m3

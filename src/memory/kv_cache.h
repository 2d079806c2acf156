#pragma once
// The per-sequence cache, paged by MSA block: one page holds the K and V of one block_size-token
// block of one layer, so a selected block is one contiguous page. Within a page, K is stored
// transposed per KV head, K[kv_head][dim][slot], so the attention kernels load one dimension of 16
// consecutive keys as a vector; V is natural, V[kv_head][slot][dim]. MSA layers also keep an
// index-K page per block, transposed the same way: [index_dim][slot].
// Element type: fp32 (default) or bf16 (the spec's reference cache dtype, §2.6; --cache-type bf16).
// A bf16 cache rounds K, V and index keys to nearest even when they are written, and the attention
// kernels widen them back to fp32 on load, so only the stored values lose precision, never the math.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "base/dtype.h"

namespace m3 {

struct KvCacheShape {
  int num_layers = 0;
  int block_size = 128;
  int kv_heads = 0;
  int head_dim = 0;
  int index_dim = 0;
  std::vector<bool> layer_has_index;  // MSA layers
  DType dtype = DType::F32;           // F32 or BF16, for K, V and index-K alike
};

// The --cache-type spellings: "f32", "bf16".
std::optional<DType> parse_cache_type(std::string_view name);
const char* cache_type_name(DType t);

class KvCache {
 public:
  explicit KvCache(KvCacheShape shape);

  const KvCacheShape& shape() const { return shape_; }
  DType dtype() const { return shape_.dtype; }
  int64_t length() const { return length_; }      // tokens whose K/V are stored
  void set_length(int64_t n);                      // after a forward pass wrote positions < n
  void ensure_capacity(int64_t tokens);            // pages for positions < tokens
  void truncate(int64_t tokens);                   // forget positions >= tokens (frees whole pages)
  int64_t num_pages() const;
  uint64_t bytes() const;

  // Stores the key and value (head_dim each) of one token and KV head, rounded to the cache dtype.
  void write_kv(int layer, int64_t pos, int kv_head, const float* k, const float* v);
  void write_index_k(int layer, int64_t pos, const float* ik);  // (index_dim)
  // The stored values of one token, widened to fp32 (exact: every stored value is an fp32).
  void read_kv(int layer, int64_t pos, int kv_head, float* k, float* v) const;
  void read_index_k(int layer, int64_t pos, float* ik) const;

  // Raw pages for the kernels. The float accessors need an F32 cache, the _bf16 ones a BF16 cache
  // (bf16 values as their 16-bit patterns).
  // Keys of one block and KV head, transposed: [head_dim][block_size].
  const float* k_block_t(int layer, int64_t block, int kv_head) const;
  const uint16_t* k_block_t_bf16(int layer, int64_t block, int kv_head) const;
  // Values of one block and KV head: [block_size][head_dim].
  const float* v_block(int layer, int64_t block, int kv_head) const;
  const uint16_t* v_block_bf16(int layer, int64_t block, int kv_head) const;
  // Index keys of one block, transposed: [index_dim][block_size].
  const float* index_k_block_t(int layer, int64_t block) const;
  const uint16_t* index_k_block_t_bf16(int layer, int64_t block) const;

 private:
  // Element offset of (kv_head, which = 0 K / 1 V) inside a KV page.
  size_t kv_offset(int kv_head, int which) const;
  const std::byte* kv_page(int layer, int64_t block) const { return kv_pages_[size_t(layer)][size_t(block)].get(); }
  const std::byte* index_page(int layer, int64_t block) const { return index_pages_[size_t(layer)][size_t(block)].get(); }
  size_t kv_page_elems() const { return size_t(2) * shape_.kv_heads * shape_.block_size * shape_.head_dim; }
  size_t index_page_elems() const { return size_t(shape_.block_size) * shape_.index_dim; }
  size_t elem_bytes() const { return dtype_size(shape_.dtype); }
  void check_dtype(DType want, const char* what) const;

  KvCacheShape shape_;
  int64_t length_ = 0;
  std::vector<std::vector<std::unique_ptr<std::byte[]>>> kv_pages_;     // [layer][block]
  std::vector<std::vector<std::unique_ptr<std::byte[]>>> index_pages_;  // [layer][block], MSA layers only
};

}  // namespace m3

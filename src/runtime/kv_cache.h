#pragma once
// The per-sequence cache, paged by MSA block: one page holds the K and V of one block_size-token
// block of one layer, so a selected block is one contiguous page. Within a page, K is stored
// transposed per KV head, K[kv_head][dim][slot], so the attention kernels load one dimension of 16
// consecutive keys as a vector; V is natural, V[kv_head][slot][dim]. MSA layers also keep an
// index-K page per block, transposed the same way: [index_dim][slot].
// Values are fp32: the engine's activations are fp32 end to end (see docs/ARCHITECTURE.md).
#include <cstdint>
#include <memory>
#include <vector>

namespace m3 {

struct KvCacheShape {
  int num_layers = 0;
  int block_size = 128;
  int kv_heads = 0;
  int head_dim = 0;
  int index_dim = 0;
  std::vector<bool> layer_has_index;  // MSA layers
};

class KvCache {
 public:
  explicit KvCache(KvCacheShape shape);

  const KvCacheShape& shape() const { return shape_; }
  int64_t length() const { return length_; }      // tokens whose K/V are stored
  void set_length(int64_t n);                      // after a forward pass wrote positions < n
  void ensure_capacity(int64_t tokens);            // pages for positions < tokens
  void truncate(int64_t tokens);                   // forget positions >= tokens (frees whole pages)
  int64_t num_pages() const;
  uint64_t bytes() const;

  // Stores the key and value (head_dim each) of one token and KV head.
  void write_kv(int layer, int64_t pos, int kv_head, const float* k, const float* v);
  void write_index_k(int layer, int64_t pos, const float* ik);  // (index_dim)
  // Keys of one block and KV head, transposed: [head_dim][block_size].
  const float* k_block_t(int layer, int64_t block, int kv_head) const { return block_ptr(layer, block, kv_head, 0); }
  // Values of one block and KV head: [block_size][head_dim].
  const float* v_block(int layer, int64_t block, int kv_head) const { return block_ptr(layer, block, kv_head, 1); }
  // Index keys of one block, transposed: [index_dim][block_size].
  const float* index_k_block_t(int layer, int64_t block) const;

 private:
  const float* block_ptr(int layer, int64_t block, int kv_head, int which) const;
  size_t kv_page_floats() const { return size_t(2) * shape_.kv_heads * shape_.block_size * shape_.head_dim; }
  size_t index_page_floats() const { return size_t(shape_.block_size) * shape_.index_dim; }

  KvCacheShape shape_;
  int64_t length_ = 0;
  std::vector<std::vector<std::unique_ptr<float[]>>> kv_pages_;     // [layer][block]
  std::vector<std::vector<std::unique_ptr<float[]>>> index_pages_;  // [layer][block], MSA layers only
};

}  // namespace m3

#pragma once
// The work one forward pass does, from the config alone (and, for bytes, the formats the
// checkpoint stores its linears in): the arithmetic that benchmark figures are read against.
// A multiply-add counts as 2 FLOPs; norms, RoPE, softmax and activations are left out (they are
// O(width) per token next to the O(width^2) linears and the O(context) attention).
#include <cstdint>

#include "m3/dtype.h"
#include "io/model_config.h"

namespace m3 {

class TensorStore;

// Keys the query at position p attends in an MSA layer (spec §4.4): every earlier key while at
// most topk blocks are visible, else topk-1 full ranked blocks plus its own (partial) block.
uint64_t msa_keys(uint64_t p, uint64_t block, uint64_t topk);
// Sum of msa_keys(p) over p < n, one block at a time (n can be 1M+).
uint64_t msa_pairs(uint64_t n, uint64_t block, uint64_t topk);

// The text linears, split by how often a token reads them: parameters, and the bytes stored for
// them in their formats (side tensors such as block scales included).
struct LinearGroup {
  uint64_t params = 0, bytes = 0;
};
struct LinearSizes {
  LinearGroup every_token;  // attention, index, dense MLP, shared expert and router linears
  LinearGroup per_expert;   // one routed expert of one layer (gate + up + down), averaged
  LinearGroup lm_head;      // read once per row that wants logits (the embedding when tied)
};
// From the config's schema, in bf16 (the router in fp32): the release's layout.
LinearSizes linear_sizes(const ModelConfig& cfg);
// As the checkpoint in `store` stores them, bound the way the loader binds them.
LinearSizes linear_sizes(const TensorStore& store, const ModelConfig& cfg);

// One forward pass of `rows` tokens of one sequence at positions depth .. depth+rows-1, the last
// row wanting logits (a prefill chunk, or a decode step when rows = 1).
struct ForwardWork {
  double linear_flops = 0;     // every linear the tokens run through (routed experts: the top-k)
  double attention_flops = 0;  // q.k and p.v: dense layers over every earlier key, MSA over the selected ones
  double index_flops = 0;      // MSA index scores: every index head against every visible index key
  double weight_bytes = 0;     // linears read: each distinct routed expert once (at most rows x top-k of them)
  double cache_bytes = 0;      // K, V and index keys read, each row reading its own
  double flops() const { return linear_flops + attention_flops + index_flops; }
  double bytes() const { return weight_bytes + cache_bytes; }
  ForwardWork& operator+=(const ForwardWork& o) {
    linear_flops += o.linear_flops, attention_flops += o.attention_flops, index_flops += o.index_flops;
    weight_bytes += o.weight_bytes, cache_bytes += o.cache_bytes;
    return *this;
  }
};
// cache_type: the KV and index-K cache's element type (F32, BF16, or F8_E4M3 with one scale byte
// per stored vector).
ForwardWork forward_work(const ModelConfig& cfg, const LinearSizes& linears, uint64_t depth, uint64_t rows,
                         DType cache_type);

}  // namespace m3

// The work per forward pass that `m3 bench` reads its figures against (io/model_work.h): the
// closed forms against sums over every position and key, the linears against the parameter counts
// and against the bytes a checkpoint stores.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "fixtures/random_checkpoint.h"
#include "fixtures/small_config.h"
#include "io/model_config.h"
#include "io/model_work.h"
#include "io/safetensors.h"
#include "io/tensor_schema.h"

namespace m3 {
namespace {

// fixtures/small_config.h with MSA selecting the top 3 blocks of 4 keys.
ModelConfig small_config() {
  ModelConfig a = small_text_config();
  a.text.sparse.sparse_topk_blocks = 3;
  a.validate();
  return a;
}

// Keys the query at p attends in an MSA layer, key by key: its own block up to p, and while more
// than topk blocks are visible, topk-1 other full blocks (which ones does not change the count).
uint64_t keys_by_counting(uint64_t p, uint64_t block, uint64_t topk) {
  const uint64_t own = p / block, visible = own + 1;
  uint64_t keys = 0;
  for (uint64_t key = 0; key <= p; ++key) {
    const uint64_t b = key / block;
    const bool chosen = visible <= topk || b == own || b < topk - 1;  // any topk-1 others: the first ones
    keys += chosen;
  }
  return keys;
}

TEST(ModelWork, MsaKeysAndPairsCountEveryKey) {
  for (uint64_t block : {1u, 4u, 16u})
    for (uint64_t topk : {1u, 2u, 3u, 16u}) {
      uint64_t pairs = 0;
      for (uint64_t p = 0; p < 300; ++p) {
        ASSERT_EQ(msa_keys(p, block, topk), keys_by_counting(p, block, topk)) << p << " " << block << " " << topk;
        pairs += keys_by_counting(p, block, topk);
        ASSERT_EQ(msa_pairs(p + 1, block, topk), pairs) << p << " " << block << " " << topk;
      }
    }
}

TEST(ModelWork, AttentionAndIndexSumEveryRowsKeys) {
  const ModelConfig cfg = small_config();
  const LinearSizes linears = linear_sizes(cfg);
  for (uint64_t depth : {0u, 1u, 7u, 12u, 100u})
    for (uint64_t rows : {1u, 3u, 4u, 33u}) {
      for (DType cache : {DType::F32, DType::BF16, DType::F8_E4M3}) {
        double attention = 0, index = 0, cache_bytes = 0;
        const double elem = cache == DType::F32 ? 4 : cache == DType::BF16 ? 2 : 1;
        const double scale = cache == DType::F8_E4M3 ? 1 : 0;
        for (uint64_t p = depth; p < depth + rows; ++p) {
          const double all = double(p + 1), sparse = double(keys_by_counting(p, 4, 3));
          attention += 4.0 * 4 * 16 * (all + 2 * sparse);  // 4 heads x 16 dims; layer 0 dense, 1-2 MSA
          index += 2.0 * 2 * 16 * 2 * all;                 // 2 index heads x 16 dims, 2 MSA layers
          cache_bytes += 2 * 2 * (16 * elem + scale) * (all + 2 * sparse) + 2 * (16 * elem + scale) * all;
        }
        const ForwardWork w = forward_work(cfg, linears, depth, rows, cache);
        EXPECT_DOUBLE_EQ(w.attention_flops, attention) << depth << " " << rows;
        EXPECT_DOUBLE_EQ(w.index_flops, index) << depth << " " << rows;
        EXPECT_DOUBLE_EQ(w.cache_bytes, cache_bytes) << depth << " " << rows << " " << dtype_name(cache);
      }
    }
}

TEST(ModelWork, LinearsCountEveryMatrixOnceAndTheTopKExperts) {
  const ModelConfig cfg = small_config();
  const LinearSizes s = linear_sizes(cfg);
  // By hand: q 64x64, k and v 32x64, o 64x64 per layer; index q 32x64 and k 16x64 per MSA layer;
  // layer 0's MLP 3 x 96x64; per MoE layer the router 4x64 (fp32), the shared expert 3 x 32x64;
  // an expert 3 x 32x64; lm_head 300x64.
  const uint64_t attention = 64 * 64 + 2 * 32 * 64 + 64 * 64, index = 32 * 64 + 16 * 64;
  const uint64_t mlp = 3 * 96 * 64, router = 4 * 64, expert = 3 * 32 * 64;
  EXPECT_EQ(s.every_token.params, 3 * attention + 2 * index + mlp + 2 * (router + expert));
  EXPECT_EQ(s.every_token.bytes, 2 * (s.every_token.params - 2 * router) + 4 * 2 * router);
  EXPECT_EQ(s.per_expert.params, expert);
  EXPECT_EQ(s.per_expert.bytes, 2 * expert);
  EXPECT_EQ(s.lm_head.params, 300u * 64);

  // A token runs through every shared linear and 2 of the 4 experts of each MoE layer; only the
  // last row of a pass through lm_head. Weights are read once per pass, each distinct expert once.
  for (uint64_t rows : {1u, 2u, 5u}) {
    const ForwardWork w = forward_work(cfg, s, 10, rows, DType::BF16);
    EXPECT_DOUBLE_EQ(w.linear_flops, 2.0 * (rows * (s.every_token.params + 2 * 2 * expert) + 300 * 64));
    const double experts_read = std::min(4.0, 2.0 * rows);
    EXPECT_DOUBLE_EQ(w.weight_bytes, double(s.every_token.bytes) + 2 * experts_read * 2 * expert + 2 * 300 * 64);
  }

  ModelConfig tied = cfg;
  tied.text.tie_word_embeddings = true;
  EXPECT_EQ(linear_sizes(tied).lm_head.params, 300u * 64);  // the embedding, read as lm_head
}

// A checkpoint in the MXFP8 release's layout: the linears' bytes are their e4m3 values plus one
// scale byte per 32, the ignored ones (router, lm_head) as stored; with the embedding and the
// vectors they account for every byte of the files.
TEST(ModelWork, StoredBytesOfAnMxfp8CheckpointAccountForEveryTensor) {
  const std::string dir = testing::TempDir() + "/m3_model_work_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  RandomCheckpointOptions o;
  o.preset = "tiny";
  o.seed = 5;
  o.out_dir = dir;
  o.weights = "mxfp8";
  make_random_checkpoint(o);
  const ModelConfig cfg = ModelConfig::from_file(dir + "/config.json");
  const TensorStore store = TensorStore::open_dir(dir);
  const LinearSizes stored = linear_sizes(store, cfg), release = linear_sizes(cfg);
  const TextConfig& t = cfg.text;

  EXPECT_EQ(stored.every_token.params, release.every_token.params);
  EXPECT_EQ(stored.per_expert.params, release.per_expert.params);
  uint64_t moe_layers = 0, router = 0;
  for (int l = 0; l < t.num_hidden_layers; ++l) moe_layers += t.is_moe_layer(l);
  router = moe_layers * uint64_t(t.num_local_experts) * uint64_t(t.hidden_size);
  EXPECT_EQ(stored.every_token.bytes, (stored.every_token.params - router) / 32 * 33 + 4 * router);
  EXPECT_EQ(stored.per_expert.bytes, stored.per_expert.params / 32 * 33);
  EXPECT_EQ(stored.lm_head.bytes, release.lm_head.bytes);  // ignored layer: bf16 as released

  uint64_t other = 0;  // the embedding and every vector
  for (const TensorSpec& spec : text_tensor_schema(t))
    if (spec.storage != TensorStorage::Linear) other += store.get(spec.name).nbytes;
  const uint64_t experts = moe_layers * uint64_t(t.num_local_experts) * stored.per_expert.bytes;
  EXPECT_EQ(stored.every_token.bytes + experts + stored.lm_head.bytes + other, store.total_bytes());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace m3

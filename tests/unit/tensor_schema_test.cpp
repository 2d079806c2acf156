// The tensor schema (io/tensor_schema.h): the real M3 config gives the release's exact inventory
// through it, and a checkpoint written by the fixtures holds exactly the schema's tensors, which the
// loader then binds (every field of the bound weights comes from one entry).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "m3/error.h"
#include "fixtures/random_checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "io/tensor_schema.h"
#include "model/text_weights.h"
#include "vision/vision_weights.h"

using namespace m3;

namespace {

ModelConfig real_config() { return ModelConfig::from_file(std::string(M3_SOURCE_DIR) + "/configs/MiniMax-M3/config.json"); }

const TensorSpec& find(const std::vector<TensorSpec>& schema, const std::string& name) {
  for (const TensorSpec& s : schema)
    if (s.name == name) return s;
  throw std::runtime_error("no tensor " + name);
}

}  // namespace

TEST(TensorSchema, RealConfigIsTheReleaseInventory) {
  const std::vector<TensorSpec> schema = tensor_schema(real_config());
  EXPECT_EQ(schema.size(), 23'416u);  // spec §0 [CFG], [MBV]
  uint64_t params = 0, bytes = 0;
  std::set<std::string> names;
  for (const TensorSpec& s : schema) {
    params += uint64_t(s.numel());
    bytes += uint64_t(s.numel()) * dtype_size(s.release_dtype);
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate " << s.name;
  }
  EXPECT_EQ(params, 427'040'140'160u);
  EXPECT_EQ(bytes, 854'172'958'720u);

  const TensorSpec& iq = find(schema, "language_model.model.layers.3.self_attn.index_q_proj.weight");
  EXPECT_EQ(iq.shape, (std::vector<int64_t>{512, 6144}));
  EXPECT_EQ(iq.role, TensorRole::IndexQProj);
  EXPECT_EQ(iq.storage, TensorStorage::Linear);
  EXPECT_EQ(iq.layer, 3);
  EXPECT_THROW(find(schema, "language_model.model.layers.2.self_attn.index_q_proj.weight"), std::runtime_error);
  const TensorSpec& gate = find(schema, "language_model.model.layers.59.block_sparse_moe.gate.weight");
  EXPECT_EQ(gate.release_dtype, DType::F32);
  const TensorSpec& w2 = find(schema, "language_model.model.layers.40.block_sparse_moe.experts.127.w2.weight");
  EXPECT_EQ(w2.shape, (std::vector<int64_t>{6144, 3072}));
  EXPECT_EQ(w2.expert, 127);
  EXPECT_EQ(w2.role, TensorRole::ExpertDown);
  const TensorSpec& patch = find(schema, "vision_tower.vision_model.embeddings.patch_embedding.weight");
  EXPECT_EQ(patch.shape, (std::vector<int64_t>{1280, 3, 2, 14, 14}));
  EXPECT_EQ(patch.cols(), 1176);
  EXPECT_EQ(patch.part, ModelPart::VisionTower);
  const TensorSpec& merger_bias = find(schema, "patch_merge_mlp.linear_1.bias");
  EXPECT_TRUE(merger_bias.bias);
  EXPECT_EQ(merger_bias.part, ModelPart::Projector);
  EXPECT_EQ(merger_bias.storage, TensorStorage::Vector);
}

TEST(TensorSchema, TiedEmbeddingsHaveNoLmHead) {
  ModelConfig c = real_config();
  c.text.tie_word_embeddings = true;
  const std::vector<TensorSpec> schema = tensor_schema(c);
  EXPECT_EQ(schema.size(), 23'415u);
  EXPECT_THROW(find(schema, "language_model.lm_head.weight"), std::runtime_error);
}

TEST(TensorSchema, InvalidConfigIsRefused) {
  ModelConfig c = real_config();
  c.text.num_key_value_heads = 5;  // 64 query heads do not split into 5 groups
  EXPECT_THROW(tensor_schema(c), Error);
}

TEST(TensorSchema, FixtureCheckpointHoldsExactlyTheSchemaAndBinds) {
  const std::string dir = testing::TempDir() + "/m3_schema_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  RandomCheckpointOptions o;
  o.preset = "tiny-vl";
  o.seed = 3;
  o.out_dir = dir;
  make_random_checkpoint(o);
  const ModelConfig cfg = ModelConfig::from_file(dir + "/config.json");
  const TensorStore store = TensorStore::open_dir(dir);
  const std::vector<TensorSpec> schema = tensor_schema(cfg);
  ASSERT_EQ(store.size(), schema.size());
  for (const TensorSpec& s : schema) {
    const TensorView* t = store.find(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->shape, s.shape) << s.name;
    EXPECT_EQ(t->dtype, s.release_dtype) << s.name;
  }
  const TextWeights tw = bind_text_weights(store, cfg.text);
  ASSERT_EQ(tw.layers.size(), size_t(cfg.text.num_hidden_layers));
  EXPECT_EQ(tw.layers[1].moe.experts.size(), size_t(cfg.text.num_local_experts));
  EXPECT_NE(tw.layers[1].moe.experts.back().down.data, nullptr);
  EXPECT_NE(tw.layers[1].attn.index_k.data, nullptr);
  EXPECT_EQ(tw.layers[0].attn.index_k.data, nullptr);  // the dense layer has no index branch
  EXPECT_EQ(tw.lm_head.rows, cfg.text.vocab_size);
  const vision::VisionWeights vw = vision::bind_vision_weights(store, cfg);
  EXPECT_EQ(vw.patch_embedding.cols, cfg.vision->patch_input_dim());
  EXPECT_EQ(vw.merger_2.b.size(), size_t(cfg.projector_hidden_size));
  EXPECT_EQ(vw.layers.back().ln2.bias.size(), size_t(cfg.vision->hidden_size));
  std::filesystem::remove_all(dir);
}

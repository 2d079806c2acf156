// ModelConfig: the real M3 config parses and reproduces the release's exact parameter, tensor and
// byte counts (spec §2.6, [MBV]); configs round-trip; every bad config gets an m3::Error that
// names the key.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "m3/error.h"
#include "fixtures/random_checkpoint.h"
#include "fixtures/small_config.h"
#include "io/model_config.h"

namespace m3 {
namespace {

using nlohmann::json;

std::string real_config_path() {
  return std::string(M3_SOURCE_DIR) + "/configs/MiniMax-M3/config.json";
}

json real_json() {
  std::ifstream in(real_config_path());
  EXPECT_TRUE(in) << real_config_path();
  return json::parse(in);
}

ModelConfig parse(const json& j) { return ModelConfig::from_json_text(j.dump(), "config.json"); }

// Parses a mutated config and checks the error names every given fragment (the key, mostly).
void expect_error(const json& j, std::initializer_list<std::string> fragments) {
  try {
    parse(j);
    ADD_FAILURE() << "no error for config; expected one naming " << *fragments.begin();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("config.json: ", 0), 0u) << msg;  // names the file first
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

json mutated(const std::function<void(json&)>& change) {
  json j = real_json();
  change(j);
  return j;
}

TEST(ModelConfig, RealConfigParses) {
  ModelConfig c = ModelConfig::from_file(real_config_path());
  EXPECT_EQ(c.model_type, "minimax_m3_vl");
  ASSERT_EQ(c.architectures.size(), 1u);
  EXPECT_EQ(c.architectures[0], "MiniMaxM3SparseForConditionalGeneration");
  EXPECT_EQ(c.image_token_index, 200025);
  EXPECT_EQ(c.video_token_index, 200026);
  EXPECT_EQ(c.projector_hidden_size, 6144);
  const TextConfig& t = c.text;
  EXPECT_EQ(t.hidden_size, 6144);
  EXPECT_EQ(t.num_hidden_layers, 60);
  EXPECT_EQ(t.num_attention_heads, 64);
  EXPECT_EQ(t.num_key_value_heads, 4);
  EXPECT_EQ(t.head_dim, 128);
  EXPECT_EQ(t.rotary_dim, 64);
  EXPECT_EQ(t.vocab_size, 200064);
  EXPECT_EQ(t.max_position_embeddings, 1048576);
  EXPECT_DOUBLE_EQ(t.rope_theta, 5e6);
  EXPECT_DOUBLE_EQ(t.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(t.swiglu_alpha, 1.702);
  EXPECT_DOUBLE_EQ(t.swiglu_limit, 7.0);
  EXPECT_DOUBLE_EQ(t.swiglu_beta, 1.0);
  EXPECT_DOUBLE_EQ(t.routed_scaling_factor, 2.0);
  EXPECT_EQ(t.num_local_experts, 128);
  EXPECT_EQ(t.num_experts_per_tok, 4);
  EXPECT_EQ(t.num_mtp_modules, 7);
  EXPECT_FALSE(t.bos_token_id.has_value());
  for (int l = 0; l < 60; ++l) {
    EXPECT_EQ(t.is_moe_layer(l), l >= 3) << l;
    EXPECT_EQ(t.is_sparse_layer(l), l >= 3) << l;
  }
  EXPECT_EQ(t.sparse.sparse_topk_blocks, 16);
  EXPECT_EQ(t.sparse.sparse_block_size, 128);
  EXPECT_EQ(t.sparse.sparse_index_dim, 128);
  EXPECT_EQ(t.sparse.sparse_num_index_heads, 4);
  ASSERT_TRUE(c.vision.has_value());
  EXPECT_EQ(c.vision->hidden_size, 1280);
  EXPECT_EQ(c.vision->head_dim(), 80);
  EXPECT_EQ(c.vision->num_hidden_layers, 32);
  EXPECT_EQ(c.vision->patch_input_dim(), 1176);
  EXPECT_EQ(c.vision->spatial_merge_size, 2);
  EXPECT_EQ(c.vision->temporal_patch_size, 2);
  EXPECT_EQ(c.vision->vision_segment_max_frames, 4);
}

TEST(ModelConfig, RealConfigCountsMatchTheRelease) {
  ModelCounts n = count_model(ModelConfig::from_file(real_config_path()));
  ASSERT_EQ(n.layer_params.size(), 60u);
  EXPECT_EQ(n.layer_params[0], 333'459'712u);    // dense layer
  EXPECT_EQ(n.layer_params[2], 333'459'712u);
  EXPECT_EQ(n.layer_params[3], 7'416'066'688u);  // MSA + MoE layer
  EXPECT_EQ(n.layer_params[59], 7'416'066'688u);
  EXPECT_EQ(n.embedding_params, 1'229'193'216u);
  EXPECT_EQ(n.lm_head_params, 1'229'193'216u);
  EXPECT_EQ(n.text_params, 426'174'572'928u);
  EXPECT_EQ(n.vision_params, 865'567'232u);
  EXPECT_EQ(n.vision_tower_params + n.projector_params, n.vision_params);
  EXPECT_EQ(n.total_params, 427'040'140'160u);
  EXPECT_EQ(n.tensor_count, 23'416u);
  EXPECT_EQ(n.fp32_params, 46'339'200u);  // 57*128*6144 + 57*128 + 1280*1176 (spec §2.5)
  EXPECT_EQ(n.weight_bytes, 854'172'958'720u);
  EXPECT_EQ(n.expert_params, 56'623'104u);
  // text - 57 MoE layers x 124 unselected experts x 56,623,104.
  EXPECT_EQ(n.active_params, 25'962'473'856u);
  EXPECT_EQ(n.kv_bytes_per_token, 122'880u);     // 60 x 2 x 4 x 128 x 2
  EXPECT_EQ(n.index_k_bytes_per_token, 14'592u);  // 57 x 128 x 2
}

TEST(ModelConfig, RoundTrip) {
  ModelConfig a = ModelConfig::from_file(real_config_path());
  std::string text = a.to_json_text();
  ModelConfig b = ModelConfig::from_json_text(text, a.source);
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.to_json_text(), text);
  // The written file has the HF layout.
  json j = json::parse(text);
  EXPECT_TRUE(j["text_config"]["sparse_attention_config"].is_object());
  EXPECT_EQ(j["text_config"]["partial_rotary_factor"], 0.5);
  EXPECT_EQ(j["img_token_compression_config"]["spatial_merge_size"], 2);
  EXPECT_EQ(j["vision_config"]["hidden_size"], 1280);
  EXPECT_FALSE(j["text_config"].contains("swiglu_beta"));
}

// mlx-lm's "quantization" block: defaults, per-module overrides (an object, or false for a module
// left unquantized), the "quantization_config" copy alone, a round trip, and errors naming the key.
TEST(ModelConfig, MlxQuantizationBlockParsesWithOverrides) {
  const json block = {{"group_size", 64}, {"bits", 4}, {"mode", "affine"},
                      {"language_model.model.layers.1.block_sparse_moe.gate", {{"group_size", 64}, {"bits", 8}}},
                      {"language_model.lm_head", false}};
  ModelConfig c = parse(mutated([&](json& j) { j["quantization"] = block; }));
  ASSERT_TRUE(c.quantization.has_value());
  const QuantizationConfig& q = *c.quantization;
  EXPECT_EQ(q.bits, 4);
  EXPECT_EQ(q.group_size, 64);
  EXPECT_EQ(q.expected("language_model.model.layers.1.block_sparse_moe.gate").bits, 8);
  EXPECT_FALSE(q.expected("language_model.lm_head").quantized);
  const QuantizationConfig::Module other = q.expected("language_model.model.layers.0.self_attn.q_proj");
  EXPECT_TRUE(other.quantized);
  EXPECT_EQ(other.bits, 4);
  EXPECT_EQ(other.group_size, 64);
  EXPECT_EQ(parse(json::parse(c.to_json_text())), c);  // round trip
  // mlx-lm's copy under "quantization_config" alone is read the same; the MXFP8 release's is not a block.
  EXPECT_EQ(parse(mutated([&](json& j) { j["quantization_config"] = block; })).quantization, c.quantization);
  EXPECT_FALSE(parse(mutated([&](json& j) {
                 j["quantization_config"] = {{"quant_method", "mxfp8"}, {"weight_block_size", {1, 32}}};
               })).quantization.has_value());
  expect_error(mutated([&](json& j) { j["quantization"] = block; j["quantization"]["mode"] = "mxfp4"; }),
               {"quantization.mode", "mxfp4"});
  expect_error(mutated([&](json& j) { j["quantization"] = block; j["quantization"]["bits"] = 3; }),
               {"quantization.bits", "3-bit"});
  expect_error(mutated([&](json& j) { j["quantization"] = block; j["quantization"]["group_size"] = 48; }),
               {"quantization.group_size", "48"});
  expect_error(mutated([&](json& j) {
                 j["quantization"] = block;
                 j["quantization"]["language_model.lm_head"] = true;
               }),
               {"quantization.language_model.lm_head", "true"});
  expect_error(mutated([&](json& j) {
                 j["quantization"] = block;
                 j["quantization"]["language_model.lm_head"] = {{"bits", 2}};
               }),
               {"quantization.language_model.lm_head.bits", "2-bit"});
}

TEST(ModelConfig, RoundTripOfASmallTextOnlyConfigBuiltInCode) {
  ModelConfig a = small_text_config();
  TextConfig& t = a.text;
  ModelConfig b = ModelConfig::from_json_text(a.to_json_text(), "small.json");
  EXPECT_EQ(a, b);

  // Hand-checkable counts: per layer attn = 2*64 + 64*64 + 2*32*64 + 64*64 + 2*16 = 12,448.
  ModelCounts n = count_model(a);
  EXPECT_EQ(n.layer_params[0], 12'448u + 3u * 64 * 96);
  const uint64_t index = 2 * 16 * 64 + 16 * 64 + 2 * 16;
  const uint64_t moe = (4 * 64 + 4) + 4 * 3 * 64 * 32 + 3 * 64 * 32;
  EXPECT_EQ(n.layer_params[1], 12'448u + index + moe);
  EXPECT_EQ(n.text_params, 2u * 300 * 64 + 64 + n.layer_params[0] + 2 * n.layer_params[1]);
  EXPECT_EQ(n.active_params, n.text_params - 2u * 2 * 3 * 64 * 32);
  EXPECT_EQ(n.tensor_count, 3u + 11 + 2 * (8 + 4 + 2 + 12 + 3));
  EXPECT_EQ(n.vision_params, 0u);
  EXPECT_EQ(n.kv_bytes_per_token, 3u * 2 * 2 * 16 * 2);
  EXPECT_EQ(n.index_k_bytes_per_token, 2u * 16 * 2);
  EXPECT_EQ(n.weight_bytes, 2 * n.total_params + 2u * 2 * (4 * 64 + 4));

  t.tie_word_embeddings = true;
  EXPECT_EQ(count_model(a).text_params, n.text_params - 300u * 64);
}

TEST(ModelConfig, DefaultsForAbsentOptionalKeys) {
  // No sparse_attention_config: dense attention everywhere, no index-K cache.
  ModelConfig c = parse(mutated([](json& j) { j["text_config"].erase("sparse_attention_config"); }));
  EXPECT_FALSE(c.text.is_sparse_layer(10));
  EXPECT_EQ(c.text.sparse.sparse_attention_freq, std::vector<int>(60, 0));
  EXPECT_EQ(count_model(c).index_k_bytes_per_token, 0u);

  // No moe_layer_freq: every layer is a dense MLP layer.
  c = parse(mutated([](json& j) { j["text_config"].erase("moe_layer_freq"); }));
  EXPECT_FALSE(c.text.is_moe_layer(59));
  EXPECT_EQ(count_model(c).layer_params[5], 333'459'712u + 3'932'416u);  // dense + index branch

  // All-MoE: dense_intermediate_size no longer needed.
  c = parse(mutated([](json& j) {
    j["text_config"]["moe_layer_freq"] = std::vector<int>(60, 1);
    j["text_config"].erase("dense_intermediate_size");
  }));
  EXPECT_TRUE(c.text.is_moe_layer(0));

  // head_dim from hidden/heads; rotary_dim alone; partial_rotary_factor alone.
  c = parse(mutated([](json& j) {
    j["text_config"].erase("head_dim");
    j["text_config"].erase("partial_rotary_factor");
  }));
  EXPECT_EQ(c.text.head_dim, 96);
  c = parse(mutated([](json& j) { j["text_config"].erase("rotary_dim"); }));
  EXPECT_EQ(c.text.rotary_dim, 64);

  // No vision_config: a text-only model.
  c = parse(mutated([](json& j) { j.erase("vision_config"); }));
  EXPECT_FALSE(c.vision.has_value());
  EXPECT_EQ(count_model(c).total_params, 426'174'572'928u);

  // sparse_disable_index_value absent: follows sparse_attention_freq.
  c = parse(mutated([](json& j) {
    j["text_config"]["sparse_attention_config"].erase("sparse_disable_index_value");
  }));
  EXPECT_EQ(c.text.sparse.sparse_disable_index_value, c.text.sparse.sparse_attention_freq);

  // Unknown keys are ignored.
  c = parse(mutated([](json& j) {
    j["something_new"] = {1, 2};
    j["text_config"]["another"] = "x";
  }));
  EXPECT_EQ(c.text.hidden_size, 6144);
}

TEST(ModelConfig, WrongTypeNamesKeyAndValue) {
  try {
    parse(mutated([](json& j) { j["text_config"]["num_attention_heads"] = "x"; }));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "config.json: text_config.num_attention_heads: expected a positive integer, got \"x\"");
  }
  expect_error(mutated([](json& j) { j["text_config"]["use_gemma_norm"] = 1; }),
               {"text_config.use_gemma_norm", "true or false"});
  expect_error(mutated([](json& j) { j["text_config"]["rope_theta"] = "big"; }),
               {"text_config.rope_theta"});
  expect_error(mutated([](json& j) { j["text_config"]["hidden_size"] = 6144.5; }),
               {"text_config.hidden_size"});
  expect_error(mutated([](json& j) { j["text_config"]["moe_layer_freq"][7] = "1"; }),
               {"text_config.moe_layer_freq[7]"});
  expect_error(mutated([](json& j) { j["text_config"]["sparse_attention_config"] = 3; }),
               {"text_config.sparse_attention_config", "an object"});
  expect_error(mutated([](json& j) { j["vision_config"]["hidden_size"] = {1280}; }),
               {"vision_config.hidden_size"});
  expect_error(mutated([](json& j) { j["text_config"]["vocab_size"] = 5'000'000'000LL; }),
               {"text_config.vocab_size", "32 bits"});
}

TEST(ModelConfig, MissingKeysAreNamed) {
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "vocab_size", "max_position_embeddings",
                          "rope_theta", "dense_intermediate_size", "intermediate_size",
                          "num_local_experts", "num_experts_per_tok", "n_shared_experts",
                          "shared_intermediate_size"}) {
    expect_error(mutated([&](json& j) { j["text_config"].erase(key); }),
                 {std::string("text_config.") + key, "missing"});
  }
  expect_error(mutated([](json& j) {
                 j["text_config"].erase("rotary_dim");
                 j["text_config"].erase("partial_rotary_factor");
               }),
               {"text_config.rotary_dim", "partial_rotary_factor"});
  expect_error(mutated([](json& j) { j.erase("text_config"); }), {"text_config", "missing"});
  expect_error(mutated([](json& j) { j["text_config"]["sparse_attention_config"].erase("sparse_attention_freq"); }),
               {"text_config.sparse_attention_config.sparse_attention_freq", "missing"});
  expect_error(mutated([](json& j) { j["vision_config"].erase("num_hidden_layers"); }),
               {"vision_config.num_hidden_layers", "missing"});
  expect_error(mutated([](json& j) { j.erase("projector_hidden_size"); }),
               {"projector_hidden_size", "missing"});
}

TEST(ModelConfig, ValidationFailuresNameTheKey) {
  auto tc = [](auto change) {
    return mutated([&](json& j) { change(j["text_config"]); });
  };
  auto sc = [](auto change) {
    return mutated([&](json& j) { change(j["text_config"]["sparse_attention_config"]); });
  };
  expect_error(tc([](json& t) { t["num_key_value_heads"] = 5; }),
               {"text_config.num_key_value_heads", "multiple"});
  expect_error(sc([](json& s) { s["sparse_num_index_heads"] = 2; }),
               {"sparse_attention_config.sparse_num_index_heads", "num_key_value_heads 4"});
  expect_error(tc([](json& t) {
                 t["rotary_dim"] = 256;
                 t.erase("partial_rotary_factor");
               }),
               {"text_config.rotary_dim", "head_dim"});
  expect_error(tc([](json& t) { t["rotary_dim"] = 32; }),
               {"text_config.rotary_dim", "partial_rotary_factor"});
  expect_error(tc([](json& t) {
                 t["rotary_dim"] = 63;
                 t.erase("partial_rotary_factor");
               }),
               {"text_config.rotary_dim", "even"});
  expect_error(tc([](json& t) {
                 t.erase("rotary_dim");
                 t["partial_rotary_factor"] = 0.3;
               }),
               {"text_config.partial_rotary_factor", "whole number"});
  expect_error(mutated([](json& j) {
                 j["text_config"]["head_dim"] = 256;
                 j["text_config"]["rotary_dim"] = 192;
                 j["text_config"].erase("partial_rotary_factor");
               }),
               {"text_config.rotary_dim", "sparse_index_dim"});
  expect_error(tc([](json& t) { t["moe_layer_freq"].erase(0); }),
               {"text_config.moe_layer_freq", "60"});
  expect_error(tc([](json& t) { t["moe_layer_freq"][4] = 2; }), {"text_config.moe_layer_freq[4]"});
  expect_error(sc([](json& s) { s["sparse_attention_freq"].push_back(1); }),
               {"sparse_attention_config.sparse_attention_freq", "60"});
  expect_error(sc([](json& s) { s["sparse_disable_index_value"][9] = 0; }),
               {"sparse_attention_config.sparse_disable_index_value[9]"});
  expect_error(tc([](json& t) { t["hidden_act"] = "silu"; }),
               {"text_config.hidden_act", "swigluoai", "silu"});
  expect_error(tc([](json& t) { t["scoring_func"] = "softmax"; }),
               {"text_config.scoring_func", "sigmoid"});
  expect_error(sc([](json& s) { s["sparse_score_type"] = "lse"; }),
               {"sparse_attention_config.sparse_score_type", "max"});
  expect_error(sc([](json& s) { s["sparse_init_block"] = 1; }),
               {"sparse_attention_config.sparse_init_block", "only 0 is supported"});
  expect_error(sc([](json& s) { s["sparse_local_block"] = 0; }),
               {"sparse_attention_config.sparse_local_block", "only 1 is supported"});
  expect_error(sc([](json& s) { s["sparse_block_size"] = 0; }),
               {"sparse_attention_config.sparse_block_size"});
  expect_error(sc([](json& s) { s["sparse_topk_blocks"] = 1; }),
               {"sparse_attention_config.sparse_topk_blocks", "at least 2"});
  expect_error(tc([](json& t) { t["num_experts_per_tok"] = 129; }),
               {"text_config.num_experts_per_tok", "num_local_experts"});
  expect_error(tc([](json& t) { t["hidden_size"] = 0; }), {"text_config.hidden_size", "positive"});
  expect_error(tc([](json& t) { t["dense_intermediate_size"] = -1; }),
               {"text_config.dense_intermediate_size"});
  expect_error(tc([](json& t) { t["use_gemma_norm"] = false; }), {"text_config.use_gemma_norm"});
  expect_error(tc([](json& t) { t["attention_output_gate"] = true; }),
               {"text_config.attention_output_gate"});
  expect_error(tc([](json& t) { t["qk_norm_type"] = "per_layer"; }), {"text_config.qk_norm_type"});
  expect_error(tc([](json& t) { t["n_shared_experts"] = 2; }), {"text_config.n_shared_experts"});
  expect_error(tc([](json& t) { t["rms_norm_eps"] = 0; }), {"text_config.rms_norm_eps"});
  expect_error(mutated([](json& j) { j["vision_config"]["num_attention_heads"] = 15; }),
               {"vision_config.hidden_size", "num_attention_heads"});
  expect_error(mutated([](json& j) { j["vision_config"]["hidden_act"] = "quick_gelu"; }),
               {"vision_config.hidden_act"});
  expect_error(mutated([](json& j) { j["projector_hidden_size"] = 4096; }),
               {"projector_hidden_size", "text_config.hidden_size"});
  expect_error(mutated([](json& j) { j["image_token_index"] = 300000; }), {"image_token_index"});
  expect_error(mutated([](json& j) { j["vision_config"]["img_token_compression_config"]["spatial_merge_size"] = 3; }),
               {"vision_config.img_token_compression_config", "disagree"});
  expect_error(mutated([](json& j) { j["torch_dtype"] = "int8"; }), {"torch_dtype"});
}

TEST(ModelConfig, ValidateCatchesConfigsBuiltInCode) {
  ModelConfig c = ModelConfig::from_file(real_config_path());
  c.source = "built";
  c.text.sparse.sparse_num_index_heads = 8;
  try {
    c.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built: text_config.sparse_attention_config.sparse_num_index_heads"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(count_model(c), Error);  // counting refuses an invalid config too
}

TEST(ModelConfig, BadFilesAndText) {
  EXPECT_THROW(ModelConfig::from_file("/nonexistent/config.json"), Error);
  try {
    ModelConfig::from_file("/nonexistent/config.json");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/config.json"), std::string::npos);
  }
  for (const char* text : {"", "{", "[1,2]", "{\"text_config\": 5}", "{\"text_config\": {}}"}) {
    try {
      ModelConfig::from_json_text(text, "x.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("x.json: ", 0), 0u) << e.what();
    }
  }
}

// Mutation sweep: replacing any single value of the real config by a value of another type either
// parses or throws m3::Error, never anything else (no nlohmann exception, no crash).
TEST(ModelConfig, HugeSizesAreRefusedBeforeTablesAreBuilt) {
  expect_error(mutated([](json& j) { j["text_config"]["num_hidden_layers"] = 2000000000; }),
               {"text_config.num_hidden_layers", "at most 4096"});
  expect_error(mutated([](json& j) { j["text_config"]["num_local_experts"] = 2000000000; }),
               {"text_config.num_local_experts", "at most"});
  expect_error(mutated([](json& j) { j["text_config"]["vocab_size"] = 2000000000; }), {"text_config.vocab_size"});
  expect_error(mutated([](json& j) { j["vision_config"]["num_hidden_layers"] = 2000000000; }),
               {"vision_config.num_hidden_layers", "at most"});
  expect_error(mutated([](json& j) { j["text_config"]["max_position_embeddings"] = int64_t(1) << 40; }),
               {"text_config.max_position_embeddings", "at most"});
}

TEST(ModelConfig, MutationsNeverEscapeAsOtherExceptions) {
  const json base = real_json();
  const std::vector<json> replacements = {json(nullptr), json("s"), json(-1), json(0), json(2.5),
                                          json(true), json::array(), json::object(),
                                          json(int64_t(1) << 40),
                                          // Fit in 32 bits: sizes that tables were once allocated
                                          // from (num_hidden_layers 2e9 took 17 s and gigabytes).
                                          json(2000000000), json(INT32_MAX)};
  int cases = 0;
  // Walk every value by JSON pointer.
  std::vector<json::json_pointer> pointers;
  std::function<void(const json&, const json::json_pointer&)> collect =
      [&](const json& v, const json::json_pointer& p) {
        if (!p.empty()) pointers.push_back(p);
        if (v.is_object())
          for (auto it = v.begin(); it != v.end(); ++it) collect(it.value(), p / it.key());
        else if (v.is_array() && !v.empty())
          collect(v[v.size() / 2], p / (v.size() / 2));  // one element per list is enough
      };
  collect(base, json::json_pointer());
  for (const auto& p : pointers) {
    for (const auto& r : replacements) {
      json j = base;
      j[p] = r;
      try {
        ModelConfig c = ModelConfig::from_json_text(j.dump(), "config.json");
        (void)count_model(c);
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
        EXPECT_EQ(msg.rfind("config.json: ", 0), 0u) << msg;
      }
      ++cases;
    }
  }
  EXPECT_GT(cases, 500);
}

}  // namespace
}  // namespace m3

namespace m3 {
namespace {

// The m3-slice benchmark preset must keep every per-layer width of the real config, so that its
// decode reads M3's weight bytes per layer and per token; only depth and expert count shrink.
TEST(ModelConfig, M3SlicePresetHasTheRealLayerWidths) {
  const TextConfig real = ModelConfig::from_file(real_config_path()).text;
  const ModelConfig slice = preset_config("m3-slice", 1000);
  slice.validate();
  const TextConfig& t = slice.text;
  EXPECT_EQ(t.hidden_size, real.hidden_size);
  EXPECT_EQ(t.num_attention_heads, real.num_attention_heads);
  EXPECT_EQ(t.num_key_value_heads, real.num_key_value_heads);
  EXPECT_EQ(t.head_dim, real.head_dim);
  EXPECT_EQ(t.rotary_dim, real.rotary_dim);
  EXPECT_EQ(t.intermediate_size, real.intermediate_size);
  EXPECT_EQ(t.shared_intermediate_size, real.shared_intermediate_size);
  EXPECT_EQ(t.dense_intermediate_size, real.dense_intermediate_size);
  EXPECT_EQ(t.n_shared_experts, real.n_shared_experts);
  EXPECT_EQ(t.num_experts_per_tok, real.num_experts_per_tok);
  EXPECT_EQ(t.sparse.sparse_index_dim, real.sparse.sparse_index_dim);
  EXPECT_EQ(t.sparse.sparse_num_index_heads, real.sparse.sparse_num_index_heads);
  EXPECT_EQ(t.sparse.sparse_block_size, real.sparse.sparse_block_size);
  EXPECT_EQ(t.sparse.sparse_topk_blocks, real.sparse.sparse_topk_blocks);
  EXPECT_FALSE(t.is_sparse_layer(0));
  for (int l = 1; l < t.num_hidden_layers; ++l) EXPECT_TRUE(t.is_sparse_layer(l) && t.is_moe_layer(l)) << l;
  // Per token, an MoE layer of the slice reads exactly the weights of an MoE layer of M3.
  const ModelCounts rc = count_model(ModelConfig::from_file(real_config_path()));
  const ModelCounts sc = count_model(slice);
  EXPECT_EQ(sc.expert_params, rc.expert_params);
}

}  // namespace
}  // namespace m3

// Fuzz finding (tests/fuzz, config harness): nlohmann throws out_of_range, not parse_error, for a
// number past double's range; it escaped as an "internal error" without the file's name.
TEST(ModelConfig, NumbersPastDoubleRangeAreAnError) {
  for (const char* text : {"{\"version\": 1e999}", "{\"text_config\": {\"hidden_size\": -1e999}}"}) {
    try {
      m3::ModelConfig::from_json_text(text, "cfg/config.json");
      FAIL() << text;
    } catch (const m3::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cfg/config.json: not valid JSON"), std::string::npos) << e.what();
    }
  }
}

// config.json -> ModelConfig (spec §1), its validation, and writing it back in the HF layout.
//
// Policy for absent keys (so a reader knows what a short config means):
//  - Keys that change the math and have no safe default are required: hidden_size,
//    num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size,
//    max_position_embeddings, rope_theta, rotary_dim (or partial_rotary_factor), and the FFN widths
//    the layer pattern needs (dense_intermediate_size when a layer is dense; num_local_experts,
//    num_experts_per_tok, intermediate_size, n_shared_experts [+ shared_intermediate_size] when a
//    layer is MoE). With vision: vision_config sizes, projector_hidden_size and the token ids.
//  - Keys whose only supported value is M3's default to it (use_gemma_norm, hidden_act,
//    scoring_func, sparse_score_type, ...); validate() then rejects anything else, so a config
//    cannot silently ask for a model this engine does not compute.
//  - moe_layer_freq absent -> every layer dense. sparse_attention_config absent -> no MSA layer.
//    sparse_disable_index_value absent -> equal to sparse_attention_freq (M3 has no index value
//    branch on any MSA layer). head_dim absent -> hidden_size / num_attention_heads.
//  - Unknown keys are ignored (the real file carries many informational ones).
//  - Sizes must stay under sane ceilings (kMaxLayers ...): a lying file cannot make the engine
//    build huge per-layer or per-expert tables before its tensors are compared with them.
#include "io/model_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>

#include "base/read_file.h"
#include "m3/error.h"

namespace m3 {
namespace {

using nlohmann::json;

// M3 (spec §1.2) block sizes of the MSA kernels; used when sparse_attention_config omits them.
constexpr int kDefaultIndexDim = 128;
constexpr int kDefaultTopkBlocks = 16;
constexpr int kDefaultBlockSize = 128;

// Sane ceilings for the sizes a config declares. Per-layer tables, tensor-name lists and RoPE
// tables are built from these numbers before any tensor is compared with them, so a lying
// config (num_hidden_layers: 2000000000) must be refused here, not after gigabytes of tables.
// Each ceiling is orders of magnitude above M3 (spec §1: 6144 hidden, 200K vocabulary, 128
// experts) and any model of its kind, and small enough that what is built from it is cheap.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = 1 << 20;         // hidden, intermediate and head sizes
constexpr int64_t kMaxHeads = 1 << 14;
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxExperts = 1 << 16;
constexpr int64_t kMaxPositions = int64_t(1) << 32;
constexpr int64_t kMaxSmallCount = 1 << 16;    // block sizes, top-k, patch and merge sizes, frames

// A JSON value as it appears in the file, shortened for one-line messages.
std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Reads typed values from one JSON object. Every message starts "SOURCE: PREFIX.KEY: ".
class ObjectReader {
 public:
  ObjectReader(const json& obj, const std::string& source, std::string prefix)
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  std::string path(const std::string& key) const { return prefix_ + key; }

  // The value, or nullptr when the key is absent or JSON null (HF writes null for "unset").
  const json* find(const std::string& key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }

  [[noreturn]] void missing(const std::string& key, const std::string& why = "") const {
    fail(source_, ": ", path(key), ": missing (required", why, ")");
  }
  [[noreturn]] void wrong_type(const std::string& key, const std::string& expected,
                               const json& got) const {
    fail(source_, ": ", path(key), ": expected ", expected, ", got ", shown(got));
  }

  // `expected` describes the value for the message ("a positive integer"); ranges are checked
  // by validate(), which also sees configs built in code.
  std::optional<int64_t> opt_int64(const std::string& key, const std::string& expected) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) wrong_type(key, expected, *v);
      return int64_t(u);
    }
    if (!v->is_number_integer()) wrong_type(key, expected, *v);
    return v->get<int64_t>();
  }
  std::optional<int> opt_int(const std::string& key, const std::string& expected) const {
    auto v = opt_int64(key, expected);
    if (!v) return std::nullopt;
    if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max())
      fail(source_, ": ", path(key), ": expected ", expected, " that fits in 32 bits, got ", *v);
    return int(*v);
  }
  int req_int(const std::string& key, const std::string& expected, const std::string& why = "") const {
    auto v = opt_int(key, expected);
    if (!v) missing(key, why);
    return *v;
  }
  int int_or(const std::string& key, const std::string& expected, int dflt) const {
    return opt_int(key, expected).value_or(dflt);
  }

  std::optional<double> opt_double(const std::string& key, const std::string& expected) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong_type(key, expected, *v);
    return v->get<double>();
  }
  double double_or(const std::string& key, const std::string& expected, double dflt) const {
    return opt_double(key, expected).value_or(dflt);
  }

  bool bool_or(const std::string& key, bool dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_boolean()) wrong_type(key, "true or false", *v);
    return v->get<bool>();
  }

  std::string string_or(const std::string& key, const std::string& dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_string()) wrong_type(key, "a string", *v);
    return v->get<std::string>();
  }

  std::vector<std::string> string_list(const std::string& key) const {
    const json* v = find(key);
    if (!v) return {};
    if (!v->is_array()) wrong_type(key, "a list of strings", *v);
    std::vector<std::string> out;
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) wrong_type(str_cat(key, "[", i, "]"), "a string", (*v)[i]);
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

  // Per-layer flag lists. Values are checked for 0/1 and length by validate().
  std::optional<std::vector<int>> opt_int_list(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_array()) wrong_type(key, "a list with one 0/1 entry per layer", *v);
    std::vector<int> out;
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      if (!e.is_number_integer() || e.get<int64_t>() < std::numeric_limits<int>::min() ||
          e.get<int64_t>() > std::numeric_limits<int>::max())
        wrong_type(str_cat(key, "[", i, "]"), "0 or 1", e);
      out.push_back(e.get<int>());
    }
    return out;
  }

  // A nested object (nullptr when absent); anything but an object is an error.
  const json* opt_object(const std::string& key) const {
    const json* v = find(key);
    if (v && !v->is_object()) wrong_type(key, "an object", *v);
    return v;
  }

 private:
  const json& obj_;
  const std::string& source_;
  std::string prefix_;
};

constexpr const char* kPosInt = "a positive integer";
constexpr const char* kNonNegInt = "a non-negative integer";
constexpr const char* kInt = "an integer";
constexpr const char* kNumber = "a number";
constexpr const char* kPosNumber = "a positive number";

SparseAttentionConfig parse_sparse(const json* obj, const std::string& source, int num_layers,
                                   int num_kv_heads) {
  SparseAttentionConfig s;
  const size_t n = num_layers > 0 ? size_t(num_layers) : 0;
  if (!obj) {
    // No sparse_attention_config: a plain dense-attention model.
    s.use_sparse_attention = false;
    s.sparse_attention_freq.assign(n, 0);
    s.sparse_disable_index_value.assign(n, 0);
    return s;
  }
  ObjectReader r(*obj, source, "text_config.sparse_attention_config.");
  // Explicit on purpose: the presence of the block alone does not say whether MSA is on.
  const json* use = r.find("use_sparse_attention");
  if (!use) r.missing("use_sparse_attention");
  s.use_sparse_attention = r.bool_or("use_sparse_attention", false);
  s.sparse_index_dim = r.int_or("sparse_index_dim", kPosInt, kDefaultIndexDim);
  // The only supported value is one index head per KV group, so that is the default.
  s.sparse_num_index_heads = r.int_or("sparse_num_index_heads", kPosInt, num_kv_heads);
  s.sparse_topk_blocks = r.int_or("sparse_topk_blocks", kPosInt, kDefaultTopkBlocks);
  s.sparse_block_size = r.int_or("sparse_block_size", kPosInt, kDefaultBlockSize);
  s.sparse_score_type = r.string_or("sparse_score_type", "max");
  s.sparse_init_block = r.int_or("sparse_init_block", kNonNegInt, 0);
  s.sparse_local_block = r.int_or("sparse_local_block", kNonNegInt, 1);
  if (auto freq = r.opt_int_list("sparse_attention_freq")) {
    s.sparse_attention_freq = *freq;
  } else if (s.use_sparse_attention) {
    r.missing("sparse_attention_freq", " when use_sparse_attention is true");
  } else {
    s.sparse_attention_freq.assign(n, 0);
  }
  s.sparse_disable_index_value =
      r.opt_int_list("sparse_disable_index_value").value_or(s.sparse_attention_freq);
  return s;
}

TextConfig parse_text(const json& obj, const std::string& source) {
  ObjectReader r(obj, source, "text_config.");
  TextConfig t;
  t.hidden_size = r.req_int("hidden_size", kPosInt);
  t.num_hidden_layers = r.req_int("num_hidden_layers", kPosInt);
  // Before the per-layer lists below are sized from it.
  if (t.num_hidden_layers > kMaxLayers)
    fail(source, ": text_config.num_hidden_layers: expected at most ", kMaxLayers, ", got ", t.num_hidden_layers);
  t.num_attention_heads = r.req_int("num_attention_heads", kPosInt);
  t.num_key_value_heads = r.req_int("num_key_value_heads", kPosInt);
  t.vocab_size = r.req_int("vocab_size", kPosInt);
  // HF convention: head_dim defaults to hidden / heads (M3 sets it: 64 x 128 != 6144).
  t.head_dim = r.int_or("head_dim", kPosInt,
                        t.num_attention_heads > 0 ? t.hidden_size / t.num_attention_heads : 0);
  auto max_pos = r.opt_int64("max_position_embeddings", kPosInt);
  if (!max_pos) r.missing("max_position_embeddings");
  t.max_position_embeddings = *max_pos;
  t.rms_norm_eps = r.double_or("rms_norm_eps", kPosNumber, 1e-6);
  t.use_gemma_norm = r.bool_or("use_gemma_norm", true);
  t.attention_output_gate = r.bool_or("attention_output_gate", false);
  auto theta = r.opt_double("rope_theta", kPosNumber);
  if (!theta) r.missing("rope_theta");
  t.rope_theta = *theta;

  // Rotary width: rotary_dim wins, partial_rotary_factor x head_dim otherwise; both must agree.
  auto rotary = r.opt_int("rotary_dim", kPosInt);
  auto partial = r.opt_double("partial_rotary_factor", kNumber);
  if (rotary) {
    t.rotary_dim = *rotary;
    if (partial && std::fabs(*partial * t.head_dim - *rotary) > 1e-6)
      fail(source, ": text_config.rotary_dim: ", *rotary, " disagrees with partial_rotary_factor ",
           *partial, " x head_dim ", t.head_dim, " = ", *partial * t.head_dim);
  } else if (partial) {
    double dims = *partial * t.head_dim;
    if (std::fabs(dims - std::round(dims)) > 1e-6)
      fail(source, ": text_config.partial_rotary_factor: ", *partial, " x head_dim ", t.head_dim,
           " = ", dims, " is not a whole number of dimensions");
    t.rotary_dim = int(std::lround(dims));
  } else {
    r.missing("rotary_dim", "; or give partial_rotary_factor");
  }

  t.hidden_act = r.string_or("hidden_act", "swigluoai");
  t.swiglu_alpha = r.double_or("swiglu_alpha", kNumber, 1.702);
  t.swiglu_limit = r.double_or("swiglu_limit", kPosNumber, 7.0);
  t.swiglu_beta = r.double_or("swiglu_beta", kNumber, 1.0);  // absent in M3: +1 on up (spec §3.6)
  t.use_qk_norm = r.bool_or("use_qk_norm", true);
  t.qk_norm_type = r.string_or("qk_norm_type", "per_head");
  t.tie_word_embeddings = r.bool_or("tie_word_embeddings", false);

  const size_t n = t.num_hidden_layers > 0 ? size_t(t.num_hidden_layers) : 0;
  t.moe_layer_freq = r.opt_int_list("moe_layer_freq").value_or(std::vector<int>(n, 0));
  t.sparse = parse_sparse(r.opt_object("sparse_attention_config"), source, t.num_hidden_layers,
                          t.num_key_value_heads);

  bool any_moe = false, any_dense = false;
  for (int f : t.moe_layer_freq) (f != 0 ? any_moe : any_dense) = true;
  if (t.moe_layer_freq.empty()) any_dense = true;

  // FFN widths: required exactly when the layer pattern uses them.
  if (any_dense) {
    t.dense_intermediate_size =
        r.req_int("dense_intermediate_size", kPosInt, " by the dense-MLP layers of moe_layer_freq");
  } else {
    t.dense_intermediate_size = r.int_or("dense_intermediate_size", kPosInt, 0);
  }
  if (any_moe) {
    const char* why = " by the MoE layers of moe_layer_freq";
    t.num_local_experts = r.req_int("num_local_experts", kPosInt, why);
    t.num_experts_per_tok = r.req_int("num_experts_per_tok", kPosInt, why);
    t.intermediate_size = r.req_int("intermediate_size", kPosInt, why);
    t.n_shared_experts = r.req_int("n_shared_experts", kNonNegInt, why);
    if (t.n_shared_experts > 0)
      t.shared_intermediate_size =
          r.req_int("shared_intermediate_size", kPosInt, " when n_shared_experts > 0");
    else
      t.shared_intermediate_size = r.int_or("shared_intermediate_size", kNonNegInt, 0);
  } else {
    t.num_local_experts = r.int_or("num_local_experts", kNonNegInt, 0);
    t.num_experts_per_tok = r.int_or("num_experts_per_tok", kNonNegInt, 0);
    t.intermediate_size = r.int_or("intermediate_size", kNonNegInt, 0);
    t.n_shared_experts = r.int_or("n_shared_experts", kNonNegInt, 0);
    t.shared_intermediate_size = r.int_or("shared_intermediate_size", kNonNegInt, 0);
  }
  t.scoring_func = r.string_or("scoring_func", "sigmoid");
  t.use_routing_bias = r.bool_or("use_routing_bias", true);
  // 1.0 is the HF MoE convention when unset; M3 sets 2.0.
  t.routed_scaling_factor = r.double_or("routed_scaling_factor", kPosNumber, 1.0);
  t.num_mtp_modules = r.int_or("num_mtp_modules", kNonNegInt, 0);
  t.num_nextn_predict_layers = r.int_or("num_nextn_predict_layers", kNonNegInt, 0);
  t.bos_token_id = r.opt_int("bos_token_id", kNonNegInt);
  t.eos_token_id = r.opt_int("eos_token_id", kNonNegInt);
  return t;
}

// mlx-lm writes the block twice, as "quantization" and "quantization_config"; the release's
// MXFP8 "quantization_config" (quant_method "mxfp8") needs no parsing (docs/FORMATS.md).
std::optional<QuantizationConfig> parse_quantization(const ObjectReader& top, const std::string& source) {
  const json* obj = top.opt_object("quantization");
  std::string key = "quantization";
  if (obj == nullptr) {
    const json* qc = top.opt_object("quantization_config");
    if (qc == nullptr || !qc->contains("bits")) return std::nullopt;
    obj = qc;
    key = "quantization_config";
  }
  ObjectReader r(*obj, source, key + ".");
  QuantizationConfig q;
  q.mode = r.string_or("mode", "affine");
  if (q.mode != "affine")
    fail(source, ": ", r.path("mode"), ": only \"affine\" is supported, got \"", q.mode, "\"");
  q.bits = r.req_int("bits", kPosInt);
  q.group_size = r.req_int("group_size", kPosInt);
  for (const auto& [name, value] : obj->items()) {
    if (name == "mode" || name == "bits" || name == "group_size" || name == "quant_method") continue;
    QuantizationConfig::Module m;
    if (value.is_boolean()) {
      if (value.get<bool>()) fail(source, ": ", r.path(name), ": expected false or {\"bits\", \"group_size\"}, got true");
      m.quantized = false;
    } else if (value.is_object()) {
      ObjectReader mr(value, source, key + "." + name + ".");
      m.bits = mr.int_or("bits", kPosInt, q.bits);
      m.group_size = mr.int_or("group_size", kPosInt, q.group_size);
    } else {
      r.wrong_type(name, "false or an object {\"bits\", \"group_size\"}", value);
    }
    q.modules.emplace_back(name, m);
  }
  auto check = [&](const std::string& path, int bits, int group) {
    if (bits != 4 && bits != 8) fail(source, ": ", path, "bits: ", bits, "-bit is not supported; expected 4 or 8");
    if (group != 32 && group != 64 && group != 128)
      fail(source, ": ", path, "group_size: expected 32, 64 or 128, got ", group);
  };
  check(key + ".", q.bits, q.group_size);
  for (const auto& [name, m] : q.modules)
    if (m.quantized) check(key + "." + name + ".", m.bits, m.group_size);
  return q;
}

// img_token_compression_config sits at the top level of the real file and again inside
// vision_config; either copy may be given, and when both are they must agree.
void parse_compression(const ObjectReader& top, const ObjectReader& vis, const std::string& source,
                       VisionConfig& v) {
  const json* a = top.opt_object("img_token_compression_config");
  const json* b = vis.opt_object("img_token_compression_config");
  std::optional<std::pair<int, int>> seen;
  for (const auto& [obj, prefix] : {std::pair{a, std::string("img_token_compression_config.")},
                                    std::pair{b, std::string("vision_config.img_token_compression_config.")}}) {
    if (!obj) continue;
    ObjectReader r(*obj, source, prefix);
    std::string method = r.string_or("image_token_compression_method", "patch_merge");
    if (method != "patch_merge")
      fail(source, ": ", r.path("image_token_compression_method"),
           ": only \"patch_merge\" is supported (spec §5.5), got \"", method, "\"");
    std::pair<int, int> mt{r.int_or("spatial_merge_size", kPosInt, 2),
                           r.int_or("temporal_patch_size", kPosInt, 2)};
    if (seen && *seen != mt)
      fail(source, ": ", prefix, "spatial_merge_size/temporal_patch_size: ", mt.first, "/",
           mt.second, " disagree with img_token_compression_config: ", seen->first, "/",
           seen->second);
    seen = mt;
  }
  if (seen) std::tie(v.spatial_merge_size, v.temporal_patch_size) = *seen;
}

VisionConfig parse_vision(const json& obj, const ObjectReader& top, const std::string& source,
                          int projector_hidden_size) {
  ObjectReader r(obj, source, "vision_config.");
  VisionConfig v;
  v.hidden_size = r.req_int("hidden_size", kPosInt);
  v.num_attention_heads = r.req_int("num_attention_heads", kPosInt);
  v.num_hidden_layers = r.req_int("num_hidden_layers", kPosInt);
  v.intermediate_size = r.req_int("intermediate_size", kPosInt);
  v.patch_size = r.int_or("patch_size", kPosInt, 14);
  v.image_size = r.int_or("image_size", kNonNegInt, 0);  // unused by dynamic-resolution input
  v.projection_dim = r.int_or("projection_dim", kNonNegInt, projector_hidden_size);  // informational
  v.num_channels = r.int_or("num_channels", kPosInt, 3);
  v.rope_theta = r.double_or("rope_theta", kPosNumber, 10000.0);
  v.rope_mode = r.string_or("rope_mode", "3d");
  v.position_embedding_type = r.string_or("position_embedding_type", "rope");
  v.hidden_act = r.string_or("hidden_act", "gelu");
  v.layer_norm_eps = r.double_or("layer_norm_eps", kPosNumber, 1e-5);
  v.vision_segment_max_frames = r.int_or("vision_segment_max_frames", kPosInt, 4);
  parse_compression(top, r, source, v);
  return v;
}

// ---- validation helpers ----

struct Checker {
  const std::string& source;

  template <typename... Args>
  [[noreturn]] void bad(const std::string& key, const Args&... args) const {
    fail(source, ": ", key, ": ", args...);
  }
  void positive(const std::string& key, int64_t v) const {
    if (v <= 0) bad(key, "expected a positive integer, got ", v);
  }
  void positive_number(const std::string& key, double v) const {
    if (!(v > 0) || !std::isfinite(v)) bad(key, "expected a positive number, got ", v);
  }
  void finite(const std::string& key, double v) const {
    if (!std::isfinite(v)) bad(key, "expected a finite number, got ", v);
  }
  void only(const std::string& key, const std::string& got, const std::string& supported,
            const std::string& why) const {
    if (got != supported)
      bad(key, "only \"", supported, "\" is supported (", why, "), got \"", got, "\"");
  }
  void at_most(const std::string& key, int64_t v, int64_t max) const {
    if (v > max) bad(key, "expected at most ", max, " (a sane limit for this size), got ", v);
  }
  void flag_list(const std::string& key, const std::vector<int>& list, int num_layers) const {
    if (list.size() != size_t(num_layers))
      bad(key, "expected ", num_layers, " entries (one per layer, num_hidden_layers), got ",
          list.size());
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i] != 0 && list[i] != 1) bad(str_cat(key, "[", i, "]"), "expected 0 or 1, got ", list[i]);
  }
};

void validate_text(const TextConfig& t, const Checker& c) {
  const std::string p = "text_config.";
  c.positive(p + "hidden_size", t.hidden_size);
  c.positive(p + "num_hidden_layers", t.num_hidden_layers);
  c.positive(p + "num_attention_heads", t.num_attention_heads);
  c.positive(p + "num_key_value_heads", t.num_key_value_heads);
  c.positive(p + "head_dim", t.head_dim);
  c.positive(p + "vocab_size", t.vocab_size);
  c.positive(p + "max_position_embeddings", t.max_position_embeddings);
  c.at_most(p + "hidden_size", t.hidden_size, kMaxWidth);
  c.at_most(p + "num_hidden_layers", t.num_hidden_layers, kMaxLayers);
  c.at_most(p + "num_attention_heads", t.num_attention_heads, kMaxHeads);
  c.at_most(p + "num_key_value_heads", t.num_key_value_heads, kMaxHeads);
  c.at_most(p + "head_dim", t.head_dim, kMaxWidth);
  c.at_most(p + "vocab_size", t.vocab_size, kMaxVocab);
  c.at_most(p + "max_position_embeddings", t.max_position_embeddings, kMaxPositions);
  c.at_most(p + "dense_intermediate_size", t.dense_intermediate_size, kMaxWidth);
  c.at_most(p + "intermediate_size", t.intermediate_size, kMaxWidth);
  c.at_most(p + "shared_intermediate_size", t.shared_intermediate_size, kMaxWidth);
  c.at_most(p + "num_local_experts", t.num_local_experts, kMaxExperts);
  c.at_most(p + "num_experts_per_tok", t.num_experts_per_tok, kMaxExperts);
  c.at_most(p + "num_mtp_modules", t.num_mtp_modules, kMaxLayers);
  c.at_most(p + "num_nextn_predict_layers", t.num_nextn_predict_layers, kMaxLayers);
  c.at_most(p + "sparse_attention_config.sparse_index_dim", t.sparse.sparse_index_dim, kMaxWidth);
  c.at_most(p + "sparse_attention_config.sparse_num_index_heads", t.sparse.sparse_num_index_heads, kMaxHeads);
  c.at_most(p + "sparse_attention_config.sparse_topk_blocks", t.sparse.sparse_topk_blocks, kMaxSmallCount);
  c.at_most(p + "sparse_attention_config.sparse_block_size", t.sparse.sparse_block_size, kMaxSmallCount);
  if (t.num_attention_heads % t.num_key_value_heads != 0)
    c.bad(p + "num_key_value_heads", "num_attention_heads ", t.num_attention_heads,
          " is not a multiple of num_key_value_heads ", t.num_key_value_heads,
          " (each KV head serves a whole group of query heads)");
  c.positive(p + "rotary_dim", t.rotary_dim);
  if (t.rotary_dim % 2 != 0)
    c.bad(p + "rotary_dim", "must be even (NeoX RoPE rotates pairs), got ", t.rotary_dim);
  if (t.rotary_dim > t.head_dim)
    c.bad(p + "rotary_dim", t.rotary_dim, " exceeds head_dim ", t.head_dim);
  c.positive_number(p + "rms_norm_eps", t.rms_norm_eps);
  c.positive_number(p + "rope_theta", t.rope_theta);

  if (!t.use_gemma_norm)
    c.bad(p + "use_gemma_norm", "only true is supported (norm weights are applied as 1 + w)");
  if (t.attention_output_gate)
    c.bad(p + "attention_output_gate", "only false is supported (M3 has no attention output gate)");
  if (!t.use_qk_norm) c.bad(p + "use_qk_norm", "only true is supported (M3 normalises q and k)");
  c.only(p + "qk_norm_type", t.qk_norm_type, "per_head", "one RMSNorm over each head's 128 dims");
  c.only(p + "hidden_act", t.hidden_act, "swigluoai", "clamped SwiGLU of spec §3.6");
  c.finite(p + "swiglu_alpha", t.swiglu_alpha);
  c.positive_number(p + "swiglu_limit", t.swiglu_limit);
  c.finite(p + "swiglu_beta", t.swiglu_beta);
  if (t.bos_token_id && (*t.bos_token_id < 0 || *t.bos_token_id >= t.vocab_size))
    c.bad(p + "bos_token_id", "expected an id below vocab_size ", t.vocab_size, ", got ", *t.bos_token_id);
  if (t.eos_token_id && (*t.eos_token_id < 0 || *t.eos_token_id >= t.vocab_size))
    c.bad(p + "eos_token_id", "expected an id below vocab_size ", t.vocab_size, ", got ", *t.eos_token_id);
  if (t.num_mtp_modules < 0) c.bad(p + "num_mtp_modules", "expected >= 0, got ", t.num_mtp_modules);
  if (t.num_nextn_predict_layers < 0)
    c.bad(p + "num_nextn_predict_layers", "expected >= 0, got ", t.num_nextn_predict_layers);

  // Layer pattern.
  c.flag_list(p + "moe_layer_freq", t.moe_layer_freq, t.num_hidden_layers);
  const std::string sp = p + "sparse_attention_config.";
  c.flag_list(sp + "sparse_attention_freq", t.sparse.sparse_attention_freq, t.num_hidden_layers);
  c.flag_list(sp + "sparse_disable_index_value", t.sparse.sparse_disable_index_value,
              t.num_hidden_layers);

  bool any_moe = false, any_dense = false, any_sparse = false;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    (t.is_moe_layer(l) ? any_moe : any_dense) = true;
    if (t.is_sparse_layer(l)) any_sparse = true;
  }

  if (any_dense) c.positive(p + "dense_intermediate_size", t.dense_intermediate_size);
  if (any_moe) {
    c.positive(p + "num_local_experts", t.num_local_experts);
    c.positive(p + "num_experts_per_tok", t.num_experts_per_tok);
    if (t.num_experts_per_tok > t.num_local_experts)
      c.bad(p + "num_experts_per_tok", t.num_experts_per_tok, " exceeds num_local_experts ",
            t.num_local_experts);
    c.positive(p + "intermediate_size", t.intermediate_size);
    // One shared MLP (width shared_intermediate_size) or none: how several would be stored is
    // not defined for M3, so refuse rather than guess.
    if (t.n_shared_experts < 0 || t.n_shared_experts > 1)
      c.bad(p + "n_shared_experts", "only 0 or 1 is supported, got ", t.n_shared_experts);
    if (t.n_shared_experts > 0) c.positive(p + "shared_intermediate_size", t.shared_intermediate_size);
    c.only(p + "scoring_func", t.scoring_func, "sigmoid", "router of spec §3.5");
    c.positive_number(p + "routed_scaling_factor", t.routed_scaling_factor);
  }

  if (any_sparse) {
    const auto& s = t.sparse;
    c.only(sp + "sparse_score_type", s.sparse_score_type, "max", "block score = max of token scores");
    if (s.sparse_init_block != 0)
      c.bad(sp + "sparse_init_block", "only 0 is supported (no forced initial block), got ",
            s.sparse_init_block);
    if (s.sparse_local_block != 1)
      c.bad(sp + "sparse_local_block", "only 1 is supported (the query's own block is always kept), got ",
            s.sparse_local_block);
    c.positive(sp + "sparse_block_size", s.sparse_block_size);
    if (s.sparse_topk_blocks < 2)
      c.bad(sp + "sparse_topk_blocks", "expected at least 2 (the local block plus ranked ones), got ",
            s.sparse_topk_blocks);
    c.positive(sp + "sparse_index_dim", s.sparse_index_dim);
    if (s.sparse_num_index_heads != t.num_key_value_heads)
      c.bad(sp + "sparse_num_index_heads", "expected num_key_value_heads ", t.num_key_value_heads,
            " (one index head selects blocks for each KV group), got ", s.sparse_num_index_heads);
    if (t.rotary_dim > s.sparse_index_dim)
      c.bad(p + "rotary_dim", t.rotary_dim, " exceeds sparse_attention_config.sparse_index_dim ",
            s.sparse_index_dim, " (index q/k get the same RoPE)");
    for (int l = 0; l < t.num_hidden_layers; ++l)
      if (t.is_sparse_layer(l) && s.sparse_disable_index_value[l] != 1)
        c.bad(str_cat(sp, "sparse_disable_index_value[", l, "]"),
              "only 1 is supported on MSA layers (no index_v/index_o projections), got 0");
  }
}

void validate_vision(const ModelConfig& m, const Checker& c) {
  const VisionConfig& v = *m.vision;
  const std::string p = "vision_config.";
  c.positive(p + "hidden_size", v.hidden_size);
  c.positive(p + "num_attention_heads", v.num_attention_heads);
  c.positive(p + "num_hidden_layers", v.num_hidden_layers);
  c.positive(p + "intermediate_size", v.intermediate_size);
  c.positive(p + "patch_size", v.patch_size);
  c.positive(p + "num_channels", v.num_channels);
  c.positive(p + "vision_segment_max_frames", v.vision_segment_max_frames);
  c.positive("img_token_compression_config.spatial_merge_size", v.spatial_merge_size);
  c.positive("img_token_compression_config.temporal_patch_size", v.temporal_patch_size);
  c.at_most(p + "hidden_size", v.hidden_size, kMaxWidth);
  c.at_most(p + "num_attention_heads", v.num_attention_heads, kMaxHeads);
  c.at_most(p + "num_hidden_layers", v.num_hidden_layers, kMaxLayers);
  c.at_most(p + "intermediate_size", v.intermediate_size, kMaxWidth);
  c.at_most(p + "patch_size", v.patch_size, kMaxSmallCount);
  c.at_most(p + "image_size", v.image_size, kMaxSmallCount);
  c.at_most(p + "projection_dim", v.projection_dim, kMaxWidth);
  c.at_most(p + "num_channels", v.num_channels, 16);
  c.at_most(p + "vision_segment_max_frames", v.vision_segment_max_frames, kMaxSmallCount);
  c.at_most("img_token_compression_config.spatial_merge_size", v.spatial_merge_size, kMaxSmallCount);
  c.at_most("img_token_compression_config.temporal_patch_size", v.temporal_patch_size, kMaxSmallCount);
  if (v.image_size < 0) c.bad(p + "image_size", "expected >= 0, got ", v.image_size);
  if (v.projection_dim < 0) c.bad(p + "projection_dim", "expected >= 0, got ", v.projection_dim);
  if (v.hidden_size % v.num_attention_heads != 0)
    c.bad(p + "hidden_size", v.hidden_size, " is not a multiple of num_attention_heads ",
          v.num_attention_heads);
  // 3D RoPE gives each of t, h, w an even slice of 2*((head_dim/3)/2) dims (26 of 80 for M3).
  if (v.head_dim() < 6)
    c.bad(p + "num_attention_heads", "head_dim ", v.head_dim(),
          " is too small for 3D RoPE (needs at least 6 dims)");
  c.positive_number(p + "rope_theta", v.rope_theta);
  c.positive_number(p + "layer_norm_eps", v.layer_norm_eps);
  c.only(p + "rope_mode", v.rope_mode, "3d", "t/h/w rotary of spec §5.4");
  c.only(p + "position_embedding_type", v.position_embedding_type, "rope", "spec §5.4");
  c.only(p + "hidden_act", v.hidden_act, "gelu", "exact erf GELU");

  c.positive("projector_hidden_size", m.projector_hidden_size);
  // Merged vision vectors replace token embeddings, so they must have the text width.
  if (m.projector_hidden_size != m.text.hidden_size)
    c.bad("projector_hidden_size", "expected text_config.hidden_size ", m.text.hidden_size,
          " (projected vision tokens replace token embeddings), got ", m.projector_hidden_size);
  c.only("projector_hidden_act", m.projector_hidden_act, "gelu", "exact erf GELU");
  if (!m.multimodal_projector_bias)
    c.bad("multimodal_projector_bias", "only true is supported (the M3 projector and merger have biases)");
  if (m.vision_feature_layer != -1)
    c.bad("vision_feature_layer", "only -1 (the last encoder layer) is supported, got ",
          m.vision_feature_layer);
  c.only("vision_feature_select_strategy", m.vision_feature_select_strategy, "full",
         "every patch token is used");
  for (const auto& [key, id] : {std::pair{"image_token_index", m.image_token_index},
                                std::pair{"video_token_index", m.video_token_index}})
    if (id < 0 || id >= m.text.vocab_size)
      c.bad(key, "expected a token id below text_config.vocab_size ", m.text.vocab_size, ", got ", id);
  if (m.image_token_index == m.video_token_index)
    c.bad("video_token_index", "must differ from image_token_index ", m.image_token_index);
}

}  // namespace

ModelConfig ModelConfig::from_file(const std::string& path) {
  return from_json_text(read_whole_file(path, "a config file"), path);
}

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& source_name) {
  const std::string& src = source_name;
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double's range
    fail(src, ": not valid JSON: ", e.what());
  }
  if (!root.is_object()) fail(src, ": expected a JSON object at the top level, got ", shown(root));

  ModelConfig m;
  m.source = source_name;
  ObjectReader top(root, src, "");
  m.architectures = top.string_list("architectures");
  m.model_type = top.string_or("model_type", "");
  m.torch_dtype = top.string_or("torch_dtype", "bfloat16");
  m.image_token_index = top.int_or("image_token_index", kNonNegInt, -1);
  m.video_token_index = top.int_or("video_token_index", kNonNegInt, -1);
  m.projector_hidden_act = top.string_or("projector_hidden_act", "gelu");
  m.multimodal_projector_bias = top.bool_or("multimodal_projector_bias", true);
  m.vision_feature_layer = top.int_or("vision_feature_layer", kInt, -1);
  m.vision_feature_select_strategy = top.string_or("vision_feature_select_strategy", "full");

  const json* text_cfg = top.opt_object("text_config");
  if (!text_cfg) top.missing("text_config");
  m.text = parse_text(*text_cfg, src);

  if (const json* vis = top.opt_object("vision_config")) {
    // With a vision tower these have no safe default.
    const char* why = " with vision_config";
    m.projector_hidden_size = top.req_int("projector_hidden_size", kPosInt, why);
    m.image_token_index = top.req_int("image_token_index", kNonNegInt, why);
    m.video_token_index = top.req_int("video_token_index", kNonNegInt, why);
    m.vision = parse_vision(*vis, top, src, m.projector_hidden_size);
  } else {
    m.projector_hidden_size = top.int_or("projector_hidden_size", kNonNegInt, 0);
  }
  m.quantization = parse_quantization(top, src);
  m.validate();
  return m;
}

QuantizationConfig::Module QuantizationConfig::expected(const std::string& module) const {
  for (const auto& [name, m] : modules)
    if (name == module) return m;
  return {true, bits, group_size};
}

void ModelConfig::validate() const {
  const std::string src = source.empty() ? std::string("config.json") : source;
  Checker c{src};
  static const char* const kDtypes[] = {"bfloat16", "float16", "float32"};
  bool known = false;
  for (const char* d : kDtypes) known |= torch_dtype == d;
  if (!known)
    c.bad("torch_dtype", "expected bfloat16, float16 or float32, got \"", torch_dtype, "\"");
  validate_text(text, c);
  if (vision) validate_vision(*this, c);
}

std::string ModelConfig::to_json_text() const {
  const TextConfig& t = text;
  const SparseAttentionConfig& s = t.sparse;
  json sparse = {
      {"use_sparse_attention", s.use_sparse_attention},
      {"sparse_index_dim", s.sparse_index_dim},
      {"sparse_num_index_heads", s.sparse_num_index_heads},
      {"sparse_topk_blocks", s.sparse_topk_blocks},
      {"sparse_block_size", s.sparse_block_size},
      {"sparse_score_type", s.sparse_score_type},
      {"sparse_init_block", s.sparse_init_block},
      {"sparse_local_block", s.sparse_local_block},
      {"sparse_attention_freq", s.sparse_attention_freq},
      {"sparse_disable_index_value", s.sparse_disable_index_value},
  };
  json tc = {
      {"architectures", {"MiniMaxM3SparseForCausalLM"}},
      {"hidden_size", t.hidden_size},
      {"intermediate_size", t.intermediate_size},
      {"dense_intermediate_size", t.dense_intermediate_size},
      {"shared_intermediate_size", t.shared_intermediate_size},
      {"n_shared_experts", t.n_shared_experts},
      {"num_hidden_layers", t.num_hidden_layers},
      {"num_attention_heads", t.num_attention_heads},
      {"num_key_value_heads", t.num_key_value_heads},
      {"head_dim", t.head_dim},
      {"vocab_size", t.vocab_size},
      {"max_position_embeddings", t.max_position_embeddings},
      {"rms_norm_eps", t.rms_norm_eps},
      {"use_gemma_norm", t.use_gemma_norm},
      {"attention_output_gate", t.attention_output_gate},
      {"rope_theta", t.rope_theta},
      {"rotary_dim", t.rotary_dim},
      {"hidden_act", t.hidden_act},
      {"swiglu_alpha", t.swiglu_alpha},
      {"swiglu_limit", t.swiglu_limit},
      {"use_qk_norm", t.use_qk_norm},
      {"qk_norm_type", t.qk_norm_type},
      {"tie_word_embeddings", t.tie_word_embeddings},
      {"num_local_experts", t.num_local_experts},
      {"num_experts_per_tok", t.num_experts_per_tok},
      {"scoring_func", t.scoring_func},
      {"use_routing_bias", t.use_routing_bias},
      {"routed_scaling_factor", t.routed_scaling_factor},
      {"moe_layer_freq", t.moe_layer_freq},
      {"num_mtp_modules", t.num_mtp_modules},
      {"num_nextn_predict_layers", t.num_nextn_predict_layers},
      {"sparse_attention_config", sparse},
  };
  // The real file has both; write the factor only when it describes rotary_dim exactly.
  if (t.head_dim > 0) {
    double factor = double(t.rotary_dim) / t.head_dim;
    if (factor * t.head_dim == double(t.rotary_dim)) tc["partial_rotary_factor"] = factor;
  }
  // M3 leaves swiglu_beta out (meaning 1.0); write it only when it says something else.
  if (t.swiglu_beta != 1.0) tc["swiglu_beta"] = t.swiglu_beta;
  if (t.bos_token_id) tc["bos_token_id"] = *t.bos_token_id;
  if (t.eos_token_id) tc["eos_token_id"] = *t.eos_token_id;

  json root = {
      {"architectures", architectures},
      {"model_type", model_type},
      {"image_token_index", image_token_index},
      {"video_token_index", video_token_index},
      {"projector_hidden_size", projector_hidden_size},
      {"projector_hidden_act", projector_hidden_act},
      {"multimodal_projector_bias", multimodal_projector_bias},
      {"vision_feature_layer", vision_feature_layer},
      {"vision_feature_select_strategy", vision_feature_select_strategy},
      {"torch_dtype", torch_dtype},
      {"text_config", tc},
  };
  if (vision) {
    const VisionConfig& v = *vision;
    json compression = {{"image_token_compression_method", "patch_merge"},
                        {"spatial_merge_size", v.spatial_merge_size},
                        {"temporal_patch_size", v.temporal_patch_size}};
    root["img_token_compression_config"] = compression;
    root["vision_config"] = {
        {"model_type", "clip_vision_model"},
        {"hidden_size", v.hidden_size},
        {"num_attention_heads", v.num_attention_heads},
        {"num_hidden_layers", v.num_hidden_layers},
        {"intermediate_size", v.intermediate_size},
        {"patch_size", v.patch_size},
        {"image_size", v.image_size},
        {"projection_dim", v.projection_dim},
        {"num_channels", v.num_channels},
        {"position_embedding_type", v.position_embedding_type},
        {"rope_mode", v.rope_mode},
        {"rope_theta", v.rope_theta},
        {"hidden_act", v.hidden_act},
        {"layer_norm_eps", v.layer_norm_eps},
        {"vision_segment_max_frames", v.vision_segment_max_frames},
        {"img_token_compression_config", compression},
    };
  }
  if (quantization) {
    const QuantizationConfig& q = *quantization;
    json block = {{"mode", q.mode}, {"bits", q.bits}, {"group_size", q.group_size}};
    for (const auto& [name, m] : q.modules)
      block[name] = m.quantized ? json{{"bits", m.bits}, {"group_size", m.group_size}} : json(false);
    root["quantization"] = block;
    root["quantization_config"] = block;  // as mlx-lm writes it
  }
  // nlohmann sorts keys, as HF's save_pretrained does.
  return root.dump(2) + "\n";
}

}  // namespace m3

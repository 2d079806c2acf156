// m3 inspect PATH [-c N] [--cache-type T] [--parallel P] [--cache-mb MB] [--ram GB]: what a config
// describes, from the config alone: layer pattern, parameter counts (total / text / vision /
// active), weight bytes, KV + index-K cache per token and at a context length (in the cache type
// the commands use), what MSA attends at that length, and the memory a `serve` with those settings
// needs against this machine's RAM. When PATH is a checkpoint folder with safetensors files, the
// tensors on disk are counted and compared with the config.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "cache_type.h"
#include "m3/error.h"
#include "commands.h"
#include "usage.h"
#include "io/model_config.h"
#include "io/model_work.h"
#include "io/safetensors.h"
#include "io/tensor_schema.h"
#include "io/weight_binding.h"

namespace m3::cli {
namespace {

namespace fs = std::filesystem;

// 427040140160 -> "427,040,140,160"
std::string commas(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Binary units, the largest that keeps the number >= 1 (GiB for the real model, KiB for tiny ones).
std::string gib(double bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024.0) bytes /= 1024.0, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string bytes_text(uint64_t b) { return str_cat(commas(b), " bytes (", gib(double(b)), ")"); }

std::string percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

// rope_theta 5000000 prints as "5,000,000", not "5e+06".
std::string number(double v) {
  if (v == std::floor(v) && v >= 0 && v < 1e15) return commas(uint64_t(v));
  return str_cat(v);
}

// "0-2: dense attention + dense MLP (12288); 3-59: MSA + MoE" — runs of layers of one kind.
std::string layer_pattern(const TextConfig& t) {
  auto kind = [&](int l) {
    std::string attn = t.is_sparse_layer(l) ? "MSA" : "dense attention";
    std::string ffn = t.is_moe_layer(l) ? "MoE" : str_cat("dense MLP (", t.dense_intermediate_size, ")");
    return attn + " + " + ffn;
  };
  std::string out;
  for (int start = 0; start < t.num_hidden_layers;) {
    int end = start;
    while (end + 1 < t.num_hidden_layers && kind(end + 1) == kind(start)) ++end;
    if (!out.empty()) out += "; ";
    out += start == end ? str_cat(start) : str_cat(start, "-", end);
    out += ": " + kind(start);
    start = end + 1;
  }
  return out;
}

// Weights per format: how many linears, how many weights, and the bytes stored for them (side
// tensors included), as the loader binds them.
struct FormatTally {
  uint64_t linears = 0, weights = 0, bytes = 0;
};

void print_checkpoint(const std::string& dir, const ModelConfig& cfg, const ModelCounts& counts) {
  const bool single = fs::exists(fs::path(dir) / "model.safetensors");
  const bool sharded = fs::exists(fs::path(dir) / "model.safetensors.index.json");
  if (!single && !sharded) {
    std::printf("\ncheckpoint      no model.safetensors or model.safetensors.index.json in %s\n", dir.c_str());
    return;
  }
  TensorStore store = TensorStore::open_dir(dir);
  const uint64_t bytes = store.total_bytes();
  std::vector<TensorSpec> schema = text_tensor_schema(cfg.text);
  if (cfg.vision) {
    const std::vector<TensorSpec> v = vision_tensor_schema(cfg);
    schema.insert(schema.end(), v.begin(), v.end());
  }
  // Quantized formats store side tensors next to their weights (MXFP8 "weight_scale_inv", the
  // affine layout's "scales" and "biases"): bind every linear to see which.
  std::map<std::string, FormatTally> by_format;
  uint64_t side = 0;
  const QuantizationConfig* q = cfg.quantization ? &*cfg.quantization : nullptr;
  for (const TensorSpec& spec : schema) {
    if (spec.storage == TensorStorage::Vector || store.find(spec.name) == nullptr) continue;
    LinearWeight w;
    try {
      w = bind_linear(store, spec, q);
    } catch (const Error& e) {
      std::printf("\ncheckpoint      %s\n  does not load: %s\n", dir.c_str(), e.what());
      return;
    }
    FormatTally& t = by_format[w.format->name];
    ++t.linears;
    t.weights += uint64_t(w.rows * w.cols);
    t.bytes += w.stored_bytes();
    side += w.format->side.size();
  }
  std::map<std::string, uint64_t> by_dtype;
  for (const std::string& name : store.names()) ++by_dtype[std::string(dtype_name(store.get(name).dtype))];
  const uint64_t tensors = store.size() - side;
  std::string stored;
  for (const auto& [dt, n] : by_dtype) stored += (stored.empty() ? "" : ", ") + dt + " x " + commas(n);
  std::printf("\ncheckpoint      %s (%s)\n", dir.c_str(),
              sharded ? "sharded, model.safetensors.index.json" : "model.safetensors");
  std::printf("  tensors       %s (the config implies %s)%s: %s%s\n", commas(tensors).c_str(),
              commas(counts.tensor_count).c_str(), tensors == counts.tensor_count ? "" : "  MISMATCH", stored.c_str(),
              side ? str_cat(", of which ", commas(side), " side tensors of quantized weights").c_str() : "");
  const bool quantized = side > 0;
  if (quantized)
    std::printf("  tensor bytes  %s (the config's bf16 layout would be %s)\n", bytes_text(bytes).c_str(),
                bytes_text(counts.weight_bytes).c_str());
  else
    std::printf("  tensor bytes  %s (the config implies %s)%s\n", bytes_text(bytes).c_str(),
                commas(counts.weight_bytes).c_str(), bytes == counts.weight_bytes ? "" : "  MISMATCH");
  for (const auto& [name, t] : by_format)
    std::printf("  %-13s %s linears, %s weights, %s (%.3f bytes per weight)\n", name.c_str(), commas(t.linears).c_str(),
                commas(t.weights).c_str(), bytes_text(t.bytes).c_str(), t.weights ? double(t.bytes) / double(t.weights) : 0.0);
}

struct InspectArgs {
  std::string path;
  int64_t context = 0;
  std::string cache_type = kDefaultCacheType;
  int parallel = 1;
  uint64_t cache_mb = 2048;  // serve's default budget
  double ram_gib = 0;        // 0: this machine's
};

// This machine's RAM (MemTotal) and what is available now (MemAvailable), in bytes; 0 when unknown.
std::pair<uint64_t, uint64_t> machine_ram() {
  uint64_t total = 0, avail = 0;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char key[64];
    unsigned long long kb = 0;
    while (std::fscanf(f, "%63s %llu kB\n", key, &kb) == 2) {
      if (std::string(key) == "MemTotal:") total = kb * 1024ull;
      if (std::string(key) == "MemAvailable:") avail = kb * 1024ull;
    }
    std::fclose(f);
  }
  if (total == 0) total = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
  return {total, avail};
}

void run_inspect(const InspectArgs& a) {
  const std::string& path = a.path;
  const int64_t context_arg = a.context;
  const bool is_dir = fs::is_directory(path);
  const std::string config_path = is_dir ? (fs::path(path) / "config.json").string() : path;
  const ModelConfig cfg = ModelConfig::from_file(config_path);
  const ModelCounts n = count_model(cfg);
  const TextConfig& t = cfg.text;
  const SparseAttentionConfig& s = t.sparse;

  int moe_layers = 0, msa_layers = 0;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    moe_layers += t.is_moe_layer(l);
    msa_layers += t.is_sparse_layer(l);
  }

  std::printf("config          %s\n", config_path.c_str());
  std::printf("model           %s%s%s, %s\n", cfg.model_type.empty() ? "(no model_type)" : cfg.model_type.c_str(),
              cfg.architectures.empty() ? "" : " / ", cfg.architectures.empty() ? "" : cfg.architectures[0].c_str(),
              cfg.torch_dtype.c_str());

  std::printf("\ntext model\n");
  std::printf("  layers        %d: %s\n", t.num_hidden_layers, layer_pattern(t).c_str());
  std::printf("  hidden        %d, vocab %s, max positions %s\n", t.hidden_size, commas(t.vocab_size).c_str(),
              commas(uint64_t(t.max_position_embeddings)).c_str());
  std::printf("  attention     %d query heads / %d KV heads (%d per group), head_dim %d, per-head q/k RMSNorm\n",
              t.num_attention_heads, t.num_key_value_heads, t.num_attention_heads / t.num_key_value_heads,
              t.head_dim);
  std::printf("  rope          theta %s, rotary dims %d of %d (NeoX halves), the rest pass through\n",
              number(t.rope_theta).c_str(), t.rotary_dim, t.head_dim);
  if (moe_layers > 0) {
    std::printf("  MoE           %d layers: %d experts (width %d), top-%d, %s routing%s, scale %s",
                moe_layers, t.num_local_experts, t.intermediate_size, t.num_experts_per_tok,
                t.scoring_func.c_str(), t.use_routing_bias ? " + selection bias" : "",
                str_cat(t.routed_scaling_factor).c_str());
    if (t.n_shared_experts > 0)
      std::printf(", %d shared expert (width %d)", t.n_shared_experts, t.shared_intermediate_size);
    std::printf("\n");
  }
  std::printf("  FFN act       %s (alpha %s, limit %s)\n", t.hidden_act.c_str(), str_cat(t.swiglu_alpha).c_str(),
              str_cat(t.swiglu_limit).c_str());
  if (msa_layers > 0)
    std::printf("  MSA           %d layers: blocks of %d tokens, top-%d blocks per query and KV group "
                "(%d ranked + local), %d index heads x %d\n",
                msa_layers, s.sparse_block_size, s.sparse_topk_blocks, s.sparse_topk_blocks - 1,
                s.sparse_num_index_heads, s.sparse_index_dim);
  else
    std::printf("  MSA           none (dense causal attention in every layer)\n");
  if (t.num_mtp_modules > 0)
    std::printf("  MTP           config declares %d modules (not counted below: no mtp.* weights assumed)\n",
                t.num_mtp_modules);

  if (cfg.vision) {
    const VisionConfig& v = *cfg.vision;
    std::printf("\nvision tower    %d layers, hidden %d, %d heads x %d, MLP %d, patch %dx%d x %d frames, "
                "%dx%d merge -> projector %d\n",
                v.num_hidden_layers, v.hidden_size, v.num_attention_heads, v.head_dim(), v.intermediate_size,
                v.patch_size, v.patch_size, v.temporal_patch_size, v.spatial_merge_size, v.spatial_merge_size,
                cfg.projector_hidden_size);
  } else {
    std::printf("\nvision tower    none\n");
  }

  std::printf("\nparameters\n");
  std::printf("  total         %s\n", commas(n.total_params).c_str());
  std::printf("  text          %s (embedding %s, lm_head %s)\n", commas(n.text_params).c_str(),
              commas(n.embedding_params).c_str(), commas(n.lm_head_params).c_str());
  if (cfg.vision)
    std::printf("  vision        %s (tower %s, projector + merger %s)\n", commas(n.vision_params).c_str(),
                commas(n.vision_tower_params).c_str(), commas(n.projector_params).c_str());
  std::printf("  active        %s per text token: text params less the %d unselected experts of each MoE "
              "layer; includes the embedding table (%s without it)\n",
              commas(n.active_params).c_str(), t.num_local_experts - t.num_experts_per_tok,
              commas(n.active_params - n.embedding_params).c_str());
  std::printf("  tensors       %s\n", commas(n.tensor_count).c_str());
  std::printf("  weight bytes  %s: bf16, except fp32 router, routing bias and patch embedding (%s params)\n",
              bytes_text(n.weight_bytes).c_str(), commas(n.fp32_params).c_str());

  // Cache sizes, in the cache type the commands use (--cache-type). The default context is the
  // longest the model was configured for.
  const DType cache_type = cache_type_of(a.cache_type);
  const uint64_t elem = dtype_size(cache_type);
  // fp8 adds one scale byte per stored vector: K and V per layer and KV head, an index key per MSA layer.
  const bool fp8 = cache_type == DType::F8_E4M3;
  const uint64_t kv_token = n.kv_bytes_per_token / 2 * elem + (fp8 ? 2ull * t.num_hidden_layers * t.num_key_value_heads : 0);
  const uint64_t ik_token = n.index_k_bytes_per_token / 2 * elem + (fp8 ? uint64_t(msa_layers) : 0);
  const uint64_t ctx = context_arg > 0 ? uint64_t(context_arg) : uint64_t(t.max_position_embeddings);
  const char* per_vector = fp8 ? " + a scale byte each" : "";
  std::printf("\ncache per token KV %s bytes (%d layers x K,V x %d heads x %d x %s%s) + index K %s bytes "
              "(%d MSA layers x %d x %s%s) = %s bytes (--cache-type %s)\n",
              commas(kv_token).c_str(), t.num_hidden_layers, t.num_key_value_heads, t.head_dim, a.cache_type.c_str(),
              per_vector, commas(ik_token).c_str(), msa_layers, s.sparse_index_dim, a.cache_type.c_str(), per_vector,
              commas(kv_token + ik_token).c_str(), a.cache_type.c_str());
  std::printf("context N       %s tokens%s%s\n", commas(ctx).c_str(),
              context_arg > 0 ? "" : " (max_position_embeddings; set with -c/--ctx-size)",
              ctx > uint64_t(t.max_position_embeddings) ? "  (beyond max_position_embeddings)" : "");
  std::printf("  cache at N    KV %s + index K %s = %s per sequence\n", gib(double(kv_token) * ctx).c_str(),
              gib(double(ik_token) * ctx).c_str(), gib(double(kv_token + ik_token) * ctx).c_str());

  // What `m3 serve -c N --parallel P --cache-mb MB` holds: the weights (mapped: they count once
  // they are paged in), P caches of N tokens, and the prefix cache's budget.
  const uint64_t weights = is_dir && fs::exists(fs::path(path) / "model.safetensors") ? TensorStore::open_dir(path).total_bytes()
                                                                                       : n.weight_bytes;
  const uint64_t caches = uint64_t(a.parallel) * (kv_token + ik_token) * ctx, prefix = a.cache_mb << 20;
  const uint64_t total = weights + caches + prefix;
  const auto [ram_total, ram_avail] = machine_ram();
  const uint64_t ram = a.ram_gib > 0 ? uint64_t(a.ram_gib * double(1ull << 30)) : ram_total;
  std::printf("\nmemory          weights %s + %d sequence cache(s) of N tokens %s + prefix cache %s = %s\n",
              gib(double(weights)).c_str(), a.parallel, gib(double(caches)).c_str(), gib(double(prefix)).c_str(),
              gib(double(total)).c_str());
  if (ram > 0) {
    const char* whose = a.ram_gib > 0 ? "--ram" : "this machine's";
    if (total <= ram) {
      std::printf("  fits          in %s %s of RAM, %s to spare%s\n", whose, gib(double(ram)).c_str(), gib(double(ram - total)).c_str(),
                  a.ram_gib <= 0 && ram_avail > 0 && total > ram_avail
                      ? str_cat(" (but only ", gib(double(ram_avail)), " is available now)").c_str()
                      : "");
    } else {
      std::printf("  does not fit  in %s %s of RAM: %s short. Lower -c (the caches grow with N), --parallel or --cache-mb",
                  whose, gib(double(ram)).c_str(), gib(double(total - ram)).c_str());
      std::printf("%s; weights beyond RAM stay mapped and are read from disk as used (slow)\n",
                  cache_type == DType::F32 ? ", or use --cache-type bf16 (half the cache)" : "");
    }
  }

  if (msa_layers > 0) {
    const uint64_t B = uint64_t(s.sparse_block_size), K = uint64_t(s.sparse_topk_blocks);
    const uint64_t last = ctx - 1;
    const uint64_t visible = last / B + 1, selected = std::min(visible, K);
    const uint64_t keys = msa_keys(last, B, K);
    std::printf("\nMSA at N        the query at position %s sees %s blocks, selects %s -> attends %s of %s keys (%s)\n",
                commas(last).c_str(), commas(visible).c_str(), commas(selected).c_str(), commas(keys).c_str(),
                commas(ctx).c_str(), percent(double(keys), double(ctx)).c_str());
    const uint64_t sparse_pairs = msa_pairs(ctx, B, K), dense_pairs = ctx * (ctx + 1) / 2;
    std::printf("  prefill of N  %s query-key pairs per MSA layer and head vs %s dense causal (%s)\n",
                commas(sparse_pairs).c_str(), commas(dense_pairs).c_str(),
                percent(double(sparse_pairs), double(dense_pairs)).c_str());
    // One decode step at depth N (io/model_work.h): dense layers read all of K/V; MSA layers scan
    // every index key and then read only the selected keys' K/V (each KV group its own blocks).
    const double msa_read = forward_work(cfg, linear_sizes(cfg), ctx - 1, 1, cache_type).cache_bytes;
    const double all_dense_read = double(kv_token) * double(ctx);
    std::printf("  decode at N   cache read per token %s (index K scan + selected K/V) vs %s if every layer "
                "were dense (%s)\n",
                gib(msa_read).c_str(), gib(all_dense_read).c_str(), percent(msa_read, all_dense_read).c_str());
  }

  if (is_dir) print_checkpoint(path, cfg, n);
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Summarise a model: layers, parameters, weight and cache bytes, MSA at a context length, memory for serve");
  cmd->add_option("path", a->path, "Model folder (with config.json) or a config.json file")->required();
  // Up to 2^32 so the pair counts below stay within 64 bits.
  cmd->add_option("-c,--ctx-size,--context", a->context, "Context length N for cache and MSA figures "
                                                         "(default: max_position_embeddings)")
      ->check(InRange(1, double(int64_t(1) << 32)));
  add_cache_type_option(cmd, a->cache_type);
  cmd->add_option("--parallel", a->parallel, "Sequences served at once (serve --parallel): caches of N tokens each")
      ->capture_default_str()->check(InRange(1, 256));
  cmd->add_option("--cache-mb", a->cache_mb, "Prefix cache budget in MiB to count (serve --cache-mb)")->capture_default_str();
  cmd->add_option("--ram", a->ram_gib, "RAM in GiB to plan for (default: this machine's MemTotal)")->check(NonNegative());
  cmd->callback([a] { run_inspect(*a); });
}

}  // namespace m3::cli

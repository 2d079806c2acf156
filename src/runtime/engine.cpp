#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include "m3/error.h"
#include "runtime/generation_defaults.h"

namespace m3 {

Engine::Engine() = default;
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const std::string& dir, int threads) {
  EngineOptions o;
  o.threads = threads;
  return load(dir, o);
}

std::unique_ptr<Engine> Engine::load(const std::string& dir, const EngineOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  M3_CHECK(std::filesystem::is_directory(dir), dir, ": not a model folder (expected config.json, tokenizer.json and safetensors)");
  std::unique_ptr<Engine> e(new Engine());
  e->config_ = std::make_unique<ModelConfig>(ModelConfig::from_file(dir + "/config.json"));
  MapOptions map;
  map.map = options.mmap;
  map.lock = options.mlock;
  e->store_ = std::make_unique<TensorStore>(TensorStore::open_dir(dir, map));
  const SamplingParams sampling = read_generation_defaults(dir);
  const int threads = options.threads;
  e->tokenizer_ = Tokenizer::from_file(dir + "/tokenizer.json");
  const TextConfig& text = e->config_->text;
  M3_CHECK(e->tokenizer_->vocab_size() <= text.vocab_size, dir, "/tokenizer.json: ", e->tokenizer_->vocab_size(),
           " token ids but config.json text_config.vocab_size is ", text.vocab_size);
  e->pool_ = std::make_unique<ThreadPool>(threads);
  e->model_ = std::make_unique<TextModel>(*e->config_, *e->store_, *e->pool_);
  if (e->config_->vision.has_value())
    e->tower_ = std::make_unique<vision::VisionTower>(*e->config_, *e->store_, *e->pool_);

  ModelInfo& i = e->info_;
  i.source = e->config_->source;
  i.hidden_size = text.hidden_size;
  i.vocab_size = e->model_->vocab_size();
  i.sample_vocab = std::min(e->tokenizer_->vocab_size(), i.vocab_size);
  i.max_position = text.max_position_embeddings;
  i.layers = text.num_hidden_layers;
  i.block_size = e->model_->cache_shape().block_size;
  i.has_vision = e->tower_ != nullptr;
  i.threads = e->pool_->size();
  std::map<std::string, int> per_dtype;
  for (const std::string& name : e->store_->names()) {
    const TensorView& t = e->store_->get(name);
    i.parameters += t.numel();
    i.weight_bytes += t.nbytes;
    ++per_dtype[std::string(dtype_name(t.dtype))];
  }
  for (const auto& [name, n] : per_dtype) i.weight_dtypes += (i.weight_dtypes.empty() ? "" : ", ") + name + " x " + std::to_string(n);
  i.weights_mapped = options.mmap;
  i.weights_locked = options.mlock;
  i.default_sampling = sampling;
  i.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

}  // namespace m3

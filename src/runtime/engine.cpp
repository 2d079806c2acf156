#include "runtime/engine.h"

#include <algorithm>
#include <filesystem>

#include "m3/error.h"

namespace m3 {

Engine::Engine() = default;
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const std::string& dir, int threads) {
  M3_CHECK(std::filesystem::is_directory(dir), dir, ": not a model folder (expected config.json, tokenizer.json and safetensors)");
  std::unique_ptr<Engine> e(new Engine());
  e->config_ = std::make_unique<ModelConfig>(ModelConfig::from_file(dir + "/config.json"));
  e->store_ = std::make_unique<TensorStore>(TensorStore::open_dir(dir));
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
  return e;
}

}  // namespace m3

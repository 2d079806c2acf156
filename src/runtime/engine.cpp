#include "runtime/engine.h"

#include <filesystem>

#include "base/error.h"

namespace m3 {

std::unique_ptr<Engine> Engine::load(const std::string& dir, int threads) {
  M3_CHECK(std::filesystem::is_directory(dir), dir, ": not a model folder (expected config.json, tokenizer.json and safetensors)");
  auto e = std::make_unique<Engine>();
  e->config = ModelConfig::from_file(dir + "/config.json");
  e->store = TensorStore::open_dir(dir);
  e->tokenizer = Tokenizer::from_file(dir + "/tokenizer.json");
  M3_CHECK(e->tokenizer->vocab_size() <= e->config.text.vocab_size, dir, "/tokenizer.json: ", e->tokenizer->vocab_size(),
           " token ids but config.json text_config.vocab_size is ", e->config.text.vocab_size);
  e->pool = std::make_unique<ThreadPool>(threads);
  e->model = std::make_unique<TextModel>(e->config, e->store, *e->pool);
  return e;
}

}  // namespace m3

#pragma once
// A loaded checkpoint folder: config, mapped tensors, tokenizer, thread pool and text model.
#include <memory>
#include <string>

#include "base/thread_pool.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/text_model.h"
#include "tokenizer/tokenizer.h"

namespace m3 {

struct Engine {
  ModelConfig config;
  TensorStore store;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<TextModel> model;

  // dir holds config.json, tokenizer.json and model.safetensors (or shards + index).
  static std::unique_ptr<Engine> load(const std::string& dir, int threads);
};

}  // namespace m3

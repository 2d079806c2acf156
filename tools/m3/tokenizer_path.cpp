#include "tokenizer_path.h"

#include <filesystem>

namespace m3::cli {

std::string tokenizer_path(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec)) return (std::filesystem::path(model) / "tokenizer.json").string();
  return model;
}

}  // namespace m3::cli

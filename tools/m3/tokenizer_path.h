#pragma once
#include <string>

namespace m3::cli {

// -m of the commands that need only a tokenizer: a model folder (its tokenizer.json) or the file.
std::string tokenizer_path(const std::string& model);

}  // namespace m3::cli

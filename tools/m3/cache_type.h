#pragma once
// --cache-type f32|bf16 (as in llama.cpp's -ctk/-ctv): the element type of the K, V and index-K
// caches, shared by generate, logits, bench and bench attention.
#include <CLI/CLI.hpp>
#include <string>

#include "m3/dtype.h"

namespace m3::cli {

// The cache type every command uses unless told otherwise.
inline constexpr const char* kDefaultCacheType = "f32";

CLI::Option* add_cache_type_option(CLI::App* cmd, std::string& value);
DType cache_type_of(const std::string& value);  // value was checked by the option

}  // namespace m3::cli

#pragma once
// --cache-type bf16|f32|fp8 (as in llama.cpp's -ctk/-ctv): the element type of the K, V and index-K
// caches, shared by generate, logits, bench and bench attention.
#include <CLI/CLI.hpp>
#include <string>

#include "m3/dtype.h"

namespace m3::cli {

// The cache type every command uses unless told otherwise.
// bf16, the spec's reference dtype (§2.6): half of f32's memory, and the values are stored
// rounded, never the math (memory/kv_cache.h).
inline constexpr const char* kDefaultCacheType = "bf16";

CLI::Option* add_cache_type_option(CLI::App* cmd, std::string& value);
DType cache_type_of(const std::string& value);  // value was checked by the option

}  // namespace m3::cli

#include "cache_type.h"

#include "m3/error.h"

namespace m3::cli {

CLI::Option* add_cache_type_option(CLI::App* cmd, std::string& value) {
  return cmd->add_option("--cache-type", value, "KV and index-K cache type: bf16, f32 (twice the memory), or fp8 (E4M3 with a power-of-two scale per vector: half of bf16)")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}))
      ->capture_default_str();
}

DType cache_type_of(const std::string& value) {
  const auto t = parse_cache_type(value);
  M3_CHECK(t.has_value(), "--cache-type: expected f32, bf16 or fp8, got '", value, "'");
  return *t;
}

}  // namespace m3::cli

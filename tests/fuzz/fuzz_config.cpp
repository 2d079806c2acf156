// config.json: ModelConfig::from_json_text parses and validates; a config that validates is then
// used the way loading uses it: count_model and tensor_schema (every tensor the checkpoint must
// hold), and it must round-trip through to_json_text (make-checkpoint writes configs that way).
#include <cstdint>
#include <string>

#include "m3/error.h"
#include "fuzz_support.h"
#include "io/model_config.h"
#include "io/tensor_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  m3::ModelConfig cfg;
  try {
    cfg = m3::ModelConfig::from_json_text(text, "fuzz/config.json");
  } catch (const m3::Error&) {
    return 0;
  }
  // A validated config is trusted from here on: anything that throws below is a finding.
  const m3::ModelCounts counts = m3::count_model(cfg);
  const std::vector<m3::TensorSpec> schema = m3::tensor_schema(cfg);
  uint64_t params = 0;
  for (const m3::TensorSpec& t : schema) {
    for (int64_t d : t.shape)
      if (d <= 0) m3::fuzz::finding(m3::str_cat("validated config gives tensor ", t.name, " a dimension ", d));
    params += uint64_t(t.numel());
  }
  if (params != counts.total_params)
    m3::fuzz::finding(m3::str_cat("count_model says ", counts.total_params, " parameters, the schema holds ", params));
  const std::string written = cfg.to_json_text();
  try {
    // Same source name: ModelConfig keeps it (for messages) and compares it.
    if (!(m3::ModelConfig::from_json_text(written, cfg.source) == cfg))
      m3::fuzz::finding("config changed in a to_json_text round trip:\n" + written);
  } catch (const m3::Error& e) {
    m3::fuzz::finding(std::string("a validated config, written back, is refused: ") + e.what());
  }
  return 0;
}

#include "runtime/generation_defaults.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/read_file.h"
#include "m3/error.h"

namespace m3 {

SamplingParams read_generation_defaults(const std::string& dir) {
  SamplingParams s = published_default_sampling();
  const std::string path = dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return s;
  const std::string text = read_whole_file(path, "generation_config.json");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  M3_CHECK(doc.is_object(), path, ": expected a JSON object");
  auto number = [&](const char* key, double lo, double hi, auto& out) {
    auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) return;
    M3_CHECK(it->is_number() && it->get<double>() >= lo && it->get<double>() <= hi, path, ": field \"", key,
             "\" must be a number from ", lo, " to ", hi, ", got ", it->dump());
    out = static_cast<std::remove_reference_t<decltype(out)>>(it->get<double>());
  };
  number("temperature", 0.0, 100.0, s.temperature);
  number("top_p", 1e-9, 1.0, s.top_p);
  number("top_k", 0.0, double(1 << 30), s.top_k);
  number("min_p", 0.0, 1.0, s.min_p);
  number("repetition_penalty", 1e-3, 100.0, s.repetition_penalty);
  if (auto it = doc.find("do_sample"); it != doc.end() && !it->is_null()) {
    M3_CHECK(it->is_boolean(), path, ": field \"do_sample\" must be true or false, got ", it->dump());
    if (!it->get<bool>()) s.temperature = 0.0f;
  }
  return s;
}

}  // namespace m3

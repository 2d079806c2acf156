#pragma once
// A field of a tokenizer.json object, as Hugging Face's loaders read one: absent and null are the
// same (the option's default applies).
#include <nlohmann/json.hpp>

namespace m3::tok {

inline const nlohmann::json* find_field(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace m3::tok

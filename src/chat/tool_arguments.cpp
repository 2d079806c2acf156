#include "m3/chat/tool_arguments.h"

#include <charconv>
#include <cstdint>

#include "m3/chat/json_depth.h"
#include "m3/chat/text_scan.h"

namespace m3::chat {
namespace {

// JSON nesting we accept from a model's text (deeper values would make dumping recurse deeply).
constexpr int kMaxJsonDepth = 64;

struct TypeSet {
  bool string = false, integer = false, number = false, boolean = false, null = false, object = false,
       array = false;
  bool any() const { return string || integer || number || boolean || null || object || array; }
};

void add_type(TypeSet& t, std::string_view name) {
  if (name == "string") t.string = true;
  else if (name == "integer") t.integer = true;
  else if (name == "number") t.number = true;
  else if (name == "boolean") t.boolean = true;
  else if (name == "null") t.null = true;
  else if (name == "object") t.object = true;
  else if (name == "array") t.array = true;
}

TypeSet types_of(const Json* schema, int depth = 0) {
  TypeSet t;
  if (!schema || !schema->is_object() || depth > 8) return t;
  if (auto it = schema->find("type"); it != schema->end()) {
    if (it->is_string()) add_type(t, it->get_ref<const std::string&>());
    if (it->is_array()) {
      for (const Json& n : *it)
        if (n.is_string()) add_type(t, n.get_ref<const std::string&>());
    }
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = schema->find(key);
    if (it == schema->end() || !it->is_array()) continue;
    for (const Json& member : *it) {
      const TypeSet m = types_of(&member, depth + 1);
      t.string |= m.string, t.integer |= m.integer, t.number |= m.number, t.boolean |= m.boolean;
      t.null |= m.null, t.object |= m.object, t.array |= m.array;
    }
  }
  if (!t.any()) {
    if (schema->contains("properties")) t.object = true;
    if (schema->contains("items")) t.array = true;
  }
  return t;
}

// The schema (itself or an anyOf/oneOf member) that describes the given container type.
const Json* member_for(const Json* schema, std::string_view type, std::string_view child_key) {
  if (!schema || !schema->is_object()) return nullptr;
  if (schema->contains(child_key)) return schema;
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = schema->find(key);
    if (it == schema->end() || !it->is_array()) continue;
    for (const Json& member : *it) {
      TypeSet t = types_of(&member);
      if ((type == "object" && t.object) || (type == "array" && t.array)) return &member;
    }
  }
  return nullptr;
}

const Json* items_schema(const Json* schema) {
  const Json* m = member_for(schema, "array", "items");
  if (!m) return nullptr;
  auto it = m->find("items");
  return it != m->end() && it->is_object() ? &*it : nullptr;
}

const Json* child_schema(const Json* schema, std::string_view key) {
  const Json* m = member_for(schema, "object", "properties");
  if (m) {
    if (const Json* p = ToolSchemas::property(m, key)) return p;
  }
  if (!schema || !schema->is_object()) return nullptr;
  auto extra = schema->find("additionalProperties");
  return extra != schema->end() && extra->is_object() ? &*extra : nullptr;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// A JSON value parsed from the text, or discarded.
Json parse_json(std::string_view t) {
  if (t.empty() || json_depth_exceeded_at(t, kMaxJsonDepth)) return Json(Json::value_t::discarded);
  return Json::parse(t.begin(), t.end(), nullptr, /*allow_exceptions=*/false);
}

bool equals_ignore_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != b[i]) return false;
  }
  return true;
}

Json json_or_text(const std::string& raw) {
  Json parsed = parse_json(trim(raw));
  return parsed.is_discarded() ? Json(raw) : parsed;
}

Json typed_leaf(const std::string& raw, const TypeSet& t) {
  const std::string_view s = trim(raw);
  if (!t.any()) return json_or_text(raw);
  if (t.null && s == "null") return Json();
  if (t.boolean) {
    // Python's str(True) is "True": accept either case.
    if (equals_ignore_case(s, "true")) return Json(true);
    if (equals_ignore_case(s, "false")) return Json(false);
  }
  if (t.integer) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return Json(v);
    Json n = parse_json(s);
    if (n.is_number_integer()) return n;
    if (n.is_number_float() && !t.number) {
      const double d = n.get<double>();
      if (d == static_cast<double>(static_cast<int64_t>(d)) && d > -9.2e18 && d < 9.2e18)
        return Json(static_cast<int64_t>(d));
    }
  }
  if (t.number) {
    Json n = parse_json(s);
    if (n.is_number()) return n;
  }
  if (t.object || t.array) {
    if (s.empty()) return t.object ? Json::object() : Json::array();
    Json n = parse_json(s);
    if ((t.object && n.is_object()) || (t.array && n.is_array())) return n;
  }
  if (t.string) return Json(raw);
  return json_or_text(raw);
}

}  // namespace

bool is_string_only(const Json* schema) {
  const TypeSet t = types_of(schema);
  return t.string && !(t.integer || t.number || t.boolean || t.null || t.object || t.array);
}

Json typed_value(const XmlNode& node, const Json* schema) {
  const TypeSet t = types_of(schema);
  if (node.children.empty()) return typed_leaf(node.text, t);
  bool all_items = true;
  for (const XmlNode& c : node.children) all_items &= c.name == "item";
  const bool as_array = t.array ? (all_items || !t.object) : (!t.object && all_items);
  if (as_array) {
    const Json* item_schema = items_schema(schema);
    Json arr = Json::array();
    for (const XmlNode& c : node.children) arr.push_back(typed_value(c, item_schema));
    return arr;
  }
  Json obj = Json::object();
  for (const XmlNode& c : node.children) {
    if (obj.contains(c.name)) continue;  // the first occurrence wins, as for parameters
    obj[c.name] = typed_value(c, child_schema(schema, c.name));
  }
  return obj;
}

ToolSchemas::ToolSchemas(const Json& tools) : tools_(Json::object()) {
  if (!tools.is_array()) return;
  for (const Json& tool : tools) {
    if (!tool.is_object()) continue;
    auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) continue;
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || tools_.contains(name->get<std::string>())) continue;
    auto params = fn->find("parameters");
    tools_[name->get<std::string>()] = params != fn->end() && params->is_object() ? *params : Json::object();
  }
}

const Json* ToolSchemas::parameters(std::string_view tool) const {
  auto it = tools_.find(std::string(tool));
  return it == tools_.end() ? nullptr : &*it;
}

const Json* ToolSchemas::property(const Json* parameters, std::string_view key) {
  if (!parameters || !parameters->is_object()) return nullptr;
  auto props = parameters->find("properties");
  if (props == parameters->end() || !props->is_object()) return nullptr;
  auto it = props->find(std::string(key));
  return it == props->end() || !it->is_object() ? nullptr : &*it;
}

}  // namespace m3::chat

#pragma once
// The M3 chat-format vocabulary shared by the template renderer and the output parsers
// (spec §6, §7). Markers are looked up by content in tokenizer.json, never by id.
#include <string_view>

#include <nlohmann/json.hpp>

namespace m3::chat {

// Ordered so that tool schemas keep the client's key order when they are echoed into the prompt
// and so that emitted OpenAI objects read naturally (id, type, function).
using Json = nlohmann::ordered_json;

inline constexpr std::string_view kBos = "]~!b[";          // begin of document, once per prompt
inline constexpr std::string_view kTurnStart = "]~b]";     // followed by the role name
inline constexpr std::string_view kTurnEnd = "[e~[";       // end of turn (EOS)
inline constexpr std::string_view kThinkOpen = "<mm:think>";
inline constexpr std::string_view kThinkClose = "</mm:think>";
inline constexpr std::string_view kNamespace = "]<]minimax[>[";  // prefixes every tool-call tag
inline constexpr std::string_view kImagePlaceholder = "]<]image[>[";
inline constexpr std::string_view kVideoPlaceholder = "]<]video[>[";

enum class ThinkingMode { Enabled, Disabled, Adaptive };

}  // namespace m3::chat

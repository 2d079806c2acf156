#pragma once
// Nesting depth of JSON text, measured before anything parses it. nlohmann's parser is iterative,
// but copying, dumping, destroying in older versions, and our own writers (tool-call XML, the
// tools' JSON in the prompt) recurse once per level: a client's 1,000,000-deep array would
// overflow the stack. Text deeper than a limit is refused before a Json value exists.
#include <cstddef>
#include <optional>
#include <string_view>

namespace m3::chat {

// Default nesting limit for client JSON (request bodies, tool-call arguments in the history).
inline constexpr int kDefaultMaxJsonDepth = 128;
// The most any configuration may allow: the recursive walkers stay far from the stack's end
// (8 MiB threads, ASan frames) at this depth.
inline constexpr int kMaxJsonDepthLimit = 1000;

// The byte offset of the first '[' or '{' that opens level limit + 1 (brackets inside strings,
// escapes included, do not count), or nullopt when the text stays within `limit`. Linear, no
// allocation; for malformed text the answer is approximate but the parse fails anyway.
std::optional<size_t> json_depth_exceeded_at(std::string_view text, int limit);

}  // namespace m3::chat

#pragma once
// The M3 chat template (spec §7.1), rendered in C++ from an OpenAI-style request.
//
// The prompt comes back as segments: template markup (role headers, control tokens, the tool-call
// XML tags) is `special` and may contain control tokens; everything a client wrote (message text,
// tool results, tool definitions, argument values) is plain, so "]~b]" typed by a user stays
// ordinary text. tokenize() below encodes it that way. docs/CHAT_FORMAT.md shows the format.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "m3/chat/m3_format.h"

namespace m3 {
class Tokenizer;
}

namespace m3::chat {

// "enabled" | "disabled" | "adaptive"; anything else is an m3::Error naming `field`.
ThinkingMode parse_thinking_mode(std::string_view value, std::string_view field);
std::string_view to_string(ThinkingMode mode);
// OpenAI reasoning_effort: none/minimal -> disabled, low/medium -> adaptive, high/xhigh -> enabled.
ThinkingMode thinking_mode_from_reasoning_effort(std::string_view effort, std::string_view field);
// The mode a chat-completions request asks for, first match wins:
// chat_template_kwargs.thinking_mode, chat_template_kwargs.enable_thinking (bool),
// reasoning_effort, then `fallback`.
ThinkingMode thinking_mode_for_request(const Json& request, ThinkingMode fallback = ThinkingMode::Adaptive);

// Whether the official template keeps reasoning of earlier turns is not known (spec §7.1).
enum class HistoryReasoning {
  KeepAll,         // every assistant turn that carries reasoning_content renders it (default)
  AfterLastUser,   // only turns after the last user message keep it; earlier ones get "</mm:think>"
};

struct ChatTemplateOptions {
  ThinkingMode thinking_mode = ThinkingMode::Adaptive;
  bool add_generation_prompt = true;
  HistoryReasoning history_reasoning = HistoryReasoning::KeepAll;
};

struct PromptSegment {
  std::string text;
  bool special = false;  // template markup: encode with allow_special=true
};

enum class MediaKind { Image, Video };

// One image or video part, in prompt order. Each left one placeholder token in the prompt
// (kImagePlaceholder / kVideoPlaceholder) for the caller to expand (spec §5.3).
struct MediaRef {
  MediaKind kind = MediaKind::Image;
  std::string url;      // image_url.url / video_url.url / input_image.image_url; "" for a file_id
  Json part;            // the whole content part (detail, file_id, ...)
  size_t message_index = 0;
  size_t part_index = 0;
};

struct RenderedPrompt {
  std::vector<PromptSegment> segments;  // adjacent segments of the same kind are merged
  std::vector<MediaRef> media;
  // The generation prefix opened a reasoning block (thinking_mode=enabled): the model's output
  // starts inside reasoning, which the output parser must be told.
  bool opens_reasoning = false;

  std::string text() const;  // all segments concatenated (for logs and tests)
};

// messages: OpenAI chat messages; tools: null or an array of {type:"function", function:{...}}.
// Malformed input throws m3::Error naming the field, e.g. "messages[2].tool_calls[0].function.name".
RenderedPrompt render_chat(const Json& messages, const Json& tools, const ChatTemplateOptions& options = {});

// Token ids of the prompt as Hugging Face would produce them for the rendered string, except that
// control-token text inside plain segments is never matched as a control token. Text on both
// sides of a segment boundary is pre-tokenized as one run, as HF does.
std::vector<int32_t> tokenize(const Tokenizer& tokenizer, const RenderedPrompt& prompt);

}  // namespace m3::chat

// Chat-template renderer: a messages array (or {"messages": [...], "tools": [...]}) as JSON ->
// render_chat under every template option -> tokenize with a real tokenizer. Unlike the request
// harness, no request validation runs first, so the renderer's own checks of roles, content
// parts, tool calls and tool definitions are what stands between the input and the prompt.
//
// Input: one option byte, then the JSON. Option byte: thinking mode (value % 3), history
// reasoning (bit 2), generation prompt (bit 3 clear: add it). Seeds start with a digit or letter
// so that they stay readable.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "m3/chat/chat_template.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace m3::chat;
  m3::fuzz::ByteReader in(data, size);
  const uint8_t opt = in.byte();
  ChatTemplateOptions options;
  options.thinking_mode = opt % 3 == 0 ? ThinkingMode::Adaptive
                          : opt % 3 == 1 ? ThinkingMode::Enabled
                                         : ThinkingMode::Disabled;
  options.history_reasoning = (opt & 4) ? HistoryReasoning::AfterLastUser : HistoryReasoning::KeepAll;
  options.add_generation_prompt = !(opt & 8);

  // Not JSON is not interesting here (the request harness fuzzes the JSON parser).
  const std::string_view text = in.rest();
  const Json doc = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  Json messages = doc, tools;
  if (doc.is_object()) {
    messages = doc.contains("messages") ? doc["messages"] : Json();
    tools = doc.contains("tools") ? doc["tools"] : Json();
    // The mode the server would pick from the same object (chat_template_kwargs, reasoning_effort).
    try {
      options.thinking_mode = thinking_mode_for_request(doc, options.thinking_mode);
    } catch (const m3::Error&) {
    }
  }
  try {
    const RenderedPrompt prompt = render_chat(messages, tools, options);
    const m3::Tokenizer& tok = m3::fuzz::small_tokenizer();
    const std::vector<int32_t> ids = tokenize(tok, prompt);
    // The server expands each image/video placeholder token into that medium's embeddings, in
    // order (spec §5.3): a placeholder typed by a client, or a part that left none, would shift
    // every medium after it. So the token count must equal the media list.
    const int32_t image = tok.require_token(kImagePlaceholder), video = tok.require_token(kVideoPlaceholder);
    size_t placeholders = 0;
    for (int32_t id : ids) placeholders += id == image || id == video;
    if (placeholders != prompt.media.size())
      m3::fuzz::finding(m3::str_cat(placeholders, " media placeholder tokens for ", prompt.media.size(), " media parts"));
  } catch (const m3::Error&) {
  }
  return 0;
}

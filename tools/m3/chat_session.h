#pragma once
// One `m3 chat` conversation on a runtime Session. Every turn renders the whole conversation with
// the chat template and tokenizes it; the session reuses the longest prefix its cache shares with
// the new prompt and prefills only the rest (docs/CHAT.md, "KV reuse"). Image and video rows are
// compared by their features' keys (runtime/prompt.h), so a prefix never crosses a different image.
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "m3/chat/chat_delta.h"
#include "m3/chat/thinking_budget.h"
#include "m3/dtype.h"
#include "m3/engine.h"
#include "m3/media.h"
#include "m3/prompt.h"
#include "m3/session.h"

namespace m3::cli {

struct ChatSessionOptions {
  std::string system;                    // "" : the template's default developer text
  chat::Json tools;                      // null or OpenAI tools ([{type:"function", function:{...}}])
  chat::ThinkingMode thinking_mode = chat::ThinkingMode::Adaptive;
  std::optional<int64_t> max_reasoning_tokens;  // nullopt: no cap
  int max_tokens = 1024;
  int prefill_chunk = 512;
  bool stop_at_eos = true;
  bool reuse_kv = true;  // false: every turn starts from an empty cache (for comparisons)
  DType cache_type = DType::F32;  // K, V and index-K element type (--cache-type)
  int64_t context = 0;            // tokens the conversation may hold (-c); 0: the model's limit
  SamplingParams sampling;
};

struct ChatTurnStats {
  int turn = 0;
  int64_t prompt_tokens = 0, reused_tokens = 0, prefilled_tokens = 0;
  int64_t generated_tokens = 0, forced_tokens = 0, reasoning_tokens = 0;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  double decode_tokens_per_second = 0.0;
  bool stopped_at_eos = false;
  bool interrupted = false;  // stopped by the caller's flag (Ctrl-C)
};

// Callbacks of one turn: streamed deltas (reasoning, content, tool-call fragments) and the moment
// decoding starts (after the prefill).
struct ChatTurnCallbacks {
  std::function<void(const chat::ChatDelta&)> on_delta;
  std::function<void()> on_decode_start;
};

class ChatSession {
 public:
  ChatSession(Engine& engine, ChatSessionOptions options);

  // Encodes an image or a video now (errors surface at once) and attaches it to the next user
  // message.
  void attach_image(const std::string& path) { attach_media(path, vision::MediaKind::Image); }
  void attach_video(const std::string& path) { attach_media(path, vision::MediaKind::Video); }
  size_t pending_images() const { return pending_.size(); }
  int64_t context() const { return session_.context(); }  // tokens the conversation may hold
  // Forgets the messages and pending images; the cache stays, so the next prompt reuses what it
  // shares with the old conversation (the system turn).
  void clear();

  // The conversation as OpenAI messages (/save), and one put in its place (/load): roles and
  // parts are checked by rendering it; image and video parts name local files, encoded now. The
  // cache stays, so the next turn reuses what the loaded conversation shares with it.
  const chat::Json& messages() const { return messages_; }
  void load_messages(const chat::Json& messages);

  // /set: sampling and the reply length for the next turns.
  const SamplingParams& sampling() const { return opt_.sampling; }
  void set_sampling(const SamplingParams& s) { opt_.sampling = s; }
  int max_tokens() const { return opt_.max_tokens; }
  void set_max_tokens(int n) { opt_.max_tokens = n; }
  int64_t cached_tokens() const { return session_.cached_tokens(); }

  // Adds a message of `role` ("user", or "tool" for a tool result after a reply with tool calls),
  // generates the reply (streamed through callbacks) and adds it to the conversation. `interrupt`
  // is polled during prefill and after every token; when set, the turn ends early: a partial reply
  // is kept, a prompt interrupted before any token is dropped.
  chat::ParsedMessage turn(const std::string& role, const std::string& text, const ChatTurnCallbacks& callbacks,
                           const std::atomic<bool>& interrupt, ChatTurnStats& stats);

 private:
  struct Media {  // an image or a video of the conversation
    std::string path;
    vision::MediaKind kind = vision::MediaKind::Image;
    std::shared_ptr<const EncodedMedia> encoded;
  };
  void attach_media(const std::string& path, vision::MediaKind kind);
  // The prompt of this turn: the rendered conversation, media placeholders expanded.
  Prompt build_prompt(bool& opens_reasoning) const;
  std::vector<std::shared_ptr<const EncodedMedia>> encoded_media() const;

  Engine& engine_;
  ChatSessionOptions opt_;
  Session session_;
  chat::Json messages_;
  std::vector<Media> media_;    // of the current conversation, in message order
  std::vector<Media> pending_;  // attached to the next user message
  int turn_ = 0;

  // The conversation through the last reply as the model saw it: that turn's prompt plus the
  // generated ids (end-of-turn dropped). The next prompt starts with these verbatim, so the cache
  // of the reply is reused even where re-tokenizing its text would give other ids.
  bool have_last_ = false;
  Prompt last_prompt_;
  std::string last_text_;  // the template's text of the same conversation (no generation prompt)
  size_t last_media_ = 0;  // media items in it
};

}  // namespace m3::cli

#pragma once
// One `m3 chat` conversation on one KV cache. Every turn renders the whole conversation with the
// chat template and tokenizes it; the cache is cut to the longest common prefix of the tokens it
// holds and the new prompt, and only the rest is prefilled (docs/CHAT.md, "KV reuse").
// Image (and video) tokens all share one id, so the prefix comparison also compares which image or
// video a position belongs to.
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "chat/chat_delta.h"
#include "chat/thinking_budget.h"
#include "memory/kv_cache.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "vision/media_prompt.h"

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
  // Forgets the messages and pending images; the cache stays, so the next prompt reuses what it
  // shares with the old conversation (the system turn).
  void clear();

  // Adds a message of `role` ("user", or "tool" for a tool result after a reply with tool calls),
  // generates the reply (streamed through callbacks) and adds it to the conversation. `interrupt` is polled during prefill and after every token; when set, the turn
  // ends early: a partial reply is kept, a prompt interrupted before any token is dropped.
  chat::ParsedMessage turn(const std::string& role, const std::string& text, const ChatTurnCallbacks& callbacks,
                           const std::atomic<bool>& interrupt, ChatTurnStats& stats);

  const KvCache& cache() const { return cache_; }

 private:
  // An image or a video of the conversation.
  struct Image {
    std::string path;
    vision::MediaKind kind = vision::MediaKind::Image;
    int64_t serial = 0;              // unique for the session: tags the cache positions it fills
    // Image: start-of-image, N image tokens, end-of-image. Video: per temporal group its timestamp
    // text, start-of-video, M video tokens, end-of-video.
    std::vector<int32_t> ids;
    std::vector<float> features;     // (ids.size(), hidden): the input rows of those ids
  };
  void attach_media(const std::string& path, vision::MediaKind kind);
  // The prompt of this turn: ids with each image placeholder expanded; tags[i] is the serial of
  // the image that position i belongs to, or -1.
  void build_prompt(std::vector<int32_t>& ids, std::vector<int64_t>& tags, bool& opens_reasoning) const;
  // Appends the ids of `segments` with image placeholders expanded, the first one being
  // images_[first_image]; returns the number of images used.
  size_t append_expanded(const std::vector<int32_t>& plain, size_t first_image, std::vector<int32_t>& ids,
                         std::vector<int64_t>& tags) const;
  const Image* image_by_serial(int64_t serial) const;

  Engine& engine_;
  ChatSessionOptions opt_;
  chat::Json messages_;
  std::vector<Image> images_;   // of the current conversation, in message order
  std::vector<Image> pending_;  // attached to the next user message
  int64_t next_serial_ = 0;
  int turn_ = 0;

  KvCache cache_;
  std::vector<int32_t> cached_ids_;  // what cache_ holds: cache_.length() of them
  std::vector<int64_t> cached_tags_;

  // The conversation through the last reply as the model saw it: that turn's prompt plus the
  // generated ids (end-of-turn dropped). The next prompt starts with these verbatim, so the cache
  // of the reply is reused even where re-tokenizing its text would give other ids.
  bool have_last_ = false;
  std::vector<int32_t> last_ids_;
  std::vector<int64_t> last_tags_;
  std::string last_text_;     // the template's text of the same conversation (no generation prompt)
  size_t last_images_ = 0;    // images in it
};

}  // namespace m3::cli

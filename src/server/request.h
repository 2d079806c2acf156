#pragma once
// Parsing and validation of OpenAI request bodies (/v1/chat/completions, /v1/completions).
// Everything a client can get wrong becomes an ApiError(400) whose message and param name the
// field; nothing here touches the model, so it runs on the HTTP threads and is unit-tested alone.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "m3/chat/json_depth.h"
#include "m3/chat/m3_format.h"
#include "m3/sampling.h"
#include "server/api_error.h"

namespace m3::server {

// Sampling and stopping, shared by both endpoints.
// n: how many choices one request may ask for (each is a sequence of its own).
inline constexpr int kMaxChoices = 16;

struct GenerationParams {
  SamplingParams sampling;             // temperature, top_p, seed (+ top_k, min_p, repetition_penalty extensions)
  std::optional<int64_t> max_tokens;   // max_tokens / max_completion_tokens; unset: up to the context
  std::vector<std::string> stop;       // stop strings (not part of the output)
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  bool ignore_eos = false;             // extension (vLLM name): do not stop at the end-of-turn token
  bool json_object = false;            // response_format {"type": "json_object"}: the answer is one JSON object
  bool logprobs = false;               // chat: log-probabilities of the sampled tokens (raw model distribution)
  int top_logprobs = 0;                // chat: and of the this many most likely tokens at each step (0..20)
  int n = 1;                           // choices; choice i samples with seed + i
  std::string model;                   // echoed, not checked
};

enum class ToolChoiceKind { Auto, None, Required, Named };

struct ToolChoice {
  ToolChoiceKind kind = ToolChoiceKind::Auto;
  std::string name;  // Named
};

struct ChatRequest {
  Json messages;
  Json tools;  // null or a non-empty array
  ToolChoice tool_choice;
  chat::ThinkingMode thinking_mode = chat::ThinkingMode::Adaptive;
  // reasoning_effort low / medium / a token count: reasoning tokens allowed before the engine
  // closes the thought (docs/CHAT_FORMAT.md "Thinking effort"); nullopt: no cap.
  std::optional<int64_t> max_reasoning_tokens;
  GenerationParams gen;
};

struct CompletionRequest {
  std::string prompt;
  GenerationParams gen;
};

// The body as JSON (an object), or ApiError(400) quoting the JSON parser; text nested deeper than
// `max_depth` arrays/objects is refused before it is parsed (chat/json_depth.h).
Json parse_json_body(std::string_view body, int max_depth = chat::kDefaultMaxJsonDepth);

// `seed_if_unset` is used when the request has no seed (the server passes a random one); the
// sampling fields a request leaves out take `defaults` (the model's, ModelInfo::default_sampling).
ChatRequest parse_chat_request(const Json& body, uint64_t seed_if_unset = 0,
                               const SamplingParams& defaults = published_default_sampling());
CompletionRequest parse_completion_request(const Json& body, uint64_t seed_if_unset = 0,
                                           const SamplingParams& defaults = published_default_sampling());

// ApiError(400) when a token id the request names (logit_bias) is not below `vocab_size`, the
// ids the tokenizer can decode. Called once the model is known.
void check_token_ids(const GenerationParams& gen, int vocab_size);

// The text the generation is forced to start with so that tool_choice "required" / a named tool
// is honoured: the opening of a tool-call block (and of the named invoke). Empty for auto/none.
// `mode` decides whether an open reasoning block must be closed first.
std::string forced_tool_prefix(const ToolChoice& choice, chat::ThinkingMode mode);

// The field an m3::Error message from render_chat names ("messages[2].role: ..." -> "messages[2].role").
std::string param_of_error_message(std::string_view message);

}  // namespace m3::server

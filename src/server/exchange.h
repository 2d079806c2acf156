#pragma once
// What an HTTP thread and the engine's scheduler share for one request: the prepared job (built on
// the HTTP thread) and the exchange its output flows through.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "m3/chat/m3_format.h"
#include "m3/prompt.h"
#include "server/request.h"

namespace m3::server {

// The scheduler pushes SSE events (or sets the final body); the HTTP thread writes them and sets
// `cancelled` when the client is gone.
struct Exchange {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> events;
  bool done = false;
  int status = 200;
  std::string body;
  std::atomic<bool> cancelled{false};
  // For the request's log line: what the generation(s) did (set before finish()).
  int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  double time_to_first_token = -1;  // seconds from arrival; -1: no token

  void push(std::string e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      events.push_back(std::move(e));
    }
    cv.notify_all();
  }
  void finish(int st, std::string b) {
    {
      std::lock_guard<std::mutex> lk(mu);
      status = st;
      body = std::move(b);
      done = true;
    }
    cv.notify_all();
  }
};

enum class Endpoint { Chat, Completion };

// One generation request, parsed, rendered and tokenized on the HTTP thread.
struct Job {
  Endpoint endpoint = Endpoint::Chat;
  Prompt prompt;  // ids, media rows and what the prefix cache compares (runtime/prompt.h)
  std::string forced_text;  // already in `prompt`; fed to the output parser first
  bool opens_reasoning = false;   // the prompt ends inside an open thought
  bool may_open_reasoning = false;  // adaptive thinking: the reply may start with a thought
  std::optional<int64_t> max_reasoning_tokens;  // chat: cap on reasoning tokens (reasoning_effort)
  Json tools;
  bool parse_tools = true;
  GenerationParams gen;
  int64_t max_tokens = 0;
  std::string id, model;
  int64_t created = 0;
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();  // TTFT is counted from here
};

}  // namespace m3::server

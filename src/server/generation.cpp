#include "server/generation.h"

#include <algorithm>
#include <cmath>

#include "server/api_error.h"
#include "server/json_text.h"

namespace m3::server {

namespace {

std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

SamplingParams sampling_for_choice(SamplingParams p, int index) {
  p.seed += uint64_t(index);
  return p;
}

chat::OutputParserOptions parser_options(const Job& job) {
  chat::OutputParserOptions o;
  o.starts_in_reasoning = job.opens_reasoning;
  o.parse_tool_calls = job.parse_tools;
  o.tools = job.tools;
  return o;
}

GenerationConfig generation_config(const Job& job, int sample_vocab, int index) {
  GenerationConfig g;
  g.max_tokens = job.max_tokens;
  g.sampling = sampling_for_choice(job.gen.sampling, index);
  g.sample_vocab = sample_vocab;
  g.stop_at_end_of_turn = !job.gen.ignore_eos;
  g.stop = job.gen.stop;
  g.json_object = job.gen.json_object;
  // Forced text (a tool call, a zero budget) closed any thought in the prompt: nothing to cap then,
  // only reasoning tokens to count (usage.completion_tokens_details).
  if (job.endpoint == Endpoint::Chat) {
    const bool forced = !job.forced_text.empty();
    g.reasoning = ReasoningOptions{!forced && job.opens_reasoning, job.may_open_reasoning,
                                   forced ? std::nullopt : job.max_reasoning_tokens};
  }
  return g;
}

}  // namespace

Generation::Generation(std::shared_ptr<const Job> job, std::shared_ptr<Exchange> exchange, const Tokenizer& tokenizer,
                       int sample_vocab, int index, std::shared_ptr<ChoiceGroup> group)
    : job_(std::move(job)),
      ex_(std::move(exchange)),
      index_(index),
      group_(std::move(group)),
      tok_(tokenizer),
      sample_vocab_(sample_vocab),
      chat_(job_->endpoint == Endpoint::Chat),
      stream_(job_->gen.stream),
      gen_(tokenizer, generation_config(*job_, sample_vocab, index), job_->prompt.ids()),
      parser_(parser_options(*job_)) {}

Json Generation::base_object(const char* object) const {
  return Json{{"id", job_->id}, {"object", object}, {"created", job_->created}, {"model", job_->model}};
}

void Generation::chunk(Json delta_or_text, const Json& finish_reason) {
  Json c = base_object(chat_ ? "chat.completion.chunk" : "text_completion");
  Json choice = {{"index", index_}};
  if (chat_) choice["delta"] = std::move(delta_or_text);
  else choice["text"] = std::move(delta_or_text);
  if (!pending_logprob_.is_null()) {
    choice["logprobs"] = Json{{"content", Json::array({std::move(pending_logprob_)})}};
    pending_logprob_ = nullptr;
  } else {
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = finish_reason;
  c["choices"] = Json::array({choice});
  ex_->push(sse(c));
}

void Generation::emit_deltas(const std::vector<chat::ChatDelta>& ds) {
  if (stream_)
    for (const auto& d : ds) chunk(d.to_json(), nullptr);
}

void Generation::emit_text(const std::string& s) {
  if (s.empty()) return;
  if (chat_) {
    emit_deltas(parser_.push(s));
  } else {
    text_ += s;
    if (stream_) chunk(s, nullptr);
  }
}

void Generation::start(int64_t reused) {
  reused_ = reused;
  started_ = std::chrono::steady_clock::now();
  if (stream_ && chat_) chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr);
  if (chat_ && !job_->forced_text.empty()) emit_deltas(parser_.push(job_->forced_text));
}

bool Generation::step(const float* logits, std::vector<int32_t>& feed) {
  const auto now = std::chrono::steady_clock::now();
  if (gen_.generated().empty()) first_token_ = now;
  else gaps_.push_back(seconds_between(last_token_, now));
  last_token_ = now;
  events_.clear();
  const bool more = gen_.step(logits, events_, feed);
  for (const TokenEvent& ev : events_) {
    if (ev.end_of_turn) continue;
    if (ev.sampled && job_->gen.logprobs) {
      Json entry = logprob_entry(logits, ev.id);
      if (stream_) pending_logprob_ = std::move(entry);
      else logprobs_.push_back(std::move(entry));
    }
    emit_text(ev.text);
    // A token whose text is held back (a partial UTF-8 character, stop string or markup) still
    // reports its log-probability, in a chunk with an empty delta.
    if (!pending_logprob_.is_null()) chunk(Json::object(), nullptr);
  }
  return more;
}

// OpenAI's entry for one sampled token: its log-probability under the model's distribution over
// the decodable vocabulary (raw logits: before temperature, top_p and penalties), and the
// top_logprobs most likely alternatives (ties: smaller id first).
Json Generation::logprob_entry(const float* logits, int32_t id) const {
  double mx = -1e300;
  for (int i = 0; i < sample_vocab_; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0;
  for (int i = 0; i < sample_vocab_; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  auto item = [&](int32_t t) {
    const std::string b = tok_.token_bytes(t);
    Json bytes = Json::array();
    for (unsigned char c : b) bytes.push_back(int(c));
    return Json{{"token", b}, {"logprob", double(logits[t]) - lse}, {"bytes", std::move(bytes)}};
  };
  Json e = item(id);
  Json top = Json::array();
  const int k = std::min(job_->gen.top_logprobs, sample_vocab_);
  if (k > 0) {
    std::vector<int32_t> order(static_cast<size_t>(sample_vocab_));
    for (int i = 0; i < sample_vocab_; ++i) order[size_t(i)] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < k; ++i) top.push_back(item(order[size_t(i)]));
  }
  e["top_logprobs"] = std::move(top);
  return e;
}

std::vector<int32_t> Generation::cached_tokens() const {
  std::vector<int32_t> held(job_->prompt.keys());
  const auto& generated = gen_.generated();
  held.insert(held.end(), generated.begin(), generated.end() - gen_.unfed());
  return held;
}

void Generation::complete(Metrics& metrics, bool cancelled) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t prompt_tokens = job_->prompt.size(), completion_tokens = int64_t(gen_.generated().size());
  const bool sampled = completion_tokens > 0;
  metrics.count_generation(prompt_tokens, reused_, completion_tokens, prompt_tokens - reused_,
                           seconds_between(started_, sampled ? first_token_ : now),
                           std::max<int64_t>(0, completion_tokens - 1), sampled ? seconds_between(first_token_, now) : 0.0);
  const double ttft = sampled ? seconds_between(job_->arrived, first_token_) : -1.0;
  if (!cancelled) metrics.observe_latencies(ttft, gaps_, seconds_between(job_->arrived, now));
  {
    std::lock_guard<std::mutex> lk(ex_->mu);
    ex_->prompt_tokens = prompt_tokens;
    ex_->cached_tokens = std::max(ex_->cached_tokens, reused_);
    ex_->generated_tokens += completion_tokens;
    if (ttft >= 0 && (ex_->time_to_first_token < 0 || ttft < ex_->time_to_first_token)) ex_->time_to_first_token = ttft;
  }
  if (cancelled) {
    metrics.count_cancelled();
    if (group_) {
      std::lock_guard<std::mutex> lk(group_->mu);
      if (group_->ended || --group_->remaining > 0) return;
    }
    ex_->finish(499, "");
    return;
  }
  emit_text(gen_.finish());
  if (chat_) emit_deltas(parser_.finish());

  const FinishReason why = gen_.finish_reason();
  std::string finish_reason = why == FinishReason::EndOfTurn || why == FinishReason::StopString ? "stop" : "length";
  if (chat_) {
    const auto& msg = parser_.message();
    if (!msg.tool_calls.empty() && !msg.tool_call_truncated) finish_reason = "tool_calls";
  }
  Json usage = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", reused_}}}};
  if (chat_) usage["completion_tokens_details"] = {{"reasoning_tokens", gen_.reasoning_tokens()}};
  Json choice = {{"index", index_}};
  if (!stream_) {
    if (chat_) {
      Json m = parser_.message().to_json();
      if (!m.contains("content")) m["content"] = nullptr;
      choice["message"] = std::move(m);
    } else {
      choice["text"] = text_;
    }
    choice["logprobs"] = job_->gen.logprobs ? Json{{"content", logprobs_}} : Json(nullptr);
    choice["finish_reason"] = finish_reason;
  }
  Json choices = Json::array({choice});
  if (stream_) chunk(chat_ ? Json::object() : Json(""), finish_reason);
  if (group_) {  // the last choice to end answers for all of them
    std::lock_guard<std::mutex> lk(group_->mu);
    if (group_->ended) return;
    group_->completion_tokens += completion_tokens;
    group_->cached_tokens = group_->cached_tokens < 0 ? reused_ : std::min(group_->cached_tokens, reused_);
    if (chat_) group_->reasoning_tokens += gen_.reasoning_tokens();
    group_->choices[size_t(index_)] = std::move(choice);
    if (--group_->remaining > 0) return;
    usage["completion_tokens"] = group_->completion_tokens;
    usage["total_tokens"] = prompt_tokens + group_->completion_tokens;
    usage["prompt_tokens_details"]["cached_tokens"] = group_->cached_tokens;
    if (chat_) usage["completion_tokens_details"]["reasoning_tokens"] = group_->reasoning_tokens;
    choices = group_->choices;
  }
  if (stream_) {
    if (job_->gen.include_usage) {
      Json u = base_object(chat_ ? "chat.completion.chunk" : "text_completion");
      u["choices"] = Json::array();
      u["usage"] = usage;
      ex_->push(sse(u));
    }
    ex_->push("data: [DONE]\n\n");
    ex_->finish(200, "");
    return;
  }
  Json r = base_object(chat_ ? "chat.completion" : "text_completion");
  r["choices"] = std::move(choices);
  r["usage"] = usage;
  ex_->finish(200, dump(r));
}

void Generation::fail(const std::string& what) { end_with_error(500, error_body("generation failed: " + what, "server_error")); }

void Generation::abort_for_shutdown() {
  end_with_error(503, error_body("the server is shutting down; the generation was stopped", "server_error", {},
                                 "server_shutting_down"));
}

void Generation::end_with_error(int status, const Json& err) {
  if (group_) {  // the request ends here; its other choices are cancelled
    std::lock_guard<std::mutex> lk(group_->mu);
    if (group_->ended) return;
    group_->ended = true;
    ex_->cancelled = true;
  }
  if (stream_) {
    ex_->push(sse(err));
    ex_->push("data: [DONE]\n\n");
    ex_->finish(status, "");
  } else {
    ex_->finish(status, dump(err));
  }
}

}  // namespace m3::server

#include "m3/session.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "m3/error.h"

namespace m3 {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

BatchOptions batch_options(const SessionOptions& o) {
  M3_CHECK(o.prefill_chunk > 0, "prefill chunk must be > 0, got ", o.prefill_chunk);
  BatchOptions b;
  b.chunk = o.prefill_chunk;
  b.cache_type = o.cache_type;
  b.prefix_cache_bytes = UINT64_MAX;  // the one sequence kept, whatever its size
  b.prefix_cache_entries = 1;
  return b;
}

}  // namespace

Session::Session(Engine& engine, SessionOptions options)
    : engine_(engine), opt_(options), batch_(engine, batch_options(options)) {
  const int64_t max_pos = engine.info().max_position;
  M3_CHECK(opt_.context >= 0, "context size must be >= 0, got ", opt_.context);
  M3_CHECK(max_pos <= 0 || opt_.context <= max_pos, "context size ", opt_.context,
           " exceeds the model's max_position_embeddings ", max_pos);
}

int64_t Session::context() const {
  if (opt_.context > 0) return opt_.context;
  return engine_.info().max_position > 0 ? engine_.info().max_position : INT64_MAX;
}

SessionStats Session::generate(const Prompt& prompt, const GenerationConfig& config, const SessionCallbacks& cb) {
  M3_CHECK(!prompt.empty(), "generate: empty prompt");
  const int64_t ctx = context();
  M3_CHECK(prompt.size() < ctx, "the prompt is ", prompt.size(), " tokens but the context holds ", ctx,
           " (-c/--ctx-size): shorten it or raise the context size");
  SessionStats st;
  st.prompt_tokens = prompt.size();
  if (!opt_.reuse_prefix) batch_.clear_prefix_cache();
  cached_ = 0;
  const Batch::Id id = batch_.add(prompt, &st.reused_tokens);
  try {
    return run(id, prompt, config, cb, st);
  } catch (...) {
    if (batch_.contains(id)) batch_.drop(id);  // a callback threw, or the model did
    throw;
  }
}

SessionStats Session::run(Batch::Id id, const Prompt& prompt, const GenerationConfig& config,
                          const SessionCallbacks& cb, SessionStats& st) {
  auto step = [&] {
    const Batch::StepResult r = batch_.step();
    if (!r.failed.empty()) throw Error(r.error);
  };
  auto keep = [&](const std::vector<int32_t>& generated) {
    std::vector<int32_t> held = prompt.keys();
    held.insert(held.end(), generated.begin(), generated.end());
    cached_ = batch_.length(id);
    batch_.finish(id, std::move(held));
  };

  auto t0 = std::chrono::steady_clock::now();
  const int64_t to_prefill = prompt.size() - st.reused_tokens;
  while (batch_.prefilling(id)) {
    step();
    st.prefilled_tokens = batch_.prefilled(id);
    if (cb.on_prefill && !cb.on_prefill(st.prefilled_tokens, to_prefill) && batch_.prefilling(id)) {
      st.prefill_seconds = seconds_since(t0);
      st.interrupted = st.prefill_interrupted = true;
      keep({});
      return st;
    }
  }
  st.prefill_seconds = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  GenerationConfig capped = config;
  const int64_t room = context() - prompt.size();  // every generated token is fed but the last
  const bool context_caps = room < capped.max_tokens;
  capped.max_tokens = std::min(capped.max_tokens, room);
  TokenGenerator gen(engine_.tokenizer(), capped, prompt.ids());
  std::vector<TokenEvent> events;
  std::vector<int32_t> feed;
  for (;;) {
    events.clear();
    const bool more = gen.step(batch_.logits(id), events, feed);
    bool go_on = true;
    for (const TokenEvent& ev : events) {
      if (cb.on_text && !ev.text.empty()) cb.on_text(ev.text);
      if (cb.on_token && !cb.on_token(ev)) go_on = false;
    }
    if (!more) break;
    if (!go_on) {
      st.interrupted = true;
      break;
    }
    batch_.feed(id, feed);
    step();  // a failed forward pass drops the sequence: the next call starts from nothing
  }
  const std::string tail = gen.finish();
  if (cb.on_text && !tail.empty()) cb.on_text(tail);
  st.decode_seconds = seconds_since(t0);
  st.finish = gen.finish_reason();
  st.context_full = context_caps && st.finish == FinishReason::Length;
  st.generated = gen.generated();
  st.generated_tokens = int64_t(st.generated.size());
  st.forced_tokens = gen.forced_tokens();
  st.reasoning_tokens = gen.reasoning_tokens();
  std::vector<int32_t> fed(st.generated.begin(), st.generated.end() - gen.unfed());
  keep(fed);
  return st;
}

}  // namespace m3

#include "runtime/session.h"

#include <chrono>

#include "base/error.h"

namespace m3 {

namespace {

KvCacheShape shape_of(const Engine& engine, DType type) {
  KvCacheShape shape = engine.model->cache_shape();
  shape.dtype = type;
  return shape;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Session::Session(Engine& engine, SessionOptions options)
    : engine_(engine), opt_(options), cache_(shape_of(engine, options.cache_type), UINT64_MAX, /*max_entries=*/1) {
  M3_CHECK(opt_.prefill_chunk > 0, "prefill chunk must be > 0, got ", opt_.prefill_chunk);
}

int64_t Session::cached_tokens() const { return cache_.latest_tokens(); }

SessionStats Session::generate(const Prompt& prompt, const GenerationConfig& config, const SessionCallbacks& cb) {
  M3_CHECK(!prompt.empty(), "generate: empty prompt");
  TextModel& model = *engine_.model;
  SessionStats st;
  st.prompt_tokens = prompt.size();
  PrefixCache::Lease lease;
  if (opt_.reuse_prefix) {
    lease = cache_.acquire(prompt.keys());
  } else {
    cache_.clear();
    lease.cache = std::make_unique<KvCache>(cache_.shape());
  }
  KvCache& cache = *lease.cache;
  st.reused_tokens = lease.reused;
  // The cache holds keys[0, length()) plus the generated tokens fed back: what release() keeps.
  auto keep = [&](const std::vector<int32_t>& generated) {
    std::vector<int32_t> held = prompt.keys();
    held.insert(held.end(), generated.begin(), generated.end());
    held.resize(std::min(held.size(), size_t(cache.length())));
    cache_.release(std::move(lease.cache), std::move(held));
  };

  std::vector<float> logits, rows;
  const int64_t n = prompt.size(), H = model.config().hidden_size;
  const bool media = prompt.has_media_from(lease.reused);
  auto t0 = std::chrono::steady_clock::now();
  try {
    for (int64_t i = lease.reused; i < n;) {
      const int64_t m = std::min<int64_t>(opt_.prefill_chunk, n - i);
      const LogitsFor which = i + m == n ? LogitsFor::Last : LogitsFor::None;
      if (media) {  // the input rows of the chunk, media rows in place
        rows.resize(size_t(m * H));
        prompt.input_rows(model, i, m, rows.data());
        model.forward_embeddings(cache, rows.data(), m, which, logits);
      } else {
        model.forward(cache, prompt.ids().data() + i, m, which, logits);
      }
      i += m;
      st.prefilled_tokens = i - lease.reused;
      if (cb.on_prefill && !cb.on_prefill(i - lease.reused, n - lease.reused) && i < n) {
        st.prefill_seconds = seconds_since(t0);
        st.interrupted = st.prefill_interrupted = true;
        keep({});
        return st;
      }
    }
    st.prefill_seconds = seconds_since(t0);

    t0 = std::chrono::steady_clock::now();
    TokenGenerator gen(*engine_.tokenizer, config, prompt.ids());
    std::vector<TokenEvent> events;
    std::vector<int32_t> feed;
    for (;;) {
      events.clear();
      const bool more = gen.step(logits.data(), events, feed);
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
      model.forward(cache, feed.data(), int64_t(feed.size()), LogitsFor::Last, logits);
    }
    const std::string tail = gen.finish();
    if (cb.on_text && !tail.empty()) cb.on_text(tail);
    st.decode_seconds = seconds_since(t0);
    st.finish = gen.finish_reason();
    st.generated = gen.generated();
    st.generated_tokens = int64_t(st.generated.size());
    st.forced_tokens = gen.forced_tokens();
    st.reasoning_tokens = gen.reasoning_tokens();
  } catch (...) {
    // The cache may hold half a forward pass: it is dropped, the next call starts from nothing.
    cache_.clear();
    throw;
  }
  keep(st.generated);
  return st;
}

}  // namespace m3

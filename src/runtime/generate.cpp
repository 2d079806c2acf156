#include "runtime/generate.h"

#include <algorithm>
#include <deque>

#include "base/error.h"

namespace m3 {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void prefill(TextModel& model, KvCache& cache, const int32_t* tokens, int64_t n, int chunk, LogitsFor which,
             std::vector<float>& logits, const std::function<void(int64_t, int64_t)>& on_progress) {
  M3_CHECK(chunk > 0, "prefill chunk must be > 0, got ", chunk);
  const int64_t V = model.vocab_size();
  std::vector<float> part;
  if (which == LogitsFor::All) logits.assign(size_t(n * V), 0.0f);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t m = std::min<int64_t>(chunk, n - i);
    const bool last = i + m == n;
    const LogitsFor w = which == LogitsFor::All ? LogitsFor::All : (last ? which : LogitsFor::None);
    model.forward(cache, tokens + i, m, w, part);
    if (which == LogitsFor::All) std::copy(part.begin(), part.end(), logits.begin() + i * V);
    else if (last) logits = part;
    if (on_progress) on_progress(i + m, n);
  }
}

GenerateStats generate(TextModel& model, KvCache& cache, const std::vector<int32_t>& prompt,
                       const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token,
                       const std::function<void(int64_t, int64_t)>& on_prefill) {
  M3_CHECK(!prompt.empty(), "generate: empty prompt");
  GenerateStats st;
  st.prompt_tokens = int64_t(prompt.size());
  Sampler sampler(opt.sampling);
  std::vector<int32_t> history(prompt);
  std::vector<float> logits;

  auto t0 = std::chrono::steady_clock::now();
  if (opt.prompt_embeddings) {
    const int64_t n = int64_t(prompt.size()), H = model.config().hidden_size;
    M3_CHECK(opt.prefill_chunk > 0, "prefill chunk must be > 0, got ", opt.prefill_chunk);
    for (int64_t i = 0; i < n; i += opt.prefill_chunk) {
      const int64_t m = std::min<int64_t>(opt.prefill_chunk, n - i);
      model.forward_embeddings(cache, opt.prompt_embeddings + i * H, m, i + m == n ? LogitsFor::Last : LogitsFor::None,
                               logits);
      if (on_prefill) on_prefill(i + m, n);
    }
  } else {
    prefill(model, cache, prompt.data(), int64_t(prompt.size()), opt.prefill_chunk, LogitsFor::Last, logits, on_prefill);
  }
  st.prefill_seconds = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  std::deque<int32_t> forced;
  if (opt.thinking_budget)
    for (int32_t id : opt.thinking_budget->begin()) forced.push_back(id);
  for (int i = 0; i < opt.max_new_tokens; ++i) {
    if (i > 0) model.forward(cache, &history.back(), 1, LogitsFor::Last, logits);
    int32_t next;
    if (!forced.empty()) {
      next = forced.front();
      forced.pop_front();
      ++st.forced_tokens;
    } else {
      const int vocab = opt.sample_vocab > 0 ? std::min(opt.sample_vocab, model.vocab_size()) : model.vocab_size();
      next = sampler.sample(logits.data(), vocab, history, prompt.size());
    }
    history.push_back(next);
    ++st.generated_tokens;
    if (opt.thinking_budget)
      for (int32_t id : opt.thinking_budget->on_token(next)) forced.push_back(id);
    const bool stop = std::find(opt.stop_tokens.begin(), opt.stop_tokens.end(), next) != opt.stop_tokens.end();
    if (!on_token(next) || stop) {
      st.stopped_by_token = stop;
      break;
    }
  }
  st.decode_seconds = seconds_since(t0);
  return st;
}

}  // namespace m3

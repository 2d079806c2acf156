#include "runtime/prefill.h"

#include <algorithm>

#include "m3/error.h"

namespace m3 {

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

}  // namespace m3

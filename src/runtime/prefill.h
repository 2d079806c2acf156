#pragma once
// Chunked prefill of token ids into a cache: `m3 logits`, `m3 bench` and tests. Generation goes
// through Session (runtime/session.h) or, batched, the server's scheduler.
#include <cstdint>
#include <functional>
#include <vector>

#include "memory/kv_cache.h"
#include "model/text_model.h"

namespace m3 {

// Feeds tokens[0, n) in forward passes of at most `chunk` tokens; `logits` gets those `which` asks
// for (All: every token's, (n, vocab); Last: the last token's). Progress after each chunk goes to
// on_progress(done, n).
void prefill(TextModel& model, KvCache& cache, const int32_t* tokens, int64_t n, int chunk, LogitsFor which,
             std::vector<float>& logits, const std::function<void(int64_t, int64_t)>& on_progress = {});

}  // namespace m3

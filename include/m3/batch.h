#pragma once
// Sequences decoded together (continuous batching): every step is one forward pass over the next
// tokens of each decoding sequence plus prefill chunks of the others, at most `chunk` rows in all,
// decode rows first, then prefill in the order the sequences were added. So a long prompt never
// stalls the streams already running, and each weight matrix is read once per step for all of
// them. Caches come from, and go back to, a prefix cache (the longest prefix of a new prompt's
// keys already computed is reused, its pages shared). This is how the runtime runs the model for
// generation: Session drives it with one sequence, the server's scheduler with many; what to feed
// after a step's logits is TokenGenerator's business (m3/generation.h). Not thread-safe.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "m3/dtype.h"

namespace m3 {

class Engine;
class Prompt;

struct BatchOptions {
  int chunk = 512;                      // rows per forward pass (decode rows + prefill chunks)
  DType cache_type = DType::BF16;       // K, V and index-K element type: BF16, F32 or F8_E4M3 (fp8)
  uint64_t prefix_cache_bytes = 0;      // memory for finished sequences' caches kept for reuse (0: none)
  size_t prefix_cache_entries = 0;      // at most this many kept (0: no limit)
};

// Per sequence.
struct SequenceOptions {
  int max_rows = 0;          // most prompt rows per step (0: the batch's chunk); set_max_rows changes it
  bool all_logits = false;   // keep the logits of every row of each step (all_logits()), not just the last
};

class Batch {
 public:
  using Id = int64_t;

  Batch(Engine& engine, BatchOptions options);
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // A new sequence for `prompt` (which must outlive it): its cache starts with the longest prefix
  // of prompt.keys() the prefix cache holds (at most size - 1 tokens: the last one is always
  // prefilled, for its logits); *reused gets that length. Throws when no cache can be made.
  Id add(const Prompt& prompt, int64_t* reused = nullptr, SequenceOptions options = {});
  // A sequence that continues from `leader` now that its prompt is in: it shares the leader's
  // cache pages (copy on write) and starts from its logits (the choices of a request with n > 1).
  Id fork(Id leader);

  bool prefilling(Id id) const;    // the prompt is not all fed yet
  int64_t prefilled(Id id) const;  // prompt tokens fed so far, the reused ones not counted
  int64_t length(Id id) const;     // positions the sequence's cache holds
  // The tokens to feed at the next step (after its logits were used). A sequence with nothing to
  // feed sits out the steps.
  void feed(Id id, std::vector<int32_t> tokens);
  void set_max_rows(Id id, int max_rows);

  struct StepResult {
    std::vector<Id> ready;    // their logits are new: the last chunk of the prompt, or a decode step
    std::vector<Id> failed;   // the forward pass threw: these sequences are gone (error says why)
    std::string error;
    int64_t sequences = 0, rows = 0;  // what the forward pass ran
  };
  StepResult step();
  const float* logits(Id id) const;  // of the last token fed, (vocab_size)
  // With all_logits: (all_logits_rows(id), vocab_size), the rows the last step ran for it.
  const float* all_logits(Id id) const;
  int64_t all_logits_rows(Id id) const;

  // Ends a sequence, keeping its cache for reuse; `keys` are the keys of the positions it holds
  // (prompt keys, then the generated ids fed). Fewer keys than length() keep only that many
  // positions; more are cut to length().
  void finish(Id id, std::vector<int32_t> keys);
  void drop(Id id);  // ends it, discarding its cache

  size_t size() const;  // sequences running
  bool contains(Id id) const;
  size_t prefix_cache_entries() const;
  uint64_t prefix_cache_bytes() const;
  void clear_prefix_cache();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace m3

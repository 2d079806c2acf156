#pragma once
// Synthetic long-context tasks, as text a user can also type into `m3 generate`:
//   passkey             a 5-digit key hidden at a random depth of filler text, asked for at the end
//                       (the task of Mohtashami & Jaggi 2023, used for long-context checks since)
//   multikey            several keys for different colours, one of them asked for (distractors)
//   associative-recall  a list of letter=digit pairs, then one letter's digit asked for
// Each example is a prompt and the answer that follows it; prompt and answer are tokenized
// separately, so training sees exactly the ids that generation from the prompt starts from.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "m3/tokenizer.h"

namespace m3::train {

enum class TaskKind { Passkey, Multikey, AssociativeRecall };

// "passkey" | "multikey" | "associative-recall"; throws naming the accepted names otherwise.
TaskKind parse_task_kind(const std::string& name);
const char* task_kind_name(TaskKind kind);

struct TaskExample {
  std::string prompt, answer;
};

class TaskGenerator {
 public:
  // Examples of about `tokens` prompt tokens (the filler is sized with the tokenizer); with
  // min_tokens > 0, of a length drawn uniformly from [min_tokens, tokens] per example (a curriculum
  // that mixes short retrievals, which teach the copy, with long ones).
  TaskGenerator(TaskKind kind, const Tokenizer& tokenizer, int64_t tokens, int64_t min_tokens = 0);
  TaskExample make(std::mt19937_64& rng) const;

 private:
  TaskExample compose(std::mt19937_64& rng, int64_t filler_sentences) const;
  TaskKind kind_;
  int64_t tokens_, min_tokens_;
  double filler_tokens_per_sentence_ = 1.0;
  int64_t fixed_tokens_ = 0;  // the example without filler
};

// One example as a training row of seq inputs and targets: prompt ids + answer ids (+ end id),
// truncated or padded to seq + 1 with end ids; targets < 0 where nothing is scored (padding, and
// with answer_only everything before the answer).
void task_row(const Tokenizer& tokenizer, const TaskExample& ex, int32_t end_id, int64_t seq, bool answer_only,
              int32_t* tokens, int32_t* targets);

}  // namespace m3::train

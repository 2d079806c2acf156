#include "train/synthetic_tasks.h"

#include <algorithm>

#include "m3/error.h"

namespace m3::train {

namespace {

const char* const kFiller[] = {
    "The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ", "There and back again. ",
};
constexpr int kFillerCount = 5;
const char* const kColours[] = {"red", "blue", "green", "white", "black", "orange", "purple", "grey"};
constexpr int kColourCount = 8;

std::string digits(std::mt19937_64& rng, int n) {
  std::string s;
  s += char('1' + rng() % 9);  // no leading zero
  for (int i = 1; i < n; ++i) s += char('0' + rng() % 10);
  return s;
}

std::string filler(std::mt19937_64& rng, int64_t sentences) {
  std::string s;
  for (int64_t i = 0; i < sentences; ++i) s += kFiller[rng() % kFillerCount];
  return s;
}

}  // namespace

TaskKind parse_task_kind(const std::string& name) {
  if (name == "passkey") return TaskKind::Passkey;
  if (name == "multikey") return TaskKind::Multikey;
  if (name == "associative-recall") return TaskKind::AssociativeRecall;
  fail("unknown task '", name, "' (expected passkey, multikey or associative-recall)");
}

const char* task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::Passkey: return "passkey";
    case TaskKind::Multikey: return "multikey";
    case TaskKind::AssociativeRecall: return "associative-recall";
  }
  return "?";
}

TaskGenerator::TaskGenerator(TaskKind kind, const Tokenizer& tokenizer, int64_t tokens, int64_t min_tokens)
    : kind_(kind), tokens_(tokens), min_tokens_(min_tokens) {
  M3_CHECK(tokens >= 32, "task examples need at least 32 tokens, got ", tokens);
  M3_CHECK(min_tokens <= tokens, "task examples: the shortest length ", min_tokens, " exceeds the longest ", tokens);
  std::string all;
  for (const char* f : kFiller) all += f;
  filler_tokens_per_sentence_ = double(tokenizer.encode(all).size()) / kFillerCount;
  std::mt19937_64 probe(1);
  fixed_tokens_ = int64_t(tokenizer.encode(compose(probe, 0).prompt).size());
}

TaskExample TaskGenerator::make(std::mt19937_64& rng) const {
  // The question and the hidden facts take fixed_tokens_; filler makes up the rest.
  int64_t tokens = tokens_;
  if (min_tokens_ > 0) tokens = min_tokens_ + int64_t(rng() % uint64_t(tokens_ - min_tokens_ + 1));
  const double room = double(tokens - fixed_tokens_);
  return compose(rng, std::max<int64_t>(0, int64_t(room / filler_tokens_per_sentence_)));
}

TaskExample TaskGenerator::compose(std::mt19937_64& rng, int64_t sentences) const {
  TaskExample ex;
  switch (kind_) {
    case TaskKind::Passkey: {
      const std::string key = digits(rng, 5);
      const int64_t before = int64_t(rng() % uint64_t(sentences + 1));
      ex.prompt = "There is a pass key hidden inside a lot of irrelevant text. Find it and memorize it. " +
                  filler(rng, before) + "The pass key is " + key + ". Remember it. " + key + " is the pass key. " +
                  filler(rng, sentences - before) + "What is the pass key? The pass key is";
      ex.answer = " " + key + ".";
      break;
    }
    case TaskKind::Multikey: {
      const int keys = 4;
      std::vector<int> colours(kColourCount);
      for (int i = 0; i < kColourCount; ++i) colours[size_t(i)] = i;
      std::shuffle(colours.begin(), colours.end(), rng);
      std::vector<std::string> values;
      std::vector<int64_t> cuts;
      for (int i = 0; i < keys; ++i) cuts.push_back(int64_t(rng() % uint64_t(sentences + 1)));
      std::sort(cuts.begin(), cuts.end());
      ex.prompt = "Several pass keys are hidden inside a lot of irrelevant text. Memorize them. ";
      int64_t at = 0;
      for (int i = 0; i < keys; ++i) {
        values.push_back(digits(rng, 5));
        ex.prompt += filler(rng, cuts[size_t(i)] - at) + "The pass key for " + kColours[colours[size_t(i)]] + " is " +
                     values.back() + ". ";
        at = cuts[size_t(i)];
      }
      const int asked = int(rng() % keys);
      const std::string c = kColours[colours[size_t(asked)]];
      ex.prompt += filler(rng, sentences - at) + "What is the pass key for " + c + "? The pass key for " + c + " is";
      ex.answer = " " + values[size_t(asked)] + ".";
      break;
    }
    case TaskKind::AssociativeRecall: {
      // ~3 tokens per pair: as many pairs as the length allows, letters drawn with repeats
      // resolved to the last value (so the model must find the latest binding).
      const int64_t pairs = std::max<int64_t>(2, (tokens_ - 12) / 4);
      std::string last[26];
      ex.prompt = "Pairs:";
      char letter = 'a';
      for (int64_t i = 0; i < pairs; ++i) {
        letter = char('a' + rng() % 26);
        last[letter - 'a'] = std::string(1, char('0' + rng() % 10));
        ex.prompt += std::string(" ") + letter + "=" + last[letter - 'a'];
      }
      char asked = letter;
      for (int tries = 0; tries < 8; ++tries) {  // prefer a letter that is not the last one
        const char c = char('a' + rng() % 26);
        if (!last[c - 'a'].empty() && c != letter) {
          asked = c;
          break;
        }
      }
      ex.prompt += std::string(". Recall ") + asked + ":";
      ex.answer = " " + last[asked - 'a'] + ".";
      break;
    }
  }
  return ex;
}

void task_row(const Tokenizer& tokenizer, const TaskExample& ex, int32_t end_id, int64_t seq, bool answer_only,
              int32_t* tokens, int32_t* targets) {
  std::vector<int32_t> ids = tokenizer.encode(ex.prompt);
  const int64_t answer_start = int64_t(ids.size());
  const std::vector<int32_t> answer = tokenizer.encode(ex.answer);
  ids.insert(ids.end(), answer.begin(), answer.end());
  ids.push_back(end_id);
  const int64_t n = int64_t(ids.size());
  for (int64_t i = 0; i < seq; ++i) {
    tokens[i] = i < n ? ids[size_t(i)] : end_id;
    const bool scored = i + 1 < n && (!answer_only || i + 1 >= answer_start);
    targets[i] = scored ? ids[size_t(i + 1)] : -1;
  }
}

}  // namespace m3::train

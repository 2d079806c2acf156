// Thinking budgets: the reasoning_effort mapping and the per-sequence state machine that closes a
// thought at its cap. The state machine runs in a small token loop here, the way generate() and
// the server drive it: forced tokens replace sampling and are fed back like sampled ones.
#include "m3/chat/thinking_budget.h"

#include <gtest/gtest.h>

#include <deque>

#include "m3/error.h"

namespace {

using m3::chat::ThinkingBudget;
using m3::chat::ThinkingMode;

constexpr int32_t kOpen = 900, kClose = 901;
const m3::chat::ThinkingMarkers kMarkers{kOpen, kClose};

struct LoopResult {
  std::vector<int32_t> sequence;  // everything appended after the prompt
  int64_t reasoning = 0;
  bool capped = false;
  ThinkingBudget::Phase phase = ThinkingBudget::Phase::Start;
};

// `model` is what sampling would return, in order; forced tokens do not consume it.
LoopResult run_loop(std::optional<int64_t> cap, bool prompt_opened, const std::vector<int32_t>& model) {
  ThinkingBudget budget(kMarkers, cap, prompt_opened);
  std::vector<int32_t> first = budget.begin();
  std::deque<int32_t> pending(first.begin(), first.end());
  LoopResult r;
  size_t next_sample = 0;
  while (!pending.empty() || next_sample < model.size()) {
    int32_t id;
    if (!pending.empty()) {
      id = pending.front();
      pending.pop_front();
    } else {
      id = model[next_sample++];
    }
    r.sequence.push_back(id);
    for (int32_t f : budget.on_token(id)) pending.push_back(f);
  }
  r.reasoning = budget.reasoning_tokens();
  r.capped = budget.capped();
  r.phase = budget.phase();
  return r;
}

struct Case {
  const char* name;
  std::optional<int64_t> cap;
  bool prompt_opened;
  std::vector<int32_t> model;
  std::vector<int32_t> sequence;
  int64_t reasoning;
  bool capped;
  ThinkingBudget::Phase phase;
};

TEST(ThinkingBudget, TokenLoops) {
  using P = ThinkingBudget::Phase;
  const std::vector<Case> cases = {
      // Budget 0 after an opening prefix: the closer comes before anything is sampled.
      {"zero budget, opened by prompt", 0, true, {1, 2}, {kClose, 1, 2}, 0, true, P::Answer},
      // Budget 0, the model opens a thought itself: closed right after the opener.
      {"zero budget, model opens", 0, false, {kOpen, 1, 2}, {kOpen, kClose, 1, 2}, 0, true, P::Answer},
      // Budget 0, the model answers directly: nothing forced.
      {"zero budget, model answers", 0, false, {1, 2}, {1, 2}, 0, false, P::Answer},
      // Thought closed naturally before the cap: nothing forced, closer and opener not counted.
      {"closed before cap", 5, false, {kOpen, 1, 2, kClose, 3}, {kOpen, 1, 2, kClose, 3}, 2, false, P::Answer},
      {"closed at cap - 1", 3, true, {1, 2, kClose, 3}, {1, 2, kClose, 3}, 2, false, P::Answer},
      // Cap hit: the closer is forced after exactly `cap` reasoning tokens, then sampling resumes.
      {"cap hit, opened by prompt", 3, true, {1, 2, 3, 4, 5}, {1, 2, 3, kClose, 4, 5}, 3, true, P::Answer},
      {"cap hit, model opens", 2, false, {kOpen, 1, 2, 3}, {kOpen, 1, 2, kClose, 3}, 2, true, P::Answer},
      // A redundant leading opener after an opening prefix is not a reasoning token.
      {"redundant opener", 2, true, {kOpen, 1, 2, 3}, {kOpen, 1, 2, kClose, 3}, 2, true, P::Answer},
      // A stray leading closer (prompt not opened) means no thought: nothing counted or forced.
      {"stray leading closer", 1, false, {kClose, 1, 2, 3}, {kClose, 1, 2, 3}, 0, false, P::Answer},
      // After the answer started, markers are content: a later opener is not a thought.
      {"opener inside the answer", 1, false, {1, kOpen, 2, 3}, {1, kOpen, 2, 3}, 0, false, P::Answer},
      // A second closer after a capped thought is content, not a forced token.
      {"model closes again after cap", 1, true, {1, kClose, 2}, {1, kClose, kClose, 2}, 1, true, P::Answer},
      // No cap: only counts; an unterminated thought stays a thought.
      {"no cap", std::nullopt, true, {1, 2, 3, 4}, {1, 2, 3, 4}, 4, false, P::Thinking},
      {"nothing generated", 4, false, {}, {}, 0, false, P::Start},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const LoopResult r = run_loop(c.cap, c.prompt_opened, c.model);
    EXPECT_EQ(r.sequence, c.sequence);
    EXPECT_EQ(r.reasoning, c.reasoning);
    EXPECT_EQ(r.capped, c.capped);
    EXPECT_EQ(r.phase, c.phase);
  }
}

TEST(ThinkingBudget, ForcedTokensMustBeFedBackInOrder) {
  ThinkingBudget b(kMarkers, 1, true);
  EXPECT_EQ(b.on_token(7), std::vector<int32_t>{kClose});
  EXPECT_THROW(b.on_token(8), m3::Error);  // the caller sampled instead of forcing
}

TEST(ThinkingBudget, RejectsNegativeCap) { EXPECT_THROW(ThinkingBudget(kMarkers, -1, true), m3::Error); }

TEST(ReasoningEffort, Mapping) {
  struct Row {
    const char* effort;
    ThinkingMode mode;
    std::optional<int64_t> cap;
  };
  const std::vector<Row> rows = {
      {"none", ThinkingMode::Disabled, 0},
      {"minimal", ThinkingMode::Disabled, 0},
      {"low", ThinkingMode::Adaptive, m3::chat::kLowEffortReasoningTokens},
      {"medium", ThinkingMode::Adaptive, m3::chat::kMediumEffortReasoningTokens},
      {"high", ThinkingMode::Enabled, std::nullopt},
      {"xhigh", ThinkingMode::Enabled, std::nullopt},
      {"0", ThinkingMode::Disabled, 0},
      {"1", ThinkingMode::Enabled, 1},
      {"2500", ThinkingMode::Enabled, 2500},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.effort);
    const auto e = m3::chat::parse_reasoning_effort(r.effort, "reasoning_effort");
    EXPECT_EQ(e.mode, r.mode);
    EXPECT_EQ(e.max_reasoning_tokens, r.cap);
  }
}

TEST(ReasoningEffort, BadValuesNameTheField) {
  for (const char* bad : {"", "max", "-5", "1.5", " 10", "1234567890"}) {
    SCOPED_TRACE(bad);
    try {
      m3::chat::parse_reasoning_effort(bad, "--reasoning-effort");
      ADD_FAILURE() << "accepted";
    } catch (const m3::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--reasoning-effort: ", 0), 0u) << e.what();
    }
  }
}

}  // namespace

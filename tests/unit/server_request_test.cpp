// m3 serve building blocks that need no model: request parsing and validation, stop strings,
// the prefix cache (on a synthetic KV cache), metrics text.
#include <gtest/gtest.h>

#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "m3/error.h"
#include "m3/chat/chat_template.h"

#include "server/metrics.h"
#include "server/media.h"
#include "runtime/prefix_cache.h"
#include "server/request.h"
#include "runtime/stop_strings.h"

using namespace m3::server;
using m3::server::Json;
using m3::PrefixCache;
using m3::StopStringFilter;

namespace {

ApiError chat_error(const std::string& body) {
  try {
    parse_chat_request(parse_json_body(body));
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return ApiError(0, "");
}

const char* kUser = R"("messages":[{"role":"user","content":"hi"}])";

}  // namespace

TEST(ServerRequest, ParsesAFullChatRequest) {
  auto r = parse_chat_request(parse_json_body(std::string("{") + kUser + R"(,
      "temperature":0, "top_p":0.5, "max_tokens":7, "stop":["a","bc"], "seed":42, "stream":true, "n":3,
      "presence_penalty":0.25, "frequency_penalty":-0.5,
      "stream_options":{"include_usage":true}, "reasoning_effort":"high", "model":"x",
      "tools":[{"type":"function","function":{"name":"f","parameters":{}}}],
      "tool_choice":{"type":"function","function":{"name":"f"}}})"));
  EXPECT_EQ(r.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(r.gen.sampling.top_p, 0.5f);
  EXPECT_EQ(r.gen.max_tokens, 7);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.gen.sampling.seed, 42u);
  EXPECT_EQ(r.gen.sampling.presence_penalty, 0.25f);
  EXPECT_EQ(r.gen.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r.gen.n, 3);
  EXPECT_TRUE(r.gen.stream);
  EXPECT_TRUE(r.gen.include_usage);
  EXPECT_EQ(r.gen.model, "x");
  EXPECT_EQ(r.thinking_mode, m3::chat::ThinkingMode::Enabled);
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::Named);
  EXPECT_EQ(r.tool_choice.name, "f");
  EXPECT_EQ(r.tools.size(), 1u);
}

TEST(ServerRequest, Defaults) {
  auto r = parse_chat_request(parse_json_body(std::string("{") + kUser + "}"), 99);
  EXPECT_EQ(r.gen.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.gen.max_tokens.has_value());
  EXPECT_EQ(r.gen.sampling.seed, 99u);
  EXPECT_FALSE(r.gen.stream);
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::Auto);
  EXPECT_EQ(r.thinking_mode, m3::chat::ThinkingMode::Adaptive);
  EXPECT_TRUE(r.tools.is_null());
}

TEST(ServerRequest, MaxCompletionTokensWinsAndThinkingKwargs) {
  auto r = parse_chat_request(parse_json_body(std::string("{") + kUser +
      R"(,"max_tokens":5,"max_completion_tokens":9,"stop":"x","chat_template_kwargs":{"thinking_mode":"disabled"},"reasoning_effort":"high"})"));
  EXPECT_EQ(r.gen.max_tokens, 9);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"x"}));
  EXPECT_EQ(r.thinking_mode, m3::chat::ThinkingMode::Disabled);
}

TEST(ServerRequest, ErrorsNameTheField) {
  struct Case {
    std::string body, param;
  };
  const std::vector<Case> cases = {
      {"{}", "messages"},
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":5}]})", "messages[0].role"},
      {R"({"messages":[1]})", "messages[0]"},
      {std::string("{") + kUser + R"(,"temperature":"hot"})", "temperature"},
      {std::string("{") + kUser + R"(,"temperature":3})", "temperature"},
      {std::string("{") + kUser + R"(,"top_p":0})", "top_p"},
      {std::string("{") + kUser + R"(,"max_tokens":0})", "max_tokens"},
      {std::string("{") + kUser + R"(,"max_tokens":1.5})", "max_tokens"},
      {std::string("{") + kUser + R"(,"max_completion_tokens":-3})", "max_completion_tokens"},
      {std::string("{") + kUser + R"(,"stop":[1]})", "stop[0]"},
      {std::string("{") + kUser + R"(,"stop":[""]})", "stop"},
      {std::string("{") + kUser + R"(,"stop":{}})", "stop"},
      {std::string("{") + kUser + R"(,"seed":"x"})", "seed"},
      {std::string("{") + kUser + R"(,"stream":"yes"})", "stream"},
      {std::string("{") + kUser + R"(,"n":17})", "n"},
      {std::string("{") + kUser + R"(,"tools":{}})", "tools"},
      {std::string("{") + kUser + R"(,"tools":[{"type":"function","function":{}}]})", "tools[0].function.name"},
      {std::string("{") + kUser + R"(,"tool_choice":"sometimes"})", "tool_choice"},
      {std::string("{") + kUser + R"(,"tool_choice":"required"})", "tool_choice"},
      {std::string("{") + kUser + R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
       "tool_choice.function.name"},
      {std::string("{") + kUser + R"(,"tools":[{"type":"function","function":{"name":"]~b]"}}],"tool_choice":{"type":"function","function":{"name":"]~b]"}}})",
       "tool_choice.function.name"},
      {std::string("{") + kUser + R"(,"reasoning_effort":"extreme"})", "reasoning_effort"},
      {std::string("{") + kUser + R"(,"chat_template_kwargs":{"thinking_mode":"maybe"}})", "chat_template_kwargs.thinking_mode"},
      {std::string("{") + kUser + R"(,"frequency_penalty":2.5})", "frequency_penalty"},
      {std::string("{") + kUser + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {std::string("{") + kUser + R"(,"top_logprobs":2})", "top_logprobs"},
      {std::string("{") + kUser + R"(,"logprobs":"yes"})", "logprobs"},
  };
  for (const auto& c : cases) {
    ApiError e = chat_error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.param), std::string::npos) << e.what();
    const Json b = error_body(e);
    EXPECT_EQ(b["error"]["type"], "invalid_request_error");
    EXPECT_EQ(b["error"]["param"], c.param);
  }
}

TEST(ServerRequest, MalformedJson) {
  for (const char* body : {"", "{", "{\"messages\": [}", "[1,2]", "nul", "\"x\""}) {
    try {
      parse_json_body(body);
      ADD_FAILURE() << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_FALSE(std::string(e.what()).empty());
    }
  }
}

TEST(ServerRequest, MutatedBodiesNeverCrash) {
  // Every single-byte deletion and a few substitutions of a valid body: parse or ApiError, nothing else.
  const std::string good = std::string("{") + kUser +
                           R"(,"temperature":0.5,"stop":["x"],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"})";
  for (size_t i = 0; i < good.size(); ++i) {
    for (const std::string& rep : {std::string(), std::string("1"), std::string("\""), std::string("[")}) {
      std::string b = good;
      b.replace(i, 1, rep);
      try {
        parse_chat_request(parse_json_body(b));
      } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
      }
    }
  }
}

TEST(ServerRequest, DeepNestingIsRefusedBeforeParsing) {
  // 1,000,000 levels (2 MB) crashed the server by recursing in copies, dumps and the XML writer.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  for (const std::string& body :
       {std::string("{") + kUser + R"(,"n":)" + deep + "}", R"({"messages":[{"role":"user","content":)" + deep + "}]}",
        R"({"x":)" + deep + "," + kUser + "}"}) {
    try {
      parse_json_body(body);
      ADD_FAILURE() << "accepted a 1,000,000-deep body";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(std::string(e.what()).find("limit of 128 levels"), std::string::npos) << e.what();
      EXPECT_EQ(e.code, "json_too_deep");
    }
  }
  // Exactly at the limit parses; brackets inside strings (escaped quotes too) do not count.
  const std::string at_limit = "{\"a\":" + std::string(127, '[') + std::string(127, ']') + "}";
  EXPECT_NO_THROW(parse_json_body(at_limit));
  EXPECT_THROW(parse_json_body("{\"a\":" + std::string(128, '[') + std::string(128, ']') + "}"), ApiError);
  EXPECT_NO_THROW(parse_json_body("{\"a\":\"\\\"" + std::string(500, '[') + "\"}"));
  EXPECT_NO_THROW(parse_json_body("{\"a\":[[[1]]]}", 4));
  EXPECT_THROW(parse_json_body("{\"a\":[[[1]]]}", 3), ApiError);
}

TEST(ServerRequest, DeepToolCallArgumentsInTheHistoryAreRefused) {
  // The arguments string is JSON inside a JSON string: the body's depth check cannot see it.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string body = R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[)"
                           R"({"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":)" + deep + R"(}"}}]}]})";
  const ChatRequest r = parse_chat_request(parse_json_body(body));
  try {
    m3::chat::render_chat(r.messages, r.tools, {});
    ADD_FAILURE() << "rendered 100,000-deep arguments";
  } catch (const m3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1].tool_calls[0].function.arguments"), std::string::npos) << e.what();
  }
}

TEST(ServerRequest, ErrorsQuoteAnExcerptNotTheValue) {
  std::string big = "[1";
  for (int i = 0; i < 50000; ++i) big += ",1";
  big += "]";
  ApiError e = chat_error(std::string("{") + kUser + R"(,"n":)" + big + "}");
  EXPECT_EQ(e.param, "n");
  EXPECT_LT(std::string(e.what()).size(), 200u) << std::string(e.what()).substr(0, 300);
  EXPECT_NE(std::string(e.what()).find("an array of 50001 elements"), std::string::npos) << std::string(e.what()).substr(0, 300);
  // The JSON parser's own message quotes the bad token whole: it is cut too.
  try {
    parse_json_body(std::string("{\"n\":") + std::string(100000, '1') + "}");
    ADD_FAILURE() << "a 100,000-digit number parsed";
  } catch (const ApiError& err) {
    EXPECT_LT(std::string(err.what()).size(), 300u) << std::string(err.what()).substr(0, 400);
  }
}

TEST(ServerRequest, LogitBias) {
  auto r = parse_chat_request(parse_json_body(std::string("{") + kUser + R"(,"logit_bias":{"5":-100,"17":2.5,"0":100}})"));
  ASSERT_EQ(r.gen.sampling.logit_bias.size(), 3u);
  std::map<int32_t, float> got(r.gen.sampling.logit_bias.begin(), r.gen.sampling.logit_bias.end());
  EXPECT_EQ(got[5], -100.0f);
  EXPECT_EQ(got[17], 2.5f);
  EXPECT_EQ(got[0], 100.0f);
  EXPECT_NO_THROW(check_token_ids(r.gen, 18));
  try {
    check_token_ids(r.gen, 17);
    ADD_FAILURE() << "id 17 accepted with a vocabulary of 17";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "logit_bias");
  }
  auto c = parse_completion_request(parse_json_body(R"({"prompt":"x","logit_bias":{"3":-1}})"));
  ASSERT_EQ(c.gen.sampling.logit_bias.size(), 1u);
  for (const char* bad : {R"("logit_bias":[1])", R"("logit_bias":"x")", R"("logit_bias":{"a":1})",
                          R"("logit_bias":{"-1":1})", R"("logit_bias":{"1.5":1})", R"("logit_bias":{"":1})",
                          R"("logit_bias":{"99999999999":1})", R"("logit_bias":{"1":"x"})", R"("logit_bias":{"1":101})",
                          R"("logit_bias":{"1":-100.5})", R"("logit_bias":{"1":null})"}) {
    ApiError e = chat_error(std::string("{") + kUser + "," + bad + "}");
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param.rfind("logit_bias", 0), 0u) << bad << " -> " << e.param;
  }
}

TEST(ServerRequest, UnknownAndUnsupportedFieldsAreRefused) {
  for (const char* extra : {R"("functions":[])", R"("audio":{})", R"("modalities":["text","audio"])", R"("best_of":1)",
                            R"("parallel_tool_calls":false)", R"("prediction":{})"}) {
    ApiError e = chat_error(std::string("{") + kUser + "," + extra + "}");
    EXPECT_EQ(e.status, 400) << extra;
  }
  EXPECT_NO_THROW(parse_chat_request(parse_json_body(std::string("{") + kUser + R"(,"user":"u1","parallel_tool_calls":true})")));
  EXPECT_EQ(chat_error(std::string("{") + kUser + R"(,"chat_template_kwargs":{"add_vision_id":true}})").param,
            "chat_template_kwargs.add_vision_id");
  EXPECT_EQ(chat_error(std::string("{") + kUser + R"(,"frobnicate":1})").param, "frobnicate");
  // A long key is cut for the message, never inside a UTF-8 character (39 bytes, then a 2-byte one).
  EXPECT_EQ(chat_error(std::string("{") + kUser + ",\"" + std::string(39, 'k') + "\xc3\xa9zzz\":1}").param,
            std::string(39, 'k') + "...");
  EXPECT_THROW(parse_completion_request(parse_json_body(R"({"prompt":"x","tools":[]})")), ApiError);
}

TEST(ServerRequest, Completions) {
  auto r = parse_completion_request(parse_json_body(R"({"prompt":"abc","max_tokens":3,"temperature":0})"));
  EXPECT_EQ(r.prompt, "abc");
  EXPECT_EQ(r.gen.max_tokens, 3);
  EXPECT_EQ(parse_completion_request(parse_json_body(R"({"prompt":["x"]})")).prompt, "x");
  for (const char* body : {R"({})", R"({"prompt":5})", R"({"prompt":""})", R"({"prompt":["a","b"]})"}) {
    try {
      parse_completion_request(parse_json_body(body));
      ADD_FAILURE() << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, "prompt");
    }
  }
}

TEST(ServerRequest, RequiredWithOneToolNamesIt) {
  auto r = parse_chat_request(parse_json_body(std::string("{") + kUser +
      R"(,"tools":[{"type":"function","function":{"name":"only"}}],"tool_choice":"required"})"));
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::Named);
  EXPECT_EQ(r.tool_choice.name, "only");
  auto two = parse_chat_request(parse_json_body(std::string("{") + kUser +
      R"(,"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}],"tool_choice":"required"})"));
  EXPECT_EQ(two.tool_choice.kind, ToolChoiceKind::Required);
}

TEST(ServerRequest, ForcedToolPrefix) {
  ToolChoice c;
  EXPECT_EQ(forced_tool_prefix(c, m3::chat::ThinkingMode::Adaptive), "");
  c.kind = ToolChoiceKind::Required;
  EXPECT_EQ(forced_tool_prefix(c, m3::chat::ThinkingMode::Disabled), "]<]minimax[>[<tool_call>\n");
  c.kind = ToolChoiceKind::Named;
  c.name = "get";
  EXPECT_EQ(forced_tool_prefix(c, m3::chat::ThinkingMode::Enabled),
            "</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get\">");
}

TEST(ServerRequest, ParamOfErrorMessage) {
  EXPECT_EQ(param_of_error_message("messages[2].tool_calls[0].function.arguments: not valid JSON"),
            "messages[2].tool_calls[0].function.arguments");
  EXPECT_EQ(param_of_error_message("something went wrong: x"), "");
  EXPECT_EQ(param_of_error_message("no colon"), "");
}

TEST(ServerStopStrings, HoldsBackAndCuts) {
  StopStringFilter f({"END", "xy"});
  std::string out;
  for (std::string piece : {"hello E", "N", "D tail"}) out += f.push(piece);
  EXPECT_EQ(out, "hello ");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.push("more"), "");
  EXPECT_EQ(f.finish(), "");

  StopStringFilter g({"END"});
  out.clear();
  for (std::string piece : {"a", "E", "N", "x", "EN"}) out += g.push(piece);
  EXPECT_EQ(out, "aENx");
  EXPECT_FALSE(g.stopped());
  EXPECT_EQ(g.finish(), "EN");

  StopStringFilter none({});
  EXPECT_EQ(none.push("abc"), "abc");

  // Earliest match wins across stop strings.
  StopStringFilter h({"cd", "b"});
  EXPECT_EQ(h.push("abcd"), "a");
}

TEST(ServerStopStrings, EveryChunkingGivesTheSameText) {
  const std::string text = "one two <stop> three";
  for (size_t cut1 = 0; cut1 <= text.size(); ++cut1)
    for (size_t cut2 = cut1; cut2 <= text.size(); ++cut2) {
      StopStringFilter f({"<stop>", "zz"});
      std::string out = f.push(text.substr(0, cut1));
      out += f.push(text.substr(cut1, cut2 - cut1));
      out += f.push(text.substr(cut2));
      out += f.finish();
      EXPECT_EQ(out, "one two ");
    }
}

namespace {

m3::KvCacheShape small_shape() {
  m3::KvCacheShape s;
  s.num_layers = 2;
  s.block_size = 4;
  s.kv_heads = 2;
  s.head_dim = 3;
  s.index_dim = 2;
  s.layer_has_index = {false, true};
  return s;
}

// Fills positions [from, to) with values derived from (token, position, layer, head).
void fill(m3::KvCache& c, const std::vector<int32_t>& tokens, int64_t from, int64_t to) {
  const auto& s = c.shape();
  c.prepare_write(from, to);
  for (int l = 0; l < s.num_layers; ++l)
    for (int64_t p = from; p < to; ++p) {
      for (int h = 0; h < s.kv_heads; ++h) {
        float k[3], v[3];
        for (int d = 0; d < 3; ++d) {
          k[d] = float(tokens[size_t(p)] * 1000 + p * 10 + l + h * 0.5 + d * 0.01);
          v[d] = -k[d];
        }
        c.write_kv(l, p, h, k, v);
      }
      if (s.layer_has_index[size_t(l)]) {
        float ik[2] = {float(tokens[size_t(p)] + p), float(l)};
        c.write_index_k(l, p, ik);
      }
    }
  c.set_length(to);
}

bool same_prefix(const m3::KvCache& a, const m3::KvCache& b, int64_t n) {
  const auto& s = a.shape();
  for (int l = 0; l < s.num_layers; ++l)
    for (int64_t p = 0; p < n; ++p) {
      const int64_t blk = p / s.block_size;
      const int slot = int(p % s.block_size);
      for (int h = 0; h < s.kv_heads; ++h)
        for (int d = 0; d < s.head_dim; ++d) {
          if (a.k_block_t(l, blk, h).as<float>()[d * s.block_size + slot] != b.k_block_t(l, blk, h).as<float>()[d * s.block_size + slot]) return false;
          if (a.v_block(l, blk, h).as<float>()[slot * s.head_dim + d] != b.v_block(l, blk, h).as<float>()[slot * s.head_dim + d]) return false;
        }
      if (s.layer_has_index[size_t(l)])
        for (int d = 0; d < s.index_dim; ++d)
          if (a.index_k_block_t(l, blk).as<float>()[d * s.block_size + slot] != b.index_k_block_t(l, blk).as<float>()[d * s.block_size + slot]) return false;
    }
  return true;
}

}  // namespace

TEST(ServerPrefixCache, ReusesTheLongestCommonPrefix) {
  PrefixCache pc(small_shape(), 1 << 20);
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto l0 = pc.acquire(a);
  EXPECT_EQ(l0.reused, 0);
  fill(*l0.cache, a, 0, 10);
  auto reference = m3::KvCache::prefix_of(*l0.cache, 10);
  pc.release(std::move(l0.cache), a);
  EXPECT_EQ(pc.entries(), 1u);

  // Same prompt again: at most prompt-1 tokens, so one is left to prefill: 9 (inside a block).
  auto l1 = pc.acquire(a);
  EXPECT_EQ(l1.reused, 9);
  EXPECT_EQ(l1.cache->length(), 9);
  EXPECT_TRUE(same_prefix(*l1.cache, *reference, 9));
  EXPECT_EQ(pc.entries(), 0u);  // the prompt extends the entry: taken over
  pc.release(std::move(l1.cache), std::vector<int32_t>(a.begin(), a.begin() + 9));

  // A prompt sharing 5 tokens reuses 5; the longer entry is copied, not taken.
  std::vector<int32_t> long_seq;
  for (int i = 0; i < 20; ++i) long_seq.push_back(100 + i);
  PrefixCache pc2(small_shape(), 1 << 20);
  auto l2 = pc2.acquire(long_seq);
  fill(*l2.cache, long_seq, 0, 20);
  pc2.release(std::move(l2.cache), long_seq);
  std::vector<int32_t> other(long_seq.begin(), long_seq.begin() + 5);
  other.push_back(7);
  other.push_back(8);
  auto l3 = pc2.acquire(other);
  EXPECT_EQ(l3.reused, 5);
  EXPECT_EQ(l3.cache->length(), 5);
  EXPECT_EQ(pc2.entries(), 1u);
  auto again = pc2.acquire(long_seq);  // the long entry is still whole
  EXPECT_EQ(again.reused, 19);

  // No common prefix: a fresh cache.
  auto l4 = pc2.acquire({999, 1, 2, 3, 4, 5});
  EXPECT_EQ(l4.reused, 0);
  EXPECT_EQ(l4.cache->length(), 0);
}

TEST(ServerPrefixCache, CopyAndTruncateAreExact) {
  std::vector<int32_t> t;
  for (int i = 0; i < 13; ++i) t.push_back(i * 7 + 1);
  m3::KvCache c(small_shape());
  fill(c, t, 0, 13);
  auto copy = m3::KvCache::prefix_of(c, 9);
  EXPECT_EQ(copy->length(), 9);
  EXPECT_TRUE(same_prefix(c, *copy, 9));
}

TEST(ServerPrefixCache, EvictsLeastRecentlyUsedBeyondBudget) {
  m3::KvCache probe(small_shape());
  probe.ensure_capacity(4);
  const uint64_t one_block = probe.bytes();
  PrefixCache pc(small_shape(), 2 * one_block);  // room for two one-block sequences
  for (int32_t s = 0; s < 3; ++s) {
    std::vector<int32_t> seq = {s * 10 + 1, s * 10 + 2, s * 10 + 3, s * 10 + 4};
    auto l = pc.acquire(seq);
    fill(*l.cache, seq, 0, 4);
    pc.release(std::move(l.cache), seq);
  }
  EXPECT_EQ(pc.entries(), 2u);
  EXPECT_LE(pc.bytes(), 2 * one_block);
  EXPECT_EQ(pc.acquire({1, 2, 3, 4, 5}).reused, 0);    // the oldest went
  EXPECT_EQ(pc.acquire({21, 22, 23, 24, 5}).reused, 4);  // the newest stayed

  PrefixCache off(small_shape(), 0);
  auto l = off.acquire({1, 2, 3, 4, 5});
  fill(*l.cache, {1, 2, 3, 4, 5}, 0, 5);
  off.release(std::move(l.cache), {1, 2, 3, 4, 5});
  EXPECT_EQ(off.entries(), 0u);
}

TEST(ServerMetrics, PrometheusText) {
  Metrics m;
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/v1/chat/completions", 400);
  m.count_request("/v1/chat/completions", 200);
  m.count_generation(100, 64, 10, 36, 0.5, 9, 0.25);
  m.set_queue(3, 1);
  const std::string t = m.render();
  EXPECT_NE(t.find("m3_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("m3_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("m3_cached_prompt_tokens_total 64\n"), std::string::npos);
  EXPECT_NE(t.find("m3_prefill_tokens_per_second 72\n"), std::string::npos);
  EXPECT_NE(t.find("m3_decode_tokens_per_second 36\n"), std::string::npos);
  EXPECT_NE(t.find("m3_queue_length 3\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE m3_prompt_tokens_total counter\n"), std::string::npos);
}

TEST(ServerMetrics, LatencyHistogramsAreWholePrometheusLines) {
  Metrics m;
  m.observe_latencies(0.0123456789123, {0.0314159265358979, 0.5, 123.456789012345678}, 7.77777777777777);
  m.observe_latencies(3000.0, {}, 9000.0);  // past every bucket: only +Inf counts it
  const std::string t = m.render();
  EXPECT_NE(t.find("vllm:time_to_first_token_seconds_bucket{le=\"0.02\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("vllm:time_to_first_token_seconds_bucket{le=\"2560\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("vllm:inter_token_latency_seconds_bucket{le=\"0.05\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("vllm:inter_token_latency_seconds_count 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("vllm:e2e_request_latency_seconds_count 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE vllm:e2e_request_latency_seconds histogram\n"), std::string::npos) << t;
  // Every sample line is "name value" or "name{labels} value": two fields, never a cut one.
  std::istringstream lines(t);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, value, extra;
    fields >> name >> value;
    EXPECT_FALSE(value.empty()) << line;
    EXPECT_FALSE(fields >> extra) << line;
  }
}

TEST(ServerMedia, Base64DecodesStandardAlphabetOnly) {
  std::string out;
  ASSERT_TRUE(m3::server::decode_base64("aGVsbG8=", out));
  EXPECT_EQ(out, "hello");
  ASSERT_TRUE(m3::server::decode_base64("aGVsbG8", out));  // padding optional
  EXPECT_EQ(out, "hello");
  ASSERT_TRUE(m3::server::decode_base64("aGVs\nbG8h", out));  // line breaks ignored
  EXPECT_EQ(out, "hello!");
  ASSERT_TRUE(m3::server::decode_base64("", out));
  EXPECT_EQ(out, "");
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(char(i));
  // "AAECAwQF..." is the standard encoding of bytes 0..255; check a few round trips by hand.
  ASSERT_TRUE(m3::server::decode_base64("AAECAw==", out));
  EXPECT_EQ(out, bytes.substr(0, 4));
  ASSERT_TRUE(m3::server::decode_base64("+/8=", out));
  EXPECT_EQ(out, std::string("\xfb\xff"));
  EXPECT_FALSE(m3::server::decode_base64("aGVs@G8=", out));  // not in the alphabet
  EXPECT_FALSE(m3::server::decode_base64("aG-s", out));      // URL-safe alphabet is not accepted
  EXPECT_FALSE(m3::server::decode_base64("aGE=bG8=", out));  // data after padding
  EXPECT_FALSE(m3::server::decode_base64("a", out));         // 6 bits cannot make a byte
}

TEST(ServerMedia, RemoteAndDisallowedSourcesAreRefused) {
  m3::server::MediaOptions o;
  auto param_of = [&](const std::string& url) {
    try {
      m3::server::read_media_bytes(url, o, "messages[0].content[1]");
    } catch (const m3::server::ApiError& e) {
      EXPECT_EQ(e.status, 400) << url;
      return e.param;
    }
    return std::string("accepted");
  };
  EXPECT_EQ(param_of("https://example.com/a.png"), "messages[0].content[1]");
  EXPECT_EQ(param_of("/etc/passwd"), "messages[0].content[1]");  // no --allowed-local-media-path
  EXPECT_EQ(param_of("data:image/png;base64,@@"), "messages[0].content[1]");
  EXPECT_EQ(m3::server::read_media_bytes("data:text/plain;base64,aGk=", o, "p"), "hi");
  o.max_bytes = 1;
  EXPECT_EQ(param_of("data:text/plain;base64,aGk="), "messages[0].content[1]");
}

TEST(ServerPrefixCache, ConversationsSharingAPrefixHoldItsPagesOnce) {
  PrefixCache pc(small_shape(), 1 << 20);
  std::vector<int32_t> a(20), b(14);
  for (int i = 0; i < 20; ++i) a[size_t(i)] = 100 + i;
  for (int i = 0; i < 14; ++i) b[size_t(i)] = i < 8 ? a[size_t(i)] : 500 + i;  // same first 2 blocks
  auto la = pc.acquire(a);
  fill(*la.cache, a, 0, 20);
  const uint64_t a_bytes = la.cache->bytes();
  pc.release(std::move(la.cache), a);

  auto lb = pc.acquire(b);
  ASSERT_EQ(lb.reused, 8);
  EXPECT_EQ(lb.cache->shared_pages(), 3 * 2);  // blocks 0-1 of 2 KV layers + 1 index layer: not copied
  fill(*lb.cache, b, 8, 14);
  EXPECT_EQ(lb.cache->shared_pages(), 3 * 2);  // writing from position 8 on left them shared
  const uint64_t b_bytes = lb.cache->bytes();
  pc.release(std::move(lb.cache), b);
  ASSERT_EQ(pc.entries(), 2u);
  // 2 blocks of every layer are held once: a block of all layers is a 5th of a's 5 blocks.
  EXPECT_EQ(pc.bytes(), a_bytes + b_bytes - 2 * a_bytes / 5);

  // a's entry is intact: reusing it reads what a wrote.
  auto again = pc.acquire(a);
  EXPECT_EQ(again.reused, 19);
  m3::KvCache expect(small_shape());
  fill(expect, a, 0, 19);
  EXPECT_TRUE(same_prefix(*again.cache, expect, 19));
}

TEST(ServerMedia, MalformedDataUrlsAreRefused) {
  // "data:,AAAA" compared at comma - 7 and threw std::out_of_range (HTTP 500).
  m3::server::MediaOptions o;
  for (const char* url : {"data:,AAAA", "data:x,AAAA", "data:", "data:,", "data:;base64", "data:base64,AAAA"}) {
    try {
      m3::server::read_media_bytes(url, o, "messages[0].content[1]");
      ADD_FAILURE() << "accepted " << url;
    } catch (const m3::server::ApiError& e) {
      EXPECT_EQ(e.status, 400) << url;
      EXPECT_EQ(e.param, "messages[0].content[1]") << url;
    }
  }
  EXPECT_EQ(m3::server::read_media_bytes("data:;base64,aGk=", o, "p"), "hi");  // an empty MIME type is fine
}

TEST(ServerMedia, OnlyRegularFilesAreReadFromTheAllowedFolder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("m3_media_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  { std::ofstream(dir / "a.png", std::ios::binary) << "bytes"; }
  ASSERT_EQ(::mkfifo((dir / "pipe.png").c_str(), 0600), 0);
  fs::create_directory(dir / "sub.png");
  m3::server::MediaOptions o;
  o.allowed_local_dir = dir.string();
  EXPECT_EQ(m3::server::read_media_bytes((dir / "a.png").string(), o, "p"), "bytes");
  // A FIFO blocked the request thread until a writer came; a folder is not a file either.
  for (const char* name : {"pipe.png", "sub.png"}) {
    try {
      m3::server::read_media_bytes((dir / name).string(), o, "messages[0].content[0]");
      ADD_FAILURE() << "read " << name;
    } catch (const m3::server::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
  }
  o.max_bytes = 2;
  EXPECT_THROW(m3::server::read_media_bytes((dir / "a.png").string(), o, "p"), m3::server::ApiError);
  fs::remove_all(dir);
}

// Reasoning and tool-call parsing of M3 output: a table of outputs -> expected OpenAI JSON, each
// also fed through the streaming path in many random chunkings (1-byte pieces, pieces that split
// the namespace marker and UTF-8 characters) with results identical to the one-shot parse, and a
// mutation test (truncations, insertions) that must never throw or emit invalid JSON.
#include <gtest/gtest.h>

#include <random>

#include "m3/error.h"
#include "m3/chat/chat_template.h"
#include "m3/chat/output_parser.h"
#include "m3/chat/tool_call_xml.h"
#include "m3/chat/utf8_stream.h"

using namespace m3;
using namespace m3::chat;

namespace {

const std::string NS = "]<]minimax[>[";
std::string open_tag(const std::string& name) { return NS + "<" + name + ">"; }
std::string close_tag(const std::string& name) { return NS + "</" + name + ">"; }
std::string param(const std::string& key, const std::string& value) { return open_tag(key) + value + close_tag(key); }
std::string invoke(const std::string& name, const std::string& params) {
  return NS + "<invoke name=\"" + name + "\">" + params + close_tag("invoke");
}
std::string block(const std::string& invokes) { return open_tag("tool_call") + "\n" + invokes + "\n" + close_tag("tool_call"); }

const Json& test_tools() {
  static const Json tools = Json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
      "city":{"type":"string"},"days":{"type":"integer"},"units":{"type":"string","enum":["c","f"]}}}}},
    {"type":"function","function":{"name":"plan_trip","parameters":{"type":"object","properties":{
      "destination":{"type":"string"},"budget":{"type":"number"},"flexible":{"type":"boolean"},
      "notes":{"type":["string","null"]},
      "stops":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"nights":{"type":"integer"}}}},
      "prefs":{"type":"object","properties":{"seat":{"type":"string"},"meals":{"type":"array","items":{"type":"string"}}}},
      "tags":{"type":"array","items":{"type":"string"}},
      "meta":{"anyOf":[{"type":"object"},{"type":"null"}]},
      "count":{"anyOf":[{"type":"integer"},{"type":"string"}]}}}}},
    {"type":"function","function":{"name":"write_file","parameters":{"type":"object","properties":{
      "path":{"type":"string"},"content":{"type":"string"}}}}}])");
  return tools;
}

OutputParserOptions options(bool starts_in_reasoning = false) {
  OutputParserOptions o;
  o.starts_in_reasoning = starts_in_reasoning;
  o.tools = test_tools();
  o.call_ids = counting_call_ids();
  return o;
}

// A comparable summary: arguments parsed, plus flags.
Json summary(const ParsedMessage& m) {
  Json calls = Json::array();
  for (const auto& c : m.tool_calls) {
    Json args = Json::parse(c.arguments, nullptr, false);
    calls.push_back(Json{{"id", c.id}, {"name", c.name}, {"arguments", args.is_discarded() ? Json("INVALID: " + c.arguments) : args},
                         {"complete", c.complete}});
  }
  return Json{{"content", m.content}, {"reasoning_content", m.reasoning_content}, {"tool_calls", calls},
              {"truncated", m.tool_call_truncated}};
}

struct Case {
  std::string name;
  std::string output;
  bool starts_in_reasoning;
  std::string expected;  // JSON; omitted keys take the defaults below
};

Json expected_of(const Case& c) {
  Json e = Json::parse(c.expected);
  Json full{{"content", ""}, {"reasoning_content", ""}, {"tool_calls", Json::array()}, {"truncated", false}};
  for (auto& [k, v] : e.items()) full[k] = v;
  int index = 0;
  for (auto& call : full["tool_calls"]) {
    if (!call.contains("id")) call["id"] = "call_" + std::to_string(index);
    if (!call.contains("complete")) call["complete"] = true;
    Json ordered{{"id", call["id"]}, {"name", call["name"]}, {"arguments", call["arguments"]}, {"complete", call["complete"]}};
    call = ordered;
    ++index;
  }
  return full;
}

std::vector<Case> cases() {
  const std::string weather = invoke("get_weather", param("city", "Paris") + param("days", "3"));
  return {
      {"plain", "Hello, world!", false, R"({"content":"Hello, world!"})"},
      {"reasoning_then_content", "<mm:think>Add 2 and 2.</mm:think>It is 4.", false,
       R"({"content":"It is 4.","reasoning_content":"Add 2 and 2."})"},
      {"enabled_starts_in_reasoning", "Think\nmore.</mm:think>\n\nAnswer", true,
       R"({"content":"\n\nAnswer","reasoning_content":"Think\nmore."})"},
      {"enabled_redundant_opener", "<mm:think>R</mm:think>C", true, R"({"content":"C","reasoning_content":"R"})"},
      {"stray_leading_closer", "</mm:think>Hi</mm:think>there", false, R"({"content":"Hi</mm:think>there"})"},
      {"late_opener_is_content", "Hi <mm:think>x</mm:think>", false, R"({"content":"Hi <mm:think>x</mm:think>"})"},
      {"unterminated_reasoning", "<mm:think>still going", false, R"({"reasoning_content":"still going"})"},
      {"marker_prefix_only", "<mm:th", false, R"({"content":"<mm:th"})"},
      {"text_before_call", "Let me check." + block(weather), false,
       R"({"content":"Let me check.","tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","days":3}}]})"},
      {"reasoning_then_call", "<mm:think>Need weather.</mm:think>" + block(weather), false,
       R"({"reasoning_content":"Need weather.","tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","days":3}}]})"},
      {"nested_objects_arrays_types",
       block(invoke("plan_trip",
                    param("destination", "Zürich 🇨🇭") + param("budget", "1200.50") + param("flexible", "True") +
                        param("notes", "null") +
                        param("stops", param("item", param("name", "Bern") + param("nights", "2")) +
                                           param("item", param("name", "Genève") + param("nights", "1"))) +
                        param("prefs", param("seat", "window") + param("meals", param("item", "veg") + param("item", "1"))) +
                        param("tags", param("item", "a")) + param("meta", "") + param("count", "7"))),
       false,
       R"({"tool_calls":[{"name":"plan_trip","arguments":{"destination":"Zürich 🇨🇭","budget":1200.5,"flexible":true,
          "notes":null,"stops":[{"name":"Bern","nights":2},{"name":"Genève","nights":1}],
          "prefs":{"seat":"window","meals":["veg","1"]},"tags":["a"],"meta":{},"count":7}}]})"},
      {"json_fallbacks",
       block(invoke("plan_trip", param("stops", R"([{"name":"X","nights":"4"}])") + param("meta", R"({"k":[1,2]})") +
                                     param("budget", "cheap") + param("tags", "[]") + param("count", "many"))),
       false,
       R"({"tool_calls":[{"name":"plan_trip","arguments":{"stops":[{"name":"X","nights":"4"}],"meta":{"k":[1,2]},
          "budget":"cheap","tags":[],"count":"many"}}]})"},
      {"unknown_tool_uses_json_then_text",
       block(invoke("mystery", param("n", " 42 ") + param("list", "[1, true]") + param("s", "hello there") +
                                   param("obj", param("a", "1") + param("b", "x")) +
                                   param("arr", param("item", "1") + param("item", "two")) + param("nul", "null"))),
       false,
       R"({"tool_calls":[{"name":"mystery","arguments":{"n":42,"list":[1,true],"s":"hello there","obj":{"a":1,"b":"x"},
          "arr":[1,"two"],"nul":null}}]})"},
      {"string_params_are_verbatim",
       block(invoke("write_file", param("path", "42") + param("content", "\n<b>bold</b> & \"q\" \\ ]<]mini\n" + open_tag("x") + "\n"))),
       false,
       R"({"tool_calls":[{"name":"write_file","arguments":{"path":"42","content":"\n<b>bold</b> & \"q\" \\ ]<]mini\n]<]minimax[>[<x>\n"}}]})"},
      {"several_invokes_and_whitespace",
       "Doing two things.\n" + open_tag("tool_call") + "\n  " + NS + " <invoke name=\"get_weather\">\n  " +
           param("city", "Oslo") + "\n  " + NS + "\t<days>\n5\n" + close_tag("days") + "\n" + close_tag("invoke") +
           "\n" + invoke("write_file", param("path", "/tmp/a") + param("content", "")) + "\n" + close_tag("tool_call"),
       false,
       R"({"content":"Doing two things.\n","tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo","days":5}},
          {"name":"write_file","arguments":{"path":"/tmp/a","content":""}}]})"},
      {"text_after_block", block(invoke("get_weather", "")) + "\nDone.", false,
       R"({"content":"\nDone.","tool_calls":[{"name":"get_weather","arguments":{}}]})"},
      {"duplicate_keys_first_wins", block(invoke("get_weather", param("days", "1") + param("days", "2") + param("city", "A") + param("city", "B"))),
       false, R"({"tool_calls":[{"name":"get_weather","arguments":{"days":1,"city":"A"}}]})"},
      {"self_closing_param", block(invoke("mystery", NS + "<flag/>" + param("x", "1"))), false,
       R"({"tool_calls":[{"name":"mystery","arguments":{"flag":"","x":1}}]})"},
      {"namespace_without_trigger_is_content", "a ]<]minimax[>[ b " + NS + "<invoke name=\"f\">", false,
       R"({"content":"a ]<]minimax[>[ b ]<]minimax[>[<invoke name=\"f\">"})"},
      {"empty_block_is_content", "x" + block(""), false, R"({"content":"x]<]minimax[>[<tool_call>\n\n]<]minimax[>[</tool_call>"})"},
      {"truncated_in_trigger", "Sure " + NS + "<tool_", false, R"({"content":"Sure ]<]minimax[>[<tool_"})"},
      {"truncated_before_invoke", "Sure " + open_tag("tool_call") + "\n" + NS + "<inv", false,
       R"({"content":"Sure ]<]minimax[>[<tool_call>\n]<]minimax[>[<inv","truncated":true})"},
      {"truncated_in_param",
       open_tag("tool_call") + "\n" +
           invoke("get_weather", param("city", "Rome")) + "\n" + NS + "<invoke name=\"plan_trip\">" +
           param("budget", "10") + open_tag("stops") + open_tag("item") + "par",
       false,
       R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Rome"}},
          {"name":"plan_trip","arguments":{"budget":10},"complete":false}],"truncated":true})"},
      {"truncated_in_string_param", open_tag("tool_call") + NS + "<invoke name=\"write_file\">" + param("path", "p") +
                                        open_tag("content") + "line 1\nli",
       false,
       R"({"tool_calls":[{"name":"write_file","arguments":{"path":"p","content":"line 1\nli"},"complete":false}],"truncated":true})"},
      {"truncated_after_invoke", open_tag("tool_call") + invoke("get_weather", param("days", "2")), false,
       R"({"tool_calls":[{"name":"get_weather","arguments":{"days":2}}],"truncated":true})"},
      {"forgotten_param_close", block(NS + "<invoke name=\"get_weather\">" + open_tag("city") + "Lima" + close_tag("invoke")), false,
       R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Lima"}}]})"},
      {"unicode_and_invalid_utf8", "caf\xC3\xA9 \xF0\x9F\x98\x80 bad\xFF\xC3(", false,
       R"({"content":"café 😀 bad\ufffd\ufffd("})"},
  };
}

// Feeds `text` in pieces whose sizes come from `sizes` (cycled) and collects every delta.
struct StreamResult {
  ParsedMessage assembled;  // built from the deltas, independently of the parser's own record
  ParsedMessage recorded;
  std::vector<ChatDelta> deltas;
};

StreamResult stream(const std::string& text, const OutputParserOptions& opts, const std::vector<size_t>& sizes) {
  OutputParser p(opts);
  StreamResult r;
  size_t pos = 0, k = 0;
  while (pos < text.size()) {
    const size_t n = std::min(sizes[k++ % sizes.size()], text.size() - pos);
    for (auto& d : p.push(std::string_view(text).substr(pos, n))) r.deltas.push_back(std::move(d));
    pos += n;
  }
  for (auto& d : p.finish()) r.deltas.push_back(std::move(d));
  for (const auto& d : r.deltas) r.assembled.apply(d);
  r.assembled.tool_call_truncated = p.message().tool_call_truncated;
  for (size_t i = 0; i < r.assembled.tool_calls.size() && i < p.message().tool_calls.size(); ++i)
    r.assembled.tool_calls[i].complete = p.message().tool_calls[i].complete;
  r.recorded = p.message();
  return r;
}

// Every delta must serialise as strict JSON (valid UTF-8) and have one kind of payload; a call's
// id and name come before its argument fragments.
void check_deltas(const std::vector<ChatDelta>& deltas, const std::string& label) {
  std::vector<bool> started;
  for (const auto& d : deltas) {
    EXPECT_NO_THROW((void)d.to_json().dump()) << label;
    const int kinds = !d.content.empty() + !d.reasoning_content.empty() + !d.tool_calls.empty();
    EXPECT_EQ(kinds, 1) << label;
    for (const auto& t : d.tool_calls) {
      if (t.index >= static_cast<int>(started.size())) started.resize(t.index + 1, false);
      if (!t.name.empty()) {
        EXPECT_FALSE(started[t.index]) << label << ": call " << t.index << " started twice";
        EXPECT_FALSE(t.id.empty()) << label;
        started[t.index] = true;
      } else {
        EXPECT_TRUE(started[t.index]) << label << ": arguments before the name of call " << t.index;
      }
    }
  }
}

std::vector<std::vector<size_t>> chunkings(uint32_t seeds) {
  std::vector<std::vector<size_t>> out{{1}, {2}, {3}, {7}, {13}, {NS.size() - 1}, {1 << 20}};
  for (uint32_t seed = 0; seed < seeds; ++seed) {
    std::mt19937 rng(seed);
    std::vector<size_t> sizes(64);
    for (auto& s : sizes) s = 1 + rng() % (seed % 3 == 0 ? 4 : 24);
    out.push_back(sizes);
  }
  return out;
}

}  // namespace

TEST(OutputParser, TableOneShot) {
  for (const Case& c : cases()) {
    const ParsedMessage m = parse_output(c.output, options(c.starts_in_reasoning));
    EXPECT_EQ(summary(m).dump(), expected_of(c).dump()) << c.name;
    for (const auto& call : m.tool_calls) {
      // Compact, in the order written: the text is the canonical dump of its own parse.
      EXPECT_EQ(Json::parse(call.arguments).dump(), call.arguments) << c.name;
    }
  }
}

TEST(OutputParser, TableStreamingMatchesOneShotInEveryChunking) {
  for (const Case& c : cases()) {
    const Json one_shot = summary(parse_output(c.output, options(c.starts_in_reasoning)));
    for (const auto& sizes : chunkings(40)) {
      const std::string label = c.name + " piece sizes from " + std::to_string(sizes[0]);
      const StreamResult r = stream(c.output, options(c.starts_in_reasoning), sizes);
      EXPECT_EQ(summary(r.assembled).dump(), one_shot.dump()) << label;
      EXPECT_EQ(summary(r.recorded).dump(), one_shot.dump()) << label;
      check_deltas(r.deltas, label);
    }
  }
}

TEST(OutputParser, DeltasAreOpenAiShaped) {
  OutputParser p(options());
  std::vector<Json> chunks;
  const std::string out = "<mm:think>hm</mm:think>Ok." + block(invoke("get_weather", param("city", "Paris") + param("days", "3")));
  for (char ch : out)
    for (const auto& d : p.push(std::string(1, ch))) chunks.push_back(d.to_json());
  for (const auto& d : p.finish()) chunks.push_back(d.to_json());
  std::string reasoning, content, args;
  int starts = 0;
  for (const Json& j : chunks) {
    if (j.contains("reasoning_content")) reasoning += j["reasoning_content"].get<std::string>();
    if (j.contains("content")) content += j["content"].get<std::string>();
    if (j.contains("tool_calls")) {
      for (const Json& t : j["tool_calls"]) {
        EXPECT_EQ(t["index"], 0);
        if (t.contains("id")) {
          ++starts;
          EXPECT_EQ(t["id"], "call_0");
          EXPECT_EQ(t["type"], "function");
          EXPECT_EQ(t["function"]["name"], "get_weather");
          EXPECT_TRUE(args.empty());
        }
        args += t["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(reasoning, "hm");
  EXPECT_EQ(content, "Ok.");
  EXPECT_EQ(args, R"({"city":"Paris","days":3})");
  // The string parameter streams as it arrives, before its closing tag.
  OutputParser q(options());
  q.push(open_tag("tool_call") + NS + "<invoke name=\"write_file\">" + open_tag("content") + "abc");
  const auto mid = q.push("def");
  ASSERT_EQ(mid.size(), 1u);
  ASSERT_EQ(mid[0].tool_calls.size(), 1u);
  EXPECT_EQ(mid[0].tool_calls[0].arguments, "def");
  // The final message.
  const Json msg = p.message().to_json();
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["content"], "Ok.");
  EXPECT_EQ(msg["reasoning_content"], "hm");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris","days":3})");
  EXPECT_TRUE(parse_output(block(invoke("get_weather", "")), options()).to_json()["content"].is_null());
}

TEST(OutputParser, PartialTriggerIsHeldBackNotLeaked) {
  OutputParser p(options());
  auto d1 = p.push("Hello ]<]mini");
  ASSERT_EQ(d1.size(), 1u);
  EXPECT_EQ(d1[0].content, "Hello ");
  EXPECT_TRUE(p.push("max[>[ ").empty());
  EXPECT_TRUE(p.push("<tool_c").empty());
  auto d2 = p.push("all>\n" + NS + "<invoke name=\"get_weather\">");
  ASSERT_EQ(d2.size(), 1u);
  ASSERT_EQ(d2[0].tool_calls.size(), 1u);
  EXPECT_EQ(d2[0].tool_calls[0].name, "get_weather");
  // A held prefix that turns out not to be the trigger is released as content.
  OutputParser q(options());
  EXPECT_EQ(q.push("a ]<]minimax[>[<tool").at(0).content, "a ");
  EXPECT_EQ(q.push("box>").at(0).content, "]<]minimax[>[<toolbox>");
  // And the reasoning closer likewise.
  OutputParser r(options(true));
  EXPECT_EQ(r.push("why</mm:th").at(0).reasoning_content, "why");
  EXPECT_EQ(r.push("ink>so").at(0).content, "so");
}

TEST(OutputParser, DisabledParsingLeavesTextAlone) {
  OutputParserOptions o = options();
  o.parse_tool_calls = false;
  o.parse_reasoning = false;
  const std::string out = "<mm:think>r</mm:think>" + block(invoke("get_weather", param("city", "X")));
  const ParsedMessage m = parse_output(out, o);
  EXPECT_EQ(m.content, out);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_THROW(
      {
        OutputParser p(options());
        p.finish();
        p.push("x");
      },
      Error);
}

TEST(OutputParser, RandomCallIdsLookLikeOpenAi) {
  auto gen = random_call_ids();
  const std::string a = gen(), b = gen();
  EXPECT_EQ(a.rfind("call_", 0), 0u);
  EXPECT_EQ(a.size(), 29u);
  EXPECT_NE(a, b);
}

TEST(Utf8Stream, HoldsSplitCharactersAndReplacesInvalidBytes) {
  Utf8Stream u;
  EXPECT_EQ(u.push("a\xE2\x82"), "a");
  EXPECT_EQ(u.push("\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(u.push("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: 3 ill-formed bytes
  EXPECT_EQ(u.push("\xF0\x9F"), "");
  EXPECT_EQ(u.push("x"), "\xEF\xBF\xBDx");
  EXPECT_EQ(u.push("\xC3"), "");
  EXPECT_EQ(u.flush(), "\xEF\xBF\xBD");
}

// Rendering a reply that was parsed from the model's output reproduces exactly the text the
// model generated, in every thinking mode (so the next turn's prompt extends the cached prefix).
TEST(OutputParser, ParsedReplyRendersBackToTheGeneratedText) {
  const Json history = Json::parse(R"([{"role":"user","content":"Weather in Paris?"}])");
  const std::string call = block(invoke("get_weather", param("city", "Paris") + param("days", "3")));
  struct Gen {
    ThinkingMode mode;
    std::string output;
  };
  const std::vector<Gen> gens = {
      {ThinkingMode::Enabled, "Look it up.</mm:think>Checking." + call},
      {ThinkingMode::Disabled, "It is sunny."},
      {ThinkingMode::Adaptive, "<mm:think>Easy.</mm:think>\n" + call},
      {ThinkingMode::Adaptive, "</mm:think>Sunny, 20°C."},
  };
  for (const Gen& g : gens) {
    ChatTemplateOptions opts;
    opts.thinking_mode = g.mode;
    const RenderedPrompt prompt = render_chat(history, test_tools(), opts);
    const ParsedMessage reply = parse_output(g.output, options(prompt.opens_reasoning));
    Json next = history;
    next.push_back(reply.to_json());
    opts.add_generation_prompt = false;
    EXPECT_EQ(render_chat(next, test_tools(), opts).text(), prompt.text() + g.output + "[e~[\n") << g.output;
  }
}

// Random damage to real outputs: the parser must neither throw nor crash nor emit invalid JSON,
// and streaming must still agree with one-shot parsing.
TEST(OutputParser, MutationsNeverBreakTheParser) {
  const std::vector<std::string> fragments = {NS, "<", "</", ">", "/>", "<invoke name=\"", "\"", "<tool_call>",
                                              "</tool_call>", "</invoke>", "<item>", "<mm:think>", "</mm:think>",
                                              "\xFF", "\xE2\x82", "\xF0\x9F\x98", "\n", " ", "{", "]", "null", "1e999"};
  std::vector<Case> base = cases();
  std::mt19937 rng(1234);
  int checked = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const Case& c = base[rng() % base.size()];
    std::string s = c.output;
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits; ++e) {
      const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
      switch (rng() % 4) {
        case 0: s.resize(at); break;                                      // truncate
        case 1: s.insert(at, fragments[rng() % fragments.size()]); break;  // insert markup
        case 2: s.insert(at, 1, static_cast<char>(rng() % 256)); break;   // insert a byte
        case 3: s.erase(at, rng() % 8); break;                            // delete a few bytes
      }
    }
    try {
      const ParsedMessage one = parse_output(s, options(c.starts_in_reasoning));
      for (const auto& call : one.tool_calls) {
        const Json args = Json::parse(call.arguments, nullptr, false);
        EXPECT_TRUE(args.is_object()) << call.arguments;
      }
      EXPECT_NO_THROW((void)one.to_json().dump());
      std::vector<size_t> sizes(16);
      for (auto& n : sizes) n = 1 + rng() % 6;
      const StreamResult r = stream(s, options(c.starts_in_reasoning), sizes);
      EXPECT_EQ(summary(r.assembled).dump(), summary(one).dump());
      check_deltas(r.deltas, "mutation");
      ++checked;
    } catch (const Error&) {
      ++checked;  // an m3::Error is an allowed outcome (none is expected today)
    }
  }
  EXPECT_EQ(checked, 1500);
}

// Random sentences over the format's own vocabulary reach state combinations that damaged real
// outputs rarely do (nested invokes, closers in the wrong place, markers inside values).
TEST(OutputParser, GrammarFuzzNeverBreaksTheParser) {
  const std::vector<std::string> tags = {
      "<tool_call>", "</tool_call>", "<invoke name=\"get_weather\">", "<invoke name='plan_trip'>",
      "<invoke name=\"write_file\">", "<invoke>", "</invoke>", "<city>", "</city>", "<days>", "</days>", "<stops>",
      "</stops>", "<item>", "</item>", "<content>", "</content>", "<name>", "</name>", "<meta/>", "<x", "</"};
  const std::vector<std::string> words = {"<mm:think>", "</mm:think>", "12", "true", "null", "[1,", "{\"a\":", "\"", "é",
                                          "😀", "\xF0\x9F", "\xFF", "\n", "  ", "text", ">", "<", NS, "]<]mini"};
  std::mt19937 rng(99);
  int with_calls = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = rng() % 2 ? NS + "<tool_call>" : "";
    const int n = 1 + rng() % 40;
    for (int i = 0; i < n; ++i) {
      if (rng() % 3) {
        s += (rng() % 8 ? NS : rng() % 2 ? NS + " " : "") + tags[rng() % tags.size()];
      } else {
        s += words[rng() % words.size()];
      }
    }
    const bool in_reasoning = rng() % 4 == 0;
    ParsedMessage one;
    ASSERT_NO_THROW(one = parse_output(s, options(in_reasoning))) << s;
    for (const auto& call : one.tool_calls) {
      EXPECT_TRUE(Json::parse(call.arguments, nullptr, false).is_object()) << s;
      EXPECT_FALSE(call.name.empty());
    }
    std::vector<size_t> sizes(8);
    for (auto& k : sizes) k = 1 + rng() % 5;
    const StreamResult r = stream(s, options(in_reasoning), sizes);
    ASSERT_EQ(summary(r.assembled).dump(), summary(one).dump()) << s;
    check_deltas(r.deltas, "grammar fuzz");
    with_calls += !one.tool_calls.empty();
  }
  EXPECT_GT(with_calls, 1000);  // the sentences do reach the tool-call states
}

// Deep nesting from a runaway model must not recurse without bound (stack) nor be held forever.
TEST(OutputParser, DeepNestingAndLongGarbageStayBounded) {
  std::string nested;
  for (int i = 0; i < 20000; ++i) nested += open_tag("a");
  const std::string deep_json(100000, '[');
  const std::string out = block(invoke("mystery", param("x", nested) + param("y", deep_json) + param("z", "1"))) +
                          NS + "<" + std::string(5000, 'n') + " tail";
  const ParsedMessage m = parse_output(out, options());
  ASSERT_EQ(m.tool_calls.size(), 1u);
  const Json args = Json::parse(m.tool_calls[0].arguments);
  EXPECT_EQ(args["y"], deep_json);  // too deep to be taken as JSON: kept as text
  EXPECT_EQ(args["z"], 1);
  EXPECT_EQ(m.content.substr(m.content.size() - 5), " tail");  // an endless "tag" is released as text
}
